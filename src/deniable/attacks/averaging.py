"""The averaging attack: ask the same count again and again until the noise averages out.

The attacker knows the target's birth date, which nobody else shares, and asks "how many
people born on that day code with Notepad?" — the true answer is the target's secret bit.
After every answer it updates its Bayesian posterior on the bit (prior ``p``), knowing the
mechanism exactly (:mod:`deniable.attacks.inference`).

* Against the unsafe fresh-noise system every answer is new evidence: the posterior goes to
  the truth (the lecture's averaging attack).
* Against the unsafe sticky-noise system a repeat returns the same answer: no progress
  (the differencing attack shows how rewrites get around it).
* Against deniable, a repeat is a free replay from the answer cache (no new information);
  semantically equivalent rewrites (``… AND id <> -1``) are new queries and are charged,
  until the budget refuses. Each answer is a count the bit moves by at most one, so its
  likelihood ratio is at most ``e^ε``, and the posterior after ``ε`` charged in total stays
  inside :func:`~deniable.explain.posterior.posterior_bounds` at that ``ε`` (for a bit
  replaced in one row, i.e. two add/remove neighbours, the general promise is ``2ε``; these
  counts give ``ε``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from deniable.attacks.common import (
    DENIABLE,
    PosteriorRun,
    Step,
    StopReason,
    ask,
    deniable_session,
    exact,
)
from deniable.attacks.data import Population, population
from deniable.attacks.inference import log_likelihood, logit, posterior_from_log_odds
from deniable.attacks.naive import (
    UnsafeExactSystem,
    UnsafeFreshNoiseSystem,
    UnsafeQuerySystem,
    UnsafeStickyNoiseSystem,
)
from deniable.curator import Session
from deniable.errors import InvalidParameter
from deniable.explain.posterior import posterior_bounds
from deniable.noise.testing import SeededRandom

AveragingRun = PosteriorRun
"""One system under the averaging attack (see :class:`~deniable.attacks.common.PosteriorRun`)."""


@dataclass(frozen=True)
class AveragingReport:
    """What the averaging attack learned from each system.

    Attributes:
        prior: the attacker's prior that the secret is 1.
        truth: the target's real bit.
        query: the repeated question.
        runs: one per system, the unsafe baselines first.
        attack: the attack's name.
    """

    prior: float
    truth: int
    query: str
    runs: tuple[AveragingRun, ...]
    attack: str = field(default="averaging")

    def text(self) -> str:
        """A readable account of the attack (see :mod:`deniable.attacks.report`)."""
        from deniable.attacks.report import render

        return render(self)


def _query(pop: Population, rewrite: int = 0) -> str:
    base = (
        "SELECT COUNT(*) AS n FROM people "
        f"WHERE birth_date = '{pop.target_birth_date}' AND notepad = 1"
    )
    return base if rewrite == 0 else f"{base} AND id <> {-rewrite}"


def _naive_run(system: UnsafeQuerySystem, pop: Population, prior: float, n: int) -> AveragingRun:
    """Ask the same query ``n`` times; the attacker ignores a repeat of a sticky system."""
    log_odds = logit(prior)
    steps = []
    sql = _query(pop)
    for i in range(n):
        y = system.count(sql)
        if i == 0 or not system.sticky:
            log_odds += float(
                log_likelihood(y, 1, system.noise_scale) - log_likelihood(y, 0, system.noise_scale)
            )
        steps.append(Step(sql, y, posterior=posterior_from_log_odds(log_odds)))
    post = posterior_from_log_odds(log_odds)
    return AveragingRun(system.name, False, tuple(steps), post, int(post >= 0.5))


def run_averaging(
    *,
    n: int = 200,
    queries: int = 1000,
    scale: float = 2.0,
    budget: float | Fraction = 1,
    epsilon: float | Fraction = Fraction(1, 10),
    repeats: int = 20,
    max_rewrites: int = 1000,
    prior: float = 0.5,
    seed: int = 0,
    target_secret: int | None = 1,
) -> AveragingReport:
    """Run the averaging attack on the unsafe systems and on a deniable session.

    Args:
        n: people in the synthetic table.
        queries: how many times the unsafe systems are asked.
        scale: the unsafe systems' noise scale ``b`` (each answer alone is ``1/b``-DP).
        budget: deniable's total ε.
        epsilon: ε the attacker spends per deniable query.
        repeats: how many times the attacker repeats the identical query to deniable.
        max_rewrites: most rewrites the attacker tries once repeats stop helping.
        prior: the attacker's prior that the bit is 1.
        seed: seed of the synthetic data and of the unsafe systems' noise.
        target_secret: the target's bit (None: drawn).

    Returns:
        The :class:`AveragingReport`. Spends ``budget`` of a throwaway deniable session.
    """
    if not 0 < prior < 1:
        raise InvalidParameter("prior must be in (0, 1)")
    if queries < 1 or repeats < 1 or max_rewrites < 0:
        raise InvalidParameter("queries and repeats must be ≥ 1, max_rewrites ≥ 0")
    eps = exact(epsilon, "epsilon")
    pop = population(n, seed=seed, target_secret=target_secret)
    tables = {"people": pop.frame}
    runs = []
    for system in (
        UnsafeExactSystem(tables),
        UnsafeFreshNoiseSystem(tables, scale=scale, source=SeededRandom(seed + 1)),
        UnsafeStickyNoiseSystem(tables, scale=scale, seed=seed + 2),
    ):
        try:
            runs.append(_naive_run(system, pop, prior, 1 if system.noise_scale == 0 else queries))
        finally:
            system.close()
    with deniable_session(budget, tables) as session:
        runs.append(_deniable_run(session, pop, prior, eps, repeats, max_rewrites))
    return AveragingReport(prior, pop.secret, _query(pop), tuple(runs))


def _deniable_run(
    session: Session, pop: Population, prior: float, eps: Fraction, repeats: int, rewrites: int
) -> AveragingRun:
    log_odds = logit(prior)
    steps: list[Step] = []
    spent = Fraction(0)
    stopped: StopReason | None = None
    texts = [_query(pop)] * repeats + [_query(pop, j) for j in range(1, rewrites + 1)]
    for sql in texts:
        out = ask(session, sql, epsilon=eps)
        if out.answer is None:
            stopped = out.stopped
            steps.append(Step(sql, None, stopped=stopped, posterior=steps[-1].posterior))
            break
        y = float(out.answer["n"].iloc[0])
        if not out.cached:  # a replay is a function of an earlier answer: no new evidence
            scale = 1 / float(out.cost)
            log_odds += float(log_likelihood(y, 1, scale) - log_likelihood(y, 0, scale))
        spent += out.cost
        steps.append(
            Step(sql, y, float(out.cost), out.cached, posterior=posterior_from_log_odds(log_odds))
        )
    post = posterior_from_log_odds(log_odds)
    return AveragingRun(
        DENIABLE,
        True,
        tuple(steps),
        post,
        int(post >= 0.5),
        epsilon_spent=float(spent),
        bound=posterior_bounds(prior, spent),
        stopped_by=stopped,
        cached=sum(s.cached for s in steps),
        charged=sum(1 for s in steps if s.answer is not None and not s.cached),
    )

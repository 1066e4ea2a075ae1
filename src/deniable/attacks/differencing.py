"""The differencing attack: count(all) − count(all but the target) reveals the target.

The attacker asks "how many people code with Notepad?" and "how many people *not born on the
target's birthday* code with Notepad?"; the difference is the target's bit. It does not know
how many other people code with Notepad (a flat prior over ``0..n``), and its posterior on
the bit marginalises that unknown count out (:class:`_DifferencePosterior`).

* The unsafe exact system answers both exactly: the bit is revealed.
* The unsafe sticky-noise system gives the same noise to the same text, so repeating the
  pair does not help — but ``… AND id <> -1``, ``… AND id <> -2`` … are semantically the
  same questions with fresh noise, and averaging many such rewrites reveals the bit.
* Deniable charges every distinct question (a repeat is a free replay) and refuses once the
  budget is spent; every answer's likelihood ratio for the bit is at most ``e^ε`` whatever
  the other people's count, so the posterior stays within the bounds at the charged ε.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

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
from deniable.attacks.inference import log_likelihood, posterior_from_log_odds
from deniable.attacks.naive import UnsafeExactSystem, UnsafeQuerySystem, UnsafeStickyNoiseSystem
from deniable.curator import Session
from deniable.errors import InvalidParameter
from deniable.explain.posterior import posterior_bounds

DifferencingRun = PosteriorRun
"""One system under the differencing attack (see :class:`~deniable.attacks.common.PosteriorRun`)."""


@dataclass(frozen=True)
class DifferencingReport:
    """What the differencing attack learned from each system.

    Attributes:
        prior: the attacker's prior that the bit is 1.
        truth: the target's real bit.
        queries: the two base questions (all, all but the target).
        runs: the runs, unsafe baselines first.
        attack: the attack's name.
    """

    prior: float
    truth: int
    queries: tuple[str, str]
    runs: tuple[DifferencingRun, ...]
    attack: str = field(default="differencing")

    def text(self) -> str:
        """A readable account of the attack."""
        from deniable.attacks.report import render

        return render(self)


class _DifferencePosterior:
    """Posterior on the bit ``s`` from answers to ``c + s`` ("all") and ``c`` ("all but").

    ``c`` (the others' count) has a flat prior on ``0..n``; per hypothesis ``s`` the log
    likelihood of everything seen is kept for every ``c``, and marginalised on demand.
    """

    def __init__(self, n: int, prior: float) -> None:
        self._c = np.arange(n + 1, dtype=float)
        self._acc = {0: np.zeros(n + 1), 1: np.zeros(n + 1)}
        self._log_prior = {0: float(np.log1p(-prior)), 1: float(np.log(prior))}

    def add(self, y: float, *, includes_target: bool, scale: float, clamped: bool) -> None:
        for s in (0, 1):
            true = self._c + (s if includes_target else 0)
            self._acc[s] = self._acc[s] + log_likelihood(y, true, scale, clamped=clamped)

    def posterior(self) -> float:
        with np.errstate(divide="ignore"):
            marg = {
                s: float(np.logaddexp.reduce(self._acc[s])) + self._log_prior[s] for s in (0, 1)
            }
        if marg[1] == -np.inf:
            return 0.0
        if marg[0] == -np.inf:
            return 1.0
        return posterior_from_log_odds(marg[1] - marg[0])


def _queries(pop: Population, rewrite: int = 0) -> tuple[str, str]:
    tail = "" if rewrite == 0 else f" AND id <> {-rewrite}"
    everyone = f"SELECT COUNT(*) AS n FROM people WHERE notepad = 1{tail}"
    but = (
        "SELECT COUNT(*) AS n FROM people WHERE notepad = 1 "
        f"AND birth_date <> '{pop.target_birth_date}'{tail}"
    )
    return everyone, but


def _naive_run(
    system: UnsafeQuerySystem, pop: Population, prior: float, pairs: list[tuple[str, str]], how: str
) -> DifferencingRun:
    belief = _DifferencePosterior(len(pop.frame), prior)
    seen: set[str] = set()
    steps = []
    for pair in pairs:
        for includes, sql in zip((True, False), pair, strict=True):
            y = system.count(sql)
            if sql not in seen or not system.sticky:  # a sticky repeat carries nothing new
                belief.add(y, includes_target=includes, scale=system.noise_scale, clamped=False)
                seen.add(sql)
            steps.append(Step(sql, y, posterior=belief.posterior()))
    post = belief.posterior()
    return DifferencingRun(f"{system.name} ({how})", False, tuple(steps), post, int(post >= 0.5))


def run_differencing(
    *,
    n: int = 200,
    scale: float = 2.0,
    repeats: int = 50,
    rewrites: int = 400,
    budget: float | Fraction = 1,
    epsilon: float | Fraction = Fraction(1, 10),
    prior: float = 0.5,
    seed: int = 0,
    target_secret: int | None = 1,
) -> DifferencingReport:
    """Run the differencing attack on the unsafe systems and on a deniable session.

    Args:
        n: people in the synthetic table.
        scale: the sticky system's noise scale ``b``.
        repeats: how many times the attacker repeats the identical pair.
        rewrites: how many rewritten pairs it asks after that.
        budget: deniable's total ε.
        epsilon: ε per deniable query.
        prior: the attacker's prior that the bit is 1.
        seed: seed of the synthetic data and of the sticky noise.
        target_secret: the target's bit (None: drawn).

    Returns:
        The :class:`DifferencingReport`. Spends ``budget`` of a throwaway deniable session.
    """
    if not 0 < prior < 1:
        raise InvalidParameter("prior must be in (0, 1)")
    if repeats < 1 or rewrites < 0:
        raise InvalidParameter("repeats must be ≥ 1 and rewrites ≥ 0")
    eps = exact(epsilon, "epsilon")
    pop = population(n, seed=seed, target_secret=target_secret)
    tables = {"people": pop.frame}
    base = _queries(pop)
    rewritten = [_queries(pop, j) for j in range(1, rewrites + 1)]
    runs = []
    exact_system = UnsafeExactSystem(tables)
    try:
        runs.append(_naive_run(exact_system, pop, prior, [base], "WHERE clauses"))
    finally:
        exact_system.close()
    sticky = UnsafeStickyNoiseSystem(tables, scale=scale, seed=seed + 2)
    try:
        runs.append(_naive_run(sticky, pop, prior, [base] * repeats, "the same pair repeated"))
        runs.append(_naive_run(sticky, pop, prior, [base, *rewritten], "equivalent rewrites"))
    finally:
        sticky.close()
    with deniable_session(budget, tables) as session:
        runs.append(_deniable_run(session, pop, prior, eps, [base] * repeats + rewritten))
    return DifferencingReport(prior, pop.secret, base, tuple(runs))


def _deniable_run(
    session: Session,
    pop: Population,
    prior: float,
    eps: Fraction,
    pairs: list[tuple[str, str]],
) -> DifferencingRun:
    belief = _DifferencePosterior(len(pop.frame), prior)
    steps: list[Step] = []
    spent = Fraction(0)
    stopped: StopReason | None = None
    for pair in pairs:
        for includes, sql in zip((True, False), pair, strict=True):
            out = ask(session, sql, epsilon=eps)
            if out.answer is None:
                stopped = out.stopped
                steps.append(Step(sql, None, stopped=stopped, posterior=belief.posterior()))
                break
            y = float(out.answer["n"].iloc[0])
            if not out.cached:
                belief.add(y, includes_target=includes, scale=1 / float(out.cost), clamped=False)
            spent += out.cost
            steps.append(Step(sql, y, float(out.cost), out.cached, posterior=belief.posterior()))
        if stopped is not None:
            break
    post = belief.posterior()
    return DifferencingRun(
        f"{DENIABLE} (repeats, then equivalent rewrites)",
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

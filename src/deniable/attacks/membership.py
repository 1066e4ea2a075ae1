"""Membership inference on a released histogram, bounded by the posterior formula.

Each of ``T`` independent trials is a small clinic's visits table: ``size`` people with
common diagnoses, plus — in a random half of the trials — the target, the only person with a
rare diagnosis. The attacker sees the released histogram of diagnoses of a trial and guesses
whether the target is in it (prior ``p``). Its success rate is compared with the largest
success any attacker can have after an ε-DP release, ``max(high, 1 − low)`` from
:func:`~deniable.explain.posterior.posterior_bounds` (``e^ε/(1 + e^ε)`` at ``p = 1/2``).

* The unsafe exact system's histogram shows the rare diagnosis iff the target is there:
  success 100%.
* The unsafe fresh-noise system answers the same histogram again and again; averaging the
  rare cell's noisy counts recovers membership.
* Deniable releases all ``T`` trials' histograms in one ``GROUP BY trial, diagnosis`` query
  over public keys: every trial's people are disjoint, so by parallel composition each
  trial's histogram is an ε-DP release and the query is charged ε once. Repeats are free
  replays; rewrites are charged until the budget refuses. The attacker uses the likelihood
  ratio of everything it received, which is the optimal test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.attacks.common import DENIABLE, Step, StopReason, ask, deniable_session, exact
from deniable.attacks.inference import log_likelihood, logit, success_bound
from deniable.attacks.naive import UnsafeExactSystem
from deniable.curator import Session
from deniable.errors import InvalidParameter
from deniable.noise import bernoulli, uniform_int
from deniable.noise.testing import SeededRandom
from deniable.stats import clopper_pearson

COMMON = ("asthma", "flu", "fracture", "migraine")
RARE = "rare disease"


@dataclass(frozen=True)
class MembershipRun:
    """The attacker's success against one system.

    Attributes:
        system: which system.
        safe: whether it is deniable.
        trials: how many trials were attacked.
        successes: how many guesses were right.
        success_rate: ``successes / trials``.
        interval: an exact 95% (Clopper–Pearson) interval of the success probability.
        epsilon_spent: ε charged (deniable only).
        bound: the largest success probability any attacker has at the charged ε.
        stopped_by: why deniable stopped answering.
        steps: the questions asked (values are not kept: there are ``T`` of them per answer).
    """

    system: str
    safe: bool
    trials: int
    successes: int
    success_rate: float
    interval: tuple[float, float]
    epsilon_spent: float | None = None
    bound: float | None = None
    stopped_by: StopReason | None = None
    steps: tuple[Step, ...] = ()


@dataclass(frozen=True)
class MembershipReport:
    """What membership inference achieved against each system.

    Attributes:
        prior: the attacker's prior that the target is present.
        trials: independent trials.
        size: people per trial besides the target.
        runs: the runs, unsafe baselines first.
        attack: the attack's name.
    """

    prior: float
    trials: int
    size: int
    runs: tuple[MembershipRun, ...]
    attack: str = field(default="membership")

    def text(self) -> str:
        """A readable account of the attack."""
        from deniable.attacks.report import render

        return render(self)


def clinics(
    trials: int, size: int, *, prior: float, seed: int | None
) -> tuple[pd.DataFrame, npt.NDArray[np.bool_]]:
    """The visits of ``trials`` clinics and which of them the target visited."""
    src = None if seed is None else SeededRandom(seed)
    present = bernoulli(Fraction(repr(prior)), trials, source=src)
    common = uniform_int(len(COMMON), trials * size, source=src)
    frame = pd.DataFrame(
        {
            "trial": np.concatenate([np.repeat(np.arange(trials), size), np.flatnonzero(present)]),
            "diagnosis": [COMMON[int(c)] for c in common] + [RARE] * int(present.sum()),
        }
    )
    return frame, present


def _run(
    name: str,
    safe: bool,
    guesses: npt.NDArray[np.bool_],
    present: npt.NDArray[np.bool_],
    **kw: object,
) -> MembershipRun:
    successes = int(np.sum(guesses == present))
    trials = len(present)
    return MembershipRun(
        name,
        safe,
        trials,
        successes,
        successes / trials,
        clopper_pearson(successes, trials, 0.95),
        **kw,  # type: ignore[arg-type]
    )


def run_membership(
    *,
    trials: int = 2000,
    size: int = 20,
    scale: float = 1.0,
    repeats: int = 25,
    budget: float | Fraction = 1,
    epsilon: float | Fraction = 1,
    rewrites: int = 10,
    prior: float = 0.5,
    seed: int | None = 0,
    cheat: float = 1.0,
) -> MembershipReport:
    """Run membership inference on the unsafe systems and on a deniable session.

    Args:
        trials: independent clinics (each a separate dataset).
        size: people per clinic besides the target.
        scale: the unsafe fresh-noise system's scale ``b``.
        repeats: how many times the attacker asks each system the same histogram.
        budget: deniable's total ε.
        epsilon: ε per deniable histogram.
        rewrites: most rewritten histograms the attacker tries after the repeats.
        prior: the attacker's prior that the target is present.
        seed: seed of the data and of the unsafe noise (None: fresh CSPRNG draws).
        cheat: for negative controls only: deniable is asked at ``cheat·ε`` while the bound
            is stated at ``ε`` (1 = honest).

    Returns:
        The :class:`MembershipReport`. Spends ``budget`` of a throwaway deniable session.
    """
    if not 0 < prior < 1:
        raise InvalidParameter("prior must be in (0, 1)")
    if trials < 1 or size < 1 or repeats < 1 or rewrites < 0:
        raise InvalidParameter("trials, size and repeats must be ≥ 1, rewrites ≥ 0")
    eps = exact(epsilon, "epsilon")
    frame, present = clinics(trials, size, prior=prior, seed=seed)
    tables = {"visits": frame}
    naive_sql = (
        f"SELECT trial, COUNT(*) FILTER (WHERE diagnosis = '{RARE}') AS n "
        "FROM visits GROUP BY trial ORDER BY trial"
    )
    runs = []
    base = UnsafeExactSystem(tables)
    try:
        rare = np.array([base.histogram(naive_sql)[t] for t in range(trials)])
        runs.append(_run(base.name, False, rare >= 1, present))
        noisy = base.with_fresh_noise(
            scale=scale, source=None if seed is None else SeededRandom(seed + 1)
        )
        total = np.zeros(trials)
        for _ in range(repeats):
            got = noisy.histogram(naive_sql)
            total += np.array([got[t] for t in range(trials)])
        runs.append(
            _run(
                f"{noisy.name} (asked {repeats}×, averaged)", False, total / repeats >= 0.5, present
            )
        )
    finally:
        base.close()
    domain: list[object] = [*COMMON, RARE]
    keys: dict[str, dict[str, Sequence[object]]] = {
        "visits": {"trial": list(range(trials)), "diagnosis": domain}
    }
    with deniable_session(budget * cheat if cheat != 1 else budget, tables, public_keys=keys) as s:
        runs.append(_deniable(s, present, prior, eps, repeats, rewrites, cheat))
    return MembershipReport(prior, trials, size, tuple(runs))


def _deniable(
    session: Session,
    present: npt.NDArray[np.bool_],
    prior: float,
    eps: Fraction,
    repeats: int,
    rewrites: int,
    cheat: float,
) -> MembershipRun:
    trials = len(present)
    base = "SELECT trial, diagnosis, COUNT(*) AS n FROM visits GROUP BY trial, diagnosis"
    texts = [base] * repeats + [
        f"SELECT trial, diagnosis, COUNT(*) AS n FROM visits WHERE trial > {-j} "
        "GROUP BY trial, diagnosis"
        for j in range(1, rewrites + 1)
    ]
    llr = np.full(trials, logit(prior))
    spent = Fraction(0)
    steps = []
    stopped: StopReason | None = None
    asked = eps * Fraction(repr(cheat)) if cheat != 1 else eps
    for sql in texts:
        out = ask(session, sql, epsilon=asked)
        if out.answer is None:
            stopped = out.stopped
            steps.append(Step(sql, None, stopped=stopped))
            break
        steps.append(Step(sql, None, float(out.cost), out.cached))
        if out.cached:
            continue
        frame = out.answer.frame
        cell = frame[frame["diagnosis"] == RARE].sort_values("trial")["n"].to_numpy(dtype=float)
        scale = 1 / float(out.cost)
        llr += log_likelihood(cell, 1, scale) - log_likelihood(cell, 0, scale)
        spent += out.cost
    claimed = spent / Fraction(repr(cheat)) if cheat != 1 else spent
    name = DENIABLE if cheat == 1 else f"{DENIABLE} (BROKEN on purpose: {cheat}× the ε claimed)"
    return _run(
        name,
        True,
        llr > 0,
        present,
        epsilon_spent=float(claimed),
        bound=success_bound(prior, claimed),
        stopped_by=stopped,
        steps=tuple(steps),
    )


def holds(run: MembershipRun, *, failure: float = 1e-7) -> bool:
    """Whether the success count is consistent with the bound (one-sided exact test).

    The trials are independent, each a success with probability at most ``run.bound`` if
    the release is ε-DP, so the Clopper–Pearson lower bound at ``failure`` exceeds the bound
    with probability at most ``failure``: ``False`` is then evidence of a leak.
    """
    from deniable.stats import clopper_pearson_lower

    if run.bound is None:
        raise InvalidParameter("only deniable's runs have a bound to hold")
    return clopper_pearson_lower(run.successes, run.trials, failure) <= run.bound

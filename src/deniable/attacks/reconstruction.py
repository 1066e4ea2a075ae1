"""The reconstruction attack (Dinur–Nissim): many random subset counts recover a secret column.

The attacker knows everyone's public ``id`` and asks, for random subsets ``S_j`` of people,
"how many people in ``S_j`` code with Notepad?". Each subset is written as a short predicate
the attacker can evaluate itself, ``(a_j·id + b_j) % P < P/2`` (a random affine hash), so
the answers are ``A·x + noise`` for a known 0/1 matrix ``A`` and the secret bit column ``x``.
It then solves for ``x`` by least squares (``numpy.linalg.lstsq``, minimum-norm around the
prior mean 1/2) or by L1 regression as a linear program (``scipy.optimize.linprog``), and
rounds. With noise well below ``√n`` almost every bit comes back (Dinur–Nissim 2003).

* The unsafe systems answer every subset: exact answers give every bit back; fresh noise of
  scale ``b`` too, until ``b`` approaches ``√n`` (the sweep over ``b`` shows the curve).
* Deniable refuses to release the column itself, charges every subset count and stops at the
  budget. Flipping one person's bit moves each count by at most one, so after ``ε`` charged
  in total, each bit's posterior (uniform prior) is at most ``e^ε/(1 + e^ε)``, and the
  number of bits any decoder gets right is dominated by a Binomial(n, e^ε/(1 + e^ε)) —
  accuracy near chance for a small budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from deniable.attacks.common import Step, StopReason, ask, deniable_session, exact
from deniable.attacks.data import population
from deniable.attacks.inference import success_bound
from deniable.attacks.naive import UnsafeExactSystem
from deniable.curator import Session
from deniable.errors import InvalidParameter
from deniable.noise import uniform_int
from deniable.noise.testing import SeededRandom

Decoder = Literal["lstsq", "lp"]
PRIME = 1_000_003
"""Modulus of the subsets' affine hash (prime, far above any id used here)."""


@dataclass(frozen=True)
class SweepPoint:
    """Reconstruction accuracy against one unsafe system.

    Attributes:
        scale: the noise scale ``b`` (0: exact answers).
        queries: subset counts answered.
        accuracy: fraction of bits recovered.
    """

    scale: float
    queries: int
    accuracy: float


@dataclass(frozen=True)
class ReconstructionReport:
    """What the reconstruction attack recovered.

    Attributes:
        n: people (bits to recover).
        queries: subset counts the attacker planned.
        decoder: ``"lstsq"`` or ``"lp"``.
        sweep: accuracy against the unsafe systems, by noise scale.
        epsilon_per_query: ε the attacker spent per deniable query.
        budget: deniable's total ε.
        deniable_answered: subset counts deniable answered.
        deniable_refused: questions deniable refused as unsafe (e.g. the column itself).
        deniable_stopped_by: why deniable stopped answering.
        epsilon_spent: ε charged in total.
        deniable_accuracy: fraction of bits the attacker recovered from deniable.
        accuracy_bound: the expected accuracy any decoder can reach at the charged ε,
            ``e^ε/(1 + e^ε)``.
        steps: deniable's steps (the unsafe systems' thousands of answers are not kept).
        attack: the attack's name.
    """

    n: int
    queries: int
    decoder: Decoder
    sweep: tuple[SweepPoint, ...]
    epsilon_per_query: float
    budget: float
    deniable_answered: int
    deniable_refused: int
    deniable_stopped_by: StopReason | None
    epsilon_spent: float
    deniable_accuracy: float
    accuracy_bound: float
    steps: tuple[Step, ...]
    attack: str = field(default="reconstruction")

    def text(self) -> str:
        """A readable account of the attack."""
        from deniable.attacks.report import render

        return render(self)


def subsets(n: int, m: int, *, seed: int | None) -> tuple[npt.NDArray[np.int64], list[str]]:
    """``m`` random subsets of ids ``0..n−1``: their 0/1 matrix and their SQL predicates."""
    src = None if seed is None else SeededRandom(seed)
    a = 1 + uniform_int(PRIME - 1, m, source=src)
    b = uniform_int(PRIME, m, source=src)
    ids = np.arange(n, dtype=np.int64)
    matrix = ((a[:, None] * ids[None, :] + b[:, None]) % PRIME < PRIME // 2).astype(np.int64)
    preds = [
        f"(id * {int(aj)} + {int(bj)}) % {PRIME} < {PRIME // 2}"
        for aj, bj in zip(a, b, strict=True)
    ]
    return matrix, preds


def decode(
    matrix: npt.NDArray[np.int64], answers: npt.ArrayLike, n: int, *, decoder: Decoder = "lstsq"
) -> npt.NDArray[np.int64]:
    """Guess the bit column from subset counts (no answers: all guesses 0).

    ``lstsq``: the minimum-norm least-squares deviation from 1/2, rounded. ``lp``: minimise
    ``Σ|A·x − answers|`` over ``x ∈ [0, 1]^n`` (HiGHS), rounded.
    """
    y = np.asarray(answers, dtype=float)
    if len(y) == 0:
        return np.zeros(n, dtype=np.int64)
    a = matrix[: len(y)].astype(float)
    if decoder == "lstsq":
        centred = y - a.sum(axis=1) / 2
        gram = a.T @ a
        try:  # full column rank: the normal equations, by Cholesky
            if len(y) < n:
                raise np.linalg.LinAlgError
            low = np.linalg.cholesky(gram)
            dev = np.linalg.solve(low.T, np.linalg.solve(low, a.T @ centred))
        except np.linalg.LinAlgError:  # rank-deficient: the minimum-norm solution
            dev, *_ = np.linalg.lstsq(a, centred, rcond=None)
        return (dev > 0).astype(np.int64)
    if decoder == "lp":
        from scipy.optimize import linprog

        m = len(y)
        cost = np.concatenate([np.zeros(n), np.ones(m)])
        eye = np.eye(m)
        upper = np.block([[a, -eye], [-a, -eye]])
        rhs = np.concatenate([y, -y])
        bounds = [(0.0, 1.0)] * n + [(0.0, None)] * m
        res = linprog(cost, A_ub=upper, b_ub=rhs, bounds=bounds, method="highs")
        if res.x is None:  # pragma: no cover - the LP is always feasible
            return np.zeros(n, dtype=np.int64)
        return (np.asarray(res.x[:n]) > 0.5).astype(np.int64)
    raise InvalidParameter("decoder must be 'lstsq' or 'lp'")


def _count_sql(pred: str) -> str:
    return f"SELECT COUNT(*) AS n FROM people WHERE notepad = 1 AND {pred}"


def run_reconstruction(
    *,
    n: int = 200,
    queries: int | None = None,
    scales: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0),
    budget: float | Fraction = 1,
    epsilon: float | Fraction = Fraction(1, 10),
    decoder: Decoder = "lstsq",
    seed: int | None = 0,
) -> ReconstructionReport:
    """Run the reconstruction attack on the unsafe systems and on a deniable session.

    Args:
        n: people in the synthetic table.
        queries: subset counts to ask (default ``2n``).
        scales: the unsafe systems' noise scales (0: exact answers).
        budget: deniable's total ε.
        epsilon: ε per deniable subset count.
        decoder: ``"lstsq"`` or ``"lp"``.
        seed: seed of the data, the subsets and the unsafe noise (None: fresh CSPRNG draws,
            as the statistical tests need).

    Returns:
        The :class:`ReconstructionReport`. Spends ``budget`` of a throwaway deniable session.
    """
    m = 2 * n if queries is None else queries
    if n < 2 or m < 1:
        raise InvalidParameter("n must be ≥ 2 and queries ≥ 1")
    if decoder not in ("lstsq", "lp"):
        raise InvalidParameter("decoder must be 'lstsq' or 'lp'")
    eps = exact(epsilon, "epsilon")
    pop = population(n, seed=seed)
    truth = pop.secrets
    matrix, preds = subsets(n, m, seed=None if seed is None else seed + 3)
    tables = {"people": pop.frame}
    sweep = []
    base = UnsafeExactSystem(tables)
    try:
        for i, scale in enumerate(scales):
            system = (
                base
                if scale == 0
                else base.with_fresh_noise(
                    scale=scale, source=None if seed is None else SeededRandom(seed + 10 + i)
                )
            )
            answers = [system.count(_count_sql(p)) for p in preds]
            guess = decode(matrix, answers, n, decoder=decoder)
            sweep.append(SweepPoint(float(scale), m, float(np.mean(guess == truth))))
    finally:
        base.close()
    with deniable_session(budget, tables) as session:
        steps, answers, stopped, spent = _deniable(session, preds, eps)
    guess = decode(matrix, answers, n, decoder=decoder)
    return ReconstructionReport(
        n=n,
        queries=m,
        decoder=decoder,
        sweep=tuple(sweep),
        epsilon_per_query=float(eps),
        budget=float(exact(budget, "budget")),
        deniable_answered=len(answers),
        deniable_refused=sum(s.stopped == "refusal" for s in steps),
        deniable_stopped_by=stopped,
        epsilon_spent=float(spent),
        deniable_accuracy=float(np.mean(guess == truth)),
        accuracy_bound=success_bound(0.5, spent),
        steps=tuple(steps),
    )


def _deniable(
    session: Session, preds: list[str], eps: Fraction
) -> tuple[list[Step], list[float], StopReason | None, Fraction]:
    """Ask for the column itself (refused), then the subset counts until the budget stops."""
    steps = []
    direct = "SELECT id, notepad FROM people"
    out = ask(session, direct, epsilon=eps)
    steps.append(Step(direct, None, stopped=out.stopped))
    answers: list[float] = []
    spent = Fraction(0)
    for pred in preds:
        sql = _count_sql(pred)
        out = ask(session, sql, epsilon=eps)
        if out.answer is None:
            steps.append(Step(sql, None, stopped=out.stopped))
            return steps, answers, out.stopped, spent
        answers.append(float(out.answer["n"].iloc[0]))
        spent += out.cost
        steps.append(Step(sql, answers[-1], float(out.cost), out.cached))
    return steps, answers, None, spent


def accuracy_threshold(n: int, epsilon: float, *, failure: float = 1e-7) -> float:
    """An accuracy no decoder exceeds with probability above ``failure`` after ε (uniform bits).

    The number of correct bits is a sum of indicators each of conditional mean at most
    ``p = e^ε/(1 + e^ε)`` given the output and the bits before it, so Azuma–Hoeffding gives
    ``P[accuracy ≥ p + s] ≤ exp(−2ns²)``; this returns ``p + √(ln(1/failure)/(2n))``.
    """
    return success_bound(0.5, epsilon) + math.sqrt(math.log(1 / failure) / (2 * n))

"""Empirical ρ of whole SQL answers under a ρ-zCDP budget, from the Gaussian privacy-loss variable.

Neighbours: ``D`` holds 120 users; ``D'`` adds an intruder with 20 rows of extreme value (10⁹,
clamped to the upper bound 100) in each of the five public categories — far more than the
``max_groups = 2`` partitions and ``max_rows = 3`` rows the table allows. The session has a
``Rho`` budget and the query ``SELECT k, COUNT(*), SUM(x), AVG(x) … GROUP BY k`` spends
ρ = ½, so the plan gives each of its four measures (count; sum; AVG's count and centred sum)
discrete Gaussian noise with ``σ_j² = Δ_j²/(2ρ_j)``, ``Δ_j = √m·Δ_p`` the L2 sensitivity over
the ``m = 2`` partitions a user may touch, ``Σ ρ_j = ρ``. The engine computes the exact bounded
aggregates of both datasets (test-only hook, same secrets); the noise is drawn many times from
the plan's own release function, ``release.additive_release`` — the one :func:`release.release` calls,
which for ρ plans calls :func:`deniable.mechanisms.discrete_gaussian`.

The statistic. Write the whole release as a vector ``y`` (20 coordinates ``i``: four measures
times five partitions) and ``c``, ``c'`` for the exact answers on ``D``, ``D'``. The
log-likelihood ratio of the two product laws is, for the *discrete* Gaussian exactly as for the
continuous one (same normalising constant on both sides, since ``c, c'`` are integers),
``T = ln P_{D'}(y)/P_D(y) = Σ_i (c'_i − c_i)·(y_i − (c_i + c'_i)/2)/σ_i²``: the privacy-loss
random variable, and the Neyman–Pearson-optimal statistic. With
``μ² = Σ_i (c'_i − c_i)²/σ_i²`` and noise ``Z_i`` of mean 0 (symmetric) and variance
``V(σ_i²) ≤ σ_i²``, ``E_D T = −μ²/2``, ``E_{D'} T = +μ²/2`` and ``Var T = v ≤ μ²``: for
continuous noise ``T`` is ``N(∓μ²/2, μ²)``, the privacy curve of the whole release is that of
one Gaussian of ``μ = ‖(c' − c)/σ‖₂`` and ρ-zCDP is exactly ``μ²/2 ≤ ρ``. The empirical
version, from ``n`` releases on each side, is ``μ̂ = (mean_{D'} T − mean_D T)/s`` with ``s²``
the pooled sample variance, and the empirical ρ is ``ρ̂ = μ̂²/2``. Dividing by the *observed*
spread is what makes the check see the noise actually added: a pipeline with half the noise
has the same means but ``s = μ/2``, so ``μ̂ = 2μ``.

Check 1 (sharp; valid for the discrete Gaussian). Facts used: ``Z ~ N_Z(0, σ²)`` is symmetric
and sub-Gaussian, ``E e^{tZ} ≤ e^{t²σ²/2}`` (Canonne–Kamath–Steinke 2020, by Poisson summation:
the shifted theta sum ``Σ_k e^{−(k−tσ²)²/(2σ²)}`` is at most the unshifted one), and
``V(σ²) = σ²·(1 + 2Σ_n (1 − 4π²σ²n²)q^{n²})/(1 + 2Σ_n q^{n²})`` with ``q = e^{−2π²σ²}``
(Poisson summation again; computed below — the deficit ``η`` is below 10⁻³⁰⁰ here). So
``T − E T`` is sub-Gaussian with proxy ``μ²``, and with ``n = N`` per side, with probability
at least ``1 − α`` (α = 1e-7, split α₁ = α₂ = 4e-8, α₃ = 1e-8 twice):

* ``mean_{D'} − mean_D ≤ μ² + 2μ√(ln(1/α₁)/N)`` (sub-Gaussian tail, proxy ``2μ²/N``);
* ``W̄ = mean of the 2N squares (T − E T)² ≥ v − 4μ²√(ln(1/α₂)/N)``: the lower tail of a mean
  of non-negative variables, ``P[W̄ ≤ E W − b] ≤ exp(−2N b²/(2 E W²))`` (from
  ``e^{−x} ≤ 1 − x + x²/2`` for ``x ≥ 0``), with ``E W² ≤ 16μ⁴`` (fourth moment of a
  ``μ²``-sub-Gaussian variable);
* each sample mean is within ``μ√(2 ln(2/α₃)/N)`` of its expectation, so ``s² ≥ W̄ −
  2μ²ln(2/α₃)/N``.

Together, since ``v ≥ (1 − η)μ²`` and an honest pipeline has ``μ ≤ √(2ρ)``:
``μ̂ ≤ (√(2ρ) + A)/√(1 − η − B − X)`` with ``A = 2√(ln(1/α₁)/N)``, ``B = 4√(ln(1/α₂)/N)``,
``X = 2 ln(2/α₃)/N``. At N = 500 000 this is ``μ̂ ≤ 1.0237`` for ρ = ½, i.e. the test fails when
``ρ̂ > 0.524``; the false-failure probability of an honest pipeline is at most 1e-7 whatever
its exact answers. The same facts give a lower bound for the honest pair (the test's power:
the release really is as revealing as the charged ρ says, so a gross over-noising or a
vacuous neighbour would show): ``mean_{D'} − mean_D ≥ μ² − μA'`` and, from
``E e^{λ(T−ET)²} ≤ (1 − 2λμ²)^{−1/2}``, ``P[W̄ ≥ (1 + u)μ²] ≤ exp(−N(u − ln(1 + u)))``, so
``μ̂ ≥ (μ − A')/√((1 + u)·2N/(2N − 2))`` except with probability 1e-7 (5e-8 each; ``A'`` as
``A`` at 5e-8, ``u`` the least with ``N(u − ln(1 + u)) ≥ ln(1/5e-8)``).

Check 2 (distribution-free). Threshold events ``{T > t·μ}``, ``t ∈ {1, 1.5, 2, 2.5}``, fixed in
advance from the plan and the exact answers: ρ-zCDP bounds, by the data-processing inequality,
the binary Rényi divergences of every event, and :func:`deniable.audit.estimate_rho` turns the
counts into a lower confidence bound on ρ (exact Clopper–Pearson bounds, Bonferroni over the 8
tested (event, direction) pairs) at α = 1e-7: it exceeds the charged ρ for an honest pipeline
with probability below 1e-7, whatever the noise's law. It is much weaker than check 1 (no
single event of a Gaussian pair reaches its full ρ).

Negative controls, fed to both checks and required to be refuted: (a) half the noise
(``σ/2``, i.e. 4ρ); (b) contribution bounding switched off for ``D'`` (the plan's own SQL run
with ``max_groups = 5, max_rows = 20`` while the noise stays calibrated for 2 and 3; ``T`` is
then the log-likelihood ratio of the pair actually compared); (c) the
L2 sensitivity without its ``√max_groups`` factor (``σ/√2``, i.e. 2ρ). Measured (N = 500 000,
ρ = ½; the intruder's ``μ²/2`` is 0.4999998 bounded, 141.5 unbounded): check 1 gives ``ρ̂`` =
0.498 for the honest pipeline (accepted region [0.484, 0.524]), 2.006 for (a), 141.9 for (b)
and 1.000 for (c); check 2 gives lower bounds 0.334 (honest), 1.37 (a), 10.2 (b) and 0.68 (c).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from _query_neighbours import MAX_GROUPS, MAX_ROWS, domain_vector, exact_neighbours

from deniable.accounting.loss import Rho
from deniable.audit import EmpiricalLoss, Event, estimate_rho
from deniable.noise.testing import SeededRandom
from deniable.query.plan import DPPlan, Measure, l2_bound
from deniable.query.release import ExactAggregates, additive_release

pytestmark = pytest.mark.stats

N = 500_000
RHO = Fraction(1, 2)
ALPHA = 1e-7
QUERY = "SELECT k, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY k"
THRESHOLDS = (1.0, 1.5, 2.0, 2.5)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Pair = list[tuple[I64, I64]]


def _sigma2(m: Measure) -> float:
    return float(m.sensitivity**2 / (2 * m.budget))


def _variance_ratio(sigma2: float) -> float:
    """``Var(N_Z(0, σ²))/σ²``, exact by Poisson summation (1.0 once ``e^{−2π²σ²}`` underflows)."""
    q = math.exp(-2 * math.pi**2 * sigma2)
    top = 1 + 2 * sum((1 - 4 * math.pi**2 * sigma2 * n * n) * q ** (n * n) for n in range(1, 20))
    bottom = 1 + 2 * sum(q ** (n * n) for n in range(1, 20))
    return top / bottom


def _mu2(plan: DPPlan, pair: Pair) -> float:
    """``μ² = Σ (c' − c)²/σ²`` over every coordinate of the release."""
    return sum(
        float(((c2 - c).astype(np.float64) ** 2).sum()) / _sigma2(m)
        for m, (c, c2) in zip(plan.measures, pair, strict=True)
    )


def _statistic(
    plan: DPPlan, exact: ExactAggregates, pair: Pair, seed: int, *, budget_factor: int = 1
) -> F64:
    """N releases of ``exact`` reduced to the log-likelihood ratio ``T`` of ``pair``.

    The noise comes from the plan's own release function; ``budget_factor`` multiplies each
    measure's ρ (4 = half the noise, ``m`` = the sensitivity without its ``√m``).
    """
    t = np.zeros(N)
    for j, (m, (c, c2)) in enumerate(zip(plan.measures, pair, strict=True)):
        x = np.tile(domain_vector(plan, exact, m), N)
        noisy = dataclasses.replace(m, budget=m.budget * budget_factor)
        rel = additive_release(noisy, x, SeededRandom(1000 * seed + j))
        y = np.asarray(rel.value, dtype=np.float64).reshape(N, -1)
        diff = (c2 - c).astype(np.float64)
        t += ((y - (c + c2) / 2.0) @ diff) / _sigma2(m)
    return t


@dataclasses.dataclass(frozen=True)
class MuCheck:
    """Check 1: empirical ``μ̂`` (and ``ρ̂ = μ̂²/2``) against the honest pipeline's bounds."""

    mu_hat: float
    upper: float
    lower: float

    @property
    def rho_hat(self) -> float:
        return self.mu_hat**2 / 2

    def passes(self) -> bool:
        """Not more revealing than the charged ρ allows (false failure ≤ 1e-7)."""
        return self.mu_hat <= self.upper

    def shows_full_loss(self) -> bool:
        """As revealing as an honest pipeline on this pair (false failure ≤ 1e-7)."""
        return self.mu_hat >= self.lower


def _mu_check(t_d: F64, t_d2: F64, *, rho: float, mu2: float, eta: float) -> MuCheck:
    n = t_d.size
    assert t_d2.size == n
    gap = float(t_d2.mean() - t_d.mean())
    s2 = float(((t_d - t_d.mean()) ** 2).sum() + ((t_d2 - t_d2.mean()) ** 2).sum()) / (2 * n - 2)
    mu_hat = gap / math.sqrt(s2)
    # Upper: α₁ = α₂ = 4e-8 (mean gap, mean of squares), α₃ = 1e-8 for each sample mean.
    a = 2 * math.sqrt(math.log(1 / 4e-8) / n)
    b = 4 * math.sqrt(math.log(1 / 4e-8) / n)
    x = 2 * math.log(2 / 1e-8) / n
    upper = (math.sqrt(2 * rho) + a) / math.sqrt(1 - eta - b - x)
    # Lower (this pair's μ): 5e-8 for the mean gap, 5e-8 for the mean of squares.
    a_low = 2 * math.sqrt(math.log(1 / 5e-8) / n)
    u = _solve_u(math.log(1 / 5e-8) / n)
    lower = (math.sqrt(mu2) - a_low) / math.sqrt((1 + u) * 2 * n / (2 * n - 2))
    return MuCheck(mu_hat=mu_hat, upper=upper, lower=lower)


def _solve_u(target: float) -> float:
    """The least ``u > 0`` with ``u − ln(1 + u) ≥ target`` (bisection, rounded up)."""
    lo, hi = 0.0, 1.0
    while hi - math.log1p(hi) < target:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid - math.log1p(mid) < target else (lo, mid)
    return hi


def _above(threshold: float) -> Callable[[F64], npt.NDArray[np.bool_]]:
    def contains(v: F64) -> npt.NDArray[np.bool_]:
        return np.asarray(v > threshold)

    return contains


def _renyi_check(t_d: F64, t_d2: F64, mu2: float) -> EmpiricalLoss:
    """Check 2: estimate_rho on threshold events of ``T`` fixed in advance (8 pairs)."""
    mu = math.sqrt(mu2)
    events = [Event(f"T > {s}·μ", _above(s * mu)) for s in THRESHOLDS]
    return estimate_rho(t_d2, t_d, alpha=ALPHA, events=events)


@dataclasses.dataclass(frozen=True)
class Answers:
    plan: DPPlan
    d: ExactAggregates
    d2: ExactAggregates
    d2_unbounded: ExactAggregates
    pair: Pair
    pair_unbounded: Pair
    eta: float


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> Answers:
    n = exact_neighbours(tmp_path_factory.mktemp("d"), Rho(rho=10), QUERY, rho=RHO)
    plan, d, d2, d2_unbounded = n.plan, n.d, n.d2, n.d2_unbounded
    pair = [(domain_vector(plan, d, m), domain_vector(plan, d2, m)) for m in plan.measures]
    pair_unbounded = [
        (domain_vector(plan, d, m), domain_vector(plan, d2_unbounded, m)) for m in plan.measures
    ]
    eta = 1 - min(_variance_ratio(_sigma2(m)) for m in plan.measures)
    return Answers(plan, d, d2, d2_unbounded, pair, pair_unbounded, eta)


@pytest.fixture(scope="module")
def honest(answers: Answers) -> tuple[F64, F64]:
    a = answers
    return _statistic(a.plan, a.d, a.pair, 1), _statistic(a.plan, a.d2, a.pair, 2)


CONTROLS = ("half_noise", "unbounded", "no_sqrt_max_groups")


@pytest.fixture(scope="module", params=CONTROLS)
def control(request: pytest.FixtureRequest, answers: Answers) -> tuple[str, F64, F64, float]:
    a = answers
    if request.param == "half_noise":  # σ/2: ρ·4
        t_d = _statistic(a.plan, a.d, a.pair, 3, budget_factor=4)
        t_d2 = _statistic(a.plan, a.d2, a.pair, 4, budget_factor=4)
        return request.param, t_d, t_d2, _mu2(a.plan, a.pair)
    if request.param == "unbounded":
        t_d = _statistic(a.plan, a.d, a.pair_unbounded, 5)
        t_d2 = _statistic(a.plan, a.d2_unbounded, a.pair_unbounded, 6)
        return request.param, t_d, t_d2, _mu2(a.plan, a.pair_unbounded)
    # Δ₂ = Δ_p instead of √m·Δ_p: σ/√m, i.e. ρ·m.
    t_d = _statistic(a.plan, a.d, a.pair, 7, budget_factor=a.plan.max_groups)
    t_d2 = _statistic(a.plan, a.d2, a.pair, 8, budget_factor=a.plan.max_groups)
    return request.param, t_d, t_d2, _mu2(a.plan, a.pair)


def test_the_plan_is_gaussian_with_l2_sensitivity_over_max_groups(answers: Answers) -> None:
    plan = answers.plan
    assert plan.loss == Rho(rho=RHO)
    assert plan.max_groups == MAX_GROUPS and plan.max_rows == MAX_ROWS
    assert [m.kind for m in plan.measures] == ["rows", "sum", "values", "sum"]  # AVG = sum/count
    assert {m.mechanism for m in plan.measures} == {"discrete_gaussian"}
    assert sum(m.budget for m in plan.measures) == RHO
    for m in plan.measures:
        # Δ₂ ≥ √m·Δ_p (per-partition sensitivity, in noise-grid units): the user touches m
        # partitions; and not far above it, so the check below is not vacuous. The rounding
        # to the noise grid 2^shift adds at most one unit per partition (√m in L2).
        exact_l2 = math.sqrt(MAX_GROUPS) * m.partition_sensitivity / 2**m.shift
        slack = math.sqrt(MAX_GROUPS) if m.shift else 0.0
        assert exact_l2 <= float(m.sensitivity) <= (exact_l2 + slack) * (1 + 1e-6)
        if m.shift == 0:
            assert m.sensitivity == l2_bound(m.partition_sensitivity, MAX_GROUPS)
    assert answers.eta < 1e-12


def test_the_intruder_moves_the_answer_by_the_full_sensitivity(answers: Answers) -> None:
    plan, pair = answers.plan, answers.pair
    for m, (c, c2) in zip(plan.measures, pair, strict=True):
        shift = (c2 - c).astype(np.float64)
        # max_groups = 2 partitions touched, each by max_rows = 3 rows
        assert (shift != 0).sum() == MAX_GROUPS
        if m.kind in ("rows", "values"):
            assert sorted(shift.tolist()) == [0, 0, 0, MAX_ROWS, MAX_ROWS]
        # The L2 shift is (up to the grid-rounding slack) the sensitivity the noise is for.
        assert 0.999 * float(m.sensitivity) <= np.sqrt((shift**2).sum()) <= float(m.sensitivity)
    # So the whole release's μ²/2 is the charged ρ: the neighbours are a worst case.
    mu2 = _mu2(plan, pair)
    assert 0.999 * float(RHO) <= mu2 / 2 <= float(RHO)
    # Without bounding, the intruder moves it far more (the control has something to find).
    assert _mu2(plan, answers.pair_unbounded) / 2 > 10 * float(RHO)


def test_empirical_rho_within_the_charged_rho(answers: Answers, honest: tuple[F64, F64]) -> None:
    check = _mu_check(
        *honest, rho=float(RHO), mu2=_mu2(answers.plan, answers.pair), eta=answers.eta
    )
    assert check.passes(), check
    assert check.shows_full_loss(), check  # the test has power: ρ̂ ≈ ρ, not just ≤ ρ


def test_distribution_free_renyi_bound_within_the_charged_rho(
    answers: Answers, honest: tuple[F64, F64]
) -> None:
    est = _renyi_check(*honest, _mu2(answers.plan, answers.pair))
    assert est.passes(float(RHO)), est
    # Power (measured: 0.334, from T > 2μ: 33 303 and 3 113 hits, as the Gaussian law expects).
    # The bound falls below 0.25 only if one of those counts moves by 15 standard deviations
    # (binomial Chernoff bounds: probability below 1e-40).
    assert est.lower > 0.5 * float(RHO), est


def test_controls_are_refuted(answers: Answers, control: tuple[str, F64, F64, float]) -> None:
    name, t_d, t_d2, mu2 = control
    check = _mu_check(t_d, t_d2, rho=float(RHO), mu2=mu2, eta=answers.eta)
    assert not check.passes(), (name, check)
    est = _renyi_check(t_d, t_d2, mu2)
    assert est.refutes(float(RHO)), (name, est)

"""Statistical tests of the synthetic-data model: estimation from noisy marginals, sampling.

Thresholds (each check is at level 1e-7 at most, a test makes at most two, so every test's
false-failure probability is below 1e-6):

* Estimation: the estimate is (up to optimisation slack) the projection of the stacked noisy
  measurements ``y = Mx + e`` onto the convex set ``C`` of marginals a model over the measured
  cliques can have, with the true total. ``C`` lies in an affine space of dimension ``k`` and
  holds the truth, so ``‖M μ̂ − Mx‖ ≤ ‖Π e‖`` with ``Π`` the orthogonal projection of rank ``k``.
  The discrete Gaussian is σ²-subgaussian (Canonne–Kamath–Steinke 2020), so by Hsu–Kakade–
  Zhang (2012) ``‖Π e‖² ≤ σ²(k + 2√(k t) + 2t)`` with probability ``1 − e^-t``; with
  ``t = ln 10^7`` that is the upper threshold. The raw error ``‖e‖²`` is a sum of ``n``
  independent non-negative terms; by Maurer's (2003) lower tail
  ``‖e‖² ≥ n v − √(2 n m₄ t)`` with probability ``1 − e^-t`` (``v``, ``m₄``: the exact second
  and fourth moments of the noise). The design makes the second bound exceed the first, so
  "the estimate is closer to the truth than the raw measurements" is certified by two checks.
* Sampling: Pearson chi-square of the sampled full joint against the model's joint, every
  cell's expected count at least 200, rejected above the 1 − 1e-7 quantile of χ²(cells − 1).

Negative controls: a model that is not fitted (no iterations) and a model that lacks one of
the measured dependencies must break the estimation bound; rows drawn from a perturbed model
must be rejected by the chi-square (its power, from the non-central χ², is above 1 − 1e-6).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from deniable.noise import discrete_gaussian
from deniable.noise.testing import SeededRandom
from deniable.synth import Domain, GraphicalModel, Measurement, estimate

pytestmark = pytest.mark.stats

F64 = npt.NDArray[np.float64]
ALPHA = 1e-7
T = math.log(1 / ALPHA)

DOMAIN = Domain(("a", "b", "c", "d"), (4, 5, 6, 4))
EDGES = [("a", "b"), ("b", "c"), ("c", "d")]
REPEATS = 8
SIGMA2 = 100


def truth() -> F64:
    """A chain a–b–c–d of strong dependencies, 100,000 records, some cells empty."""
    a = np.array([0.1, 0.2, 0.3, 0.4])
    b_a = np.eye(4, 5) * 0.7 + 0.06
    b_a[0] = [0.0, 0.0, 0.5, 0.5, 0.0]
    c_b = np.roll(np.eye(5, 6), 1, axis=1) * 0.75 + 0.05
    # d leans low after an even c, high after an odd one.
    d_c = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4]] * 3)
    joint = np.einsum(
        "a,ab,bc,cd->abcd", a, b_a / b_a.sum(1, keepdims=True), c_b / c_b.sum(1, keepdims=True), d_c
    )
    counts: F64 = np.floor(100_000 * joint)
    return counts


def marginal(counts: F64, clique: tuple[str, ...]) -> F64:
    axes = tuple(i for i, a in enumerate(DOMAIN.names) if a not in clique)
    out: F64 = counts.sum(axis=axes).ravel()
    return out


def noisy(counts: F64, seed: int) -> list[Measurement]:
    src = SeededRandom(seed)
    cliques = [(a,) for a in DOMAIN.names] + EDGES * REPEATS
    out = []
    for c in cliques:
        exact = marginal(counts, c)
        e = discrete_gaussian(SIGMA2, exact.size, source=src).astype(np.float64)
        out.append(Measurement(c, exact + e, sd=math.sqrt(SIGMA2)))
    return out


def noise_moments() -> tuple[float, float]:
    """Exact second and fourth moments of the discrete Gaussian with σ² = SIGMA2."""
    k = np.arange(-2000, 2001, dtype=np.float64)
    w = np.exp(-(k**2) / (2 * SIGMA2))
    w /= w.sum()
    return float((w * k**2).sum()), float((w * k**4).sum())


def bounds(measurements: list[Measurement]) -> tuple[float, float]:
    """(upper bound on the estimate's squared error, lower bound on the raw squared error)."""
    sizes = dict(zip(DOMAIN.names, DOMAIN.sizes, strict=True))
    # Dimension of the consistent chain marginals with a fixed total.
    k = sum(DOMAIN.size(e) for e in EDGES) - sizes["b"] - sizes["c"] - 1
    upper = SIGMA2 * (k + 2 * math.sqrt(k * T) + 2 * T)
    n = sum(m.values.size for m in measurements)
    v, m4 = noise_moments()
    lower = n * v - math.sqrt(2 * n * m4 * T)
    assert upper < lower, "the design must separate the two bounds"
    return upper, lower


def squared_error(model: GraphicalModel, measurements: list[Measurement], counts: F64) -> float:
    return sum(
        float(((model.marginal(m.clique).ravel() - marginal(counts, m.clique)) ** 2).sum())
        for m in measurements
    )


def raw_error(measurements: list[Measurement], counts: F64) -> float:
    return sum(float(((m.values - marginal(counts, m.clique)) ** 2).sum()) for m in measurements)


def test_estimated_marginals_are_closer_to_the_truth_than_the_noisy_ones() -> None:
    counts = truth()
    measurements = noisy(counts, seed=1)
    upper, lower = bounds(measurements)
    model = estimate(
        DOMAIN, measurements, total=float(counts.sum()), iterations=1000, tolerance=1e-6
    )
    fitted = squared_error(model, measurements, counts)
    raw = raw_error(measurements, counts)
    assert fitted <= upper, (fitted, upper)
    assert raw >= lower, (raw, lower)
    # Non-expansiveness of the projection: holds for every noise draw, not only whp.
    assert fitted < raw


def test_negative_controls_break_the_estimation_bound() -> None:
    counts = truth()
    measurements = noisy(counts, seed=2)
    upper, _ = bounds(measurements)
    total = float(counts.sum())
    unfitted = estimate(DOMAIN, measurements, total=total, iterations=0)
    assert squared_error(unfitted, measurements, counts) > 10 * upper
    # The model without the b–c measurements makes b and c independent.
    missing = [m for m in measurements if m.clique != ("b", "c")]
    wrong = estimate(DOMAIN, missing, total=total, iterations=1000, tolerance=1e-6)
    assert squared_error(wrong, measurements, counts) > 10 * upper


def cyclic_model() -> GraphicalModel:
    """A model on a 4-cycle a–b–c–d–a (cliques a,b,c and a,c,d after triangulation)."""
    d = Domain(("a", "b", "c", "d"), (2, 3, 2, 3))
    x = np.indices(d.sizes).astype(np.float64)
    joint = np.exp(
        0.8 * (x[0] == x[1] % 2) + 0.6 * (x[1] == x[2]) - 0.4 * x[2] * x[3] + 0.3 * x[0] * x[3]
    )
    joint /= joint.sum()
    cycle = [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")]
    measurements = [
        Measurement(
            c,
            1000.0 * joint.sum(axis=tuple(i for i, a in enumerate(d.names) if a not in c)).ravel(),
            sd=1.0,
        )
        for c in cycle
    ]
    return estimate(d, measurements, iterations=500)


def chi2(rows: npt.NDArray[np.int64], probs: F64) -> tuple[float, float, int]:
    cells = np.ravel_multi_index(tuple(rows.T), probs.shape)
    observed = np.bincount(cells, minlength=probs.size).astype(np.float64)
    expected = probs.ravel() * rows.shape[0]
    assert expected.min() >= 200, "every cell needs an expected count of at least 200"
    df = probs.size - 1
    return (
        float(((observed - expected) ** 2 / expected).sum()),
        float(stats.chi2.isf(ALPHA, df)),
        df,
    )


N_ROWS = 300_000


@pytest.mark.parametrize("rounded", [False, True], ids=["independent", "rounded"])
def test_sampled_rows_follow_the_model_joint(rounded: bool) -> None:
    # Rounded rows have marginals closer to the model's than independent ones: the statistic
    # is then smaller than χ², and the same threshold is conservative.
    model = cyclic_model()
    assert max(len(c) for c in model.cliques) == 3  # sampled through a conditional clique
    probs = model.marginal(model.domain.names) / model.total
    rows = model.sample(N_ROWS, source=SeededRandom(21), rounded=rounded)
    stat, threshold, _ = chi2(rows, probs)
    assert stat <= threshold, (stat, threshold)


@pytest.mark.parametrize("rounded", [False, True], ids=["independent", "rounded"])
def test_rows_from_a_perturbed_model_are_rejected(rounded: bool) -> None:
    # The power below is that of independent rows; rounded rows deviate from the model by
    # the same shift with less noise around it, so they are rejected at least as surely.
    model = cyclic_model()
    probs = model.marginal(model.domain.names) / model.total
    # Perturb the conditional clique only: move 2% of d's mass given (a, c) between two cells.
    node = next(i for i, c in enumerate(model.cliques) if "d" in c)
    logs = list(model._log)
    p = np.exp(logs[node])
    shift = 0.04 * p[..., 0]
    p[..., 0] -= shift
    p[..., 1] += shift
    logs[node] = np.log(p)
    perturbed = GraphicalModel(model.domain, model.total, model.tree, logs)
    actual = perturbed.marginal(model.domain.names) / model.total
    df = probs.size - 1
    threshold = float(stats.chi2.isf(ALPHA, df))
    lam = N_ROWS * float(((actual - probs) ** 2 / probs).sum())
    assert stats.ncx2.sf(threshold, df, lam) > 1 - 1e-6, "the control must be rejected whp"
    rows = perturbed.sample(N_ROWS, source=SeededRandom(22), rounded=rounded)
    stat, threshold, _ = chi2(rows, probs)
    assert stat > threshold, (stat, threshold)

"""MIN and MAX (the 0- and 1-quantiles through the exponential mechanism): accuracy and privacy.

Accuracy. ``Quantile.release`` notes that with probability ≥ 0.95 the released candidate's
score ``−|(1−q)·#below − q·#above|`` is within ``R = rank_error(m, 0.95)
= 2Δ/ε·ln((grid+1)/0.05)`` of the best (the exponential mechanism's utility bound, which
permute-and-flip shares). For ``q = 0`` the score of candidate ``j`` is ``−#below(j)`` (rows
in lower bins) and the best is 0, so the statement reads ``#below(j) ≤ R``, i.e. ``j`` is at
most the bin of the ``(⌊R⌋+1)``-th smallest row: ``lower ≤ MIN ≤ x₍⌊R⌋+1₎ + step/2``
(a bin's candidate is within half a step of its rows). For ``q = 1`` symmetrically
``x₍n−⌊R⌋₎ − step/2 ≤ MAX ≤ upper``. The bounds hold always; the rank statements fail at a
rate ≤ 0.05 per (seed, group), independently, so their failure count is below
``Binomial(K·G, 0.05)``: the check ``failures ≤ binom.ppf(1 − 1e-7, K·G, 0.05)`` fails an
honest implementation with probability below 1e-7 per aggregate (2e-7 per test).
Negative control: the same check with the mechanism spending a hundredth of its ε
(monkeypatched into the release stage) must be rejected.

Privacy. ``D`` holds 60 units with one value each in [30, 70]; ``D'`` adds an intruder with
``max_rows = 2`` rows at the clamping bound (−10⁹ for MIN, +10⁹ for MAX, clamped to 0 and 100).
No GROUP BY (``m = 1``, score sensitivity ``Δ = r = 2``), ``ε = 1`` for the value (the query
spends 2: the other half on the interval's endpoint, tested in
``test_query_quantile_intervals.py``), 21 candidates. The release
stage's own calls (``quantile_scores`` then ``exponential`` with the measure's sensitivity and
ε) are sampled ``N`` times on both histograms, and :func:`deniable.audit.estimate_epsilon`
gives a lower confidence bound at ``α = 1e-7``. Its claim is the *exact* largest log-ratio of
permute-and-flip's output law on these two inputs, computed from the closed form
``P[r] = p_r·∫₀¹ ∏_{s≠r}(1 − p_s·t) dt`` (Gauss–Legendre, exact for this polynomial): 0.499,
at most the charged ε = 1 (checked). Adding a unit only lowers 0-/1-quantile scores (they
move one way), so the realised loss is ε/2 here; testing against the exact value keeps the
test sharp. An honest sampler exceeds it with probability ≤ 1e-7 per estimate (two honest
estimates: 2e-7). Negative controls, same check: (a) the mechanism called with 2ε (the same
as halving the score sensitivity; exact loss 0.96) must refute 0.499 — measured lower bound
0.76; (b) contribution bounding off for ``D'`` (the plan's SQL run with ``max_rows = 10``
while the noise is calibrated for 2; exact loss 1.77) must refute the charged ε = 1 —
measured 1.59. Honest lower bounds measured 0.26 (MIN and MAX), N = 15 000.
The rank statements failed 0 times of 3000 (limit 216); the ε/100 control 1838 and 1841.
"""

from __future__ import annotations

import dataclasses
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from scipy import stats

import deniable.query.release as release_module
from deniable.accounting.loss import Epsilon
from deniable.audit import estimate_epsilon
from deniable.curator.session import Session
from deniable.mechanisms import exponential
from deniable.mechanisms.exponential import exponential_probabilities
from deniable.noise.testing import SeededRandom
from deniable.query.aggregates import Max, Min, rank_error
from deniable.query.execute import build_answer
from deniable.query.measures import Measure
from deniable.query.release import quantile_scores, release
from deniable.query.testing import exact_aggregates, exact_for_plan

pytestmark = pytest.mark.stats

ALPHA = 1e-7
NOTE_LEVEL = 0.95  # the level the answer's note states the rank error at

# --- accuracy --------------------------------------------------------------------------

K = 300
GROUPS = [f"g{i}" for i in range(10)]
USERS_PER_GROUP = 150
ACCURACY_QUERY = "SELECT k, MIN(x) AS lo, MAX(x) AS hi FROM t GROUP BY k"


@pytest.fixture(scope="module")
def accuracy(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(21)
    rows = [
        (f"{k}-{u}", k, float(rng.uniform(20, 80))) for k in GROUPS for u in range(USERS_PER_GROUP)
    ]
    frame = pd.DataFrame(rows, columns=["uid", "k", "x"])
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path_factory.mktemp("mm") / "l.db")
    s.add_table(
        "t",
        frame,
        privacy_unit="uid",
        bounds={"x": (0, 100)},
        max_groups=1,
        max_rows=1,
        public_keys={"k": GROUPS},
    )
    plan, _, exact = exact_aggregates(
        s, ACCURACY_QUERY, not_private=True, epsilon=1, quantile_grid=100
    )
    # every row is kept (one row per unit), so the raw order statistics are the bounded ones
    ordered = {k: np.sort(frame.x[frame.k == k].to_numpy()) for k in GROUPS}
    yield plan, exact, ordered
    s.close()


def _rank_failures(accuracy: Any, seed: int) -> tuple[int, int, int]:
    plan, exact, ordered = accuracy
    idx = [a.name for a in plan.aggregates]
    lo_agg, hi_agg = plan.aggregates
    assert isinstance(lo_agg.aggregate, Min) and isinstance(hi_agg.aggregate, Max)
    m_lo, m_hi = plan.measure(lo_agg.measures[0]), plan.measure(hi_agg.measures[0])
    step = 100 / m_lo.grid
    r = int(rank_error(m_lo, NOTE_LEVEL))
    assert r == int(rank_error(m_hi, NOTE_LEVEL)) and 10 < r < USERS_PER_GROUP // 2
    keys = [k for (k,) in plan.public_domain or []]
    min_tol = np.array([ordered[k][r] for k in keys]) + step / 2  # x₍⌊R⌋+1₎ + step/2
    max_tol = np.array([ordered[k][-r - 1] for k in keys]) - step / 2
    fail_lo = fail_hi = 0
    for i in range(K):
        noisy = release(plan, exact, source=SeededRandom(seed + i))
        lo = np.asarray(noisy.columns[idx.index(lo_agg.name)].values, dtype=np.float64)
        hi = np.asarray(noisy.columns[idx.index(hi_agg.name)].values, dtype=np.float64)
        assert ((lo >= 0) & (lo <= 100) & (hi >= 0) & (hi <= 100)).all()  # candidates only
        fail_lo += int((lo > min_tol + 1e-9).sum())
        fail_hi += int((hi < max_tol - 1e-9).sum())
    limit = int(stats.binom.ppf(1 - ALPHA, K * len(keys), 1 - NOTE_LEVEL))
    return fail_lo, fail_hi, limit


def test_min_and_max_within_the_stated_rank_error(accuracy: Any) -> None:
    plan = accuracy[0]
    fail_lo, fail_hi, limit = _rank_failures(accuracy, 100)
    assert fail_lo <= limit and fail_hi <= limit, (fail_lo, fail_hi, limit)
    # the note states the same bound that was tested
    (m, *_) = plan.measures
    noisy = release(plan, accuracy[1], source=SeededRandom(1))
    notes = build_answer(plan, noisy, loss=plan.loss, remaining=plan.loss, charge_id=None)
    note = notes.metadata.notes["lo"]
    stated = float(re.search(r"within ([0-9.]+) of the best", note).group(1))  # type: ignore[union-attr]
    assert stated == pytest.approx(rank_error(m, NOTE_LEVEL), abs=0.05)
    assert "0.95" in note and "at most the minimum" in note


def test_control_min_max_with_a_hundredth_of_epsilon_is_rejected(
    accuracy: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = exponential

    def starved(scores: Any, *, sensitivity: Any, epsilon: Any, source: Any = None) -> Any:
        return real(scores, sensitivity=sensitivity, epsilon=epsilon / 100, source=source)

    monkeypatch.setattr(release_module, "exponential", starved)
    fail_lo, fail_hi, limit = _rank_failures(accuracy, 100)
    assert fail_lo > limit and fail_hi > limit, (fail_lo, fail_hi, limit)


# --- privacy ---------------------------------------------------------------------------

N = 15_000
EPS = 1
MAX_ROWS, UNBOUNDED_ROWS = 2, 10
GRID = 20


def _privacy_data(intruder: float | None) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = [(f"u{u}", float(rng.uniform(30, 70))) for u in range(60)]
    if intruder is not None:
        rows += [("intruder", intruder)] * UNBOUNDED_ROWS
    return pd.DataFrame(rows, columns=["uid", "x"])


@dataclasses.dataclass(frozen=True)
class Histograms:
    measure: Measure
    d: npt.NDArray[np.int64]
    d2: npt.NDArray[np.int64]
    d2_unbounded: npt.NDArray[np.int64]


def _histograms(tmp: Path, aggregate: str, intruder: float) -> Histograms:
    hists = []
    for with_intruder in (False, True):
        s = Session(budget=Epsilon(epsilon=10), ledger=tmp / f"{aggregate}-{with_intruder}.db")
        s.add_table(
            "t",
            _privacy_data(intruder if with_intruder else None),
            privacy_unit="uid",
            bounds={"x": (0, 100)},
            max_rows=MAX_ROWS,
            max_groups=1,
        )
        plan, _, exact = exact_aggregates(
            s,
            f"SELECT {aggregate}(x) AS v FROM t",
            not_private=True,
            epsilon=2 * EPS,  # half for the value (tested here), half for its interval
            quantile_grid=GRID,
        )
        m = plan.measures[0]
        hists.append(exact.histograms[m.id][()])
        if with_intruder:
            loose = dataclasses.replace(plan, max_rows=UNBOUNDED_ROWS)
            _, unbounded = exact_for_plan(s, loose, not_private=True)
            hists.append(unbounded.histograms[m.id][()])
        s.close()
    assert plan.loss == Epsilon(epsilon=2 * EPS) and m.budget == EPS and m.sensitivity == MAX_ROWS
    return Histograms(m, *hists)


def pf_law(
    scores: npt.ArrayLike, sensitivity: Fraction, epsilon: Fraction
) -> npt.NDArray[np.float64]:
    """Permute-and-flip's output law: ``P[r] = p_r·∫₀¹ ∏_{s≠r}(1 − p_s·t) dt``.

    A uniform random order is the order of i.i.d. uniform arrival times; ``r`` is output when
    every candidate arriving before it (each with probability ``t``) is rejected. The
    integrand is a polynomial of degree < 128, integrated exactly by 128 Gauss–Legendre nodes
    (up to float rounding).
    """
    s = np.asarray(scores, dtype=np.float64)
    p = np.exp(-float(epsilon / (2 * sensitivity)) * (s.max() - s))
    assert p.size <= 128
    t, w = np.polynomial.legendre.leggauss(128)
    t, w = (t + 1) / 2, w / 2
    out = np.empty(p.size)
    for r in range(p.size):
        out[r] = p[r] * np.sum(w * np.prod(1 - np.outer(t, np.delete(p, r)), axis=1))
    return out


def _exact_loss(
    h: Histograms, a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], f: int = 1
) -> float:
    m = h.measure
    assert m.q is not None
    pa = pf_law(quantile_scores(a, m.q), m.sensitivity, m.budget * f)
    pb = pf_law(quantile_scores(b, m.q), m.sensitivity, m.budget * f)
    return float(np.max(np.abs(np.log(pa) - np.log(pb))))


_SAMPLES: dict[tuple[object, ...], npt.NDArray[np.int64]] = {}


def _sample(
    h: Histograms, counts: npt.NDArray[np.int64], seed: int, factor: int = 1
) -> npt.NDArray[np.int64]:
    """N releases of the measure on ``counts``, as the release stage draws them (memoised:
    the sample of ``D`` serves the honest estimate and the unbounded control)."""
    key = (h.measure.q, counts.tobytes(), seed, factor)
    if key not in _SAMPLES:
        _SAMPLES[key] = _draw(h, counts, seed, factor)
    return _SAMPLES[key]


def _draw(
    h: Histograms, counts: npt.NDArray[np.int64], seed: int, factor: int
) -> npt.NDArray[np.int64]:
    m = h.measure
    assert m.q is not None
    scores = quantile_scores(counts, m.q)
    src = SeededRandom(seed)
    eps = m.budget * factor
    draws = [
        int(exponential(scores, sensitivity=m.sensitivity, epsilon=eps, source=src).value)
        for _ in range(N)
    ]
    return np.array(draws, dtype=np.int64)


@pytest.fixture(scope="module", params=[("MIN", -1e9), ("MAX", 1e9)], ids=["min", "max"])
def neighbours(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Histograms:
    aggregate, intruder = request.param
    return _histograms(tmp_path_factory.mktemp(aggregate), aggregate, intruder)


@pytest.fixture(scope="module")
def min_neighbours(tmp_path_factory: pytest.TempPathFactory) -> Histograms:
    """The MIN neighbours alone (one control suffices; its sample of ``D`` is memoised)."""
    return _histograms(tmp_path_factory.mktemp("MIN-controls"), "MIN", -1e9)


def test_pf_law_matches_the_library_law_on_small_inputs() -> None:
    scores = [0, -1, -3, 0, -2, -7, -1]
    ours = pf_law(scores, Fraction(2), Fraction(1))
    ref = exponential_probabilities(scores, sensitivity=2, epsilon=1)
    np.testing.assert_allclose(ours, ref, rtol=1e-10)


def test_the_intruder_is_at_the_extreme_candidate(neighbours: Histograms) -> None:
    h = neighbours
    diff = h.d2 - h.d
    end = 0 if h.measure.q == 0 else GRID
    assert diff[end] == MAX_ROWS and diff.sum() == MAX_ROWS
    assert (h.d2_unbounded - h.d)[end] == UNBOUNDED_ROWS


def test_empirical_epsilon_within_the_exact_and_the_charged_loss(neighbours: Histograms) -> None:
    h = neighbours
    exact = _exact_loss(h, h.d, h.d2)
    assert exact <= EPS  # the DP claim itself, on these neighbours (0.499)
    est = estimate_epsilon(_sample(h, h.d, 1), _sample(h, h.d2, 2), alpha=ALPHA)
    assert est.passes(exact + 1e-9), (est, exact)
    assert est.lower > 0.3 * exact, est  # the test has power (measured 0.26)


def test_control_min_with_twice_the_epsilon_is_refuted(min_neighbours: Histograms) -> None:
    h = min_neighbours
    exact = _exact_loss(h, h.d, h.d2)
    est = estimate_epsilon(_sample(h, h.d, 3, 2), _sample(h, h.d2, 4, 2), alpha=ALPHA)
    assert est.refutes(exact), (est, exact)


def test_control_min_without_contribution_bounds_is_refuted(
    min_neighbours: Histograms,
) -> None:
    h = min_neighbours
    assert _exact_loss(h, h.d, h.d2_unbounded) > EPS
    est = estimate_epsilon(_sample(h, h.d, 1), _sample(h, h.d2_unbounded, 6), alpha=ALPHA)
    assert est.refutes(EPS), est

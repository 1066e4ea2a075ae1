"""Value intervals of quantiles, MEDIAN, MIN and MAX: coverage, privacy, accuracy (issue 21 §3).

Coverage. One table, one row per privacy unit (``max_rows = 1``, so the bounded rows are all
rows, clamped to [0, 100]), seven public groups with data of different shapes: uniform,
skewed (log-normal, partly clamped at 100), heavy ties on three values, ties off the
candidate grid, two clusters with the median in the gap, nine rows, and values mostly above
the bound. Each aggregate's released interval must contain every DuckDB answer it stands for
on the clamped column: ``MEDIAN`` and ``QUANTILE_DISC(·, ½)``; ``QUANTILE_CONT`` and
``QUANTILE_DISC`` at 0.1 and 0.75; ``MIN``; ``MAX``. :class:`deniable.query.aggregates.Quantile`
proves coverage ≥ 0.95 per (release, group, aggregate) whatever the data, so the number of
misses over independent seeded releases is stochastically below ``Binomial(N, 0.05)``: the
check ``misses ≤ binom.ppf(1 − 1e-7, N, 0.05)`` fails an honest implementation with
probability below 1e-7. Negative control: the same check with the endpoints' rank margin
shrunk to a tenth of their rank error (monkeypatched ``rank_margin``) must be rejected.
Measured (ε = 1 and 8, N = 10 500): 14 misses (coverage 99.87%), limit 645; with the margin
at ½, ¼ and 1/10 of the rank error: 1 547, 3 264 and 4 688 misses (the union bound over the
candidates is nearly attained on the "few", "gap" and "clamped" shapes, where every wrong
candidate scores alike).

Privacy. As in ``test_query_minmax.py``: ``D`` holds 60 units with one value each in
[30, 70]; ``D'`` adds an intruder with ``max_rows = 2`` rows at a clamping bound. No GROUP BY
(``m = 1``), 21 candidates, score sensitivity ``Δ = 2``. ``MEDIAN`` at ε = 4 (each endpoint
ε = 1) and ``MIN`` at ε = 2 (its upper endpoint ε = 1). The release stage's own calls
(``quantile_scores`` with the endpoint's target, then ``exponential``) are sampled ``N``
times on both histograms and :func:`deniable.audit.estimate_epsilon` gives a lower bound at
α = 1e-7, tested against the exact largest log-ratio of permute-and-flip on these inputs
(``pf_law``), itself at most the charged ε = 1. An honest sampler fails with probability ≤ 1e-7
per estimate. Negative controls (same check): the endpoint drawn with 2ε must refute its
exact loss; the intruder unbounded (``max_rows = 10`` rows while the noise is calibrated for
2) must refute the charged ε = 1. Measured lower bounds (exact loss): MEDIAN's lower endpoint
0.29 (0.55), its upper 0.24 (0.55), MIN's upper 0.36 (0.65); 2ε control 0.85 against 0.65
(N = 40 000: its exact loss, 1.16, is near the honest one); unbounded control 2.30 (exact 2.68).

Accuracy. 2 000 uniform values on [0, 100], grid 100. For each ε the exact law of the
median interval's width follows from the two endpoints' exact output laws (``pf_law``, on
the engine's histogram; the endpoints are independent). The sample median of ``K = 60``
widths lies in the law's [10%, 90%] quantile range except with probability
``6·P[Binomial(60, 0.1) ≥ 30] < 1e-11`` (three ε, two sides); the ranges for ε = 1/8, ½ and
2 are disjoint and ordered (the width shrinks as ε grows: law ranges [21, 28], [6, 8] and
[2, 3]; sample medians 25, 7 and 2, the last mostly the grid's half steps). Negative
control: a rank margin that does not shrink with ε (always the one of ε = 1/32,
monkeypatched into the plan) puts the ε = 2 sample median outside its range.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from scipy import stats
from test_query_minmax import pf_law

import deniable.query.aggregates as aggregates_module
from deniable.accounting.loss import Epsilon
from deniable.audit import estimate_epsilon
from deniable.curator.session import Session
from deniable.mechanisms import exponential
from deniable.noise.testing import SeededRandom
from deniable.query.aggregates import Max, Median, Min, Quantile, rank_error
from deniable.query.measures import HistogramMeasure
from deniable.query.release import quantile_scores, release
from deniable.query.testing import exact_aggregates, exact_for_plan

pytestmark = pytest.mark.stats

ALPHA = 1e-7
LEVEL = 0.95

# --- coverage ---------------------------------------------------------------------------

SHAPES = ("uniform", "skewed", "ties", "ties_off_grid", "gap", "few", "clamped")
COVERAGE_QUERY = (
    "SELECT k, MEDIAN(x) AS med, QUANTILE_CONT(x, 0.1) AS p10, QUANTILE_DISC(x, 0.75) AS p75, "
    "MIN(x) AS lo, MAX(x) AS hi FROM t GROUP BY k"
)
K_COVERAGE = 150
COVERAGE_EPSILONS = (1, 8)


def _shape(name: str, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    if name == "uniform":
        return rng.uniform(10, 90, 400)
    if name == "skewed":
        return rng.lognormal(3.0, 0.8, 400)
    if name == "ties":
        return rng.choice([20.0, 50.0, 80.0], 400, p=[0.25, 0.35, 0.4])
    if name == "ties_off_grid":
        return rng.choice([33.333, 66.667], 400, p=[0.45, 0.55])
    if name == "gap":
        return np.repeat([10.0, 90.0], 200)
    if name == "few":
        return rng.uniform(0, 100, 9)
    return rng.uniform(60, 300, 400)  # "clamped": most values above the upper bound


@pytest.fixture(scope="module")
def coverage(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(2026)
    frames = []
    for name in SHAPES:
        x = _shape(name, rng)
        uid = [f"{name}-{i}" for i in range(len(x))]
        frames.append(pd.DataFrame({"uid": uid, "k": name, "x": x}))
    frame = pd.concat(frames, ignore_index=True)
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path_factory.mktemp("cov") / "l.db")
    s.add_table(
        "t",
        frame,
        privacy_unit="uid",
        bounds={"x": (0, 100)},
        max_groups=1,
        max_rows=1,
        public_keys={"k": list(SHAPES)},
    )
    con = duckdb.connect()
    con.register("raw", frame)
    truth = con.execute(
        "SELECT k, median(c), quantile_disc(c, 0.5), quantile_cont(c, 0.1), "
        "quantile_disc(c, 0.1), quantile_cont(c, 0.75), quantile_disc(c, 0.75), min(c), max(c) "
        "FROM (SELECT k, least(greatest(x, 0.0), 100.0) AS c FROM raw) GROUP BY k"
    ).fetchdf()
    yield s, truth.set_index("k")
    s.close()


def _truths(agg: Any, truth: pd.DataFrame, keys: list[str]) -> npt.NDArray[np.float64]:
    """The DuckDB answers (columns) the aggregate's interval must contain, per key (rows)."""
    cols = {
        Median: ["median(c)", "quantile_disc(c, 0.5)"],
        Min: ["min(c)"],
        Max: ["max(c)"],
    }.get(type(agg))
    if cols is None:
        assert isinstance(agg, Quantile)
        q = float(agg.q)
        cols = [f"quantile_cont(c, {q:g})", f"quantile_disc(c, {q:g})"]
    return truth.loc[keys, cols].to_numpy(dtype=np.float64)


def _coverage_misses(coverage: Any) -> tuple[int, int, dict[str, list[float]]]:
    s, truth = coverage
    misses = trials = 0
    widths: dict[str, list[float]] = {}
    for eps in COVERAGE_EPSILONS:
        plan, _, exact = exact_aggregates(s, COVERAGE_QUERY, not_private=True, epsilon=eps)
        keys = [str(k) for (k,) in plan.public_domain or []]
        wants = [_truths(a.aggregate, truth, keys) for a in plan.aggregates]
        for i in range(K_COVERAGE):
            noisy = release(plan, exact, source=SeededRandom(10_000 * eps + i))
            for col, want in zip(noisy.columns, wants, strict=True):
                assert col.low is not None and col.high is not None
                inside = (col.low[:, None] <= want) & (want <= col.high[:, None])
                misses += int((~inside.all(axis=1)).sum())
                trials += len(keys)
                widths.setdefault(f"{col.name}@{eps}", []).extend((col.high - col.low).tolist())
    return misses, trials, widths


def test_intervals_cover_duckdbs_quantiles_at_the_stated_level(coverage: Any) -> None:
    misses, trials, widths = _coverage_misses(coverage)
    limit = int(stats.binom.ppf(1 - ALPHA, trials, 1 - LEVEL))
    assert misses <= limit, (misses, trials, limit)
    # not the trivial interval: at ε = 8 the median's is far narrower than the range
    assert float(np.median(widths["med@8"])) < 30, widths["med@8"][:10]


def test_control_margin_below_the_rank_error_is_rejected(
    coverage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def shrunk(m: HistogramMeasure, beta: float) -> int:
        return max(1, math.floor(rank_error(m, 1 - beta) * m.q.denominator / 10))

    monkeypatch.setattr(aggregates_module, "rank_margin", shrunk)
    # and claim the planned level anyway (the honest code reports the lower coverage such
    # margins give, and so falls back to the clamping range)
    monkeypatch.setattr(aggregates_module, "interval_level", lambda ends: LEVEL)
    misses, trials, _ = _coverage_misses(coverage)
    limit = int(stats.binom.ppf(1 - ALPHA, trials, 1 - LEVEL))
    assert misses > limit, (misses, trials, limit)


# --- privacy ----------------------------------------------------------------------------

N = 15_000
N_CONTROL = 40_000  # the 2ε control's loss (1.16) is close to the honest one (0.65)
EPS = 1  # each endpoint's ε
MAX_ROWS, UNBOUNDED_ROWS = 2, 10
GRID = 20


@dataclasses.dataclass(frozen=True)
class Endpoint:
    measure: HistogramMeasure
    d: npt.NDArray[np.int64]
    d2: npt.NDArray[np.int64]
    d2_unbounded: npt.NDArray[np.int64]


def _privacy_data(intruder: float | None) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = [(f"u{u}", float(rng.uniform(30, 70))) for u in range(60)]
    if intruder is not None:
        rows += [("intruder", intruder)] * UNBOUNDED_ROWS
    return pd.DataFrame(rows, columns=["uid", "x"])


def _endpoint(tmp: Path, aggregate: str, epsilon: int, sign: int, intruder: float) -> Endpoint:
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
            epsilon=epsilon,
            quantile_grid=GRID,
        )
        (m,) = [x for x in plan.measures if isinstance(x, HistogramMeasure) and x.target * sign > 0]
        hists.append(exact.histograms[m.id][()])
        if with_intruder:
            loose = dataclasses.replace(plan, max_rows=UNBOUNDED_ROWS)
            _, unbounded = exact_for_plan(s, loose, not_private=True)
            hists.append(unbounded.histograms[m.id][()])
        s.close()
    assert plan.loss == Epsilon(epsilon=epsilon) and m.budget == EPS
    assert m.sensitivity == MAX_ROWS
    return Endpoint(m, *hists)


def _law(h: Endpoint, counts: npt.NDArray[np.int64], factor: int = 1) -> npt.NDArray[np.float64]:
    m = h.measure
    return pf_law(quantile_scores(counts, m.q, m.target), m.sensitivity, m.budget * factor)


def _exact_loss(h: Endpoint, b: npt.NDArray[np.int64], factor: int = 1) -> float:
    return float(np.max(np.abs(np.log(_law(h, h.d, factor)) - np.log(_law(h, b, factor)))))


_SAMPLES: dict[tuple[object, ...], npt.NDArray[np.int64]] = {}


def _sample(
    h: Endpoint, counts: npt.NDArray[np.int64], seed: int, factor: int = 1, n: int = N
) -> npt.NDArray[np.int64]:
    """``n`` endpoint choices on ``counts``, drawn as the release stage draws them (memoised)."""
    m = h.measure
    key = (m.q, m.target, counts.tobytes(), seed, factor, n)
    if key not in _SAMPLES:
        scores = quantile_scores(counts, m.q, m.target)
        src = SeededRandom(seed)
        eps = m.budget * factor
        _SAMPLES[key] = np.array(
            [
                int(exponential(scores, sensitivity=m.sensitivity, epsilon=eps, source=src).value)
                for _ in range(n)
            ],
            dtype=np.int64,
        )
    return _SAMPLES[key]


ENDPOINTS = {
    "median-lower-top": ("MEDIAN", 4, -1, 1e9),
    "median-upper-bottom": ("MEDIAN", 4, 1, -1e9),
    "min-upper-bottom": ("MIN", 2, 1, -1e9),
}


@pytest.fixture(scope="module", params=list(ENDPOINTS), ids=list(ENDPOINTS))
def endpoint(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Endpoint:
    aggregate, epsilon, sign, intruder = ENDPOINTS[request.param]
    return _endpoint(tmp_path_factory.mktemp(request.param), aggregate, epsilon, sign, intruder)


@pytest.fixture(scope="module")
def min_upper(tmp_path_factory: pytest.TempPathFactory) -> Endpoint:
    return _endpoint(tmp_path_factory.mktemp("controls"), "MIN", 2, 1, -1e9)


def test_intruder_moves_the_histogram_by_max_rows(endpoint: Endpoint) -> None:
    assert (endpoint.d2 - endpoint.d).sum() == MAX_ROWS
    assert (endpoint.d2_unbounded - endpoint.d).sum() == UNBOUNDED_ROWS


def test_endpoint_empirical_epsilon_within_the_exact_and_the_charged_loss(
    endpoint: Endpoint,
) -> None:
    h = endpoint
    exact = _exact_loss(h, h.d2)
    assert exact <= EPS  # the DP claim itself, on these neighbours
    est = estimate_epsilon(_sample(h, h.d, 1), _sample(h, h.d2, 2), alpha=ALPHA)
    assert est.passes(exact + 1e-9), (est, exact)
    assert est.lower > 0.3 * exact, (est, exact)  # the test has power


def test_control_endpoint_with_twice_the_epsilon_is_refuted(min_upper: Endpoint) -> None:
    h = min_upper
    exact = _exact_loss(h, h.d2)
    a, b = _sample(h, h.d, 3, 2, N_CONTROL), _sample(h, h.d2, 4, 2, N_CONTROL)
    est = estimate_epsilon(a, b, alpha=ALPHA)
    assert est.refutes(exact), (est, exact)


def test_control_endpoint_without_contribution_bounds_is_refuted(min_upper: Endpoint) -> None:
    h = min_upper
    assert _exact_loss(h, h.d2_unbounded) > EPS
    est = estimate_epsilon(_sample(h, h.d, 1), _sample(h, h.d2_unbounded, 6), alpha=ALPHA)
    assert est.refutes(EPS), est


# --- accuracy ---------------------------------------------------------------------------

K_WIDTH = 60
WIDTH_EPSILONS = (Fraction(1, 8), Fraction(1, 2), Fraction(2))


@pytest.fixture(scope="module")
def uniform_session(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    frame = pd.DataFrame(
        {"uid": np.arange(2000), "x": np.random.default_rng(8).uniform(0, 100, 2000)}
    )
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path_factory.mktemp("acc") / "l.db")
    s.add_table("t", frame, privacy_unit="uid", bounds={"x": (0, 100)}, max_groups=1, max_rows=1)
    yield s
    s.close()


def _width_law(plan: Any, exact: Any) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Support and probabilities of the median interval's width (exact endpoint laws)."""
    (agg,) = plan.aggregates
    point, lower, upper = (plan.measure(i) for i in agg.measures)
    counts = exact.histograms[point.id][()]
    idx = np.arange(point.grid + 1)
    step = 100 / point.grid
    slack = step / 2 + 2.0**-40 * (100 + step)
    v = np.where(idx >= point.grid, 100.0, idx * step)
    lo = np.clip(v - slack, 0, 100)
    hi = np.clip(v + slack, 0, 100)
    p_lo = pf_law(quantile_scores(counts, lower.q, lower.target), lower.sensitivity, lower.budget)
    p_hi = pf_law(quantile_scores(counts, upper.q, upper.target), upper.sensitivity, upper.budget)
    # rows: L's candidate, columns: U's; an L above U is released swapped
    low_b = np.minimum(lo[:, None], hi[None, :])
    high_b = np.maximum(lo[:, None], hi[None, :])
    widths = (high_b - low_b).ravel()
    probs = (p_lo[:, None] * p_hi[None, :]).ravel()
    order = np.argsort(widths)
    return widths[order], probs[order] / probs.sum()


def _quantile(widths: npt.NDArray[np.float64], probs: npt.NDArray[np.float64], p: float) -> float:
    return float(widths[np.searchsorted(np.cumsum(probs), p)])


def _median_plan(session: Session, eps: Fraction) -> tuple[Any, Any]:
    plan, _, exact = exact_aggregates(
        session, "SELECT MEDIAN(x) AS m FROM t", not_private=True, epsilon=eps, quantile_grid=100
    )
    return plan, exact


def _width_ranges(session: Session) -> list[tuple[float, float]]:
    """Per ε: the 10% and 90% quantiles of the median interval's exact width law."""
    out = []
    for eps in WIDTH_EPSILONS:
        widths, probs = _width_law(*_median_plan(session, eps))
        out.append((_quantile(widths, probs, 0.1), _quantile(widths, probs, 0.9)))
    return out


def _width_medians(session: Session) -> list[float]:
    """Per ε: the sample median of ``K_WIDTH`` released widths."""
    out = []
    for eps in WIDTH_EPSILONS:
        plan, exact = _median_plan(session, eps)
        sample = []
        for i in range(K_WIDTH):
            col = release(plan, exact, source=SeededRandom(500 + i)).columns[0]
            assert col.low is not None and col.high is not None
            sample.append(float(col.high[0] - col.low[0]))
        out.append(float(np.median(sample)))
    return out


def test_interval_width_shrinks_as_epsilon_grows(uniform_session: Session) -> None:
    ranges = _width_ranges(uniform_session)
    medians = _width_medians(uniform_session)
    for median, (q10, q90) in zip(medians, ranges, strict=True):
        assert q10 <= median <= q90, (medians, ranges)
    for (q10, _), (_, q90_next) in itertools.pairwise(ranges):
        assert q90_next < q10, ranges  # disjoint and ordered: narrower at every larger ε


def test_control_margin_that_ignores_epsilon_is_rejected(
    uniform_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    q10, q90 = _width_ranges(uniform_session)[-1]
    real = aggregates_module.rank_margin

    def fixed(m: HistogramMeasure, beta: float) -> int:  # the margin of ε = 1/32, always
        return real(dataclasses.replace(m, budget=Fraction(1, 32)), beta)

    monkeypatch.setattr(aggregates_module, "rank_margin", fixed)
    median = _width_medians(uniform_session)[-1]
    assert not q10 <= median <= q90, (median, q10, q90)

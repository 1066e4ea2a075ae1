"""Answers fall within their confidence intervals at the stated rate.

The exact bounded aggregates of one query are computed once (test-only hook); the release
stage — noise, post-processing, intervals — is then run ``K`` times with independent seeds.
For each output column the number of (run, group) pairs whose interval misses the truth is
binomial with rate at most ``1 − level`` (intervals are exact or conservative), so the check
``misses ≤ binom.ppf(1 − 1e-7, trials, 1 − level)`` fails an honest implementation with
probability below 1e-7 per column; four columns per test keep it below 1e-6.

The truth is the exact aggregate of the bounded, clamped, fixed-point data (what the noise is
added to). Negative control: the same release with every noise interval narrowed to half its
width; the same check must reject it (miss rates ≈ 0.3 against the allowed 0.1; the honest
run measured 172, 174, 18 and 2 misses of 1800 for count, sum, mean and variance — the last
two are conservative).
For quantiles the claim is the exponential mechanism's utility bound; its control spends a
hundredth of the ε.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import deniable.query.release as release_module
from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.aggregates import Count, Mean, NoisyMeasures, Sum, Variance, rank_error
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates, quantile_scores, release
from deniable.query.testing import exact_aggregates

pytestmark = pytest.mark.stats

K = 600
K_QUANTILE = 300
LEVEL = 0.9
ALPHA = 1e-7
CATS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    rng = np.random.default_rng(9)
    rows = [
        (f"u{u}", CATS[int(rng.integers(0, 3))], float(rng.gamma(2.0, 15.0)))
        for u in range(400)
        for _ in range(int(rng.integers(1, 5)))
    ]
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path_factory.mktemp("acc") / "l.db")
    s.add_table(
        "t",
        pd.DataFrame(rows, columns=["uid", "k", "x"]),
        privacy_unit="uid",
        bounds={"x": (0, 100)},
        max_rows=2,
        public_keys={"k": CATS},
        max_groups=1,
    )
    yield s
    s.close()


def _truth(plan: DPPlan, exact: ExactAggregates) -> dict[str, np.ndarray]:
    index = {k: i for i, k in enumerate(exact.keys)}
    rows = [index[k] for k in plan.public_domain or []]

    def val(mid: str) -> np.ndarray:
        return np.array([float(exact.measures[mid][i]) for i in rows])

    out: dict[str, np.ndarray] = {}
    for a in plan.aggregates:
        ms = [plan.measure(i) for i in a.measures]
        if isinstance(a.aggregate, Count):
            out[a.name] = val(ms[0].id)
        elif isinstance(a.aggregate, Sum):
            out[a.name] = val(ms[0].id) * float(ms[0].row_granularity)
        elif isinstance(a.aggregate, Mean):
            n, s = val(ms[0].id), val(ms[1].id)
            out[a.name] = float(ms[1].row_granularity) * (ms[1].centre + s / n)
        elif isinstance(a.aggregate, Variance):
            n = val(ms[0].id)
            s = val(ms[1].id) * float(ms[1].row_granularity)
            q = val(ms[2].id) * float(ms[2].row_granularity)
            out[a.name] = (q - s * s / n) / (n - 1)
    return out


def _misses(plan: DPPlan, exact: ExactAggregates, truth: dict[str, np.ndarray]) -> dict[str, int]:
    misses = dict.fromkeys(truth, 0)
    for i in range(K):
        noisy = release(plan, exact, source=SeededRandom(1000 + i))
        for col in noisy.columns:
            t = truth[col.name]
            assert col.low is not None and col.high is not None
            # tiny float slack: the truth is computed in doubles too
            slack = 1e-9 * (1 + np.abs(t))
            misses[col.name] += int(((t < col.low - slack) | (t > col.high + slack)).sum())
    return misses


QUERY = "SELECT k, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, VARIANCE(x) AS v FROM t GROUP BY k"


def _threshold() -> int:
    return int(stats.binom.ppf(1 - ALPHA, K * len(CATS), 1 - LEVEL))


def test_intervals_cover_at_the_stated_rate(session: Session) -> None:
    plan, _, exact = exact_aggregates(session, QUERY, not_private=True, epsilon=0.3, level=LEVEL)
    misses = _misses(plan, exact, _truth(plan, exact))
    limit = _threshold()
    assert all(m <= limit for m in misses.values()), (misses, limit)
    # the intervals are not vacuous: counts and sums miss at close to the nominal rate
    assert misses["n"] > 0.5 * (1 - LEVEL) * K * len(CATS)


def test_control_half_width_intervals_are_rejected(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = NoisyMeasures.interval

    def narrow(self, meas, level):  # type: ignore[no-untyped-def]
        lo, hi = real(self, meas, level)
        mid, half = (lo + hi) / 2, (hi - lo) / 4
        return mid - half, mid + half

    monkeypatch.setattr(NoisyMeasures, "interval", narrow)
    plan, _, exact = exact_aggregates(session, QUERY, not_private=True, epsilon=0.3, level=LEVEL)
    misses = _misses(plan, exact, _truth(plan, exact))
    limit = _threshold()
    assert misses["n"] > limit and misses["s"] > limit, (misses, limit)


def _quantile_misses(session: Session, epsilon_factor: float) -> tuple[int, int]:
    q = "SELECT k, MEDIAN(x) AS med FROM t GROUP BY k"
    plan, _, exact = exact_aggregates(
        session, q, not_private=True, epsilon=0.5, level=LEVEL, quantile_grid=100
    )
    m, *_ = plan.measures  # the value's measure (then the interval's endpoints)
    bound = rank_error(m, LEVEL)
    hist = [exact.histograms[m.id][k] for k in plan.public_domain or []]
    scores = [quantile_scores(h, m.q) for h in hist]  # type: ignore[arg-type]
    misses = 0
    for i in range(K_QUANTILE):
        for s in scores:
            pick = release_module.exponential(
                s,
                sensitivity=m.sensitivity,
                epsilon=m.budget * epsilon_factor,
                source=SeededRandom(5000 + i),
            )
            gap = (int(s.max()) - int(s[int(pick.value)])) / m.q.denominator  # type: ignore[union-attr]
            misses += gap > bound
    return misses, K_QUANTILE * len(hist)


def test_quantile_rank_error_holds_at_the_stated_rate(session: Session) -> None:
    misses, trials = _quantile_misses(session, 1.0)
    assert misses <= stats.binom.ppf(1 - ALPHA, trials, 1 - LEVEL)


def test_control_quantile_with_too_little_epsilon_is_rejected(session: Session) -> None:
    misses, trials = _quantile_misses(session, 0.01)
    assert misses > stats.binom.ppf(1 - ALPHA, trials, 1 - LEVEL)

"""Population-scale answers on sampled tables: the interval's algebra, the release path.

Deterministic: seeded sources where randomness is drawn. Coverage and accuracy are tested
statistically in ``tests/stats/test_population_intervals.py``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.errors import InvalidParameter
from deniable.noise.testing import SeededRandom
from deniable.query.answer import Answer
from deniable.sampling.population import (
    sampling_radius,
    scale_total,
    split_level,
    total_interval,
)

BETA = Fraction(1, 4)
pytestmark = pytest.mark.filterwarnings("ignore::deniable.errors.PrivacyWarning")


# ----------------------------------------------------------------------------- the algebra


def _inside(t: float, beta: float, bound: float, alpha: float, low: float, high: float) -> bool:
    """Whether ``T = t`` satisfies both defining conditions of the interval."""
    r = float(sampling_radius(t, rate=beta, bound=bound, alpha=alpha))
    return beta * t - r <= max(high, 0.0) and beta * t + r >= low


def test_closed_form_is_the_defining_set() -> None:
    # [T₋, T₊] = {T ≥ 0 : βT − t(T) ≤ high and βT + t(T) ≥ low}: both ends are in the set,
    # and points just beyond them are not (2000 random cases over a wide range).
    rng = np.random.default_rng(3)
    for _ in range(2000):
        p = (
            float(rng.uniform(0.01, 0.99)),  # β
            float(rng.uniform(0.5, 50)),  # R
            float(10 ** rng.uniform(-8, -1)),  # α
        )
        low = float(rng.uniform(-100, 1e5))
        high = low + float(rng.uniform(0, 1e4))
        out = total_interval([low], [high], rate=p[0], bound=p[1], alpha=p[2])
        lo, hi = float(out[0][0]), float(out[1][0])
        step = 1e-7 * (hi - lo + 1)
        assert _inside(hi - step, *p, low, high)
        assert lo == 0 or _inside(lo + step, *p, low, high)
        assert not _inside(hi * (1 + 1e-6) + 1e-6, *p, low, high)
        assert lo == 0 or not _inside(lo * (1 - 1e-6) - 1e-6, *p, low, high)


def test_the_true_total_is_inside_when_both_events_hold() -> None:
    # Direct reading of the union bound: whenever |S − βT| ≤ t(T) and S ∈ [low, high],
    # T is inside. Exhaustive over a grid of totals and sample totals.
    beta, bound, alpha = 0.3, 2.0, 0.05
    for total in np.linspace(0, 500, 51):
        r = float(sampling_radius(total, rate=beta, bound=bound, alpha=alpha))
        for s in np.linspace(beta * total - r, beta * total + r, 7):
            lo, hi = total_interval([s - 3.0], [s + 3.0], rate=beta, bound=bound, alpha=alpha)
            assert lo[0] <= total <= hi[0], (total, s)


def test_no_sampling_means_the_noise_interval() -> None:
    lo, hi = total_interval([3.0, -2.0], [7.0, 1.0], rate=1, bound=5.0, alpha=0.05)
    assert lo.tolist() == [3.0, 0.0] and hi.tolist() == [7.0, 1.0]


def test_interval_widens_with_smaller_alpha_and_rate() -> None:
    a = total_interval([100.0], [110.0], rate=0.5, bound=1.0, alpha=0.05)
    b = total_interval([100.0], [110.0], rate=0.5, bound=1.0, alpha=0.001)
    c = total_interval([100.0], [110.0], rate=0.4, bound=1.0, alpha=0.05)
    assert b[0][0] < a[0][0] and b[1][0] > a[1][0]
    # The centre moves with 1/β; the width grows.
    assert c[1][0] - c[0][0] > a[1][0] - a[0][0]


@pytest.mark.parametrize(
    ("rate", "bound", "alpha"),
    [(0, 1.0, 0.1), (1.5, 1.0, 0.1), (0.5, 0.0, 0.1), (0.5, math.inf, 0.1), (0.5, 1.0, 0.0)],
)
def test_bad_parameters_are_refused(rate: float, bound: float, alpha: float) -> None:
    with pytest.raises(InvalidParameter):
        total_interval([1.0], [2.0], rate=rate, bound=bound, alpha=alpha)


def test_split_level_and_scaling() -> None:
    noise, alpha = split_level(0.95)
    assert math.isclose(noise, 0.975) and math.isclose(alpha, 0.025)
    with pytest.raises(InvalidParameter):
        split_level(1.0)
    assert scale_total([3, 5], BETA).tolist() == [12.0, 20.0]


# ----------------------------------------------------------------------------- release path

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS s, COUNT(DISTINCT uid) AS u FROM t GROUP BY g"


def _table() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    uid = np.repeat(np.arange(400), 2)
    return pd.DataFrame({"uid": uid, "g": uid % 4, "x": rng.integers(-3, 11, uid.size)})


def _session(
    path: Path, seed: int = 1, *, sample_rate: Fraction | None = BETA, name: str = "ledger"
) -> Session:
    s = Session(budget=Epsilon(epsilon=100), ledger=path / f"{name}.db", source=SeededRandom(seed))
    s.add_table(
        "t",
        _table(),
        privacy_unit="uid",
        bounds={"x": (0, 10)},
        max_groups=1,
        max_rows=2,
        public_keys={"g": [0, 1, 2, 3]},
        sample_rate=sample_rate,
    )
    return s


def _ask(s: Session, query: str, *, population: bool, **options: object) -> Answer:
    return s.execute(s.compile(query, **options), population=population)  # type: ignore[arg-type]


def test_values_are_the_sample_values_over_beta(tmp_path: Path) -> None:
    # Same seed, same sample, same noise: population values are exactly sample values / β,
    # and the population interval at 0.9 is total_interval of the noise interval at 0.95.
    with _session(tmp_path, seed=5, name="a") as a:
        sample = _ask(a, QUERY, population=False, epsilon=3, level=0.95)
    with _session(tmp_path, seed=5, name="b") as b:
        pop = _ask(b, QUERY, population=True, epsilon=3, level=0.9)
    fs, fp = sample.frame, pop.frame
    for col, bound in (("n", 2.0), ("s", 20.0), ("u", 1.0)):
        np.testing.assert_array_equal(fp[col].to_numpy(), fs[col].to_numpy() / 0.25)
        lo, hi = total_interval(
            fs[f"{col}_low"], fs[f"{col}_high"], rate=BETA, bound=bound, alpha=0.05
        )
        np.testing.assert_allclose(fp[f"{col}_low"].to_numpy(), lo, rtol=1e-12)
        np.testing.assert_allclose(fp[f"{col}_high"].to_numpy(), hi, rtol=1e-12)
        assert (fp[f"{col}_low"] <= fp[col]).all() and (fp[col] <= fp[f"{col}_high"]).all()
    assert pop.metadata.population and not sample.metadata.population
    assert "Horvitz" in pop.metadata.notes["(population)"]
    assert "population estimate" in pop.mechanisms["n"]
    assert "population estimates" in pop.summary()
    # Same charge either way: scaling is post-processing.
    assert pop.loss == sample.loss


def test_negative_sums_by_symmetry(tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        a = _ask(
            s,
            "SELECT g, SUM(x) AS s FROM t GROUP BY g",
            population=True,
            epsilon=2,
            bounds={"x": (-10, 0)},
        )
    f = a.frame
    assert (
        (f["s_high"] <= 0).all() and (f["s_low"] <= f["s"]).all() and (f["s"] <= f["s_high"]).all()
    )


@pytest.mark.parametrize(
    ("query", "bounds", "match"),
    [
        ("SELECT AVG(x) AS m FROM t", None, "AVG is a ratio"),
        ("SELECT MEDIAN(x) AS m FROM t", None, "quantiles"),
        ("SELECT MAX(x) AS m FROM t", None, "quantiles"),
        ("SELECT VARIANCE(x) AS v FROM t", None, "VARIANCE"),
        ("SELECT STDDEV(x) AS v FROM t", None, "VARIANCE"),
        ("SELECT COUNT(DISTINCT x) AS d FROM t", None, "not a sum over privacy units"),
        ("SELECT SUM(x) AS s FROM t", {"x": (-3, 10)}, "straddle 0"),
        ("SELECT COUNT(*) AS n, AVG(x) AS m FROM t", None, "cannot answer m"),
    ],
)
def test_unsupported_aggregates_are_refused_and_cost_nothing(
    tmp_path: Path, query: str, bounds: dict[str, tuple[int, int]] | None, match: str
) -> None:
    with _session(tmp_path) as s:
        before = s.budget.spent
        with pytest.raises(InvalidParameter, match=match):
            _ask(s, query, population=True, epsilon=1, bounds=bounds)
        assert s.budget.spent == before
        # The same query without population=True is answered (it describes the sample).
        _ask(s, query, population=False, epsilon=1, bounds=bounds)


def test_population_answers_replay_apart(tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        first = _ask(s, QUERY, population=True, epsilon=1)
        again = _ask(s, QUERY, population=True, epsilon=1)
        assert again.cached and again.loss == Epsilon(epsilon=0)
        assert again.metadata.population
        pd.testing.assert_frame_equal(first.frame, again.frame)
        # The sample-scale answer is a different stored answer (a fresh charge).
        other = _ask(s, QUERY, population=False, epsilon=1)
        assert not other.cached and not other.metadata.population


def test_stored_answer_keeps_the_flag(tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        a = _ask(s, QUERY, population=True, epsilon=1)
    back = Answer.from_bytes(a.to_bytes(), loss=a.loss, remaining=a.remaining, cached=True)
    assert back.metadata.population


def test_unsampled_table_is_already_the_population(tmp_path: Path) -> None:
    with _session(tmp_path, sample_rate=None) as s:
        a = _ask(s, QUERY, population=True, epsilon=1)
        assert not a.metadata.population and "(population)" not in a.metadata.notes
        # Same stored answer as without the option: no second charge.
        b = _ask(s, QUERY, population=False, epsilon=1)
        assert b.cached
        pd.testing.assert_frame_equal(a.frame, b.frame)


def test_expressions_over_population_totals(tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        a = _ask(
            s,
            "SELECT g, SUM(x) / COUNT(*) AS r, COUNT(*) * 2 AS n2 FROM t GROUP BY g",
            population=True,
            epsilon=4,
        )
    f = a.frame
    assert ((f["r_low"] <= f["r"]) & (f["r"] <= f["r_high"])).all()
    assert ((f["n2_low"] <= f["n2"]) & (f["n2"] <= f["n2_high"])).all()


# ----------------------------------------------------------------------------- session


def test_session_sql_population(tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        pop = s.sql(QUERY, epsilon=1, population=True)
        assert pop.metadata.population and "(population)" in pop.metadata.notes
        sample = s.sql(QUERY, epsilon=1)
        assert not sample.metadata.population
        # Scaled: the population counts are about 1/β = 4 times the sample's.
        assert pop.frame["n"].sum() > 2.5 * sample.frame["n"].sum()
        with pytest.raises(InvalidParameter, match="AVG"):
            s.sql("SELECT AVG(x) AS m FROM t", epsilon=1, population=True)

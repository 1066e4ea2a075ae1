"""The synthetic-data comparison's data generators and error measure (benchmarks/).

``benchmarks/synth_data.py`` must give both systems the same discrete table every time (fixed
seed), codes inside the declared public domains, and the dependencies the comparison relies on
(an independent table would make every synthesizer look good); ``marginal_tv`` in
``benchmarks/synth_compare.py`` must be the mean total variation over all k-way marginals.
No randomness is asserted on: generators are seeded, so every check is exact.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from deniable.datasets import events
from synth_compare import marginal_tv
from synth_data import CENSUS_COLUMNS, census_like, events_workload


def _within_domain(frame: pd.DataFrame, cards: dict[str, int]) -> bool:
    return all(int(frame[c].min()) >= 0 and int(frame[c].max()) < k for c, k in cards.items())


def test_census_like_is_deterministic_and_in_domain() -> None:
    a, b = census_like(5000, seed=3), census_like(5000, seed=3)
    pd.testing.assert_frame_equal(a.frame, b.frame)
    assert not census_like(5000, seed=4).frame.equals(a.frame)
    assert list(a.frame.columns) == list(CENSUS_COLUMNS)
    assert a.cardinalities == {c: len(v) for c, v in CENSUS_COLUMNS.items()}
    assert _within_domain(a.frame, a.cardinalities)
    assert (a.frame.dtypes == np.int64).all()
    assert a.columns(6).cardinalities == dict(list(a.cardinalities.items())[:6])


def test_census_like_has_its_dependencies() -> None:
    # Seeded, so exact; the margins are wide: an independent column would give ≈ 0 gaps.
    f = census_like(20_000, seed=24).frame
    grad = f.loc[f.education >= 6, "income"].mean()
    low = f.loc[f.education <= 2, "income"].mean()
    assert grad - low > 2.0  # education → income (8 brackets)
    young_never = (f.loc[f.age == 0, "marital"] == 0).mean()
    old_never = (f.loc[f.age >= 6, "marital"] == 0).mean()
    assert young_never > 0.9 > 0.2 > old_never  # age → marital status
    not_working_zero = (f.loc[f.occupation == 0, "hours"] == 0).mean()
    working_zero = (f.loc[f.occupation != 0, "hours"] == 0).mean()
    assert not_working_zero > 0.8 and working_zero < 0.01  # occupation → hours
    # and a pair meant to be (almost) independent stays so: sex × region
    table = pd.crosstab(f.sex, f.region, normalize="columns")
    row = table.to_numpy()[0]
    assert float(row.max() - row.min()) < 0.05


def test_events_workload_bins_the_benchmark_table() -> None:
    d = events_workload(4000, seed=5)
    raw = events(4000, seed=5)
    np.testing.assert_array_equal(d.frame["category"], raw.column("category").to_numpy())
    value = raw.column("value").to_numpy()
    bins = d.frame["value"].to_numpy()
    assert _within_domain(d.frame, d.cardinalities)
    assert (bins[value <= 0] == 0).all() and (bins[value >= 200] == 15).all()  # clamped
    inside = (value > 0) & (value < 200)
    np.testing.assert_array_equal(bins[inside], np.floor(value[inside] / 12.5).astype(np.int64))


def test_marginal_tv() -> None:
    x = np.array([[0, 0, 0], [1, 1, 1], [0, 1, 0], [1, 0, 1]])
    assert marginal_tv(x, x, [2, 2, 2], 2) == 0.0
    flipped = x.copy()
    flipped[:, 2] = 1 - x[:, 2]  # third column inverted
    # pairs (0,1): unchanged (0); (0,2): column 2 copied column 0, now its negation, so the
    # supports are disjoint (1); (1,2): uniform over the 4 cells before and after (0)
    assert marginal_tv(x, flipped, [2, 2, 2], 2) == pytest.approx(1 / 3)
    assert marginal_tv(x, flipped, [2, 2, 2], 3) == pytest.approx(1.0)
    assert np.isnan(marginal_tv(x[:, :2], x[:, :2], [2, 2], 3))

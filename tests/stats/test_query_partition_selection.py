"""Partition selection never releases a key held by a single user more often than δ allows.

A table holds one key used by a single person (who may touch ``max_groups = 2`` groups) and
keys used by hundreds. The exact number of units per group comes from the engine (test-only
hook); selection is then run many times on it — through ``partition.select``, the function the
release path calls, vectorised, and through the whole release stage. The count of releases of
the lonely key is binomial with rate ``π(1) ≤ δ/m``; the check ``count ≤ binom.ppf(1 − 1e-7,
N, δ/m)`` fails an honest implementation with probability below 1e-7 per check (two checks
per test function: below 1e-6).

Negative control: the same rule run at ``(ε, δ)`` per group instead of ``(ε/m, δ/m)`` —
forgetting that one person can be in ``m`` groups — must be rejected (rate δ = 2× the bound).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import deniable.query.partition as partition
from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.release import release
from deniable.query.testing import exact_aggregates

pytestmark = pytest.mark.stats

N = 400_000
N_PIPELINE = 2_000
ALPHA = 1e-7
DELTA = 0.02
EPS = 1.0
QUERY = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"


@pytest.fixture(scope="module")
def selection(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    rows = [(f"u{u}", k) for u in range(600) for k in ("big", "bigger")]
    rows.append(("loner", "lonely"))
    s = Session(
        budget=EpsilonDelta(epsilon=10, delta=0.5), ledger=tmp_path_factory.mktemp("sel") / "l.db"
    )
    s.add_table("t", pd.DataFrame(rows, columns=["uid", "k"]), privacy_unit="uid", max_groups=2)
    plan, _, exact = exact_aggregates(s, QUERY, not_private=True, epsilon=EPS, delta=DELTA)
    yield plan, exact
    s.close()


def _lonely_units(exact) -> int:  # type: ignore[no-untyped-def]
    return int(exact.units[exact.keys.index(("lonely",))])


def test_single_user_key_is_released_at_most_at_rate_delta(selection) -> None:  # type: ignore[no-untyped-def]
    plan, exact = selection
    sel = plan.selection
    assert sel is not None and sel.max_groups == 2 and float(sel.delta) == DELTA
    assert _lonely_units(exact) == 1
    units = np.full(N, _lonely_units(exact))
    kept = partition.select(
        units,
        epsilon=sel.epsilon,
        delta=sel.delta,
        max_groups=sel.max_groups,
        source=SeededRandom(1),
    )
    bound = float(sel.delta) / sel.max_groups
    assert int(kept.sum()) <= stats.binom.ppf(1 - ALPHA, N, bound)
    # and through the whole release stage, big keys always kept
    lonely = 0
    for i in range(N_PIPELINE):
        out = release(plan, exact, source=SeededRandom(10_000 + i))
        assert ("big",) in out.keys and ("bigger",) in out.keys
        lonely += ("lonely",) in out.keys
    assert lonely <= stats.binom.ppf(1 - ALPHA, N_PIPELINE, bound)


def test_control_forgetting_max_groups_is_rejected(selection) -> None:  # type: ignore[no-untyped-def]
    plan, exact = selection
    sel = plan.selection
    units = np.full(N, _lonely_units(exact))
    kept = partition.select(
        units, epsilon=sel.epsilon, delta=sel.delta, max_groups=1, source=SeededRandom(2)
    )
    bound = float(sel.delta) / sel.max_groups
    assert int(kept.sum()) > stats.binom.ppf(1 - ALPHA, N, bound)

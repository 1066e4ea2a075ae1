"""Whole-query auditor on synthetic vector mechanisms (fast; seeded; α = 1e-7 throughout).

Honest audits here fail with probability ≤ 1e-7 each (the auditor's guarantee); seeds are
fixed, so the outcomes are deterministic anyway. Every "caught" case is a negative control.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from deniable.audit import (
    NeighbourPair,
    QuerySampler,
    audit_query,
    audit_query_pairs,
    audit_release,
    estimate_query_loss,
    repeat,
)
from deniable.errors import InvalidParameter
from deniable.mechanisms import geometric
from deniable.noise.testing import SeededRandom


def counts(values: list[int], *, sensitivity: int, epsilon: float, seed: int) -> QuerySampler:
    src = SeededRandom(seed)

    def sampler(n: int) -> npt.NDArray[np.int64]:
        x = np.tile(values, n)
        out = geometric(x, sensitivity=sensitivity, epsilon=epsilon, source=src).value
        return np.asarray(out).reshape(n, -1)

    return sampler


def test_honest_vector_query_passes_with_power() -> None:
    # one unit moves four counts by 1 each: L1 sensitivity 4
    a = counts([10, 20, 30, 40, 50], sensitivity=4, epsilon=1, seed=1)
    b = counts([11, 21, 31, 41, 50], sensitivity=4, epsilon=1, seed=2)
    result = audit_query(a, b, trials=60_000, claimed=1.0)
    assert result.passed and result.lower > 0.5, result.describe()


def test_joint_events_beat_single_coordinates() -> None:
    """Noise for one coordinate's sensitivity on four moving coordinates (true ε = 4·0.5)."""
    a = counts([10, 20, 30, 40], sensitivity=1, epsilon=0.5, seed=3)
    b = counts([11, 21, 31, 41], sensitivity=1, epsilon=0.5, seed=4)
    result = audit_query(a, b, trials=60_000, claimed=1.0)
    assert not result.passed
    assert "likelihood-ratio" in result.loss.events[0].event  # a combination found it
    single = audit_query(a, b, trials=60_000, claimed=1.0, max_coordinates=1)
    assert single.lower > 1.0  # Bonferroni count unchanged; the combination still wins


def test_deterministic_leak_is_caught() -> None:
    a = repeat(lambda: [1.0, 5.0])
    b = repeat(lambda: [1.0, 6.0])
    result = audit_query(a, b, trials=20_000, claimed=3.0)
    assert not result.passed and result.lower > 5


def test_pairs_split_alpha_and_take_the_worst() -> None:
    honest = NeighbourPair(
        "honest",
        counts([5], sensitivity=1, epsilon=1, seed=5),
        counts([6], sensitivity=1, epsilon=1, seed=6),
    )
    leaky = NeighbourPair(
        "leaky",
        counts([5], sensitivity=1, epsilon=3, seed=7),
        counts([6], sensitivity=1, epsilon=3, seed=8),
    )
    result = audit_query_pairs([honest, leaky], trials=40_000, claimed=1.0, alpha=1e-7)
    (l1, e1), (l2, e2) = result.pairs
    assert (l1, l2) == ("honest", "leaky")
    assert e1.alpha == e2.alpha == pytest.approx(5e-8)
    assert result.lower == e2.lower > 1.0 >= e1.lower
    doc = result.describe()
    assert doc["verdict"] == "fail" and doc["claimed_epsilon"] == 1.0
    assert len(doc["pairs"]) == 2  # type: ignore[arg-type]


def test_audit_release_runs_the_slow_path() -> None:
    src = SeededRandom(9)

    def release(data: list[int]) -> npt.NDArray[np.int64]:
        return np.asarray(geometric(data, sensitivity=1, epsilon=1, source=src).value)

    result = audit_release(release, [([3, 3], [3, 4])], trials=3_000, claimed=1.0)
    assert result.passed and result.trials == 3_000


def test_rho_claims() -> None:
    from deniable.mechanisms import discrete_gaussian

    def gauss(v: int, rho: float, seed: int) -> QuerySampler:
        src = SeededRandom(seed)
        return lambda n: np.asarray(
            discrete_gaussian([v] * n, sensitivity=1, rho=rho, source=src).value
        ).reshape(n, 1)

    ok = audit_query(gauss(0, 0.5, 1), gauss(1, 0.5, 2), trials=40_000, claimed=0.5, measure="rho")
    assert ok.passed and ok.describe()["measure"] == "rho"
    bad = audit_query(gauss(0, 4, 3), gauss(1, 4, 4), trials=40_000, claimed=0.5, measure="rho")
    assert not bad.passed


def test_invalid_inputs() -> None:
    a = repeat(lambda: [1.0])
    with pytest.raises(InvalidParameter):
        audit_query(a, repeat(lambda: [1.0, 2.0]), trials=100, claimed=1.0)
    with pytest.raises(InvalidParameter):
        audit_query(a, a, trials=100, claimed=math.inf)
    with pytest.raises(InvalidParameter):
        audit_query(a, a, trials=5, claimed=1.0)
    with pytest.raises(InvalidParameter):
        audit_query_pairs([], trials=100, claimed=1.0)
    with pytest.raises(InvalidParameter):
        estimate_query_loss(np.zeros((100, 2)), np.zeros((100, 2)), names=["x"])
    with pytest.raises(InvalidParameter):
        estimate_query_loss(np.full((100, 1), np.nan), np.zeros((100, 1)))
    with pytest.raises(InvalidParameter):
        audit_query(lambda n: np.zeros((n - 1, 1)), a, trials=100, claimed=1.0)
    with pytest.raises(InvalidParameter):
        estimate_query_loss(np.zeros((100, 1)), np.zeros((100, 1)), measure="rho", delta=0.1)


def test_identical_outputs_show_nothing() -> None:
    est = estimate_query_loss(np.zeros((1000, 3)), np.zeros((1000, 3)))
    assert est.lower == 0.0 and est.events == ()

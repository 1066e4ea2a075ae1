from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from deniable.errors import InvalidParameter
from deniable.noise.exact import exp_neg_bounds
from deniable.noise.testing import SeededRandom
from deniable.query.partition import keep_probabilities, select

CASES = [
    (Fraction(1), Fraction(1, 10**6)),
    (Fraction(1, 10), Fraction(1, 10**9)),
    (Fraction(3), Fraction(1, 100)),
    (Fraction(1, 2), Fraction(1, 2)),
]


@pytest.mark.parametrize(("eps", "delta"), CASES)
def test_keep_probabilities_satisfy_every_dp_constraint_exactly(
    eps: Fraction, delta: Fraction
) -> None:
    table = keep_probabilities(eps, delta)
    _, hi = exp_neg_bounds(eps, 200)
    e_eps_low = Fraction(2**200, hi)  # ≤ e^ε: checking with it is the stronger test
    pi = [table.probability(n) for n in range(table.certain_from + 2)]
    assert pi[0] == 0 and pi[-1] == 1
    for a, b in itertools.pairwise(pi):
        assert a <= b  # monotone, so the reverse constraints hold
        assert b <= e_eps_low * a + delta  # P[keep | n+1] ≤ e^ε P[keep | n] + δ
        assert 1 - a <= e_eps_low * (1 - b) + delta  # P[drop | n] ≤ e^ε P[drop | n+1] + δ
    # A key held by one unit is kept with probability δ (up to the 2^-64 rounding).
    assert delta - Fraction(1, 2**64) <= pi[1] <= delta


def test_keep_probabilities_are_near_the_optimum() -> None:
    eps, delta = 1.0, 1e-6
    table = keep_probabilities(Fraction(eps), Fraction(delta))
    p = 0.0
    for n in range(1, table.certain_from + 1):
        p = min(math.exp(eps) * p + delta, 1 - math.exp(-eps) * (1 - p - delta), 1.0)
        assert abs(float(table.probability(n)) - p) < 1e-9
    # π reaches 1 after about ln(1/δ)/ε steps, not much more
    assert table.certain_from < 3 * math.log(1 / delta) / eps


def test_select_keeps_large_partitions_and_never_empty_ones() -> None:
    units = np.array([0, 0, 10_000, 10_000, 1])
    mask = select(
        units, epsilon=Fraction(1), delta=Fraction(1, 10**9), max_groups=1, source=SeededRandom(1)
    )
    assert mask.tolist()[:4] == [False, False, True, True]


def test_select_divides_by_max_groups() -> None:
    table_1 = keep_probabilities(Fraction(1), Fraction(1, 100))
    table_4 = keep_probabilities(Fraction(1, 4), Fraction(1, 400))
    assert table_4.probability(1) < table_1.probability(1)
    units = np.full(200_000, 1)
    kept = select(
        units, epsilon=Fraction(1), delta=Fraction(1, 100), max_groups=4, source=SeededRandom(2)
    )
    # rate δ/4 = 0.0025; 200000 draws: mean 500, far below the δ = 0.01 rate (2000)
    assert 350 < int(kept.sum()) < 650


def test_select_refuses_bad_parameters() -> None:
    with pytest.raises(InvalidParameter):
        keep_probabilities(Fraction(0), Fraction(1, 10))
    with pytest.raises(InvalidParameter):
        keep_probabilities(Fraction(1), Fraction(0))
    with pytest.raises(InvalidParameter):
        select([1], epsilon=Fraction(1), delta=Fraction(1, 10), max_groups=0)

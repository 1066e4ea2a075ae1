from __future__ import annotations

import itertools
import math
import time
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from deniable.errors import InvalidParameter
from deniable.noise.exact import exp_neg_bounds
from deniable.noise.testing import SeededRandom
from deniable.query import partition
from deniable.query.partition import check_selection, keep_probabilities, select

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


# --- exactness at any δ: an independent evaluation of the paper's recurrence -------------

_P = 2048  # fixed-point bits of the reference: far finer than the module's (≤ 900 here)


def _exp_bounds(eps: Fraction) -> tuple[Fraction, Fraction]:
    """``lo ≤ e^ε ≤ hi`` from the Taylor series in fixed point (independent of the module)."""
    a, b = eps.numerator, eps.denominator
    one = 1 << _P
    lo_term, hi_term, lo, hi, i = one, one, one, one, 0
    while True:
        i += 1
        lo_term = lo_term * a // (b * i)  # ≤ the true term: floors of lower bounds
        hi_term = -((-hi_term * a) // (b * i))  # ≥ the true term
        lo += lo_term
        hi += hi_term
        if i >= 2 * eps and hi_term <= 1:
            # the ratio of consecutive terms is now ≤ 1/2: the tail is ≤ the last term
            hi += hi_term
            break
    return Fraction(lo, one), Fraction(hi, one)


def _reference(eps: Fraction, delta: Fraction, steps: int) -> tuple[list[Fraction], list[Fraction]]:
    """Lower and upper brackets of the exact optimal π (Theorem 1) for ``steps`` steps.

    The map ``p ↦ min(e^ε p + δ, 1 − e^(−ε)(1 − p − δ), 1)`` is non-decreasing in ``p``;
    iterating it with ``e^ε`` rounded down (up) and the result floored (ceiled) on a 2^-2048
    grid gives a lower (upper) bound of the exact π at every step.
    """
    e_lo, e_hi = _exp_bounds(eps)
    one = 1 << _P

    def run(e: Fraction, up: bool) -> list[Fraction]:
        out, p = [Fraction(0)], Fraction(0)
        for _ in range(steps):
            a = e * p + delta
            if 1 - p - delta > 0:
                a = min(a, 1 - (1 - p - delta) / e)
            x = min(a, Fraction(1)) * one
            p = Fraction(math.ceil(x) if up else math.floor(x), one)
            out.append(p)
        return out

    return run(e_lo, up=False), run(e_hi, up=True)


DEEP_CASES = [
    (Fraction(1), Fraction(1, 10**200), 1),
    (Fraction(1), Fraction(1, 10**100), 3),
    (Fraction(1), Fraction(1, 10**30), 5),
    (Fraction(2), Fraction(1, 10**12), 1),
    (Fraction(1, 10), Fraction(1, 10**9), 1),
    (Fraction(1, 2), Fraction(1, 2), 1),
]


@pytest.mark.parametrize(("eps", "delta", "m"), DEEP_CASES)
def test_keep_probabilities_follow_the_paper_recurrence_at_any_delta(
    eps: Fraction, delta: Fraction, m: int
) -> None:
    e, d = eps / m, delta / m
    table = keep_probabilities(e, d)
    n_star = table.certain_from
    pi = [table.probability(n) for n in range(n_star + 2)]
    e_lo, _ = _exp_bounds(e)  # ≤ e^ε and far tighter than the module's: the stronger check
    # π(1) is δ/m up to a relative 2^-60, and never above it.
    assert d * (1 - Fraction(1, 2**60)) <= pi[1] <= d
    assert pi[0] == 0 and pi[n_star - 1] < 1 and pi[n_star] == pi[-1] == 1
    for a, b in itertools.pairwise(pi):
        assert a <= b  # non-decreasing, so the reverse constraints hold too
        assert b <= e_lo * a + d  # P[keep | n+1] ≤ e^ε P[keep | n] + δ
        assert 1 - a <= e_lo * (1 - b) + d  # P[drop | n] ≤ e^ε P[drop | n+1] + δ
    # Near the optimum: π(n) ≤ π*(n), and within a relative 2^-40 of it.
    lower, upper = _reference(e, d, n_star + 1)
    for n in range(n_star + 2):
        ref_lo, ref_hi = lower[min(n, n_star + 1)], upper[min(n, n_star + 1)]
        assert pi[n] <= ref_hi
        assert pi[n] >= ref_lo * (1 - Fraction(1, 2**40))
    # and reaches 1 when the optimum does (within one step of rounding)
    assert upper[n_star - 1] < 1 and lower[n_star - 1] < 1


def test_tiny_delta_is_charged_exactly_not_floored_at_2_to_minus_64() -> None:
    # δ = 1e-30 over 5 groups: per-partition δ = 2e-31 < 2^-64 ≈ 5.4e-20.
    check_selection(Fraction(1), Fraction(1, 10**30), 5)
    table = keep_probabilities(Fraction(1, 5), Fraction(1, 5 * 10**30))
    d = Fraction(1, 5 * 10**30)
    grid = 1 << table.bits
    assert table.bits % 64 == 0 and d * grid >= 2**64  # a grid fine enough for δ
    assert table.probability(1) == Fraction(grid // (5 * 10**30), grid)  # exact floor
    assert table.probability(1) < Fraction(1, 2**64)  # the old rule released 2^-64 > δ/m
    # float δ is read as the decimal the user typed (what is charged), never a hair above it
    assert keep_probabilities(1.0, 0.02).probability(1) <= Fraction(1, 50)


class _Script:
    """A scripted source: hands out the queued words call by call, and records the calls."""

    secure = False

    def __init__(self, *calls: list[int]) -> None:
        self._calls = [np.array(c, dtype=np.uint64) for c in calls]
        self.sizes: list[int] = []

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        self.sizes.append(n)
        out = self._calls.pop(0)
        assert out.size == n
        return out

    def exhausted(self) -> bool:
        return not self._calls


def test_multi_word_draw_compares_the_binary_expansion_lexicographically() -> None:
    eps, delta = Fraction(1), Fraction(1, 10**100)
    table = keep_probabilities(eps, delta)
    w = table.bits // 64
    assert w >= 3
    t = [table.word(2, j) for j in range(w)]  # π(2): leading words are 0, last ones are not
    assert t[0] == 0 and 0 < t[-1] < 2**64 - 1 and 0 < t[-2] < 2**64 - 1
    big = table.certain_from
    # level 0: [equal throughout, tie then below, tie then above, above, n ≥ n* with 2^64−1,
    # n = 0 with word 0 (π(0) = 0 is never kept however many words tie)]
    units = [2, 2, 2, 2, big, 0]
    first = [t[0], t[0], t[0], t[0] + 1, 2**64 - 1, 0]
    calls = [first]
    # tied on level 0: elements 0, 1, 2 (and 5, n = 0, whose words are all 0)
    calls.append([t[1], t[1], t[1], 0])
    for j in range(2, w - 1):
        calls.append([t[j], t[j], t[j], 0])
    calls.append([t[-1], t[-1] - 1, t[-1] + 1, 0])  # last level decides elements 1 and 2
    src = _Script(*calls)
    mask = select(units, epsilon=eps, delta=delta, max_groups=1, source=src)
    assert mask.tolist() == [False, True, False, False, True, False]
    assert src.exhausted() and src.sizes == [6] + [4] * (w - 1)


def test_ties_draw_only_the_words_they_need() -> None:
    eps, delta = Fraction(1), Fraction(1, 3)  # π(1) = floor(2^128/3)/2^128: two words
    table = keep_probabilities(eps, delta)
    assert table.bits == 128
    t0, t1 = table.word(1, 0), table.word(1, 1)
    src = _Script([t0 - 1, t0, t0 + 1], [t1])  # one tie; its second word equals π's: dropped
    mask = select([1, 1, 1], epsilon=eps, delta=delta, max_groups=1, source=src)
    assert mask.tolist() == [True, False, False] and src.sizes == [3, 1]
    src = _Script([t0], [t1 - 1])
    assert select([1], epsilon=eps, delta=delta, max_groups=1, source=src).tolist() == [True]


def test_tiny_or_meaningless_delta_is_refused_before_anything_is_drawn() -> None:
    tiny = Fraction(1, 10**300)
    for check in (
        lambda: check_selection(Fraction(1), tiny, 2),
        lambda: check_selection(Fraction(1), tiny * 3, 4),
        lambda: keep_probabilities(Fraction(1), tiny / 2),
        lambda: select([1], epsilon=Fraction(1), delta=tiny, max_groups=2, source=_Script()),
        lambda: check_selection(Fraction(1), Fraction(1), 1),
        lambda: check_selection(Fraction(1), Fraction(3, 2), 2),
        lambda: check_selection(Fraction(0), Fraction(1, 10), 1),
        lambda: check_selection(Fraction(1), Fraction(1, 10), 0),
        lambda: check_selection(Fraction(1), Fraction(1, 10), True),
        lambda: check_selection(float("nan"), Fraction(1, 10), 1),
    ):
        with pytest.raises(InvalidParameter):
            check()
    # the smallest accepted δ per partition still gives an exact π(1)
    check_selection(Fraction(1), tiny, 1)
    table = keep_probabilities(Fraction(1), tiny)
    assert tiny * (1 - Fraction(1, 2**60)) <= table.probability(1) <= tiny


def test_too_many_steps_is_refused_at_once() -> None:
    start = time.perf_counter()
    with pytest.raises(InvalidParameter, match="ten million steps"):
        check_selection(Fraction(1, 10**9), Fraction(1, 10**10), 1)
    with pytest.raises(InvalidParameter, match="ten million steps"):
        select([1], epsilon=Fraction(1, 10**7), delta=Fraction(1, 10**10), max_groups=100)
    assert time.perf_counter() - start < 1.0


def test_check_selection_refuses_exactly_what_select_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A small step cap exercises the loop's own refusal (the early bound cannot see it).
    monkeypatch.setattr(partition, "_MAX_STEPS", 100)
    partition._table.cache_clear()
    try:
        params = [
            (Fraction(1, 20), Fraction(1, 10**3), 1),  # 132 steps (bound 79): the loop refuses
            (Fraction(1), Fraction(1, 10**3), 1),  # ~13 steps: accepted
            (Fraction(1, 100), Fraction(1, 10**6), 1),  # early refusal
            (Fraction(15), Fraction(1, 10**30), 5),  # ~46 steps at (3, 2e-31)
            (Fraction(1), Fraction(1, 10**301), 1),
        ]
        for eps, delta, m in params:
            refused = False
            try:
                check_selection(eps, delta, m)
            except InvalidParameter:
                refused = True
            if refused:
                with pytest.raises(InvalidParameter):
                    select([1], epsilon=eps, delta=delta, max_groups=m, source=_Script())
            else:
                select([1], epsilon=eps, delta=delta, max_groups=m, source=SeededRandom(0))
            assert refused == (
                (eps, delta)
                in {
                    (Fraction(1, 20), Fraction(1, 10**3)),
                    (Fraction(1, 100), Fraction(1, 10**6)),
                    (Fraction(1), Fraction(1, 10**301)),
                }
            )
    finally:
        partition._table.cache_clear()

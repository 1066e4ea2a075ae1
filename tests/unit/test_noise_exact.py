"""Exact arithmetic under the samplers: rational conversion, certified bounds of e^(−x),
rational bounds of logs and exponentials, and the lazily refined uniform.

References are computed independently with :mod:`decimal` at 120 significant digits (its
``exp`` and ``ln`` are correctly rounded), far beyond the precision the bounds claim.
"""

from __future__ import annotations

import math
import random
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest

from deniable.errors import InvalidParameter
from deniable.noise.exact import (
    LazyUniform,
    exp_lower,
    exp_neg_bound_fn,
    exp_neg_bounds,
    exp_upper,
    log_upper,
    positive_fraction,
    rational_bounds,
    to_fraction,
)
from deniable.noise.source import U64
from deniable.noise.testing import SeededRandom

PREC = 120


def _dec(f: Fraction) -> Decimal:
    return Decimal(f.numerator) / Decimal(f.denominator)


def _exp_neg_scaled(x: Fraction, k: int) -> Decimal:
    """``e^(−x)·2^k`` to ``PREC`` digits (call inside a localcontext)."""
    return (-_dec(x)).exp() * (Decimal(2) ** k)


# ----------------------------------------------------------------------------- to_fraction


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # A float is read as the shortest decimal that prints as it, not its dyadic value.
        (0.5, Fraction(1, 2)),
        (0.1, Fraction(1, 10)),  # not the double 3602879701896397 / 2^55
        (0.1 + 0.2, Fraction(30000000000000004, 10**17)),  # prints as 0.30000000000000004
        (1e23, Fraction(10**23)),  # not the double 99999999999999991611392
        (2**-30, Fraction(9313225746154785, 10**25)),  # prints as 9.313225746154785e-10
        (5e-324, Fraction(5, 10**324)),  # not 2^-1074
        (-0.0, Fraction(0)),
        (7, Fraction(7)),
        (Fraction(1, 3), Fraction(1, 3)),
        (Fraction(1, 2**1074), Fraction(1, 2**1074)),  # a Fraction is taken as it is
        (np.float64(0.25), Fraction(1, 4)),
        (np.float64(0.1), Fraction(1, 10)),
    ],
)
def test_to_fraction_is_exact(value: object, expected: Fraction) -> None:
    assert to_fraction(value, "x") == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, None, "1", object()])
def test_to_fraction_refuses(value: object) -> None:
    with pytest.raises(InvalidParameter):
        to_fraction(value, "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, 0.0, -1e-300, Fraction(-1, 3)])
def test_positive_fraction_refuses_non_positive(value: object) -> None:
    with pytest.raises(InvalidParameter):
        positive_fraction(value, "scale")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- bounds


@pytest.mark.parametrize(
    "p", [Fraction(0), Fraction(1), Fraction(1, 3), Fraction(22, 7), Fraction(5, 2**70)]
)
@pytest.mark.parametrize("k", [0, 1, 64, 200])
def test_rational_bounds_are_floor_and_ceil(p: Fraction, k: int) -> None:
    lo, hi = rational_bounds(p)(k)
    scaled = p * 2**k
    assert lo == math.floor(scaled) and hi == math.ceil(scaled)


def _exp_cases() -> list[Fraction]:
    rng = random.Random(20240611)
    xs = [
        Fraction(0),
        Fraction(1, 10**9),
        Fraction(1, 3),
        Fraction(1),
        Fraction(7, 3),
        Fraction(10),
        Fraction(44),
        Fraction(100),
        Fraction(745),  # e^-745 is the last subnormal double
        Fraction(1000),
        Fraction(12345, 7),
        Fraction(2**20 + 1, 2**20),
        Fraction(10**6 + 1, 10**6),
    ]
    xs += [Fraction(rng.randrange(0, 10**7), rng.randrange(1, 10**5)) for _ in range(60)]
    xs += [Fraction(rng.randrange(0, 2**64), 2**64) for _ in range(20)]
    return xs


@pytest.mark.parametrize("k", [0, 1, 10, 31, 53, 64, 128, 300])
def test_exp_neg_bounds_enclose_the_true_value(k: int) -> None:
    with localcontext() as ctx:
        ctx.prec = PREC
        for x in _exp_cases():
            lo, hi = exp_neg_bounds(x, k)
            ref = _exp_neg_scaled(x, k)
            assert lo <= ref <= hi, f"e^-{x}·2^{k} = {ref} not in [{lo}, {hi}]"
            assert 0 <= lo <= hi and hi - lo <= 2, f"bounds too wide at x={x}, k={k}"


def test_exp_neg_bounds_agree_with_math_exp() -> None:
    # Independent of decimal: math.exp is within an ulp (2^-52 relative).
    for x in _exp_cases():
        if x > 700:
            continue
        for k in (10, 30, 50):
            lo, hi = exp_neg_bounds(x, k)
            approx = math.exp(-float(x)) * 2.0**k
            slack = approx * 1e-14 + 1e-300
            assert lo - slack <= approx <= hi + slack


def test_exp_neg_bounds_far_tail_and_huge_precision() -> None:
    with localcontext() as ctx:
        ctx.prec = 1200
        # e^-5000 ≈ 2^-7213: below the precision the bounds are 0 and 1; above, tight.
        assert exp_neg_bounds(Fraction(5000), 100) == (0, 1)
        lo, hi = exp_neg_bounds(Fraction(5000), 7300)
        ref = _exp_neg_scaled(Fraction(5000), 7300)
        assert lo <= ref <= hi and hi - lo <= 2
        # Very high precision of a moderate value.
        lo, hi = exp_neg_bounds(Fraction(1, 3), 3000)
        ref = _exp_neg_scaled(Fraction(1, 3), 3000)
        assert lo <= ref <= hi and hi - lo <= 2


def test_exp_neg_bounds_refuses_negative() -> None:
    with pytest.raises(InvalidParameter):
        exp_neg_bounds(Fraction(-1, 2), 10)


# ----------------------------------------------------------------------------- log / exp bounds


def _ln(x: Fraction) -> Decimal:
    return Decimal(x.numerator).ln() - Decimal(x.denominator).ln()


@pytest.mark.parametrize(
    "x",
    [Fraction(0.6) / Fraction(0.4), Fraction(0.75) / Fraction(0.25),
     Fraction(0.99) / Fraction(0.01), Fraction(3), (1 + Fraction(0.3)) / (1 - Fraction(0.3)),
     Fraction(19), Fraction(1, 3), Fraction(10**6)],
    ids=["rr 0.6", "rr 0.75", "rr 0.99", "coin 1/2", "coin 0.3", "rr 0.95", "1/3", "1e6"],
)  # fmt: skip
def test_log_upper_bounds_the_losses_in_use(x: Fraction) -> None:
    # The ratios randomized response takes logs of (p/(1−p), (1+q)/(1−q)).
    with localcontext() as ctx:
        ctx.prec = PREC
        exact = _ln(x)
        bound = _dec(log_upper(x))
        assert bound >= exact
        assert bound - exact < Decimal(2) ** -40 * (1 + abs(exact))


def test_log_upper_is_an_upper_bound() -> None:
    rng = random.Random(7)
    xs = [Fraction(224567098, 208662719), Fraction(2**60 + 2**10, 2**60)]
    xs += [Fraction(rng.randrange(1, 2**20), rng.randrange(1, 2**20)) for _ in range(400)]
    with localcontext() as ctx:
        ctx.prec = PREC
        below = [x for x in xs if _dec(log_upper(x)) < _ln(x)]
        assert not below, f"log_upper below ln for {len(below)} of {len(xs)}, e.g. {below[:3]}"


def test_exp_upper_and_lower_enclose_e_to_the_x_for_moderate_x() -> None:
    rng = random.Random(11)
    with localcontext() as ctx:
        ctx.prec = PREC
        for _ in range(500):
            x = Fraction(rng.randrange(-20 * 10**9, 20 * 10**9), 10**9) + Fraction(1, 3 * 10**10)
            exact = _dec(x).exp()
            assert _dec(exp_lower(x)) <= exact <= _dec(exp_upper(x)), f"x = {x}"
            assert exp_lower(x) >= 0


@pytest.mark.parametrize(
    ("x", "which"),
    [
        (Fraction(100 * 10**12 + 1, 10**12), "upper"),
        (Fraction(50 * 10**12 + 1, 5 * 10**11), "lower"),
    ],
    ids=["exp_upper(100+1e-12)", "exp_lower(100+2e-12)"],
)
def test_exp_bounds_for_large_x(x: Fraction, which: str) -> None:
    with localcontext() as ctx:
        ctx.prec = PREC
        exact = _dec(x).exp()
        if which == "upper":
            assert _dec(exp_upper(x)) >= exact
        else:
            assert _dec(exp_lower(x)) <= exact


# ----------------------------------------------------------------------------- LazyUniform


class CountingSource:
    """A seeded source that counts the words it hands out."""

    secure = False

    def __init__(self, seed: int) -> None:
        self._inner = SeededRandom(seed)
        self.words_drawn = 0

    def words(self, n: int) -> U64:
        self.words_drawn += n
        return self._inner.words(n)


def test_lazy_uniform_draws_nothing_when_the_prefix_decides() -> None:
    src = CountingSource(1)
    third = rational_bounds(Fraction(1, 3))
    assert LazyUniform(0, src).less_than(third)  # U' < 2^-64 < 1/3
    assert not LazyUniform(2**64 - 1, src).less_than(third)
    assert LazyUniform(5, src, 32).less_than(exp_neg_bound_fn(Fraction(1)))
    assert src.words_drawn == 0


def test_lazy_uniform_refines_only_on_the_threshold() -> None:
    src = CountingSource(2)
    p = Fraction(1, 3)
    w = (2**64) // 3  # U' ∈ [w, w+1)/2^64 contains 1/3
    LazyUniform(w, src).less_than(rational_bounds(p))
    assert 1 <= src.words_drawn <= 2  # one more word settles it but for a 2^-64 chance


def test_lazy_uniform_answers_consistently() -> None:
    """Comparisons with many thresholds, in random order, describe one single number U'."""
    rng = random.Random(3)
    one_third = Fraction(1, 3)
    for trial in range(300):
        src = SeededRandom(trial)
        u = LazyUniform((2**64) // 3, src)  # right on 1/3: every comparison needs refinement
        # Thresholds within 2^-200 of 1/3, on both sides, and e^-x ones nearby.
        offsets = sorted({rng.randrange(-(2**20), 2**20) for _ in range(12)})
        thresholds = [one_third + Fraction(o, 2**200) for o in offsets]
        order = list(range(len(thresholds)))
        rng.shuffle(order)
        answers: dict[int, bool] = {}
        for i in order:
            answers[i] = u.less_than(rational_bounds(thresholds[i]))
            # The same question again gets the same answer.
            assert u.less_than(rational_bounds(thresholds[i])) == answers[i]
        below = [answers[i] for i in range(len(thresholds))]
        # U' < v is monotone in v: False…False True…True.
        assert below == sorted(below), f"inconsistent answers {below}"


def test_lazy_uniform_exp_and_rational_thresholds_agree() -> None:
    # e^-1 is bracketed by rationals 2^-300 apart; U' on e^-1 must fall on one side of all.
    lo, hi = exp_neg_bounds(Fraction(1), 300)
    below_e, above_e = Fraction(lo, 2**300), Fraction(hi, 2**300)
    for seed in range(200):
        u = LazyUniform(exp_neg_bounds(Fraction(1), 64)[0], SeededRandom(seed))
        a = u.less_than(rational_bounds(below_e))
        b = u.less_than(exp_neg_bound_fn(Fraction(1)))
        c = u.less_than(rational_bounds(above_e))
        assert (a, b, c) in {(False, False, False), (False, False, True), (False, True, True),
                             (True, True, True)}  # fmt: skip

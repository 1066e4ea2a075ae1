"""Certified bounds: every interval contains the true value, and is tight.

The oracle is the standard library's ``decimal`` at 80 significant digits (its exp, ln and
sqrt are correctly rounded), which is independent of the integer series under test.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable.accounting.bounds import (
    exp_interval,
    expm1_interval,
    ln_interval,
    log1p_interval,
    round_down,
    round_up,
    sqrt_interval,
)

CTX = decimal.Context(prec=80, Emin=-(10**6), Emax=10**6)


def dec(q: Fraction) -> decimal.Decimal:
    return CTX.divide(decimal.Decimal(q.numerator), decimal.Decimal(q.denominator))


def d_expm1(x: decimal.Decimal) -> decimal.Decimal:
    # Called under decimal.localcontext(CTX) (see check), so operators use 80 digits.
    if x < decimal.Decimal("1e-20"):  # Taylor: x + x²/2 + x³/6 is exact to 80 digits here
        return CTX.add(x, CTX.add(CTX.multiply(x, x) / 2, CTX.power(x, 3) / 6))
    return CTX.subtract(CTX.exp(x), 1)


def d_log1p(y: decimal.Decimal) -> decimal.Decimal:
    if y < decimal.Decimal("1e-20"):
        return CTX.subtract(y, CTX.subtract(CTX.multiply(y, y) / 2, CTX.power(y, 3) / 3))
    return CTX.ln(CTX.add(y, 1))


ORACLES: dict[
    str, tuple[Callable[[Fraction], tuple[Fraction, Fraction]], Callable[..., decimal.Decimal]]
] = {
    "sqrt": (sqrt_interval, CTX.sqrt),
    "exp": (exp_interval, CTX.exp),
    "expm1": (expm1_interval, d_expm1),
    "ln": (ln_interval, CTX.ln),
    "log1p": (log1p_interval, d_log1p),
}

POINTS = [
    Fraction(1, 3),
    Fraction(0.1),
    Fraction(2**-30),
    Fraction(5e-324),
    Fraction(1, 2),
    Fraction(7, 10),
    Fraction(1),
    Fraction(2),
    Fraction(3),
    Fraction(10),
    Fraction(1000),
    Fraction(1, 10**400),
    Fraction(10**6 + 1, 3),
]


def check(name: str, x: Fraction) -> None:
    fn, oracle = ORACLES[name]
    lo, hi = fn(x)
    with decimal.localcontext(CTX):  # operators below use CTX, not the 28-digit default
        truth = oracle(dec(x))
        slack = abs(truth) * decimal.Decimal("1e-70")
        assert dec(lo) <= truth + slack, (name, x)
        assert truth - slack <= dec(hi), (name, x)
    # Tight: about 2^-90 relative (the working precision is 100 bits).
    assert hi - lo <= abs(hi) * Fraction(1, 2**85), (name, x)


@pytest.mark.parametrize("name", sorted(ORACLES))
@pytest.mark.parametrize("x", POINTS, ids=lambda q: f"{float(q):.3g}")
def test_interval_contains_truth(name: str, x: Fraction) -> None:
    if name in ("exp", "expm1") and x > 1000:
        x = Fraction(2000, 3)  # keep the decimal oracle quick
    if name == "ln" and x == 0:
        return
    check(name, x)


def test_negative_exp_and_small_ln() -> None:
    with decimal.localcontext(CTX):
        for x in [Fraction(1, 3), Fraction(3), Fraction(1000)]:
            lo, hi = exp_interval(-x)
            assert dec(lo) <= CTX.exp(-dec(x)) <= dec(hi)
        for x in [Fraction(1, 3), Fraction(5e-324), Fraction(999, 1000)]:
            lo, hi = ln_interval(x)
            assert dec(lo) <= CTX.ln(dec(x)) <= dec(hi)


def test_huge_exponent_stays_tight() -> None:
    lo, hi = exp_interval(Fraction(10**6 + 1, 3))
    assert 0 < hi - lo <= hi * Fraction(1, 2**85)
    lo, hi = expm1_interval(Fraction(10**6 + 1, 3))
    assert 0 < hi - lo <= hi * Fraction(1, 2**85)


def test_exact_points() -> None:
    assert sqrt_interval(Fraction(9, 4)) == (Fraction(3, 2), Fraction(3, 2))
    assert exp_interval(Fraction(0)) == (Fraction(1), Fraction(1))
    assert ln_interval(Fraction(1)) == (Fraction(0), Fraction(0))
    assert expm1_interval(Fraction(0)) == (Fraction(0), Fraction(0))
    assert log1p_interval(Fraction(0)) == (Fraction(0), Fraction(0))


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    # x = n/d in [1e-12, 200]
    st.builds(Fraction, st.integers(1, 2 * 10**12), st.integers(10**10, 10**12)),
    st.sampled_from(sorted(ORACLES)),
)
def test_random_points(x: Fraction, name: str) -> None:
    check(name, x)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.builds(Fraction, st.integers(-(10**40), 10**40), st.integers(1, 10**20)),
    st.integers(2, 80),
)
def test_rounding_is_directed_and_short(q: Fraction, bits: int) -> None:
    up, down = round_up(q, bits), round_down(q, bits)
    assert down <= q <= up
    for r in (up, down):
        if r != 0:
            # r = m·2^e with |m| < 2^bits: its numerator (or denominator's power) shows it.
            m = abs(r.numerator)
            while m % 2 == 0:
                m //= 2
            assert m.bit_length() <= bits
            assert r.denominator & (r.denominator - 1) == 0  # dyadic
    if q != 0:
        assert abs(up - down) <= abs(q) * Fraction(1, 2 ** (bits - 2))


def test_round_to_53_bits_is_a_float() -> None:
    for q in [Fraction(1, 3), Fraction(2, 7) * 10**20, Fraction(1, 10**300)]:
        assert Fraction(float(round_up(q))) == round_up(q)
        assert Fraction(float(round_down(q))) == round_down(q)

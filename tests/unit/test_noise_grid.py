"""The power-of-two grid of real-valued releases (:mod:`deniable.noise.grid`), checked against
exact :class:`fractions.Fraction` arithmetic."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

from deniable.errors import InvalidParameter
from deniable.noise.grid import (
    GRID_UNITS_LOG2,
    grid_exponent,
    grid_sensitivity,
    snap,
    unsnap,
)

TINY = 5e-324  # 2^-1074, the smallest positive double


def _scales() -> list[float | Fraction | int]:
    rng = random.Random(5)
    out: list[float | Fraction | int] = [
        1e-3, 1, 1.0, 1e6, Fraction(1, 3), 0.1, 2.0**20, 2.0**21 - 2.0**-32, 2.0**-1074 * 3,
        1e300, Fraction(7, 3), Fraction(2**80 + 1, 3**40), 2**100, 1.7976931348623157e308,
    ]  # fmt: skip
    out += [math.ldexp(rng.random() + 0.5, rng.randrange(-1000, 1000)) for _ in range(200)]
    out += [Fraction(rng.randrange(1, 10**12), rng.randrange(1, 10**12)) for _ in range(200)]
    return out


def test_grid_exponent_puts_the_scale_in_2_20_to_2_21_units() -> None:
    for s in _scales():
        e = grid_exponent(s)
        units = Fraction(s) / Fraction(2) ** e
        assert 2**GRID_UNITS_LOG2 <= units < 2 ** (GRID_UNITS_LOG2 + 1), f"scale {s}: e = {e}"


@pytest.mark.parametrize(
    ("scale", "expected"), [(1e-3, -30), (1, -20), (1e6, -1), (Fraction(1, 3), -22)]
)
def test_grid_exponent_examples(scale: float | Fraction, expected: int) -> None:
    # 1e-3 ∈ [2^-10, 2^-9), 1e6 ∈ [2^19, 2^20), 1/3 ∈ [2^-2, 2^-1).
    assert grid_exponent(scale) == expected


def test_grid_exponent_other_unit_counts() -> None:
    for s in _scales()[:50]:
        e = grid_exponent(s, 12)
        assert 2**12 <= Fraction(s) / Fraction(2) ** e < 2**13


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, -math.inf, Fraction(-1, 2)])
def test_grid_exponent_refuses_bad_scales(bad: float | Fraction) -> None:
    with pytest.raises(InvalidParameter):
        grid_exponent(bad)


def test_grid_exponent_depends_only_on_the_scale() -> None:
    # Same scale written three ways: same grid.
    assert grid_exponent(0.5) == grid_exponent(Fraction(1, 2)) == grid_exponent(Fraction(2, 4))


# ----------------------------------------------------------------------------- snap / unsnap


def _round_half_even(x: float, e: int) -> int:
    return round(Fraction(x) / Fraction(2) ** e)  # Fraction.__round__ rounds half to even


SNAP_VALUES = [
    0.0, -0.0, 1.0, TINY, -TINY, 1e15 + 0.5, -(1e15 + 0.5), 0.5, 1.5, 2.5, -2.5, 0.1, 1 / 3,
    2.0**-20 * 1.5, 2.0**-20 * 2.5, 123456.789, 2.0**52, 2.0**60,
]  # fmt: skip


@pytest.mark.parametrize("e", [-30, -20, -1, 0, 3, -60, -1074, -1100])
def test_snap_is_exact_round_half_even(e: int) -> None:
    values = [v for v in SNAP_VALUES if abs(Fraction(v) / Fraction(2) ** e) < 2**900]
    got = snap(np.array(values), e)
    expected = [_round_half_even(v, e) for v in values]
    assert [int(u) for u in got] == expected


@pytest.mark.parametrize(
    ("value", "e"),
    [(1e15 + 0.5, -30), (1e300, -20), (2.0**60 + 2.0**8, -10), (-(2.0**70), -40), (1e200, -300)],
)
def test_snap_large_unit_counts_use_python_ints(value: float, e: int) -> None:
    got = snap(np.array([value, 1.0]), e)
    assert [int(u) for u in got] == [_round_half_even(value, e), _round_half_even(1.0, e)]
    if abs(Fraction(value) / Fraction(2) ** e) >= 2**63:
        assert isinstance(got, list) and all(isinstance(u, int) for u in got)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize(("value", "e"), [(1e308, -30), (-1.7e308, -20)])
def test_snap_values_beyond_the_double_range_in_units(value: float, e: int) -> None:
    got = snap(np.array([value]), e)
    assert [int(u) for u in got] == [_round_half_even(value, e)]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_snap_refuses_non_finite(bad: float) -> None:
    with pytest.raises(InvalidParameter):
        snap(np.array([1.0, bad]), -20)


def test_snap_keeps_int64_for_ordinary_values() -> None:
    got = snap(np.array([[0.25, -3.0], [TINY, 1e6]]), -20)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64 and got.shape == (2, 2)


def test_snap_moves_by_at_most_half_a_grid_step() -> None:
    rng = np.random.default_rng(0)  # test data only
    x = rng.standard_normal(10_000) * 1e3
    for e in (-30, -20, -5, 2):
        units = snap(x, e)
        assert isinstance(units, np.ndarray)
        err = np.abs(np.ldexp(units.astype(np.float64), e) - x)
        assert (err <= 2.0**e / 2).all()


def test_grid_sensitivity_covers_rounding() -> None:
    """Neighbours at distance ≤ Δ snap at most ``grid_sensitivity`` units apart, and it is
    not looser than one unit beyond Δ/g."""
    rng = random.Random(9)
    for _ in range(3000):
        e = rng.randrange(-40, 5)
        delta = math.ldexp(rng.random() + 0.01, rng.randrange(-30, 10))
        x = rng.uniform(-1e6, 1e6)
        x2 = x + rng.uniform(-delta, delta)
        if abs(x2 - x) > delta:  # float rounding of the sum
            continue
        units = snap(np.array([x, x2]), e)
        s = grid_sensitivity(delta, e)
        assert abs(int(units[0]) - int(units[1])) <= s
        assert s <= Fraction(delta) / Fraction(2) ** e + 1


def test_grid_sensitivity_examples() -> None:
    assert grid_sensitivity(1, -20) == 2**20 + 1
    assert grid_sensitivity(0.75, 0) == 1
    assert grid_sensitivity(Fraction(1, 3), -2) == 2


@pytest.mark.parametrize("e", [-30, -20, -1, 0, 4])
def test_unsnap_returns_exact_multiples(e: int) -> None:
    rng = np.random.default_rng(e + 100)  # test data only
    units = rng.integers(-(2**40), 2**40, size=1000)
    out = unsnap(units, e)
    assert out.dtype == np.float64
    for u, v in zip(units[:200], out[:200], strict=True):
        assert Fraction(float(v)) == Fraction(int(u)) * Fraction(2) ** e


def test_unsnap_python_ints_round_to_a_multiple_of_the_grid() -> None:
    e = -30
    units = [_round_half_even(1e15 + 0.5, e) + k for k in (-(2**25), -1, 0, 1, 3, 2**40)]
    out = unsnap(units, e)
    for u, v in zip(units, out, strict=True):
        assert math.isfinite(v)
        exact = Fraction(u) * Fraction(2) ** e
        assert (Fraction(float(v)) / Fraction(2) ** e).denominator == 1  # a multiple of 2^e
        # The nearest double: no double strictly closer to the exact multiple.
        assert abs(Fraction(float(v)) - exact) <= Fraction(math.ulp(float(v))) / 2


def test_snap_unsnap_roundtrip_on_grid_values() -> None:
    e = -20
    values = np.ldexp(np.arange(-5000, 5000, 7, dtype=np.float64), e)
    units = snap(values, e)
    assert np.array_equal(unsnap(units, e), values)

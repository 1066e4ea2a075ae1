"""Contracts of the samplers that are not statistical: parameter checks, shapes, dtypes,
edge sizes, and the public names."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest

import deniable.noise as noise
from deniable.errors import InvalidParameter
from deniable.noise import (
    bernoulli,
    bernoulli_exp_neg,
    discrete_gaussian,
    discrete_laplace,
    geometric,
    random_bits,
    uniform_int,
)
from deniable.noise.testing import SeededRandom


def test_public_names_exist() -> None:
    for name in noise.__all__:
        assert hasattr(noise, name), f"__all__ lists {name} but it does not exist"


INT_SAMPLERS: dict[str, Callable[[int], np.ndarray]] = {
    "geometric": lambda n: geometric(2, n, source=SeededRandom(1)),
    "discrete_laplace": lambda n: discrete_laplace(Fraction(1, 3), n, source=SeededRandom(1)),
    "discrete_laplace_wide": lambda n: discrete_laplace(2**21, n, source=SeededRandom(1)),
    "discrete_gaussian": lambda n: discrete_gaussian(2, n, source=SeededRandom(1)),
    "discrete_gaussian_cks": lambda n: discrete_gaussian(2**40, n, source=SeededRandom(1)),
    "uniform_int": lambda n: uniform_int(10, n, source=SeededRandom(1)),
}


@pytest.mark.parametrize("name", sorted(INT_SAMPLERS))
@pytest.mark.parametrize("size", [0, 1, 2, 63, 64, 65, 40_000])
def test_integer_samplers_shape_and_dtype(name: str, size: int) -> None:
    out = INT_SAMPLERS[name](size)
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.int64 and out.shape == (size,)


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 1000])
def test_bool_samplers_shape(size: int) -> None:
    for out in (
        bernoulli(Fraction(1, 3), size, source=SeededRandom(2)),
        bernoulli_exp_neg(Fraction(1, 3), size, source=SeededRandom(2)),
        random_bits(size, source=SeededRandom(2)),
    ):
        assert out.dtype == np.bool_ and out.shape == (size,)


BAD_SCALES = [0, -1, -0.5, math.nan, math.inf, -math.inf, True, None, "1/3", Fraction(-1, 3)]


@pytest.mark.parametrize("bad", BAD_SCALES, ids=repr)
@pytest.mark.parametrize("sampler", [geometric, discrete_laplace, discrete_gaussian])
def test_bad_scales_are_refused(sampler: Callable[..., np.ndarray], bad: object) -> None:
    with pytest.raises(InvalidParameter):
        sampler(bad, 3)


def test_scales_beyond_the_supported_range_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        discrete_laplace(2**32 + 1, 3)
    with pytest.raises(InvalidParameter):
        geometric(Fraction(2**33), 3)
    with pytest.raises(InvalidParameter):
        discrete_gaussian(2**60 + 1, 3)


@pytest.mark.parametrize("p", [-0.1, 1.0000001, Fraction(4, 3), math.nan, math.inf, True])
def test_bernoulli_refuses_p_outside_0_1(p: object) -> None:
    with pytest.raises(InvalidParameter):
        bernoulli(p, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize("gamma", [-1, Fraction(-1, 10**9), math.nan, math.inf])
def test_bernoulli_exp_neg_refuses_bad_gamma(gamma: object) -> None:
    with pytest.raises(InvalidParameter):
        bernoulli_exp_neg(gamma, 3)  # type: ignore[arg-type]


def test_bernoulli_exp_neg_needs_a_size_for_one_gamma() -> None:
    with pytest.raises(InvalidParameter):
        bernoulli_exp_neg(Fraction(1))


def test_bernoulli_exp_neg_sequence_gives_one_draw_per_gamma() -> None:
    out = bernoulli_exp_neg([Fraction(0), Fraction(10**6), Fraction(0)], source=SeededRandom(3))
    assert out.tolist() == [True, False, True]


@pytest.mark.parametrize("high", [0, -1, 2**63, 2**63 + 1, True, 1.5, None])
def test_uniform_int_refuses_bad_high(high: object) -> None:
    with pytest.raises(InvalidParameter):
        uniform_int(high, 3)  # type: ignore[arg-type]


def test_uniform_int_of_one_is_zero() -> None:
    assert not uniform_int(1, 100, source=SeededRandom(4)).any()


def test_laplace_is_symmetric_and_gaussian_even_in_law_on_a_seed() -> None:
    # Cheap sanity on a fixed stream (the statistical tests check the laws themselves).
    x = discrete_laplace(3, 20_000, source=SeededRandom(5))
    assert abs(int((x > 0).sum()) - int((x < 0).sum())) < 1000
    y = discrete_gaussian(9, 20_000, source=SeededRandom(5))
    assert abs(int((y > 0).sum()) - int((y < 0).sum())) < 1000

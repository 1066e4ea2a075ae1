"""Real-valued releases on the power-of-two grid (``deniable.mechanisms.laplace``).

1. Every release is finite and an exact multiple of its declared granularity, for awkward
   inputs (0, 1, 2^-1074, 1e15 + 0.5, −0.0) at scales 1e-3, 1 and 1e6.
2. The low bits of releases on neighbouring inputs are indistinguishable, while the very same
   test rejects textbook floating-point Laplace, ``x + numpy.random.laplace(b)``.

Why float Laplace fails (Mironov 2012): the set of doubles ``x + noise`` can take depends on
``x``. With ``x = 0`` the release is the noise itself, whose significand is a correctly-rounded
logarithm with all 52 bits busy, so its last byte is uniform. With ``x = 1`` the sum is rounded
to the spacing of doubles near the result: for noise in (−2, −0.5) Sterbenz's lemma makes
``1 + noise`` exact, so the result in (−1, 0.5) inherits the coarser spacing of the noise and
its last mantissa bits are zeros far more often than uniform; for noise > 0 the sum lies in
[1, ∞) where it is rounded to multiples of 2^-52 or coarser. Those trailing bits tell ``x``
apart whatever the noise scale. The grid mechanism releases ``(round(x/g) + Z)·g`` with
integer ``Z`` of scale 2^20 or more grid units: the low bits of the release are the low bits of
an integer smeared over 2^20 values, the same for every input.

The test: two features of each release — the lowest byte of its IEEE-754 representation, and
the lowest byte of ``floor(value/g)`` for the grid ``g`` of the same parameters — and for each a
two-sample chi-square test of homogeneity over 10^5 releases per input, rejecting above the
1e-7 quantile (categories merged until every expected count is ≥ 50). Two checks per pair: a
correct mechanism fails a pair with probability below 2e-7.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pytest
from _noise_stats import low_bits, two_sample_chi2

pytestmark = pytest.mark.stats

mechanisms = pytest.importorskip("deniable.mechanisms")

TINY = 5e-324  # 2^-1074
INPUTS = [0.0, 1.0, TINY, 1e15 + 0.5, -0.0]
SCALES = [1e-3, 1.0, 1e6]
N = 100_000

Release = Callable[[float, int], np.ndarray]


def _is_power_of_two(g: float) -> bool:
    m, _ = math.frexp(g)
    return g > 0 and m == 0.5


@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"scale={s:g}")
@pytest.mark.parametrize("epsilon", [1.0, 0.5], ids=lambda e: f"eps={e:g}")
def test_releases_are_finite_multiples_of_the_grid(scale: float, epsilon: float) -> None:
    sensitivity = scale * epsilon  # so that Δ/ε is the scale
    for x in INPUTS:
        rel = mechanisms.laplace(np.full(2000, x), sensitivity=sensitivity, epsilon=epsilon)
        g = rel.granularity
        assert g is not None and _is_power_of_two(g), f"granularity {g} is not a power of two"
        v = rel.value
        assert v.dtype == np.float64 and v.shape == (2000,)
        assert np.isfinite(v).all()
        # Exact check with rationals on every value.
        gf = Fraction(g)
        assert all((Fraction(float(y)) / gf).denominator == 1 for y in v), (
            f"a release for x={x!r} at scale {scale} is not a multiple of {g}"
        )
        # The grid is derived from the public scale only: same for every input.
        assert g == mechanisms.laplace([0.0], sensitivity=sensitivity, epsilon=epsilon).granularity


def test_grid_is_fine_compared_with_the_scale() -> None:
    for scale in SCALES:
        rel = mechanisms.laplace([0.0], sensitivity=scale, epsilon=1.0)
        assert rel.granularity is not None
        assert 2.0**19 <= scale / rel.granularity <= 2.0**21


def _features(values: np.ndarray, g: float) -> tuple[np.ndarray, np.ndarray]:
    grid_byte = np.floor(values / g).astype(np.int64) & 255
    return low_bits(values, 8), grid_byte


def _low_bits_distinguish(release: Release, x: float, x2: float, g: float) -> list[str]:
    """Return the features whose distribution differs between inputs ``x`` and ``x2``."""
    a, b = release(x, N), release(x2, N)
    found = []
    for name, fa, fb in zip(("IEEE low byte", "grid-count low byte"), _features(a, g),
                            _features(b, g), strict=True):  # fmt: skip
        result = two_sample_chi2(fa, fb)
        if result.rejected:
            found.append(f"{name}: {result}")
    return found


def _grid_release(sensitivity: float, epsilon: float) -> Release:
    def release(x: float, n: int) -> np.ndarray:
        value = mechanisms.laplace(np.full(n, x), sensitivity=sensitivity, epsilon=epsilon).value
        return np.asarray(value, dtype=np.float64)

    return release


def _numpy_release(scale: float) -> Release:
    rng = np.random.default_rng()  # the insecure textbook mechanism, as a negative control

    def release(x: float, n: int) -> np.ndarray:
        return x + rng.laplace(0.0, scale, n)

    return release


# Neighbouring pairs (x, x', Δ) with ε = 1, so the scale is Δ.
PAIRS = [
    (0.0, 1.0, 1.0),
    (1.0, 1.0 + 2.0**-30, 1.0),
    (0.0, TINY, 1e-3),
    (-0.0, 1e-3, 1e-3),
    (-0.0, 0.0, 1.0),
    (1e15 + 0.5, 1e15 + 0.5 + 1e6, 1e6),  # here the IEEE low byte is not constant
]


@pytest.mark.parametrize(("x", "x2", "delta"), PAIRS, ids=[f"{p[0]!r}~{p[1]!r}" for p in PAIRS])
def test_low_bits_of_grid_releases_do_not_depend_on_the_input(
    x: float, x2: float, delta: float
) -> None:
    release = _grid_release(delta, 1.0)
    g = mechanisms.laplace([0.0], sensitivity=delta, epsilon=1.0).granularity
    found = _low_bits_distinguish(release, x, x2, g)
    assert not found, f"grid releases on {x!r} and {x2!r} differ in their low bits: {found}"


@pytest.mark.parametrize(
    ("x", "x2", "delta"), [(0.0, 1.0, 1.0), (-0.0, 1e-3, 1e-3)], ids=["0~1", "-0.0~1e-3"]
)
def test_low_bits_test_rejects_float_laplace(x: float, x2: float, delta: float) -> None:
    """Negative control: the same test on ``x + numpy.random.laplace(Δ/ε)`` must reject.

    Observed statistics are about 15 000 against a threshold near 390 (255 df) with 10^5
    releases per input, so rejection is certain.
    """
    g = mechanisms.laplace([0.0], sensitivity=delta, epsilon=1.0).granularity
    found = _low_bits_distinguish(_numpy_release(delta), x, x2, g)
    assert found, "the low-bits test failed to tell apart float Laplace on neighbouring inputs"

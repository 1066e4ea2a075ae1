"""Negative controls: the distribution checks of ``test_noise_distributions.py`` reject broken
samplers.

Each broken variant is built here from deniable's own exact pieces, so it differs from the
real sampler only by the bug it stands for: the wrong scale (half or double), zero counted
twice (a sign bit on a geometric draw with no rejection of "−0"), the wrong σ, an off-by-one.
For each control the test first computes, from the non-central chi-square, the probability
that the chi-square check rejects the broken sampler, and requires it above 1 − 1e-6: the
control itself fails (by not rejecting) less than once in a million runs.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from functools import partial

import numpy as np
import numpy.typing as npt
import pytest
from _noise_stats import (
    Pmf,
    check_distribution,
    chi2_gof,
    control_power,
    discrete_gaussian_pmf,
    discrete_laplace_pmf,
    geometric_pmf,
)

from deniable.noise import discrete_gaussian, discrete_laplace, geometric, random_bits

pytestmark = pytest.mark.stats

N = 100_000
POWER = 1.0 - 1e-6

Ints = npt.NDArray[np.int64]


def _laplace_zero_twice(scale: Fraction, n: int) -> Ints:
    """The textbook bug: a random sign on a geometric draw, so 0 gets the mass of +0 and −0."""
    y = geometric(scale, n)
    return np.where(random_bits(n), -y, y)


def _zero_twice_pmf(scale: float) -> Pmf:
    g = geometric_pmf(scale)
    probs = np.concatenate([g.probs[:0:-1] / 2, [g.probs[0]], g.probs[1:] / 2])
    return Pmf(lo=-g.hi, probs=probs, left=g.right / 2, right=g.right / 2)


Sampler = Callable[[int], Ints]
PmfFactory = Callable[[], Pmf]


def _draw(sampler: Callable[[Fraction, int], Ints], param: Fraction) -> Sampler:
    return partial(sampler, param)


def _off_by_one(scale: Fraction) -> Sampler:
    return lambda n: geometric(scale, n) + 1


def _shifted_geometric_pmf(scale: float) -> Pmf:
    g = geometric_pmf(scale)
    return Pmf(lo=1, probs=g.probs, left=0.0, right=g.right)


# (name, broken sampler, pmf the sampler claims, pmf it actually has); pmfs built lazily.
CASES: list[tuple[str, Sampler, PmfFactory, PmfFactory]] = []
for s in [Fraction(1), Fraction(7, 3), Fraction(100), Fraction(10**4)]:
    claimed = partial(discrete_laplace_pmf, float(s))
    for label, factor in [("half", Fraction(1, 2)), ("double", Fraction(2)),
                          ("1.1x", Fraction(11, 10))]:  # fmt: skip
        CASES.append(
            (
                f"laplace({s}) drawn at {label} scale",
                _draw(discrete_laplace, s * factor),
                claimed,
                partial(discrete_laplace_pmf, float(s * factor)),
            )
        )
for s in [Fraction(1), Fraction(7, 3), Fraction(10)]:
    CASES.append(
        (
            f"laplace({s}) with zero counted twice",
            _draw(_laplace_zero_twice, s),
            partial(discrete_laplace_pmf, float(s)),
            partial(_zero_twice_pmf, float(s)),
        )
    )
for s in [Fraction(1), Fraction(100)]:
    CASES.append(
        (
            f"geometric({s}) off by one",
            _off_by_one(s),
            partial(geometric_pmf, float(s)),
            partial(_shifted_geometric_pmf, float(s)),
        )
    )
for v in [Fraction(1), Fraction(7, 3), Fraction(10**4), Fraction(10**8)]:
    for label, factor in [("σ·1.1", Fraction(121, 100)), ("σ/2", Fraction(1, 4))]:
        CASES.append(
            (
                f"gaussian(σ²={v}) drawn with {label}",
                _draw(discrete_gaussian, v * factor),
                partial(discrete_gaussian_pmf, float(v)),
                partial(discrete_gaussian_pmf, float(v * factor)),
            )
        )
CASES.append(
    (
        "gaussian(σ²=1) drawn as discrete Laplace(1)",  # right support, wrong shape
        _draw(discrete_laplace, Fraction(1)),
        partial(discrete_gaussian_pmf, 1.0),
        partial(discrete_laplace_pmf, 1.0),
    )
)


@pytest.mark.parametrize(("name", "broken", "claimed", "actual"), CASES, ids=[c[0] for c in CASES])
def test_checks_reject_broken_sampler(
    name: str, broken: Sampler, claimed: PmfFactory, actual: PmfFactory
) -> None:
    samples = broken(N)
    gof = chi2_gof(samples, claimed())
    power = control_power(gof, actual())
    assert power > POWER, f"control {name} is too weak to be reliable: power {power}"
    failures = check_distribution(samples, claimed())
    assert failures, f"the checks accepted a broken sampler: {name} ({gof})"

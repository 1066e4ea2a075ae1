"""The (ε, δ) posterior bound: formula, reduction to the pure bound, brute force, tightness."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from deniable.accounting import Epsilon, EpsilonDelta, Rho
from deniable.errors import InvalidParameter
from deniable.explain.posterior import (
    approx_posterior_bounds,
    effective_epsilon,
    posterior_bounds,
)
from deniable.explain.text import explain_loss


def formula(p: float, eps: float, delta: float, pi: float) -> tuple[float, float]:
    m = math.exp(eps) + delta / pi
    return p / (p + (1 - p) * m), p * m / (p * m + 1 - p)


@pytest.mark.parametrize(
    ("p", "eps", "delta", "pi"),
    [(0.5, math.log(3), 0.01, 0.1), (0.1, 5, 1e-6, 0.01), (0.9, 0.1, 0.2, 0.5), (0.3, 0, 0.05, 1)],
)
def test_matches_the_stated_formula(p: float, eps: float, delta: float, pi: float) -> None:
    low, high = approx_posterior_bounds(p, eps, delta, evidence=pi)
    want_low, want_high = formula(p, eps, delta, pi)
    assert low == pytest.approx(want_low, rel=1e-13)
    assert high == pytest.approx(want_high, rel=1e-13)
    # …which is the pure bound at ε_eff = ln(e^ε + δ/π).
    eff = effective_epsilon(eps, delta, evidence=pi)
    assert eff == pytest.approx(math.log(math.exp(eps) + delta / pi), rel=1e-13)
    pure_low, pure_high = posterior_bounds(p, eff)
    assert (low, high) == (pytest.approx(pure_low, rel=1e-12), pytest.approx(pure_high, rel=1e-12))


def test_worked_example() -> None:
    # ε = ln 3, δ = 0.01, π = 0.1: m = 3.1, so 50% → 0.5·3.1/(0.5·3.1 + 0.5) = 3.1/4.1.
    low, high = approx_posterior_bounds(0.5, math.log(3), 0.01, evidence=0.1)
    assert high == pytest.approx(3.1 / 4.1, rel=1e-14)
    assert low == pytest.approx(1 / 4.1, rel=1e-14)


def test_delta_zero_is_the_pure_bound_for_every_evidence() -> None:
    for pi in (1e-9, 0.01, 1):
        assert approx_posterior_bounds(0.3, 1.1, 0, evidence=pi) == posterior_bounds(0.3, 1.1)
    assert approx_posterior_bounds(0.3, EpsilonDelta(epsilon=1, delta=0)) == posterior_bounds(
        0.3, 1
    )


def test_delta_widens_the_range_and_rarer_evidence_widens_it_more() -> None:
    pure = posterior_bounds(0.2, 1)
    common = approx_posterior_bounds(0.2, 1, 1e-3, evidence=0.5)
    rare = approx_posterior_bounds(0.2, 1, 1e-3, evidence=1e-3)
    assert rare[0] < common[0] < pure[0] and pure[1] < common[1] < rare[1]
    # Evidence as rare as δ itself: m = e + 1, far beyond the pure bound.
    assert rare[1] == pytest.approx(formula(0.2, 1, 1e-3, 1e-3)[1])


def test_no_overflow_and_edges() -> None:
    assert approx_posterior_bounds(0.5, 10**6, 0.5) == (0.0, 1.0)
    assert approx_posterior_bounds(0, 3, 0.5) == (0.0, 0.0)
    assert approx_posterior_bounds(1, 3, 0.5) == (1.0, 1.0)
    assert math.isfinite(effective_epsilon(10**6, 0.5))


# ----------------------------------------------------------------- brute force, two outputs


def _dp(p0: Fraction, p1: Fraction, eps: float, delta: Fraction) -> bool:
    """Whether the two-output pair (P[a|out], P[a|in]) is (ε, δ)-DP, on every event."""
    e = Fraction(math.exp(eps))
    events = [(p0, p1), (1 - p0, 1 - p1), (Fraction(1), Fraction(1))]
    return all(b <= e * a + delta and a <= e * b + delta for a, b in events)


@pytest.mark.parametrize(("eps", "delta"), [(math.log(3), Fraction(1, 50)), (0.5, Fraction(1, 10))])
def test_brute_force_on_every_two_output_mechanism(eps: float, delta: Fraction) -> None:
    """Every (ε, δ)-DP mechanism with outputs {a, b} on a 1/100 grid obeys the bound.

    For each mechanism, prior and event S (a, b, or both) whose probability without the target
    is at least π (upper bound) / with it at least π (lower bound), the exact Bayes posterior
    lies within the bound; and the largest posterior found reaches the bound (it is tight).
    """
    grid = [Fraction(i, 100) for i in range(101)]
    priors = [Fraction(1, 10), Fraction(1, 2), Fraction(4, 5)]
    pi = Fraction(1, 20)
    checked, best = 0, dict.fromkeys(priors, 0.0)
    for p0, p1 in itertools.product(grid, grid):
        if not _dp(p0, p1, eps, delta):
            continue
        for (a, b), p in itertools.product([(p0, p1), (1 - p0, 1 - p1)], priors):
            if a + b == 0:
                continue
            post = float(p * b / (p * b + (1 - p) * a))
            low, high = approx_posterior_bounds(p, eps, delta, evidence=pi)
            if a >= pi:
                assert post <= high * (1 + 1e-12)
                best[p] = max(best[p], post)
                checked += 1
            if b >= pi:
                assert post >= low * (1 - 1e-12)
    assert checked > 1000
    for p in priors:
        # Tight: the mechanism P[a|out] = π, P[a|in] = e^ε·π + δ is on the grid's doorstep.
        high = approx_posterior_bounds(p, eps, delta, evidence=pi)[1]
        assert best[p] == pytest.approx(high, abs=0.02)
        assert best[p] > posterior_bounds(p, eps)[1]  # δ really costs something


def test_the_extremal_mechanism_reaches_the_bound_exactly() -> None:
    eps, delta, pi, p = 1.0, 0.01, 0.05, 0.3
    p0, p1 = pi, math.exp(eps) * pi + delta  # (ε, δ)-DP with equality on {a}
    post = p * p1 / (p * p1 + (1 - p) * p0)
    assert post == pytest.approx(approx_posterior_bounds(p, eps, delta, evidence=pi)[1], rel=1e-14)


def test_a_pure_bound_would_be_violated_by_delta() -> None:
    # Negative control: the same extremal mechanism breaks the pure-ε bound, so a version of
    # approx_posterior_bounds that ignored δ would fail the brute-force test above.
    eps, delta, pi, p = 1.0, 0.01, 0.05, 0.3
    p0, p1 = pi, math.exp(eps) * pi + delta
    post = p * p1 / (p * p1 + (1 - p) * p0)
    assert post > posterior_bounds(p, eps)[1]


# ----------------------------------------------------------------- validation and text


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((1.5, 1, 0.1), {}, "prior"),
        ((0.5, -1, 0.1), {}, "epsilon"),
        ((0.5, 1, 1), {}, "delta"),
        ((0.5, 1, -0.1), {}, "delta"),
        ((0.5, 1, 0.1), {"evidence": 0}, "evidence"),
        ((0.5, 1, 0.1), {"evidence": 1.5}, "evidence"),
        ((0.5, 1, 0.1), {"evidence": math.nan}, "evidence"),
        ((0.5, Rho(rho=1)), {}, "ρ-zCDP"),
        ((0.5, EpsilonDelta(epsilon=1, delta=0.1), 0.1), {}, "twice"),
    ],
)
def test_bad_input(args: tuple[object, ...], kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InvalidParameter, match=match):
        approx_posterior_bounds(*args, **kwargs)  # type: ignore[arg-type]


def test_accepts_loss_objects() -> None:
    a = approx_posterior_bounds(0.5, EpsilonDelta(epsilon=1, delta=0.01), evidence=0.1)
    assert a == approx_posterior_bounds(0.5, 1, 0.01, evidence=0.1)
    assert approx_posterior_bounds(0.5, Epsilon(epsilon=1)) == posterior_bounds(0.5, 1)


def test_sentence_with_delta() -> None:
    text = explain_loss(math.log(3), 0.01, 0.5, evidence=0.1)
    assert text.startswith("With ε = 1.099 and δ = 0.01, ")
    assert "at most 75.7% sure" in text  # 3.1/4.1 = 75.61% rounded up
    assert "no less than 24.3%" in text  # 1/4.1 = 24.39% rounded down
    assert "at least a 10% chance" in text and "rarer evidence can tell more" in text
    assert explain_loss(math.log(3)) == explain_loss(math.log(3), 0)
    with pytest.raises(InvalidParameter):
        explain_loss(1, 1)

"""Composition, conversions, group privacy and amplification: values, mixes, errors, rounding.

Irrational results are checked against the standard library's ``decimal`` at 60 digits: each
must be at or above the true value (safe) and within 2^-50 relative of it (tight).

A float parameter means the shortest decimal that prints as it (``0.1`` is exactly 1/10, the
reading of ``deniable.accounting.loss.exact``); the expected values below are computed from that
reading with :func:`F`, independently of the library.
"""

from __future__ import annotations

import decimal
import math
from fractions import Fraction

import pytest

from deniable.accounting import (
    Epsilon,
    EpsilonDelta,
    Rho,
    advanced_composition,
    amplify_bernoulli,
    common_kind,
    compose,
    compose_parallel,
    convert,
    epsilon_for_sampled,
    group_privacy,
    pure_to_approx,
    pure_to_zcdp,
    zcdp_to_approx,
)
from deniable.errors import InvalidParameter

CTX = decimal.Context(prec=60)


def F(x: Fraction | int | float) -> Fraction:
    """The exact value a privacy parameter denotes: a float is the decimal it prints as."""
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


def D(x: Fraction | int | float) -> decimal.Decimal:
    q = F(x)
    return CTX.divide(decimal.Decimal(q.numerator), decimal.Decimal(q.denominator))


def assert_safe_upper(value: Fraction, truth: decimal.Decimal) -> None:
    with decimal.localcontext(CTX):
        assert D(value) >= truth, "rounded below the true value: unsafe"
        assert D(value) <= truth * (1 + decimal.Decimal(2) ** -50), "not tight"


def assert_safe_lower(value: Fraction, truth: decimal.Decimal) -> None:
    with decimal.localcontext(CTX):
        assert D(value) <= truth, "rounded above the true value: unsafe"
        assert D(value) >= truth * (1 - decimal.Decimal(2) ** -45), "not tight"


# ---------------------------------------------------------------- sequential composition


def test_compose_pure_is_exact_sum() -> None:
    out = compose([Epsilon(epsilon=0.1)] * 3)
    assert out == Epsilon(epsilon=Fraction(3, 10))
    assert out == Epsilon(epsilon=0.3)  # 0.1 and 0.3 are read as 1/10 and 3/10, exactly
    assert out.epsilon != F(0.1 + 0.1 + 0.1)  # not the float sum 0.30000000000000004
    assert compose([Epsilon(epsilon=Fraction(1, 3))] * 3) == Epsilon(epsilon=1)


def test_compose_approx_sums_both_components() -> None:
    out = compose([EpsilonDelta(epsilon=1, delta=1e-6), EpsilonDelta(epsilon=0.5, delta=2e-6)])
    assert out == EpsilonDelta(epsilon=1.5, delta=Fraction(3, 10**6))


def test_compose_mixed_pure_and_approx() -> None:
    out = compose([Epsilon(epsilon=0.5), EpsilonDelta(epsilon=1, delta=1e-6)])
    assert isinstance(out, EpsilonDelta)
    assert out == EpsilonDelta(epsilon=1.5, delta=1e-6)


def test_compose_mixed_pure_and_rho_uses_eps_squared_over_two() -> None:
    out = compose([Epsilon(epsilon=1), Rho(rho=0.25), Epsilon(epsilon=Fraction(1, 3))])
    assert out == Rho(rho=Fraction(1, 2) + Fraction(1, 4) + Fraction(1, 18))


def test_compose_refuses_rho_with_delta() -> None:
    with pytest.raises(InvalidParameter, match="zcdp_to_approx") as info:
        compose([Rho(rho=0.1), EpsilonDelta(epsilon=1, delta=1e-6)])
    assert "δ" in str(info.value)
    # ... but an (ε, 0) is pure, so it joins ρ unambiguously.
    assert compose([Rho(rho=0.1), EpsilonDelta(epsilon=1, delta=0)]) == Rho(
        rho=Fraction(1, 10) + Fraction(1, 2)
    )


def test_compose_empty_is_zero_and_refuses_non_losses() -> None:
    assert compose([]) == Epsilon(epsilon=0)
    with pytest.raises(InvalidParameter, match="float"):
        compose([Epsilon(epsilon=1), 0.5])  # type: ignore[list-item]


def test_compose_refuses_total_delta_of_one() -> None:
    with pytest.raises(InvalidParameter, match="vacuous"):
        compose([EpsilonDelta(epsilon=0, delta=0.5)] * 2)


def test_common_kind() -> None:
    assert common_kind([]) is Epsilon
    assert common_kind([Epsilon(epsilon=1)]) is Epsilon
    assert common_kind([Epsilon(epsilon=1), EpsilonDelta(epsilon=1, delta=0)]) is EpsilonDelta
    assert common_kind([Epsilon(epsilon=1), Rho(rho=1)]) is Rho


# ---------------------------------------------------------------- parallel composition


def test_parallel_is_max_componentwise() -> None:
    out = compose_parallel(
        [EpsilonDelta(epsilon=1, delta=1e-9), EpsilonDelta(epsilon=0.5, delta=1e-6)]
    )
    assert out == EpsilonDelta(epsilon=1, delta=1e-6)
    assert compose_parallel([Epsilon(epsilon=0.2)] * 1000) == Epsilon(epsilon=0.2)
    assert compose_parallel([Epsilon(epsilon=1), Rho(rho=0.1)]) == Rho(rho=0.5)
    assert compose_parallel([]) == Epsilon(epsilon=0)
    with pytest.raises(InvalidParameter, match="zcdp_to_approx"):
        compose_parallel([Rho(rho=0.1), EpsilonDelta(epsilon=1, delta=1e-6)])


# ---------------------------------------------------------------- conversions


def test_pure_conversions_are_exact() -> None:
    assert pure_to_zcdp(Epsilon(epsilon=Fraction(1, 3))) == Rho(rho=Fraction(1, 18))
    assert pure_to_approx(Epsilon(epsilon=0.1)) == EpsilonDelta(epsilon=0.1, delta=0)
    with pytest.raises(InvalidParameter):
        pure_to_zcdp(Rho(rho=1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rho", "delta"),
    [
        (0.5, 1e-6),
        (Fraction(1, 3), Fraction(1, 10**9)),
        (2**-30, 1e-10),
        (Fraction(1, 2**30), Fraction(1, 10**10)),
        (5e-324, 0.5),  # read as 5/10^324, below every double
        (Fraction(1, 2**1074), Fraction(1, 2)),  # the smallest double, exactly
        (50, 1e-300),
    ],
)
def test_zcdp_to_approx_is_rounded_up(rho: float, delta: float) -> None:
    out = zcdp_to_approx(Rho(rho=rho), delta=delta)
    assert out.delta == F(delta)
    with decimal.localcontext(CTX):
        r = D(rho)
        truth = r + 2 * (r * CTX.ln(1 / D(delta))).sqrt()
    assert_safe_upper(out.epsilon, truth)


def test_zcdp_to_approx_example_and_errors() -> None:
    out = zcdp_to_approx(Rho(rho=0.5), delta=1e-6)
    assert math.isclose(float(out.epsilon), 0.5 + 2 * math.sqrt(0.5 * math.log(1e6)))
    assert zcdp_to_approx(Rho(rho=0), delta=1e-6).epsilon == 0
    for bad in (0, 1, 1.5, -1e-9, math.nan):
        with pytest.raises(InvalidParameter, match="delta"):
            zcdp_to_approx(Rho(rho=1), delta=bad)
    with pytest.raises(InvalidParameter, match="Rho"):
        zcdp_to_approx(Epsilon(epsilon=1), delta=1e-6)  # type: ignore[arg-type]


def test_convert_rules() -> None:
    assert convert(Epsilon(epsilon=2), Rho) == Rho(rho=2)
    assert convert(Epsilon(epsilon=2), EpsilonDelta) == EpsilonDelta(epsilon=2, delta=0)
    assert convert(EpsilonDelta(epsilon=2, delta=0), Epsilon) == Epsilon(epsilon=2)
    with pytest.raises(InvalidParameter, match="zcdp_to_approx"):
        convert(Rho(rho=1), EpsilonDelta)
    with pytest.raises(InvalidParameter, match="pure"):
        convert(EpsilonDelta(epsilon=1, delta=1e-9), Epsilon)
    with pytest.raises(InvalidParameter, match="does not imply ρ-zCDP"):
        convert(EpsilonDelta(epsilon=1, delta=1e-9), Rho)
    with pytest.raises(InvalidParameter, match="pure"):
        convert(Rho(rho=1), Epsilon)


# ---------------------------------------------------------------- group privacy


def test_group_privacy_values() -> None:
    assert group_privacy(Epsilon(epsilon=0.5), k=3) == Epsilon(epsilon=1.5)
    assert group_privacy(Rho(rho=Fraction(1, 8)), k=3) == Rho(rho=Fraction(9, 8))
    assert group_privacy(EpsilonDelta(epsilon=0.5, delta=0), k=4) == EpsilonDelta(
        epsilon=2, delta=0
    )
    out = group_privacy(EpsilonDelta(epsilon=Fraction(1, 3), delta=1e-9), k=5)
    assert out.epsilon == Fraction(5, 3)
    with decimal.localcontext(CTX):
        truth = 5 * CTX.exp(D(Fraction(4, 3))) * D(1e-9)
    assert_safe_upper(out.delta, truth)


@pytest.mark.parametrize(
    "loss", [Epsilon(epsilon=0.3), EpsilonDelta(epsilon=0.3, delta=1e-5), Rho(rho=0.3)]
)
def test_group_of_one_is_identity(loss: Epsilon | EpsilonDelta | Rho) -> None:
    assert group_privacy(loss, k=1) == loss


def test_group_privacy_errors() -> None:
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(InvalidParameter, match="k must be"):
            group_privacy(Epsilon(epsilon=1), k=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="vacuous"):
        group_privacy(EpsilonDelta(epsilon=5, delta=1e-6), k=10)


# ---------------------------------------------------------------- advanced composition


def test_advanced_composition_formula_and_rounding() -> None:
    eps, k, slack = Fraction(1, 100), 10_000, Fraction(1, 10**6)
    out = advanced_composition(EpsilonDelta(epsilon=eps, delta=1e-9), k=k, delta_slack=slack)
    assert out.delta == k * Fraction(1, 10**9) + slack
    with decimal.localcontext(CTX):
        e = D(eps)
        truth = (2 * k * CTX.ln(1 / D(slack))).sqrt() * e + k * e * (CTX.exp(e) - 1)
    assert_safe_upper(out.epsilon, truth)
    assert out.epsilon < k * eps  # the point of the theorem


def test_advanced_composition_falls_back_to_the_sum_when_better() -> None:
    out = advanced_composition(Epsilon(epsilon=1), k=3, delta_slack=1e-6)
    assert out == EpsilonDelta(epsilon=3, delta=0)


def test_advanced_composition_errors() -> None:
    with pytest.raises(InvalidParameter, match="compose"):
        advanced_composition(Rho(rho=1), k=3, delta_slack=1e-6)  # type: ignore[arg-type]
    for bad in (0, 1, -0.5):
        with pytest.raises(InvalidParameter, match="delta_slack"):
            advanced_composition(Epsilon(epsilon=0.1), k=3, delta_slack=bad)
    with pytest.raises(InvalidParameter, match="k must be"):
        advanced_composition(Epsilon(epsilon=0.1), k=0, delta_slack=1e-6)


# ---------------------------------------------------------------- amplification


@pytest.mark.parametrize(
    ("eps", "beta"),
    [
        (1, 0.1),
        (Fraction(1, 3), Fraction(1, 7)),
        (2**-30, 0.5),
        (Fraction(1, 2**30), Fraction(1, 2)),
        (5e-324, 0.5),  # read as 5/10^324, below every double
        (Fraction(1, 2**1074), Fraction(1, 2)),  # the smallest double, exactly
        (10, 1e-6),
        (50, 0.9),
    ],
)
def test_amplification_is_rounded_up(eps: float, beta: float) -> None:
    out = amplify_bernoulli(EpsilonDelta(epsilon=eps, delta=1e-6), beta)
    assert out.delta == F(beta) * Fraction(1, 10**6)
    with decimal.localcontext(CTX):
        e = D(eps)
        inner = D(beta) * (CTX.exp(e) - 1) if e > decimal.Decimal("1e-20") else D(beta) * e
        truth = (1 + inner).ln() if inner > decimal.Decimal("1e-20") else inner
    if F(eps) < Fraction(1, 2**1000):
        # Below 2^-1000 the check is only "not above the original", which amplification
        # guarantees; the 60-digit oracle cannot resolve the value relative to itself.
        assert out.epsilon <= F(eps)
    else:
        assert_safe_upper(out.epsilon, truth)


def test_amplification_example_and_edges() -> None:
    out = amplify_bernoulli(Epsilon(epsilon=1), 0.1)
    assert math.isclose(float(out.epsilon), math.log1p(0.1 * math.expm1(1)), rel_tol=1e-15)
    loss = EpsilonDelta(epsilon=Fraction(1, 3), delta=Fraction(1, 10**7))
    assert amplify_bernoulli(loss, 1) == loss  # β = 1 changes nothing, exactly
    assert amplify_bernoulli(Epsilon(epsilon=0), 0.5) == EpsilonDelta(epsilon=0, delta=0)


def test_amplification_errors() -> None:
    for bad in (0, -0.1, 1.01, math.nan, math.inf, True):
        with pytest.raises(InvalidParameter):
            amplify_bernoulli(Epsilon(epsilon=1), bad)
    with pytest.raises(InvalidParameter, match="zcdp_to_approx"):
        amplify_bernoulli(Rho(rho=1), 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("target", "beta"),
    [(0.25, 0.1), (Fraction(1, 3), Fraction(1, 3)), (1, 1e-3), (2**-30, 0.5), (3, 0.999)],
)
def test_inverse_amplification_rounds_down_and_round_trips(target: float, beta: float) -> None:
    out = epsilon_for_sampled(Epsilon(epsilon=target), beta)
    with decimal.localcontext(CTX):
        truth = (1 + (CTX.exp(D(target)) - 1) / D(beta)).ln()
    assert_safe_lower(out.epsilon, truth)
    assert out.epsilon >= F(target)
    # The charged (rounded-up) amplified loss of that ε never exceeds the target.
    assert amplify_bernoulli(out, beta).epsilon <= F(target)


def test_inverse_amplification_edges() -> None:
    assert epsilon_for_sampled(0.5, 1) == Epsilon(epsilon=0.5)
    assert epsilon_for_sampled(0, 0.1) == Epsilon(epsilon=0)
    with pytest.raises(InvalidParameter):
        epsilon_for_sampled(-1, 0.5)
    with pytest.raises(InvalidParameter, match="rate"):
        epsilon_for_sampled(1, 0)

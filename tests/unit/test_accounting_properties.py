"""Property tests (hypothesis) for the accounting algebra."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from deniable.accounting import (
    Epsilon,
    EpsilonDelta,
    Rho,
    advanced_composition,
    amplify_bernoulli,
    compose,
    compose_parallel,
    epsilon_for_sampled,
    group_privacy,
    pure_to_zcdp,
    zcdp_to_approx,
)
from deniable.accounting.composition import components

FAST = settings(max_examples=50, deadline=None, derandomize=True, database=None)

AWKWARD = [Fraction(1, 3), Fraction(0.1), Fraction(2) ** -30, Fraction(2) ** -1074, Fraction(0)]
# Built from integers: hypothesis' own st.fractions is several times slower to draw.
amounts = st.one_of(
    st.integers(0, 10**7).map(lambda n: Fraction(n, 10**6)),
    st.integers(1, 10**4).map(lambda d: Fraction(1, d)),
    st.sampled_from(AWKWARD),
)
small_deltas = st.one_of(
    st.integers(0, 10**7).map(lambda n: Fraction(n, 10**9)),
    st.sampled_from([Fraction(0), Fraction(2) ** -1074, Fraction(1e-9)]),
)
pures = st.builds(lambda e: Epsilon(epsilon=e), amounts)
approxes = st.builds(lambda e, d: EpsilonDelta(epsilon=e, delta=d), amounts, small_deltas)
rhos = st.builds(lambda r: Rho(rho=r), amounts)
# Lists whose kinds can be combined: pure with (ε, δ), or pure with ρ.
approx_mix = st.lists(st.one_of(pures, approxes), min_size=1, max_size=6)
rho_mix = st.lists(st.one_of(pures, rhos), min_size=1, max_size=6)
any_mix = st.one_of(approx_mix, rho_mix, st.lists(pures, min_size=1, max_size=6))
rates = st.one_of(
    st.integers(1, 10**6).map(lambda n: Fraction(n, 10**6)),
    st.sampled_from([Fraction(1), Fraction(1, 2), Fraction(1, 3)]),
)


def leq(a: object, b: object) -> bool:
    assert type(a) is type(b)
    return all(x <= y for x, y in zip(components(a), components(b), strict=True))  # type: ignore[arg-type]


@FAST
@given(approx_mix, st.randoms(use_true_random=False))
def test_sequential_is_commutative(losses: list[Epsilon | EpsilonDelta], rnd: object) -> None:
    shuffled = list(losses)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert compose(shuffled) == compose(losses)


@FAST
@given(st.lists(approxes, min_size=3, max_size=3))
def test_sequential_is_associative_within_a_kind(xs: list[EpsilonDelta]) -> None:
    a, b, c = xs
    assert compose([compose([a, b]), c]) == compose([a, compose([b, c])]) == compose(xs)


@FAST
@given(st.lists(pures, min_size=3, max_size=3))
def test_sequential_is_associative_for_pure(xs: list[Epsilon]) -> None:
    a, b, c = xs
    assert compose([compose([a, b]), c]) == compose([a, compose([b, c])]) == compose(xs)


@FAST
@given(pures, pures, approxes)
def test_sequential_is_associative_across_pure_and_approx(
    a: Epsilon, b: Epsilon, c: EpsilonDelta
) -> None:
    assert compose([compose([a, b]), c]) == compose([a, compose([b, c])]) == compose([a, b, c])


@FAST
@given(pures, pures, rhos)
def test_pure_then_rho_grouping_is_valid_but_never_tighter(a: Epsilon, b: Epsilon, c: Rho) -> None:
    # Converting each ε to ε²/2 and adding is tighter than converting the summed ε:
    # ε₁²/2 + ε₂²/2 ≤ (ε₁ + ε₂)²/2. Both are valid; compose() does the tighter one.
    flat = compose([a, b, c])
    assert flat == compose([a, compose([b, c])])
    assert leq(flat, compose([compose([a, b]), c]))


@FAST
@given(any_mix)
def test_parallel_is_at_most_sequential(losses: list[Epsilon | EpsilonDelta | Rho]) -> None:
    assert leq(compose_parallel(losses), compose(losses))


@FAST
@given(any_mix)
def test_composition_dominates_each_part(losses: list[Epsilon | EpsilonDelta | Rho]) -> None:
    total, widest = compose(losses), compose_parallel(losses)
    for loss in losses:
        one = compose([loss])
        if type(one) is type(widest):
            assert leq(one, widest)
            assert leq(one, total)


@FAST
@given(amounts, amounts)
def test_pure_to_zcdp_is_monotone(a: Fraction, b: Fraction) -> None:
    lo, hi = sorted((a, b))
    assert pure_to_zcdp(Epsilon(epsilon=lo)).rho <= pure_to_zcdp(Epsilon(epsilon=hi)).rho


@FAST
@given(amounts, amounts, small_deltas, small_deltas)
def test_zcdp_to_approx_is_monotone(r1: Fraction, r2: Fraction, d1: Fraction, d2: Fraction) -> None:
    assume(d1 > 0 and d2 > 0)
    (rlo, rhi), (dlo, dhi) = sorted((r1, r2)), sorted((d1, d2))
    # More ρ costs more ε; paying more δ costs less ε.
    assert (
        zcdp_to_approx(Rho(rho=rlo), delta=dlo).epsilon
        <= zcdp_to_approx(Rho(rho=rhi), delta=dlo).epsilon
    )
    assert (
        zcdp_to_approx(Rho(rho=rlo), delta=dhi).epsilon
        <= zcdp_to_approx(Rho(rho=rlo), delta=dlo).epsilon
    )


@FAST
@given(approxes, rates)
def test_amplification_never_hurts_and_is_identity_at_one(
    loss: EpsilonDelta, beta: Fraction
) -> None:
    out = amplify_bernoulli(loss, beta)
    assert out <= loss
    assert out.delta == beta * loss.delta
    assert amplify_bernoulli(loss, 1) == loss


@FAST
@given(amounts, amounts, rates, rates)
def test_amplification_is_monotone(e1: Fraction, e2: Fraction, b1: Fraction, b2: Fraction) -> None:
    (elo, ehi), (blo, bhi) = sorted((e1, e2)), sorted((b1, b2))
    assert (
        amplify_bernoulli(Epsilon(epsilon=elo), blo).epsilon
        <= amplify_bernoulli(Epsilon(epsilon=ehi), blo).epsilon
    )
    assert (
        amplify_bernoulli(Epsilon(epsilon=elo), blo).epsilon
        <= amplify_bernoulli(Epsilon(epsilon=elo), bhi).epsilon
    )


@FAST
@given(amounts, rates)
def test_inverse_amplification_round_trips(target: Fraction, beta: Fraction) -> None:
    eps = epsilon_for_sampled(Epsilon(epsilon=target), beta)
    assert eps.epsilon >= target
    assert amplify_bernoulli(eps, beta).epsilon <= target


@FAST
@given(st.one_of(pures, approxes, rhos))
def test_group_of_one_is_identity(loss: Epsilon | EpsilonDelta | Rho) -> None:
    assert group_privacy(loss, k=1) == loss


@FAST
@given(pures, st.integers(1, 50))
def test_group_privacy_of_pure_is_k_fold_composition(loss: Epsilon, k: int) -> None:
    assert group_privacy(loss, k=k) == compose([loss] * k)


@FAST
@given(
    st.integers(0, 5000).map(lambda n: Fraction(n, 10**4)),
    st.integers(1, 10**6).map(lambda n: Fraction(n, 10**12)),
    st.integers(1, 30),
)
def test_group_privacy_is_monotone_in_k(eps: Fraction, delta: Fraction, k: int) -> None:
    loss = EpsilonDelta(epsilon=eps, delta=delta)
    assert group_privacy(loss, k=k) <= group_privacy(loss, k=k + 1)


@FAST
@given(
    st.one_of(pures, approxes),
    st.integers(1, 10**5),
    st.integers(1, 10**11).map(lambda n: Fraction(n, 10**12)),
)
def test_advanced_composition_is_never_worse_in_epsilon(
    loss: Epsilon | EpsilonDelta, k: int, slack: Fraction
) -> None:
    assume(k * (loss.delta if isinstance(loss, EpsilonDelta) else 0) + slack < 1)
    out = advanced_composition(loss, k=k, delta_slack=slack)
    assert out.epsilon <= k * loss.epsilon
    basic_delta = k * (loss.delta if isinstance(loss, EpsilonDelta) else 0)
    assert out.delta in (basic_delta, basic_delta + slack)

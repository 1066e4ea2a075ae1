"""Posterior bounds (Desfontaines, Prop. 1) and the plain-language sentence."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable.accounting import Epsilon, EpsilonDelta, Rho
from deniable.errors import InvalidParameter
from deniable.explain import explain_epsilon, posterior_bounds
from deniable.explain.text import percent


def test_ln3_at_fifty_percent_gives_25_to_75() -> None:
    low, high = posterior_bounds(0.5, math.log(3))
    assert low == pytest.approx(0.25, abs=1e-15)
    assert high == pytest.approx(0.75, abs=1e-15)


def test_eps5_at_ten_percent() -> None:
    low, high = posterior_bounds(0.1, 5)
    e5 = math.exp(5)
    # The formula's own value: 0.1·e⁵ / (1 + 0.1(e⁵ − 1)) = 0.94283 (about 94%).
    assert high == pytest.approx(0.1 * e5 / (1 + 0.1 * (e5 - 1)), rel=1e-14)
    assert high == pytest.approx(0.942826, abs=1e-6)
    assert low == pytest.approx(0.1 / (0.1 + 0.9 * e5), rel=1e-14)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=50, allow_nan=False),
)
def test_bounds_match_the_proposition_and_are_ordered(p: float, eps: float) -> None:
    low, high = posterior_bounds(p, eps)
    assert 0 <= low <= p <= high <= 1
    e = math.exp(eps)
    assert low == pytest.approx(p / (p + (1 - p) * e), rel=1e-12, abs=1e-300)
    assert high == pytest.approx(p * e / (1 + p * (e - 1)), rel=1e-12, abs=1e-300)


def test_log_odds_move_by_at_most_epsilon() -> None:
    p, eps = 0.3, 0.7
    low, high = posterior_bounds(p, eps)

    def logit(q: float) -> float:
        return math.log(q / (1 - q))

    assert logit(high) - logit(p) == pytest.approx(eps)
    assert logit(p) - logit(low) == pytest.approx(eps)


def test_edges() -> None:
    assert posterior_bounds(0.5, 0) == (0.5, 0.5)  # ε = 0: nothing is learned
    assert posterior_bounds(0, 3) == (0.0, 0.0)
    assert posterior_bounds(1, 3) == (1.0, 1.0)
    assert posterior_bounds(0.5, 10**6) == (0.0, 1.0)  # no overflow
    assert posterior_bounds(0.5, Fraction(10) ** 400) == (0.0, 1.0)


def test_accepts_loss_objects() -> None:
    assert posterior_bounds(0.5, Epsilon(epsilon=1)) == posterior_bounds(0.5, 1)
    assert posterior_bounds(0.5, EpsilonDelta(epsilon=1, delta=0)) == posterior_bounds(0.5, 1)
    with pytest.raises(InvalidParameter, match="δ > 0"):
        posterior_bounds(0.5, EpsilonDelta(epsilon=1, delta=1e-6))
    with pytest.raises(InvalidParameter, match="ρ-zCDP"):
        posterior_bounds(0.5, Rho(rho=1))


@pytest.mark.parametrize("prior", [-0.1, 1.5, math.nan, math.inf, True, "0.5", 50])
def test_bad_priors(prior: object) -> None:
    with pytest.raises(InvalidParameter, match="prior"):
        posterior_bounds(prior, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("eps", [-1, math.nan, math.inf, True])
def test_bad_epsilons(eps: object) -> None:
    with pytest.raises(InvalidParameter, match="epsilon"):
        posterior_bounds(0.5, eps)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the sentence


def test_sentence_for_ln3() -> None:
    text = explain_epsilon(math.log(3))
    assert (
        "an attacker who was 50% sure that a person is in the data can become at most 75% "
        "sure after seeing the result (and no less than 25%)" in text
    )
    assert text.startswith("With ε = 1.099, ")


def test_sentence_for_eps5_prior_10_rounds_in_the_safe_direction() -> None:
    text = explain_epsilon(Epsilon(epsilon=5), prior=0.1)
    assert "was 10% sure" in text
    assert "at most 94.3% sure" in text  # 94.28…% rounded up, never down
    assert "no less than 0.074%" in text  # 0.0749…% rounded down


def test_sentence_near_certainty_shows_the_distance() -> None:
    text = explain_epsilon(10, prior=0.5)
    assert "at most 99.9955% sure" in text  # 99.99546…% rounded up
    assert "no less than 0.0045%" in text


def test_percent_formatting() -> None:
    assert percent(0.75000000000000011, rounding="up") == "75%"
    assert percent(0.25, rounding="down") == "25%"
    assert percent(0.9428256, rounding="up") == "94.3%"
    assert percent(0.9428256, rounding="down") == "94.2%"
    assert percent(0.0) == "0%" and percent(1.0) == "100%"


def test_sentence_validates() -> None:
    with pytest.raises(InvalidParameter):
        explain_epsilon(-1)
    with pytest.raises(InvalidParameter):
        explain_epsilon(1, prior=2)

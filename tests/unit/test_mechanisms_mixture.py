"""Mixtures of mechanisms: validation, the max-not-sum loss, the exact choice, the event."""

from __future__ import annotations

import importlib
from fractions import Fraction

import numpy as np
import pytest

import deniable.noise.source as source_module
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InvalidParameter
from deniable.mechanisms import (
    Candidate,
    MixtureRelease,
    Release,
    discrete_gaussian,
    geometric,
    mixture,
    mixture_loss,
)
from deniable.mechanisms.events import (
    DiscreteGaussianEvent,
    GeometricEvent,
    MixtureEvent,
    PartitionSelectionEvent,
    compose_events,
)
from deniable.mechanisms.mixture import choose, mixture_weights
from deniable.noise.bernoulli import Bools, bernoulli
from deniable.noise.source import RandomSource
from deniable.noise.testing import SeededRandom

F = Fraction


def _geo(epsilon: Fraction, weight: Fraction, calls: list[int] | None = None) -> Candidate:
    def run(src: RandomSource) -> Release:
        if calls is not None:
            calls.append(int(epsilon * 100))
        return geometric([10, 20], sensitivity=1, epsilon=epsilon, source=src)

    return Candidate(run, Epsilon(epsilon=epsilon), weight, name=f"geometric ε={epsilon}")


# ----------------------------------------------------------------------------- loss


def test_loss_is_the_max_not_the_sum() -> None:
    r = mixture([_geo(F(1), F(1, 4)), _geo(F(1, 2), F(3, 4))], source=SeededRandom(0))
    assert isinstance(r, MixtureRelease)
    assert r.loss == Epsilon(epsilon=1)


def test_loss_is_component_wise_for_epsilon_delta() -> None:
    loss = mixture_loss(
        [EpsilonDelta(epsilon=1, delta=F(1, 10**9)), EpsilonDelta(epsilon=2, delta=0)]
    )
    assert loss == EpsilonDelta(epsilon=2, delta=F(1, 10**9))


def test_pure_and_zcdp_meet_in_rho() -> None:
    # ε = 1 is ½-zCDP, more than ρ = 1/4: the max in ρ is 1/2.
    assert mixture_loss([Epsilon(epsilon=1), Rho(rho=F(1, 4))]) == Rho(rho=F(1, 2))
    assert mixture_loss([Epsilon(epsilon=F(1, 2)), Rho(rho=F(1, 4))]) == Rho(rho=F(1, 4))


def test_zcdp_with_approximate_dp_is_refused() -> None:
    with pytest.raises(InvalidParameter, match="zcdp_to_approx"):
        mixture_loss([Rho(rho=1), EpsilonDelta(epsilon=1, delta=F(1, 10**6))])


def test_no_candidate_is_refused() -> None:
    with pytest.raises(InvalidParameter, match="at least one"):
        mixture([])
    with pytest.raises(InvalidParameter, match="at least one"):
        mixture_loss([])


def test_single_candidate_is_just_that_mechanism() -> None:
    r = mixture([_geo(F(1, 2), F(1))], source=SeededRandom(1))
    assert r.chosen == 0 and r.loss == Epsilon(epsilon=F(1, 2))
    plain = geometric([10, 20], sensitivity=1, epsilon=F(1, 2), source=SeededRandom(1))
    # No coin is drawn for one candidate: the same source gives the same noise.
    np.testing.assert_array_equal(r.value, plain.value)


# ----------------------------------------------------------------------------- weights


@pytest.mark.parametrize(
    "weights",
    [[F(1, 2), F(1, 3)], [F(1, 2), F(1, 2), F(0)], [F(3, 2), F(-1, 2)], [0.5, 0.4]],
    ids=["short", "zero", "negative", "floats-0.9"],
)
def test_bad_weights_are_refused(weights: list[Fraction | float]) -> None:
    with pytest.raises(InvalidParameter, match="weights"):
        mixture([_geo(F(1), w) for w in weights])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "1/2", None])
def test_non_numeric_weights_are_refused(bad: object) -> None:
    with pytest.raises(InvalidParameter):
        mixture_weights([bad, F(1, 2)])  # type: ignore[list-item]


def test_float_weights_are_read_as_decimals() -> None:
    # 0.1 + 0.2 + 0.7 is not 1 in doubles, but is as the decimals the user typed.
    assert sum(mixture_weights([0.1, 0.2, 0.7])) == 1


def test_bad_candidates_are_refused() -> None:
    with pytest.raises(InvalidParameter, match="Candidate"):
        mixture([(F(1), _geo(F(1), F(1)))])  # type: ignore[list-item]
    with pytest.raises(InvalidParameter, match="loss"):
        mixture([Candidate(_geo(F(1), F(1)).run, 1.0, F(1))])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the choice


def test_only_the_chosen_candidate_runs() -> None:
    for seed in range(20):
        calls: list[int] = []
        r = mixture(
            [_geo(F(1), F(1, 3), calls), _geo(F(1, 2), F(1, 3), calls), _geo(F(2), F(1, 3), calls)],
            source=SeededRandom(seed),
        )
        assert calls == [[100, 50, 200][r.chosen]]
        assert r.component is not None and r.mechanism == "mixture:geometric"
        assert r.weights == (F(1, 3),) * 3


def test_choice_frequencies_match_the_weights() -> None:
    # Deterministic (seeded); the statistical test is in tests/stats. 8000 draws of
    # (1/6, 1/3, 1/2): each frequency is within 4 sd (≤ 0.023) of its weight.
    src = SeededRandom(7)
    w = (F(1, 6), F(1, 3), F(1, 2))
    counts = np.bincount([choose(w, source=src) for _ in range(8000)], minlength=3)
    np.testing.assert_allclose(counts / 8000, [1 / 6, 1 / 3, 1 / 2], atol=0.023)


def test_choice_uses_exact_bernoulli_of_rationals(monkeypatch: pytest.MonkeyPatch) -> None:
    # The coins are Bernoulli(wᵢ/Rᵢ) of exact rationals: 1/6, then (1/3)/(5/6) = 2/5.
    seen: list[Fraction] = []
    mod = importlib.import_module("deniable.mechanisms.mixture")  # the package exports a

    # function of the same name, which `import deniable.mechanisms.mixture as` would give
    def spy(p: Fraction, size: int, *, source: RandomSource | None = None) -> Bools:
        seen.append(p)
        return bernoulli(p, size, source=source)

    monkeypatch.setattr(mod, "bernoulli", spy)
    choose((F(1, 6), F(1, 3), F(1, 2)), source=SeededRandom(0))
    assert seen == [F(1, 6), F(2, 5)]
    assert all(isinstance(p, Fraction) for p in seen)


def test_default_source_is_the_secure_one(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[bool] = []
    real = source_module.default_source

    def spy() -> source_module.SecureRandom:
        used.append(True)
        return real()

    monkeypatch.setattr(source_module, "default_source", spy)
    seen: list[bool] = []

    def run(src: RandomSource) -> Release:
        seen.append(src.secure)
        return geometric([1], sensitivity=1, epsilon=1, source=src)

    mixture(
        [Candidate(run, Epsilon(epsilon=1), F(1, 2)), Candidate(run, Epsilon(epsilon=1), F(1, 2))]
    )
    assert seen == [True]


# ----------------------------------------------------------------------------- release


def test_interval_is_the_chosen_mechanisms() -> None:
    for seed in range(10):
        r = mixture([_geo(F(1), F(1, 2)), _geo(F(1, 10), F(1, 2))], source=SeededRandom(seed))
        assert r.component is not None
        assert r.half_width(0.9) == r.component.half_width(0.9)
        assert r.noise == r.component.noise and r.scale == r.component.scale
        lo, _ = r.interval(0.9)
        np.testing.assert_array_equal(lo, np.asarray(r.value) - r.half_width(0.9))


def test_mixed_kinds_release() -> None:
    def dg(src: RandomSource) -> Release:
        return discrete_gaussian([5], sensitivity=1, rho=F(1, 8), source=src)

    r = mixture(
        [Candidate(dg, Rho(rho=F(1, 8)), F(1, 2)), _geo(F(1), F(1, 2))], source=SeededRandom(2)
    )
    assert r.loss == Rho(rho=F(1, 2))


def test_under_declared_candidate_is_withheld() -> None:
    # Declares ε = 1/2 but runs at ε = 2: the release is refused, not returned.
    def run(src: RandomSource) -> Release:
        return geometric([1], sensitivity=1, epsilon=2, source=src)

    with pytest.raises(InvalidParameter, match="declared"):
        mixture([Candidate(run, Epsilon(epsilon=F(1, 2)), F(1), name="liar")])


def test_non_release_is_refused() -> None:
    with pytest.raises(InvalidParameter, match="no Release"):
        mixture([Candidate(lambda s: 3, Epsilon(epsilon=1), F(1))])  # type: ignore[arg-type,return-value]


# ----------------------------------------------------------------------------- event


def test_mixture_event_costs_the_max_in_composition() -> None:
    mix = MixtureEvent(
        (GeometricEvent(F(1), F(1)), GeometricEvent(F(2), F(1, 2))), (F(1, 3), F(2, 3))
    )
    assert mix.loss() == Epsilon(epsilon=1)
    other = GeometricEvent(F(1), F(1, 4))
    assert compose_events([mix, other], Epsilon) == Epsilon(epsilon=F(5, 4))
    assert compose_events([mix], Rho) == Rho(rho=F(1, 2))


def test_mixture_event_nests_and_mixes_kinds() -> None:
    inner = MixtureEvent(
        (DiscreteGaussianEvent(F(1), F(1, 8)), GeometricEvent(F(1), F(1, 2))), (F(1, 2), F(1, 2))
    )
    outer = MixtureEvent((inner, DiscreteGaussianEvent(F(1), F(1, 16))), (F(1, 2), F(1, 2)))
    assert outer.loss() == Rho(rho=F(1, 8))
    assert compose_events([outer, outer], Rho) == Rho(rho=F(1, 4))


def test_mixture_event_with_delta() -> None:
    sel = PartitionSelectionEvent(F(1), F(1, 10**6), 1)
    mix = MixtureEvent((sel, GeometricEvent(F(1), F(2))), (F(1, 2), F(1, 2)))
    loss: PrivacyLoss = compose_events([mix], EpsilonDelta)
    assert loss == EpsilonDelta(epsilon=2, delta=F(1, 10**6))
    with pytest.raises(InvalidParameter):
        compose_events([mix], Epsilon)


@pytest.mark.parametrize(
    "weights", [(F(1, 2),), (F(1, 2), F(1, 3)), (F(1), F(0))], ids=["count", "sum", "zero"]
)
def test_mixture_event_validates_weights(weights: tuple[Fraction, ...]) -> None:
    with pytest.raises(InvalidParameter):
        MixtureEvent((GeometricEvent(F(1), F(1)), GeometricEvent(F(1), F(2))), weights)


def test_release_loss_matches_the_event() -> None:
    r = mixture([_geo(F(1), F(1, 2)), _geo(F(3), F(1, 2))], source=SeededRandom(4))
    ev = MixtureEvent((GeometricEvent(F(1), F(1)), GeometricEvent(F(1), F(3))), r.weights)
    assert ev.loss() == r.loss

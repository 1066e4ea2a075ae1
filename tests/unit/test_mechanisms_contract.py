"""The contract of every mechanism: validation, reported loss, secure source, grid, shapes.

Deterministic tests (seeded sources where randomness is drawn, except where the secure
default is the point).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import mpmath  # type: ignore[import-untyped]
import numpy as np
import pytest

import deniable.noise.source as source_module
from deniable.accounting.loss import Epsilon, Rho
from deniable.errors import InvalidParameter
from deniable.mechanisms import (
    Release,
    coin_randomized_response,
    coin_rr_estimate,
    coin_rr_loss,
    discrete_gaussian,
    exponential,
    gaussian,
    gaussian_loss,
    geometric,
    k_randomized_response,
    laplace,
    laplace_loss,
    randomized_response,
    rr_loss,
)
from deniable.mechanisms.randomized_response import k_rr_keep_probability
from deniable.noise.grid import grid_sensitivity
from deniable.noise.testing import SeededRandom

BAD_PRIVACY = [0, -1, -0.5, float("nan"), float("inf"), float("-inf"), True, None]
BAD_SENSITIVITY = [0, -1, float("nan"), float("inf")]

# Each mechanism called with its privacy parameter as ``privacy``.
MECHANISMS: dict[str, Callable[..., Release]] = {
    "geometric": lambda privacy=1.0, sensitivity=1, **kw: geometric(
        [1, 2], sensitivity=sensitivity, epsilon=privacy, **kw
    ),
    "laplace": lambda privacy=1.0, sensitivity=1.0, **kw: laplace(
        [1.5, 2.0], sensitivity=sensitivity, epsilon=privacy, **kw
    ),
    "discrete_gaussian": lambda privacy=0.5, sensitivity=1, **kw: discrete_gaussian(
        [1, 2], sensitivity=sensitivity, rho=privacy, **kw
    ),
    "gaussian": lambda privacy=0.5, sensitivity=1.0, **kw: gaussian(
        [1.5, 2.0], sensitivity=sensitivity, rho=privacy, **kw
    ),
    "exponential": lambda privacy=1.0, sensitivity=1, **kw: exponential(
        [1, 2, 3], sensitivity=sensitivity, epsilon=privacy, **kw
    ),
    "k_randomized_response": lambda privacy=1.0, sensitivity=None, **kw: k_randomized_response(
        [0, 1, 2], k=3, epsilon=privacy, **kw
    ),
}
WITH_SENSITIVITY = [m for m in MECHANISMS if m != "k_randomized_response"]


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("name", list(MECHANISMS))
@pytest.mark.parametrize("bad", BAD_PRIVACY, ids=repr)
def test_bad_privacy_parameter_is_refused(name: str, bad: Any) -> None:
    with pytest.raises(InvalidParameter):
        MECHANISMS[name](privacy=bad, source=SeededRandom(0))


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_string_privacy_parameter_is_refused(name: str) -> None:
    with pytest.raises(InvalidParameter):
        MECHANISMS[name](privacy="1", source=SeededRandom(0))


@pytest.mark.parametrize("name", WITH_SENSITIVITY)
@pytest.mark.parametrize("bad", BAD_SENSITIVITY, ids=repr)
def test_bad_sensitivity_is_refused(name: str, bad: Any) -> None:
    with pytest.raises(InvalidParameter):
        MECHANISMS[name](sensitivity=bad, source=SeededRandom(0))


@pytest.mark.parametrize("bad", [1.5, 1.0, True, Fraction(1, 2), 0, -2])
def test_geometric_needs_a_positive_integer_sensitivity(bad: Any) -> None:
    with pytest.raises(InvalidParameter):
        geometric([1], sensitivity=bad, epsilon=1, source=SeededRandom(0))


@pytest.mark.parametrize("values", [[1.5], [0.0, 1.0], ["a"], [2**62], [None]], ids=repr)
@pytest.mark.parametrize("mechanism", [geometric, discrete_gaussian])
def test_integer_mechanisms_refuse_non_integers(values: list[Any], mechanism: Any) -> None:
    kw = {"epsilon": 1} if mechanism is geometric else {"rho": 1}
    with pytest.raises(InvalidParameter):
        mechanism(values, sensitivity=1, source=SeededRandom(0), **kw)


@pytest.mark.parametrize("values", [[float("nan")], [float("inf")], [1.0, float("-inf")]])
@pytest.mark.parametrize("mechanism", [laplace, gaussian])
def test_real_mechanisms_refuse_non_finite_values(values: list[float], mechanism: Any) -> None:
    kw = {"epsilon": 1} if mechanism is laplace else {"rho": 1}
    with pytest.raises(InvalidParameter):
        mechanism(values, sensitivity=1.0, source=SeededRandom(0), **kw)


@pytest.mark.parametrize("scores", [[], [[1, 2]], [1, float("nan")], [1, float("inf")]], ids=repr)
def test_exponential_refuses_bad_scores(scores: Any) -> None:
    with pytest.raises(InvalidParameter):
        exponential(scores, sensitivity=1, epsilon=1, source=SeededRandom(0))


@pytest.mark.parametrize("p", [0.5, 0.4, 1, 1.5, -1, float("nan")])
def test_randomized_response_p_must_be_in_half_one(p: float) -> None:
    with pytest.raises(InvalidParameter):
        randomized_response([1], p=p, source=SeededRandom(0))


@pytest.mark.parametrize("q", [0, 1, -0.1, 1.5, float("nan")])
def test_coin_randomized_response_q_must_be_in_zero_one(q: float) -> None:
    with pytest.raises(InvalidParameter):
        coin_randomized_response([1], q=q, source=SeededRandom(0))


@pytest.mark.parametrize("bits", [[2], [-1], [0.5], ["yes"]], ids=repr)
def test_randomized_response_needs_bits(bits: list[Any]) -> None:
    with pytest.raises(InvalidParameter):
        randomized_response(bits, p=0.75, source=SeededRandom(0))
    with pytest.raises(InvalidParameter):
        coin_randomized_response(bits, q=0.5, source=SeededRandom(0))


@pytest.mark.parametrize(
    ("values", "k"), [([0], 1), ([0], 2.0), ([3], 3), ([-1], 3), ([0.5], 3)], ids=repr
)
def test_k_randomized_response_validation(values: list[Any], k: Any) -> None:
    with pytest.raises(InvalidParameter):
        k_randomized_response(values, k=k, epsilon=1, source=SeededRandom(0))


@pytest.mark.parametrize(
    ("n_yes", "n", "q"), [(1, 0, 0.5), (-1, 10, 0.5), (11, 10, 0.5), (5, 10, 0), (5, 10, 1.5)]
)
def test_coin_rr_estimate_validation(n_yes: int, n: int, q: float) -> None:
    with pytest.raises(InvalidParameter):
        coin_rr_estimate(n_yes, n, q)


def test_error_messages_do_not_contain_the_values() -> None:
    # A private value must never leak through an error message.
    secret = 987654.321
    with pytest.raises(InvalidParameter) as info:
        geometric([secret], sensitivity=1, epsilon=1, source=SeededRandom(0))
    assert "987654" not in str(info.value)


# ----------------------------------------------------------------------------- losses


def read(x: Any) -> Fraction:
    """The exact value a privacy parameter denotes: a float is the decimal it prints as."""
    return Fraction(repr(x)) if isinstance(x, float) else Fraction(x)


@pytest.mark.parametrize("epsilon", [Fraction(1, 3), 0.1, 2, 1e-6])
def test_geometric_and_laplace_report_exactly_epsilon(epsilon: Any) -> None:
    # A float ε is read as the decimal it prints as (0.1 is 1/10); the noise is calibrated to
    # that value and exactly that value is reported.
    eps = read(epsilon)
    g = geometric([3], sensitivity=4, epsilon=epsilon, source=SeededRandom(1))
    assert g.loss == Epsilon(epsilon=eps)
    assert g.noise is not None
    assert g.noise.parameter == Fraction(4) / eps  # e.g. ε = 0.1: scale exactly 40
    assert laplace_loss(4, g.noise.parameter) == Epsilon(epsilon=eps)  # t = Δ/ε exactly
    assert g.scale == float(Fraction(4) / eps)

    r = laplace([0.25], sensitivity=1.5, epsilon=epsilon, source=SeededRandom(2))
    assert r.loss == Epsilon(epsilon=eps)
    assert r.noise is not None and r.granularity is not None
    e = round(math.log2(r.granularity))
    units_d = grid_sensitivity(1.5, e)
    # The calibration pays for the rounding: sensitivity floor(Δ/g) + 1 grid units.
    assert units_d == int(Fraction(1.5) / Fraction(2) ** e) + 1
    assert Fraction(units_d) / r.noise.parameter == eps
    assert r.scale >= 1.5 / float(eps)


@pytest.mark.parametrize("rho", [Fraction(1, 8), 0.5, 3])
@pytest.mark.parametrize("sensitivity", [1, 3])
def test_gaussians_report_rho_equal_to_delta_squared_over_two_sigma_squared(
    rho: Any, sensitivity: int
) -> None:
    r = read(rho)
    d = discrete_gaussian([0], sensitivity=sensitivity, rho=rho, source=SeededRandom(3))
    assert d.loss == Rho(rho=r)
    assert d.noise is not None
    assert Fraction(sensitivity**2) / (2 * d.noise.parameter) == r
    assert gaussian_loss(sensitivity, d.noise.parameter) == Rho(rho=r)
    assert math.isclose(d.scale, math.sqrt(sensitivity**2 / (2 * float(r))), rel_tol=1e-12)

    g = gaussian([0.5], sensitivity=float(sensitivity), rho=rho, source=SeededRandom(4))
    assert g.loss == Rho(rho=r)
    assert g.noise is not None and g.granularity is not None
    units_d = grid_sensitivity(sensitivity, round(math.log2(g.granularity)))
    assert Fraction(units_d**2) / (2 * g.noise.parameter) == r


def test_exponential_reports_epsilon() -> None:
    r = exponential([0, 5, 1], sensitivity=2, epsilon=Fraction(3, 4), source=SeededRandom(5))
    assert r.loss == Epsilon(epsilon=Fraction(3, 4))
    assert r.value.shape == () and r.value.dtype == np.int64
    assert 0 <= int(r.value) < 3


def test_randomized_response_losses_are_safe_upper_bounds() -> None:
    with mpmath.workdps(40):
        for p in [Fraction(3, 4), Fraction(9, 10), Fraction(51, 100)]:
            loss = randomized_response([1], p=p, source=SeededRandom(6)).loss
            assert isinstance(loss, Epsilon) and loss == rr_loss(p)
            true = mpmath.log(mpmath.mpf(p.numerator) / (p.denominator - p.numerator))
            assert true <= mpmath.mpf(loss.epsilon.numerator) / loss.epsilon.denominator
            assert float(loss.epsilon) == pytest.approx(float(true), rel=1e-12)
        for q in [Fraction(1, 2), Fraction(4, 5)]:
            loss = coin_randomized_response([1], q=q, source=SeededRandom(7)).loss
            assert isinstance(loss, Epsilon) and loss == coin_rr_loss(q)
            true = mpmath.log(
                (1 + mpmath.mpf(q.numerator) / q.denominator)
                / (1 - mpmath.mpf(q.numerator) / q.denominator)
            )
            assert true <= mpmath.mpf(loss.epsilon.numerator) / loss.epsilon.denominator
            assert float(loss.epsilon) == pytest.approx(float(true), rel=1e-12)
    assert float(coin_rr_loss(Fraction(1, 2)).epsilon) == pytest.approx(math.log(3))


@pytest.mark.parametrize(("k", "epsilon"), [(2, 1.0), (5, 1.0), (100, 0.1), (3, 8.0)])
def test_k_randomized_response_keep_probability_is_within_epsilon(k: int, epsilon: float) -> None:
    # The loss is ln(p(k−1)/(1−p)); it must not exceed the ε reported.
    r = k_randomized_response([0], k=k, epsilon=epsilon, source=SeededRandom(8))
    eps = read(epsilon)  # 0.1 is exactly 1/10: the keep probability is calibrated to it
    assert r.loss == Epsilon(epsilon=eps)
    p = k_rr_keep_probability(k, epsilon)
    assert p == k_rr_keep_probability(k, eps)
    ratio = p * (k - 1) / (1 - p)
    with mpmath.workdps(50):
        assert mpmath.mpf(ratio.numerator) / ratio.denominator <= mpmath.exp(
            mpmath.mpf(eps.numerator) / eps.denominator
        )
    assert float(ratio) == pytest.approx(math.exp(epsilon), rel=1e-12)


def test_loss_maps_grow_with_sensitivity() -> None:
    assert laplace_loss(1, 2) <= laplace_loss(2, 2)
    assert laplace_loss(2, 2) != laplace_loss(1, 2)
    assert gaussian_loss(1, 4) <= gaussian_loss(2, 4)
    assert gaussian_loss(2, 4) == Rho(rho=Fraction(1, 2))


def test_coin_rr_estimate_thesis_example() -> None:
    # 1000 answers, 400 yes, q = 1/2 → 30% (DESIGN §4).
    assert coin_rr_estimate(400, 1000, Fraction(1, 2)) == pytest.approx(0.3, abs=1e-12)
    assert coin_rr_estimate(400, 1000, 0.5) == pytest.approx(0.3, abs=1e-12)


# ----------------------------------------------------------------------------- secure source


def _fake_urandom(seed: bytes) -> tuple[Callable[[int], bytes], list[int]]:
    calls: list[int] = []
    counter = [0]

    def urandom(n: int) -> bytes:
        calls.append(n)
        counter[0] += 1
        return hashlib.shake_256(seed + counter[0].to_bytes(8, "little")).digest(n)

    return urandom, calls


@pytest.mark.parametrize("name", [*MECHANISMS, "randomized_response", "coin"])
def test_release_path_draws_from_the_os_csprng_by_default(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With no source, every bit of randomness must come from os.urandom: replacing it by a
    # deterministic stream makes the release deterministic (nothing else was used), and
    # a different stream changes it.
    def run() -> Release:
        if name == "randomized_response":
            return randomized_response(np.ones(64, dtype=bool), p=0.75)
        if name == "coin":
            return coin_randomized_response(np.ones(64, dtype=bool), q=0.5)
        if name == "exponential":
            return exponential(np.zeros(64), sensitivity=1, epsilon=1.0)
        if name == "k_randomized_response":
            return k_randomized_response(np.zeros(64, dtype=np.int64), k=5, epsilon=1.0)
        return MECHANISMS[name]()

    outputs = []
    for seed in (b"a", b"a", b"b"):
        urandom, calls = _fake_urandom(seed)
        monkeypatch.setattr("deniable.noise.source.os.urandom", urandom)
        monkeypatch.setattr(source_module, "_DEFAULT", None)  # a fresh secure source
        outputs.append(np.asarray(run().value).tobytes())
        assert calls, "the release did not read os.urandom"
    assert outputs[0] == outputs[1]
    if name in ("exponential",):
        return  # a single index out of 64 can coincide; determinism is what matters here
    assert outputs[0] != outputs[2]


def test_default_source_is_secure() -> None:
    assert source_module.default_source().secure is True
    assert SeededRandom(1).secure is False


# ----------------------------------------------------------------------------- grid & shapes

GRID_INPUTS = [0.0, 1.0, 2.0**-1074, 1e15 + 0.5, -0.0, -3.75, 123456.789]


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e6])
@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_grid_releases_are_finite_exact_multiples_of_the_granularity(
    scale: float, mechanism: str
) -> None:
    x = np.array(GRID_INPUTS)
    if mechanism == "laplace":
        r = laplace(x, sensitivity=scale, epsilon=1.0, source=SeededRandom(11))
    else:
        r = gaussian(x, sensitivity=scale, rho=0.5, source=SeededRandom(12))
    g = r.granularity
    assert g is not None and g > 0
    assert g == 2.0 ** round(math.log2(g))  # a power of two
    assert g <= r.scale * 2**-11  # fine relative to the noise scale
    assert r.scale >= (scale if mechanism == "laplace" else scale / math.sqrt(2 * 0.5))
    v = np.asarray(r.value)
    assert v.dtype == np.float64 and np.isfinite(v).all()
    for value in v.tolist():
        assert (Fraction(value) / Fraction(g)).denominator == 1, value


def test_integer_mechanisms_keep_shape_and_return_int64() -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    for r in [
        geometric(x, sensitivity=1, epsilon=1, source=SeededRandom(13)),
        discrete_gaussian(x, sensitivity=1, rho=1, source=SeededRandom(14)),
    ]:
        assert r.value.shape == (3, 4) and r.value.dtype == np.int64
        assert r.granularity == 1.0
        lo, hi = r.interval(0.9)
        assert lo.shape == (3, 4) and hi.shape == (3, 4)


def test_real_mechanisms_keep_shape() -> None:
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    for r in [
        laplace(x, sensitivity=1.0, epsilon=1, source=SeededRandom(15)),
        gaussian(x, sensitivity=1.0, rho=1, source=SeededRandom(16)),
    ]:
        assert r.value.shape == (2, 3) and r.value.dtype == np.float64


def test_local_randomisers_keep_shape_and_type() -> None:
    b = np.array([[True, False], [False, True]])
    assert randomized_response(b, p=0.75, source=SeededRandom(17)).value.shape == (2, 2)
    assert coin_randomized_response(b, q=0.5, source=SeededRandom(18)).value.dtype == np.bool_
    v = k_randomized_response(np.array([0, 4, 2]), k=5, epsilon=1, source=SeededRandom(19))
    assert v.value.dtype == np.int64 and set(v.value.tolist()) <= set(range(5))


def test_inputs_are_not_mutated() -> None:
    x = np.array([1, 2, 3], dtype=np.int64)
    xf = np.array([0.5, 1.5])
    scores = np.array([0.0, 1.0])
    geometric(x, sensitivity=1, epsilon=1, source=SeededRandom(20))
    discrete_gaussian(x, sensitivity=1, rho=1, source=SeededRandom(21))
    laplace(xf, sensitivity=1, epsilon=1, source=SeededRandom(22))
    gaussian(xf, sensitivity=1, rho=1, source=SeededRandom(23))
    exponential(scores, sensitivity=1, epsilon=1, source=SeededRandom(24))
    assert x.tolist() == [1, 2, 3] and xf.tolist() == [0.5, 1.5] and scores.tolist() == [0, 1]


def test_exponential_never_picks_a_hopeless_candidate_at_huge_epsilon() -> None:
    # Exactness sanity: the gap of 1000 at ε = 50 gives acceptance e^-25000 — never taken.
    picks = {
        int(exponential([0, 1000], sensitivity=1, epsilon=50, source=SeededRandom(s)).value)
        for s in range(50)
    }
    assert picks == {1}

"""Unit tests of deniable.local: randomisers, their losses, estimators and intervals."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.local import (
    BinaryRandomizedResponse,
    BloomEncoder,
    CoinRandomizedResponse,
    KRandomizedResponse,
    LocalRandomizer,
    OptimizedUnaryEncoding,
    estimate_binary,
    estimate_coin,
    estimate_k_rr,
    population_counts,
    pure_estimate,
    simulate_survey,
)
from deniable.local.intervals import beta_cdf, clopper_pearson, normal_quantile
from deniable.mechanisms import coin_rr_estimate
from deniable.noise.testing import SeededRandom

# ------------------------------------------------------------------ losses


def test_binary_rr_loss_is_ln_p_over_1_minus_p_rounded_up() -> None:
    for p in (Fraction(3, 4), Fraction(9, 10), 0.6):
        eps = BinaryRandomizedResponse(p=p).loss.epsilon
        exact = math.log(float(p) / (1 - float(p)))
        assert exact <= float(eps) <= exact + 1e-12


def test_coin_rr_loss_is_ln3_at_one_half() -> None:
    eps = CoinRandomizedResponse(q=0.5).loss.epsilon
    assert math.log(3) <= float(eps) <= math.log(3) + 1e-12
    # The coin variant with q is binary RR with p = (1+q)/2: same ε.
    for q in (Fraction(1, 5), Fraction(1, 2), Fraction(4, 5)):
        a = CoinRandomizedResponse(q=q).loss.epsilon
        b = BinaryRandomizedResponse(p=(1 + q) / 2).loss.epsilon
        assert abs(float(a) - float(b)) < 1e-12


def test_k_rr_keep_probability_is_on_the_safe_side() -> None:
    grr = KRandomizedResponse(k=10, epsilon=2)
    p = grr.keep_probability
    # The real loss ln(p(k−1)/(1−p)) must not exceed the stated ε.
    assert math.log(float(p) * 9 / (1 - float(p))) <= 2
    assert float(p) == pytest.approx(math.exp(2) / (math.exp(2) + 9), rel=1e-12)
    assert grr.loss == Epsilon(epsilon=2)


def test_oue_q_is_on_the_safe_side() -> None:
    oue = OptimizedUnaryEncoding(k=8, epsilon=Fraction(3, 2))
    q = oue.q
    real = math.log(0.5 * (1 - float(q)) / (0.5 * float(q)))
    assert real <= 1.5
    assert float(q) == pytest.approx(1 / (math.exp(1.5) + 1), rel=1e-12)


def test_bloom_losses_match_the_rappor_paper() -> None:
    # RAPPOR (CCS 2014) §3: h = 2, f = 1/2, p = 1/2, q = 3/4 give ε∞ = 4.39, ε₁ = 1.0743.
    enc = BloomEncoder(num_bits=128, num_hashes=2, num_cohorts=64, f=0.5, p=0.5, q=0.75)
    assert float(enc.permanent_loss.epsilon) == pytest.approx(4 * math.log(3), abs=1e-12)
    assert float(enc.permanent_loss.epsilon) >= 4 * math.log(3)
    qs = 0.25 * 1.25 + 0.5 * 0.75
    ps = 0.25 * 1.25 + 0.5 * 0.5
    assert float(enc.loss.epsilon) == pytest.approx(
        2 * math.log(qs * (1 - ps) / (ps * (1 - qs))), abs=1e-12
    )
    assert round(float(enc.loss.epsilon), 4) == 1.0743


def test_bloom_one_report_loss_never_exceeds_permanent() -> None:
    # p = 0, q = 1 (no IRR): one report is the PRR itself.
    enc = BloomEncoder(num_bits=16, num_hashes=3, num_cohorts=2, f=0.25, p=0, q=1)
    assert enc.loss <= enc.permanent_loss
    assert float(enc.permanent_loss.epsilon - enc.loss.epsilon) < 1e-12


@pytest.mark.parametrize(
    "make",
    [
        lambda: BinaryRandomizedResponse(p=0.5),
        lambda: BinaryRandomizedResponse(p=1),
        lambda: BinaryRandomizedResponse(p=0.3),
        lambda: CoinRandomizedResponse(q=0),
        lambda: CoinRandomizedResponse(q=1),
        lambda: KRandomizedResponse(k=1, epsilon=1),
        lambda: KRandomizedResponse(k=3, epsilon=0),
        lambda: OptimizedUnaryEncoding(k=3, epsilon=-1),
        lambda: BloomEncoder(num_bits=8, num_hashes=2, num_cohorts=2, f=0, p=0.5, q=0.75),
        lambda: BloomEncoder(num_bits=8, num_hashes=2, num_cohorts=2, f=0.5, p=0.75, q=0.5),
        lambda: BloomEncoder(num_bits=8, num_hashes=17, num_cohorts=2, f=0.5, p=0, q=1),
        lambda: BloomEncoder(num_bits=8, num_hashes=2, num_cohorts=2, f=0.5, p=0, q=1, cohort=2),
    ],
)
def test_bad_parameters_are_refused(make: object) -> None:
    with pytest.raises(InvalidParameter):
        make()  # type: ignore[operator]


def test_every_randomizer_satisfies_the_protocol() -> None:
    for r in (
        BinaryRandomizedResponse(p=0.75),
        CoinRandomizedResponse(q=0.5),
        KRandomizedResponse(k=3, epsilon=1),
        OptimizedUnaryEncoding(k=3, epsilon=1),
        BloomEncoder(num_bits=8, num_hashes=2, num_cohorts=2, f=0.5, p=0.5, q=0.75),
    ):
        assert isinstance(r, LocalRandomizer)


# ------------------------------------------------------------------ randomisers


def test_reports_have_the_right_shape_and_domain() -> None:
    src = SeededRandom(5)
    assert BinaryRandomizedResponse(p=0.75).randomize([0, 1, 1, 0], source=src).shape == (4,)
    kr = KRandomizedResponse(k=5, epsilon=1).randomize(np.arange(5).repeat(20), source=src)
    assert kr.min() >= 0 and kr.max() <= 4
    oue = OptimizedUnaryEncoding(k=6, epsilon=1).randomize([0, 5, 2], source=src)
    assert oue.shape == (3, 6) and oue.dtype == bool
    enc = BloomEncoder(num_bits=32, num_hashes=2, num_cohorts=4, f=0.5, p=0.5, q=0.75)
    rep = enc.randomize(["a", "b", "c"], source=src)
    assert rep.bits.shape == (3, 32) and rep.cohorts.shape == (3,) and len(rep) == 3


def test_values_outside_the_domain_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        KRandomizedResponse(k=3, epsilon=1).randomize([0, 3], source=SeededRandom(0))
    with pytest.raises(InvalidParameter):
        OptimizedUnaryEncoding(k=3, epsilon=1).randomize([-1], source=SeededRandom(0))
    with pytest.raises(InvalidParameter):
        BinaryRandomizedResponse(p=0.75).randomize([2], source=SeededRandom(0))
    enc = BloomEncoder(num_bits=8, num_hashes=2, num_cohorts=2, f=0.5, p=0.5, q=0.75)
    with pytest.raises(InvalidParameter):
        enc.randomize([1.5], source=SeededRandom(0))  # type: ignore[list-item]
    with pytest.raises(InvalidParameter):
        enc.randomize("abc", source=SeededRandom(0))  # type: ignore[arg-type]


def test_oue_own_bit_is_a_fair_coin_and_others_rare() -> None:
    # Deterministic given the seed; a loose sanity check (the stats suite tests the law).
    rep = OptimizedUnaryEncoding(k=4, epsilon=3).randomize(
        np.zeros(4000, dtype=int), source=SeededRandom(1)
    )
    assert 0.45 < rep[:, 0].mean() < 0.55
    assert rep[:, 1:].mean() < 0.1


def test_bloom_filter_hashing_is_deterministic_and_cohort_specific() -> None:
    enc = BloomEncoder(num_bits=64, num_hashes=3, num_cohorts=8, f=0.5, p=0.5, q=0.75)
    a = enc.filter_indices("hello", 0)
    assert a == enc.filter_indices("hello", 0) == enc.filter_indices(b"hello", 0)
    assert len(a) == 3 and all(0 <= i < 64 for i in a)
    assert {enc.filter_indices("hello", j) for j in range(8)} != {a}
    other = BloomEncoder(
        num_bits=64, num_hashes=3, num_cohorts=8, f=0.5, p=0.5, q=0.75, hash_key=b"other"
    )
    assert [other.filter_indices("hello", j) for j in range(8)] != [
        enc.filter_indices("hello", j) for j in range(8)
    ]
    bloom = enc.bloom(["hello", "x"], np.array([0, 1]))
    assert set(np.flatnonzero(bloom[0])) == set(a)


def test_bloom_with_fixed_cohort_and_for_client() -> None:
    enc = BloomEncoder(num_bits=16, num_hashes=2, num_cohorts=4, f=0.5, p=0.5, q=0.75)
    client = enc.for_client(SeededRandom(3))
    assert client.cohort is not None
    rep = client.randomize(["a"] * 10, source=SeededRandom(4))
    assert set(rep.cohorts.tolist()) == {client.cohort}


# ------------------------------------------------------------------ estimators


def test_thesis_survey_example_gives_thirty_percent() -> None:
    est = estimate_coin(400, 1000, q=Fraction(1, 2))
    assert est.fraction == 0.3  # exact: (2/5 − 1/4)/(1/2) = 3/10
    assert est[1] == 0.3 and est[0] == 0.7
    assert coin_rr_estimate(400, 1000, 0.5) == pytest.approx(est.fraction)
    # Var = (1 − q²)/(4nq²) exactly for coin RR.
    assert est.variance[1] == pytest.approx(0.75 / (4 * 1000 * 0.25))


def test_estimate_via_randomizer_matches_function() -> None:
    reports = np.array([True] * 400 + [False] * 600)
    assert CoinRandomizedResponse(q=0.5).estimate(reports).fraction == 0.3
    assert BinaryRandomizedResponse(p=0.75).estimate(reports).fraction == pytest.approx(0.3)


def test_binary_estimate_inverts_the_expected_counts_exactly() -> None:
    # With exactly the expected number of yes answers, the estimate is the truth.
    for p in (Fraction(3, 5), Fraction(3, 4), Fraction(9, 10)):
        for f in (Fraction(0), Fraction(1, 4), Fraction(1)):
            n = 4000
            yes = (2 * p - 1) * f * n + (1 - p) * n
            assert yes.denominator == 1
            assert estimate_binary(int(yes), n, p=p).fraction == float(f)


def test_pure_estimate_inverts_expected_counts() -> None:
    k, p = 5, Fraction(1, 2)
    q = (1 - p) / (k - 1)
    f = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    n = 8000
    counts = n * (f * float(p) + (1 - f) * float(q))
    est = estimate_k_rr(np.round(counts).astype(int), keep_probability=p)
    np.testing.assert_allclose(est.frequencies, f, atol=1e-12)
    assert est.n == n


def test_estimator_variance_formula() -> None:
    # Var f̂ = (f p(1−p) + (1−f) q(1−q)) / (n (p−q)²), with f̂ plugged in.
    est = pure_estimate([500], 1000, p=0.5, q=0.25, mechanism="x")
    f = (0.5 - 0.25) / 0.25
    expected = (f * 0.25 + (1 - f) * 0.25 * 0.75) / (1000 * 0.0625)
    assert est.variance[0] == pytest.approx(expected)


def test_estimators_refuse_bad_input() -> None:
    with pytest.raises(InvalidParameter):
        estimate_binary(11, 10, p=0.75)
    with pytest.raises(InvalidParameter):
        estimate_binary(1, 0, p=0.75)
    with pytest.raises(InvalidParameter):
        estimate_coin(1, 10, q=0)
    with pytest.raises(InvalidParameter):
        pure_estimate([1, 2], 10, p=0.25, q=0.5, mechanism="x")
    with pytest.raises(InvalidParameter):
        estimate_k_rr([3], keep_probability=0.5)
    with pytest.raises(InvalidParameter):
        estimate_coin(400, 1000, q=0.5)["maybe"]


def test_normal_interval_is_clipped_and_symmetric() -> None:
    est = estimate_coin(400, 1000, q=0.5)
    lo, hi = est.interval(0.95)
    h = normal_quantile(0.95) * math.sqrt(0.75 / 1000)
    assert lo[1] == pytest.approx(0.3 - h) and hi[1] == pytest.approx(0.3 + h)
    lo, hi = estimate_coin(0, 1000, q=0.5).interval(0.95)  # estimate −0.5: clipped to 0
    assert lo[1] == 0 and hi[1] == 0
    with pytest.raises(InvalidParameter):
        est.interval(1.0)


def test_exact_interval_maps_clopper_pearson_through_the_debiasing() -> None:
    est = estimate_coin(400, 1000, q=0.5)
    lam_lo, lam_hi = stats.binomtest(400, 1000).proportion_ci(0.95, method="exact")
    lo, hi = est.exact_interval(0.95)
    assert lo == pytest.approx((lam_lo - 0.25) / 0.5, abs=1e-9)
    assert hi == pytest.approx((lam_hi - 0.25) / 0.5, abs=1e-9)
    assert lo <= 0.3 <= hi


@pytest.mark.parametrize(
    "x,n", [(0, 5), (5, 5), (1, 2), (37, 100), (3, 10_000), (123_456, 400_000)]
)
@pytest.mark.parametrize("level", [0.5, 0.95, 1 - 1e-7])
def test_clopper_pearson_matches_scipy(x: int, n: int, level: float) -> None:
    lo, hi = clopper_pearson(x, n, level)
    ref = stats.binomtest(x, n).proportion_ci(level, method="exact")
    assert lo <= ref.low + 1e-12 and hi >= ref.high - 1e-12  # never narrower
    assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)


def test_beta_cdf_matches_scipy() -> None:
    for x, a, b in [(0.3, 2.0, 5.0), (0.9, 0.5, 0.5), (0.01, 100.0, 3.0)]:
        assert beta_cdf(x, a, b) == pytest.approx(stats.beta.cdf(x, a, b), abs=1e-12)
    # Huge shapes: lgamma of ~1e5 carries ~1e-10 relative error into the prefactor; it moves
    # a Clopper–Pearson bound by ~1e-14 (covered by the 1e-11 outward slack).
    for x, a, b in [(0.5, 1e5, 1e5), (0.3001, 3e5, 7e5), (1e-6, 5.0, 1e6)]:
        assert beta_cdf(x, a, b) == pytest.approx(stats.beta.cdf(x, a, b), rel=1e-8)


# ------------------------------------------------------------------ simulator


def test_population_counts_are_exact() -> None:
    assert population_counts([0.3, 0.7], 1000).tolist() == [300, 700]
    assert population_counts([Fraction(1, 3)] * 3, 100).sum() == 100
    with pytest.raises(InvalidParameter):
        population_counts([0.5, 0.6], 10)
    with pytest.raises(InvalidParameter):
        population_counts([-0.5, 1.5], 10)


def test_simulate_survey_binary_and_bloom() -> None:
    r = simulate_survey(CoinRandomizedResponse(q=0.5), 0.3, 20_000, source=SeededRandom(2))
    assert r.true_counts.tolist() == [14_000, 6_000] and r.n == 20_000
    assert abs(r.estimate.frequencies[1] - 0.3) < 0.04
    assert r.loss == CoinRandomizedResponse(q=0.5).loss
    enc = BloomEncoder(num_bits=32, num_hashes=2, num_cohorts=8, f=0.5, p=0.5, q=0.75)
    cands = ("apple", "banana", "cherry")
    r2 = simulate_survey(enc, [0.5, 0.3, 0.2], 20_000, domain=cands, source=SeededRandom(3))
    assert r2.estimate.labels == cands
    assert np.abs(r2.estimate.frequencies - [0.5, 0.3, 0.2]).max() < 0.1
    with pytest.raises(InvalidParameter):
        simulate_survey(enc, [0.5, 0.5], 100, source=SeededRandom(3))  # open domain
    with pytest.raises(InvalidParameter):
        simulate_survey(KRandomizedResponse(k=3, epsilon=1), 0.3, 100)


def test_bloom_decoder_refuses_indistinguishable_candidates() -> None:
    enc = BloomEncoder(num_bits=2, num_hashes=1, num_cohorts=1, f=0.5, p=0.5, q=0.75)
    rep = enc.randomize(["a", "b", "c"], source=SeededRandom(0))
    with pytest.raises(InvalidParameter, match="told apart"):
        enc.estimate(rep, domain=["a", "b", "c"])
    with pytest.raises(InvalidParameter):
        enc.estimate(rep)


def test_default_source_is_the_secure_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # The release path draws from the CSPRNG when no source is passed.
    import deniable.noise.source as source_mod

    calls: list[int] = []
    real = source_mod.SecureRandom.words

    def spy(self: source_mod.SecureRandom, n: int) -> np.ndarray:  # type: ignore[type-arg]
        calls.append(n)
        return real(self, n)

    monkeypatch.setattr(source_mod.SecureRandom, "words", spy)
    OptimizedUnaryEncoding(k=3, epsilon=1).randomize([0, 1])
    BloomEncoder(num_bits=8, num_hashes=2, num_cohorts=2, f=0.5, p=0.5, q=0.75).randomize(["a"])
    assert len(calls) >= 2

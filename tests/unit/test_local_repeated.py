"""Repeated collection: fresh randomisation costs T·ε, memoisation keeps one response's ε."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.local import (
    BinaryRandomizedResponse,
    BloomEncoder,
    CoinRandomizedResponse,
    FreshRandomizer,
    KeyedStream,
    KRandomizedResponse,
    MemoizedRandomizer,
    OptimizedUnaryEncoding,
    fresh_loss,
    memoized_loss,
)
from deniable.noise.testing import SeededRandom


def test_fresh_loss_is_sequential_composition() -> None:
    assert fresh_loss(Epsilon(epsilon=Fraction(1, 2)), 365) == Epsilon(epsilon=Fraction(365, 2))
    assert fresh_loss(Epsilon(epsilon=1), 0) == Epsilon(epsilon=0)
    with pytest.raises(InvalidParameter):
        fresh_loss(Epsilon(epsilon=1), -1)


def test_resetting_epsilon_daily_understates_the_loss() -> None:
    # A client reporting the same value every day for a year with fresh coins: the loss
    # is 365·ε, not the "ε per day" a daily reset would advertise.
    rr = CoinRandomizedResponse(q=0.5)
    client = FreshRandomizer(rr, source=SeededRandom(0))
    for _ in range(365):
        client.report(1)
    assert client.loss == fresh_loss(rr.loss, 365)
    assert float(client.loss.epsilon) == pytest.approx(365 * math.log(3), rel=1e-12)


def test_fresh_reports_vary_and_memoized_reports_do_not() -> None:
    rr = BinaryRandomizedResponse(p=Fraction(3, 4))
    fresh = FreshRandomizer(rr, source=SeededRandom(1))
    answers = {bool(fresh.report(1)[0]) for _ in range(50)}
    assert answers == {True, False}  # P(all 50 equal) = 0.75^50 + 0.25^50 < 1e-6
    memo = MemoizedRandomizer(rr, source=SeededRandom(1))
    assert len({bool(memo.report(1)[0]) for _ in range(50)}) == 1
    assert memo.loss == rr.loss and memo.reports == 50 and memo.distinct_values == 1


def test_memoized_loss_grows_with_distinct_values_only() -> None:
    rr = KRandomizedResponse(k=5, epsilon=1)
    memo = MemoizedRandomizer(rr, source=SeededRandom(2))
    first = {int(memo.report(v)[0]) for v in [3, 3, 3]}
    assert len(first) == 1 and memo.loss == Epsilon(epsilon=1)
    memo.report(4)
    assert memo.loss == Epsilon(epsilon=2) and memo.distinct_values == 2
    # Returning to an earlier value gives its earlier answer and costs nothing more.
    assert {int(memo.report(3)[0])} == first
    assert memo.loss == Epsilon(epsilon=2)


def test_memoized_loss_formula() -> None:
    enc = BloomEncoder(num_bits=16, num_hashes=2, num_cohorts=4, f=0.5, p=0.5, q=0.75)
    e1, einf = enc.loss.epsilon, enc.permanent_loss.epsilon
    # Σ_v min(T_v·ε₁, ε∞): a value reported twice costs 2ε₁ < ε∞; 100 times, ε∞.
    assert memoized_loss(enc, [2]).epsilon == 2 * e1
    assert memoized_loss(enc, [100]).epsilon == einf
    assert memoized_loss(enc, [100, 1, 0]).epsilon == einf + e1
    with pytest.raises(InvalidParameter):
        memoized_loss(enc, [-1])


def test_memoized_bloom_keeps_permanent_bits_and_refreshes_the_irr() -> None:
    enc = BloomEncoder(num_bits=64, num_hashes=2, num_cohorts=4, f=0.5, p=0, q=1)
    memo = MemoizedRandomizer(enc, source=SeededRandom(3))
    reps = [memo.report("news.example") for _ in range(5)]
    # p = 0, q = 1: no IRR, so the report is the memoised PRR itself, identical each time.
    assert all((r.bits == reps[0].bits).all() for r in reps)
    assert len({int(r.cohorts[0]) for r in reps}) == 1  # one client, one cohort
    enc2 = BloomEncoder(num_bits=64, num_hashes=2, num_cohorts=4, f=0.5, p=0.25, q=0.75)
    memo2 = MemoizedRandomizer(enc2, source=SeededRandom(3))
    reps2 = [memo2.report("news.example").bits for _ in range(5)]
    assert any((r != reps2[0]).any() for r in reps2)  # the IRR differs (P[equal] ≈ 2^-100)
    assert memo2.loss.epsilon == min(5 * enc2.loss.epsilon, enc2.permanent_loss.epsilon)


def test_memoization_is_keyed_by_the_secret() -> None:
    oue = OptimizedUnaryEncoding(k=16, epsilon=1)
    a1 = MemoizedRandomizer(oue, secret=b"a" * 32).report(7)
    a2 = MemoizedRandomizer(oue, secret=b"a" * 32).report(7)
    b = MemoizedRandomizer(oue, secret=b"b" * 32).report(7)
    np.testing.assert_array_equal(a1, a2)
    assert (a1 != b).any()  # deterministic for these fixed secrets: another key, another stream
    with pytest.raises(InvalidParameter):
        MemoizedRandomizer(oue, secret=b"short")
    with pytest.raises(InvalidParameter):
        MemoizedRandomizer(oue, secret=b"a" * 32).report(1.5)


def test_memoized_randomizer_never_shows_its_secret() -> None:
    memo = MemoizedRandomizer(CoinRandomizedResponse(q=0.5), secret=b"s3cr3t-s3cr3t-s3cr3t")
    assert "s3cr3t" not in repr(memo)


def test_keyed_stream_is_a_deterministic_prf() -> None:
    a = KeyedStream(b"k" * 32, b"x", secure=True).words(8)
    b = KeyedStream(b"k" * 32, b"x", secure=True).words(8)
    c = KeyedStream(b"k" * 32, b"y", secure=True).words(8)
    d = KeyedStream(b"K" * 32, b"x", secure=True).words(8)
    assert (a == b).all() and (a != c).all() and (a != d).all()
    s = KeyedStream(b"k" * 32, b"x", secure=False)
    assert not s.secure and (s.words(3) != s.words(3)).any()  # the stream advances


def test_secret_drawn_from_the_given_source() -> None:
    rr = CoinRandomizedResponse(q=0.5)
    outs = {bool(MemoizedRandomizer(rr, source=SeededRandom(s)).report(1)[0]) for s in range(40)}
    assert outs == {True, False}  # different clients, different memoised answers

"""The thesis' §3.1.2 examples, computed exactly by the privacy-definitions lab."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from deniable.audit.definitions import (
    Dataset,
    Law,
    Setting,
    causal_epsilon,
    deterministic,
    distributional_epsilon,
    dp_epsilon,
    noiseless_epsilon,
    randomize_each,
)
from deniable.errors import InvalidParameter

HALF = Fraction(1, 2)
BIT = {0: HALF, 1: HALF}
identity = deterministic(lambda d: d)


def test_example_2_identity_on_duplicated_records() -> None:
    """The identity is 0-DistDP (the simulator copies the duplicate), yet leaks everything."""
    prior = Setting.duplicated(BIT, n=2)  # (x1, x2, x1, x2)

    def copy_duplicate(rest: Dataset, i: int) -> Law:
        n = 2
        twin = i + n if i < n else i - n
        full = list(rest)
        full.insert(i, rest[twin if twin < i else twin - 1])
        return {tuple(full): Fraction(1)}

    assert distributional_epsilon(prior, identity, copy_duplicate).epsilon == 0.0
    assert noiseless_epsilon(prior, identity).ratio is None
    assert causal_epsilon(prior, identity).ratio is None
    assert dp_epsilon(prior, identity).ratio is None
    # a simulator that cannot use the dependencies does not make the identity private
    blind = distributional_epsilon(prior, identity, lambda rest, i: {(0, 0, 0, 0): Fraction(1)})
    assert blind.ratio is None


def test_example_4_parity_of_a_sum_of_duplicated_records() -> None:
    """NPr holds with ε = 0 (the sum is always even); CausDP cannot hold (ε = ∞)."""
    prior = Setting.duplicated({0: Fraction(1, 3), 1: Fraction(1, 3), 2: Fraction(1, 3)}, n=2)
    parity = deterministic(lambda d: sum(int(str(r)) for r in d) % 2)
    assert noiseless_epsilon(prior, parity).epsilon == 0.0
    causal = causal_epsilon(prior, parity)
    assert causal.epsilon == math.inf and "changed to" in causal.witness
    assert dp_epsilon(prior, parity).epsilon == math.inf


def test_proposition_22_independent_records_npr_equals_causdp() -> None:
    """Without dependencies NPr and CausDP coincide (here with DP too, for RR on each bit)."""
    for p in (Fraction(3, 4), Fraction(9, 10)):
        rr = randomize_each(p)
        iid = Setting.independent({0: Fraction(1, 5), 1: Fraction(4, 5)}, n=2)
        ratio = p / (1 - p)
        assert noiseless_epsilon(iid, rr).ratio == ratio
        assert causal_epsilon(iid, rr).ratio == ratio
        assert dp_epsilon(iid, rr).ratio == ratio
    # the parity of independent uniform bits: the other bit hides the target under both
    # definitions (ε = 0), while DP, with no uncertainty, gives ∞
    iid = Setting.independent(BIT, n=2)
    parity = deterministic(lambda d: sum(int(str(r)) for r in d) % 2)
    assert noiseless_epsilon(iid, parity).epsilon == 0.0
    assert causal_epsilon(iid, parity).epsilon == 0.0
    assert dp_epsilon(iid, parity).epsilon == math.inf


def test_example_5_a_correcting_mechanism_is_causdp_but_leaks_everything() -> None:
    """Adam Smith's example: triplicated records, M corrects a lone value, outputs D."""
    prior = Setting.duplicated(BIT, n=1, copies=3)

    def correct(d: Dataset) -> Law:
        counts = {v: d.count(v) for v in set(d)}
        once = [v for v, c in counts.items() if c == 1]
        twice = [v for v, c in counts.items() if c == 2]
        if once and twice:
            d = tuple(twice[0] if v == once[0] else v for v in d)
        return {d: Fraction(1)}

    assert causal_epsilon(prior, correct).epsilon == 0.0
    assert noiseless_epsilon(prior, correct).epsilon == math.inf
    assert dp_epsilon(prior, correct).epsilon == math.inf


def test_randomized_response_on_duplicates_doubles_the_noiseless_loss() -> None:
    """Correlations compound: RR on both copies of one bit gives NPr ratio (p/(1−p))²."""
    p = Fraction(3, 4)
    prior = Setting.duplicated(BIT, n=1)
    rr = randomize_each(p)
    assert noiseless_epsilon(prior, rr).ratio == (p / (1 - p)) ** 2
    assert causal_epsilon(prior, rr).ratio == p / (1 - p)
    assert dp_epsilon(prior, rr).ratio == p / (1 - p)


def test_background_knowledge_conditions_the_comparison() -> None:
    """With b revealing the other record, the sum's NPr loss is that of the record alone."""
    outcomes = {((a, c), c): Fraction(1, 4) for a in (0, 1) for c in (0, 1)}
    prior = Setting(outcomes)
    total = deterministic(sum)
    assert noiseless_epsilon(prior, total).ratio is None  # b fixes the other record
    rr_sum = randomize_each(Fraction(2, 3))
    assert noiseless_epsilon(prior, rr_sum).ratio == 2


def test_bad_settings_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        Setting.of_datasets({(0,): HALF})
    with pytest.raises(InvalidParameter):
        Setting.of_datasets({(0,): HALF, (0, 1): HALF})
    with pytest.raises(InvalidParameter):
        noiseless_epsilon(Setting.independent(BIT, n=1), lambda d: {0: HALF})

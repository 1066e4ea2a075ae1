"""The exponential mechanism's exact law (the oracle of the statistical tests) and its ε-DP.

``exponential_probabilities`` is checked against a brute-force sum over all visiting orders of
permute-and-flip; then, exactly (no sampling), every pair of neighbouring score vectors in a
grid has output probabilities within a factor ``e^ε`` — the privacy claim itself — and the
same check refutes the mechanism run at 2ε (the negative control).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from deniable.errors import InvalidParameter
from deniable.mechanisms.exponential import exponential_probabilities, random_permutation
from deniable.noise.testing import SeededRandom


def _brute_force(scores: list[float], sensitivity: float, epsilon: float) -> np.ndarray:
    n = len(scores)
    best = max(scores)
    accept = [math.exp(-epsilon * (best - s) / (2 * sensitivity)) for s in scores]
    out = np.zeros(n)
    orders = list(itertools.permutations(range(n)))
    for order in orders:
        survive = 1.0
        for r in order:
            out[r] += survive * accept[r] / len(orders)
            survive *= 1 - accept[r]
    return out


@pytest.mark.parametrize(
    "scores",
    [[0, 0], [0, 1, 2], [3, -1, 2.5, 0], [1, 1, 1, 5], [0, 0.5, 1, 1.5, 2], [10, 0, 0, 0, 0]],
    ids=str,
)
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_exact_law_matches_brute_force(scores: list[float], epsilon: float) -> None:
    law = exponential_probabilities(scores, sensitivity=1, epsilon=epsilon)
    np.testing.assert_allclose(law, _brute_force(scores, 1, epsilon), rtol=1e-12, atol=1e-15)
    assert law.sum() == pytest.approx(1.0, abs=1e-12)


def _max_log_ratio(epsilon: float) -> float:
    worst = 0.0
    for k in (2, 3):
        for u in itertools.product(range(3), repeat=k):
            pu = exponential_probabilities(list(u), sensitivity=1, epsilon=epsilon)
            for d in itertools.product((-1, 0, 1), repeat=k):
                v = [a + b for a, b in zip(u, d, strict=True)]
                pv = exponential_probabilities(v, sensitivity=1, epsilon=epsilon)
                worst = max(worst, float(np.max(np.abs(np.log(pu / pv)))))
    return worst


def test_permute_and_flip_is_epsilon_dp_exactly() -> None:
    # Over all score vectors in {0,1,2}^k (k ≤ 3) and all neighbours (each score ±1): the
    # largest log-ratio is ε (the bound is attained), never more.
    worst = _max_log_ratio(1.0)
    assert worst <= 1.0 + 1e-9
    assert worst == pytest.approx(1.0, abs=1e-9)


def test_exact_check_refutes_twice_the_epsilon() -> None:
    # Negative control: run at 2ε = 2, the same check sees a log-ratio of 2 > 1.
    assert _max_log_ratio(2.0) > 1.0 + 0.5


def test_law_refuses_large_candidate_sets() -> None:
    with pytest.raises(InvalidParameter):
        exponential_probabilities(list(range(13)), sensitivity=1, epsilon=1)


def test_random_permutation_is_a_permutation() -> None:
    for n in (0, 1, 2, 17):
        perm = random_permutation(n, source=SeededRandom(n))
        assert sorted(perm.tolist()) == list(range(n))
    with pytest.raises(InvalidParameter):
        random_permutation(-1)

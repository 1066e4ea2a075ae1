"""The exponential mechanism sampled by rejection: its exact law, its privacy, its range.

Law: ``N = 40,000`` draws on scores ``[0, 3, 5, 5, 10]`` (Δ = 1, ε = 1) against
``P[r] ∝ e^(q_r/2)``: Pearson's chi-square must stay below its 1 − 10⁻⁷ quantile (df = 4,
38.2), so a correct sampler fails with probability below 10⁻⁷. Control: permute-and-flip
(:func:`exponential`) on the same scores has another law (expected statistic about 1,450 at
this N) and must be rejected. Privacy: neighbouring scores (each moved by at most Δ) through
:func:`deniable.audit.estimate_epsilon` at alpha = 10⁻⁷ must show no more than ε; the control
with Δ taken as a quarter of the true sensitivity must be refuted. Bounded range: computed exactly
from the law, the log-ratio of output probabilities between neighbours spans at most ε —
what makes it ε²/8-zCDP.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import chi2

from deniable.audit import estimate_epsilon
from deniable.mechanisms import exponential, exponential_rejection
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.stats

N = 40_000
SCORES = [0, 3, 5, 5, 10]
LIMIT = chi2.ppf(1 - 1e-7, len(SCORES) - 1)


def _law(scores: list[int], epsilon: float, sensitivity: float = 1) -> np.ndarray:
    w = np.exp(np.array(scores, dtype=float) * epsilon / (2 * sensitivity))
    return w / w.sum()


def _draws(mechanism, scores: list[int], n: int, **kw: float) -> np.ndarray:  # type: ignore[no-untyped-def]
    src = SeededRandom(12345)
    return np.array(
        [int(mechanism(scores, source=src, **kw).value) for _ in range(n)], dtype=np.int64
    )


def _chi2(draws: np.ndarray, law: np.ndarray) -> float:
    seen = np.bincount(draws, minlength=law.size)
    expected = law * draws.size
    return float(((seen - expected) ** 2 / expected).sum())


@pytest.fixture(scope="module")
def draws() -> np.ndarray:
    return _draws(exponential_rejection, SCORES, N, sensitivity=1, epsilon=1)


def test_the_output_follows_the_exponential_mechanism(draws: np.ndarray) -> None:
    assert _chi2(draws, _law(SCORES, 1)) < LIMIT


def test_control_permute_and_flip_has_another_law() -> None:
    pf = _draws(exponential, SCORES, N, sensitivity=1, epsilon=1)
    assert _chi2(pf, _law(SCORES, 1)) > LIMIT


def test_neighbouring_scores_show_no_more_than_epsilon() -> None:
    a, b = [0, 1, 2, 1], [1, 0, 1, 2]  # each score moved by at most Δ = 1
    da = _draws(exponential_rejection, a, N, sensitivity=1, epsilon=1)
    db = _draws(exponential_rejection, b, N, sensitivity=1, epsilon=1)
    assert estimate_epsilon(da, db, alpha=1e-7).lower <= 1.0
    # Control: Δ taken as a quarter of the truth (the true loss is then 2, not 0.5).
    ha = _draws(exponential_rejection, a, N, sensitivity=0.25, epsilon=1)
    hb = _draws(exponential_rejection, b, N, sensitivity=0.25, epsilon=1)
    assert estimate_epsilon(ha, hb, alpha=1e-7).lower > 1.0


def test_the_range_of_the_privacy_loss_is_at_most_epsilon() -> None:
    """Exactly, for every neighbour of a score vector on a small grid: ε-bounded range."""
    base = [0, 2, 3]
    for moves in itertools.product((-1, 0, 1), repeat=3):
        other = [q + m for q, m in zip(base, moves, strict=True)]
        ratio = np.log(_law(base, 1)) - np.log(_law(other, 1))
        assert ratio.max() - ratio.min() <= 1 + 1e-12
        assert np.abs(ratio).max() <= 1 + 1e-12  # and ε-DP
    assert math.isclose(_law([0, 0], 1)[0], 0.5)

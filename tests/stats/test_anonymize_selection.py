"""Empirical privacy of the ε-safe recoding selection on neighbouring tables.

Set-up. One column ``x`` with the identity hierarchy; two candidate recodings, ``raw``
(utility 1) and ``'*'`` (utility 0); ``k = 6``. ``D`` holds five copies of ``a``, ``D'`` six.
The selection draws a Bernoulli(β) sample, scores the candidates on it (``kept·u``, DuckDB)
and runs the exponential mechanism (permute-and-flip) with ε₁ = 2 and the stated
sensitivity Δ = k. Its claimed loss for the input is ``ε' = ln(1 + β(e^ε₁ − 1))``.
``β = 0.999`` makes ``D'``'s sample complete (six copies, the class reaches k) with
probability 0.994, so the mechanism's calibration is what is tested, not the sampling.

Test. For each chosen recoding ``o`` and both directions, the check rejects when the
Clopper–Pearson lower bound (level 1e-8) of ``P_A[o]`` exceeds ``e^ε'`` times the upper bound
(level 1e-8) of ``P_B[o]``. A correct mechanism has ``P_A[o] ≤ e^ε' P_B[o]``, so a check
fails only if one of its two bounds fails: probability ≤ 2e-8; four checks: ≤ 8e-8 < 1e-6.

Negative control. The same selection with the sensitivity off by the factor k (Δ = 1)
gives ``P_{D'}['*'] ≈ 0.0042`` against ``P_D['*'] = 0.5``: a ratio of 119 > e^ε' = 7.38. Its
rejection probability is computed exactly from the law of the sample and of permute-and-flip
and asserted above 1 − 1e-6, so the control cannot flake either.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from scipy import stats

from deniable.anonymize import amplified_epsilon, candidate_scores, recoding_from_dict
from deniable.engines.duckdb import DuckDBRunner
from deniable.mechanisms.exponential import exponential, exponential_probabilities
from deniable.noise import bernoulli

pytestmark = pytest.mark.stats

K, BETA, EPS1, RUNS = 6, 0.999, 2.0, 1000
LEVEL = 1e-8
BOUND = math.exp(amplified_epsilon(EPS1, BETA))


def _cp_low(x: int, n: int) -> float:
    return 0.0 if x == 0 else float(stats.beta.ppf(LEVEL, x, n - x + 1))


def _cp_high(x: int, n: int) -> float:
    return 1.0 if x == n else float(stats.beta.ppf(1 - LEVEL, x + 1, n - x))


@functools.cache
def _scores_by_count() -> dict[int, tuple[list[Fraction], Fraction]]:
    """Candidate scores for a sample holding c copies of ``a`` (the real DuckDB scorer).

    Computed on first use, not at import: every xdist worker collects this module.
    """
    spec = recoding_from_dict({"columns": {"x": {"type": "identity"}}})
    cands = spec.candidates()
    assert [c.levels()["x"] for c in cands] == ["raw", "*"]
    con = duckdb.connect()
    out = {}
    for c in range(K + 1):
        con.execute(f"CREATE OR REPLACE TABLE s AS SELECT 'a' AS x FROM range({c})")
        out[c] = candidate_scores(DuckDBRunner(con), "s", cands, k=K)
    return out


@functools.cache
def _frequencies(rows: int, *, sensitivity: Fraction | None = None) -> np.ndarray:
    """How often each candidate is chosen over RUNS selections on a table of ``rows`` a's."""
    keep = bernoulli(BETA, RUNS * rows).reshape(RUNS, rows)  # the pipeline's sampler, CSPRNG
    counts = np.zeros(2, dtype=np.int64)
    for c in keep.sum(axis=1).tolist():
        scores, delta = _scores_by_count()[int(c)]
        chosen = exponential(
            np.array(scores, dtype=object), sensitivity=sensitivity or delta, epsilon=EPS1
        )
        counts[int(chosen.value)] += 1
    return counts


def _violations(a: np.ndarray, b: np.ndarray) -> list[str]:
    out = []
    for o in range(2):
        for x, y, name in ((a, b, "D/D'"), (b, a, "D'/D")):
            if _cp_low(int(x[o]), RUNS) > BOUND * _cp_high(int(y[o]), RUNS):
                out.append(f"{name} ratio of candidate {o} significantly above e^ε'")
    return out


def _exact_law(rows: int, sensitivity: Fraction | None) -> np.ndarray:
    law = np.zeros(2)
    for c in range(rows + 1):
        scores, delta = _scores_by_count()[c]
        p = exponential_probabilities(
            [float(s) for s in scores], sensitivity=sensitivity or delta, epsilon=EPS1
        )
        law += stats.binom.pmf(c, rows, BETA) * p
    return law


def _power(p_d: float, p_broken: float) -> float:
    """Exact probability that the check on candidate '*' rejects the broken variant."""
    xs = np.arange(RUNS + 1)
    pmf_d = stats.binom.pmf(xs, RUNS, p_d)
    tail_b = np.cumsum(stats.binom.pmf(xs, RUNS, p_broken)[::-1])[::-1]  # P[X_b ≥ x]
    highs = BOUND * np.array([_cp_high(int(x), RUNS) for x in xs])
    miss = 0.0
    for x in xs[pmf_d > 1e-300]:
        first = int(np.searchsorted(highs, _cp_low(int(x), RUNS)))  # X_b ≥ first: not rejected
        miss += float(pmf_d[x]) * (float(tail_b[first]) if first <= RUNS else 0.0)
    return 1.0 - miss


def test_selection_ratio_is_not_above_the_claimed_epsilon() -> None:
    law_d, law_d2 = _exact_law(K - 1, None), _exact_law(K, None)
    assert max(*(law_d / law_d2), *(law_d2 / law_d)) <= BOUND  # exact, for the record
    d = _frequencies(K - 1)
    d2 = _frequencies(K)
    assert d.sum() == d2.sum() == RUNS
    assert _violations(d, d2) == []


def test_negative_control_sensitivity_off_by_k_is_rejected() -> None:
    broken = Fraction(1)
    law_d = _exact_law(K - 1, None)
    law_b = _exact_law(K, broken)
    assert law_d[1] / law_b[1] > 100  # the broken mechanism's true ratio, far above 7.38
    assert _power(float(law_d[1]), float(law_b[1])) > 1 - 1e-6
    d = _frequencies(K - 1)
    b = _frequencies(K, sensitivity=broken)
    assert _violations(d, b)

"""The one χ² statistic of the uniform-subset checks (DuckDB, PostgreSQL and Spark tests)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def chi2_uniform_subsets(counts: Sequence[int], units: int, k: int, m: int) -> float:
    """Σ (n − U·m/k)² / (U·a): χ² with k − 1 d.o.f. when each unit keeps a uniform m-subset.

    ``counts[j]`` is how many of ``units`` units kept item ``j`` of ``k``; each unit keeps
    exactly ``m``. The deviations (summing to 0) have covariance ``U·a·I`` on that subspace,
    ``a = (m/k)(1 − (m−1)/(k−1))``, so the statistic is χ²(k − 1) for large ``U``.
    """
    n = np.asarray(counts, dtype=float)
    assert n.size == k and int(n.sum()) == units * m
    a = (m / k) * (1 - (m - 1) / (k - 1))
    return float(np.sum((n - units * m / k) ** 2) / (units * a))

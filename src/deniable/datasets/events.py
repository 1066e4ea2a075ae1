"""The benchmark's ``events`` table: skewed users, 50 categories, a value with outliers.

``N`` rows from about ``N/10`` users; rows per user follow a truncated power law
(``P(k) ∝ k^-1.5`` on 1..200, mean ≈ 10); categories follow a Zipf law over 50 values; the
value is Gamma-distributed around 40 with 1% outliers (±10^6 and 5000).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from deniable.errors import InvalidParameter

CATEGORIES = 50
MAX_ROWS_PER_USER = 200


def events(n: int, *, seed: int = 0) -> pa.Table:
    """Generate ``n`` events as an Arrow table.

    Columns: ``user_id`` (int64), ``category`` (int32, 0–49), ``value`` (float64).

    Examples:
        >>> t = events(1000, seed=1)
        >>> t.num_rows, t.column_names
        (1000, ['user_id', 'category', 'value'])
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameter("n must be a positive integer")
    rng = np.random.default_rng(seed)  # test-only: synthetic data generation, never a release path
    n_users = max(1, n // 10)
    sizes = np.arange(1, MAX_ROWS_PER_USER + 1)
    p = sizes**-1.5
    p /= p.sum()
    per_user = rng.choice(sizes, size=n_users, p=p)
    uid = np.repeat(np.arange(n_users, dtype=np.int64), per_user)
    if uid.size < n:
        uid = np.concatenate([uid, rng.integers(0, n_users, n - uid.size)])
    uid = rng.permutation(uid)[:n]
    w = 1.0 / np.arange(1, CATEGORIES + 1) ** 1.1
    w /= w.sum()
    category = rng.choice(CATEGORIES, size=n, p=w).astype(np.int32)
    value = rng.gamma(2.0, 20.0, n)
    outliers = rng.random(n) < 0.01
    value[outliers] = rng.choice([-1e6, 1e6, 5e3], size=int(outliers.sum()))
    return pa.table({"user_id": uid, "category": category, "value": value})

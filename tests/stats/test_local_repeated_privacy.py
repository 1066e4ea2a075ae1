"""Repeated reports, empirically: memoised answers leak one response's ε, fresh ones T·ε.

Clients (each with its own secret) report the same value ``T = 3`` times; the output class is
the vector of the three reports. The statistic is the Clopper–Pearson lower confidence bound
(level 1 − 1e-7, union over all one-sided bounds) on the largest log-ratio of the class
frequencies between clients whose value is 0 and clients whose value is 1; it exceeds the true
ε with probability below 1e-7.

* Memoised clients: the statistic must not exceed ε of one report (ln 3 for coin RR, q = 1/2).
* Negative control — the same check on fresh clients (memoisation deleted) must fail: their
  "three yes" class has probability 27/64 vs 1/64, a log-ratio of 3·ln 3; with 1000 clients
  per value the statistic has median ≈ 1.95 and standard deviation ≈ 0.1 (200 000
  multinomial replicates: minimum 1.49), so it falls to ln 3 ≈ 1.10 only on a ~8σ event.
* And the fresh clients' statistic stays within their T·ε accounting.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from deniable.local import CoinRandomizedResponse, FreshRandomizer, MemoizedRandomizer
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.stats

ALPHA = 1e-7
CLIENTS = 1000
T = 3


def eps_lower_bound(ca: np.ndarray, cb: np.ndarray, n: int) -> float:  # type: ignore[type-arg]
    each = ALPHA / (4 * len(ca))
    best = 0.0
    for a, b in zip(ca.tolist(), cb.tolist(), strict=True):
        for x, y in ((a, b), (b, a)):
            lo = 0.0 if x == 0 else stats.beta.ppf(each, x, n - x + 1)
            hi = 1.0 if y == n else stats.beta.ppf(1 - each, y + 1, n - y)
            if lo > 0:
                best = max(best, math.log(lo / hi))
    return best


def _histories(kind: str, value: int, seed: int) -> np.ndarray:  # type: ignore[type-arg]
    """Class counts of the T-report vectors of CLIENTS clients holding ``value``."""
    rr = CoinRandomizedResponse(q=0.5)
    classes = np.empty(CLIENTS, dtype=np.int64)
    for c in range(CLIENTS):
        src = SeededRandom(seed * 1_000_003 + c)
        client = (
            MemoizedRandomizer(rr, source=src)
            if kind == "memo"
            else FreshRandomizer(rr, source=src)
        )
        bits = [int(client.report(value)[0]) for _ in range(T)]
        classes[c] = bits[0] + 2 * bits[1] + 4 * bits[2]
    return np.bincount(classes, minlength=1 << T)


def test_memoized_reports_leak_one_responses_epsilon_fresh_ones_more() -> None:
    eps = float(CoinRandomizedResponse(q=0.5).loss.epsilon)
    memo = eps_lower_bound(_histories("memo", 0, 1), _histories("memo", 1, 2), CLIENTS)
    assert memo <= eps
    fresh = eps_lower_bound(_histories("fresh", 0, 3), _histories("fresh", 1, 4), CLIENTS)
    assert fresh > eps  # negative control: without memoisation the loss exceeds one ε
    assert fresh <= T * eps  # ... but stays within the fresh accounting T·ε

"""Partition selection never releases a key held by a single user more often than δ allows.

A table holds one key used by a single person (who may touch ``max_groups = 2`` groups) and
keys used by hundreds. The exact number of units per group comes from the engine (test-only
hook); selection is then run many times on it — through ``partition.select``, the function the
release path calls, vectorised, and through the whole release stage. The count of releases of
the lonely key is binomial with rate ``π(1) ≤ δ/m``; the check ``count ≤ binom.ppf(1 − 1e-7,
N, δ/m)`` fails an honest implementation with probability below 1e-7 per check (two checks
per test function: below 1e-6).

Negative control: the same rule run at ``(ε, δ)`` per group instead of ``(ε/m, δ/m)`` —
forgetting that one person can be in ``m`` groups — must be rejected (rate δ = 2× the bound).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from scipy import stats

import deniable.query.partition as partition
from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.noise import bernoulli
from deniable.noise.testing import SeededRandom
from deniable.query.release import release
from deniable.query.testing import exact_aggregates

pytestmark = pytest.mark.stats

N = 400_000
N_PIPELINE = 2_000
ALPHA = 1e-7
DELTA = 0.02
EPS = 1.0
QUERY = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"


@pytest.fixture(scope="module")
def selection(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    rows = [(f"u{u}", k) for u in range(600) for k in ("big", "bigger")]
    rows.append(("loner", "lonely"))
    s = Session(
        budget=EpsilonDelta(epsilon=10, delta=0.5), ledger=tmp_path_factory.mktemp("sel") / "l.db"
    )
    s.add_table(
        "t", pd.DataFrame(rows, columns=["uid", "k"]), privacy_unit="uid", max_groups=2, max_rows=1
    )
    plan, _, exact = exact_aggregates(s, QUERY, not_private=True, epsilon=EPS, delta=DELTA)
    yield plan, exact
    s.close()


def _lonely_units(exact) -> int:  # type: ignore[no-untyped-def]
    return int(exact.units[exact.keys.index(("lonely",))])


def test_single_user_key_is_released_at_most_at_rate_delta(selection) -> None:  # type: ignore[no-untyped-def]
    plan, exact = selection
    sel = plan.selection
    assert sel is not None and sel.max_groups == 2 and float(sel.delta) == DELTA
    assert _lonely_units(exact) == 1
    units = np.full(N, _lonely_units(exact))
    kept = partition.select(
        units,
        epsilon=sel.epsilon,
        delta=sel.delta,
        max_groups=sel.max_groups,
        source=SeededRandom(1),
    )
    bound = float(sel.delta) / sel.max_groups
    assert int(kept.sum()) <= stats.binom.ppf(1 - ALPHA, N, bound)
    # and through the whole release stage, big keys always kept
    lonely = 0
    for i in range(N_PIPELINE):
        out = release(plan, exact, source=SeededRandom(10_000 + i))
        assert ("big",) in out.keys and ("bigger",) in out.keys
        lonely += ("lonely",) in out.keys
    assert lonely <= stats.binom.ppf(1 - ALPHA, N_PIPELINE, bound)


def test_control_forgetting_max_groups_is_rejected(selection) -> None:  # type: ignore[no-untyped-def]
    plan, exact = selection
    sel = plan.selection
    units = np.full(N, _lonely_units(exact))
    kept = partition.select(
        units, epsilon=sel.epsilon, delta=sel.delta, max_groups=1, source=SeededRandom(2)
    )
    bound = float(sel.delta) / sel.max_groups
    assert int(kept.sum()) > stats.binom.ppf(1 - ALPHA, N, bound)


# --- the exact multi-word Bernoulli draw ------------------------------------------------
#
# π(n) lives on a grid 2^-bits finer than 2^-64, so a keep/drop is settled by the first
# 64-bit word except when that word equals π's leading word; further words then decide. Ties
# happen with probability 2^-64, so a source that *forces* them is the only way to see that
# they are resolved right: it hands out π's own first j words, then fair words
# (SeededRandom). The partitions must then be kept at exactly the conditional rate
# q = (π·2^bits mod 2^(bits−64j)) / 2^(bits−64j), here between 0.3 and 0.44.
#
# Threshold: the keep count K over N_TIES draws must lie in [binom.ppf(1e-7), binom.isf(1e-7)]
# of Binomial(N_TIES, q); an exact sampler leaves it with probability ≤ 2e-7 per case, 6e-7
# over the three cases (< 1e-6).
# Negative controls, through the same check: the old rule (π floored to 2^-64: a tie is always
# dropped), its mirror (a tie always kept, i.e. π rounded up to 2^-64, as the old loop's
# guard did for tiny δ) and a tie settled by a fair coin must all be rejected (q ≤ 1/2 − 0.06
# puts the coin's mean ≥ 13 standard deviations away, the quantiles are ≤ 5.3).

N_TIES = 50_000
TIE_CASES = [
    # (ε per partition, δ per partition, n, forced words j, seed)
    (Fraction(1), Fraction(1, 3), 1, 1, 11),  # 2 words: π(1) = floor(2^128/3)/2^128
    (Fraction(1, 5), Fraction(1, 5 * 10**30), 1, 2, 12),  # δ = 1e-30 over 5 groups, 3 words
    (Fraction(1), Fraction(1, 10**100), 2, 6, 13),  # 7 words, leading words all 0
]


class _ForcedTies:
    """Hands out π(n)'s own first words (one call per word level), then fair words."""

    secure = False

    def __init__(self, prefix: list[int], fair: SeededRandom) -> None:
        self._prefix = list(prefix)
        self._fair = fair

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        if self._prefix:
            return np.full(n, self._prefix.pop(0), dtype=np.uint64)
        return self._fair.words(n)


def _binomial_accepts(count: int, n: int, q: Fraction) -> bool:
    lo = stats.binom.ppf(ALPHA, n, float(q))
    hi = stats.binom.isf(ALPHA, n, float(q))
    return bool(lo <= count <= hi)


@pytest.mark.parametrize(("eps", "delta", "units", "forced", "seed"), TIE_CASES)
def test_ties_with_the_threshold_are_resolved_at_the_exact_rate(
    eps: Fraction, delta: Fraction, units: int, forced: int, seed: int
) -> None:
    table = partition.keep_probabilities(eps, delta)
    rest = table.bits - 64 * forced
    assert rest >= 64
    q = Fraction(table.numerators[units] % (1 << rest), 1 << rest)
    assert Fraction(3, 10) < q < Fraction(44, 100)  # π is no multiple of 2^-64: ties matter
    prefix = [table.word(units, j) for j in range(forced)]
    kept = partition.select(
        np.full(N_TIES, units),
        epsilon=eps,
        delta=delta,
        max_groups=1,
        source=_ForcedTies(prefix, SeededRandom(seed)),
    )
    assert _binomial_accepts(int(kept.sum()), N_TIES, q)
    # controls: π floored to the old 2^-64 grid keeps no tie; rounded up, every tie
    assert not _binomial_accepts(0, N_TIES, q)
    assert not _binomial_accepts(N_TIES, N_TIES, q)
    coin = bernoulli(Fraction(1, 2), N_TIES, source=SeededRandom(seed + 100))
    assert not _binomial_accepts(int(coin.sum()), N_TIES, q)


def test_keep_rate_off_the_2_to_minus_64_grid_is_exact() -> None:
    """Free-running (no forced ties): each n kept at rate π(n), π on a 2^-128 grid.

    Threshold as above (two-sided 1e-7 per n, 3 values of n: false failure ≤ 6e-7).
    Negative control: the same check against the rate of the rule forgetting max_groups = 2
    (π at (ε, δ) instead of (ε/2, δ/2)) must reject the counts.
    """
    eps, delta, m = Fraction(1), Fraction(1, 5), 2  # π(1..3) ≈ 0.10, 0.27, 0.54
    table = partition.keep_probabilities(eps / m, delta / m)
    wrong = partition.keep_probabilities(eps, delta)
    assert table.bits == 128
    units = np.repeat(np.array([1, 2, 3]), N)
    kept = partition.select(units, epsilon=eps, delta=delta, max_groups=m, source=SeededRandom(3))
    for n in (1, 2, 3):
        count = int(kept[units == n].sum())
        assert _binomial_accepts(count, N, table.probability(n))
        assert not _binomial_accepts(count, N, wrong.probability(n))

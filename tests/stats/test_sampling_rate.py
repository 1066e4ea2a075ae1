"""In-engine Bernoulli sampling, statistically: rate, independence, and amplification.

Every check is a two-sided binomial test at total level ``ALPHA = 1e-7`` (exact binomial
quantiles, ``ALPHA/2`` per side) or a Clopper–Pearson bound at that level, so a correct
sampler fails a check with probability below 1e-7; each test makes at most three checks.
Each has a negative control (a deliberately broken sampler) that the same check rejects; the
power is given beside it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from scipy import stats

from deniable.accounting import amplify_bernoulli
from deniable.accounting.loss import Epsilon
from deniable.engines.duckdb import DuckDBRunner
from deniable.local import BinaryRandomizedResponse
from deniable.noise.testing import SeededRandom
from deniable.sampling import ROWID_IDENTITY, BernoulliFilter, sample_table

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    c.execute("SET enable_progress_bar = false")
    c.execute(f"CREATE TABLE big AS SELECT range AS id, range % 3 AS g FROM range({N})")
    return c


def binomial_ok(k: int, n: int, p: float) -> bool:
    """Whether ``k`` lies in the two-sided ALPHA acceptance region of Binomial(n, p)."""
    lo = stats.binom.ppf(ALPHA / 2, n, p)
    hi = stats.binom.isf(ALPHA / 2, n, p)
    return bool(lo <= k <= hi)


def _kept(con: duckdb.DuckDBPyConnection, flt: BernoulliFilter, identity: str) -> int:
    where, params = flt.predicate(identity)
    row = con.execute(f"SELECT count(*) FROM big WHERE {where}", params).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("rate", [Fraction(3, 10), Fraction(1, 7), Fraction(1, 1000)])
def test_sample_size_is_binomial_with_the_rate(
    con: duckdb.DuckDBPyConnection, rate: Fraction
) -> None:
    with sample_table(DuckDBRunner(con), "big", rate=rate, source=SeededRandom(int(1 / rate))) as s:
        row = con.execute(f"SELECT count(*) FROM {s.sql_name}").fetchone()
        assert row is not None
        assert binomial_ok(int(row[0]), N, float(s.effective_rate))


def test_negative_control_wrong_rate_is_rejected(con: duckdb.DuckDBPyConnection) -> None:
    # A sampler whose threshold is 10% too low (rate 0.27 instead of 0.3): the expected count
    # is 6 000 below, about 29 standard deviations: power ≈ 1.
    flt = BernoulliFilter(rate=Fraction(3, 10), source=SeededRandom(3))
    flt._threshold = f"{int(flt._threshold, 16) * 9 // 10:064x}"  # type: ignore[arg-type]
    assert not binomial_ok(_kept(con, flt, ROWID_IDENTITY), N, 0.3)


def test_sampling_by_unit_keeps_each_unit_with_the_rate() -> None:
    c = duckdb.connect()
    c.execute("CREATE TABLE visits AS SELECT range % 50000 AS user_id FROM range(150000)")
    with sample_table(
        DuckDBRunner(c), "visits", rate=0.25, by=["user_id"], source=SeededRandom(5)
    ) as s:
        row = c.execute(f"SELECT count(DISTINCT user_id), count(*) FROM {s.sql_name}").fetchone()
        assert row is not None
        units, rows = row
        assert rows == 3 * units  # units are whole
        assert binomial_ok(units, 50_000, 0.25)


def test_two_samples_are_independent(con: duckdb.DuckDBPyConnection) -> None:
    # Given the first sample (S₁ rows), an independent second sample keeps each of them with
    # the rate: the overlap is Binomial(S₁, β).
    a = BernoulliFilter(rate=0.5, source=SeededRandom(6))
    b = BernoulliFilter(rate=0.5, source=SeededRandom(7))
    wa, pa = a.predicate(ROWID_IDENTITY)
    wb, pb = b.predicate(ROWID_IDENTITY)
    s1, both = con.execute(
        f"SELECT count(*) FILTER (WHERE {wa}), count(*) FILTER (WHERE {wa} AND {wb}) FROM big",
        {**pa, **pb},
    ).fetchone()  # type: ignore[misc]
    assert binomial_ok(both, s1, 0.5)
    # Negative control: the same key twice (a "seed" that does not change) overlaps fully:
    # both = S₁ ≈ 100 000 against an expected 50 000.
    same = con.execute(f"SELECT count(*) FILTER (WHERE {wa} AND {wa}) FROM big", pa).fetchone()
    assert same is not None and not binomial_ok(int(same[0]), s1, 0.5)


def _pairs_kept(con: duckdb.DuckDBPyConnection, flt: BernoulliFilter, identity: str) -> int:
    where, params = flt.predicate(identity)
    row = con.execute(
        f"""WITH coins AS (SELECT rowid AS r, {where} AS k FROM big)
            SELECT count(*) FROM (SELECT r, k, lead(k) OVER (ORDER BY r) AS nxt FROM coins)
            WHERE r % 2 = 0 AND k AND nxt""",
        params,
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_neighbouring_rows_have_independent_coins(con: duckdb.DuckDBPyConnection) -> None:
    # Rows 2i and 2i+1 both kept: Binomial(N/2, β²) if the coins are independent.
    flt = BernoulliFilter(rate=0.5, source=SeededRandom(8))
    assert binomial_ok(_pairs_kept(con, flt, ROWID_IDENTITY), N // 2, 0.25)
    # Negative control: an identity that pairs rows (rowid // 2) shares their coin: both kept
    # ≈ N/4 = 50 000 against 25 000 expected.
    paired = "(CAST(rowid // 2 AS VARCHAR) || '.')"
    assert not binomial_ok(_pairs_kept(con, flt, paired), N // 2, 0.25)


def test_amplification_end_to_end(con: duckdb.DuckDBPyConnection) -> None:
    """N independent worlds: in world i the target is row i of ``big`` (D) or absent (D').

    The mechanism reports RR(p = 9/10) of "is the target in the sample" (ε = ln 9 for
    add/remove); the sample is drawn by ``sample_table``. The output laws are
    P[1 | D] = β·p + (1−β)(1−p) and P[1 | D'] = 1−p: at β = 1/2 the true loss is
    ln(1 + β·8) = ln 5 ≈ 1.609, the amplified claim. Statistic: Clopper–Pearson lower and
    upper confidence bounds on the largest log-ratio (level 1 − 1e-7 in all).
    """
    beta, p = Fraction(1, 2), Fraction(9, 10)
    rr = BinaryRandomizedResponse(p=p)
    claim = float(amplify_bernoulli(rr.loss, beta).epsilon)
    with sample_table(DuckDBRunner(con), "big", rate=beta, by=["id"], source=SeededRandom(9)) as s:
        kept = np.asarray([r[0] for r in con.execute(f"SELECT id FROM {s.sql_name}").fetchall()])
    present = np.zeros(N, dtype=bool)
    present[kept] = True
    out_d = rr.randomize(present.astype(int), source=SeededRandom(10))
    out_d2 = rr.randomize(np.zeros(N, dtype=int), source=SeededRandom(11))
    each = ALPHA / 8
    lower, upper = 0.0, 0.0
    for o in (0, 1):
        a, b = int((out_d == o).sum()), int((out_d2 == o).sum())
        for x, y in ((a, b), (b, a)):
            x_lo, x_hi = stats.beta.ppf(each, x, N - x + 1), stats.beta.ppf(1 - each, x + 1, N - x)
            y_lo, y_hi = stats.beta.ppf(each, y, N - y + 1), stats.beta.ppf(1 - each, y + 1, N - y)
            lower = max(lower, math.log(x_lo / y_hi))
            upper = max(upper, math.log(x_hi / y_lo))
    assert lower <= claim  # the amplified claim holds
    assert lower > claim - 0.1  # and is tight (the bounds' width is ≈ 0.04 at N = 200 000)
    # Negative controls: the naive β·ε is below what the data show; and the loss really was
    # amplified — a sampler that kept everything would show ln 9 ≈ 2.197 > upper.
    assert lower > float(beta) * math.log(9)
    assert upper < math.log(9)
    assert claim < float(Epsilon(epsilon=rr.loss.epsilon).epsilon)

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.errors import InternalError, InvalidParameter, UnsafeQuery
from deniable.query.catalog import Column, ColumnKind, TableInfo, make_policy
from deniable.query.catalog.validate import validate
from deniable.query.parse import parse
from deniable.query.plan import (
    SELECTION,
    check_loss,
    l2_bound,
    make_plan,
    requested_loss,
    round_half_away,
)

COLUMNS = (
    Column("uid", "VARCHAR", ColumnKind.TEXT),
    Column("cat", "VARCHAR", ColumnKind.TEXT),
    Column("pub", "VARCHAR", ColumnKind.TEXT),
    Column("x", "DOUBLE", ColumnKind.REAL),
    Column("n", "BIGINT", ColumnKind.INTEGER),
)


def _catalog(**policy: object) -> dict[str, TableInfo]:
    defaults: dict[str, object] = {
        "privacy_unit": "uid",
        "bounds": {"x": (-2, 6), "n": (0, 6000)},
        "max_groups": 3,
        "max_rows": 4,
        "public_keys": {"pub": ["a", "b"]},
    }
    defaults.update(policy)
    return {"t": TableInfo("t", COLUMNS, make_policy("t", COLUMNS, **defaults), "v1")}  # type: ignore[arg-type]


def _plan(sql: str, loss: object, catalog: dict[str, TableInfo] | None = None, **kw: object):
    q = validate(parse(sql), catalog or _catalog())
    return make_plan(q, loss, **kw)  # type: ignore[arg-type]


def test_count_sensitivity_is_rows_times_groups() -> None:
    p = _plan("SELECT cat, COUNT(*) FROM t GROUP BY cat", EpsilonDelta(epsilon=1, delta=1e-6))
    (m,) = p.measures
    assert (m.mechanism, m.sensitivity, m.partition_sensitivity) == ("geometric", 12, 4)
    assert p.selection is not None and p.selection.max_groups == 3
    # Without GROUP BY a unit is in one partition; max_rows still applies.
    p = _plan("SELECT COUNT(*) FROM t", Epsilon(epsilon=1))
    assert p.max_groups == 1 and p.measures[0].sensitivity == 4


def test_public_domain_caps_groups() -> None:
    p = _plan("SELECT pub, COUNT(*) FROM t GROUP BY pub", Epsilon(epsilon=1))
    assert p.max_groups == 2 and p.measures[0].sensitivity == 8
    assert p.public_domain == (("a",), ("b",)) and p.selection is None


def test_count_distinct_unit_has_sensitivity_groups() -> None:
    p = _plan(
        "SELECT cat, COUNT(DISTINCT uid) FROM t GROUP BY cat", EpsilonDelta(epsilon=1, delta=1e-6)
    )
    assert p.measures[0].kind == "units" and p.measures[0].sensitivity == 3


def test_even_split_and_exact_total() -> None:
    p = _plan(
        "SELECT cat, COUNT(*) AS c, AVG(x) AS a, VARIANCE(x) AS v FROM t GROUP BY cat",
        EpsilonDelta(epsilon=1, delta=1e-6),
    )
    budgets = [m.budget for m in p.measures]
    # four shares (three aggregates + selection); AVG halves, VARIANCE thirds its share
    assert budgets == [Fraction(1, 4), Fraction(1, 8), Fraction(1, 8)] + [Fraction(1, 12)] * 3
    assert p.selection is not None and p.selection.epsilon == Fraction(1, 4)
    assert p.loss == EpsilonDelta(epsilon=1, delta=1e-6)


def test_split_weights() -> None:
    p = _plan(
        "SELECT COUNT(*) AS c, SUM(x) AS s FROM t",
        Epsilon(epsilon=1),
        split={"c": 3, "S": 1},
    )
    assert [m.budget for m in p.measures] == [Fraction(3, 4), Fraction(1, 4)]
    p = _plan(
        "SELECT cat, COUNT(*) AS c FROM t GROUP BY cat",
        EpsilonDelta(epsilon=1, delta=1e-6),
        split={SELECTION: 1, "c": 4},
    )
    assert p.selection is not None and p.selection.epsilon == Fraction(1, 5)
    with pytest.raises(InvalidParameter, match="split"):
        _plan("SELECT COUNT(*) AS c FROM t", Epsilon(epsilon=1), split={"c": 0})


def test_sum_sensitivity_from_rounded_bounds() -> None:
    p = _plan("SELECT SUM(x) FROM t", Epsilon(epsilon=1))
    (m,) = p.measures
    g = Fraction(2) ** m.exponent
    assert m.row_low == round_half_away(Fraction(-2) / g)
    assert m.row_high == round_half_away(Fraction(6) / g)
    assert m.partition_sensitivity == 4 * m.row_high
    # the noise grid has the scale near 2^20 units; the sensitivity pays for its rounding
    assert m.shift > 0
    assert m.sensitivity == m.partition_sensitivity // 2**m.shift + 1  # one partition
    p = _plan("SELECT pub, SUM(x) FROM t GROUP BY pub", Epsilon(epsilon=1))
    (g,) = p.measures  # two partitions: each may round one unit further apart
    assert g.sensitivity == (2 * g.partition_sensitivity) // 2**g.shift + 2
    assert 2**24 <= m.sensitivity / m.budget < 2**26
    assert m.sensitivity > 2**24  # the +1 of the rounding is negligible


def test_integer_sum_is_exact_on_grid_one() -> None:
    p = _plan("SELECT SUM(n) FROM t", Epsilon(epsilon=1))
    (m,) = p.measures
    assert m.exponent == 0 and m.shift == 0 and m.integer_column
    assert m.sensitivity == 4 * 6000


def test_avg_is_centred() -> None:
    p = _plan("SELECT AVG(x) FROM t", Epsilon(epsilon=1))
    count, total = p.measures
    assert count.kind == "values" and total.kind == "sum" and total.centre != 0
    assert total.row_low == -total.row_high or abs(total.row_low + total.row_high) <= 1


def test_private_keys_need_delta() -> None:
    with pytest.raises(UnsafeQuery, match="partition selection"):
        _plan("SELECT cat, COUNT(*) FROM t GROUP BY cat", Epsilon(epsilon=1))
    with pytest.raises(UnsafeQuery, match="δ > 0"):
        _plan("SELECT cat, COUNT(*) FROM t GROUP BY cat", EpsilonDelta(epsilon=1, delta=0))
    with pytest.raises(UnsafeQuery):
        _plan("SELECT cat, COUNT(*) FROM t GROUP BY cat", Rho(rho=1))
    with pytest.raises(InvalidParameter, match="delta"):
        _plan("SELECT pub, COUNT(*) FROM t GROUP BY pub", EpsilonDelta(epsilon=1, delta=1e-6))


def test_rho_uses_discrete_gaussian_with_l2() -> None:
    p = _plan(
        "SELECT pub, COUNT(*) AS c, MEDIAN(x) AS m FROM t GROUP BY pub", Rho(rho=Fraction(1, 2))
    )
    c, med, *_ = p.measures  # MEDIAN: the value's measure, then its interval's
    assert c.mechanism == "discrete_gaussian"
    assert c.sensitivity >= math.sqrt(2) * 4 and c.sensitivity - math.sqrt(2) * 4 < 1e-5
    assert med.mechanism == "exponential"
    assert isinstance(p.loss, Rho) and p.loss <= Rho(rho=Fraction(1, 2))
    assert p.loss.rho > Fraction(1, 2) - Fraction(1, 10**9)


def test_l2_bound_and_rounding() -> None:
    for m in range(1, 50):
        for d in (1, 3, 1000):
            b = l2_bound(d, m)
            assert b * b >= m * d * d and float(b) - math.sqrt(m) * d < 1e-5
    assert [round_half_away(Fraction(v, 2)) for v in (-3, -1, 1, 3)] == [-2, -1, 1, 2]


def test_check_loss_catches_tampering() -> None:
    p = _plan("SELECT COUNT(*) AS c, SUM(x) AS s FROM t", Epsilon(epsilon=1))
    check_loss(p)
    with pytest.raises(InternalError):
        check_loss(dataclasses.replace(p, loss=Epsilon(epsilon=Fraction(1, 2))))
    cheap = dataclasses.replace(p.measures[0], budget=Fraction(1, 4))
    with pytest.raises(InternalError):
        check_loss(dataclasses.replace(p, measures=(cheap, p.measures[1])))
    with pytest.raises(InternalError):
        check_loss(dataclasses.replace(p, requested=Epsilon(epsilon=Fraction(1, 2))))


def test_requested_loss_needs_explicit_values() -> None:
    with pytest.raises(InvalidParameter, match="epsilon"):
        requested_loss(Epsilon, epsilon=None, delta=None, rho=None)
    with pytest.raises(InvalidParameter, match="rho"):
        requested_loss(Rho, epsilon=1, delta=None, rho=None)
    with pytest.raises(InvalidParameter):
        requested_loss(Epsilon, epsilon=1, delta=1e-6, rho=None)
    with pytest.raises(InvalidParameter):
        requested_loss(Epsilon, epsilon=float("nan"), delta=None, rho=None)
    assert requested_loss(EpsilonDelta, epsilon=1, delta=None, rho=None) == EpsilonDelta(
        epsilon=1, delta=0
    )


def test_tiny_budget_refused_before_data() -> None:
    with pytest.raises(InvalidParameter, match="too small"):
        _plan("SELECT COUNT(*) FROM t", Epsilon(epsilon=1e-9))


def test_huge_count_scale_is_coarsened() -> None:
    p = _plan("SELECT COUNT(*) FROM t", Epsilon(epsilon=Fraction(1, 10**6)))
    (m,) = p.measures
    assert m.shift == 0 and m.sensitivity == 4  # scale 4·10^6 < 2^25: exact
    with pytest.raises(InvalidParameter, match="too small"):
        _plan("SELECT COUNT(*) FROM t", Epsilon(epsilon=Fraction(1, 10**8)))
    p = _plan("SELECT SUM(x) FROM t", Epsilon(epsilon=Fraction(1, 1000)))
    (m,) = p.measures
    assert m.shift > 0 and m.sensitivity > 2**8

"""Privacy units of a REAL column: refused when binary floating point; canonical otherwise.

A FLOAT/DOUBLE unit column is refused at registration (issue 21, "no silent meaning"):
``-0.0`` and ``0.0`` are two texts of one number, NaN equals nothing, and rounding makes one
person two. Before the refusal such a column was accepted, and deniable had to mend it (the
canonical forms below, still used for DECIMAL units and for the engine-side identity).
"""

from __future__ import annotations

import decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import DUCKDB_CAPABILITIES, POSTGRES_CAPABILITIES, SPARK_CAPABILITIES
from deniable.errors import InvalidParameter
from deniable.query.catalog import Column, ColumnKind, canonical_unit
from deniable.query.rewrite.compile import canonical_unit_sql, unit_identity_sql
from deniable.query.testing import exact_aggregates

NAN = float("nan")


def _table(units: pa.Array) -> pa.Table:
    n = len(units)
    return pa.table(
        {"uid": units, "k": pa.array(["a"] * n), "v": pa.array([float(i) for i in range(n)])}
    )


@pytest.mark.parametrize("kind", [pa.float64(), pa.float32()], ids=["double", "float"])
def test_floating_point_unit_columns_are_refused(tmp_path: Path, kind: pa.DataType) -> None:
    s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=tmp_path / "l.db")
    secret = 123.456  # a unit value: it must never appear in the message
    units = pa.array([0.0, -0.0, secret], type=kind)
    with pytest.raises(InvalidParameter, match="floating-point column") as info:
        s.add_table("t", _table(units), privacy_unit="uid", max_groups=1, max_rows=1)
    message = str(info.value)
    assert "'uid'" in message and "integer, text, date" in message
    assert "123" not in message
    assert "t" not in s.tables
    s.close()


def test_decimal_integer_text_and_date_units_are_accepted(tmp_path: Path) -> None:
    s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=tmp_path / "l.db")
    columns = {
        "dec": pa.array([decimal.Decimal("-0.0"), decimal.Decimal("0.0")], pa.decimal128(4, 1)),
        "int": pa.array([1, 2], pa.int64()),
        "txt": pa.array(["a", "b"]),
        "day": pa.array([0, 1], pa.int32()).cast(pa.date32()),
    }
    for name, units in columns.items():
        s.add_table(name, _table(units), privacy_unit="uid", max_groups=1, max_rows=1)
    # DECIMAL has no negative zero: both spellings are one person
    _, _, exact = exact_aggregates(
        s, "SELECT COUNT(DISTINCT uid) AS u FROM dec", not_private=True, epsilon=1
    )
    assert int(exact.units[0]) == 1
    s.close()


def test_python_canonical_form_matches() -> None:
    assert canonical_unit(-0.0) == canonical_unit(0.0) == "0.0"
    assert canonical_unit(NAN) is None
    assert canonical_unit(2) == 2 and canonical_unit(-1.5) == "-1.5"


def test_sampling_identity_treats_zeros_as_one_and_nan_as_null() -> None:
    col = Column("u", "DOUBLE", ColumnKind.REAL)
    identity = unit_identity_sql(col, DUCKDB_CAPABILITIES)
    relation = duckdb.sql(
        f"SELECT {identity} FROM (VALUES (0.0::DOUBLE), (-0.0::DOUBLE), ('nan'::DOUBLE), "
        "(NULL::DOUBLE), (2.5::DOUBLE)) AS __t(u)"
    )
    assert relation is not None
    rows = relation.fetchall()
    assert [r[0] for r in rows] == ["u:0.0", "u:0.0", "N", "N", "u:2.5"]
    for value, (text,) in zip([0.0, -0.0, NAN], rows, strict=False):
        canon = canonical_unit(value)
        assert text == ("N" if canon is None else f"u:{canon}")


@pytest.mark.parametrize("caps", [POSTGRES_CAPABILITIES, SPARK_CAPABILITIES])
def test_canonical_real_unit_renders_in_other_dialects(caps) -> None:  # type: ignore[no-untyped-def]
    sql = canonical_unit_sql(Column("u", "DOUBLE", ColumnKind.REAL), caps)
    assert sqlglot.parse_one(sql, read=caps.dialect) is not None
    assert "NULL" in sql.upper() and "ABS" in sql.upper()

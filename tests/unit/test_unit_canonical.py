"""Privacy units of a REAL column: ``-0.0`` and ``0.0`` are one person; NaN identifies nobody.

Each check fails on the compiler before the canonical form was mended: the text of
``-0.0`` is ``'-0.0'``, so the two zeros counted as two units (two distinct units, two rows
kept under ``max_rows = 1``), and NaN units formed one pseudo-person whose rows were counted.
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import DUCKDB_CAPABILITIES, POSTGRES_CAPABILITIES, SPARK_CAPABILITIES
from deniable.query.catalog import Column, ColumnKind, canonical_unit
from deniable.query.rewrite.compile import canonical_unit_sql, unit_identity_sql
from deniable.query.testing import exact_aggregates

NAN = float("nan")


def _table(units: list[float | None], values: list[float]) -> pa.Table:
    return pa.table(
        {
            "uid": pa.array(units, type=pa.float64(), from_pandas=False),  # NaN stays NaN
            "k": pa.array(["a"] * len(units)),
            "v": pa.array(values, type=pa.float64()),
        }
    )


@pytest.fixture()
def session(tmp_path) -> Iterator[Session]:  # type: ignore[no-untyped-def]
    s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=tmp_path / "l.db")
    # two spellings of zero, twice each: one person with four rows
    s.add_table(
        "zeros",
        _table([0.0, -0.0, -0.0, 0.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0]),
        privacy_unit="uid",
        bounds={"v": (0, 10)},
        public_keys={"k": ["a"]},
        max_groups=1,
        max_rows=1,
    )
    # NaN and NULL units are dropped alike: only the unit 2.0 remains
    s.add_table(
        "nans",
        _table([2.0, NAN, NAN, None, NAN], [1.0, 2.0, 3.0, 4.0, 5.0]),
        privacy_unit="uid",
        bounds={"v": (0, 10)},
        public_keys={"k": ["a"]},
        max_groups=1,
        max_rows=10,
    )
    yield s
    s.close()


def _run(session: Session, query: str) -> dict[str, int]:
    plan, _, exact = exact_aggregates(session, query, not_private=True, epsilon=1)
    assert exact.keys == [("a",)]
    out = {"__units": int(exact.units[0])}
    for m in plan.measures:
        if m.id in exact.measures:
            out[m.kind] = int(exact.measures[m.id][0])
    return out


def test_both_zeros_are_one_person(session: Session) -> None:
    got = _run(session, "SELECT k, COUNT(DISTINCT uid) AS u, COUNT(*) AS n FROM zeros GROUP BY k")
    assert got["units"] == 2 and got["__units"] == 2  # {0.0, 1.0}
    assert got["rows"] == 2  # max_rows = 1 holds across both spellings of zero


def test_both_zeros_share_max_rows_on_the_value_path(session: Session) -> None:
    # SUM re-reads the rows of heavy partitions, joining on the canonical unit
    got = _run(session, "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM zeros GROUP BY k")
    assert got["rows"] == 2 and got["__units"] == 2


def test_both_zeros_share_max_rows_on_the_quantile_path(session: Session) -> None:
    plan, _, exact = exact_aggregates(
        session, "SELECT k, MEDIAN(v) AS m FROM zeros GROUP BY k", not_private=True, epsilon=1
    )
    (hist,) = exact.histograms.values()
    assert int(hist[("a",)].sum()) == 2  # one row of the zero person, one of 1.0
    assert plan.max_rows == 1


def test_nan_units_are_dropped_like_null(session: Session) -> None:
    got = _run(session, "SELECT k, COUNT(DISTINCT uid) AS u, COUNT(*) AS n FROM nans GROUP BY k")
    assert got == {"__units": 1, "units": 1, "rows": 1}
    got = _run(session, "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM nans GROUP BY k")
    assert got["rows"] == 1 and got["__units"] == 1


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

"""The golden Spark SQL (``tests/sql/golden/*.spark.sql``) runs on Spark and agrees with DuckDB.

``tests/unit/test_query_golden_sql.py`` renders each golden query for every engine and checks
the text; here every Spark rendering is executed on a real local Spark over the golden
tables (the same frames, under the private names the golden files use), and its result must
equal the DuckDB rendering's result on DuckDB, row for row. On these tables every unit has
one row, so contribution bounding keeps everything and the two engines' different keyed
hashes cannot make the results differ: any difference is a dialect error. Negative control:
a rendering with one clamp bound changed must differ.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from _spark import local_spark

GOLDEN = Path(__file__).resolve().parents[1] / "sql" / "golden"
NAMES = sorted(p.name.removesuffix(".spark.sql") for p in GOLDEN.glob("*.spark.sql"))


def _tables() -> dict[str, pa.Table]:
    """The frames of ``test_query_golden_sql.py`` under the golden files' private names."""
    t = pa.table(
        {
            "uid": pa.array([1, 2, 3], pa.int64()),
            "g": ["x", "y", None],
            "name": ["ann", "bob", "al"],
            "v": [1.0, 2.5, 30.0],
            "q": pa.array([1, 2, 3], pa.int64()),
        }
    )
    return {
        "__deniable_0": t,
        "__deniable_1": t,
        "__deniable_2": pa.table({"uid": pa.array([1, 2], pa.int64()), "w": [1.0, 2.0]}),
        "__deniable_copy_4": pa.table({"g": ["x", "y"], "label": ["ex", "why"]}),
    }


@pytest.fixture(scope="module")
def engines() -> Any:
    spark = local_spark()
    con = duckdb.connect()
    for name, table in _tables().items():
        spark.createDataFrame(table).createOrReplaceTempView(name)
        con.register(name, table)
    yield spark, con
    for name in _tables():
        spark.catalog.dropTempView(name)
    con.close()


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return sorted(zip(*cols, strict=True), key=repr)


@pytest.mark.parametrize("name", NAMES)
def test_golden_spark_sql_runs_and_agrees_with_duckdb(engines: Any, name: str) -> None:
    spark, con = engines
    on_spark = spark.sql((GOLDEN / f"{name}.spark.sql").read_text()).toArrow()
    on_duckdb = con.sql((GOLDEN / f"{name}.duckdb.sql").read_text()).to_arrow_table()
    assert on_spark.column_names == on_duckdb.column_names
    assert on_spark.num_rows > 0
    assert _rows(on_spark) == _rows(on_duckdb)


def test_control_a_changed_rendering_is_caught(engines: Any) -> None:
    spark, con = engines
    text = (GOLDEN / "sum_avg.spark.sql").read_text()
    assert "CAST('20.0' AS DOUBLE)" in text
    changed = text.replace("CAST('20.0' AS DOUBLE)", "CAST('19.0' AS DOUBLE)")
    on_spark = spark.sql(changed).toArrow()
    on_duckdb = con.sql((GOLDEN / "sum_avg.duckdb.sql").read_text()).to_arrow_table()
    assert _rows(on_spark) != _rows(on_duckdb)

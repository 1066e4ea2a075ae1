"""The Spark engine end to end on a real local Spark: sources, data versions, errors, sampling.

One local SparkSession for the whole run (``tests/conformance/_spark.py``). What is checked:

* every kind of source answers the same exact bounded aggregates (a Spark DataFrame, a
  catalog table, a Parquet file and a Parquet directory, a pandas frame), and
  ``Session.sql`` releases a noisy answer computed from them, charging the ledger once;
* data versions: a Parquet path's version is its file listing (equal for equal files,
  different after a file is rewritten or added), a DataFrame's is unique per registration
  unless declared, and a declared version is used as given;
* errors carry no data: a value that breaks a cast at run time surfaces as
  :class:`~deniable.errors.EngineError` naming Spark's error condition only (negative
  control: Spark's own message does quote the value), and a text column compared with a
  number is refused as not type-checking (``SQLError``) before any row is read;
* the engine refuses DataFrames of other sessions and unknown tables, and samples units in
  Spark with one coin per unit.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.curator.session import Session
from deniable.errors import EngineError, InvalidParameter, SQLError
from deniable.query.testing import exact_aggregates

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from _spark import local_spark

QUERY = "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k"
POLICY: dict[str, Any] = {
    "privacy_unit": "uid",
    "bounds": {"v": (0, 10)},
    "max_groups": 2,
    "max_rows": 3,
    "public_keys": {"k": ["a", "b", "c"]},
}


def _table(seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)  # test data only
    n = 400
    return pa.table(
        {
            "uid": pa.array(rng.integers(0, 60, n), pa.int64()),
            "k": pa.array(rng.choice(["a", "b", "c"], n)),
            "v": pa.array(np.round(rng.uniform(-2, 12, n), 2)),
            "s": pa.array(rng.choice(["1", "2", "x7"], n)),
        }
    )


@pytest.fixture(scope="module")
def spark() -> Any:
    return local_spark()


@pytest.fixture
def engine(spark: Any) -> Iterator[Any]:
    from deniable.engines.spark import SparkEngine

    e = SparkEngine(spark)
    yield e
    e.close()


def _session(engine: Any, tmp: Path, source: object, **extra: Any) -> Session:
    s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=tmp / "l.db", engine=engine)
    s.add_table("t", source, **POLICY, **extra)
    return s


def _exact(s: Session) -> list[tuple[Any, ...]]:
    _, _, exact = exact_aggregates(s, QUERY, not_private=True, epsilon=1)
    return sorted(
        zip(exact.keys, *(exact.measures[m].tolist() for m in sorted(exact.measures)), strict=True)
    )


def test_every_source_gives_the_same_bounded_aggregates(
    spark: Any, engine: Any, tmp_path: Path
) -> None:
    table = _table()
    pq.write_table(table, tmp_path / "t.parquet")
    (tmp_path / "dir").mkdir()
    pq.write_table(table.slice(0, 200), tmp_path / "dir" / "part-0.parquet")
    pq.write_table(table.slice(200), tmp_path / "dir" / "part-1.parquet")
    frame = spark.read.parquet(str(tmp_path / "t.parquet"))
    frame.write.mode("overwrite").saveAsTable("deniable_test_events")
    sources: list[object] = [
        frame,
        "deniable_test_events",
        str(tmp_path / "t.parquet"),
        tmp_path / "dir",
        table.to_pandas(),
    ]
    results = []
    for i, source in enumerate(sources):
        (tmp_path / f"s{i}").mkdir()
        s = _session(engine, tmp_path / f"s{i}", source)
        results.append(_exact(s))
        s.close()
    assert all(r == results[0] for r in results[1:])
    assert len(results[0]) == 3 and sum(r[1] for r in results[0]) > 0
    spark.sql("DROP TABLE IF EXISTS deniable_test_events")


def test_session_answers_and_charges_once(engine: Any, tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    s = _session(engine, tmp_path / "s", _table())
    answer = s.sql(QUERY, epsilon=1)
    assert answer.to_pandas()["k"].tolist() == ["a", "b", "c"]
    spent = s.budget.spent
    assert spent == EpsilonDelta(epsilon=1, delta=0)
    again = s.sql(QUERY, epsilon=1)  # the answer cache replays it: same numbers, no charge
    assert again.to_pandas().equals(answer.to_pandas()) and s.budget.spent == spent
    s.close()


def test_parquet_version_follows_the_files(engine: Any, tmp_path: Path) -> None:
    path = tmp_path / "d"
    path.mkdir()
    pq.write_table(_table(1), path / "a.parquet")
    first = engine.bind("t", str(path)).version
    assert engine.bind("t", str(path)).version == first  # same files, same version
    time.sleep(0.01)
    pq.write_table(_table(2), path / "b.parquet")
    added = engine.bind("t", str(path)).version
    assert added != first
    os.utime(path / "b.parquet", ns=(0, 10**18))  # same size, another modification time
    assert engine.bind("t", str(path)).version not in (first, added)


def test_dataframe_versions_are_per_registration_unless_declared(spark: Any, engine: Any) -> None:
    frame = spark.createDataFrame(_table())
    a, b = engine.bind("t", frame), engine.bind("t", frame)
    assert a.version != b.version and a.version.startswith("spark-dataframe-")
    assert engine.bind("t", frame, version="2024-06-01").version == "2024-06-01"
    local = _table()
    assert engine.bind("t", local).version == engine.bind("t", local).version  # content digest


def test_a_run_time_failure_names_only_spark_s_condition(spark: Any, engine: Any) -> None:
    binding = engine.bind("t", _table())
    sql = f"SELECT sum(CAST(s AS BIGINT)) FROM `{binding.name}`"  # 'x7' fails under ANSI
    with pytest.raises(EngineError) as info:
        engine.run(binding, sql)
    message = str(info.value)
    assert "CAST_INVALID_INPUT" in message and "x7" not in message
    assert info.value.__cause__ is None and info.value.__context__ is None
    # negative control: Spark's own error does quote the private value
    with pytest.raises(Exception, match="x7"):
        spark.sql(sql).collect()


def test_text_compared_with_a_number_is_refused_before_reading(engine: Any, tmp_path: Path) -> None:
    s = _session(engine, tmp_path, _table())
    with pytest.raises(SQLError, match="type-check"):
        s.sql("SELECT k, COUNT(*) AS n FROM t WHERE s > 5 GROUP BY k", epsilon=1)
    assert s.budget.spent == EpsilonDelta(epsilon=0, delta=0)
    s.close()


def test_bad_sources_are_refused(spark: Any, engine: Any, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match="no such file"):
        engine.bind("t", str(tmp_path / "missing.parquet"))
    with pytest.raises(InvalidParameter, match="no table or view"):
        engine.bind("t", "no_such_table_here")
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InvalidParameter, match="could not be read"):
        engine.bind("t", str(tmp_path / "bad.parquet"))
    with pytest.raises(InvalidParameter, match="another SparkSession"):
        engine.bind("t", spark.newSession().createDataFrame(_table()))
    with pytest.raises(InvalidParameter, match="source must be"):
        engine.bind("t", 42)


def test_sampling_keeps_or_drops_whole_units(engine: Any, tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {"uid": np.repeat(np.arange(400, dtype=np.int64), 3), "k": "a", "v": 1.0, "s": "1"}
    )
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", engine=engine)
    s.add_table("t", frame, sample_rate=Fraction(1, 2), **POLICY)
    binding = s._bindings["t"]
    kept = engine.spark.sql(
        f"SELECT uid, count(*) AS c FROM `{binding.name}` GROUP BY uid"
    ).toPandas()
    assert set(kept["c"]) == {3}  # all rows of a kept unit
    assert 120 < len(kept) < 280  # Binomial(400, 1/2): outside is below 1e-6
    s.close()

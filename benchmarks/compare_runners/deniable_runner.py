"""deniable on the benchmark query: ``Session.sql`` end to end, run with the project's .venv.

The in-memory form is a DuckDB table created from the Parquet file. Each repetition gets a
fresh ``Session`` with a fresh ledger in a temporary directory (setup: the ledger file, the
table's registration and its content fingerprint) and answers the query once at ε = 1 — so
no repetition is served from the answer cache. ``Session.sql`` includes planning, the
generated bounded SQL in DuckDB, the durable (fsync'd) ledger charge, the noise and the answer.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

import duckdb
from _common import CATEGORIES, EPSILON, HIGH, LOW, MAX_GROUPS, MAX_ROWS, main

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session

QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
    "FROM events GROUP BY category"
)
SCRATCH = Path(tempfile.mkdtemp(prefix="deniable-bench-"))
RUNS = iter(range(10**6))


def load(path: str) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE events AS SELECT * FROM read_parquet('{path}')")
    return con


def prepare(con: duckdb.DuckDBPyConnection) -> Session:
    s = Session(budget=Epsilon(epsilon=EPSILON), ledger=SCRATCH / f"ledger{next(RUNS)}.db")
    s.add_table(
        "events",
        con,
        privacy_unit="user_id",
        bounds={"value": (LOW, HIGH)},
        max_groups=MAX_GROUPS,
        max_rows=MAX_ROWS,
        public_keys={"category": CATEGORIES},
    )
    return s


def query(s: Session) -> tuple[list[Any], list[Any], list[Any]]:
    answer = s.sql(QUERY, epsilon=EPSILON)
    s.close()
    frame = answer.frame
    by = {int(str(r.category)): r for r in frame.itertuples(index=False)}
    rows = [by.get(k) for k in CATEGORIES]
    return (
        [None if r is None else r.n for r in rows],
        [None if r is None else r.total for r in rows],
        [None if r is None else r.mean for r in rows],
    )


def _version() -> str:
    try:
        return version("deniable")
    except PackageNotFoundError:
        return "source tree"


if __name__ == "__main__":
    try:
        main(
            version=_version(),
            backend=f"DuckDB {duckdb.__version__}",
            load=load,
            prepare=prepare,
            query=query,
            count_scale=MAX_GROUPS * MAX_ROWS / (EPSILON / 3),
        )
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)

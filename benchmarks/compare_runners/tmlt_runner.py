"""Tumult Analytics on the benchmark query, on a local Spark session (``local[*]``).

``AddRowsWithID("user_id")`` (user-level privacy), ``MaxGroupsPerID("category", 5)`` and
``MaxRowsPerGroupPerID("category", 10)`` (the same bounds as ours), values clamped to
[0, 100], the 50 categories as a public ``KeySet``, pure DP. Tumult answers one aggregate per
query, so the count, the sum and the average are three ``evaluate`` calls at ε = 1/3 each
(the last one spends what is left of the session's ε = 1). The in-memory form is the Parquet
file read into a cached Spark DataFrame. Spark: driver memory 8 GiB, 4 shuffle partitions,
warehouse and scratch directories in a temporary directory removed at exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import warnings
from importlib.metadata import version
from typing import Any

from _common import CATEGORIES, EPSILON, HIGH, LOW, MAX_GROUPS, MAX_ROWS, main

sys.argv[1:2] = [os.path.abspath(a) for a in sys.argv[1:2]]
SCRATCH = tempfile.mkdtemp(prefix="tmlt-bench-")
os.chdir(SCRATCH)  # derby.log, spark-warehouse and friends land here, not in the repo
os.environ["PYSPARK_PYTHON"] = sys.executable  # Spark's Python workers must import tmlt
warnings.filterwarnings("ignore")

from pyspark.sql import SparkSession  # noqa: E402
from tmlt.analytics import (  # noqa: E402
    AddRowsWithID,
    KeySet,
    MaxGroupsPerID,
    MaxRowsPerGroupPerID,
    PureDPBudget,
    QueryBuilder,
    Session,
)

SPARK: Any = None
# compare.py ends a runner that times out with SIGTERM: exit through the finally below
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def load(path: str) -> Any:
    global SPARK
    SPARK = (
        SparkSession.builder.master("local[*]")
        .config("spark.driver.memory", "8g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", os.path.join(SCRATCH, "warehouse"))
        .config("spark.local.dir", os.path.join(SCRATCH, "local"))
        .getOrCreate()
    )
    SPARK.sparkContext.setLogLevel("ERROR")
    df = SPARK.read.parquet(path).cache()
    df.count()
    return df


def prepare(df: Any) -> Any:
    return Session.from_dataframe(
        privacy_budget=PureDPBudget(EPSILON),
        source_id="events",
        dataframe=df,
        protected_change=AddRowsWithID(id_column="user_id"),
    )


def query(session: Any) -> tuple[list[Any], list[Any], list[Any]]:
    grouped = (
        QueryBuilder("events")
        .enforce(MaxGroupsPerID("category", MAX_GROUPS))
        .enforce(MaxRowsPerGroupPerID("category", MAX_ROWS))
        .groupby(KeySet.from_dict({"category": CATEGORIES}))
    )
    third = PureDPBudget(EPSILON / 3)
    n = session.evaluate(grouped.count(name="n"), third).toPandas()
    total = session.evaluate(grouped.sum("value", LOW, HIGH, name="total"), third).toPandas()
    mean = session.evaluate(
        grouped.average("value", LOW, HIGH, name="mean"), session.remaining_privacy_budget
    ).toPandas()

    def column(frame: Any, name: str) -> list[Any]:
        by = dict(zip(frame["category"], frame[name], strict=True))
        return [by.get(k) for k in CATEGORIES]

    return column(n, "n"), column(total, "total"), column(mean, "mean")


if __name__ == "__main__":
    try:
        main(
            version=version("tmlt.analytics"),
            backend="Spark (local[*])",
            load=load,
            prepare=prepare,
            query=query,
            count_scale=MAX_GROUPS * MAX_ROWS / (EPSILON / 3),
        )
    finally:
        try:
            if SPARK is not None:
                SPARK.stop()
        finally:
            shutil.rmtree(SCRATCH, ignore_errors=True)

"""One local SparkSession for the whole test run, and the Spark entry of the conformance suite.

:func:`local_spark` starts ``local[2]`` Spark once per test process (two cores, like CI),
with small shuffles (2 partitions), no UI, a temporary warehouse and scratch directory, and
Spark's own logging off (its log lines would quote the generated SQL and, on a failure,
values of test rows). Every Spark test — the conformance suite, ``tests/stats/test_spark_*``,
``tests/system/test_spark_*`` — shares it (JVM start-up is ~10 s); it is stopped when the
interpreter exits. Engines made for tests are :class:`~deniable.engines.spark.SparkEngine`
objects over this session; each drops its own temporary views when closed.

Java: Spark needs a JRE (17+). When ``java`` is not on ``PATH`` and ``JAVA_HOME`` is unset,
:func:`ensure_java` installs Debian's ``openjdk-17-jre-headless`` (``apt-get``, as the test
machines run as root) — a missing JRE is installed, never a reason to skip. PySpark itself is
an optional extra: without it the Spark tests skip (``pytest.importorskip``), as the
conformance suite's contract allows.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from deniable.engines.base import Engine

_SESSION: list[Any] = []  # the one session of this process (a list: no `global`)


def ensure_java() -> None:
    """Make sure a Java runtime is available, installing Debian's JRE 17 if it is not."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "openjdk-17-jre-headless"],
        check=True,
        env=env,
        capture_output=True,
    )
    if not shutil.which("java"):
        raise RuntimeError("openjdk-17-jre-headless installed but `java` is not on PATH")


def local_spark() -> SparkSession:
    """The process's local SparkSession (started on first use; skips without PySpark)."""
    if _SESSION:
        session: SparkSession = _SESSION[0]
        return session
    pytest.importorskip("pyspark")
    ensure_java()
    from pyspark.sql import SparkSession

    scratch = Path(tempfile.mkdtemp(prefix="deniable-spark-"))
    session = (
        SparkSession.builder.master("local[2]")
        .appName("deniable-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        # The suite's queries are small and many: the JVM's optimising JIT (C2) and its
        # parallel GC threads cost more CPU than they save. C1 only and the serial GC halved
        # the JVM's CPU on two Spark modules (65 s -> 31 s; their wall time 83 s -> 48 s).
        .config(
            "spark.driver.extraJavaOptions",
            f"-Dderby.system.home={scratch / 'derby'} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")
    _SESSION.append(session)

    def stop() -> None:
        session.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    atexit.register(stop)
    return session


def load_spark() -> Callable[[Path], Engine]:
    """The conformance suite's ``load`` for Spark: a factory of fresh engines on one session."""
    spark = local_spark()
    from deniable.engines.spark import SparkEngine

    def factory(tmp_dir: Path) -> Engine:
        del tmp_dir  # views are private to each engine; the warehouse is the session's
        return SparkEngine(spark)

    return factory

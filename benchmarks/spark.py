"""Benchmark of the DP SQL path on local Spark against the two-level floor on the same Spark.

Query (as ``benchmarks/query.py``): per category a DP count, sum and mean of ``value`` clamped
to [0, 100], user-level privacy (``user_id``), at most 5 categories and 10 rows per category
per user, ε = 1, the 50 categories public (a variant with private keys adds partition
selection at δ = 10⁻⁶). Data: the synthetic ``events`` table (``deniable.datasets.events(N,
seed=1)``, the ``uniform`` workload of ``query.py``) written to Parquet, read by Spark and
cached in memory (as the Tumult runner of ``compare.py`` does), so that the times are the
computation and the shuffles, not Parquet decoding.

Spark: ``local[2]`` (the machine's 2 cores), 8 GiB driver, 4 shuffle partitions (adaptive
execution on, Spark's default), UI off. All timed in one process on one session:

* ``two-level`` (floor): ``GROUP BY user_id, category`` then ``GROUP BY category``;
* ``plain``: ``GROUP BY category``;
* ``dp engine``: the generated bounded statement alone (``SparkEngine.run``), result to the
  driver as Arrow;
* ``dp``: ``Session.sql`` end to end (plan, statement, ledger charge with fsync, noise on the
  driver, answer); ``dp private keys`` adds partition selection;
* two variants of the generated statement, edited as text here (the compiler does not emit
  them): ``dp engine without REPARTITION(__u)`` drops the ``/*+ REPARTITION(__u) */`` hint
  that the compiler puts on the level-1 row subquery for Spark (capability
  ``repartition_by_unit``: one shuffle of the rows by user serves both the (user, category)
  aggregation and the per-user partition window; without it Spark shuffles the pairs by
  user again; same result, checked);
  ``dp engine, BIGINT level-1 sums`` (a diagnostic, not a safe form: a BIGINT sum can
  overflow) drops the per-row ``CAST(… AS DECIMAL(38, 0))`` of the level-1 sums, to show what
  the exact decimal arithmetic costs.

Times: the minimum over interleaved repetitions. Also measured: the physical plan's shuffles
(``Exchange``) and scans of the table, and the driver's noising rate — per-group noise for the
plan's measures (count and sum, the mean is post-processing) with deniable's vectorised exact
samplers from the OS CSPRNG, plus partition selection, on 10⁶ groups.

Run: ``.venv/bin/python benchmarks/spark.py [--sizes 1e6 1e7 3e7] [--repeat 3]`` (writes
``benchmarks/results/spark.md``). Optional Tumult comparison: ``--tumult`` runs
``compare_runners/tmlt_runner.py`` from ``.bench-envs/tmlt.analytics`` (see ``compare.py``)
on the same Parquet files.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
    "FROM events GROUP BY category"
)
FLOORS = {
    "plain": "SELECT category, count(*), sum(value), avg(value) FROM events GROUP BY category",
    "two-level": (
        "SELECT category, sum(n), sum(s), sum(s) / sum(n) FROM (SELECT user_id, category, "
        "count(*) AS n, sum(value) AS s FROM events GROUP BY user_id, category) AS p "
        "GROUP BY category"
    ),
}
POLICY: dict[str, Any] = {
    "privacy_unit": "user_id",
    "bounds": {"value": (0, 100)},
    "max_groups": 5,
    "max_rows": 10,
}
SEED = 1
NOISE_GROUPS = 1_000_000


def _spark(scratch: Path) -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("deniable-bench")
        .config("spark.driver.memory", "8g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.local.dir", str(scratch / "local"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    return spark


def _write(n: int, path: Path) -> None:
    import pyarrow.parquet as pq

    from deniable.datasets import events

    pq.write_table(events(n, seed=SEED), path)


UNHINTED = "dp engine without REPARTITION(__u)"


def _plan_shape(spark: Any, sql: str) -> dict[str, int]:
    """Shuffles and table scans in Spark's physical plan of ``sql`` (before execution)."""
    plan = str(spark.sql(sql)._jdf.queryExecution().executedPlan().toString())
    return {
        "exchanges": len(
            re.findall(r"Exchange (hashpartitioning|SinglePartition|rangepart)", plan)
        ),
        "scans": len(re.findall(r"InMemoryTableScan|Scan parquet|FileScan", plan)),
    }


def _variants(sql: str) -> dict[str, str]:
    """Two hand-edited variants of the generated statement ``sql`` (see the module doc)."""
    plain = re.sub(r"/\*\+ repartition\(__u\) \*/ ", "", sql, count=1, flags=re.IGNORECASE)
    bigint = re.sub(r"sum\(CAST\((__v\d+) AS DECIMAL\(38, 0\)\)\)", r"sum(\1)", sql)
    assert plain != sql and bigint != sql
    return {UNHINTED: plain, "dp engine, BIGINT level-1 sums": bigint}


def _runner(engine: Any, binding: Any, sql: str) -> Any:
    """A timed run of ``sql`` on ``engine`` (the repetition index is ignored)."""
    return lambda i: engine.run(binding, sql)


def _noise_rate(plan: Any) -> dict[str, float]:
    """Groups per second the driver noises (the plan's measures) and selects, on 10⁶ groups."""
    import numpy as np

    from deniable.query import partition
    from deniable.query.release import additive_release

    values = np.full(NOISE_GROUPS, 1000, dtype=np.int64)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for m in plan.measures:
            additive_release(m, values, None)
        best = min(best, time.perf_counter() - t0)
    units = np.full(NOISE_GROUPS, 3, dtype=np.int64)
    sel = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        partition.select(
            units, epsilon=Fraction(1, 2), delta=Fraction(1, 10**6), max_groups=5, source=None
        )
        sel = min(sel, time.perf_counter() - t0)
    return {
        "measures": len(plan.measures),
        "noise_groups_per_s": NOISE_GROUPS / best,
        "selection_groups_per_s": NOISE_GROUPS / sel,
    }


def measure(spark: Any, n: int, repeat: int, tmp: Path) -> dict[str, Any]:
    from deniable.accounting.loss import EpsilonDelta
    from deniable.curator.session import Session
    from deniable.engines.spark import SparkEngine
    from deniable.query.testing import exact_aggregates

    parquet = tmp / f"events_{n}.parquet"
    if not parquet.exists():
        _write(n, parquet)
    frame = spark.read.parquet(str(parquet)).cache()
    rows = frame.count()
    assert rows == n, (rows, n)
    frame.createOrReplaceTempView("events")
    engine = SparkEngine(spark)

    def session(public: bool, ledger: str) -> Session:
        s = Session(
            budget=EpsilonDelta(epsilon=10**6, delta=0.5), ledger=tmp / ledger, engine=engine
        )
        keys = {"category": list(range(50))} if public else None
        s.add_table("events", frame, public_keys=keys, **POLICY)
        return s

    public = session(True, f"pub_{n}.db")
    private = session(False, f"priv_{n}.db")
    plan, compiled, _ = exact_aggregates(public, QUERY, not_private=True, epsilon=1)
    # Spark (capability pack_counts=False) gets the unpacked form: no count in a sum's low
    # bits, no re-read of the partitions above 2^bits rows.
    assert "__giant" not in compiled.sql and "__p0" not in compiled.sql
    variants = _variants(compiled.sql)
    binding = public._bindings["events"]
    reference = engine.run(binding, compiled.sql)
    unhinted = engine.run(binding, variants[UNHINTED])
    assert unhinted.sort_by("__k0").equals(reference.sort_by("__k0"))
    runs = {
        "plain": lambda i: spark.sql(FLOORS["plain"]).toArrow(),
        "two-level": lambda i: spark.sql(FLOORS["two-level"]).toArrow(),
        "dp engine": lambda i: engine.run(binding, compiled.sql),
        **{name: _runner(engine, binding, sql) for name, sql in variants.items()},
        "dp": lambda i: public.sql(QUERY, epsilon=Fraction(1) + Fraction(i + 1, 10**9)),
        "dp private keys": lambda i: private.sql(
            QUERY, epsilon=Fraction(1) + Fraction(i + 1, 10**9), delta=1e-6
        ),
    }
    for fn in runs.values():  # warm-up: JIT, codegen caches
        fn(-1)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for i in range(repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn(i)
            times[name].append(time.perf_counter() - t0)
    shapes = {
        "two-level": _plan_shape(spark, FLOORS["two-level"]),
        "dp engine": _plan_shape(spark, compiled.sql),
        **{name: _plan_shape(spark, sql) for name, sql in variants.items()},
    }
    public.close()
    private.close()
    engine.close()
    frame.unpersist()
    return {
        "n": n,
        "time": {k: min(v) for k, v in times.items()},
        "shapes": shapes,
        "noise": _noise_rate(plan) if n == 10**6 else None,
    }


def _tumult(parquet: Path, timeout: float) -> dict[str, Any] | None:
    python = ROOT / ".bench-envs" / "tmlt.analytics" / "bin" / "python"
    if not python.exists():
        return None
    out = subprocess.run(
        [str(python), str(ROOT / "benchmarks/compare_runners/tmlt_runner.py"), str(parquet)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT / "benchmarks/compare_runners",
    )
    events = [json.loads(x) for x in out.stdout.strip().splitlines() if x.startswith("{")]
    runs = [e for e in events if e.get("event") == "run"]
    if not runs:
        return {"error": out.stderr.strip()[-300:]}
    load: dict[str, Any] = next((e for e in events if e.get("event") == "load"), {})
    return {
        "query_s": min(float(e["query_s"]) for e in runs),
        "setup_s": min(float(e["setup_s"]) for e in runs),
        "load_s": load.get("load_s"),
        "runs": len(runs),
    }


def report(results: list[dict[str, Any]], command: str, tumult: dict[int, Any]) -> str:
    lines = [
        "## DP SQL on Spark (`benchmarks/spark.py`)",
        "",
        (
            "Per-category DP count, sum and mean (≤ 5 categories and ≤ 10 rows per category per "
            "user, values clamped to [0, 100], ε = 1) on local Spark (`local[2]`, 8 GiB driver, "
            "4 shuffle partitions, adaptive execution), the `events` table cached in memory. "
            "Ratios to the non-private **two-level** query (`GROUP BY user_id, category`, then "
            "`GROUP BY category`) on the same Spark session in the same run; minimum of "
            "interleaved runs. `dp engine` is the generated bounded statement alone (aggregates "
            "collected to the driver as Arrow), `dp` is `Session.sql` end to end (plan, SQL, "
            "ledger charge, noise on the driver, answer)."
        ),
        "",
        "| N | query | time (s) | × plain | × two-level |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        t = r["time"]
        for name, secs in t.items():
            lines.append(
                f"| {r['n']:.0e} | {name} | {secs:.2f} | {secs / t['plain']:.2f} | "
                f"{secs / t['two-level']:.2f} |"
            )
    lines += ["", "Growth (time at N / time at the previous N):", ""]
    for prev, cur in itertools.pairwise(results):
        f = cur["n"] / prev["n"]
        parts = [
            f"{k} ×{cur['time'][k] / prev['time'][k]:.2f}" for k in ("two-level", "dp engine", "dp")
        ]
        lines.append(f"- {prev['n']:.0e} → {cur['n']:.0e} (data ×{f:.0f}): " + ", ".join(parts))
    shape = results[-1]["shapes"]
    lines += [
        "",
        (
            f"Physical plans: the two-level floor has {shape['two-level']['exchanges']} "
            f"shuffles and {shape['two-level']['scans']} scan of the table; the generated "
            f"statement {shape['dp engine']['exchanges']} shuffles and "
            f"{shape['dp engine']['scans']} scans; without the REPARTITION(__u) hint "
            f"{shape[UNHINTED]['exchanges']} shuffles and "
            f"{shape[UNHINTED]['scans']} scans (counted in the initial "
            "plan; adaptive execution may reuse identical shuffles)."
        ),
    ]
    noise = next((r["noise"] for r in results if r["noise"]), None)
    if noise:
        lines += [
            "",
            (
                f"Driver: noising the plan's {noise['measures']} measures per group (exact "
                "discrete Laplace from the OS CSPRNG, vectorised) runs at "
                f"{noise['noise_groups_per_s']:,.0f} groups/s; partition selection (private "
                f"keys) at {noise['selection_groups_per_s']:,.0f} groups/s (10⁶ groups)."
            ),
        ]
    if tumult:
        lines += [
            "",
            (
                "Tumult Analytics 0.21 on the same machine and Parquet files, in its own "
                "virtualenv and Spark (3.5, `local[*]` = 2 cores, 8 GiB driver, 4 shuffle "
                "partitions, cached DataFrame: `benchmarks/compare_runners/tmlt_runner.py`; "
                "count, sum and mean are three `evaluate` calls). Query time, best run, against "
                "deniable's `dp` (end to end) at the same N:"
            ),
            "",
        ]
        for n, t in sorted(tumult.items()):
            r = next(x for x in results if x["n"] == n)
            if "query_s" in t:
                lines.append(
                    f"- N = {n:.0e}: Tumult {t['query_s']:.1f} s ({t['runs']} run(s)), deniable "
                    f"{r['time']['dp']:.2f} s: deniable {t['query_s'] / r['time']['dp']:.1f}× "
                    "faster."
                )
            else:
                lines.append(f"- N = {n:.0e}: Tumult failed: {t.get('error')}")
    lines += [
        "",
        (
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}, PySpark {_pyspark_version()}. Reproduce with "
            f"`{command}`."
        ),
        "",
    ]
    return "\n".join(lines)


def _pyspark_version() -> str:
    try:
        import pyspark

        return str(pyspark.__version__)
    except ImportError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1e6, 1e7])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tumult", action="store_true")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks/results/spark.md")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="deniable-spark-bench-"))
    spark = _spark(scratch)
    results = []
    tumult: dict[int, Any] = {}
    try:
        for size in args.sizes:
            n = int(size)
            r = measure(spark, n, args.repeat if n < 2 * 10**7 else 2, scratch)
            print(json.dumps(r), flush=True)
            results.append(r)
            _write_report(args, results, tumult)  # after each size: a partial run still counts
            if args.tumult and n <= 10**7:
                t = _tumult(scratch / f"events_{n}.parquet", timeout=1800)
                if t is not None:
                    tumult[n] = t
                    print("tumult", n, json.dumps(t)[:500], flush=True)
                    _write_report(args, results, tumult)
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def _write_report(args: argparse.Namespace, results: list[Any], tumult: dict[int, Any]) -> None:
    """Write the figures measured so far (``--output``, and ``--json`` if given)."""
    command = ".venv/bin/python benchmarks/spark.py --sizes " + " ".join(
        f"{s:g}" for s in args.sizes[: len(results)]
    )
    if args.tumult:
        command += " --tumult"
    args.output.write_text(report(results, command, tumult))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "tumult": tumult}))


if __name__ == "__main__":
    main()

"""Synthetic data at scale (issue 24): time and peak memory by rows and by columns.

Workload: ``Session.synthesize`` of a DuckDB table (persons with 1–2 rows, ``max_rows = 2``)
whose columns alternate categorical (8 public keys, each depending on the previous column)
and numeric (declared bounds, 16 bins), at ε = 1, δ = 10⁻⁹. Each configuration runs in its
own process, so that its peak resident memory (``ru_maxrss`` of the child: Python, numpy and
DuckDB together) is its own. Reported: the whole release's wall time, the engine's share
(the one statement that counts every candidate marginal, :func:`exact_marginals`), and the
ratio of the engine's time to a floor measured in the same process: one plain
``SELECT COUNT(*) … GROUP BY`` of the first two columns over the same table (the cheapest
query that reads every row).

Run: ``.venv/bin/python benchmarks/synth_scaling.py`` (writes
``benchmarks/results/synth_scaling.md``); ``--quick`` for a small smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEYS = 8
BINS = 16


def _table(
    con: Any, rows: int, columns: int
) -> tuple[dict[str, list[int]], dict[str, tuple[int, int]]]:
    """Build table ``t`` in DuckDB: ``pid`` and ``columns`` dependent columns."""
    exprs = []
    keys: dict[str, list[int]] = {}
    bounds: dict[str, tuple[int, int]] = {}
    for j in range(columns):
        noise = f"(hash(i, {j}) % 100)"
        if j % 2 == 0:
            prev = f"c{j - 2}" if j >= 2 else "0"
            step = f"CASE WHEN {noise} < 70 THEN 0 ELSE {noise} % {KEYS} END"
            exprs.append(f"CAST((({prev} + {step}) % {KEYS}) AS BIGINT) AS c{j}")
            keys[f"c{j}"] = list(range(KEYS))
        else:
            exprs.append(f"CAST(c{j - 1} * 10 + {noise} / 10.0 AS DOUBLE) AS c{j}")
            bounds[f"c{j}"] = (0, 100)
    # Each column may refer to earlier ones: build them one SELECT at a time.
    con.execute(
        f"CREATE TABLE base AS SELECT i, i // 2 + (hash(i) % 2) * 0 AS pid FROM range({rows}) r(i)"
    )
    current = "base"
    for j, e in enumerate(exprs):
        nxt = f"s{j}"
        con.execute(f"CREATE TABLE {nxt} AS SELECT *, {e} FROM {current}")
        con.execute(f"DROP TABLE {current}")
        current = nxt
    con.execute(f"CREATE TABLE t AS SELECT * EXCLUDE (i) FROM {current}")
    con.execute(f"DROP TABLE {current}")
    return keys, bounds


def child(rows: int, columns: int, method: str) -> dict[str, Any]:
    """One configuration, in this process; returns its figures."""
    import resource

    import duckdb

    import deniable.synth.release as release
    from deniable.accounting.loss import EpsilonDelta
    from deniable.curator.session import Session

    con = duckdb.connect()
    keys, bounds = _table(con, rows, columns)
    engine_time = [0.0]
    original = release.exact_marginals

    def timed(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            engine_time[0] += time.perf_counter() - began

    release.exact_marginals = timed  # type: ignore[assignment]
    began = time.perf_counter()
    con.execute("SELECT c0, c1, COUNT(*) FROM t GROUP BY ALL").fetchall()
    floor = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as tmp:
        s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-6), ledger=Path(tmp) / "l.db")
        s.add_table("t", con, privacy_unit="pid", max_groups=1, max_rows=2,
                    public_keys=keys, bounds=bounds)  # fmt: skip
        began = time.perf_counter()
        status = "ok"
        try:
            out = s.synthesize("t", epsilon=1, delta=1e-9, method=method, bins=BINS)
            produced = out.table.num_rows
        except Exception as e:  # a refusal is a result here (e.g. too many cells)
            status, produced = f"{type(e).__name__}: {str(e)[:120]}", 0
        total = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB on Linux
    return {"rows": rows, "columns": columns, "method": method, "total_s": total,
            "engine_s": engine_time[0], "floor_s": floor, "peak_mib": peak,
            "produced": produced, "status": status}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke run)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "synth_scaling.md"))
    args = parser.parse_args()
    if args.child:
        rows, columns, method = int(args.child[0]), int(args.child[1]), args.child[2]
        print(json.dumps(child(rows, columns, method)))
        return
    if args.quick:
        configs = [(10**4, 6, "mst"), (10**4, 6, "aim"), (10**5, 10, "mst")]
    else:
        configs = [(10**5, 10, "mst"), (10**6, 10, "mst"), (10**7, 10, "mst"),
                   (10**6, 20, "mst"), (10**6, 40, "mst"), (10**5, 10, "aim"),
                   (10**6, 10, "aim")]  # fmt: skip
    results = []
    load = os.getloadavg()
    for rows, columns, method in configs:
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(rows), str(columns), method],
                capture_output=True, text=True, check=False, timeout=args.timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            results.append({"rows": rows, "columns": columns, "method": method,
                            "status": f"timeout ({args.timeout:.0f} s)"})  # fmt: skip
            print(results[-1], flush=True)
            continue
        if proc.returncode != 0:
            failed = f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
            results.append({"rows": rows, "columns": columns, "method": method, "status": failed})
        else:
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    lines = [
        "## Synthetic data at scale (`benchmarks/synth_scaling.py`)",
        "",
        (
            "`Session.synthesize` on DuckDB, ε = 1, δ = 10⁻⁹, persons of 1–2 rows "
            f"(`max_rows = 2`), "
            f"columns alternating categorical ({KEYS} keys, each depending on the previous) and "
            f"numeric ({BINS} bins). Each configuration in its own process; peak = the process's "
            "peak resident memory (Python, numpy and DuckDB). engine = the one statement counting "
            "every candidate marginal; floor = one plain `GROUP BY` of two columns over the same "
            "table, same process."
        ),
        "",
        (
            "| rows | columns | method | total | engine | engine / floor | peak memory | rows out "
            "| status |"
        ),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "total_s" not in r:
            lines.append(
                f"| {r['rows']:,} | {r['columns']} | {r['method']} | — | — | — | — | — "
                f"| {r['status']} |"
            )
            continue
        lines.append(
            f"| {r['rows']:,} | {r['columns']} | {r['method']} | {r['total_s']:.1f} s | "
            f"{r['engine_s']:.1f} s | {r['engine_s'] / max(r['floor_s'], 1e-9):.1f}× | "
            f"{r['peak_mib']:,.0f} MiB | {r['produced']:,} | {r['status']} |"
        )
    lines += [
        "",
        (
            f"Load average at the start: {load[0]:.1f}. Reproduce: `.venv/bin/python "
            f"benchmarks/synth_scaling.py{' --quick' if args.quick else ''}`."
        ),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

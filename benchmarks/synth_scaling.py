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

A method written ``mst+domain`` or ``aim+domain`` declares neither keys nor bounds: every
categorical column asks for ``SelectKeys(8)`` and every numeric one for ``Quantiles(bins,
within=(0, 100))``, measured with DP inside the same release (:mod:`deniable.synth.learn`).

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


def child(rows: int, columns: int, method: str, bins: int = BINS) -> dict[str, Any]:
    """One configuration, in this process; returns its figures."""
    import resource

    import duckdb

    import deniable.synth.release as release
    from deniable.accounting.loss import EpsilonDelta
    from deniable.curator.session import Session

    con = duckdb.connect()
    keys, bounds = _table(con, rows, columns)
    engine_time = [0.0]
    original = release.exact_marginals  # type: ignore[attr-defined]

    def timed(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*a, **k)
        finally:
            engine_time[0] += time.perf_counter() - began
            peak_now = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            # Read by the parent if the configuration times out later (AIM's rounds).
            print(json.dumps({"engine_s": engine_time[0], "peak_mib": peak_now}),
                  file=sys.stderr, flush=True)  # fmt: skip

    release.exact_marginals = timed  # type: ignore[attr-defined]
    domain_time = [0.0]
    original_domain = release.exact_domain  # type: ignore[attr-defined]

    def timed_domain(*a: Any, **k: Any) -> Any:
        began = time.perf_counter()
        try:
            return original_domain(*a, **k)
        finally:
            domain_time[0] += time.perf_counter() - began

    release.exact_domain = timed_domain  # type: ignore[attr-defined]
    began = time.perf_counter()
    con.execute("SELECT c0, c1, COUNT(*) FROM t GROUP BY ALL").fetchall()
    floor = time.perf_counter() - began
    with tempfile.TemporaryDirectory() as tmp:
        s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-6), ledger=Path(tmp) / "l.db")
        measured = method.endswith("+domain")  # the domain measured with DP, not declared
        spec: Any = bins
        if measured:
            from deniable.synth import Quantiles, SelectKeys

            spec = {c: SelectKeys(KEYS) for c in keys}
            spec.update({c: Quantiles(bins, within=(0, 100)) for c in bounds})
            keys, bounds = {}, {}
        s.add_table("t", con, privacy_unit="pid", max_groups=1, max_rows=2,
                    public_keys=keys or None, bounds=bounds or None)  # fmt: skip
        began = time.perf_counter()
        status = "ok"
        try:
            out = s.synthesize("t", epsilon=1, delta=1e-9, method=method.split("+")[0],
                               bins=spec)  # fmt: skip
            produced = out.table.num_rows
            if measured:
                status = f"ok; the domain's statistics (engine) took {domain_time[0]:.1f} s"
        except Exception as e:  # a refusal is a result here (e.g. too many cells)
            status, produced = f"{type(e).__name__}: {str(e)[:120]}", 0
        total = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB on Linux
    return {"rows": rows, "columns": columns, "method": method, "bins": bins, "total_s": total,
            "engine_s": engine_time[0], "floor_s": floor, "peak_mib": peak,
            "produced": produced, "status": status}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only (smoke run)")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per configuration")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "synth_scaling.md"))
    parser.add_argument(
        "--config",
        action="append",
        metavar="ROWS:COLUMNS:METHOD[:BINS]",
        help="run only these configurations (repeatable); their table is appended to --out",
    )
    args = parser.parse_args()
    if args.child:
        rows, columns, method = int(args.child[0]), int(args.child[1]), args.child[2]
        bins = int(args.child[3]) if len(args.child) > 3 else BINS
        print(json.dumps(child(rows, columns, method, bins)))
        return
    configs: list[tuple[int, int, str, int]]
    if args.config:
        configs = []
        for c in args.config:
            r, d, m, *b = c.split(":")
            configs.append((int(float(r)), int(d), m, int(b[0]) if b else BINS))
    elif args.quick:
        configs = [(10**4, 6, "mst", BINS), (10**4, 6, "aim", BINS), (10**5, 10, "mst", BINS)]
    else:
        configs = [(r, d, m, BINS) for r, d, m in (
            (10**5, 10, "mst"), (10**6, 10, "mst"), (10**7, 10, "mst"), (10**6, 20, "mst"),
            (10**6, 40, "mst"), (10**5, 10, "aim"), (10**6, 10, "aim"), (10**5, 20, "aim"),
        )]  # fmt: skip
    results: list[dict[str, Any]] = []
    load = os.getloadavg()
    for rows, columns, method, bins in configs:
        try:
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(rows), str(columns), method, str(bins)],
                capture_output=True, text=True, check=False, timeout=args.timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            status = f"timeout ({args.timeout:.0f} s)"
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            marks = [ln for ln in err.splitlines() if ln.startswith('{"engine_s"')]
            if marks:
                seen = json.loads(marks[-1])
                status += (
                    f"; the marginals were counted in {seen['engine_s']:.1f} s, peak "
                    f"{seen['peak_mib']:,.0f} MiB by then"
                )
            results.append({"rows": rows, "columns": columns, "method": method, "bins": bins,
                            "status": status})  # fmt: skip
            print(results[-1], flush=True)
            continue
        if proc.returncode != 0:
            failed = f"exit {proc.returncode}: {proc.stderr.strip()[-200:]}"
            results.append({"rows": rows, "columns": columns, "method": method, "bins": bins,
                            "status": failed})  # fmt: skip
        else:
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(results[-1], flush=True)
    title = "## Synthetic data at scale (`benchmarks/synth_scaling.py`)"
    if args.config:
        title = "### More configurations (`--config`)"
    lines = [
        title,
        "",
        (
            "`Session.synthesize` on DuckDB, ε = 1, δ = 10⁻⁹, persons of 1–2 rows "
            f"(`max_rows = 2`), "
            f"columns alternating categorical ({KEYS} keys, each depending on the previous) and "
            f"numeric ({BINS} bins unless the bins column says otherwise). Each configuration in "
            "its own process; peak = the process's "
            "peak resident memory (Python, numpy and DuckDB). engine = the one statement counting "
            "every candidate marginal; floor = one plain `GROUP BY` of two columns over the same "
            "table, same process."
        ),
        "",
        (
            "| rows | columns | method | bins | total | engine | engine / floor | peak memory "
            "| rows out | status |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "total_s" not in r:
            lines.append(
                f"| {r['rows']:,} | {r['columns']} | {r['method']} | {r.get('bins', BINS)} "
                "| — | — | — | — | — "
                f"| {r['status']} |"
            )
            continue
        lines.append(
            f"| {r['rows']:,} | {r['columns']} | {r['method']} | {r.get('bins', BINS)} "
            f"| {r['total_s']:.1f} s | "
            f"{r['engine_s']:.1f} s | {r['engine_s'] / max(r['floor_s'], 1e-9):.1f}× | "
            f"{r['peak_mib']:,.0f} MiB | {r['produced']:,} | {r['status']} |"
        )
    end = os.getloadavg()
    flags = " --quick" if args.quick else ""
    flags += "".join(f" --config {c}" for c in args.config or ())
    flags += f" --timeout {args.timeout:g}" if args.timeout != 600.0 else ""
    lines += [
        "",
        (
            f"Load average at the start: {load[0]:.1f}, at the end: {end[0]:.1f} (1-minute). "
            f"Reproduce: `.venv/bin/python benchmarks/synth_scaling.py{flags}`."
        ),
        "",
    ]
    if args.config and Path(args.out).exists():
        previous = Path(args.out).read_text().rstrip("\n")
        Path(args.out).write_text(previous + "\n\n" + "\n".join(lines))
    else:
        Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

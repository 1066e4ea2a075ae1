"""Benchmark: the DP query at 10⁸ rows from Parquet with DuckDB limited to 4 GiB of memory.

The per-category count/sum/mean query of ``benchmarks/query.py`` (public category keys,
ε = 1, at most 5 categories and 10 rows per user and category, values clamped to [0, 100]) on
the ``heavy`` workload of ``benchmarks/query.py`` (:func:`query.heavy_events_sql`: heavy users
concentrate their rows on a favourite category; ≈30% of the rows in (user, category) pairs
above ``max_rows``), written once to a Parquet file of N rows (default 10⁸, ≈1.4 GB). The
table is registered from the file (a view over ``read_parquet``: nothing is loaded into
memory first) with a curator-chosen version (so registration does not hash every row).

Each measurement runs in a fresh process whose DuckDB has ``memory_limit = 4GB``, 2 threads
and a spill directory in the benchmark's temporary directory:

* ``floor``: the non-private two-level query (``GROUP BY user_id, category`` then
  ``GROUP BY category``) on the same file, same limit;
* ``dp``: ``Session.sql`` end to end (compile, the bounded statement in DuckDB, ledger
  charge, noise) with a ``DuckDBEngine(memory_limit="4GB", threads=2, temp_directory=…)``.

Reported: wall time (best of ``--repeat`` runs, alternating floor and dp), the process's peak
resident set (``VmHWM``, whole process: Python, DuckDB's buffer pool and everything else)
against the 4 GiB limit, and the bytes spilled to disk (the spill directory's peak size,
sampled every 50 ms).

Run: ``.venv/bin/python benchmarks/bigdata.py [--rows 1e8] [--repeat 2] [--data DIR]``
(writes ``benchmarks/results/bigdata.md``; ``--data`` keeps the Parquet file between runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

LIMIT = "4GB"
LIMIT_BYTES = 4 * 1024**3  # DuckDB reads "4GB" as 4 GiB (1000-based "GB" would be smaller)


def _write(rows: int, path: Path) -> None:
    import duckdb

    from query import heavy_events_sql

    con = duckdb.connect()
    con.execute(f"SET temp_directory = '{path.parent / 'gen_spill'}'")
    con.execute(f"COPY ({heavy_events_sql(rows)}) TO '{path}' (FORMAT parquet)")
    count = con.sql(f"SELECT count(*) FROM read_parquet('{path}')").fetchall()[0][0]
    if count != rows:
        raise RuntimeError(f"{path} has {count} rows, not {rows}")


def _peak_kib() -> int:
    status = Path("/proc/self/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return int(fields["VmHWM"].split()[0])


def child(kind: str, parquet: str, spill: str) -> None:
    """One measurement in this fresh process; prints a JSON line."""
    import duckdb

    from query import FLOORS, POLICY, QUERY

    os.makedirs(spill, exist_ok=True)
    if kind == "floor":
        con = duckdb.connect()
        con.execute(f"SET memory_limit = '{LIMIT}'")
        con.execute("SET threads = 2")
        con.execute("SET preserve_insertion_order = false")
        con.execute(f"SET temp_directory = '{spill}'")
        con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{parquet}')")
        t0 = time.perf_counter()
        con.sql(FLOORS["two-level"]).fetchall()
        seconds = time.perf_counter() - t0
    else:
        from deniable.accounting.loss import EpsilonDelta
        from deniable.curator.session import Session
        from deniable.engines.duckdb import DuckDBEngine

        engine = DuckDBEngine(memory_limit=LIMIT, threads=2, temp_directory=spill)
        ledger = tempfile.mktemp(suffix=".db")
        budget = EpsilonDelta(epsilon=10**6, delta=0.5)
        session = Session(budget=budget, ledger=ledger, engine=engine)
        keys = {"category": list(range(50))}
        session.add_table("events", parquet, version="bench", public_keys=keys, **POLICY)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        session.sql(QUERY, epsilon=1)
        seconds = time.perf_counter() - t0
        session.close()
    print(json.dumps({"kind": kind, "seconds": seconds, "peak_kib": _peak_kib()}))


def _spill_watch(spill: Path, stop: threading.Event, peak: list[int]) -> None:
    while not stop.is_set():
        total = 0
        for p in spill.rglob("*"):
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        peak[0] = max(peak[0], total)
        stop.wait(0.05)


def _run(kind: str, parquet: Path, tmp: Path) -> dict[str, float]:
    spill = tmp / f"spill_{kind}"
    spill.mkdir(exist_ok=True)
    stop, peak = threading.Event(), [0]
    watch = threading.Thread(target=_spill_watch, args=(spill, stop, peak), daemon=True)
    watch.start()
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(parquet), str(spill)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    stop.set()
    watch.join()
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    return {"seconds": doc["seconds"], "peak_kib": doc["peak_kib"], "spill": peak[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e8)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--data", help="directory keeping the Parquet file between runs")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "bigdata.md"))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    rows = int(args.rows)
    tmp = Path(tempfile.mkdtemp(prefix="deniable-bigdata-"))
    data = Path(args.data) if args.data else tmp
    data.mkdir(parents=True, exist_ok=True)
    parquet = data / f"heavy_{rows}.parquet"
    if not parquet.exists():
        t0 = time.perf_counter()
        _write(rows, parquet)
        print(f"wrote {parquet} ({parquet.stat().st_size / 1e9:.2f} GB) in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    runs: dict[str, list[dict[str, float]]] = {"floor": [], "dp": []}
    for _ in range(args.repeat):
        for kind in runs:
            r = _run(kind, parquet, tmp)
            runs[kind].append(r)
            print(kind, r, flush=True)
    best = {k: min(v, key=lambda r: r["seconds"]) for k, v in runs.items()}
    peak = {k: max(r["peak_kib"] for r in v) * 1024 for k, v in runs.items()}
    spill = {k: max(r["spill"] for r in v) for k, v in runs.items()}
    ratio = best["dp"]["seconds"] / best["floor"]["seconds"]
    gib = 1024**3
    lines = [
        "## DuckDB beyond memory: 10⁸ rows from Parquet under a 4 GiB limit",
        "",
        (
            f"{rows:,} rows of the `heavy` workload (`benchmarks/query.py`) in one Parquet file "
            f"({parquet.stat().st_size / 1e9:.2f} GB), the per-category DP count/sum/mean (ε = 1, "
            "public keys), DuckDB `memory_limit = 4GB`, 2 threads, spilling to a temporary "
            "directory; each run in a fresh process, best of "
            f"{args.repeat}."
        ),
        "",
        "| run | wall (s) | × floor | peak RSS (GiB) | peak spill (GiB) |",
        "|---|---|---|---|---|",
        (
            f"| two-level floor (non-private) | {best['floor']['seconds']:.1f} | 1.00 | "
            f"{peak['floor'] / gib:.2f} | {spill['floor'] / gib:.2f} |"
        ),
        (
            f"| DP `Session.sql` | {best['dp']['seconds']:.1f} | {ratio:.2f} | "
            f"{peak['dp'] / gib:.2f} | {spill['dp'] / gib:.2f} |"
        ),
        "",
        (
            f"Peak RSS is the whole process (Python, pandas, DuckDB); the limit bounds DuckDB's "
            f"buffer pool. DP peak = {peak['dp'] / LIMIT_BYTES:.2f}× the 4 GiB limit "
            f"(margin {max(0.0, (peak['dp'] - LIMIT_BYTES) / gib):.2f} GiB above it)."
        ),
        "",
        (
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}. Reproduce with `.venv/bin/python benchmarks/bigdata.py "
            f"--rows {args.rows:g} --repeat {args.repeat}`."
        ),
        "",
    ]
    Path(args.output).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

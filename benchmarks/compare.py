"""deniable against other DP libraries on the same query, measured in the same run.

Query (as in ``benchmarks/query.py``): per category a DP count, sum and mean of ``value``
clamped to [0, 100], user-level privacy (``user_id``), at most 5 categories per user and 10
rows per (user, category), total ε = 1, the 50 categories public. Data: the synthetic
``events`` table written once to Parquet and read by every library.

Each library runs in its own virtualenv (their pins conflict: OpenDP wants one polars, the
others their own pandas/numpy), as a subprocess running ``benchmarks/compare_runners/<lib>``,
which prints its load time, query time (best of the repeats; reading the Parquet file into
the library's in-memory form is excluded and reported apart), peak RSS and its 50 noisy
counts. deniable runs in this process: ``Session.sql`` end to end (plan, DuckDB, the durable
ledger charge, noise, answer), with the table already in DuckDB.

Run ``.venv/bin/python benchmarks/compare.py --setup`` once to create the environments under
``--envs`` (default ``~/.cache/deniable-bench``), then ``.venv/bin/python benchmarks/compare.py``.
Writes ``benchmarks/results/compare.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
RUNNERS = ROOT / "benchmarks" / "compare_runners"

QUERY = (
    "SELECT category, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean "
    "FROM events GROUP BY category"
)
LIBRARIES = {
    # name: (pip requirement, runner, backend, how its query differs from ours)
    "opendp": (
        "opendp[polars]",
        "opendp_runner.py",
        "polars context (Rust core)",
        (
            "contribution bounds applied in polars before the OpenDP context (its own "
            "truncate_num_groups fails on this polars); count and sum at ε = ½ each, the mean is "
            "their ratio"
        ),
    ),
    "pipeline-dp": (
        "pipeline-dp",
        "pipelinedp_runner.py",
        "LocalBackend (in-process Python)",
        (
            "same bounds (max_partitions_contributed = 5, max_contributions_per_partition = 10); "
            "Laplace noise"
        ),
    ),
    "smartnoise-sql": (
        "smartnoise-sql",
        "smartnoise_runner.py",
        "pandas reader",
        "bounds rows per user (max_ids = 50 = 5 × 10), not partitions per user; δ = 10⁻⁶",
    ),
    "tmlt.analytics": (
        "tmlt.analytics",
        "",
        "Spark (local)",
        "",
    ),
}


def setup(envs: Path) -> None:
    """Create one virtualenv per library and install it (and pyarrow/pandas)."""
    envs.mkdir(parents=True, exist_ok=True)
    for name, (req, *_rest) in LIBRARIES.items():
        env = envs / name
        if not (env / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        out = subprocess.run(
            [str(env / "bin" / "pip"), "install", "-q", req, "pyarrow", "pandas"],
            capture_output=True,
            text=True,
        )
        print(f"{name}: {'installed' if out.returncode == 0 else 'FAILED: ' + out.stderr[-300:]}")


def _version(env: Path, name: str) -> str:
    out = subprocess.run(
        [str(env / "bin" / "pip"), "show", name.split("[")[0]], capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return "?"


def run_deniable(parquet: str, repeat: int, tmp: Path) -> dict[str, object]:
    import duckdb

    from deniable.accounting.loss import Epsilon
    from deniable.curator.session import Session

    con = duckdb.connect()
    t0 = time.perf_counter()
    con.execute(f"CREATE TABLE events AS SELECT * FROM read_parquet('{parquet}')")
    load = time.perf_counter() - t0
    s = Session(budget=Epsilon(epsilon=10**6), ledger=tmp / "ledger.db")
    s.add_table(
        "events",
        con,
        privacy_unit="user_id",
        bounds={"value": (0, 100)},
        max_groups=5,
        max_rows=10,
        public_keys={"category": list(range(50))},
    )
    best, answer = float("inf"), None
    for i in range(repeat):
        t0 = time.perf_counter()
        answer = s.sql(QUERY, epsilon=Fraction(1) + Fraction(i, 10**9))  # no cache hit
        best = min(best, time.perf_counter() - t0)
    assert answer is not None
    frame = answer.frame.sort_values("category")
    truth = dict(con.sql("SELECT category, count(*) FROM events GROUP BY ALL").fetchall())
    s.close()
    con.close()
    return {
        "lib": "deniable",
        "load_s": load,
        "query_s": best,
        "counts": [int(x) for x in frame["n"]],
        "truth": [int(truth.get(k, 0)) for k in range(50)],
    }


def run_library(name: str, env: Path, parquet: str, repeat: int, timeout: int) -> dict[str, object]:
    runner = LIBRARIES[name][1]
    if not runner:
        return {"lib": name, "error": "no runner written yet"}
    python = env / "bin" / "python"
    if not python.exists():
        return {"lib": name, "error": f"not installed (no environment at {env}; run --setup)"}
    try:
        out = subprocess.run(
            [str(python), str(RUNNERS / runner), parquet, str(repeat)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"lib": name, "error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"lib": name, "error": f"failed: {last[:200]}"}
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    result["version"] = _version(env, LIBRARIES[name][0])
    return result


def _error(counts: list[int], truth: list[int]) -> float:
    return statistics.median(abs(c - t) / max(t, 1) for c, t in zip(counts, truth, strict=True))


def report(results: dict[int, list[dict[str, object]]], repeat: int) -> str:
    load = os.getloadavg()
    lines = [
        "## Against other DP libraries (`benchmarks/compare.py`)",
        "",
        (
            "The query of the previous section (per category DP count, sum and mean, at most 5 "
            "categories and 10 rows per category per user, clamp [0, 100], ε = 1, public "
            "categories) in each library, on the same Parquet file, in the same run. Query time "
            f"is the best of {repeat} runs (reading the file into the library's in-memory form "
            "excluded, shown as load); `× deniable` is the library's query time over deniable's "
            "`Session.sql` end to end. Count error: median over the 50 categories of "
            "|noisy − true| / true (true = the unbounded count; it includes each library's "
            "bounding bias)."
        ),
        "",
        (
            f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()}; load average at the end {load[0]:.2f}, {load[1]:.2f}."
        ),
        "",
    ]
    for n, rows in results.items():
        ours = next(r for r in rows if r["lib"] == "deniable")
        truth = ours["truth"]
        assert isinstance(truth, list)
        lines += [
            f"N = {n:,}:",
            "",
            (
                "| library | version | backend | load (s) | query (s) | × deniable "
                "| peak RSS (MiB) | count error |"
            ),
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        fastest = None
        for r in rows:
            name = str(r["lib"])
            if "error" in r:
                lines.append(f"| {name} | | | | | {r['error']} | | |")
                continue
            q = float(r["query_s"])  # type: ignore[arg-type]
            ratio = q / float(ours["query_s"])  # type: ignore[arg-type]
            if name != "deniable":
                fastest = ratio if fastest is None else min(fastest, ratio)
            backend = "DuckDB" if name == "deniable" else LIBRARIES[name][2]
            peak = r.get("peak_kib")
            lines.append(
                f"| {name} | {r.get('version', '')} | {backend} | {float(r['load_s']):.2f} | "  # type: ignore[arg-type]
                f"{q:.3f} | {ratio:.1f} | {'' if peak is None else f'{int(peak) / 1024:.0f}'} | "  # type: ignore[call-overload]
                f"{_error(r['counts'], truth):.4f} |"  # type: ignore[arg-type]
            )
        lines.append("")
        if fastest is not None:
            verdict = "met" if fastest >= 20 else "not met"
            lines.append(
                f"Fastest other library ÷ deniable at N = {n:,}: {fastest:.1f}× "
                f"(target ≥ 20×: {verdict})."
            )
            lines.append("")
    lines += ["How each library's query differs from ours:", ""]
    for name, (_req, runner, _backend, note) in LIBRARIES.items():
        if runner:
            lines.append(f"- {name}: {note}.")
    lines += [
        "",
        (
            "Reproduce: `.venv/bin/python benchmarks/compare.py --setup` (once; creates one "
            "virtualenv per library), then `.venv/bin/python benchmarks/compare.py`."
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e6])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--envs", type=Path, default=Path.home() / ".cache" / "deniable-bench")
    parser.add_argument("--setup", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "compare.md"))
    args = parser.parse_args()
    if args.setup:
        setup(args.envs)
        return
    import pyarrow.parquet as pq

    from deniable.datasets import events

    results: dict[int, list[dict[str, object]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.rows):
            parquet = str(Path(tmp) / f"events_{n}.parquet")
            pq.write_table(events(n, seed=1), parquet)
            rows = [run_deniable(parquet, args.repeat, Path(tmp))]
            for name in LIBRARIES:
                rows.append(run_library(name, args.envs / name, parquet, args.repeat, args.timeout))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "counts"}), flush=True)
            results[n] = rows
    text = report(results, args.repeat)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""What predictable response time costs: the query route with the policy off vs on.

One run on loopback. A user-level table of 3·10⁵ rows (Parquet, ``x`` a permutation, about
10 rows per person), the server started as the product starts it
(``deniable.server.run.serve``, ``--workers`` processes sharing one ledger), and fresh
queries ``SELECT x AS g, COUNT(*) AS n FROM t WHERE x < k GROUP BY x`` (private keys, a
different ``k`` each time, so nothing is replayed and the run time follows the rows matched).
The same load is sent to the same dataset with, in turn:

* ``off`` — ``response_time = "off"``: the floor, responses leave when ready;
* ``tight`` — ``response_time = { base = 0.1, per_row = 1e-6, rows = 300000 }`` (0.4 s): a
  deadline just above the worst case measured at this size with one client (queries
  queued behind others' overrun it);
* ``default`` — no ``response_time`` key: the default, a fixed 1 s.

Each with one client asking in sequence (the latency an analyst sees, and one analyst's
rate) and with ``--clients`` concurrent keep-alive clients (the service's throughput). The
policy sleeps in the event loop, so concurrent requests wait their deadlines side by side;
throughput under concurrency is bounded by ``clients / deadline`` and by the server's own
rate, whichever is lower. Also measured: the release jitter, i.e. how late after its deadline
a held response actually leaves, (a) in-process for :func:`deniable.server.timing.sleep_until`
alone and (b) over HTTP as seen by the client (latency minus the deadline, which also holds
the client's and the network's time).

Run: ``.venv/bin/python benchmarks/server_timing.py`` (writes
``benchmarks/results/server_timing.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "system"))

from _server_helpers import running  # type: ignore[import-not-found,unused-ignore]  # noqa: E402

from deniable.ledger import Ledger  # noqa: E402
from deniable.server.timing import DEFAULT_DEADLINE, sleep_until  # noqa: E402

ROWS = 300_000
POLICIES = {
    "off": ('"off"', 0.0),
    "tight": ("{ base = 0.1, per_row = 1e-6, rows = 300000 }", 0.4),
    "default": (None, DEFAULT_DEADLINE),
}


def write(folder: Path, policy: str | None) -> Path:
    rng = np.random.default_rng(7)
    pq.write_table(
        pa.table(
            {
                "x": rng.permutation(ROWS).astype(np.int64),
                "u": rng.integers(0, ROWS // 10, ROWS),
            }
        ),
        folder / "data.parquet",
    )
    line = "" if policy is None else f"response_time = {policy}\n"
    path = folder / "service.toml"
    path.write_text(
        'ledger = "ledger.db"\n[server]\nrate_limit = { per_second = 100000, burst = 100000 }\n'
        '[datasets.d]\nsource = "data.parquet"\ntable = "t"\nprivacy_unit = "u"\n'
        "max_groups = 1\nmax_rows = 2\nbudget = { epsilon = 1000000, delta = 0.1 }\n" + line
    )
    return path


def load(port: int, token: str, ks: list[int], clients: int) -> tuple[float, np.ndarray, int]:
    """Wall seconds, per-request latencies and 503 overruns of ``ks`` asked by ``clients``."""
    latency = np.zeros(len(ks))
    statuses = [0] * len(ks)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        for i in range(c, len(ks), clients):
            sql = f"SELECT x AS g, COUNT(*) AS n FROM t WHERE x < {ks[i]} GROUP BY x"
            body = json.dumps({"sql": sql, "epsilon": 0.01, "delta": 1e-6})
            t0 = time.perf_counter()
            conn.request("POST", "/v1/datasets/d/query", body, headers)
            r = conn.getresponse()
            r.read()
            latency[i] = time.perf_counter() - t0
            statuses[i] = r.status
        conn.close()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    bad = [s for s in statuses if s not in (200, 503)]
    if bad:
        raise RuntimeError(f"unexpected statuses {sorted(set(bad))}")
    return wall, latency, statuses.count(503)


def sleep_jitter(n: int) -> np.ndarray:
    """Seconds by which :func:`sleep_until` returns after its deadline (n draws, 5-50 ms)."""

    async def run() -> np.ndarray:
        late = np.zeros(n)
        rng = np.random.default_rng(3)
        for i in range(n):
            deadline = time.monotonic() + float(rng.uniform(0.005, 0.05))
            await sleep_until(deadline)
            late[i] = time.monotonic() - deadline
        return late

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=60, help="queries, one client")
    parser.add_argument("--concurrent", type=int, default=240, help="queries, --clients")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/server_timing.md")
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (policy, deadline) in POLICIES.items():
            folder = Path(tmp) / name
            folder.mkdir()
            config = write(folder, policy)
            with Ledger(folder / "ledger.db") as led:
                token = led.add_analyst("ann", role="analyst")
            with running(config, workers=args.workers, log=folder / "server.log") as server:
                load(server.port, token, [-1 - w for w in range(2 * args.workers)], args.workers)
                seq = [int(k) for k in rng.integers(0, ROWS + 1, args.sequential)]
                wall_s, lat_s, over_s = load(server.port, token, seq, 1)
                conc = [int(k) for k in rng.integers(0, ROWS + 1, args.concurrent)]
                wall_c, lat_c, over_c = load(server.port, token, conc, args.clients)
            rows[name] = {
                "deadline": deadline,
                "seq_rps": (len(seq) - over_s) / wall_s,
                "seq_p50": float(np.median(lat_s)),
                "seq_p99": float(np.percentile(lat_s, 99)),
                "seq_late_p50": float(np.median(lat_s)) - deadline,
                "seq_late_max": float(lat_s.max()) - deadline,
                "conc_rps": (len(conc) - over_c) / wall_c,
                "conc_p50": float(np.median(lat_c)),
                "conc_p99": float(np.percentile(lat_c, 99)),
                "over_s": float(over_s),
                "over_c": float(over_c),
            }
            print(name, {k: round(v, 4) for k, v in rows[name].items()}, flush=True)
    late = sleep_jitter(1000)
    write_report(args, rows, late)


def write_report(
    args: argparse.Namespace, rows: dict[str, dict[str, float]], late: np.ndarray
) -> None:
    off = rows["off"]
    c = args.clients
    lines = [
        "## Predictable response time: the cost of the policy (`benchmarks/server_timing.py`)",
        "",
        (
            f"Loopback, {args.workers} uvicorn worker(s), a {ROWS:,}-row user-level table "
            "(Parquet), fresh private-key `GROUP BY` queries whose run time follows the rows a "
            f"random WHERE matches. One client asking {args.sequential} queries in sequence, "
            f"then {c} clients asking {args.concurrent}. Answers/s counts answers (200) only; "
            "an overrun is a 503 at the deadline. Ratios are to `off` (responses sent when "
            f"ready) measured in the same run. Machine: {platform.machine()}, "
            f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}."
        ),
        "",
        (
            "| policy | deadline | 1 client: answers/s (ratio) | 1 client: median / p99 | "
            f"{c} clients: answers/s (ratio) | {c} clients: median / p99 | "
            f"overruns (1 / {c} clients) |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        dl = "—" if name == "off" else f"{r['deadline']:g} s"
        lines.append(
            f"| {name} | {dl} | {r['seq_rps']:.1f} ({r['seq_rps'] / off['seq_rps']:.2f}×) | "
            f"{r['seq_p50'] * 1e3:.0f} / {r['seq_p99'] * 1e3:.0f} ms | "
            f"{r['conc_rps']:.1f} ({r['conc_rps'] / off['conc_rps']:.2f}×) | "
            f"{r['conc_p50'] * 1e3:.0f} / {r['conc_p99'] * 1e3:.0f} ms | "
            f"{int(r['over_s'])} of {args.sequential} / {int(r['over_c'])} of "
            f"{args.concurrent} |"
        )
    q = np.percentile(late, [50, 99, 100]) * 1e6
    tight = rows["tight"]
    lines += [
        "",
        (
            "Release jitter (how late after its deadline a held response leaves): "
            f"`sleep_until` alone, 1,000 sleeps in the event loop: median {q[0]:.0f} µs, "
            f"p99 {q[1]:.0f} µs, max {q[2]:.0f} µs (never early). Over HTTP, one client, "
            f"policy `tight`: latency − deadline median {tight['seq_late_p50'] * 1e3:.1f} ms, "
            f"max {tight['seq_late_max'] * 1e3:.1f} ms (client, loopback and the event loop; "
            "the same for every query whatever it matched)."
        ),
        "",
        (
            "Reading: with the policy on, one analyst's rate is 1/deadline and every answer "
            "takes the deadline; under concurrency held responses wait side by side in the "
            "event loop (no thread is held), so throughput is bounded by clients/deadline and "
            "by the server's own rate. A deadline sized for one client (`tight`) overruns as "
            "soon as clients queue for the dataset (one query at a time per worker): size the "
            "deadline for the concurrency admitted. The default (on, 1 s) is kept: a DP "
            "budget allows few queries, so a second per answer costs an analyst little, "
            "while a closed timing channel is what the ε promises assume."
        ),
        "",
        "Reproduce: `.venv/bin/python benchmarks/server_timing.py`",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

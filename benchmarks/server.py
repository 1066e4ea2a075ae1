"""Benchmark of the HTTP service: cached and fresh DP queries against a trivial endpoint.

One run on loopback: a 10⁶-row ``events`` table (``deniable.datasets.events(N, seed=1)``,
written to Parquet in a temporary directory), one configuration, the server started as the
product starts it (``deniable.server.run.serve``: uvicorn, 4 worker processes sharing one
ledger), and load from a bounded client in this script: a fixed number of requests sent over
C keep-alive connections by a minimal asyncio HTTP/1.1 client (raw sockets, so that the
client costs far less than the server). Measured in the same run:

* ``trivial`` — ``GET /v1/health`` (no authentication, no data): the floor, the throughput
  of the same FastAPI application and uvicorn workers doing nothing;
* ``cached`` — one DP query (per-category ``COUNT(*)``, ε = 1) paid once, then replayed
  identically by the same analyst: authentication, compilation of the query (to find its
  cache key), the ledger's look-up of the stored answer, and the response; free;
* ``fresh`` — the same query with a distinct ε each time (ε = 1 + i/2²⁰), so that nothing
  is cached: compilation, the bounded SQL on the 10⁶ rows in DuckDB, the durable ledger
  charge (SQLite, fsync, shared by the workers), noise and the answer. Once with one client
  (latency of a query alone) and once with as many clients as workers (under load);
* ``in-process`` — the same fresh query through ``Session.sql`` in this process, on the same
  Parquet file, one at a time, each right after one single-client fresh HTTP query
  (interleaved, so that both see the same load on a shared machine): the time a query costs
  without the service. ``Service.query`` in-process (the server's path without HTTP) too.

Throughput is requests per second over a phase's wall time (connections opened before the
clock starts); latency is per request, from the first byte sent to the last byte received.
Each phase of ``trivial`` and ``cached`` runs ``--rounds`` times, interleaved, and the round
with the highest throughput is reported (the machine may be shared).

Targets (issue 11): cached throughput ≥ 50% of the trivial endpoint's; fresh p99 ≤ 3× the
in-process time of the same query.

Run: ``.venv/bin/python benchmarks/server.py`` (writes ``benchmarks/results/server.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

QUERY = "SELECT category, COUNT(*) AS n FROM events GROUP BY category"
CACHED_EPSILON = 1.0
DATASET = "events"
HOST = "127.0.0.1"


def fresh_epsilon(i: int) -> float:
    """The ε of the ``i``-th fresh query: distinct for every ``i``, exact in binary."""
    return 1.0 + (i + 1) / 2**20


def _helpers() -> Any:
    """The system tests' server helpers (start/stop a real uvicorn server), reused as is."""
    path = ROOT / "tests" / "system" / "_server_helpers.py"
    spec = importlib.util.spec_from_file_location("_server_helpers", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def write_config(folder: Path, parquet: Path, ledger: str) -> Path:
    """A one-dataset configuration over ``parquet`` with a rate limit that never binds."""
    keys = ", ".join(str(c) for c in range(50))
    text = f"""
ledger = "{ledger}"

[server]
rate_limit = {{ per_second = 1000000, burst = 1000000 }}

[datasets.{DATASET}]
source = "{parquet}"
table = "events"
privacy_unit = "user_id"
bounds = {{ value = [0, 100] }}
max_groups = 5
max_rows = 10
public_keys = {{ category = [{keys}] }}
budget = {{ epsilon = 1000000000 }}
engine = "duckdb"
"""
    path = folder / f"{Path(ledger).stem}.toml"
    path.write_text(text)
    return path


# -- the load generator ------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """The outcome of one phase: ``n`` requests over ``clients`` connections."""

    name: str
    clients: int
    wall: float
    latencies: np.ndarray
    client_cpu: float

    @property
    def n(self) -> int:
        return int(self.latencies.size)

    @property
    def rps(self) -> float:
        return self.n / self.wall

    def p(self, q: float) -> float:
        return float(np.percentile(self.latencies, q))


def get_request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()


def post_request(path: str, token: str, body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {HOST}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    return head.encode() + data


Check = Callable[[int, bytes], None]


async def _drive(port: int, requests: Sequence[bytes], clients: int, check: Check) -> Phase:
    latencies = np.empty(len(requests))
    work = iter(enumerate(requests))  # shared by the connections (one thread: no race)
    conns = [await asyncio.open_connection(HOST, port) for _ in range(clients)]

    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i, request in work:
            t0 = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            latencies[i] = time.perf_counter() - t0
            check(int(head[9:12]), body)

    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(r, w) for r, w in conns))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    for _, w in conns:
        w.close()
    return Phase("", clients, wall, latencies, cpu)


def drive(name: str, port: int, requests: Sequence[bytes], clients: int, check: Check) -> Phase:
    """Send ``requests`` over ``clients`` keep-alive connections; time each one."""
    phase = asyncio.run(_drive(port, requests, clients, check))
    out = Phase(name, phase.clients, phase.wall, phase.latencies, phase.client_cpu)
    print(
        f"{name}: {out.n} requests, {clients} clients, {out.rps:.0f} req/s, "
        f"p50 {1e3 * out.p(50):.2f} ms, p99 {1e3 * out.p(99):.2f} ms",
        flush=True,
    )
    return out


def ok(status: int, body: bytes) -> None:
    if status != 200:
        raise RuntimeError(f"HTTP {status}: {body[:300]!r}")


def ok_cached(status: int, body: bytes) -> None:
    ok(status, body)
    if json.loads(body)["cached"] is not True:
        raise RuntimeError("a replay was not served from the cache")


def ok_fresh(status: int, body: bytes) -> None:
    ok(status, body)
    if json.loads(body)["cached"] is not False:
        raise RuntimeError("a fresh query was served from the cache")


# -- in-process reference ---------------------------------------------------------------------


class InProcess:
    """The fresh query through ``Session.sql`` and ``Service.query`` in this process."""

    def __init__(self, parquet: Path, config: Path) -> None:
        from deniable.accounting.loss import Epsilon
        from deniable.curator.session import Session
        from deniable.ledger.analysts import Principal
        from deniable.server.config import load_config
        from deniable.server.service import Service

        self.session = Session(
            budget=Epsilon(epsilon=10**9), ledger=str(config.parent / "session.db"), dataset="s"
        )
        self.session.add_table(
            "events",
            str(parquet),
            privacy_unit="user_id",
            bounds={"value": (0, 100)},
            max_groups=5,
            max_rows=10,
            public_keys={"category": list(range(50))},
        )
        self.service = Service(load_config(config))
        self.who = Principal(name="bench", role="analyst")
        self.times: dict[str, list[float]] = {"Session.sql": [], "Service.query": []}
        self._i = 10**6  # ε values disjoint from the server's

    def run(self, *, record: bool = True) -> None:
        """One fresh query by each path (a new ε each time), timed."""
        self._i += 1
        t0 = time.perf_counter()
        self.session.sql(QUERY, epsilon=Fraction(fresh_epsilon(self._i)))
        t1 = time.perf_counter()
        self.service.query(self.who, DATASET, QUERY, epsilon=fresh_epsilon(self._i))
        t2 = time.perf_counter()
        if record:
            self.times["Session.sql"].append(t1 - t0)
            self.times["Service.query"].append(t2 - t1)

    def close(self) -> None:
        self.session.close()
        self.service.close()


def fresh_alone(port: int, requests: Sequence[bytes], local: InProcess) -> Phase:
    """Fresh queries one at a time over HTTP, each followed by the in-process ones.

    Interleaved, so that both see the same load on the machine.
    """
    latencies = np.empty(len(requests))
    cpu0 = time.process_time()
    wall = 0.0
    with socket.create_connection((HOST, port)) as sock:
        stream = sock.makefile("rb")
        for i, request in enumerate(requests):
            t0 = time.perf_counter()
            sock.sendall(request)
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                head += stream.readline()
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = stream.read(length)
            latencies[i] = time.perf_counter() - t0
            wall += latencies[i]
            ok_fresh(int(head[9:12]), body)
            local.run()
    phase = Phase("fresh, 1 client", 1, wall, latencies, time.process_time() - cpu0)
    print(
        f"{phase.name}: {phase.n} requests, {phase.rps:.1f} req/s, p50 "
        f"{1e3 * phase.p(50):.1f} ms, p99 {1e3 * phase.p(99):.1f} ms",
        flush=True,
    )
    return phase


# -- the run -----------------------------------------------------------------------------------


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from deniable.datasets import events
    from deniable.ledger import Ledger

    t0 = time.perf_counter()
    parquet = tmp / "events.parquet"
    pq.write_table(events(int(args.rows), seed=1), parquet)
    print(f"data: {int(args.rows)} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    served = write_config(tmp, parquet, "ledger.db")
    local = write_config(tmp, parquet, "inprocess.db")
    with Ledger(tmp / "ledger.db") as led:
        token = led.add_analyst("bench", role="analyst")

    inproc = InProcess(parquet, local)
    for _ in range(2):  # warm-up: imports, DuckDB's first reads
        inproc.run(record=False)

    helpers = _helpers()
    server = helpers.start_server(served, workers=args.workers, log=tmp / "server.log")
    try:
        port = int(server.port)
        path = f"/v1/datasets/{DATASET}/query"
        cached = post_request(path, token, {"sql": QUERY, "epsilon": CACHED_EPSILON})
        counter = iter(range(10**9))

        def fresh(n: int) -> list[bytes]:
            return [
                post_request(path, token, {"sql": QUERY, "epsilon": fresh_epsilon(next(counter))})
                for _ in range(n)
            ]

        # Warm-up on every connection (imports, DuckDB's first reads in each worker) and
        # the one paid answer that the cached phase replays.
        drive("warm-up fresh", port, fresh(4 * args.workers), 2 * args.workers, ok_fresh)
        drive("warm-up cached", port, [cached] * 200, args.clients, ok)
        drive("warm-up trivial", port, [get_request("/v1/health")] * 500, args.clients, ok)

        rounds: dict[str, list[Phase]] = {"trivial": [], "cached": []}
        for _ in range(args.rounds):
            rounds["trivial"].append(
                drive("trivial", port, [get_request("/v1/health")] * args.n, args.clients, ok)
            )
            rounds["cached"].append(
                drive("cached", port, [cached] * args.n, args.clients, ok_cached)
            )
        fresh_1 = fresh_alone(port, fresh(args.fresh_alone), inproc)
        fresh_w = drive(
            f"fresh, {args.workers} clients", port, fresh(args.fresh), args.workers, ok_fresh
        )
    finally:
        server.stop()
        inproc.close()
    times = {k: np.array(v) for k, v in inproc.times.items()}
    for k, v in times.items():
        print(f"in-process {k}: p50 {1e3 * np.median(v):.1f} ms, max {1e3 * v.max():.1f} ms")
    best = {k: max(v, key=lambda p: p.rps) for k, v in rounds.items()}
    return {
        "trivial": best["trivial"],
        "cached": best["cached"],
        "all_rounds": rounds,
        "fresh_1": fresh_1,
        "fresh_w": fresh_w,
        "inproc": times,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _load_average() -> str:
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _versions() -> str:
    from importlib.metadata import version

    names = ("uvicorn", "fastapi", "duckdb")
    return ", ".join(f"{n} {version(n)}" for n in names)


def ms(x: float) -> str:
    return f"{1e3 * x:.1f}"


def report(r: dict[str, Any], args: argparse.Namespace, command: str, load: str) -> str:
    trivial: Phase = r["trivial"]
    cached: Phase = r["cached"]
    fresh_1: Phase = r["fresh_1"]
    fresh_w: Phase = r["fresh_w"]
    inproc: dict[str, np.ndarray] = r["inproc"]
    session_p50 = float(np.median(inproc["Session.sql"]))
    service_p50 = float(np.median(inproc["Service.query"]))
    lines = [
        "## HTTP service (`benchmarks/server.py`)",
        "",
        (
            f"A real uvicorn server on loopback with {args.workers} worker processes sharing one "
            f"ledger, as `deniable serve` starts it; a {int(args.rows):,}-row `events` table "
            "(`deniable.datasets.events(N, seed=1)`, Parquet); load from a bounded asyncio "
            "client in the same script (keep-alive connections, a fixed number of requests). "
            "The query: `SELECT category, COUNT(*) AS n FROM events GROUP BY category` (50 "
            "public categories, at most 5 categories and 10 rows per user). **trivial** is "
            "`GET /v1/health` on the same application: the floor. **cached** replays one "
            "paid query (same analyst, same ε): free, served from the ledger's stored answer. "
            "**fresh** gives each request a distinct ε, so that each one runs the bounded SQL "
            "on the 10⁶ rows and is charged durably. **in-process** is the same fresh query "
            "by `Session.sql` in the benchmark's process, sequentially, no HTTP "
            "(median; each in-process query right after one fresh HTTP query with one client, "
            "interleaved, so that both see the same load on the machine)."
        ),
        "",
        (
            "| workload | clients | requests | req/s | × trivial req/s | p50 (ms) | p99 (ms) | "
            "p99 × in-process |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, ph in (
        ("trivial (`/v1/health`)", trivial),
        ("cached query", cached),
        ("fresh query, alone", fresh_1),
        ("fresh query, under load", fresh_w),
    ):
        ratio = f"{ph.p(99) / session_p50:.2f}" if ph in (fresh_1, fresh_w) else ""
        lines.append(
            f"| {name} | {ph.clients} | {ph.n} | {ph.rps:.0f} | {ph.rps / trivial.rps:.3f} | "
            f"{ms(ph.p(50))} | {ms(ph.p(99))} | {ratio} |"
        )
    for key, label in (("Session.sql", "in-process `Session.sql`"), ("Service.query", None)):
        v = inproc[key]
        label = label or "in-process `Service.query` (the server's path, no HTTP)"
        lines.append(
            f"| {label} | 1 | {v.size} | {1 / float(np.mean(v)):.0f} | | "
            f"{ms(float(np.median(v)))} | {ms(float(np.percentile(v, 99)))} | |"
        )
    cached_ratio = cached.rps / trivial.rps
    f1 = fresh_1.p(99) / session_p50
    fw = fresh_w.p(99) / session_p50
    rounds = r["all_rounds"]
    spread = "; ".join(
        f"{k}: " + ", ".join(f"{p.rps:.0f}" for p in v) + " req/s" for k, v in rounds.items()
    )
    client = "; ".join(
        f"{ph.name} {100 * ph.client_cpu / ph.wall:.0f}%" for ph in (trivial, cached, fresh_w)
    )
    lines += [
        "",
        (
            f"Targets: cached throughput ≥ 0.5× the trivial endpoint's: "
            f"{cached_ratio:.2f}× ({'met' if cached_ratio >= 0.5 else 'not met'}); fresh p99 ≤ 3× "
            f"the in-process time ({ms(session_p50)} ms): {f1:.2f}× for a query alone "
            f"({'met' if f1 <= 3 else 'not met'}), {fw:.2f}× with {fresh_w.clients} concurrent "
            f"clients ({'met' if fw <= 3 else 'not met'}). In-process, the service's own path "
            f"(`Service.query`: {ms(service_p50)} ms) costs {service_p50 / session_p50:.2f}× "
            "`Session.sql`."
        ),
        "",
        (
            f"Under load, the {fresh_w.clients} clients keep {fresh_w.clients} queries in the "
            f"server at all times and it completes {fresh_w.rps:.1f} per second, "
            f"{fresh_w.rps * float(np.mean(inproc['Session.sql'])):.2f}× the rate of one "
            "sequential in-process loop (DuckDB already uses every CPU for one query); by "
            f"Little's law the mean latency is then {fresh_w.clients} / {fresh_w.rps:.1f} s = "
            f"{ms(fresh_w.clients / fresh_w.rps)} ms, "
            f"{fresh_w.clients / fresh_w.rps / session_p50:.2f}× the in-process time, before "
            "any tail: with more concurrent fresh queries than CPUs, a p99 within 3× is bounded "
            "by the CPUs, not by the service."
        ),
        "",
        (
            f"Throughput of each interleaved round ({spread}); the best round is reported. "
            f"The load generator's own CPU use (share of one CPU during the phase): {client}."
        ),
        "",
        (
            f"Machine: {_cpu_model()}, {os.cpu_count()} CPUs ({platform.machine()}), Python "
            f"{platform.python_version()}, {_versions()}; server, workers and load generator "
            f"share the machine. Load average (1/5/15 min) before the run: {load}, after: "
            f"{_load_average()}. Reproduce with `{command}`."
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e6)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--clients", type=int, default=16, help="connections (trivial, cached)")
    parser.add_argument("--n", type=int, default=3000, help="requests per trivial/cached round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fresh", type=int, default=120, help="fresh queries under load")
    parser.add_argument("--fresh-alone", type=int, default=60, help="fresh queries alone")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "server.md"))
    args = parser.parse_args()
    command = (
        f".venv/bin/python benchmarks/server.py --rows {args.rows:.0e} --workers {args.workers} "
        f"--clients {args.clients} --n {args.n} --rounds {args.rounds} --fresh {args.fresh} "
        f"--fresh-alone {args.fresh_alone}"
    ).replace("+0", "")
    load = _load_average()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        results = measure(args, Path(tmp))
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)
    text = report(results, args, command, load)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

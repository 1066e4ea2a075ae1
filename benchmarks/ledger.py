"""Benchmark: a ledger with a long history (10⁵ and 10⁶ charges) on SQLite and PostgreSQL.

Issue 22's goals, each measured on both backends against an empty ledger (one registered
dataset) in the same run — the floor every ratio is taken to:

* **open** (``Ledger(...)``: connect, check the schema, verify from the checkpoint the anchor
  vouches for), median of 5 — goal: under 50 ms whatever the size;
* **charge** latency (``Ledger.charge``: admission, chain entry, commit, anchor file), p50
  and p99 of 200 — goal: p99 ≤ 20 ms on SQLite, ≤ 30 ms on PostgreSQL on a local server;
* **history**: one analyst's charges (``Ledger.history(dataset, analyst=...)``, an indexed
  read of 1 charge in 10,000), median of 5, and the whole dataset's history once (every row
  decoded; linear in what it returns);
* **verify**: from the vouched checkpoint (what opening does) and in full (the whole chain
  replayed, every row compared), once each;
* **sustained charges/s across 4 worker processes** on one PostgreSQL ledger, 5 s of
  charging after a common start, 3 runs each (median; the load average before each run is
  reported) — goal: 1,000/s — as one host's workers (one anchor, one lock file) and as four
  hosts (an anchor each, enrolled with a copy of the current one); each worker charges from
  16 threads (its thread pool: concurrent charges share transactions, group commit), and
  once more from 1 thread (one request at a time) for comparison; the anchor file writes,
  the charges per transaction and the CPU a charge costs (workers and their PostgreSQL
  backends, user + system) are reported beside the load average.

The ledgers are built through the ledger's own write path (``insert_charge`` in a trusted
write: chain entries, checkpoints every 1,000 entries, the anchor), 1,000 charges per
transaction; admission is skipped while building (it reads only the rows after the last
checkpoint, so it does not change what is measured). Sizes are cumulative: the 10⁶ ledger is
the 10⁵ one grown. Charges are by four analysts ``a0``..``a3`` in turn, and every 10,000th
by ``rare`` (the indexed history).

PostgreSQL is a throwaway local server (``tests/conformance/_postgres.py``: initdb + pg_ctl on
a temporary directory) with durable settings (``fsync``, ``synchronous_commit`` and
``full_page_writes`` on), as a deployment would run it.

Run: ``.venv/bin/python benchmarks/ledger.py`` (``--sizes 100000,1000000``,
``--backends sqlite,postgresql``); writes ``benchmarks/results/ledger.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "conformance"))

from deniable.accounting.loss import Epsilon  # noqa: E402
from deniable.ledger import Ledger  # noqa: E402
from deniable.ledger.budget import insert_charge  # noqa: E402
from deniable.ledger.records import encode_details, utc_now  # noqa: E402

OUT = ROOT / "benchmarks" / "results" / "ledger.md"
SIZES = (100_000, 1_000_000)
BATCH = 1_000
OPENS = 5
CHARGES = 200
WORKERS = 4
SUSTAIN_SECONDS = 5.0
THREADS = 16
"""Threads per worker process in the sustained runs: the requests a worker serves at once."""
RUNS = 3
PG_SETTINGS = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
TINY = Epsilon(epsilon=Fraction(1, 10**9))
LOAD = os.getloadavg()
GOAL_OPEN_MS = 50.0
GOAL_P99_MS = {"sqlite": 20.0, "postgresql": 30.0}
GOAL_PER_SECOND = 1000.0


@dataclass
class Figures:
    """What was measured on one ledger (seconds)."""

    size: int
    build: float = 0.0
    open: float = 0.0
    p50: float = 0.0
    p99: float = 0.0
    anchor_p50: float = 0.0
    cpu_client: float | None = None  # CPU seconds per charge in the charging process
    cpu_server: float | None = None  # and in its PostgreSQL backend
    history_one: float = 0.0
    history_all: float = 0.0
    history_rows: int = 0
    verify: float = 0.0
    verify_full: float = 0.0
    per_second: Sustained | None = None
    per_second_hosts: Sustained | None = None
    per_second_serial: Sustained | None = None  # one thread per worker: no batching
    extra: dict[str, Any] = field(default_factory=dict)


def grow(location: str, anchor: str, start: int, stop: int) -> float:
    """Add charges ``start``..``stop - 1`` in batches of 1,000; return the seconds taken."""
    details = encode_details({"mechanism": "geometric"})
    began = time.perf_counter()
    with Ledger(location, anchor=anchor) as ledger:
        ledger.register("d", Epsilon(epsilon=10**6))
        done = start
        while done < stop:
            with ledger._write("trusted") as w:  # the ledger's own write path, batched
                for i in range(done, min(stop, done + BATCH)):
                    insert_charge(
                        w,
                        dataset="d",
                        analyst="rare" if i % 10_000 == 0 else f"a{i % 4}",
                        query_key=f"k{i}",
                        query_text="SELECT COUNT(*) FROM t",
                        loss=TINY,
                        now=utc_now(),
                        details_json=details,
                        idempotency_key=None,
                    )
            done = min(stop, done + BATCH)
    return time.perf_counter() - began


def median_time(action: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``action`` over ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _backend(ledger: Ledger) -> int | None:
    """The process id of a PostgreSQL ledger's backend on this machine (None for SQLite)."""
    if not ledger.path.startswith("postgresql://") or not Path("/proc").exists():
        return None
    row = ledger._conn.execute("SELECT pg_backend_pid()").fetchone()
    return int(row[0])


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` (from ``/proc``; 0 without one)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(location: str, anchor: str, size: int, *, whole_history: bool) -> Figures:
    """Every single-process figure of the ledger at ``location`` (it is grown by 200)."""
    fig = Figures(size=size)

    def open_close() -> None:
        with Ledger(location, anchor=anchor) as ledger:
            assert not ledger.tampered, ledger.verify().problems

    fig.open = median_time(open_close, OPENS)
    import deniable.ledger.chain as chain_module
    import deniable.ledger.facade as facade

    write_anchor = facade.write_anchor  # type: ignore[attr-defined]
    anchor_times: list[float] = []

    def timed_anchor(*args: Any) -> None:
        began = time.perf_counter()
        write_anchor(*args)
        anchor_times.append(time.perf_counter() - began)

    # SQLite's writes anchor in the facade; PostgreSQL's in chain.settle, after the flush.
    facade.write_anchor = timed_anchor  # type: ignore[attr-defined,assignment]
    chain_module.write_anchor = timed_anchor  # type: ignore[attr-defined,assignment]
    with Ledger(location, anchor=anchor) as ledger:
        times = []
        backend = _backend(ledger)
        cpu_began, server_began = _cpu_self(), _cpu_of(backend)
        for i in range(CHARGES):
            began = time.perf_counter()
            ledger.charge("d", TINY, analyst=f"a{i % 4}", query_key=f"bench{size}-{i}",
                          query_text="SELECT COUNT(*) FROM t")  # fmt: skip
            times.append(time.perf_counter() - began)
        if backend is not None:
            fig.cpu_client = (_cpu_self() - cpu_began) / CHARGES
            fig.cpu_server = (_cpu_of(backend) - server_began) / CHARGES
        facade.write_anchor = write_anchor  # type: ignore[attr-defined]
        chain_module.write_anchor = write_anchor  # type: ignore[attr-defined]
        fig.anchor_p50 = statistics.median(anchor_times)
        times.sort()
        fig.p50 = statistics.median(times)
        fig.p99 = times[min(CHARGES - 1, round(0.99 * CHARGES))]
        fig.history_one = median_time(lambda: ledger.history("d", analyst="rare"), OPENS)
        if whole_history:
            began = time.perf_counter()
            fig.history_rows = len(ledger.history("d"))
            fig.history_all = time.perf_counter() - began
        began = time.perf_counter()
        report = ledger.verify()
        fig.verify = time.perf_counter() - began
        assert report.ok, report.problems
        began = time.perf_counter()
        report = ledger.verify(full=True)
        fig.verify_full = time.perf_counter() - began
        assert report.ok, report.problems
    return fig


def _worker(
    location: str, anchor: str, start_at: float, seconds: float, name: str, threads: int
) -> tuple[int, int, float, float, int]:
    """Charge from ``threads`` threads from ``start_at`` for ``seconds``.

    One worker process of a service: its thread pool serves ``threads`` requests at once
    (a sync handler per thread, as ``deniable serve`` runs them), each thread charging one
    request after another; concurrent charges of the process share transactions (group
    commit, ``deniable.ledger.group``). ``threads=1`` is a worker serving one request at a
    time (no batching possible). Returns (charges committed, anchor file writes, CPU seconds
    of this process, CPU seconds of its PostgreSQL backend, batches).
    """
    import threading

    import deniable.ledger.chain as chain_module

    writes = [0]
    write_anchor = chain_module.write_anchor  # type: ignore[attr-defined]

    def counted(path: str, state: Any) -> None:
        writes[0] += 1
        write_anchor(path, state)

    chain_module.write_anchor = counted  # type: ignore[attr-defined,assignment]
    with Ledger(location, anchor=anchor) as ledger:
        backend = _backend(ledger)
        batches = [0]
        run = ledger._group._run

        def batch(members: Any) -> None:
            batches[0] += 1
            run(members)

        ledger._group._run = batch
        done = [0] * threads

        def charge(k: int) -> None:
            stop, i = start_at + seconds, 0
            while time.time() < stop:
                ledger.charge("d", TINY, analyst=f"{name}t{k % 4}", query_key=f"{name}-{k}-{i}",
                              query_text="SELECT COUNT(*) FROM t")  # fmt: skip
                done[k] += 1
                i += 1

        pool = [threading.Thread(target=charge, args=(k,)) for k in range(threads)]
        while time.time() < start_at:
            time.sleep(0.001)
        began, cpu_began, server_began = writes[0], _cpu_self(), _cpu_of(backend)
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        cpu, server = _cpu_self() - cpu_began, _cpu_of(backend) - server_began
    return sum(done), writes[0] - began, cpu, server, batches[0]


@dataclass
class Sustained:
    """Charges per second of several runs of :func:`sustained`, with the load of each."""

    threads: int = 1
    rates: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    anchor_writes: list[float] = field(default_factory=list)  # per charge
    cpu_workers: list[float] = field(default_factory=list)  # seconds per charge
    cpu_servers: list[float] = field(default_factory=list)  # seconds per charge
    batch_sizes: list[float] = field(default_factory=list)  # charges per transaction

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def cpu(self) -> float:
        """Median CPU seconds a charge costs, in the workers and their backends together."""
        return statistics.median(
            w + s for w, s in zip(self.cpu_workers, self.cpu_servers, strict=True)
        )

    def describe(self) -> str:
        runs = ", ".join(
            f"{r:,.0f}/s (load {lo:.1f}; CPU {(w + s) * 1e3:.2f} ms a charge: "
            f"{w * 1e3:.2f} worker + {s * 1e3:.2f} PostgreSQL)"
            for r, lo, w, s in zip(
                self.rates, self.loads, self.cpu_workers, self.cpu_servers, strict=True
            )
        )
        return (
            f"median {self.median:,.0f}/s of {len(self.rates)} runs: {runs}; "
            f"{statistics.median(self.batch_sizes):.1f} charges per transaction, "
            f"{statistics.median(self.anchor_writes):.2f} anchor file writes per charge"
        )

    def bound(self) -> float:
        """Charges/s the machine's cores could sustain at this CPU cost, nothing else running."""
        return (os.cpu_count() or 1) / self.cpu


def sustained(
    location: str, anchor: str, tag: str, *, hosts: bool = False, threads: int = THREADS
) -> Sustained:
    """Charges per second committed by 4 worker processes together on one ledger.

    ``hosts=False``: the workers of one host (one anchor file and its lock, as ``deniable
    serve --workers 4``); ``hosts=True``: four hosts of one worker each, each enrolled with
    a copy of the current anchor (only PostgreSQL's advisory lock is shared). Each worker
    charges from ``threads`` threads (:func:`_worker`). Run :data:`RUNS` times (the machine
    is shared: the load average before each run is kept, and the CPU a charge costs — user
    and system time of the workers and of their PostgreSQL backends — is the figure that
    does not depend on it).
    """
    out = Sustained(threads=threads)
    for run in range(RUNS):
        anchors = [anchor] * WORKERS
        if hosts:
            anchors = [f"{anchor}.host{k}" for k in range(WORKERS)]
            for copy in anchors:
                shutil.copyfile(anchor, copy)  # enrolled with a copy of a current anchor
        ctx = multiprocessing.get_context("spawn")
        out.loads.append(os.getloadavg()[0])
        start_at = time.time() + 3.0  # every worker connected and verified before the start
        with ctx.Pool(WORKERS) as pool:
            counts = pool.starmap(
                _worker,
                [
                    (location, anchors[k], start_at, SUSTAIN_SECONDS,
                     f"w{tag}{int(hosts)}{threads}{run}{k}", threads)
                    for k in range(WORKERS)
                ],
            )  # fmt: skip
        charges = max(1, sum(c[0] for c in counts))
        out.rates.append(charges / SUSTAIN_SECONDS)
        out.anchor_writes.append(sum(c[1] for c in counts) / charges)
        out.cpu_workers.append(sum(c[2] for c in counts) / charges)
        out.cpu_servers.append(sum(c[3] for c in counts) / charges)
        out.batch_sizes.append(charges / max(1, sum(c[4] for c in counts)))
    with Ledger(location, anchor=anchor) as ledger:  # every charge counted, chain intact
        assert not ledger.tampered, ledger.verify().problems
    return out


def run_backend(
    backend: str, sizes: list[int], directory: Path, url: str | None
) -> tuple[Figures, list[Figures]]:
    """The floor (an empty ledger) and each size's figures on one backend."""

    def place(tag: str) -> tuple[str, str]:
        anchor = str(directory / f"{backend}-{tag}.anchor")
        if backend == "sqlite":
            return str(directory / f"{tag}.db"), anchor
        import psycopg

        assert url is not None
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE ledger_{tag}")
        return url.rsplit("/", 1)[0] + f"/ledger_{tag}", anchor

    empty_at, empty_anchor = place("empty")
    grow(empty_at, empty_anchor, 0, 0)
    floor = measure(empty_at, empty_anchor, 0, whole_history=True)
    if backend == "postgresql":
        floor.per_second = sustained(empty_at, empty_anchor, "e")
        floor.per_second_hosts = sustained(empty_at, empty_anchor, "e", hosts=True)
    print(f"[{backend}] floor: open {floor.open * 1e3:.1f} ms, charge p50 "
          f"{floor.p50 * 1e3:.2f} / p99 {floor.p99 * 1e3:.2f} ms"
          + ("" if floor.per_second is None else f", {floor.per_second.median:.0f} charges/s"),
          flush=True)  # fmt: skip
    rows: list[Figures] = []
    at, anchor = place("long")
    have = 0
    for size in sizes:
        took = grow(at, anchor, have, size)
        have = size
        fig = measure(at, anchor, size, whole_history=size <= 100_000)
        fig.build = took
        have += CHARGES  # measure() charged these
        if backend == "postgresql" and size == sizes[-1]:
            fig.per_second = sustained(at, anchor, "l")
            fig.per_second_hosts = sustained(at, anchor, "l", hosts=True)
            fig.per_second_serial = sustained(at, anchor, "s", threads=1)
        rows.append(fig)
        print(f"[{backend}] {size:,}: built {took:.0f} s; open {fig.open * 1e3:.1f} ms, charge "
              f"p50 {fig.p50 * 1e3:.2f} / p99 {fig.p99 * 1e3:.2f} ms, history(rare) "
              f"{fig.history_one * 1e3:.2f} ms, verify {fig.verify * 1e3:.0f} ms / full "
              f"{fig.verify_full:.1f} s"
              + ("" if fig.per_second is None else f", {fig.per_second.median:.0f} charges/s"),
              flush=True)  # fmt: skip
    return floor, rows


def seconds(value: float) -> str:
    """A duration for people: µs, ms or s, three significant figures or so."""
    if value >= 1:
        return f"{value:,.1f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms" if value >= 1e-2 else f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.0f} µs"


def met(ok: bool) -> str:
    """A goal's verdict."""
    return "met" if ok else "**not met**"


def report(results: dict[str, tuple[Figures, list[Figures]]], command: str, total: float) -> str:
    """The markdown section."""
    lines = [
        "## Ledger: 10⁵ and 10⁶ charges on SQLite and PostgreSQL",
        "",
        "Each figure as a ratio to the same measurement on an empty ledger (one registered",
        "dataset) on the same backend in the same run, then the absolute value. Open: median of",
        f"{OPENS}; charge: p50/p99 of {CHARGES} `Ledger.charge` calls (admission, chain entry,",
        "durable commit, anchor file); history (one analyst): `Ledger.history(d,",
        "analyst=...)` returning 1 charge in 10,000, median of 5; verify: from the vouched",
        "checkpoint (what opening does) and in full (whole chain replayed, every row compared).",
        "PostgreSQL: a local server started by the benchmark with `fsync`,",
        "`synchronous_commit` and `full_page_writes` on.",
        "",
        (
            "| backend | charges | open | charge p50 | charge p99 | history (one analyst) "
            "| verify | verify --full |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def cell(value: float, base: float) -> str:
        ratio = value / base if base > 0 else float("nan")
        return f"{ratio:,.2f}× ({seconds(value)})"

    for backend, (floor, rows) in results.items():
        lines.append(
            f"| {backend} | 0 (floor) | {seconds(floor.open)} | {seconds(floor.p50)} "
            f"| {seconds(floor.p99)} | {seconds(floor.history_one)} "
            f"| {seconds(floor.verify)} | {seconds(floor.verify_full)} |"
        )
        for f in rows:
            lines.append(
                f"| {backend} | {f.size:,} | {cell(f.open, floor.open)} "
                f"| {cell(f.p50, floor.p50)} | {cell(f.p99, floor.p99)} "
                f"| {cell(f.history_one, floor.history_one)} | {cell(f.verify, floor.verify)} "
                f"| {cell(f.verify_full, floor.verify_full)} |"
            )
    lines += ["", "Goals (issue 22), at the largest size measured:", ""]
    for backend, (floor, rows) in results.items():
        if not rows:
            continue
        last = rows[-1]
        p99_goal = GOAL_P99_MS[backend]
        lines.append(
            f"- {backend}, {last.size:,} charges: open {last.open * 1e3:.1f} ms (goal < 50 ms: "
            f"{met(last.open * 1e3 < GOAL_OPEN_MS)}); charge p99 {last.p99 * 1e3:.1f} ms "
            f"(goal ≤ {p99_goal:.0f} ms: {met(last.p99 * 1e3 <= p99_goal)})"
        )
        if last.per_second is not None and floor.per_second is not None:
            one = last.per_second
            lines.append(
                f"- postgresql, {WORKERS} worker processes of one host, {one.threads} threads "
                f"each, charging one ledger for {SUSTAIN_SECONDS:.0f} s: {one.median:,.0f} "
                f"charges/s at {last.size:,} charges, {floor.per_second.median:,.0f}/s on the "
                f"empty ledger (ratio {one.median / floor.per_second.median:.2f}); goal "
                f"1,000/s: {met(one.median >= GOAL_PER_SECOND)}. CPU a charge costs "
                f"(workers + PostgreSQL, the figure the load does not change): "
                f"{seconds(one.cpu)}, so {os.cpu_count()} cores sustain at most "
                f"{one.bound():,.0f} charges/s with nothing else running. At {last.size:,}: "
                f"{one.describe()}; empty: {floor.per_second.describe()}"
            )
        if last.per_second_hosts is not None and floor.per_second_hosts is not None:
            hosts, empty = last.per_second_hosts, floor.per_second_hosts
            lines.append(
                f"- postgresql, {WORKERS} hosts of one worker each, {hosts.threads} threads "
                f"each (own anchor files; only the advisory lock shared): {hosts.median:,.0f} "
                f"charges/s at {last.size:,} charges, {empty.median:,.0f}/s on the empty "
                f"ledger; goal 1,000/s: {met(hosts.median >= GOAL_PER_SECOND)}; CPU "
                f"{seconds(hosts.cpu)} a charge (at most {hosts.bound():,.0f}/s on "
                f"{os.cpu_count()} cores). At {last.size:,}: {hosts.describe()}; empty: "
                f"{empty.describe()}"
            )
        if last.per_second_serial is not None:
            serial = last.per_second_serial
            lines.append(
                f"- postgresql, {WORKERS} worker processes of one host serving one request at "
                f"a time (1 thread each: nothing to batch), for comparison: "
                f"{serial.median:,.0f} charges/s at {last.size:,} charges; CPU "
                f"{seconds(serial.cpu)} a charge (at most {serial.bound():,.0f}/s on "
                f"{os.cpu_count()} cores). {serial.describe()}"
            )
    for backend, (floor, rows) in results.items():
        if rows:
            last = rows[-1]
            lines.append(
                f"- where a {backend} charge's time goes ({last.size:,} charges): p50 "
                f"{seconds(last.p50)}, of which {seconds(last.anchor_p50)} writing the anchor "
                f"file (floor {seconds(floor.anchor_p50)}), the rest the database transaction "
                "(admission, two inserts, a durable commit)"
            )
            if last.cpu_client is not None and last.cpu_server is not None:
                cpu = last.cpu_client + last.cpu_server
                cores = os.cpu_count() or 1
                lines.append(
                    f"- CPU a {backend} charge costs alone ({last.size:,} charges, one process "
                    "charging one at a time, a batch of one): "
                    f"{seconds(last.cpu_client)} in the charging process and "
                    f"{seconds(last.cpu_server)} in its PostgreSQL backend: {cores} cores can "
                    f"sustain at most {cores / cpu:,.0f} charges/s of this kind"
                )
    lines += [
        "",
        "How a PostgreSQL charge is committed, and why every guarantee holds (details in",
        "`src/deniable/ledger/postgres.py` and `chain.settle`):",
        "",
        "- *Exact admission.* Writers on every host are serialised by one advisory lock taken",
        "  before anything is read; each reads every commit made before it. Unchanged.",
        "- *The flush is outside the lock.* The charge's transaction commits with",
        "  `synchronous_commit = off`, so the lock is released at its commit without waiting",
        "  for the disk; in the same round trip a transaction that writes one WAL record",
        "  commits with the server's `synchronous_commit` (on), which flushes the log up to",
        "  its own commit record — after the charge's — and the flushed position is checked to",
        "  be past the charge's commit. Only then does `Ledger.charge` return: a charge is",
        "  durable before its answer may leave. PostgreSQL flushes concurrent writers'",
        "  commits together (group commit). A crash loses only a suffix of the commit order",
        "  that no flush covered (the log is written in order), none of which returned; the",
        "  commits that survive are a prefix, each admitted against exactly the charges",
        "  before it, so no cap is ever exceeded.",
        "  `tests/system/test_ledger_postgres_throughput.py` crashes the server (`pg_ctl",
        "  restart -m immediate`) under four charging processes: every reported charge",
        "  survives; without the flush (its negative control) reported",
        "  charges are lost and anchors are left ahead of the database.",
        "- *Group commit inside a process* (`src/deniable/ledger/group.py`). A worker",
        "  serves several requests at once from its thread pool; their charges queue, and",
        "  the first becomes the leader of a batch: every charge queued by then (at most 64)",
        "  is admitted in ONE write transaction — one advisory lock, one flush, one anchor",
        "  write — while the next ones queue behind it. Members are admitted in order, each",
        "  against every commit before the batch *and* the members before it (cap,",
        "  allowances, reservations, idempotency keys); a refused member writes nothing and",
        "  the others go on; if the transaction fails every member fails and none may be",
        "  released. The chain still gets one entry per charge, and no member returns before",
        "  the batch is durable and an anchor covers it.",
        "- *Three round trips a batch.* (1) the opening statements, the advisory lock and the",
        "  chain's head, the anchor's entry and the checkpoints; (2) everything admission",
        "  reads, for every member at once, before the first insert: each dataset's cap and",
        "  accountant, its charges since the vouched checkpoint grouped by analyst and loss,",
        "  each analyst's slices, the idempotency keys, and a block of charge ids from the",
        "  identity sequence (`budget.ChargeBatch`); admission then counts those rows plus",
        "  the batch's own inserts — exactly what a fresh read would see, since the lock",
        "  keeps every other writer out; (3) every insert and chain entry, the `COMMIT` (which",
        "  releases the lock) and the flush. Before: 7 round trips a charge, each charge its",
        "  own transaction, lock, flush and anchor write.",
        "- *The anchor.* The host's anchor lock is held only to write the anchor, after the",
        "  flush: the writer of the host that gets it writes the newest durable state a",
        "  writer of the host has published (so one file write can cover several charges:",
        "  the anchor-writes-per-charge figures above), the anchor never moves backwards and",
        "  never names an entry that is not durable, and no charge returns before an anchor",
        "  covers it — rollback detection is what the README describes, and the anchor file",
        "  is still written and fsynced (`integrity.write_anchor`) before a charge returns.",
        f"- *What the sustained figure models.* Each worker process charges from {THREADS}",
        "  threads at once (a service worker's thread pool under load), each thread one",
        "  request after another; the serial line (1 thread) is the old model, where a worker",
        "  serves one request at a time and nothing can be batched. The CPU a charge costs",
        "  bounds what the machine's cores can sustain even when nothing waits; with other",
        "  jobs on the machine (the load averages above) the rates are below what the code",
        "  does alone.",
    ]
    lines += ["", "Building the ledgers (the real write path, 1,000 charges per transaction):"]
    for backend, (_, rows) in results.items():
        for f in rows:
            lines.append(f"{backend} to {f.size:,} charges in {f.build:.0f} s;")
    for backend, (_, rows) in results.items():
        for f in rows:
            if f.history_rows:
                lines.append(
                    f"the whole history of {f.history_rows:,} charges ({backend}) read in "
                    f"{f.history_all:.2f} s ({f.history_all / f.history_rows * 1e6:.1f} µs a "
                    "charge: linear in what it returns)."
                )
    lines += [
        "",
        (
            f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}; load average "
            f"{LOAD[0]:.1f} at the start and {os.getloadavg()[0]:.1f} at the end (other work was "
            f"running: absolute times are noisy, ratios less so); the whole run took "
            f"{total / 60:.1f} min."
        ),
        "",
        f"Reproduce: `{command}`.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    """Measure each backend, print progress, write ``benchmarks/results/ledger.md``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    backends = [b.strip() for b in args.backends.split(",")]
    global LOAD
    LOAD = os.getloadavg()
    began = time.perf_counter()
    results: dict[str, tuple[Figures, list[Figures]]] = {}
    with tempfile.TemporaryDirectory() as d:
        server = None
        try:
            for backend in backends:
                url = None
                if backend == "postgresql":
                    from _postgres import PostgresServer  # type: ignore[import-not-found]

                    server = PostgresServer(settings=PG_SETTINGS)
                    url = server.dsn()
                results[backend] = run_backend(backend, sizes, Path(d), url)
        finally:
            if server is not None:
                server.stop()
    command = ".venv/bin/python benchmarks/ledger.py"
    if args.sizes != ",".join(str(s) for s in SIZES):
        command += f" --sizes {args.sizes}"
    if args.backends != "sqlite,postgresql":
        command += f" --backends {args.backends}"
    text = report(results, command, time.perf_counter() - began)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

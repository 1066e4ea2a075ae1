"""The PostgreSQL ledger's fast commit path, against real processes and a crashed server.

A write transaction commits with ``synchronous_commit = off`` (its advisory lock is released
at once) and is then made durable by a flushing transaction before the charge returns
(:data:`deniable.ledger.postgres.COMMIT_AND_FLUSH`); the host's anchor is written after that,
by whichever writer of the host gets its lock first, for every write durable by then
(:func:`deniable.ledger.chain.settle`). These tests check what that must keep:

Every child process charges from :data:`THREADS` threads, so its concurrent charges are
admitted in shared transactions (group commit, :mod:`deniable.ledger.group`): batches,
refusals inside a batch, and crashes of the server under a batch are all exercised.

1. **Exact admission across processes and hosts**: four processes (two sharing one host's
   anchor, two with an anchor each) race for a cap of 64 charges: exactly 64 are admitted,
   the total is exactly the cap, the chain verifies in full and every anchor opens clean.
2. **A reported charge survives a crash of PostgreSQL**: processes charge in a loop and
   report each charge once ``Ledger.charge`` returned; the server is stopped with
   ``pg_ctl stop -m immediate`` (its processes die without writing what is still in its
   WAL buffers) and started again. Every reported charge is in the ledger, and no anchor is
   ahead of the database (which would read as a rollback). The server runs with
   ``synchronous_commit = on`` and ``wal_writer_delay = 10s``, so a commit that nobody
   flushes stays in memory; ``fsync`` is off, which an immediate stop does not need (the OS
   keeps what PostgreSQL wrote).

   Negative control: the same run with the flush removed (the commit is asynchronous and
   nothing waits for it) loses a reported charge and leaves an anchor ahead of the
   database — so the test would fail without the flush.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer  # type: ignore[import-not-found]

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon  # noqa: E402
from deniable.ledger import Ledger  # noqa: E402

TIMEOUT = 60  # seconds; a hung child fails the test instead of hanging the suite
SETTINGS = {"synchronous_commit": "on", "wal_writer_delay": "10000ms"}

# A child: charge ``loss`` on ``d`` until refused or until ``stop`` exists; after each
# charge returns, append its id to ``out`` (unbuffered: the report survives the child).
CHILD = textwrap.dedent(
    """
    import os, sys, threading, time
    from fractions import Fraction
    from deniable.accounting.loss import Epsilon
    from deniable.errors import BudgetExceeded, LedgerError
    from deniable.ledger import Ledger
    import deniable.ledger.postgres as pg

    url, anchor, out, stop, name, loss, broken, threads = sys.argv[1:9]
    if broken == "1":  # the negative control: no flush after the asynchronous commit
        pg.COMMIT_AND_FLUSH = (
            "COMMIT; SELECT pg_current_wal_insert_lsn()::text; SELECT 1; "
            "SELECT pg_current_wal_insert_lsn()::text, 'off'"
        )
        pg.FLUSH = "SELECT 1"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    ledger = Ledger(url, anchor=anchor, timeout=20)

    def run(t):
        i = 0
        while not os.path.exists(stop):
            i += 1
            try:
                c = ledger.charge("d", Epsilon(epsilon=Fraction(loss)), analyst=name,
                                  query_key=f"{name}-{t}-{i}",
                                  query_text="SELECT COUNT(*) FROM t")
            except BudgetExceeded:
                break
            except LedgerError:  # the server is down: nothing was reported; try again
                time.sleep(0.05)
                continue
            os.write(fd, f"{c.id}\\n".encode())

    # Several threads: concurrent charges of one process share transactions (group.py).
    workers = [threading.Thread(target=run, args=(t,)) for t in range(int(threads))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    ledger.close()
    """
)
THREADS = 4
"""Charging threads per child process (their charges are batched by group commit)."""


def children(
    url: str, anchors: list[Path], folder: Path, loss: str, *, broken: bool = False
) -> tuple[list[subprocess.Popen[bytes]], list[Path], Path]:
    """Start one child per anchor (a repeated anchor: processes of one host)."""
    stop = folder / "stop"
    outs = [folder / f"out{k}" for k in range(len(anchors))]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CHILD,
                url,
                str(anchor),
                str(out),
                str(stop),
                f"p{k}",
                loss,
                "1" if broken else "0",
                str(THREADS),
            ],
            stderr=subprocess.PIPE,
        )
        for k, (anchor, out) in enumerate(zip(anchors, outs, strict=True))
    ]
    return procs, outs, stop


def finish(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        _, err = p.communicate(timeout=TIMEOUT)
        assert p.returncode == 0, err.decode()[-2000:]


def reported(outs: list[Path]) -> set[int]:
    return {int(x) for out in outs if out.exists() for x in out.read_text().split()}


def new_ledger(
    pg: PostgresServer, name: str, folder: Path, cap: Fraction
) -> tuple[str, list[Path]]:
    """A ledger database with dataset ``d``; anchors: host A (two processes), B, C."""
    with psycopg.connect(pg.dsn(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = pg.dsn(database=name)
    folder.mkdir()
    host_a = folder / "a.anchor"
    with Ledger(url, anchor=host_a) as ledger:
        ledger.register("d", Epsilon(epsilon=cap))
    for other in ("b", "c"):  # hosts enrolled with a copy of a current anchor
        shutil.copyfile(host_a, folder / f"{other}.anchor")
    return url, [host_a, host_a, folder / "b.anchor", folder / "c.anchor"]


def clean(url: str, anchors: list[Path]) -> list[int]:
    """Each anchor's ledger verifies; return their entry numbers."""
    seqs = []
    for anchor in dict.fromkeys(anchors):
        with Ledger(url, anchor=anchor) as ledger:
            report = ledger.verify(full=True)
            assert report.ok, report.problems
            assert report.anchor_seq is not None
            seqs.append(report.anchor_seq)
    return seqs


@pytest.fixture(scope="module")
def pg() -> object:
    server = PostgresServer(settings=SETTINGS)
    try:
        yield server
    finally:
        server.stop()


def test_processes_and_hosts_spend_exactly_the_cap(pg: PostgresServer, tmp_path: Path) -> None:
    url, anchors = new_ledger(pg, "exact", tmp_path / "exact", Fraction(1))
    procs, outs, _ = children(url, anchors, tmp_path / "exact", "1/64")
    finish(procs)
    ids = reported(outs)
    assert len(ids) == 64
    with Ledger(url, anchor=anchors[0]) as ledger:
        assert ledger.spent("d") == Epsilon(epsilon=1)
        assert {c.id for c in ledger.history("d")} == ids
    assert all(seq >= 2 for seq in clean(url, anchors))


def crash_run(
    pg: PostgresServer, folder: Path, *, broken: bool
) -> tuple[set[int], set[int], list[str]]:
    """Charge from four processes, crash PostgreSQL, restart it; (reported, stored, problems)."""
    url, anchors = new_ledger(pg, folder.name, folder, Fraction(10**6))
    procs, outs, stop = children(url, anchors, folder, "1/1000", broken=broken)
    try:
        began = time.monotonic()
        while len(reported(outs)) < 200 and time.monotonic() - began < TIMEOUT / 2:
            time.sleep(0.05)
        if broken:  # stop charging first: the last commits are in WAL buffers only
            stop.touch()
            finish(procs)
        # An immediate stop, then a start with the same options (postmaster.opts).
        log = str(pg.root / "server.log")
        pg_ctl = [str(pg.bin / "pg_ctl"), "-D", str(pg.data), "-l", log]
        pg._run([*pg_ctl, "-m", "immediate", "-w", "-t", "60", "restart"])
        if not broken:  # charge a little more after the restart, then stop
            time.sleep(0.5)
            stop.touch()
            finish(procs)
    finally:
        stop.touch()
        for p in procs:
            if p.poll() is None:
                p.kill()
    with psycopg.connect(url, autocommit=True) as conn:
        stored = {int(r[0]) for r in conn.execute("SELECT id FROM charges")}
    problems = []
    for anchor in dict.fromkeys(anchors):
        with Ledger(url, anchor=anchor) as ledger:
            problems += list(ledger.verify(full=True).problems)
    return reported(outs), stored, problems


def test_reported_charges_survive_an_immediate_shutdown(pg: PostgresServer, tmp_path: Path) -> None:
    said, stored, problems = crash_run(pg, tmp_path / "flushed", broken=False)
    assert len(said) >= 200
    assert said <= stored, f"{len(said - stored)} reported charges were lost"
    assert problems == []
    # Negative control: without the flush the same crash loses reported charges, and an
    # anchor written for them is ahead of the database.
    said, stored, problems = crash_run(pg, tmp_path / "unflushed", broken=True)
    assert said - stored, "the broken variant lost nothing: the test cannot see a lost flush"
    assert any("older copy" in p or "entries" in p for p in problems), problems

"""Two service hosts sharing one PostgreSQL ledger: exact cap, a host killed, a server restarted.

PostgreSQL is started by the test (initdb + pg_ctl on a temporary directory,
``tests/conformance/_postgres.py``). An administrator creates the ledger and gives the
service's role only what it needs (:func:`deniable.ledger.postgres.grant_service_role`). Two
``deniable serve`` processes on different ports, each with its own configuration directory
and anchor file (standing for two hosts; each host is enrolled with a copy of the curator's
anchor, since a ledger with a history and no anchor reads as a deleted anchor), share the
ledger through that role:

1. 200 concurrent queries split across the two hosts spend exactly the cap;
2. under load on both hosts, one host is SIGKILLed, then PostgreSQL itself is restarted:
   every answer a client received has its committed charge (fail closed: a request that
   could not charge got a 503, never an answer), the surviving host answers again after the
   restart, and the ledger verifies intact in full afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import httpx
import pytest
from _server_helpers import Server, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon  # noqa: E402
from deniable.ledger import Ledger  # noqa: E402
from deniable.ledger.postgres import grant_service_role  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def host_config(folder: Path, ledger_url: str) -> Path:
    """One host's configuration: the shared PostgreSQL ledger, its own anchor file.

    Answers leave when ready (``response_time = "off"``, as ``write_config`` does): this test
    is about the ledger, and under the default 1 s deadline a loaded machine turned answers
    into ``503 deadline_exceeded`` (charged like answers) and held every request 1 s.
    """
    folder.mkdir()
    rows = "x\n" + "\n".join(str(i % 7) for i in range(300)) + "\n"
    (folder / "data.csv").write_text(rows)
    path = folder / "service.toml"
    path.write_text(
        f"""
ledger = "{ledger_url}"
anchor = "anchor"

[server]
rate_limit = {{ per_second = 100000, burst = 100000 }}

[datasets.d]
source = "data.csv"
table = "t"
privacy_unit = "row"
budget = {{ epsilon = 1 }}
response_time = "off"

[datasets.e]
source = "data.csv"
table = "t"
privacy_unit = "row"
budget = {{ epsilon = 1000 }}
response_time = "off"
"""
    )
    return path


@contextlib.contextmanager
def both_running(configs: list[Path], logs: list[Path]) -> Iterator[tuple[Server, Server]]:
    """The two hosts, started at the same time (each start waits on its own readiness)."""
    with contextlib.ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(start_server, config, workers=1, log=log)
            for config, log in zip(configs, logs, strict=True)
        ]
        for future in futures:  # stop whichever started, even when the other failed
            with contextlib.suppress(Exception):
                stack.callback(future.result().stop)
        servers = [future.result() for future in futures]  # raises a failed start
        yield servers[0], servers[1]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def restart(server: PostgresServer) -> None:
    """``pg_ctl restart``: every open connection is cut, the server is back within seconds."""
    # -l: the new postmaster writes to the log, not to pg_ctl's pipes (else run() never ends).
    log = str(server.root / "server.log")
    pg_ctl = [str(server.bin / "pg_ctl"), "-D", str(server.data), "-l", log]
    server._run([*pg_ctl, "-m", "fast", "-w", "-t", "60", "restart"])


def test_two_hosts_share_one_postgres_ledger(tmp_path: Path) -> None:
    pg = PostgresServer()
    try:
        with psycopg.connect(pg.dsn(), autocommit=True) as admin:
            admin.execute("CREATE DATABASE ledger")
            admin.execute("CREATE ROLE svc LOGIN")
        owner_url, service_url = pg.dsn(database="ledger"), pg.dsn("svc", "ledger")
        curator_anchor = tmp_path / "curator.anchor"
        with Ledger(owner_url, anchor=curator_anchor) as led:
            tok = led.add_analyst("ann", role="analyst")
        grant_service_role(owner_url, "svc")
        configs = [host_config(tmp_path / name, service_url) for name in ("host_a", "host_b")]
        for config in configs:  # enrol each host with a copy of the curator's anchor
            shutil.copyfile(curator_anchor, config.parent / "anchor")
        logs = [tmp_path / f"{name}.log" for name in ("host_a", "host_b")]
        with both_running(configs, logs) as (a, b):
            exact_cap(a.url, b.url, tok)
            received, failed = kill_and_restart(a, b, pg, tok)
        with Ledger(owner_url, anchor=curator_anchor) as led:
            report = led.verify(full=True)
            assert report.ok, report.problems
            charges = led.history("e")
            numbers = {c.number for c in led.history("e", analyst="ann")}
            spent = led.spent("e")
            assert led.spent("d") == Epsilon(epsilon=1)
    finally:
        pg.stop()
    ids = {c.id for c in charges}
    # No answer without a committed charge; nothing lost. (An analyst is shown their own
    # release numbers, 1, 2, 3…, not the ledger's global ids; a number is a rank in commit
    # order, so two answers naming one number would mean a lost charge's number was reused.)
    shown = [r["charge_id"] for r in received]
    assert len(set(shown)) == len(shown), "two answers name the same release"
    assert set(shown) <= numbers
    assert spent == Epsilon(epsilon=Fraction(1, 100) * len(ids))
    assert failed, "no request failed while PostgreSQL restarted"
    assert all(code == 503 for code in failed), failed[:5]


def exact_cap(url_a: str, url_b: str, tok: str) -> None:
    """200 concurrent queries of ε = 0.1 split across both hosts: exactly 10 answered."""

    async def one(client: httpx.AsyncClient, i: int) -> httpx.Response:
        sql = f"SELECT COUNT(*) AS n FROM t WHERE x > -{i + 1}"  # 200 different questions
        return await client.post(
            "/v1/datasets/d/query", json={"sql": sql, "epsilon": 0.1}, headers=bearer(tok)
        )

    async def flood() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with (
            httpx.AsyncClient(base_url=url_a, timeout=120, limits=limits) as ca,
            httpx.AsyncClient(base_url=url_b, timeout=120, limits=limits) as cb,
        ):
            return await asyncio.gather(*(one(ca if i % 2 else cb, i) for i in range(200)))

    responses = asyncio.run(flood())
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 409]
    assert len(ok) == 10, [r.text for r in responses if r.status_code not in (200, 409)][:3]
    assert len(refused) == 190
    assert {r.json()["error"]["code"] for r in refused} == {"budget_exceeded"}


def kill_and_restart(
    a: object, b: object, pg: PostgresServer, tok: str
) -> tuple[list[dict[str, object]], list[int]]:
    """Load both hosts; SIGKILL host A; restart PostgreSQL; return answers and failures."""
    received: list[dict[str, object]] = []
    failed: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def loop(k: int, url: str) -> None:
        i = 0
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                i += 1
                sql = f"SELECT COUNT(*) AS n FROM t WHERE x > -{k * 100_000 + i}"
                try:
                    r = client.post(
                        "/v1/datasets/e/query",
                        json={"sql": sql, "epsilon": 0.01},
                        headers=bearer(tok),
                    )
                except httpx.HTTPError:
                    if url == a.url:  # type: ignore[attr-defined]
                        return  # host A was killed under this request
                    time.sleep(0.05)
                    continue
                with lock:
                    if r.status_code == 200:
                        received.append(r.json())
                    else:
                        failed.append(r.status_code)

    def wait_for(n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and len(received) < n:
            time.sleep(0.02)
        assert len(received) >= n, (len(received), failed[:5])

    threads = [
        threading.Thread(target=loop, args=(k, (a if k % 2 else b).url))  # type: ignore[attr-defined]
        for k in range(6)
    ]
    for t in threads:
        t.start()
    try:
        wait_for(30)
        a.kill()  # type: ignore[attr-defined]  # SIGKILL host A, queries in flight
        wait_for(len(received) + 15)  # host B carries on alone
        restart(pg)  # every connection to PostgreSQL is cut
        wait_for(len(received) + 15)  # host B reconnects and answers again
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    return received, failed

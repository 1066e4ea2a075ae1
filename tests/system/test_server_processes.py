"""Real uvicorn servers on loopback: concurrency, crashes and random state across workers."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import threading
import time
from fractions import Fraction
from pathlib import Path

import httpx
import numpy as np
import pytest
from _server_helpers import (
    Server,
    connection_owner,
    open_connection,
    running,
    worker_pids,
    write_config,
)

from deniable.accounting.loss import Epsilon
from deniable.ledger import Ledger

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")


def tokens(ledger: Path, *names: tuple[str, str]) -> dict[str, str]:
    """Create analysts in the ledger before the server starts; their tokens by name."""
    with Ledger(ledger) as led:
        return {n: led.add_analyst(n, role=r) for n, r in names}  # type: ignore[arg-type]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_200_concurrent_queries_4_workers_budget_for_10(tmp_path: Path) -> None:
    rows = "x\n" + "\n".join(str(i % 7) for i in range(200)) + "\n"
    config = write_config(tmp_path, cap="{ epsilon = 1 }", rows=rows)
    tok = tokens(tmp_path / "ledger.db", ("ann", "analyst"))["ann"]
    with running(config, workers=4, log=tmp_path / "server.log") as server:

        async def one(client: httpx.AsyncClient, i: int) -> httpx.Response:
            # Distinct literals: 200 different questions, none a replay of another.
            sql = f"SELECT COUNT(*) AS n FROM t WHERE x > -{i + 1}"
            return await client.post(
                "/v1/datasets/d/query", json={"sql": sql, "epsilon": 0.1}, headers=bearer(tok)
            )

        async def flood() -> list[httpx.Response]:
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as client:
                return await asyncio.gather(*(one(client, i) for i in range(200)))

        responses = asyncio.run(flood())
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 409]
    assert len(ok) == 10, [r.text for r in responses if r.status_code not in (200, 409)][:3]
    assert len(refused) == 190
    assert {r.json()["error"]["code"] for r in refused} == {"budget_exceeded"}
    with Ledger(tmp_path / "ledger.db") as led:
        assert led.spent("d") == Epsilon(epsilon=1)
        history = led.history("d")
    assert len(history) == 10
    assert sorted(c.id for c in history) == sorted(r.json()["charge_id"] for r in ok)


def test_sigkill_with_queries_in_flight_loses_no_charge(tmp_path: Path) -> None:
    rows = "x\n" + "\n".join(str(i % 5) for i in range(500)) + "\n"
    config = write_config(tmp_path, cap="{ epsilon = 1000 }", rows=rows)
    tok = tokens(tmp_path / "ledger.db", ("ann", "analyst"), ("cur", "curator"))
    received: list[dict[str, object]] = []
    lock = threading.Lock()
    stop = threading.Event()
    interrupted: list[int] = []

    def client_loop(k: int, url: str) -> None:
        i = 0
        with httpx.Client(base_url=url, timeout=30) as client:
            while not stop.is_set():
                i += 1
                sql = f"SELECT COUNT(*) AS n FROM t WHERE x > -{k * 100_000 + i}"
                try:
                    r = client.post(
                        "/v1/datasets/d/query",
                        json={"sql": sql, "epsilon": 0.01},
                        headers=bearer(tok["ann"]),
                    )
                except httpx.HTTPError:
                    with lock:
                        interrupted.append(k)
                    return  # the server died under us, this request in flight
                if r.status_code == 200:
                    with lock:
                        received.append(r.json())

    server_log = tmp_path / "server.log"
    with running(config, workers=2, log=server_log) as server:
        threads = [threading.Thread(target=client_loop, args=(k, server.url)) for k in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120  # waits for 40 answers; only a hang hits it
        while time.monotonic() < deadline and len(received) < 40:
            time.sleep(0.02)
        server.kill()  # SIGKILL parent and workers, queries in flight
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert len(received) >= 40
    assert interrupted, "no request was in flight when the server was killed"
    lowest = min(Fraction(str(r["remaining"]["exact"]["epsilon"])) for r in received)  # type: ignore[index]
    with running(config, workers=2, log=server_log) as server:
        r = httpx.get(f"{server.url}/v1/datasets/d/ledger", headers=bearer(tok["cur"]))
        assert r.status_code == 200, r.text
        ids = {c["id"] for c in r.json()}
        budget = httpx.get(f"{server.url}/v1/datasets/d/budget", headers=bearer(tok["cur"]))
        remaining = Fraction(budget.json()["remaining"]["exact"]["epsilon"])
        # The restarted server still answers (and charges) normally.
        again = httpx.post(
            f"{server.url}/v1/datasets/d/query",
            json={"sql": "SELECT COUNT(*) AS n FROM t", "epsilon": 0.01},
            headers=bearer(tok["ann"]),
        )
        assert again.status_code == 200, again.text
    # Every answer any client received was charged, durably.
    assert {r["charge_id"] for r in received} <= ids
    # The remaining budget never went up: the kill lost no charge.
    assert remaining <= lowest
    assert remaining == 1000 - Fraction(1, 100) * len(ids)


# -- random state across worker processes ---------------------------------------------------

KEYS = 16
SCALE_EPSILON = 0.05  # count noise: discrete Laplace with scale 1/ε = 20


def noise_rows(folder: Path) -> tuple[str, str, np.ndarray]:
    """A table whose true per-key counts are known: key k has k + 300 rows.

    Counts far above the noise scale: a released count is never clamped at 0 in practice
    (P[noise < -300] = e^-15 / 2 per entry), so released minus true is the raw noise.
    """
    lines = ["k"]
    for k in range(KEYS):
        lines += [str(k)] * (k + 300)
    keys = "public_keys = { k = [" + ", ".join(str(k) for k in range(KEYS)) + "] }"
    return "\n".join(lines) + "\n", keys, np.arange(KEYS) + 300


def shared_pairs(streams: dict[int, list[np.ndarray]]) -> int:
    """Pairs of noise vectors from different workers agreeing in at least half their entries.

    Independent workers: one entry of two independent discrete Laplace draws of scale 20
    agrees with probability Σ p_k² = ((1-α)/(1+α))²·(1+α²)/(1-α²) < 0.0126 (α = e^-1/20),
    so 8 of 16 agree with probability < C(16,8)·0.0126^8 < 8.5e-12 per pair; over the 384
    cross-worker pairs compared (4 workers, 8 answers each), the false-failure probability
    is < 4e-9. Workers sharing one random stream (a CSPRNG buffer copied by fork) draw the
    same noise for their i-th query, so all 16 entries agree.
    """
    out = 0
    workers = sorted(streams)
    for a_i, a in enumerate(workers):
        for b in workers[a_i + 1 :]:
            for u in streams[a]:
                for v in streams[b]:
                    if int(np.sum(u == v)) >= KEYS // 2:
                        out += 1
    return out


def test_workers_draw_independent_noise(tmp_path: Path) -> None:
    rows, keys, truth = noise_rows(tmp_path)
    config = write_config(tmp_path, cap="{ epsilon = 100 }", rows=rows, public_keys=keys)
    tok = tokens(tmp_path / "ledger.db", ("ann", "analyst"))["ann"]
    per_worker = 8
    with running(config, workers=4, log=tmp_path / "server.log") as server:
        # One keep-alive connection per worker: which process serves a TCP connection is
        # read from /proc (no debug route in the server).
        conns: dict[int, object] = {}
        spare = []
        for _ in range(8):  # rounds of 32 simultaneous connections, until all 4 are reached
            batch = [open_connection(server) for _ in range(32)]
            for conn in batch:
                conn.request("GET", "/v1/health")
            for conn in batch:
                conn.getresponse().read()
                owner = connection_owner(server, conn.sock.getsockname()[1])
                if owner is not None and owner not in conns:
                    conns[owner] = conn
                else:
                    spare.append(conn)
            if len(conns) == 4:
                break
        for c in spare:
            c.close()
        assert len(conns) == 4, f"reached {len(conns)} of 4 workers {worker_pids(server)}"
        streams: dict[int, list[np.ndarray]] = {pid: [] for pid in conns}
        for i in range(per_worker):
            for w, (pid, conn) in enumerate(conns.items()):
                # The same question each time (same ε, same true counts) under a new cache
                # key (a literal that filters nothing): a fresh release, same noise law.
                literal = i * len(conns) + w + 1
                sql = f"SELECT k, COUNT(*) AS n FROM t WHERE k > -{literal} GROUP BY k"
                body = json.dumps({"sql": sql, "epsilon": SCALE_EPSILON})
                headers = {**bearer(tok), "Content-Type": "application/json"}
                try:
                    conn.request("POST", "/v1/datasets/d/query", body=body, headers=headers)  # type: ignore[attr-defined]
                    r = conn.getresponse()  # type: ignore[attr-defined]
                except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                    # uvicorn closed the idle keep-alive connection (5 s; under a loaded
                    # machine the rounds above can take longer) before reading the request:
                    # nothing was charged. Reach the same worker again and resend.
                    conn.close()  # type: ignore[attr-defined]
                    conn = conns[pid] = _connection_to(server, pid)
                    conn.request("POST", "/v1/datasets/d/query", body=body, headers=headers)  # type: ignore[attr-defined]
                    r = conn.getresponse()  # type: ignore[attr-defined]
                data = json.loads(r.read())
                assert r.status == 200, data
                assert data["cached"] is False
                assert connection_owner(server, conn.sock.getsockname()[1]) == pid  # type: ignore[attr-defined]
                streams[pid].append(np.array(data["values"]["n"]) - truth)
        for conn in conns.values():
            conn.close()  # type: ignore[attr-defined]
    assert shared_pairs(streams) == 0
    # And the noise is really noise (not a constant offset): many distinct values.
    assert len({int(x) for s in streams.values() for v in s for x in v}) > 50


def _connection_to(server: Server, pid: int) -> http.client.HTTPConnection:
    """A fresh keep-alive connection served by worker ``pid`` (opened until one is)."""
    for _ in range(16):
        batch = [open_connection(server) for _ in range(16)]
        for conn in batch:
            conn.request("GET", "/v1/health")
        found = None
        for conn in batch:
            conn.getresponse().read()
            owner = connection_owner(server, conn.sock.getsockname()[1])
            if found is None and owner == pid:
                found = conn
            else:
                conn.close()
        if found is not None:
            return found
    raise AssertionError(f"no connection reached worker {pid}")


def test_the_comparison_detects_workers_that_share_a_random_stream() -> None:
    """Negative control: forked children of a process that already used its CSPRNG buffer.

    The default secure source reads the OS in 64 KiB chunks and keeps the unused bytes; a
    fork copies that buffer, so both children hand out the same noise. This is exactly the
    failure that starting workers before creating anything random (uvicorn's spawn) avoids,
    and the comparison above must catch it.
    """
    from deniable.mechanisms import geometric
    from deniable.noise.source import default_source

    default_source().words(1)  # the parent draws: the buffer now holds unused bytes
    truth = np.arange(KEYS) + 30000
    streams: dict[int, list[np.ndarray]] = {}
    for worker in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                os.close(read)
                vecs = [
                    geometric(truth, sensitivity=1, epsilon=SCALE_EPSILON).value - truth
                    for _ in range(4)
                ]
                os.write(write, json.dumps([v.tolist() for v in vecs]).encode())
            finally:
                os._exit(0)
        os.close(write)
        data = b""
        while chunk := os.read(read, 1 << 16):
            data += chunk
        os.close(read)
        os.waitpid(pid, 0)
        streams[worker] = [np.array(v) for v in json.loads(data)]
    assert shared_pairs(streams) == 4  # the i-th draws of both children are identical

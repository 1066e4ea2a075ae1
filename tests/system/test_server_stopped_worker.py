"""A stopped worker is replaced within ``server.worker_healthcheck`` seconds (issue 23).

One SIGSTOPped worker stalled every request for about 5 s (uvicorn's default health-check
timeout) until the supervisor killed it: while a stopped worker holds the ledger's write
lock, every other worker's charge waits for it. The service now sets the timeout from the
configuration (default 2 s). The test stops a worker of a two-worker server while a stream
of charged queries goes on, and checks that the supervisor replaces it in time, that every
query is answered, and that none waited much longer than the health-check timeout.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
from _server_helpers import Server, listening, running, worker_pids, write_config

from deniable.ledger import Ledger

HEALTHCHECK = 2
SLACK = 2.5  # supervisor's 0.5 s loop, the replacement's start-up, a loaded machine


def workers(server: Server) -> list[int]:
    """The worker processes (children holding the listening socket; not helpers)."""
    return [pid for pid in worker_pids(server) if listening(pid)]


def test_a_stopped_worker_is_replaced_and_requests_keep_being_answered(tmp_path: Path) -> None:
    rows = "x\n" + "\n".join(str(i % 7) for i in range(200)) + "\n"
    config = write_config(
        tmp_path, cap="{ epsilon = 100 }", rows=rows,
        extra_server=f"worker_healthcheck = {HEALTHCHECK}",
    )  # fmt: skip
    with Ledger(tmp_path / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    headers = {"Authorization": f"Bearer {token}"}
    with running(config, workers=2, log=tmp_path / "server.log") as server:
        before = workers(server)
        assert len(before) == 2
        victim = before[0]
        os.kill(victim, signal.SIGSTOP)
        stopped_at = time.monotonic()
        latencies = []
        replaced_after = None
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                i = 0
                while time.monotonic() - stopped_at < HEALTHCHECK + SLACK + 2:
                    i += 1
                    sql = f"SELECT COUNT(*) AS n FROM t WHERE x > -{i}"  # a fresh charge
                    t0 = time.monotonic()
                    r = client.post("/v1/datasets/d/query", json={"sql": sql, "epsilon": 0.01},
                                    headers=headers)  # fmt: skip
                    latencies.append(time.monotonic() - t0)
                    assert r.status_code == 200, r.text
                    if replaced_after is None and victim not in worker_pids(server):
                        replaced_after = time.monotonic() - stopped_at
        finally:
            if victim in worker_pids(server):
                os.kill(victim, signal.SIGCONT)
        assert replaced_after is not None, "the stopped worker was never replaced"
        assert replaced_after < HEALTHCHECK + SLACK, replaced_after
        assert max(latencies) < HEALTHCHECK + SLACK, max(latencies)
        deadline = time.monotonic() + 30
        while len(workers(server)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(workers(server)) == 2  # a new worker took its place

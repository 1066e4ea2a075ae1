"""Answers of a multi-worker server are not held back by Nagle's algorithm.

uvicorn's multi-worker listening socket has protocol number 0, so asyncio did not set
``TCP_NODELAY`` on accepted connections; every response, written as headers then body,
waited for the client's delayed ACK (Linux: at least 40 ms). Measured before the fix: a
median of 48 ms per replayed answer on a keep-alive connection to two workers; after: 2.7 ms.
The threshold, 30 ms, is below the 40 ms floor of a delayed ACK, so a median under it cannot
happen with the delay, and leaves room for a loaded machine without it.
"""

from __future__ import annotations

import http.client
import json
import statistics
import time
from pathlib import Path

from _server_helpers import running, write_config

from deniable.ledger import Ledger


def test_two_workers_answer_without_the_delayed_ack_wait(tmp_path: Path) -> None:
    rows = "x\n" + "\n".join(str(i % 7) for i in range(200)) + "\n"
    config = write_config(tmp_path, cap="{ epsilon = 100 }", rows=rows)
    with Ledger(tmp_path / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps({"sql": "SELECT COUNT(*) AS n FROM t", "epsilon": 0.01})
    with running(config, workers=2, log=tmp_path / "server.log") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        latencies = []
        for _ in range(30):  # the first is charged, the rest are free replays
            t0 = time.perf_counter()
            conn.request("POST", "/v1/datasets/d/query", body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            latencies.append(time.perf_counter() - t0)
        conn.close()
    assert statistics.median(latencies[5:]) < 0.030, latencies

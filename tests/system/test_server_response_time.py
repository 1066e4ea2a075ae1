"""Query responses leave at a deadline fixed in advance: latency does not tell the data.

The time a query takes depends on the private data (here: the rows a WHERE matches, and
with them the private partitions the engine groups and hands to Python). With the
dataset's ``response_time`` policy (``deniable.server.timing``) every response of the query
route leaves at ``arrival + deadline``, the deadline computed from public facts only.

The statistic: a real uvicorn server answers ``n`` distinct queries
``SELECT x AS g, COUNT(*) AS n FROM t WHERE x < k GROUP BY x`` over a table of ``ROWS``
rows in which ``x`` is a permutation of ``0 … ROWS − 1``, so the query matches exactly ``k``
rows, ``k`` spread evenly over 0 … 100% and sent in a random order; the client measures each
latency. Spearman's ρ between latency and ``k`` must be ~0 with the policy on.

Threshold (the reasoning of ``test_server_timing``, whose machinery this reuses): under the
null (latency independent of the rows matched) the ``k`` are a uniformly random permutation
independent of the latencies, so ρ is a permutation statistic with mean 0 and variance
exactly 1/(n − 1), asymptotically ρ·√(n − 1) ~ N(0, 1). We refuse when
|ρ| > 5/√(n − 1): P[|N(0, 1)| > 5] = 5.7e-7 < 1e-6. The default run uses n = 150
(threshold 0.410, about 30 s: the policy holds every answer 0.4 s, two clients); the
``slow`` run n = 1,000 (threshold 0.158) and a quick check of the issue's bound |ρ| < 0.05.

Negative control: the same measurement with ``response_time = "off"`` must be refused by
the same statistic at the same n (measured: ρ = 0.52 to 0.9 depending on the machine's
load, e.g. latency 23 ms when the WHERE matches nothing and 62 ms when it matches
everything on a quiet machine; ρ = 0.59 at n = 200 under a load average of 5 on 2 CPUs,
where the bar at n = 150 is 0.41). The control asks from one client: with two, each latency
also holds the wait for the other client's query (the dataset's lock), noise that lowered
ρ to 0.40 at n = 200; the policy-on run uses two clients to halve its wall time, and passes
with one as well.

The other tests pin the policy's promises one by one: answers and every refusal after
authentication leave at the deadline, 401 at once, an overrun is ``503 deadline_exceeded``
at the deadline and is charged like an answer (and its answer is then replayed free).
"""

from __future__ import annotations

import http.client
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _server_helpers import running
from fastapi.testclient import TestClient
from test_server_timing import rank_correlation, threshold

from deniable.ledger import Charge, Ledger
from deniable.server.app import create_app
from deniable.server.config import ConfigError, load_config
from deniable.server.timing import (
    DEFAULT_DEADLINE,
    OFF,
    QueryShape,
    ResponseTime,
    shape_of,
)

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"

ROWS = 300_000
# deadline = base + per_row · rows = 0.1 + 1e-6 · 300,000 = 0.4 s; the slowest answer seen
# with the policy off was 0.17 s with one client, so two clients (one may wait for the
# other's query under the dataset's lock) stay well inside it.
POLICY_ON = "{ base = 0.1, per_row = 1e-6, rows = 300000 }"
DEADLINE = 0.4
CLIENTS = 2
N_DEFAULT = 150
N_FULL = 1000
WARMUP = 5


def write_table(folder: Path, policy: str) -> Path:
    """A user-level dataset of ``ROWS`` rows (Parquet) whose ``x`` is a permutation."""
    rng = np.random.default_rng(7)  # test data only, never a release path
    table = pa.table(
        {
            "x": rng.permutation(ROWS).astype(np.int64),
            "u": rng.integers(0, ROWS // 10, ROWS),  # about 10 rows per person
        }
    )
    pq.write_table(table, folder / "data.parquet")
    path = folder / "service.toml"
    path.write_text(
        f"""
ledger = "ledger.db"

[server]
rate_limit = {{ per_second = 100000, burst = 100000 }}

[datasets.d]
source = "data.parquet"
table = "t"
privacy_unit = "u"
max_groups = 1
max_rows = 2
budget = {{ epsilon = 1000000, delta = 0.1 }}
response_time = {policy}
"""
    )
    return path


def measure(
    folder: Path, policy: str, n: int, clients: int
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Latency (s), rows matched and HTTP status of ``n`` distinct queries through a server."""
    config = write_table(folder, policy)
    with Ledger(folder / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    rng = np.random.default_rng(11)
    matched = rng.permutation(np.linspace(0, ROWS, n).round().astype(np.int64))
    latency = np.zeros(n)
    status = [0] * n
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def ask(conn: http.client.HTTPConnection, sql: str) -> tuple[float, int, bytes]:
        body = json.dumps({"sql": sql, "epsilon": 0.01, "delta": 1e-6})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/datasets/d/query", body, headers)
        response = conn.getresponse()
        data = response.read()
        return time.perf_counter() - t0, response.status, data

    def client(c: int, port: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            for i in range(c, n, clients):
                # `x < k` matches exactly k rows; each k is asked once (never a replay).
                sql = f"SELECT x AS g, COUNT(*) AS n FROM t WHERE x < {matched[i]} GROUP BY x"
                latency[i], status[i], data = ask(conn, sql)
                if status[i] not in (200, 503):
                    raise RuntimeError(f"HTTP {status[i]}: {data[:200]!r}")
        except Exception as e:  # reported by the test thread
            errors.append(repr(e))
        finally:
            conn.close()

    with running(config, workers=1, log=folder / "server.log") as server:
        warm = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        for w in range(WARMUP):  # the engine's first queries are slower (a time trend)
            ask(warm, f"SELECT COUNT(*) AS n FROM t WHERE x < {-w - 1}")
        warm.close()
        threads = [threading.Thread(target=client, args=(c, server.port)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[:3]
    return latency, matched.astype(float), status


def report(name: str, latency: np.ndarray, matched: np.ndarray, status: list[int]) -> float:
    rho = rank_correlation(latency, matched)
    ms = np.percentile(latency, [0, 50, 99, 100]) * 1000
    print(
        f"\n{name}: n={latency.size} rho={rho:+.4f} threshold={threshold(latency.size):.4f} "
        f"latency ms min/median/p99/max = {ms[0]:.1f}/{ms[1]:.1f}/{ms[2]:.1f}/{ms[3]:.1f} "
        f"overruns={status.count(503)}"
    )
    return rho


def check_policy_on(latency: np.ndarray, matched: np.ndarray, status: list[int]) -> None:
    n = latency.size
    # Every response (answer or 503 at the deadline) waited for the deadline.
    assert latency.min() >= DEADLINE, latency.min()
    # The run exercised answers, not only the overrun path (a loaded machine makes some
    # queries overrun: they leave at the deadline too, as 503, and count in ρ).
    assert status.count(200) >= n // 10, f"{status.count(503)} of {n} overran"
    rho = report("policy on", latency, matched, status)
    assert abs(rho) < threshold(n), (
        f"latency correlates with the rows matched: Spearman ρ = {rho:.4f} over {n} "
        f"queries (threshold {threshold(n):.4f})"
    )


def check_policy_off_is_flagged(latency: np.ndarray, matched: np.ndarray) -> None:
    rho = report("policy off (control)", latency, matched, [200] * latency.size)
    assert abs(rho) > threshold(latency.size), (
        f"the control found no timing channel to close: ρ = {rho:.4f}; the test has lost "
        "its power (a faster engine or a smaller table?)"
    )


@pytest.mark.slow  # ~40 s with its control; the default suite keeps the deadline tests below
def test_latency_does_not_track_rows_matched(tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    check_policy_on(*measure(tmp_path / "on", POLICY_ON, N_DEFAULT, CLIENTS))


@pytest.mark.slow
def test_negative_control_without_the_policy_latency_tracks_rows_matched(tmp_path: Path) -> None:
    latency, matched, status = measure(tmp_path, '"off"', N_DEFAULT, 1)
    assert set(status) == {200}
    check_policy_off_is_flagged(latency, matched)


@pytest.mark.slow
def test_latency_does_not_track_rows_matched_1000(tmp_path: Path) -> None:
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    on = measure(tmp_path / "on", POLICY_ON, N_FULL, CLIENTS)
    check_policy_on(*on)
    # The figure: |ρ| < 0.05 (a point estimate, sd 1/√999 = 0.032 under the null;
    # the refutation test above is the 1e-6 one).
    print(f"issue bound |rho| < 0.05: {abs(rank_correlation(on[0], on[1])):.4f}")
    latency, matched, _ = measure(tmp_path / "off", '"off"', N_FULL, 1)
    check_policy_off_is_flagged(latency, matched)


# -- the policy's promises, one by one ----------------------------------------------------------

SHORT = 1.5  # seconds: the deadline of the in-process tests below (0.5 overran on a loaded machine)
SLACK = 1.5  # seconds after the deadline a response may take on a loaded machine (a bound
# on a stuck response only: the promise tested is "never before the deadline")


def fixture_app(tmp_path: Path, policy: str) -> tuple[TestClient, str, str]:
    for f in FIXTURES.iterdir():
        if f.is_file() and not f.name.startswith("ledger"):
            shutil.copy(f, tmp_path)
    config = tmp_path / "example.toml"
    text = config.read_text()
    lines = [line for line in text.splitlines() if not line.startswith("response_time")]
    text = "\n".join(lines).replace(
        "[datasets.students]", f"[datasets.students]\nresponse_time = {policy}"
    )
    config.write_text(text)
    with Ledger(tmp_path / "ledger.db") as led:
        ann = led.add_analyst("ann", role="analyst")
        cur = led.add_analyst("cur", role="curator")
    return TestClient(create_app(load_config(config))), ann, cur


def timed(client: TestClient, path: str, body: object, token: str | None) -> tuple[float, int, str]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    t0 = time.monotonic()
    r = client.post(path, json=body, headers=headers)
    elapsed = time.monotonic() - t0
    code = r.json()["error"]["code"] if r.status_code >= 400 else "ok"
    return elapsed, r.status_code, code


def test_answers_and_every_refusal_after_authentication_leave_at_the_deadline(
    tmp_path: Path,
) -> None:
    client, ann, _ = fixture_app(tmp_path, f"{{ deadline = {SHORT} }}")
    q = "/v1/datasets/students/query"
    cases = [
        (q, {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 0.1}, 200, "ok"),
        (q, {"sql": "SELECT nope FROM students", "epsilon": 0.1}, 400, "sql_error"),
        (q, {"sql": "SELECT grade FROM students", "epsilon": 0.1}, 400, "unsafe_query"),
        (q, {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 50}, 409, "budget_exceeded"),
        (q, {"sql": "SELECT COUNT(*) FROM students"}, 400, "invalid_parameter"),
        (q, {"nonsense": 1}, 422, "invalid_request"),
        ("/v1/datasets/nope/query", {"sql": "SELECT 1", "epsilon": 0.1}, 404, "unknown_dataset"),
    ]
    with client:
        for path, body, status, code in cases:
            elapsed, got, got_code = timed(client, path, body, ann)
            assert (got, got_code) == (status, code), (body, got, got_code)
            # Never before the deadline; the upper slack only bounds a stuck loop. A name
            # that is no dataset has no policy of its own: the default deadline.
            deadline = DEFAULT_DEADLINE if code == "unknown_dataset" else SHORT
            assert deadline <= elapsed < deadline + SLACK, (code, elapsed)
        # Before authentication: nothing of the data can be in it; answered at once.
        elapsed, got, _ = timed(client, q, cases[0][1], None)
        assert got == 401 and elapsed < SHORT, elapsed
        # Routes that read no data are not held.
        t0 = time.monotonic()
        assert (
            client.get(
                "/v1/datasets/students/budget", headers={"Authorization": f"Bearer {ann}"}
            ).status_code
            == 200
        )
        assert time.monotonic() - t0 < SHORT


def test_policy_off_sends_when_ready(tmp_path: Path) -> None:
    client, ann, _ = fixture_app(tmp_path, '"off"')
    with client:
        timed(client, "/v1/datasets/students/query", {"sql": "SELECT 1", "epsilon": 0.1}, ann)
        elapsed, got, _ = timed(
            client,
            "/v1/datasets/students/query",
            {"sql": "SELECT nope FROM students", "epsilon": 0.1},
            ann,
        )
        assert got == 400 and elapsed < DEFAULT_DEADLINE, elapsed  # not held


def test_an_overrun_is_503_at_the_deadline_charged_like_an_answer_and_replayed_free(
    tmp_path: Path,
) -> None:
    # A deadline shorter than any query: every fresh query overruns.
    client, ann, _ = fixture_app(tmp_path, "{ deadline = 0.001 }")
    body = {"sql": "SELECT school, COUNT(*) AS n FROM students GROUP BY school", "epsilon": 0.25}
    with client:
        elapsed, got, code = timed(client, "/v1/datasets/students/query", body, ann)
        assert (got, code) == (503, "deadline_exceeded")
        # The query went on and was charged like an answer.
        ledger_path = tmp_path / "ledger.db"
        charged: list[Charge] = []
        stored = None
        end = time.monotonic() + 30
        while time.monotonic() < end and stored is None:
            with Ledger(ledger_path) as led:
                charged = list(led.history("students", analyst="ann"))
                stored = led.answer_for(charged[0].id) if charged else None
            time.sleep(0.05)
        assert len(charged) == 1 and stored is not None
    # Asking again (here through a service whose deadline leaves room for a replay): the
    # stored answer, free.
    config = tmp_path / "example.toml"
    config.write_text(
        config.read_text().replace("{ deadline = 0.001 }", f"{{ deadline = {SHORT} }}")
    )
    with TestClient(create_app(load_config(config))) as again:
        elapsed, got, code = timed(again, "/v1/datasets/students/query", body, ann)
        r = again.post(
            "/v1/datasets/students/query", json=body, headers={"Authorization": f"Bearer {ann}"}
        )
    assert r.status_code == 200 and r.json()["cached"] is True
    assert (got, code) == (200, "ok") and elapsed >= SHORT
    with Ledger(ledger_path) as led:
        assert len(list(led.history("students", analyst="ann"))) == 1


def test_tune_is_held_too(tmp_path: Path) -> None:
    client, _, cur = fixture_app(tmp_path, f"{{ deadline = {SHORT} }}")
    with client:
        elapsed, got, code = timed(
            client, "/v1/datasets/students/tune", {"table": "students", "epsilon": 100}, cur
        )
        assert (got, code) == (409, "budget_exceeded")
        assert SHORT <= elapsed < SHORT + SLACK


# -- configuration ------------------------------------------------------------------------------


def config_with(tmp_path: Path, policy: str | None) -> Path:
    (tmp_path / "t.csv").write_text("x\n1\n")
    line = "" if policy is None else f"response_time = {policy}\n"
    path = tmp_path / "c.toml"
    path.write_text(
        'ledger = "l.db"\n[datasets.t]\nsource = "t.csv"\nprivacy_unit = "row"\n'
        f"budget = {{ epsilon = 1 }}\n{line}"
    )
    return path


def test_the_policy_is_on_by_default_and_parsed_in_each_form(tmp_path: Path) -> None:
    def policy(text: str | None) -> ResponseTime:
        return load_config(config_with(tmp_path, text)).datasets["t"].response_time

    assert policy(None) == ResponseTime() and policy(None).seconds() == DEFAULT_DEADLINE
    assert policy('"off"') == OFF
    assert policy("{ deadline = 2.5 }").seconds(QueryShape(aggregates=9, joins=3)) == 2.5
    derived = policy(
        "{ base = 0.1, per_row = 1e-6, rows = 1000000, per_join = 1, per_aggregate = 0.5 }"
    )
    assert derived.seconds() == pytest.approx(1.1)
    assert derived.seconds(QueryShape(aggregates=3, joins=1)) == pytest.approx(3.1)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('"on"', "must be one of"),
        ("{ deadline = 0 }", "deadline must be in"),
        ("{ deadline = true }", "must be a number"),
        ("{ deadline = 1, base = 1 }", "give deadline alone"),
        ("{ base = 0.1, per_row = 1e-6 }", "per_row needs rows"),
        ("{ base = 0.1, rows = -3 }", "rows must be an integer"),
        ("{ per_row = 1e-6, rows = 10 }", "base is missing"),
        ("{ deadline = 1, typo = 2 }", "give deadline alone"),
    ],
)
def test_malformed_policies_are_refused_by_name(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as refused:
        load_config(config_with(tmp_path, text))
    assert "datasets.t.response_time" in str(refused.value)


def test_the_shape_is_read_from_the_request_only() -> None:
    sql = b'{"sql": "SELECT AVG(a), count(*), Sum(b) FROM t JOIN u ON t.k = u.k", "epsilon": 1}'
    assert shape_of(sql, "query") == QueryShape(aggregates=3, joins=1)
    builder = b'{"builder": {"table": "t", "aggregates": [{"function": "count"}, {}]}}'
    assert shape_of(builder, "query") == QueryShape(aggregates=2)
    for junk in (b"", b"[1]", b'{"sql": 3}', b"\xff", b"[" * 100_000):
        assert shape_of(junk, "query") == QueryShape()
    assert shape_of(b"", "tune") == QueryShape(aggregates=4)

"""The HTTP API in-process (TestClient), with a fake authenticator.

Covers routes, roles, error codes, size and rate limits, CORS and replay sharing. Token
management and idempotency (which need the ledger's analysts and idempotent charges) are in
test_server_ledger.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from _service_fixture import copy_example
from fastapi.testclient import TestClient

from deniable.ledger.analysts import Principal
from deniable.server.app import TokenBuckets, create_app
from deniable.server.config import RateLimit, ServiceConfig, load_config
from deniable.server.service import Service

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"
TOKENS = {
    "t-ann": Principal(name="ann", role="analyst"),
    "t-bob": Principal(name="bob", role="analyst"),
    "t-cur": Principal(name="cur", role="curator"),
}
COUNT = "SELECT school, COUNT(*) AS n FROM students GROUP BY school"


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{who}"}


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    return load_config(copy_example(tmp_path))


def client_for(config: ServiceConfig) -> Iterator[TestClient]:
    with Service(config) as service:
        app = create_app(service, authenticate=TOKENS.get)
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client


@pytest.fixture
def client(config: ServiceConfig) -> Iterator[TestClient]:
    yield from client_for(config)


def with_server(config: ServiceConfig, **changes: object) -> ServiceConfig:
    return replace(config, server=replace(config.server, **changes))


def code(response: object) -> str:
    body = response.json()  # type: ignore[attr-defined]
    assert set(body) == {"error"}
    return str(body["error"]["code"])


def test_health_needs_no_token(client: TestClient) -> None:
    assert client.get("/v1/health").json() == {"status": "ok"}


def test_every_other_route_needs_a_valid_token(client: TestClient) -> None:
    for path in ("/v1/datasets", "/v1/datasets/students", "/v1/explain?epsilon=1"):
        assert client.get(path).status_code == 401
        r = client.get(path, headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        assert code(r) == "unauthenticated"


def test_datasets_and_metadata_show_declarations_and_budget_only(client: TestClient) -> None:
    r = client.get("/v1/datasets", headers=auth("ann"))
    assert r.status_code == 200
    (summary,) = r.json()
    assert summary["name"] == "students"
    # ann has an allowance of ε = 1 out of the cap of 2.
    assert summary["budget"]["remaining"]["exact"] == {"epsilon": "1"}
    assert summary["budget"]["cap"]["exact"] == {"epsilon": "2"}
    meta = client.get("/v1/datasets/students", headers=auth("ann")).json()
    main, schools = meta["tables"]
    assert [c["name"] for c in main["columns"]] == ["student_id", "school", "grade", "age"]
    assert main["bounds"] == {"grade": [0.0, 100.0], "age": [10.0, 25.0]}
    assert main["public_keys"] == {"school": ["north", "south", "east"]}
    assert main["privacy_unit"] == "student_id"
    assert schools["public"] is True and schools["unique_keys"] == [["school"]]
    # No row count, and no value computed from the data: the table has 60 rows.
    assert set(main) == {
        "name",
        "public",
        "columns",
        "privacy_unit",
        "bounds",
        "public_keys",
        "max_groups",
        "max_rows",
        "unique_keys",
    }
    numbers = re.findall(r"(?<![\w.])\d+(?![\w.])", r.text + json.dumps(meta))
    assert "60" not in numbers


def test_query_returns_values_intervals_charge_and_remaining(client: TestClient) -> None:
    r = client.post(
        "/v1/datasets/students/query",
        json={"sql": COUNT, "epsilon": 0.25},
        headers=auth("ann"),
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["columns"] == ["school", "n"]
    assert body["values"]["school"] == ["north", "south", "east"]
    assert all(isinstance(v, int) for v in body["values"]["n"])
    lows, highs = body["intervals"]["n"]["low"], body["intervals"]["n"]["high"]
    assert all(lo <= v <= hi for lo, v, hi in zip(lows, body["values"]["n"], highs, strict=True))
    assert body["charge"]["exact"] == {"epsilon": "1/4"}
    assert body["remaining"]["exact"] == {"epsilon": "3/4"}  # ann's slice: 1 - 1/4
    assert body["cached"] is False and isinstance(body["charge_id"], int)
    # What applied to rows, in one line, and what the intervals cover (issue 21)
    assert body["row_policy"] == "per student_id: at most 1 group, 1 row per group"
    assert body["interval_coverage"] == (
        "95% intervals: noise only — covers the value after bounding"
    )
    # The curator sees the dataset's cap: 2 - 1/4.
    cur = client.get("/v1/datasets/students/budget", headers=auth("cur")).json()
    assert cur["remaining"]["exact"] == {"epsilon": "7/4"}


def test_builder_form_is_the_same_query_as_its_sql(client: TestClient) -> None:
    sql = {"sql": COUNT, "epsilon": 0.25}
    builder = {
        "builder": {
            "table": "students",
            "group_by": ["school"],
            "aggregates": [{"function": "count", "alias": "n"}],
        },
        "epsilon": 0.25,
    }
    first = client.post("/v1/datasets/students/query", json=sql, headers=auth("ann")).json()
    second = client.post("/v1/datasets/students/query", json=builder, headers=auth("ann"))
    assert second.status_code == 200, second.text
    # Same program: the second is a free replay of the first.
    assert second.json()["cached"] is True
    assert second.json()["charge"]["exact"] == {"epsilon": "0"}
    assert second.json()["values"] == first["values"]


def test_builder_filters_and_aggregates(client: TestClient) -> None:
    body = {
        "builder": {
            "table": "students",
            "where": [
                {"column": "age", "op": ">=", "value": 16},
                {"column": "school", "op": "in", "value": ["north", "south"]},
            ],
            "aggregates": [
                {"function": "sum", "column": "grade", "alias": "total"},
                {"function": "quantile", "column": "grade", "q": 0.5, "alias": "med"},
            ],
        },
        "epsilon": 0.5,
    }
    r = client.post("/v1/datasets/students/query", json=body, headers=auth("cur"))
    assert r.status_code == 200, r.text
    assert r.json()["columns"] == ["total", "med"]
    assert "WHERE" in r.json()["query"]
    bad = dict(
        body,
        builder={"table": "students", "aggregates": [{"function": "quantile", "column": "grade"}]},
    )
    r = client.post("/v1/datasets/students/query", json=bad, headers=auth("cur"))
    assert r.status_code == 400 and code(r) == "invalid_parameter"


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        ({"sql": "SELECT * FROM students", "epsilon": 0.1}, 400, "unsafe_query"),
        ({"sql": "SELEC COUNT(*) FROM students", "epsilon": 0.1}, 400, "sql_error"),
        ({"sql": "SELECT COUNT(*) FROM nowhere", "epsilon": 0.1}, 400, "sql_error"),
        ({"sql": "SELECT COUNT(*) FROM students", "epsilon": 5}, 409, "budget_exceeded"),
        ({"sql": "SELECT COUNT(*) FROM students"}, 400, "invalid_parameter"),
        ({"sql": "SELECT COUNT(*) FROM students", "rho": 0.1}, 400, "invalid_parameter"),
        ({"epsilon": 0.1}, 422, "invalid_request"),
        ({"sql": "x", "epsilon": -1}, 422, "invalid_request"),
        ({"sql": "x", "epsilon": 0.1, "extra": 1}, 422, "invalid_request"),
    ],
)
def test_refusals_have_stable_codes_and_cost_nothing(
    client: TestClient, body: dict[str, object], status: int, expected: str
) -> None:
    r = client.post("/v1/datasets/students/query", json=body, headers=auth("ann"))
    assert r.status_code == status, r.text
    assert code(r) == expected
    budget = client.get("/v1/datasets/students/budget", headers=auth("cur")).json()
    assert budget["spent"]["exact"] == {"epsilon": "0"}


def test_validation_errors_never_echo_the_input(client: TestClient) -> None:
    secret = "SECRET-VALUE-123"
    r = client.post(
        "/v1/datasets/students/query",
        json={"sql": COUNT, "epsilon": secret},
        headers=auth("ann"),
    )
    assert r.status_code == 422 and secret not in r.text


def test_unknown_dataset_and_route(client: TestClient) -> None:
    r = client.get("/v1/datasets/nope", headers=auth("ann"))
    assert r.status_code == 404 and code(r) == "unknown_dataset"
    r = client.post(
        "/v1/datasets/nope/query", json={"sql": COUNT, "epsilon": 0.1}, headers=auth("ann")
    )
    assert r.status_code == 404 and code(r) == "unknown_dataset"
    r = client.get("/v2/anything")
    assert r.status_code == 404 and code(r) == "not_found"
    r = client.delete("/v1/datasets", headers=auth("ann"))
    assert r.status_code == 405 and code(r) == "method_not_allowed"


def test_analysts_see_only_their_own_history(client: TestClient) -> None:
    for who, eps in (("ann", 0.25), ("bob", 0.125)):
        r = client.post(
            "/v1/datasets/students/query", json={"sql": COUNT, "epsilon": eps}, headers=auth(who)
        )
        assert r.status_code == 200, r.text
    ann = client.get("/v1/datasets/students/history", headers=auth("ann")).json()
    assert [h["analyst"] for h in ann] == ["ann"]
    assert ann[0]["loss"]["exact"] == {"epsilon": "1/4"}
    r = client.get("/v1/datasets/students/ledger", headers=auth("ann"))
    assert r.status_code == 403 and code(r) == "forbidden"
    full = client.get("/v1/datasets/students/ledger", headers=auth("cur")).json()
    assert sorted(h["analyst"] for h in full) == ["ann", "bob"]


def test_replays_are_private_by_default(client: TestClient) -> None:
    q = {"sql": COUNT, "epsilon": 0.25}
    client.post("/v1/datasets/students/query", json=q, headers=auth("ann"))
    mine = client.post("/v1/datasets/students/query", json=q, headers=auth("ann")).json()
    assert mine["cached"] is True and mine["charge"]["exact"] == {"epsilon": "0"}
    # bob asks the identical question: he pays, and learns nothing about ann.
    bob = client.post("/v1/datasets/students/query", json=q, headers=auth("bob")).json()
    assert bob["cached"] is False and bob["charge"]["exact"] == {"epsilon": "1/4"}


def test_shared_replays_when_configured(config: ServiceConfig) -> None:
    for client in client_for(with_server(config, share_replays=True)):
        q = {"sql": COUNT, "epsilon": 0.25}
        client.post("/v1/datasets/students/query", json=q, headers=auth("ann"))
        bob = client.post("/v1/datasets/students/query", json=q, headers=auth("bob")).json()
        assert bob["cached"] is True and bob["charge"]["exact"] == {"epsilon": "0"}


def test_changing_epsilon_or_a_literal_charges_again(client: TestClient) -> None:
    qs = [
        {"sql": COUNT, "epsilon": 0.25},
        {"sql": COUNT, "epsilon": 0.125},
        {"sql": COUNT.replace("students", "students WHERE age > 15"), "epsilon": 0.125},
    ]
    for q in qs:
        r = client.post("/v1/datasets/students/query", json=q, headers=auth("cur")).json()
        assert r["cached"] is False
    spent = client.get("/v1/datasets/students/budget", headers=auth("cur")).json()["spent"]
    assert spent["exact"] == {"epsilon": "1/2"}


def test_explain(client: TestClient) -> None:
    r = client.get("/v1/explain", params={"epsilon": 1.0986122886681098}, headers=auth("ann"))
    body = r.json()
    assert abs(body["posterior_low"] - 0.25) < 1e-9 and abs(body["posterior_high"] - 0.75) < 1e-9
    assert "75%" in body["text"]
    assert client.get("/v1/explain", params={"epsilon": -1}, headers=auth("ann")).status_code == 422


def test_request_size_limit(client: TestClient) -> None:
    big = {"sql": "SELECT COUNT(*) FROM students -- " + "x" * 70_000, "epsilon": 0.1}
    r = client.post("/v1/datasets/students/query", json=big, headers=auth("ann"))
    assert r.status_code == 413 and code(r) == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"sql": "'
        for _ in range(100):
            yield b"x" * 1000
        yield b'", "epsilon": 0.1}'

    r = client.post(
        "/v1/datasets/students/query",
        content=chunks(),
        headers={**auth("ann"), "Content-Type": "application/json"},
    )
    assert r.status_code == 413 and code(r) == "request_too_large"


def test_rate_limit_per_analyst(config: ServiceConfig) -> None:
    slow = with_server(config, rate_limit=RateLimit(per_second=0.001, burst=3))
    for client in client_for(slow):
        codes = [client.get("/v1/datasets", headers=auth("ann")).status_code for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
        r = client.get("/v1/datasets", headers=auth("ann"))
        assert code(r) == "rate_limited" and int(r.headers["Retry-After"]) >= 1
        # another analyst has its own bucket
        assert client.get("/v1/datasets", headers=auth("bob")).status_code == 200


def test_token_bucket_refills() -> None:
    now = [0.0]
    b = TokenBuckets(per_second=2, burst=2, clock=lambda: now[0])
    assert b.take("a") is None and b.take("a") is None
    wait = b.take("a")
    assert wait is not None and abs(wait - 0.5) < 1e-9
    now[0] = 0.5
    assert b.take("a") is None


def test_cors_closed_by_default_and_open_when_configured(config: ServiceConfig) -> None:
    origin = "https://console.example"
    pre = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    for client in client_for(config):
        r = client.get("/v1/health", headers={"Origin": origin})
        assert "access-control-allow-origin" not in r.headers
        r = client.options("/v1/datasets/students/query", headers=pre)
        assert "access-control-allow-origin" not in r.headers
    for client in client_for(with_server(config, cors_origins=(origin,))):
        r = client.options("/v1/datasets/students/query", headers=pre)
        assert r.headers["access-control-allow-origin"] == origin
        r = client.get("/v1/health", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers


def test_unexpected_errors_become_internal_without_detail(config: ServiceConfig) -> None:
    def broken(token: str) -> Principal | None:
        raise RuntimeError("secret detail 4242")

    with Service(config) as service:
        app = create_app(service, authenticate=broken)
        with TestClient(app, raise_server_exceptions=False) as client:
            r = client.get("/v1/datasets", headers=auth("ann"))
    assert r.status_code == 500 and code(r) == "internal"
    assert "4242" not in r.text and "Traceback" not in r.text


def test_openapi_declares_error_responses(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/datasets/{dataset}/query"]["post"]
    for status in ("400", "401", "404", "409", "413", "422", "429", "500", "503"):
        assert op["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith(
            "/ErrorBody"
        )
    assert "QueryResponse" in spec["components"]["schemas"]
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_refusals_state_their_amounts_and_places(client: TestClient) -> None:
    """budget_exceeded says what was asked and what is left; sql_error says where."""
    r = client.post(
        "/v1/datasets/students/query",
        json={"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 1.5},
        headers=auth("ann"),
    )
    detail = r.json()["error"]
    assert r.status_code == 409 and detail["code"] == "budget_exceeded"
    assert detail["requested"]["exact"] == {"epsilon": "3/2"}  # beyond ann's allowance of 1
    remaining = client.get("/v1/datasets/students/budget", headers=auth("ann")).json()
    assert detail["remaining"]["exact"] == remaining["remaining"]["exact"]
    r = client.post(
        "/v1/datasets/students/query",
        json={"sql": "SELECT COUNT(*) AS n\nFROM students\nWHERE nope > 1", "epsilon": 0.1},
        headers=auth("ann"),
    )
    detail = r.json()["error"]
    assert detail["code"] == "sql_error" and (detail["line"], detail["column"]) == (3, 7)
    r = client.post("/v1/datasets/students/query", json={"sql": COUNT}, headers=auth("ann"))
    assert set(r.json()["error"]) == {"code", "message"}  # other errors: no empty fields

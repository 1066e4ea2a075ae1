"""The HTTP API with the real ledger: tokens, analyst management, allowances, idempotency."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from _service_fixture import copy_example
from fastapi.testclient import TestClient

from deniable.ledger import Ledger
from deniable.ledger.analysts import Principal
from deniable.server.app import create_app
from deniable.server.config import ServiceConfig, load_config
from deniable.server.errors import RequestInProgress
from deniable.server.service import Service

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"
COUNT = "SELECT school, COUNT(*) AS n FROM students GROUP BY school"


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    return load_config(copy_example(tmp_path))


@pytest.fixture
def curator(config: ServiceConfig) -> str:
    with Ledger(config.ledger) as led:
        return led.add_analyst("cur", role="curator")


@pytest.fixture
def client(config: ServiceConfig, curator: str) -> Iterator[TestClient]:
    with TestClient(create_app(config), raise_server_exceptions=False) as c:
        yield c


def h(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **extra}


def test_tokens_from_the_ledger(client: TestClient, curator: str) -> None:
    assert client.get("/v1/whoami", headers=h(curator)).json() == {"name": "cur", "role": "curator"}
    r = client.post("/v1/analysts", json={"name": "bob"}, headers=h(curator))
    assert r.status_code == 201, r.text
    bob = r.json()["token"]
    assert bob.startswith("dnb_") and r.json()["role"] == "analyst"
    assert client.get("/v1/whoami", headers=h(bob)).json() == {"name": "bob", "role": "analyst"}
    # An analyst cannot manage analysts.
    r = client.post("/v1/analysts", json={"name": "eve"}, headers=h(bob))
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    listed = client.get("/v1/analysts", headers=h(curator)).json()
    assert {a["name"] for a in listed} == {"cur", "bob"}
    assert all("token" not in a and "digest" not in a for a in listed)
    # A new token for the same person: the old one stops working, the name stays theirs.
    r = client.post("/v1/analysts/bob/token", headers=h(curator))
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "bob" and r.json()["role"] == "analyst"
    old, bob = bob, r.json()["token"]
    assert bob != old and bob.startswith("dnb_")
    assert client.get("/v1/whoami", headers=h(old)).status_code == 401
    assert client.get("/v1/whoami", headers=h(bob)).json() == {"name": "bob", "role": "analyst"}
    assert client.post("/v1/analysts/bob/token", headers=h(bob)).status_code == 403
    r = client.post("/v1/analysts/nobody/token", headers=h(curator))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert client.delete("/v1/analysts/bob", headers=h(curator)).status_code == 204
    assert client.get("/v1/whoami", headers=h(bob)).status_code == 401
    r = client.delete("/v1/analysts/nobody", headers=h(curator))
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    # A duplicate name is refused with a code.
    r = client.post("/v1/analysts", json={"name": "cur"}, headers=h(curator))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_parameter"


def test_allowances_are_slices_of_the_cap(client: TestClient, curator: str) -> None:
    bob = client.post("/v1/analysts", json={"name": "bob"}, headers=h(curator)).json()["token"]
    r = client.put(
        "/v1/datasets/students/allowances/bob", json={"epsilon": 0.25}, headers=h(curator)
    )
    assert r.status_code == 200, r.text
    assert r.json()["remaining"]["exact"] == {"epsilon": "1/4"}
    r = client.put("/v1/datasets/students/allowances/bob", json={"epsilon": 3}, headers=h(curator))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_parameter"
    r = client.post(
        "/v1/datasets/students/query", json={"sql": COUNT, "epsilon": 0.5}, headers=h(bob)
    )
    assert r.status_code == 409 and r.json()["error"]["code"] == "budget_exceeded"
    r = client.put("/v1/datasets/students/allowances/bob", json={"epsilon": 1}, headers=h(bob))
    assert r.status_code == 403
    views = client.get("/v1/datasets/students/allowances", headers=h(curator)).json()
    assert {v["analyst"] for v in views} == {"cur", "bob"}


def test_idempotent_retry_returns_the_same_body_charged_once(
    client: TestClient, curator: str
) -> None:
    q = {"sql": COUNT, "epsilon": 0.25}
    first = client.post(
        "/v1/datasets/students/query", json=q, headers=h(curator, **{"Idempotency-Key": "k1"})
    )
    again = client.post(
        "/v1/datasets/students/query", json=q, headers=h(curator, **{"Idempotency-Key": "k1"})
    )
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert first.json()["charge"]["exact"] == {"epsilon": "1/4"}
    ledger = client.get("/v1/datasets/students/ledger", headers=h(curator)).json()
    assert len(ledger) == 1
    # A new key for the identical query is a free replay, not a new charge.
    third = client.post(
        "/v1/datasets/students/query", json=q, headers=h(curator, **{"Idempotency-Key": "k2"})
    ).json()
    assert third["cached"] is True and third["values"] == first.json()["values"]
    # The key reused for another query is refused.
    other = {"sql": COUNT, "epsilon": 0.125}
    r = client.post(
        "/v1/datasets/students/query", json=other, headers=h(curator, **{"Idempotency-Key": "k1"})
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused"
    assert len(client.get("/v1/datasets/students/ledger", headers=h(curator)).json()) == 1


def test_retry_after_the_budget_is_gone_still_gets_its_answer(
    client: TestClient, curator: str
) -> None:
    q = {"sql": COUNT, "epsilon": 2}  # the whole cap
    key = h(curator, **{"Idempotency-Key": "all"})
    first = client.post("/v1/datasets/students/query", json=q, headers=key)
    assert first.status_code == 200, first.text
    again = client.post("/v1/datasets/students/query", json=q, headers=key)
    assert again.status_code == 200 and again.json() == first.json()


def test_concurrent_retries_are_charged_once(config: ServiceConfig, curator: str) -> None:
    with Service(config) as service:
        who = Principal(name="cur", role="curator")
        answers = []

        def ask() -> None:
            answers.append(
                service.query(who, "students", COUNT, epsilon=0.25, idempotency_key="same")
            )

        threads = [threading.Thread(target=ask) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(answers) == 6
        assert len({a.metadata.charge_id for a in answers}) == 1
        assert all(a.to_pandas().equals(answers[0].to_pandas()) for a in answers)
        assert len(service.ledger.history("students")) == 1


def test_a_charge_without_a_stored_answer_is_in_progress(
    config: ServiceConfig, curator: str
) -> None:
    from dataclasses import replace

    from deniable.accounting.loss import Epsilon

    quick = replace(config, server=replace(config.server, idempotency_wait=0.05))
    with Service(quick) as service:
        who = Principal(name="cur", role="curator")
        program = service.compile("students", COUNT, epsilon=0.25)
        # A request charged and then lost before its answer was stored (a crash).
        service.ledger.charge(
            "students",
            Epsilon(epsilon=0.25),
            analyst="cur",
            query_key=f"cur/{program.cache_key}",
            query_text=COUNT,
            idempotency_key="lost",
        )
        with pytest.raises(RequestInProgress):
            service.query(who, "students", COUNT, epsilon=0.25, idempotency_key="lost")
        assert len(service.ledger.history("students")) == 1


def test_bad_idempotency_keys(client: TestClient, curator: str) -> None:
    q = {"sql": COUNT, "epsilon": 0.25}
    r = client.post(
        "/v1/datasets/students/query", json=q, headers=h(curator, **{"Idempotency-Key": "x" * 300})
    )
    assert r.status_code == 422


def test_a_rolled_back_ledger_refuses_queries_but_starts(
    config: ServiceConfig, curator: str
) -> None:
    with TestClient(create_app(config), raise_server_exceptions=False):
        pass  # the first start registers the dataset
    older = config.ledger.with_name("older.db")
    shutil.copy(config.ledger, older)  # yesterday's copy (the ledger is closed: no WAL)
    query = {"sql": COUNT, "epsilon": 0.5}
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        assert (
            client.post("/v1/datasets/students/query", json=query, headers=h(curator)).status_code
            == 200
        )
    for suffix in ("-wal", "-shm"):
        Path(str(config.ledger) + suffix).unlink(missing_ok=True)
    shutil.copy(older, config.ledger)  # restoring it would give the budget back
    with TestClient(create_app(config), raise_server_exceptions=False) as client:
        r = client.post(
            "/v1/datasets/students/query",
            json={"sql": COUNT, "epsilon": 0.1},
            headers=h(curator),
        )
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "ledger_tampered"
        assert "verify" in r.json()["error"]["message"]
        # The curator can still read the ledger.
        assert client.get("/v1/datasets/students/ledger", headers=h(curator)).status_code == 200

"""POST /v1/datasets/{d}/synthesize: a DP synthetic table for curators, charged once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _service_fixture import copy_example
from fastapi.testclient import TestClient

from deniable.ledger.analysts import Principal
from deniable.server.app import create_app
from deniable.server.config import load_config
from deniable.server.service import Service

TOKENS = {
    "t-cur": Principal("cur", "curator"),
    "t-ann": Principal("ann", "analyst"),
}
DS = "/v1/datasets/students"


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{who}"}


def code(response: Any) -> str:
    return str(response.json()["error"]["code"])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    toml = copy_example(tmp_path)
    text = toml.read_text().replace(
        "budget = { epsilon = 2.0 }", "budget = { epsilon = 20, delta = 1e-5 }"
    )
    # ann's allowance must be of the cap's kind now
    toml.write_text(
        text.replace("students = { epsilon = 1.0 }", "students = { epsilon = 1.0, delta = 1e-6 }")
    )
    with Service(load_config(toml)) as s:
        yield s


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    app = create_app(service, authenticate=TOKENS.get)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_a_curator_gets_a_synthetic_table_charged_once(
    client: TestClient, service: Service
) -> None:
    body = {"table": "students", "rows": 300, "epsilon": 2, "delta": 1e-6,
            "columns": ["school", "grade", "age"], "method": "mst", "bins": 8}  # fmt: skip
    r = client.post(f"{DS}/synthesize", json=body, headers=auth("cur"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["columns"] == ["school", "grade", "age"]
    assert all(len(out["data"][c]) == 300 for c in out["columns"])
    assert set(out["data"]["school"]) <= {"north", "south", "east", None}
    assert all(v is None or 0 <= v <= 100 for v in out["data"]["grade"])
    (charge,) = service.ledger.history("students")
    assert charge.id == out["charge_id"] and charge.analyst == "cur"
    assert out["charge"]["exact"] == {"epsilon": "2", "delta": "1/1000000"}
    marginals = [m for m in out["measurements"] if m["kind"] == "marginal"]
    assert {tuple(m["clique"]) for m in marginals} >= {("school",), ("grade",), ("age",)}
    assert all(m["sigma"] > 0 for m in marginals)


def test_analysts_and_bad_requests_are_refused_before_anything_is_spent(
    client: TestClient, service: Service
) -> None:
    body = {"table": "students", "rows": 100, "epsilon": 1, "delta": 1e-6}
    r = client.post(f"{DS}/synthesize", json=body, headers=auth("ann"))
    assert r.status_code == 403
    r = client.post(f"{DS}/synthesize", json={**body, "epsilon": 50}, headers=auth("cur"))
    assert r.status_code == 409 and code(r) == "budget_exceeded"
    r = client.post(f"{DS}/synthesize", json={**body, "rows": 10**7}, headers=auth("cur"))
    assert r.status_code == 422
    r = client.post(f"{DS}/synthesize", json={**body, "method": "gan"}, headers=auth("cur"))
    assert r.status_code == 422
    r = client.post(f"{DS}/synthesize", json={**body, "delta": None}, headers=auth("cur"))
    assert r.status_code == 400 and "delta" in r.text
    assert service.ledger.history("students") == []


def test_bins_at_dp_quantiles_and_keys_by_partition_selection_over_http(
    client: TestClient, service: Service
) -> None:
    """The measured domains reach HTTP: grade's bins at DP quantiles, school's keys chosen
    by partition selection, measured within the one charge and listed as measurements."""
    body = {"table": "students", "rows": 200, "epsilon": 4, "delta": 1e-5, "method": "mst",
            "columns": ["school", "grade", "age"], "bins": 8,
            "quantiles": {"grade": {"n": 4, "within": [0, 100]}},
            "select_keys": {"school": 10}}  # fmt: skip
    r = client.post(f"{DS}/synthesize", json=body, headers=auth("cur"))
    assert r.status_code == 200, r.text
    out = r.json()
    kinds = {m["kind"]: m for m in out["measurements"]}
    assert kinds["bins"]["clique"] == ["grade"] and kinds["bins"]["sigma"] > 0
    assert kinds["keys"]["clique"] == ["school"] and kinds["keys"]["delta"] is not None
    (charge,) = service.ledger.history("students")  # one charge for all of it
    assert charge.id == out["charge_id"]
    assert set(out["data"]["school"]) <= {"north", "south", "east", None}
    assert all(v is None or 0 <= v <= 100 for v in out["data"]["grade"])
    # a column in both, and an unknown column: refused before anything is spent
    both = {**body, "select_keys": {"grade": 5}}
    r = client.post(f"{DS}/synthesize", json=both, headers=auth("cur"))
    assert r.status_code == 400 and code(r) == "invalid_parameter"
    r = client.post(
        f"{DS}/synthesize", json={**body, "quantiles": {"nope": {"n": 4}}}, headers=auth("cur")
    )
    assert r.status_code == 400
    assert len(service.ledger.history("students")) == 1

"""Schemathesis, every check (strict), against a live server: the OpenAPI is the truth.

``--checks all`` holds the server to its published schema both ways: every response
matches it (status, content type, headers, body), a schema-valid request is never refused
as malformed (``positive_data_acceptance``), a schema-violating one never accepted
(``negative_data_rejection``), a missing or bad token always gives 401 before anything
else, and a 405 names the route's real methods in ``Allow``.

Refusals a well-formed request may rightly get (400: SQL naming an unknown table, a loss
of the wrong kind for the budget, ε too small to plan; 409: the budget does not fit; 413:
a body over the configured byte limit) are declared in each route's responses;
``schemathesis.toml`` accepts exactly those statuses, never 422, so a schema-valid request
refused as malformed still fails, and ``status_code_conformance`` fails any status a route
does not declare.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _server_helpers import running
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from deniable.ledger import Ledger
from deniable.ledger.analysts import Principal
from deniable.server.app import create_app
from deniable.server.config import ConfigError, RateLimit, load_config
from deniable.server.service import Service

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"
ST = Path(sys.executable).with_name("st")

RESPONSE_TIME = "response_time = { deadline = 1.0 }"
"""The fixture's response-time policy (src/deniable/server/timing.py), off in these tests."""

MAX_TIME = 20
"""Seconds of fuzzing (the run's length; the test's own start and stop add ~10 s)."""

SCHEMATHESIS_TOML = """\
[parameters]
# The only dataset: fuzzing the name would only ever reach 404.
"path.dataset" = "students"

[checks.positive_data_acceptance]
# Documented refusals of well-formed requests (never 422: malformed input): 400 for their
# meaning, 409 for the budget, 413 for a body over server.max_request_bytes (which the
# schema cannot state: 20,000 characters of SQL may take 240,000 bytes of JSON).
expected-statuses = ["2xx", "400", "401", "403", "404", "409", "413", "429"]

[checks.negative_data_rejection]
# schemathesis's defaults, and 413: a body too large is refused before it is read.
expected-statuses = [
    "400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx",
]
"""


def _config(tmp_path: Path) -> Path:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path)
    config = tmp_path / "example.toml"
    text = config.read_text()
    for old, new in (
        ("budget = { epsilon = 2.0 }", "budget = { epsilon = 100000 }"),
        (
            "rate_limit = { per_second = 10, burst = 50 }",
            "rate_limit = { per_second = 100000, burst = 100000 }",
        ),
        # Fuzzing sends thousands of bad tokens on purpose: each must get its 401.
        (
            "failed_auth = { per_second = 1, burst = 20 }",
            "failed_auth = { per_second = 100000, burst = 100000 }",
        ),
        (
            "allowance = { students = { epsilon = 1.0 } }",
            "allowance = { students = { epsilon = 100 } }",
        ),
        # Conformance, not timing: answers leave when ready.
        (RESPONSE_TIME, 'response_time = "off"'),
    ):
        assert old in text, old
        text = text.replace(old, new)
    config.write_text(text)
    (tmp_path / "schemathesis.toml").write_text(SCHEMATHESIS_TOML)
    return config


def test_schemathesis_strict_finds_no_disagreement_with_the_schema(tmp_path: Path) -> None:
    config = _config(tmp_path)
    with Ledger(tmp_path / "ledger.db") as led:
        token = led.add_analyst("cur", role="curator")
    with running(config, workers=1, log=tmp_path / "server.log") as server:
        start = time.monotonic()
        result = subprocess.run(
            [
                str(ST),
                "run",
                f"{server.url}/openapi.json",
                "--header",
                f"Authorization: Bearer {token}",
                "--checks",
                "all",
                # A seeded run (same cases in the same order every time) bounded in time:
                # this schemathesis repeats its phases until --max-time is spent, so the run
                # takes that long; on a loaded machine it gets through fewer cases.
                "--max-examples",
                "10",
                "--max-time",
                str(MAX_TIME),
                "--seed",
                "1",
                "--no-shrink",
                # One client thread: with two, hypothesis inside schemathesis crashed in
                # CPython 3.11's ast ("AST constructor recursion depth mismatch").
                "--workers",
                "1",
                "--request-timeout",
                "20",
                # Never revoke the token the run itself uses.
                "--exclude-method",
                "DELETE",
            ],
            capture_output=True,
            text=True,
            timeout=MAX_TIME + 120,
            cwd=tmp_path,
        )
        elapsed = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-8000:]
    summary = re.search(r"(\d+) generated, (\d+) passed", output)
    operations = re.search(r"Selected: (\d+)/\d+\s+Tested: (\d+)", output)
    assert summary is not None and operations is not None, output[-3000:]
    # Every operation reached, and more than a token number of cases (a loaded machine
    # gets through fewer in MAX_TIME: ~1,200 quiet, ~430 at load 8 on 2 cores).
    assert operations[1] == operations[2] and int(summary[1]) >= 100, output[-3000:]
    print(f"schemathesis: {elapsed:.1f} s, {summary[0]}\n{output[-2500:]}")


# -- the same contract in-process: fast, and each disagreement named ---------------------------

TOKENS = {"t-cur": Principal(name="cur", role="curator")}
CUR = {"Authorization": "Bearer t-cur"}
DS = "/v1/datasets/students"
BUILDER = {"table": "students", "aggregates": [{"function": "count", "alias": "n"}]}


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path)
    path = tmp_path / "example.toml"
    path.write_text(path.read_text().replace(RESPONSE_TIME, 'response_time = "off"'))
    config = load_config(path)
    config = replace(
        config, server=replace(config.server, failed_auth=RateLimit(per_second=0.001, burst=3))
    )
    with Service(config) as service:
        app = create_app(service, authenticate=TOKENS.get)
        with TestClient(app, raise_server_exceptions=False) as c:
            yield c


def _body_schema(openapi: dict[str, Any], method: str, path: str) -> Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        "urn:openapi", Resource.from_contents(openapi, default_specification=DRAFT202012)
    )
    ref = openapi["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return Draft202012Validator({"$ref": "urn:openapi" + ref["$ref"]}, registry=registry)


# Bodies on both sides of the schema's edges. For each, the published schema and the server
# must agree: valid by the schema <=> not refused as malformed (422).
QUERY_BODIES: list[dict[str, Any]] = [
    {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 0.1},
    {"builder": BUILDER, "epsilon": 0.1},
    {"builder": {**BUILDER, "limit": 5.0}, "epsilon": 0.1},  # JSON Schema: 5.0 is an integer
    {"sql": "SELECT COUNT(*) AS n FROM students", "builder": BUILDER, "epsilon": 0.1},
    {"epsilon": 0.1},
    {"sql": None, "builder": BUILDER, "epsilon": 0.1},
    {"builder": {**BUILDER, "limit": 5.5}, "epsilon": 0.1},
    {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": True},
    {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 0},  # the service refuses 0
    # well formed, refused for their meaning (400): too small to plan; ρ on an ε budget
    {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 5e-324},
    {"sql": "SELECT COUNT(*) AS n FROM students", "rho": 0.1},
]
ALLOWANCE_BODIES: list[dict[str, Any]] = [
    {"epsilon": 0.5},
    {"epsilon": 0.5, "delta": 1e-6},
    {"rho": 0.1},  # well formed, the wrong kind for an ε cap: 400, not 422
    {},
    {"delta": 1e-6},
    {"rho": 0.1, "delta": 1e-6},
    {"epsilon": 0.5, "rho": 0.1},
    {"epsilon": None, "rho": 0.1},
]
TUNE_BODIES: list[dict[str, Any]] = [
    {"table": "students", "epsilon": 0.1, "groups": 3},
    {"table": "students", "epsilon": 0.1, "groups": 3.0},
    {"table": "students", "epsilon": 0.1, "groups": 3.5},
    {"table": "students", "epsilon": 0.1, "groups": 0},
    {"table": "students", "epsilon": 0},
]


@pytest.mark.parametrize(
    ("method", "path", "bodies"),
    [
        ("post", "/v1/datasets/{dataset}/query", QUERY_BODIES),
        ("put", "/v1/datasets/{dataset}/allowances/{analyst}", ALLOWANCE_BODIES),
        ("post", "/v1/datasets/{dataset}/tune", TUNE_BODIES),
    ],
)
def test_schema_and_validation_agree(
    client: TestClient, method: str, path: str, bodies: list[dict[str, Any]]
) -> None:
    schema = _body_schema(client.get("/openapi.json").json(), method, path)
    url = path.format(dataset="students", analyst="ann")
    for body in bodies:
        valid = schema.is_valid(body)
        r = client.request(method.upper(), url, json=body, headers=CUR)
        assert (r.status_code != 422) == valid, (body, valid, r.status_code, r.text)
        assert r.status_code < 500, r.text
    # both sides of the edge were exercised
    assert {schema.is_valid(b) for b in bodies} == {True, False}


def test_query_string_numbers_are_the_schemas_numbers(client: TestClient) -> None:
    for query in ("epsilon=1", "epsilon=0.5&prior=0.25", "epsilon=1e-3", "epsilon=-0"):
        assert client.get(f"/v1/explain?{query}", headers=CUR).status_code == 200, query
    # python's float() syntax is not JSON Schema's number: refused, never read as 10
    for query in ("epsilon=1_0", "epsilon=%201", "epsilon=infinity", "epsilon=1&prior="):
        assert client.get(f"/v1/explain?{query}", headers=CUR).status_code == 422, query


def test_allow_header_of_a_405_lists_every_method_of_the_path(client: TestClient) -> None:
    r = client.request("OPTIONS", "/v1/analysts", headers=CUR)
    assert r.status_code == 405 and r.headers["Allow"] == "GET, POST"
    r = client.request("PATCH", f"{DS}/allowances/ann", headers=CUR)
    assert r.status_code == 405 and r.headers["Allow"] == "PUT"


def test_bad_authentication_is_401_before_the_body_is_read(client: TestClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}):
        for content in ('{"sql": ', "{}", '{"sql": "SELECT 1", "builder": {}}'):
            r = client.post(
                f"{DS}/query",
                content=content,
                headers={**headers, "Content-Type": "application/json"},
            )
            assert r.status_code in (401, 429), (headers, content, r.text)
    r = client.get("/v1/explain?epsilon=abc", headers={"Authorization": "Bearer nope"})
    assert r.status_code in (401, 429), r.text


def test_failed_authentication_limit_is_configured_per_address(client: TestClient) -> None:
    # burst = 3 in the fixture: three 401s, then 429 (with Retry-After) before any token
    # is looked at, a valid one included.
    bad = {"Authorization": "Bearer nope"}
    assert [client.get("/v1/whoami", headers=bad).status_code for _ in range(3)] == [401] * 3
    r = client.get("/v1/whoami", headers=bad)
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 1
    assert client.get("/v1/whoami", headers=CUR).status_code == 429


@pytest.mark.parametrize(
    "line",
    [
        "failed_auth = { per_second = 0 }",
        "failed_auth = { burst = 0 }",
        "failed_auth = { burst = true }",
        "failed_auth = { per_second = 1, burst = 2, other = 3 }",
        "failed_auth = 5",
    ],
)
def test_failed_auth_setting_is_checked(tmp_path: Path, line: str) -> None:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path)
    config = tmp_path / "example.toml"
    text = config.read_text()
    old = "failed_auth = { per_second = 1, burst = 20 }"
    assert old in text
    config.write_text(text.replace(old, line))
    with pytest.raises(ConfigError, match=r"server\.failed_auth"):
        load_config(config)


def test_failed_auth_default_is_protective(tmp_path: Path) -> None:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path)
    config = tmp_path / "example.toml"
    text = config.read_text().replace("failed_auth = { per_second = 1, burst = 20 }\n", "")
    config.write_text(text)
    assert load_config(config).server.failed_auth == RateLimit(per_second=1.0, burst=20)

"""HTTP: accuracy before spending (analysts), tuning and the utility analysis (curators).

``POST /v1/datasets/{d}/accuracy`` is a dry run: no engine runs, nothing is charged;
``POST /v1/datasets/{d}/tune`` charges the curator like any release;
``POST /v1/datasets/{d}/utility-analysis`` is exact, NON-PRIVATE and never charged.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from _service_fixture import copy_example
from fastapi.testclient import TestClient

from deniable.curator.tune import CANDIDATES, EDGES, JOINT_BINS, JOINT_EDGES, KINDS, bin_of
from deniable.ledger.analysts import Principal
from deniable.server.app import create_app
from deniable.server.config import ServiceConfig, load_config
from deniable.server.service import Service

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"
TOKENS = {
    "t-ann": Principal(name="ann", role="analyst"),
    "t-cur": Principal(name="cur", role="curator"),
}
DS = "/v1/datasets/students"
GROUPED = "SELECT school, COUNT(*) AS n, SUM(grade) AS total FROM students GROUP BY school"


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{who}"}


def code(response: Any) -> str:
    body = response.json()
    assert set(body) == {"error"}
    return str(body["error"]["code"])


def _uneven_students(path: Path) -> pd.DataFrame:
    """The fixture's 60 students, and a few who contribute many rows over several schools."""
    frame = pd.read_csv(path)
    extra = []
    for sid, rows in ((1, 9), (2, 4), (3, 30), (4, 2)):
        for k in range(rows):
            school = ("north", "south", "east")[k % (1 + sid % 3)]
            extra.append({"student_id": sid, "school": school, "grade": 50, "age": 17})
    frame = pd.concat([frame, pd.DataFrame(extra)], ignore_index=True)
    frame.to_csv(path, index=False)
    return frame


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ServiceConfig, pd.DataFrame]:
    toml = copy_example(tmp_path)
    frame = _uneven_students(tmp_path / "students.csv")
    toml.write_text(
        toml.read_text().replace("budget = { epsilon = 2.0 }", "budget = { epsilon = 200 }")
    )
    return load_config(toml), frame


@pytest.fixture
def service(setup: tuple[ServiceConfig, pd.DataFrame]) -> Iterator[Service]:
    with Service(setup[0]) as s:
        yield s


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    app = create_app(service, authenticate=TOKENS.get)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def engine_calls(service: Service, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the dataset's engine raise on every use, recording each attempt."""
    session = service._sessions["students"]
    engine = session._engines["students"]
    calls: list[str] = []

    def refuse(*args: object, **kwargs: object) -> None:
        calls.append("engine used")
        raise AssertionError("the engine must not run")

    monkeypatch.setattr(engine, "run", refuse)
    monkeypatch.setattr(engine, "check", refuse)
    return calls


def spent(service: Service) -> Fraction:
    loss = service.ledger.spent("students")
    return Fraction(getattr(loss, "epsilon", 0))


# -- accuracy -----------------------------------------------------------------------------


def test_accuracy_reads_no_data_charges_nothing_and_is_fast(
    client: TestClient, service: Service, engine_calls: list[str]
) -> None:
    bodies: list[dict[str, object]] = [
        {"sql": GROUPED, "epsilon": 0.25},
        {"sql": GROUPED, "target": {"n": 5, "TOTAL": 400}},
        {
            "builder": {
                "table": "students",
                "group_by": ["school"],
                "aggregates": [{"function": "mean", "column": "grade", "alias": "g"}],
            },
            "epsilon": 0.5,
            "rows": 100,
        },
    ]
    for who in ("ann", "cur"):
        for body in bodies:
            r = client.post(f"{DS}/accuracy", json=body, headers=auth(who))
            assert r.status_code == 200, r.text
            assert r.json()["charged"] is False
    assert engine_calls == []
    assert spent(service) == 0
    assert service.ledger.history("students") == []
    # Measured, not asserted: ms per request in-process (a plan, no data).
    for label, body in (("epsilon", bodies[0]), ("target", bodies[1])):
        n = 20
        t0 = time.perf_counter()
        for _ in range(n):
            assert client.post(f"{DS}/accuracy", json=body, headers=auth("ann")).is_success
        ms = (time.perf_counter() - t0) * 1000 / n
        print(f"POST /accuracy with {label}: {ms:.1f} ms per request ({n} requests)")
    assert engine_calls == [] and spent(service) == 0


def test_accuracy_widths_are_the_answers_widths(client: TestClient, service: Service) -> None:
    r = client.post(f"{DS}/accuracy", json={"sql": GROUPED, "epsilon": 0.25}, headers=auth("ann"))
    assert r.status_code == 200, r.text
    body = r.json()
    assert [o["name"] for o in body["outputs"]] == ["n", "total"]
    assert body["loss"]["exact"] == {"epsilon": "1/4"}
    assert body["least_loss"] is None and body["fits"] is True
    assert body["remaining"]["exact"] == {"epsilon": "1"}  # ann's allowance
    predicted = {o["name"]: o["half_width"] for o in body["outputs"]}
    assert all(o["depends_on"] is None and o["rank_error"] is None for o in body["outputs"])
    python = service._sessions["students"].accuracy(GROUPED, epsilon=0.25)
    assert predicted == {o.name: o.half_width for o in python.outputs}
    # The answer's own widths, asked by the curator at ε = 20: counts of about 20 students
    # stay far from 0 (a noisy count below 0 is released as 0, which shortens its interval).
    dry = client.post(f"{DS}/accuracy", json={"sql": GROUPED, "epsilon": 20}, headers=auth("cur"))
    width = {o["name"]: o["half_width"] for o in dry.json()["outputs"]}["n"]
    answer = client.post(
        f"{DS}/query", json={"sql": GROUPED, "epsilon": 20}, headers=auth("cur")
    ).json()
    iv = answer["intervals"]["n"]
    widths = [h - v for v, h in zip(answer["values"]["n"], iv["high"], strict=True)]
    assert widths == [width] * 3


def test_accuracy_names_dependencies_and_rank_errors(client: TestClient) -> None:
    sql = "SELECT AVG(grade) AS g, MEDIAN(age) AS m FROM students"
    r = client.post(f"{DS}/accuracy", json={"sql": sql, "epsilon": 1}, headers=auth("ann"))
    g, m = r.json()["outputs"]
    assert g["half_width"] is None and "rows" in g["depends_on"]
    assert m["half_width"] is None and m["rank_error"] > 0 and "rank" in m["depends_on"]
    r = client.post(
        f"{DS}/accuracy", json={"sql": sql, "epsilon": 1, "rows": 50}, headers=auth("ann")
    )
    g50 = r.json()["outputs"][0]
    r = client.post(
        f"{DS}/accuracy", json={"sql": sql, "epsilon": 1, "rows": 5000}, headers=auth("ann")
    )
    g5000 = r.json()["outputs"][0]
    assert r.json()["assumed_rows"] == 5000
    assert 0 < g5000["half_width"] < g50["half_width"]


def test_accuracy_target_gives_the_least_loss(client: TestClient, service: Service) -> None:
    body = {"sql": GROUPED, "target": {"N": 4, "total": 500}}
    r = client.post(f"{DS}/accuracy", json=body, headers=auth("ann"))
    assert r.status_code == 200, r.text
    out = r.json()
    least = service._sessions["students"].budget_for(GROUPED, {"N": 4, "total": 500})
    assert out["least_loss"]["exact"] == {"epsilon": str(least.epsilon)}  # type: ignore[union-attr]
    assert out["loss"] == out["least_loss"]  # widths reported at the least loss
    for o in out["outputs"]:
        assert o["meets_target"] is True and o["half_width"] <= o["target"]
    assert [o["target"] for o in out["outputs"]] == [4, 500]  # matched case-blind
    assert out["fits"] is bool(least.epsilon <= 1)  # type: ignore[union-attr]
    # With a loss given, the widths are at that loss and the least loss is still reported.
    r = client.post(f"{DS}/accuracy", json={**body, "epsilon": 0.01}, headers=auth("ann"))
    out2 = r.json()
    assert out2["least_loss"] == out["least_loss"]
    assert out2["loss"]["exact"] == {"epsilon": "1/100"}
    assert [o["meets_target"] for o in out2["outputs"]] == [False, False]


def test_accuracy_refusals_cost_nothing(
    client: TestClient, service: Service, engine_calls: list[str]
) -> None:
    cases = [
        ({"sql": GROUPED}, "invalid_parameter"),  # neither a loss nor a target
        ({"sql": GROUPED, "target": {"nope": 1}}, "invalid_parameter"),
        ({"sql": "SELECT AVG(grade) AS g FROM students", "target": {"g": 1}}, "invalid_parameter"),
        ({"sql": GROUPED, "target": {"n": 1e-300}}, "invalid_parameter"),
        ({"sql": "SELECT * FROM students", "epsilon": 1}, "unsafe_query"),
        ({"sql": "SELECT COUNT(*) AS n FROM nowhere", "epsilon": 1}, "sql_error"),
    ]
    for body, expected in cases:
        r = client.post(f"{DS}/accuracy", json=body, headers=auth("ann"))
        assert r.status_code == 400, (body, r.text)
        assert code(r) == expected, (body, r.text)
    r = client.post(f"{DS}/accuracy", json={"epsilon": 1}, headers=auth("ann"))
    assert r.status_code == 422 and code(r) == "invalid_request"
    assert client.post("/v1/datasets/nope/accuracy", json=cases[0][0], headers=auth("ann")).json()[
        "error"
    ]["code"] in ("not_found", "unknown_dataset")
    assert engine_calls == [] and spent(service) == 0


def test_booleans_and_floats_are_not_numbers_or_integers(client: TestClient) -> None:
    bad = [
        ("accuracy", {"sql": GROUPED, "epsilon": True}),
        ("accuracy", {"sql": GROUPED, "epsilon": 1, "rows": True}),
        ("accuracy", {"sql": GROUPED, "epsilon": 1, "rows": 10.5}),
        ("accuracy", {"sql": GROUPED, "target": {"n": True}}),
        ("accuracy", {"sql": GROUPED, "epsilon": "1"}),
        ("query", {"sql": GROUPED, "epsilon": True}),
        ("tune", {"table": "students", "epsilon": True}),
        ("tune", {"table": "students", "epsilon": 1, "groups": True}),
        ("tune", {"table": "students", "epsilon": 1, "groups": 3.5}),
        ("tune", {"table": "students", "epsilon": 1, "apply": 1}),
        ("tune", {"table": "students", "epsilon": 1, "apply": "true"}),
        ("tune", {"table": "students", "epsilon": 0}),
        ("utility-analysis", {"table": "students", "group_by": "school"}),
    ]
    for route, body in bad:
        r = client.post(f"{DS}/{route}", json=body, headers=auth("cur"))
        assert r.status_code == 422, (route, body, r.text)
        assert code(r) == "invalid_request"
        assert "True" not in r.text and "true" not in r.json()["error"]["message"].lower()
    # JSON Schema's integer (the published OpenAPI) includes 10.0: it is read as 10.
    body = {"sql": GROUPED, "epsilon": 1, "rows": 10.0}
    r = client.post(f"{DS}/accuracy", json=body, headers=auth("cur"))
    assert r.status_code == 200 and r.json()["assumed_rows"] == 10, r.text


# -- tune -----------------------------------------------------------------------------------


def _reference_histograms(frame: pd.DataFrame) -> dict[str, list[int]]:
    per_pair = frame.groupby(["student_id", "school"]).size()
    per_person = {
        "rows": frame.groupby("student_id").size(),
        "groups": per_pair.groupby(level=0).size(),
        "rows_per_group": per_pair.groupby(level=0).max(),
    }
    out = {}
    for kind, values in per_person.items():
        counts = [0] * len(EDGES)
        for v in values:
            counts[bin_of(int(v))] += 1
        out[kind] = counts
    joint = [0] * JOINT_BINS**2
    for rows, groups in zip(per_person["rows"], per_person["groups"], strict=True):
        joint[joint_bin_of(int(rows)) * JOINT_BINS + joint_bin_of(int(groups))] += 1
    out["rows_by_groups"] = joint
    return out


def joint_bin_of(v: int) -> int:
    return max(i for i, low in enumerate(JOINT_EDGES) if low <= v)


def test_tune_charges_the_curator_and_proposes(
    client: TestClient, service: Service, setup: tuple[ServiceConfig, pd.DataFrame]
) -> None:
    body = {"table": "students", "group_by": ["school"], "epsilon": 100, "groups": 3}
    r = client.post(f"{DS}/tune", json=body, headers=auth("cur"))
    assert r.status_code == 200, r.text
    out = r.json()
    # The charge is committed (before the answer left) under the curator's name.
    (charge,) = service.ledger.history("students")
    assert charge.analyst == "cur" and charge.id == out["charge_id"]
    assert charge.loss == service.ledger.spent("students")
    assert spent(service) == 100
    assert out["charge"]["exact"] == {"epsilon": "100"}
    assert out["remaining"]["exact"] == {"epsilon": "100"}
    # At ε = 100 each histogram's noise has scale 4/100: P(a bin is off) = 2e^-25/(1+e^-25)
    # < 2.8e-11, over 3·76 + 42² cells < 1e-7. So the released histograms are the exact ones.
    assert set(out["histograms"]) == set(KINDS)
    assert out["histograms"] == _reference_histograms(setup[1])
    assert out["bin_low"] == list(EDGES)
    assert out["joint_bin_low"] == list(JOINT_EDGES)
    proposals = out["proposals"]
    assert len(proposals) == 10 and proposals[0] == out["best"]
    errors = [p["expected_error"] for p in proposals]
    assert errors == sorted(errors)
    assert out["applied"] is False
    assert out["configuration"] == (
        f"max_groups = {out['best']['max_groups']}\nmax_rows = {out['best']['max_rows']}"
    )
    # The table's bounds are unchanged without apply.
    meta = client.get(DS, headers=auth("cur")).json()["tables"][0]
    assert (meta["max_groups"], meta["max_rows"]) == (1, 1)


def test_tune_proposes_clamps_over_http(
    client: TestClient, service: Service, setup: tuple[ServiceConfig, pd.DataFrame]
) -> None:
    body = {
        "table": "students", "group_by": ["school"], "epsilon": 100, "groups": 3,
        "clamps": {"grade": [0, 1000]}, "clamp_workload": "avg",
    }  # fmt: skip
    r = client.post(f"{DS}/tune", json=body, headers=auth("cur"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["charge"]["exact"] == {"epsilon": "100"}  # both charges: 50 + 50
    charges = service.ledger.history("students")
    assert [c.id for c in charges] == [out["charge_id"], out["clamp_charge_id"]]
    grade = out["clamps"]["grade"]
    assert grade["workload"] == "avg" and 0 <= grade["low"] < grade["high"] <= 1000
    grades = setup[1]["grade"]
    assert grade["low"] < grades.median() < grade["high"]
    chosen = [
        r for r in grade["trade_off"] if (r["low"], r["high"]) == (grade["low"], grade["high"])
    ]
    assert len(chosen) == 1
    assert chosen[0]["expected_error"] == min(r["expected_error"] for r in grade["trade_off"])
    bad = {**body, "clamps": {"grade": [0]}}
    assert client.post(f"{DS}/tune", json=bad, headers=auth("cur")).status_code == 422
    bad = {**body, "clamps": {"school": [0, 1]}}
    r = client.post(f"{DS}/tune", json=bad, headers=auth("cur"))
    assert r.status_code == 400 and "not numeric" in r.text
    assert len(service.ledger.history("students")) == 2  # the refusals spent nothing


def test_tune_apply_sets_the_bounds_in_this_process(client: TestClient) -> None:
    body = {"table": "students", "group_by": ["school"], "epsilon": 100, "groups": 3}
    r = client.post(f"{DS}/tune", json={**body, "apply": True}, headers=auth("cur"))
    assert r.status_code == 200, r.text
    best = r.json()["best"]
    assert r.json()["applied"] is True
    assert (best["max_groups"], best["max_rows"]) != (1, 1)  # student 3 has 30 rows
    meta = client.get(DS, headers=auth("ann")).json()["tables"][0]
    assert (meta["max_groups"], meta["max_rows"]) == (best["max_groups"], best["max_rows"])
    answer = client.post(f"{DS}/query", json={"sql": GROUPED, "epsilon": 0.1}, headers=auth("ann"))
    assert answer.status_code == 200, answer.text
    assert (answer.json()["max_groups"], answer.json()["max_rows"]) == (
        best["max_groups"],
        best["max_rows"],
    )


def test_tune_refused_by_the_budget_before_the_engine(
    client: TestClient, service: Service, engine_calls: list[str]
) -> None:
    r = client.post(f"{DS}/tune", json={"table": "students", "epsilon": 201}, headers=auth("cur"))
    assert r.status_code == 409 and code(r) == "budget_exceeded"
    assert engine_calls == [] and spent(service) == 0


def test_tune_refusals_name_the_problem(client: TestClient, service: Service) -> None:
    for body in (
        {"table": "nope", "epsilon": 1},
        {"table": "schools", "epsilon": 1},  # a public table
        {"table": "students", "group_by": ["nope"], "epsilon": 1},
    ):
        r = client.post(f"{DS}/tune", json=body, headers=auth("cur"))
        assert r.status_code == 400 and code(r) == "invalid_parameter", r.text
    assert spent(service) == 0


def test_analysts_are_refused_tune_and_utility_analysis(
    client: TestClient, service: Service, engine_calls: list[str]
) -> None:
    for route, body in (
        ("tune", {"table": "students", "group_by": ["school"], "epsilon": 1}),
        ("utility-analysis", {"table": "students", "group_by": ["school"]}),
    ):
        r = client.post(f"{DS}/{route}", json=body, headers=auth("ann"))
        assert r.status_code == 403, r.text
        assert r.json() == {"error": {"code": "forbidden", "message": "only a curator may do this"}}
    assert engine_calls == [] and spent(service) == 0
    assert service.ledger.history("students") == []


# -- utility analysis -----------------------------------------------------------------------


def _reference_share(frame: pd.DataFrame, m: int, r: int) -> float:
    kept = 0.0
    for _, person in frame.groupby("student_id"):
        sizes = person.groupby("school").size()
        kept += min(1.0, m / len(sizes)) * sum(min(int(n), r) for n in sizes)
    return kept / len(frame)


def test_utility_analysis_is_exact_labelled_and_never_charged(
    client: TestClient, service: Service, setup: tuple[ServiceConfig, pd.DataFrame]
) -> None:
    frame = setup[1]
    body = {"table": "students", "group_by": ["school"]}
    r = client.post(f"{DS}/utility-analysis", json=body, headers=auth("cur"))
    assert r.status_code == 200, r.text
    assert r.headers["cache-control"] == "no-store"
    out = r.json()
    assert out["non_private"] is True and out["charged"] is False
    assert out["label"].startswith("NON-PRIVATE")
    assert out["rows"] == len(frame)
    assert out["candidates"] == list(CANDIDATES)
    for i, m in enumerate(CANDIDATES[:6]):
        for j, rr in enumerate(CANDIDATES[:6]):
            assert out["kept_share"][i][j] == pytest.approx(_reference_share(frame, m, rr))
    assert out["kept_share"][0][0] < 1.0  # the bound cuts rows
    # Nothing charged, nothing written, nothing stored as an answer.
    assert spent(service) == 0
    assert service.ledger.history("students") == []
    again = client.post(f"{DS}/utility-analysis", json=body, headers=auth("cur")).json()
    # computed afresh (not a stored answer): the same figures up to the order in which the
    # engine's threads add the doubles (the last bits may differ from run to run)
    assert {k: v for k, v in again.items() if k != "kept_share"} == {
        k: v for k, v in out.items() if k != "kept_share"
    }
    assert np.allclose(again["kept_share"], out["kept_share"], rtol=1e-12, atol=0)
    assert service.ledger.history("students") == []


def test_openapi_documents_the_new_routes(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for route, statuses in (
        ("accuracy", {"400", "404", "422"}),
        ("tune", {"400", "403", "404", "409", "422"}),
        ("utility-analysis", {"400", "403", "404", "422"}),
    ):
        op = spec["paths"][f"/v1/datasets/{{dataset}}/{route}"]["post"]
        assert statuses <= set(op["responses"]), route
        assert "Privacy loss" in op["description"], route
    schemas = spec["components"]["schemas"]
    assert schemas["TuneRequest"]["properties"]["apply"]["type"] == "boolean"
    assert schemas["TuneRequest"]["properties"]["groups"]["type"] == "integer"
    assert "examples" in schemas["AccuracyRequest"]
    assert schemas["UtilityAnalysisResponse"]["properties"]["non_private"]["const"] is True


def test_failed_authentication_is_rate_limited(client: TestClient) -> None:
    """Guessing tokens was never slowed down (issue 23): after a burst of failures the
    address is refused with 429 before any token is looked at."""
    from deniable.server.app import FAILED_AUTH_BURST

    bad = {"Authorization": "Bearer t-guess"}
    codes = [client.get(f"{DS}/budget", headers=bad).status_code for _ in range(FAILED_AUTH_BURST)]
    assert codes == [401] * FAILED_AUTH_BURST
    blocked = client.get(f"{DS}/budget", headers=bad)
    assert blocked.status_code == 429 and float(blocked.headers["Retry-After"]) > 0
    # even a valid token from that address waits: the guess cannot be told apart
    assert client.get(f"{DS}/budget", headers=auth("ann")).status_code == 429

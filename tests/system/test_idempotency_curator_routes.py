"""The curator's charging routes (tune, synthesize) honour an Idempotency-Key, as queries do.

A real ``deniable serve`` (one worker) behind the TCP proxy of ``test_client_server``: the
proxy lets the server commit and answer, then cuts the connection halfway through the
response (``"drop"``). The retry with the same key gets the first response and the ledger
holds one charge; the same key with another body is refused (422
``idempotency_key_reused``, the query routes' error), while a key is scoped to its route;
the negative control sends the same broken exchange without a key and is charged twice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
from _server_helpers import Server, running
from test_client_server import _body, _idempotency_key, proxy

import deniable.client as dc
from deniable.accounting.loss import EpsilonDelta
from deniable.errors import LedgerError
from deniable.ledger import Charge, Ledger
from deniable.ledger.analysts import Principal
from deniable.server.config import load_config
from deniable.server.errors import IdempotencyConflict
from deniable.server.service import RESPONSE_FORMAT, KeyedKind, Service, ledger_key

pytestmark = pytest.mark.timeout(120)

CONFIG = """
ledger = "ledger.db"

[server]
rate_limit = { per_second = 100000, burst = 100000 }

[datasets.shop]
source = "shop.csv"
table = "shop"
privacy_unit = "person"
max_groups = 2
max_rows = 3
bounds = { cost = [0, 100] }
public_keys = { ward = ["a", "b", "c"] }
budget = { epsilon = 100, delta = 1e-3 }
response_time = "off"
"""

FAST = dc.RetryPolicy(retries=3, backoff=0.05)
TUNE = {"table": "shop", "epsilon": 0.25, "group_by": ["ward"], "groups": 3}
SYNTH = {"table": "shop", "rows": 5000, "epsilon": 1.0, "delta": 1e-6, "method": "mst"}


@dataclass
class Deployment:
    server: Server
    ledger: Path
    token: str


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("idem")
    rows = ["person,ward,cost"]
    rows += [f"{i % 60},{'abc'[i % 3]},{(i * 7) % 90}" for i in range(400)]
    (folder / "shop.csv").write_text("\n".join(rows) + "\n")
    (folder / "service.toml").write_text(CONFIG)
    with Ledger(folder / "ledger.db") as led:
        token = led.add_analyst("cur", role="curator")
    with running(folder / "service.toml", workers=1, log=folder / "server.log") as server:
        yield Deployment(server, folder / "ledger.db", token)


def _charges(deployment: Deployment, prefix: str) -> list[Charge]:
    with Ledger(deployment.ledger) as led:
        return [c for c in led.history("shop") if c.query_text.startswith(prefix)]


def _post(url: str, token: str, route: str, body: dict[str, Any], key: str | None) -> Any:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        return client.post(f"/v1/datasets/shop/{route}", json=body)


def _without_remaining(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k != "remaining"}


ROUTES = [
    ("tune", TUNE, "contribution histograms", "tune"),
    ("synthesize", SYNTH, "synthetic data", "synth"),
]


@pytest.mark.parametrize(("route", "body", "what", "kind"), ROUTES)
def test_a_retry_after_the_commit_returns_the_first_response_charged_once(
    deployment: Deployment, route: str, body: dict[str, Any], what: str, kind: KeyedKind
) -> None:
    before = len(_charges(deployment, what))
    key = str(uuid.uuid4())
    # request 0 is committed and answered by the server, then cut halfway to the client
    with proxy(deployment.server, lambda i: "drop" if i == 0 else "pass") as p:
        with pytest.raises(httpx.HTTPError):
            _post(p.url, deployment.token, route, body, key)
        retried = _post(p.url, deployment.token, route, body, key)
    assert [e.action for e in p.exchanges] == ["drop", "pass"]
    assert retried.status_code == 200, retried.text
    first = httpx.Response(200, content=_body(p.exchanges[0].response)).json()
    again = retried.json()
    # the same response: the same charge, the same noisy histograms or synthetic rows
    assert _without_remaining(again) == _without_remaining(first)
    charged = _charges(deployment, what)
    assert len(charged) == before + 1
    assert charged[-1].id == again["charge_id"]
    assert charged[-1].idempotency_key == ledger_key(kind, key)  # scoped to the route
    # stored with the charge, compressed; a synthetic release keeps its own record too
    with Ledger(deployment.ledger) as led:
        stored = led.answer_for(again["charge_id"])
    assert stored is not None and stored.startswith(RESPONSE_FORMAT + b"\n")
    header = json.loads(stored.split(b"\n")[1])
    assert ("record" in header) == (route == "synthesize")
    assert len(stored) < len(_body(p.exchanges[0].response))


@pytest.mark.parametrize(("route", "body", "what", "kind"), ROUTES)
def test_negative_control_without_a_key_the_retry_is_charged_again(
    deployment: Deployment, route: str, body: dict[str, Any], what: str, kind: KeyedKind
) -> None:
    before = len(_charges(deployment, what))
    with proxy(deployment.server, lambda i: "drop" if i == 0 else "pass") as p:
        with pytest.raises(httpx.HTTPError):
            _post(p.url, deployment.token, route, body, None)
        retried = _post(p.url, deployment.token, route, body, None)
    assert retried.status_code == 200, retried.text
    first = httpx.Response(200, content=_body(p.exchanges[0].response)).json()
    assert first["charge_id"] != retried.json()["charge_id"]
    assert len(_charges(deployment, what)) == before + 2


def test_the_same_key_with_another_body_is_refused_as_for_queries(
    deployment: Deployment,
) -> None:
    url, token = deployment.server.url, deployment.token
    query = {"sql": "SELECT COUNT(*) AS n FROM shop WHERE cost >= 1", "epsilon": 1}
    first = {"tune": TUNE, "synthesize": SYNTH, "query": query}
    other = {
        "tune": {**TUNE, "epsilon": 0.5},
        "synthesize": {**SYNTH, "rows": 4999},
        "query": {**query, "epsilon": 2},
    }
    before = len(_charges(deployment, ""))
    for route in first:
        key = str(uuid.uuid4())
        assert _post(url, token, route, first[route], key).status_code == 200
        r = _post(url, token, route, other[route], key)
        assert r.status_code == 422, r.text
        assert r.json()["error"] == {
            "code": "idempotency_key_reused",
            "message": "this Idempotency-Key was already used for another request (or other "
            "parameters); use a new key for a new request",
        }
    assert len(_charges(deployment, "")) == before + 3  # the three first requests only


def test_a_key_is_scoped_to_its_route(deployment: Deployment) -> None:
    """The same key on a query, a tuning and a synthesis names three requests, each charged
    once and each retried to its own response (a retry goes where its request went)."""
    url, token = deployment.server.url, deployment.token
    query = {"sql": "SELECT COUNT(*) AS n FROM shop WHERE cost >= 2", "epsilon": 1}
    bodies = {"query": query, "tune": TUNE, "synthesize": SYNTH}
    before = len(_charges(deployment, ""))
    key = str(uuid.uuid4())
    first = {route: _post(url, token, route, body, key).json() for route, body in bodies.items()}
    again = {route: _post(url, token, route, body, key).json() for route, body in bodies.items()}
    for route in bodies:
        assert again[route]["charge_id"] == first[route]["charge_id"], route
    assert len({first[route]["charge_id"] for route in bodies}) == 3
    assert len(_charges(deployment, "")) == before + 3


def test_the_client_resends_tune_and_synthesize_with_the_same_key(
    deployment: Deployment,
) -> None:
    # requests 0 (whoami) and 2 pass; 1 (tune) and 3 (synthesize) are answered, then cut
    with (
        proxy(deployment.server, lambda i: "drop" if i in (1, 3) else "pass") as p,
        dc.connect_curator(p.url, deployment.token, retry=FAST) as client,
    ):
        tuned = client.tune("shop", "shop", epsilon=0.25, group_by=["ward"], groups=3)
        assert [e.action for e in p.exchanges] == ["pass", "drop", "pass"]
        table = client.synthesize("shop", "shop", rows=2000, epsilon=1.0, delta=1e-6)
    assert [e.action for e in p.exchanges] == ["pass", "drop", "pass", "drop", "pass"]
    keys: list[str] = []
    for broken, resent in ((1, 2), (3, 4)):
        sent = _idempotency_key(p.exchanges[broken].request)
        assert sent is not None and _idempotency_key(p.exchanges[resent].request) == sent
        keys.append(sent.decode())
    first_tune = httpx.Response(200, content=_body(p.exchanges[1].response)).json()
    assert _without_remaining(tuned) == _without_remaining(first_tune)
    first_synth = httpx.Response(200, content=_body(p.exchanges[3].response)).json()
    expected = pd.DataFrame(first_synth["data"], columns=first_synth["columns"])
    pd.testing.assert_frame_equal(table, expected)
    meta = table.attrs["deniable"]
    assert meta["charge_id"] == first_synth["charge_id"]
    assert meta["charge"]["exact"] == {"epsilon": "1", "delta": "1/1000000"}
    # one charge each, under the key the client sent on both attempts
    kinds: tuple[KeyedKind, KeyedKind] = ("tune", "synth")
    for key, what, kind in zip(keys, ("contribution", "synthetic"), kinds, strict=True):
        scoped = ledger_key(kind, key)
        (charge,) = [c for c in _charges(deployment, what) if c.idempotency_key == scoped]
        assert charge.id in (tuned["charge_id"], meta["charge_id"])
    with (
        dc.connect_curator(deployment.server.url, deployment.token) as client,
        pytest.raises(IdempotencyConflict),
    ):
        client.tune("shop", "shop", epsilon=0.5, idempotency_key=keys[0])  # another body


def test_a_retry_after_the_charge_pays_once_through_the_budget(deployment: Deployment) -> None:
    """The budget moves by one charge whatever the number of resends."""
    with dc.connect_curator(deployment.server.url, deployment.token) as client:
        before = client.budget("shop").spent
        key = str(uuid.uuid4())
        first = client.tune("shop", "shop", epsilon=0.125, idempotency_key=key)
        second = client.tune("shop", "shop", epsilon=0.125, idempotency_key=key)
        after = client.budget("shop").spent
    assert _without_remaining(first) == _without_remaining(second)
    assert isinstance(before, EpsilonDelta) and isinstance(after, EpsilonDelta)
    assert after.epsilon - before.epsilon == Fraction(1, 8)


def test_a_retry_that_overtakes_the_first_attempt_is_charged_once(
    deployment: Deployment,
) -> None:
    """The proxy resets the client while the server still works and the retry leaves at
    once: it finds no charge yet (its own release then meets the ledger's refusal of a
    second charge with the key) or the first charge before its response is stored (it
    waits for it). Either way: the first response, one charge."""
    before = len(_charges(deployment, "synthetic data"))
    key = str(uuid.uuid4())
    body = {**SYNTH, "method": "aim", "rows": 20_000}
    with proxy(deployment.server, lambda i: "cut" if i == 0 else "pass") as p:
        with pytest.raises(httpx.HTTPError):
            _post(p.url, deployment.token, "synthesize", body, key)
        retried = _post(p.url, deployment.token, "synthesize", body, key)
    assert retried.status_code == 200, retried.text
    charged = _charges(deployment, "synthetic data")
    assert len(charged) == before + 1 and charged[-1].id == retried.json()["charge_id"]
    assert charged[-1].idempotency_key == ledger_key("synth", key)


def test_a_release_that_fails_after_its_charge_keeps_its_record_and_its_key(
    tmp_path: Path,
) -> None:
    """In process: the response cannot be built after the charge (a bug). The synthetic
    release's own record is stored with the charge as for an unkeyed release, and a retry
    with the key is told the charge stands (never charged again)."""
    (tmp_path / "shop.csv").write_text(
        "person,ward,cost\n"
        + "".join(f"{i % 60},{'abc'[i % 3]},{(i * 7) % 90}\n" for i in range(400))
    )
    (tmp_path / "service.toml").write_text(CONFIG)
    with Service(load_config(tmp_path / "service.toml")) as s:
        s.ledger.add_analyst("cur", role="curator")
        cur = Principal(name="cur", role="curator")

        def broken() -> bytes:
            s.synthesize(cur, "shop", "shop", rows=100, epsilon=1.0, delta=1e-6)
            raise RuntimeError("the response could not be built")

        def keyed() -> bytes:
            return s.keyed_release(
                cur, "shop", kind="synth", request="{}", idempotency_key="k", release=broken
            )

        with pytest.raises(RuntimeError):
            keyed()
        (charge,) = s.ledger.history("shop")
        record = json.loads(s.ledger.answer_for(charge.id) or b"null")
        assert record["synth"]["method"] == "mst" and record["events"]
        with pytest.raises(LedgerError, match="charge, which stands"):
            keyed()
        assert len(s.ledger.history("shop")) == 1

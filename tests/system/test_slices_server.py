"""Issue 23 through a real `deniable serve`: own release numbers, own slice, reserved slices.

One server (uvicorn, one worker, response-time policy off) for the module; each test has a
dataset of its own. Analysts ann, bob and carl, curator cur. Checked through every surface an
analyst or curator uses: raw HTTP (the JSON the web console reads: ``history``, ``budget``,
``query``), the Python client (``deniable.client``), and the command line on the same ledger
(``deniable analyst allow --reserve``, ``deniable budget``, ``deniable query --as``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest
from _server_helpers import Server, running

import deniable.client as dc
from deniable.accounting.loss import Epsilon
from deniable.errors import BudgetExceeded, InvalidParameter
from deniable.ledger import Ledger

pytestmark = pytest.mark.timeout(180)

F = Fraction
DATASETS = ("numbers", "policy", "reserve", "cli")
CONFIG = (
    """
ledger = "ledger.db"

[server]
rate_limit = { per_second = 100000, burst = 100000 }
"""
    + "".join(
        f"""
[datasets.{name}]
source = "data.csv"
table = "t"
privacy_unit = "row"
budget = {{ epsilon = {10 if name == "numbers" else 1} }}
response_time = "off"
"""
        for name in DATASETS
    )
    + """
[analysts.ann]
allowance = { policy = { epsilon = 0.5 } }
"""
)


@dataclass
class Deployment:
    server: Server
    folder: Path
    tokens: dict[str, str]

    def http(self, who: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.server.url,
            headers={"Authorization": f"Bearer {self.tokens[who]}"},
            timeout=60,
        )


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    folder = tmp_path_factory.mktemp("slices")
    (folder / "data.csv").write_text("x\n" + "\n".join(str(i % 7) for i in range(200)) + "\n")
    (folder / "service.toml").write_text(CONFIG)
    with Ledger(folder / "ledger.db") as led:
        tokens = {n: led.add_analyst(n, role="analyst") for n in ("ann", "bob", "carl")}
        tokens["cur"] = led.add_analyst("cur", role="curator")
    with running(folder / "service.toml", workers=1, log=folder / "server.log") as server:
        yield Deployment(server, folder, tokens)


def ask(client: httpx.Client, dataset: str, epsilon: float, sql: str = "") -> httpx.Response:
    body = {"sql": sql or "SELECT COUNT(*) AS n FROM t", "epsilon": epsilon}
    return client.post(f"/v1/datasets/{dataset}/query", json=body)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def eps(doc: dict[str, Any]) -> Fraction:
    """The exact ε of a ``LossOut`` (its ``exact`` text when given, else its float)."""
    exact = doc.get("exact")
    if isinstance(exact, dict) and "epsilon" in exact:
        return Fraction(exact["epsilon"])
    return Fraction(str(doc["epsilon"]))


# -- release numbers --------------------------------------------------------------------------


def test_analysts_see_their_own_release_numbers(deployment: Deployment) -> None:
    order = ["ann", "ann", "bob", "bob", "ann", "bob", "ann"]
    seen: dict[str, list[int]] = {"ann": [], "bob": []}
    clients = {who: deployment.http(who) for who in ("ann", "bob", "cur")}
    for i, who in enumerate(order):
        body = ok(ask(clients[who], "numbers", 0.01 * (i + 1)))  # distinct: never a replay
        seen[who].append(body["charge_id"])
    assert seen == {"ann": [1, 2, 3, 4], "bob": [1, 2, 3]}  # bob's between ann's don't show
    # the history the console lists (GET …/history): the same numbers, newest last
    history = ok(clients["ann"].get("/v1/datasets/numbers/history"))
    assert [r["id"] for r in history] == [1, 2, 3, 4]
    assert [r["number"] for r in history] == [1, 2, 3, 4]
    # a replay of her own query names her own release
    replay = ok(ask(clients["ann"], "numbers", 0.01))
    assert replay["cached"] and replay["charge_id"] == 1
    # the curator's ledger: global ids (commit order) with each analyst's number beside
    ledger = ok(clients["cur"].get("/v1/datasets/numbers/ledger"))
    ids = [r["id"] for r in ledger]
    assert ids == sorted(ids) and len(ids) == 7
    assert [(r["analyst"], r["number"]) for r in ledger] == [
        ("ann", 1),
        ("ann", 2),
        ("bob", 1),
        ("bob", 2),
        ("ann", 3),
        ("bob", 3),
        ("ann", 4),
    ]
    assert [r["id"] for r in ledger if r["analyst"] == "ann"] != [1, 2, 3, 4]  # globals differ
    # the Python client: answers and history agree on her numbers
    with dc.connect(deployment.server.url, deployment.tokens["ann"]) as ann:
        answer = ann.sql("numbers", "SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert answer.metadata.charge_id == 5
        assert [r.id for r in ann.history("numbers")] == [1, 2, 3, 4, 5]
        again = ann.sql("numbers", "SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        assert again.cached and again.metadata.charge_id == 5
        assert again.metadata.cost == Epsilon(epsilon=F(1, 2))  # found in her history by number
    for c in clients.values():
        c.close()


# -- an analyst's own slice ---------------------------------------------------------------------


def test_an_analyst_sees_only_their_own_slice(deployment: Deployment) -> None:
    ann, bob = deployment.http("ann"), deployment.http("bob")
    ok(ask(bob, "policy", 0.3))
    budget = ok(ann.get("/v1/datasets/policy/budget"))
    assert eps(budget["remaining"]) == F(1, 2)  # her allowance binds: bob's 0.3 doesn't show
    assert budget["reserved"] is None and eps(budget["spent"]) == 0
    # more than the dataset's 0.7 left: the engine's early check refuses it from the whole
    # budget, but she is told only her own figure (0.5), never the dataset's 0.7
    early = ask(ann, "policy", 0.8)
    assert early.status_code == 409, early.text
    assert eps(early.json()["error"]["remaining"]) == F(1, 2)
    assert "ε = 0.5" in early.json()["error"]["message"]
    assert "0.7" not in early.json()["error"]["message"]
    ok(ask(bob, "policy", 0.65))  # 0.95 spent: the shared budget now binds
    assert eps(ok(ann.get("/v1/datasets/policy/budget"))["remaining"]) == F(1, 20)
    refused = ask(ann, "policy", 0.1)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["code"] == "budget_exceeded"
    assert eps(error["remaining"]) == F(1, 20)
    assert "ε = 0.05" in error["message"] and "shared budget" in error["message"]
    for leak in ("0.95", "0.5", "cap", "bob"):  # no global figure, no one else
        assert leak not in error["message"], (leak, error["message"])
    ann.close()
    bob.close()


# -- reserved slices -------------------------------------------------------------------------


def test_a_curator_reserves_a_slice_over_http_and_the_client(deployment: Deployment) -> None:
    url = deployment.server.url
    with dc.connect_curator(url, deployment.tokens["cur"]) as cur:
        budget = cur.set_allowance("reserve", "bob", epsilon=0.34, reserve=True)
        assert budget.reserved == Epsilon(epsilon=F(34, 100))
        assert budget.remaining == Epsilon(epsilon=F(34, 100))
        assert cur.allowances("reserve")["bob"].reserved == Epsilon(epsilon=F(34, 100))
    carl, bob = deployment.http("carl"), deployment.http("bob")
    ok(ask(carl, "reserve", 0.5))  # carl has no allowance: he may not touch bob's 0.34
    refused = ask(carl, "reserve", 0.2)
    assert refused.status_code == 409
    assert eps(refused.json()["error"]["remaining"]) == F(16, 100)
    assert eps(ok(bob.get("/v1/datasets/reserve/budget"))["remaining"]) == F(34, 100)
    # a reservation larger than what is unspent and unreserved is refused, clearly (ann
    # has spent nothing here: all of hers would have to be held back)
    too_big = deployment.http("cur").put(
        "/v1/datasets/reserve/allowances/ann", json={"epsilon": 0.2, "reserve": True}
    )
    assert too_big.status_code == 400, too_big.text
    message = too_big.json()["error"]["message"]
    assert "exceeds what is unspent and unreserved" in message and "ε = 0.16" in message
    with (
        dc.connect_curator(url, deployment.tokens["cur"]) as cur,
        pytest.raises(InvalidParameter, match="unspent and unreserved"),
    ):
        cur.set_allowance("reserve", "ann", epsilon=0.17, reserve=True)
    with dc.connect(url, deployment.tokens["carl"]) as client:
        with pytest.raises(BudgetExceeded) as info:
            client.sql("reserve", "SELECT COUNT(*) AS n FROM t", epsilon=0.17)
        assert info.value.remaining == Epsilon(epsilon=F(16, 100))
    # bob spends the whole of his reservation, exactly
    ok(ask(bob, "reserve", 0.3))
    ok(ask(bob, "reserve", 0.04))
    assert eps(ok(bob.get("/v1/datasets/reserve/budget"))["remaining"]) == 0
    carl.close()
    bob.close()


def cli(*args: str, cwd: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "deniable", *args, "--json"],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_the_command_line_reserves_and_numbers(deployment: Deployment) -> None:
    folder = deployment.folder
    config = str(folder / "service.toml")
    out = cli("analyst", "allow", "carl", "--dataset", "cli", "--epsilon", "1/4", "--reserve",
              "--config", config, cwd=folder)  # fmt: skip
    assert out["reserved"] == {"type": "epsilon", "epsilon": "1/4"}
    # the running server reads it from the ledger at once
    carl = ok(deployment.http("carl").get("/v1/datasets/cli/budget"))
    assert eps(carl["reserved"]) == F(1, 4)
    ok(ask(deployment.http("bob"), "cli", 0.5))
    refused = ask(deployment.http("bob"), "cli", 0.3)  # only 0.25 is unreserved
    assert refused.status_code == 409
    report = cli("budget", "--config", config, "--dataset", "cli", cwd=folder)
    (ds,) = report["datasets"]
    rows = {a["analyst"]: a for a in ds["analysts"]}
    assert rows["carl"]["reserved"] == {"type": "epsilon", "epsilon": "1/4"}
    assert rows["carl"]["remaining"] == {"type": "epsilon", "epsilon": "1/4"}
    assert rows["bob"]["remaining"] == {"type": "epsilon", "epsilon": "1/4"}
    # an analyst's query from the command line shows their own release number
    answer = cli("query", "SELECT COUNT(*) AS n FROM t", "--config", config,
                 "--dataset", "cli", "--as", "bob", "--epsilon", "0.125", cwd=folder)  # fmt: skip
    assert answer["charge_id"] == 2
    history = cli("ledger", "history", "--config", config, "--dataset", "cli", cwd=folder)
    assert [(c["analyst"], c["number"]) for c in history["charges"]] == [("bob", 1), ("bob", 2)]

"""Graphs through the service: configuration, Service.query, the HTTP API, budget and replays.

The graph is tiny and known: edges {1,2}, {2,3}, {1,3}, {3,4}, {4,5} (one triangle; degrees
2, 2, 3, 2, 1) and cities x, y, x, y, z for nodes 1..5. Exact values are checked by asking
with a huge ε (1000): the discrete Laplace noise of scale Δ/ε (Δ ≤ 10 here) is non-zero with
probability below 2·e^(-100), so a released value equals the exact one except with
probability far below 1e-6 (no test here would pass with the graph path deleted: every one
reads a value, a charge or a refusal of it).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from deniable.accounting.loss import Epsilon, Rho
from deniable.errors import BudgetExceeded, InvalidParameter, SQLError, UnsafeQuery
from deniable.ledger.analysts import Principal
from deniable.query.builder import Query, count
from deniable.server.app import create_app
from deniable.server.config import ConfigError, ServiceConfig, load_config
from deniable.server.errors import IdempotencyConflict
from deniable.server.service import Service

ANN = Principal(name="ann", role="analyst")
BOB = Principal(name="bob", role="analyst")
CUR = Principal(name="cur", role="curator")
TOKENS = {"t-ann": ANN, "t-bob": BOB, "t-cur": CUR}
BIG = 1000  # ε per query: exact answers except with probability < 1e-40 (module docstring)

EDGES = "a,b\n1,2\n2,3\n1,3\n3,4\n4,5\n"
PEOPLE = "id,city\n1,x\n2,y\n3,x\n4,y\n5,z\n"
STUDENTS = "student_id,grade\n1,50\n2,60\n3,70\n"

EDGE_GRAPH = """
[[datasets.school.graphs]]
name = "friends"
source = "edges.csv"
source_col = "a"
target_col = "b"
unit = "edge"
max_degree = 5
"""
NODE_GRAPH = """
[[datasets.school.graphs]]
name = "follows"
source = "edges.csv"
source_col = "a"
target_col = "b"
unit = "node"
max_degree = 5
nodes = "people.csv"
node_key = "id"
domains = { city = ["x", "y", "z"] }
"""
SOCIAL = """
[datasets.social]
budget = { epsilon = 5000 }
[[datasets.social.graphs]]
name = "links"
source = "edges.csv"
source_col = "a"
target_col = "b"
unit = "edge"
max_degree = 5
"""


def write(tmp_path: Path, body: str, *, share: bool = False, cap: str = "10000") -> Path:
    """A configuration with dataset ``school`` (students + graphs in ``body``)."""
    (tmp_path / "edges.csv").write_text(EDGES)
    (tmp_path / "people.csv").write_text(PEOPLE)
    (tmp_path / "students.csv").write_text(STUDENTS)
    head = f"""
    ledger = "ledger.db"
    [server]
    share_replays = {"true" if share else "false"}
    [datasets.school]
    source = "students.csv"
    table = "students"
    privacy_unit = "student_id"
    max_groups = 1
    max_rows = 1
    budget = {{ epsilon = {cap} }}
    """
    path = tmp_path / "service.toml"
    path.write_text(textwrap.dedent(head) + textwrap.dedent(body))
    return path


@pytest.fixture
def config(tmp_path: Path) -> ServiceConfig:
    return load_config(write(tmp_path, EDGE_GRAPH + NODE_GRAPH + SOCIAL))


@pytest.fixture
def service(config: ServiceConfig) -> Iterator[Service]:
    with Service(config) as s:
        yield s


def values(answer: object, column: str) -> list[object]:
    return list(answer.to_pandas()[column])  # type: ignore[attr-defined]


def spent(service: Service, dataset: str, analyst: str | None = None) -> Epsilon:
    loss = service.budget(dataset, analyst=analyst).spent
    assert isinstance(loss, Epsilon)
    return loss


# -- configuration ------------------------------------------------------------------------------


def test_graphs_are_parsed_with_paths_relative_to_the_file(config: ServiceConfig) -> None:
    school = config.datasets["school"]
    friends, follows = school.graphs
    assert (friends.name, friends.unit, friends.max_degree) == ("friends", "edge", 5)
    assert friends.source == config.path.parent / "edges.csv"  # type: ignore[union-attr]
    assert (friends.nodes, friends.node_key, dict(friends.domains)) == (None, None, {})
    assert follows.nodes == config.path.parent / "people.csv"  # type: ignore[union-attr]
    assert (follows.unit, follows.node_key) == ("node", "id")
    assert dict(follows.domains) == {"city": ("x", "y", "z")}
    assert school.has_table


def test_a_graph_only_dataset_needs_no_source(config: ServiceConfig) -> None:
    social = config.datasets["social"]
    assert social.source is None and not social.has_table
    assert [g.name for g in social.graphs] == ["links"]


GOOD = {
    "name": '"g"',
    "source": '"edges.csv"',
    "source_col": '"a"',
    "target_col": '"b"',
    "unit": '"edge"',
    "max_degree": "5",
}


def graph_entry(**changes: str | None) -> str:
    keys = {**GOOD, **changes}
    lines = [f"{k} = {v}" for k, v in keys.items() if v is not None]
    return "[[datasets.school.graphs]]\n" + "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("graphs = 3\n", r"datasets\.school\.graphs must be an array of tables"),
        ("graphs = [1]\n", r"datasets\.school\.graphs\[0\] must be a table"),
        (graph_entry(colour='"red"'), r"unknown key 'colour' in datasets\.school\.graphs\[0\]"),
        (graph_entry(name=None), r"graphs\[0\]\.name is missing: write name = "),
        (graph_entry(source=None), r"graphs\[0\]\.source is missing: write source = "),
        (graph_entry(source_col=None), r"graphs\[0\]\.source_col is missing"),
        (graph_entry(target_col=None), r"graphs\[0\]\.target_col is missing"),
        (graph_entry(unit=None), r'graphs\[0\]\.unit is missing: write unit = "edge"'),
        (graph_entry(max_degree=None), r"graphs\[0\]\.max_degree is missing"),
        (graph_entry(name='""'), r"graphs\[0\]\.name must be a non-empty name"),
        (graph_entry(source_col="1"), r"graphs\[0\]\.source_col must be a non-empty name"),
        (graph_entry(target_col='"a"'), r"source_col and target_col must be two different"),
        (graph_entry(unit='"person"'), r'graphs\[0\]\.unit: write unit = "edge"'),
        (graph_entry(max_degree="0"), r"graphs\[0\]\.max_degree must be a positive integer"),
        (graph_entry(max_degree="true"), r"max_degree must be a positive integer"),
        (graph_entry(max_degree='"5"'), r"max_degree must be a positive integer"),
        (graph_entry(source='"none.csv"'), r"graphs\[0\]\.source: file .* does not exist"),
        (graph_entry(nodes='"people.csv"'), r"give both nodes = .* and node_key = "),
        (graph_entry(node_key='"id"'), r"give both nodes = .* and node_key = "),
        (
            graph_entry(nodes='"nobody.csv"', node_key='"id"'),
            r"graphs\[0\]\.nodes: file .* does not exist",
        ),
        (graph_entry(nodes_name='"people"'), r"graphs\[0\]\.nodes_name names the node table"),
        (graph_entry(domains='{ city = ["x"] }'), r"graphs\[0\]\.domains declares node attr"),
        (
            graph_entry(nodes='"people.csv"', node_key='"id"', domains="3"),
            r"graphs\[0\]\.domains must be a table",
        ),
        (
            graph_entry(nodes='"people.csv"', node_key='"id"', domains="{ city = [] }"),
            r"domains\.city must be a non-empty list of values",
        ),
        (
            graph_entry(nodes='"people.csv"', node_key='"id"', domains="{ city = [{x = 1}] }"),
            r"domains\.city must be a non-empty list of values",
        ),
        (
            graph_entry(nodes='"people.csv"', node_key='"id"', domains='{ city = ["x", "x"] }'),
            r"domains\.city lists a value twice",
        ),
        (
            graph_entry(nodes='"people.csv"', node_key='"id"', domains="{ id = [1, 2] }"),
            r"domains\.id: 'id' is the node key",
        ),
        (graph_entry() + graph_entry(name='"G"'), r"graphs\[1\]\.name: two graphs are named"),
        (graph_entry(name='"Students"'), r"'Students' is already the name of the private"),
    ],
)
def test_each_graph_mistake_names_its_key(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, body))


def test_a_graph_may_not_reuse_a_public_table_name(tmp_path: Path) -> None:
    (tmp_path / "schools.csv").write_text("school\nnorth\n")
    body = '[[datasets.school.public_tables]]\nname = "schools"\nsource = "schools.csv"\n'
    with pytest.raises(ConfigError, match=r"'schools' is already the name of public table"):
        load_config(write(tmp_path, body + graph_entry(name='"schools"')))


def test_a_dataset_without_source_or_graphs_is_refused(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('ledger = "l.db"\n[datasets.d]\nbudget = { epsilon = 1 }\n')
    with pytest.raises(ConfigError, match=r"datasets\.d\.source is missing.*graphs"):
        load_config(tmp_path / "c.toml")


@pytest.mark.parametrize("key", ["table", "privacy_unit", "max_rows", "public_keys"])
def test_a_graph_only_dataset_refuses_private_table_keys(tmp_path: Path, key: str) -> None:
    value = {"table": '"t"', "privacy_unit": '"id"', "max_rows": "1"}.get(key, '{ k = ["a"] }')
    body = SOCIAL.replace("budget =", f"{key} = {value}\nbudget =")
    with pytest.raises(ConfigError, match=rf"datasets\.social\.{key} describes the private"):
        load_config(write(tmp_path, body))


def test_a_postgresql_dataset_names_its_graphs_tables_in_its_database(tmp_path: Path) -> None:
    # In a PostgreSQL dataset, a graph's source and nodes are tables of the dataset's
    # database (read in place), and the dataset may hold only graphs (source = the URL).
    (tmp_path / "c.toml").write_text(
        'ledger = "l.db"\n[datasets.pg]\nengine = "postgresql"\n'
        'source = "postgresql://r@h:5432/db"\nbudget = { epsilon = 1 }\n'
        '[[datasets.pg.graphs]]\nname = "friends"\nsource = "social.friends"\n'
        'source_col = "a"\ntarget_col = "b"\nunit = "node"\nmax_degree = 5\n'
        'nodes = "social.people"\nnode_key = "id"\n'
    )
    ds = load_config(tmp_path / "c.toml").datasets["pg"]
    assert not ds.has_table and ds.source == "postgresql://r@h:5432/db"
    (graph,) = ds.graphs
    assert (graph.source, graph.nodes) == ("social.friends", "social.people")
    bad = (tmp_path / "c.toml").read_text().replace('"social.friends"', '"a.b.c"')
    (tmp_path / "c.toml").write_text(bad)
    with pytest.raises(ConfigError, match=r"graphs\[0\]\.source must name a table"):
        load_config(tmp_path / "c.toml")
    no_url = bad.replace('source = "postgresql://r@h:5432/db"\n', "")
    (tmp_path / "c.toml").write_text(no_url.replace('"a.b.c"', '"social.friends"'))
    with pytest.raises(ConfigError, match=r"source is missing: a PostgreSQL dataset"):
        load_config(tmp_path / "c.toml")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"source_col": '"from"'}, r"source_col 'from' is not a column"),
        ({"nodes": '"edges.csv"', "node_key": '"a"'}, r"node_key 'a' must be unique"),
        (
            {"nodes": '"people.csv"', "node_key": '"id"', "domains": '{ town = ["x"] }'},
            r"domains names 'town'",
        ),
    ],
)
def test_a_graph_the_session_refuses_is_a_config_error_naming_it(
    tmp_path: Path, changes: dict[str, str], message: str
) -> None:
    config = load_config(write(tmp_path, graph_entry(**changes)))
    with pytest.raises(ConfigError, match=r"datasets\.school\.graphs\[0\] \(graph 'g'\): "):
        Service(config)
    with pytest.raises(ConfigError, match=message):
        Service(config)


# -- the service ----------------------------------------------------------------------------


def test_edge_level_sql_is_answered_and_charged_to_the_analyst(service: Service) -> None:
    n = service.query(ANN, "school", "SELECT COUNT(*) AS n FROM friends", epsilon=BIG)
    assert values(n, "n") == [5]
    assert n.metadata.loss == Epsilon(epsilon=BIG) and not n.metadata.cached
    hist = service.query(
        ANN, "school", "SELECT degree, COUNT(*) FROM degrees(friends) GROUP BY degree", epsilon=BIG
    )
    assert values(hist, "degree") == [1, 2, 3, 4, 5]
    assert values(hist, "n") == [1, 3, 1, 0, 0]
    tri = service.query(ANN, "school", "SELECT COUNT(*) AS t FROM triangles(friends)", epsilon=BIG)
    assert values(tri, "t") == [1]
    assert spent(service, "school", "ann") == Epsilon(epsilon=3 * BIG)
    assert spent(service, "school") == Epsilon(epsilon=3 * BIG)
    assert tri.metadata.remaining == Epsilon(epsilon=10000 - 3 * BIG)
    history = service.history(ANN, "school")
    assert [c.query_text for c in history][-1] == "SELECT COUNT(*) AS t FROM triangles(friends)"
    assert all(c.analyst == "ann" for c in history)


def test_node_level_sql_is_answered_and_refusals_are_free(service: Service) -> None:
    n = service.query(BOB, "school", "SELECT COUNT(*) AS n FROM follows", epsilon=BIG)
    assert values(n, "n") == [5]
    at_least = service.query(
        BOB, "school", "SELECT COUNT(*) AS n FROM degrees(follows) WHERE degree >= 2", epsilon=BIG
    )
    assert values(at_least, "n") == [4]
    ends = service.query(
        BOB,
        "school",
        "SELECT n.city, COUNT(*) AS c FROM follows e JOIN nodes n ON n.id IN (e.a, e.b) "
        "GROUP BY n.city",
        epsilon=BIG,
    )
    assert dict(zip(values(ends, "city"), values(ends, "c"), strict=True)) == {
        "x": 5,
        "y": 4,
        "z": 1,
    }
    assert "node" in (n.metadata.privacy_unit or "")
    before = spent(service, "school")
    with pytest.raises(InvalidParameter):  # a threshold above D = 5 at node level
        service.query(
            BOB, "school", "SELECT COUNT(*) FROM degrees(follows) WHERE degree >= 9", epsilon=1
        )
    assert spent(service, "school") == before == Epsilon(epsilon=3 * BIG)


def test_table_queries_still_work_beside_graphs(service: Service) -> None:
    a = service.query(ANN, "school", "SELECT COUNT(*) AS n FROM students", epsilon=BIG)
    assert values(a, "n") == [3]
    assert spent(service, "school") == Epsilon(epsilon=BIG)


def test_a_builder_query_naming_a_graph_is_a_graph_query(service: Service) -> None:
    q = Query("friends").agg(count().alias("n"))
    assert values(service.query(ANN, "school", q, epsilon=BIG), "n") == [5]


def test_own_replays_are_free_and_other_analysts_pay_again(service: Service) -> None:
    sql = "SELECT COUNT(*) AS n FROM triangles(friends)"
    first = service.query(ANN, "school", sql, epsilon=1)
    again = service.query(ANN, "school", sql, epsilon=1)
    assert again.metadata.cached and again.metadata.loss == Epsilon(epsilon=0)
    assert values(again, "n") == values(first, "n")
    assert spent(service, "school") == Epsilon(epsilon=1)
    other = service.query(BOB, "school", sql, epsilon=1)  # share_replays = false
    assert not other.metadata.cached and other.metadata.loss == Epsilon(epsilon=1)
    assert spent(service, "school", "bob") == Epsilon(epsilon=1)
    assert spent(service, "school") == Epsilon(epsilon=2)
    assert service.query(BOB, "school", sql, epsilon=1).metadata.cached


def test_shared_replays_serve_another_analysts_answer_for_free(tmp_path: Path) -> None:
    with Service(load_config(write(tmp_path, EDGE_GRAPH, share=True))) as service:
        sql = "SELECT COUNT(*) AS n FROM friends"
        first = service.query(ANN, "school", sql, epsilon=1)
        other = service.query(BOB, "school", sql, epsilon=1)
        assert other.metadata.cached and values(other, "n") == values(first, "n")
        assert spent(service, "school", "bob") == Epsilon(epsilon=0)
        assert other.metadata.remaining == Epsilon(epsilon=10000 - 1)


def test_budget_refusals_spend_nothing(tmp_path: Path) -> None:
    body = EDGE_GRAPH + "[analysts.ann]\nallowance = { school = { epsilon = 2 } }\n"
    with Service(load_config(write(tmp_path, body, cap="5"))) as service:
        sql = "SELECT COUNT(*) FROM friends"
        service.query(ANN, "school", sql, epsilon=1.5)
        with pytest.raises(BudgetExceeded, match="nothing was spent"):  # ann's allowance
            service.query(ANN, "school", "SELECT COUNT(*) FROM triangles(friends)", epsilon=1)
        assert spent(service, "school", "ann") == Epsilon(epsilon=Fraction(3, 2))
        service.query(BOB, "school", sql, epsilon=3)
        with pytest.raises(BudgetExceeded):  # the dataset's cap: 0.5 left
            service.query(CUR, "school", sql, epsilon=1)
        assert spent(service, "school") == Epsilon(epsilon=Fraction(9, 2))


def test_a_graph_only_dataset_answers_and_lists_its_graph(service: Service) -> None:
    m = service.metadata("social", ANN)
    assert m.table is None and m.tables == ()
    (g,) = m.graphs
    assert (g.name, g.unit, g.max_degree, g.source_col, g.target_col) == (
        "links",
        "edge",
        5,
        "a",
        "b",
    )
    a = service.query(ANN, "social", "SELECT COUNT(*) AS n FROM links", epsilon=BIG)
    assert values(a, "n") == [5]
    assert spent(service, "social") == Epsilon(epsilon=BIG)
    assert spent(service, "school") == Epsilon(epsilon=0)
    with pytest.raises(SQLError):
        service.query(ANN, "social", "SELECT COUNT(*) FROM social", epsilon=1)


def test_metadata_lists_node_attributes_and_domains(service: Service) -> None:
    m = service.metadata("school", CUR)
    assert m.table == "students" and [t.name for t in m.tables] == ["students"]
    friends, follows = m.graphs
    assert (friends.node_key, friends.node_attributes) == (None, ())
    assert (follows.unit, follows.node_key, follows.nodes_name) == ("node", "id", "nodes")
    assert follows.node_attributes == ("city",)
    assert dict(follows.domains) == {"city": ("x", "y", "z")}


def test_compile_checks_a_graph_query_but_has_no_program(service: Service) -> None:
    with pytest.raises(InvalidParameter, match="graph queries have no compiled program"):
        service.compile("school", "SELECT COUNT(*) FROM friends", epsilon=1)
    with pytest.raises(UnsafeQuery, match="graph queries take one of these forms"):
        service.compile("school", "SELECT SUM(a) FROM friends", epsilon=1)
    with pytest.raises(UnsafeQuery):
        service.query(ANN, "school", "SELECT a, b FROM friends", epsilon=1)
    assert spent(service, "school") == Epsilon(epsilon=0)


def test_graph_parameters_are_checked_before_any_charge(service: Service) -> None:
    with pytest.raises(InvalidParameter, match="spend no δ"):
        service.query(ANN, "school", "SELECT COUNT(*) FROM friends", epsilon=1, delta=1e-6)
    with pytest.raises(InvalidParameter, match="give epsilon"):
        service.query(ANN, "school", "SELECT COUNT(*) FROM friends", rho=1)
    assert spent(service, "school") == Epsilon(epsilon=0)


def test_an_idempotent_retry_is_charged_once(service: Service) -> None:
    sql = "SELECT COUNT(*) FROM degrees(friends) WHERE degree >= 2"
    first = service.query(ANN, "school", sql, epsilon=1, idempotency_key="k1")
    retry = service.query(ANN, "school", sql, epsilon=1, idempotency_key="k1")
    assert values(retry, "n") == values(first, "n")
    assert spent(service, "school") == Epsilon(epsilon=1)
    table = "SELECT COUNT(*) FROM students"
    service.query(ANN, "school", table, epsilon=1, idempotency_key="k2")
    with pytest.raises(IdempotencyConflict):
        service.query(ANN, "school", sql, epsilon=1, idempotency_key="k2")
    assert spent(service, "school") == Epsilon(epsilon=2)
    (keyed,) = service.ledger.history("school", analyst=ANN.name, idempotency_key="k1")
    assert keyed.details["graph"] == "friends"  # the key is recorded with the graph charge


def test_a_keyed_retry_racing_past_the_look_up_is_refused_by_the_ledger(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    sql = "SELECT COUNT(*) FROM friends"
    first = service.query(ANN, "school", sql, epsilon=1, idempotency_key="race")
    real = service._keyed_charge
    calls = []

    def missed_once(dataset: str, analyst: str, key: str):  # type: ignore[no-untyped-def]
        calls.append(key)
        return None if len(calls) == 1 else real(dataset, analyst, key)

    # the retry's look-up misses the first charge, and the first answer is not found as a
    # replay (as when another worker charges between the look-up and the charge, before it
    # stores its answer): the ledger's unique key refuses the second charge, and the first
    # answer is returned
    monkeypatch.setattr(service, "_keyed_charge", missed_once)
    monkeypatch.setattr(service.ledger, "cached_answer", lambda *args: None)
    retry = service.query(ANN, "school", sql, epsilon=1, idempotency_key="race")
    assert values(retry, "n") == values(first, "n")
    assert spent(service, "school") == Epsilon(epsilon=1)
    assert len(calls) == 2


def test_a_rho_dataset_spends_rho_on_graphs(tmp_path: Path) -> None:
    path = write(tmp_path, EDGE_GRAPH).read_text().replace("epsilon = 10000", "rho = 10000000")
    (tmp_path / "rho.toml").write_text(path)
    with Service(load_config(tmp_path / "rho.toml")) as service:
        a = service.query(ANN, "school", "SELECT COUNT(*) AS n FROM friends", rho=BIG * BIG)
        assert values(a, "n") == [5]
        assert service.budget("school").spent == Rho(rho=BIG * BIG)


# -- the HTTP API ---------------------------------------------------------------------------


@pytest.fixture
def client(service: Service) -> Iterator[TestClient]:
    app = create_app(service, authenticate=TOKENS.get)
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer t-{who}"}


def test_http_metadata_lists_graphs(client: TestClient) -> None:
    listing = {d["name"]: d for d in client.get("/v1/datasets", headers=auth("ann")).json()}
    assert listing["school"]["graphs"] == ["friends", "follows"]
    assert listing["social"]["table"] is None and listing["social"]["graphs"] == ["links"]
    meta = client.get("/v1/datasets/school", headers=auth("ann")).json()
    assert meta["graphs"][1] == {
        "name": "follows",
        "unit": "node",
        "max_degree": 5,
        "source_col": "a",
        "target_col": "b",
        "node_key": "id",
        "nodes_name": "nodes",
        "node_attributes": ["city"],
        "domains": {"city": ["x", "y", "z"]},
    }
    social = client.get("/v1/datasets/social", headers=auth("ann")).json()
    assert (social["table"], social["tables"], social["graphs"][0]["name"]) == (None, [], "links")


def test_http_query_answers_charges_and_replays(client: TestClient) -> None:
    body = {"sql": "SELECT degree, COUNT(*) AS n FROM degrees(friends) GROUP BY degree"}
    r = client.post("/v1/datasets/school/query", json={**body, "epsilon": BIG}, headers=auth("ann"))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["values"] == {"degree": [1, 2, 3, 4, 5], "n": [1, 3, 1, 0, 0]}
    assert set(out["intervals"]) == {"n"} and out["charge"]["epsilon"] == BIG
    assert not out["cached"] and out["charge_id"] is not None
    budget = client.get("/v1/datasets/school/budget", headers=auth("ann")).json()
    assert budget["spent"]["exact"] == {"epsilon": str(BIG)}
    again = client.post(
        "/v1/datasets/school/query", json={**body, "epsilon": BIG}, headers=auth("ann")
    ).json()
    assert again["cached"] and again["charge"]["epsilon"] == 0 and again["values"] == out["values"]
    history = client.get("/v1/datasets/school/history", headers=auth("ann")).json()
    assert [h["query"] for h in history] == [body["sql"]]
    assert client.get("/v1/datasets/school/history", headers=auth("bob")).json() == []


def test_http_graph_builder_and_graph_only_dataset(client: TestClient) -> None:
    builder = {"table": "links", "aggregates": [{"function": "count", "alias": "n"}]}
    r = client.post(
        "/v1/datasets/social/query", json={"builder": builder, "epsilon": BIG}, headers=auth("cur")
    )
    assert r.status_code == 200, r.text
    assert r.json()["values"] == {"n": [5]}


def test_http_refusals_have_stable_codes(tmp_path: Path) -> None:
    body = EDGE_GRAPH + NODE_GRAPH
    with Service(load_config(write(tmp_path, body, cap="1"))) as service:
        app = create_app(service, authenticate=TOKENS.get)
        with TestClient(app, raise_server_exceptions=False) as c:
            url = "/v1/datasets/school/query"
            rows = {"sql": "SELECT a, b FROM follows", "epsilon": 0.5}
            r = c.post(url, json=rows, headers=auth("ann"))
            assert (r.status_code, r.json()["error"]["code"]) == (400, "unsafe_query")
            big = {"sql": "SELECT COUNT(*) FROM friends", "epsilon": 2}
            r = c.post(url, json=big, headers=auth("ann"))
            assert (r.status_code, r.json()["error"]["code"]) == (409, "budget_exceeded")
            spent_now = c.get("/v1/datasets/school/budget", headers=auth("cur")).json()["spent"]
            assert spent_now["exact"] == {"epsilon": "0"}


def test_openapi_describes_graphs(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    graph = schemas["GraphOut"]
    assert set(graph["required"]) >= {"name", "unit", "max_degree", "source_col", "target_col"}
    assert graph["properties"]["unit"]["enum"] == ["edge", "node"]
    assert schemas["DatasetOut"]["properties"]["graphs"]["items"]["$ref"].endswith("/GraphOut")
    assert "graphs" in schemas["DatasetSummary"]["required"]


@pytest.mark.parametrize("kind", ["graph", "table"])
def test_a_keyed_retry_refused_by_the_budget_its_first_charge_spent_gets_the_answer(
    service: Service, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # The first request (another worker's) spends everything left; the retry's look-up
    # misses it and its own charge is refused for budget. It is the same request, paid for:
    # it gets the stored answer, not 409 budget_exceeded.
    sql = "SELECT COUNT(*) FROM friends" if kind == "graph" else "SELECT COUNT(*) FROM students"
    left = service.ledger.remaining("school")
    first = service.query(ANN, "school", sql, epsilon=left.epsilon, idempotency_key="last")
    real = service._keyed_charge
    calls: list[str] = []

    def missed_once(dataset: str, analyst: str, key: str):  # type: ignore[no-untyped-def]
        calls.append(key)
        return None if len(calls) == 1 else real(dataset, analyst, key)

    monkeypatch.setattr(service, "_keyed_charge", missed_once)
    monkeypatch.setattr(service.ledger, "cached_answer", lambda *args: None)
    retry = service.query(ANN, "school", sql, epsilon=left.epsilon, idempotency_key="last")
    assert retry.to_pandas().iloc[0, 0] == first.to_pandas().iloc[0, 0]
    assert len(calls) == 2
    # without the key the same refusal stands
    with pytest.raises(BudgetExceeded):
        service.query(ANN, "school", sql, epsilon=left.epsilon)

"""Empirical ε of graph answers on neighbouring graphs (edge level and node level).

Each scenario registers two neighbouring graphs ``G`` and ``G'`` in one session, computes the
exact bounded statistic of both through the release path's own hook (``Graph._exact``, the
same order secret for both: conditioned on the secret the truncation is a fixed function,
which is what the proofs bound), and samples ``N`` releases of each with the mechanism the
release path uses (``Graph._noise``: discrete Laplace with the sensitivity of
``deniable.graph.queries.sensitivity``). A vector release is reduced to the
log-likelihood-ratio statistic ``T = (ε/Δ)·Σ(|y − c| − |y − c'|)`` (post-processing: ε-DP
bounds every event on it, and threshold events on ``T`` are the most revealing).
:func:`deniable.audit.estimate_epsilon` gives a lower confidence bound at ``alpha = 1e-7``;
the test fails when it exceeds the claimed ε. Eleven honest estimates run in this module, at
``alpha = 5e-8``, so the false-failure probability is below 5.5e-7 < 1e-6.

Scenarios: (1) edge level, the edge ``x–y`` of a gadget (``x`` and ``y`` of degree ``D``
with ``D − 1`` common neighbours) removed from a sparse random graph: edge count, degree
histogram, triangles of the mutual top-D truncation, edge ends per attribute; (2) node
level, one node added with exactly D edges to nodes of degree D − 1 (all kept); (3) node level, the hub
counterexample — a hub adjacent to 40 nodes of degree D + 1 (each has D other edges); (4)
node-level triangle counts (the linear program of ``deniable.graph.lipschitz``): a hub
joined to both ends of 40 disjoint edges (40 new triangles through one node), and a hub
joined to every node of 12 disjoint cliques ``K_{D+1}`` (whose nodes already carry the
``Δ = D(D − 1)/2`` triangles each that the program allows).

Negative controls, run through the same check and required to be refuted: (a) naive degree
truncation (keep an edge iff both ends have degree ≤ D) with the node-level sensitivity D,
on the hub counterexample (its edge count moves by 40·D); (b) half the noise on the
edge-level edge count (twice the ε); (c) triangles of the naive truncation with the
node-level triangle sensitivity, on the clique hub (every clique is dropped).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon
from deniable.audit import estimate_epsilon
from deniable.curator.session import Session
from deniable.errors import PrivacyWarning
from deniable.graph import Graph, GraphQuery, Kind
from deniable.graph.projection import naive_truncation, triangle_count
from deniable.graph.queries import sensitivity
from deniable.mechanisms import geometric
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.stats

N = 200_000
EPS = Fraction(1)
ALPHA = 5e-8
D = 4
SECRET = 987654321
HUB_M = 40


def _without(frame: pd.DataFrame, x: int, y: int) -> pd.DataFrame:
    return frame[~(((frame.a == x) & (frame.b == y)) | ((frame.a == y) & (frame.b == x)))]


def _random_graph(seed: int, n: int = 80, p: float = 0.04) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < p]
    return pd.DataFrame(pairs, columns=["a", "b"])


def _hub(with_hub: bool) -> pd.DataFrame:
    rows = []
    leaf = 10_000
    for i in range(1, HUB_M + 1):
        if with_hub:
            rows.append((0, i))
        for _ in range(D):
            rows.append((i, leaf))
            leaf += 1
    return pd.DataFrame(rows, columns=["a", "b"])


CLIQUES = 12


def _triangle_hub(with_hub: bool) -> pd.DataFrame:
    """A hub joined to both ends of HUB_M disjoint edges: HUB_M triangles through the hub."""
    rows = [(2 * i, 2 * i + 1) for i in range(HUB_M)]
    if with_hub:
        rows += [(-1, v) for v in range(2 * HUB_M)]
    return pd.DataFrame(rows, columns=["a", "b"])


def _clique_hub(with_hub: bool) -> pd.DataFrame:
    """CLIQUES disjoint K_{D+1} (each node in Δ triangles) and a hub joined to every node."""
    rows = []
    for c in range(CLIQUES):
        members = [100 + 10 * c + i for i in range(D + 1)]
        rows += [(x, y) for i, x in enumerate(members) for y in members[i + 1 :]]
        if with_hub:
            rows += [(-1, x) for x in members]
    return pd.DataFrame(rows, columns=["a", "b"])


NODES = pd.DataFrame({"id": range(200), "g": [i % 3 for i in range(200)]})


@pytest.fixture(scope="module")
def graphs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Graph]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(
            budget=Epsilon(epsilon=1),
            ledger=tmp_path_factory.mktemp("g") / "l.db",
            source=SeededRandom(1),
        )
    base = _random_graph(3)
    # edge level: the gadget x–y with D − 1 common neighbours (x and y have degree D), and
    # the edge x–y removed: it moves the histogram by 4, the threshold count by 2, the
    # triangles by D − 1, the edge ends by 2
    x, y = 100, 101
    gadget = [(x, y)] + [(x, 110 + i) for i in range(D - 1)] + [(y, 110 + i) for i in range(D - 1)]
    with_gadget = pd.concat([base, pd.DataFrame(gadget, columns=["a", "b"])], ignore_index=True)
    # node level: node 150 with D edges to nodes of degree D − 1 (all its edges are kept)
    deg = pd.concat([base.a, base.b]).value_counts()
    targets = list(deg[deg == D - 1].index[:D])
    assert len(targets) == D
    with_node = pd.concat([base, pd.DataFrame({"a": [150] * D, "b": targets})], ignore_index=True)
    frames = {
        "edge_g": with_gadget,
        "edge_g2": _without(with_gadget, x, y),
        "node_g": base,
        "node_g2": with_node,
        "hub_g": _hub(False),
        "hub_g2": _hub(True),
        "tri_g": _triangle_hub(False),
        "tri_g2": _triangle_hub(True),
        "clique_g": _clique_hub(False),
        "clique_g2": _clique_hub(True),
    }
    out = {}
    for name, frame in frames.items():
        unit = "edge" if name.startswith("edge") else "node"
        s.add_graph(
            name,
            frame,
            source_col="a",
            target_col="b",
            unit=unit,
            max_degree=D,
            nodes=NODES,
            node_key="id",
            domains={"g": [0, 1, 2]},
        )
        out[name] = s.graph(name)
    yield out
    s.close()


def _statistic(g: Graph, q: GraphQuery) -> np.ndarray:
    keys = [0, 1, 2] if q.kind is Kind.EDGE_ENDS_BY else None
    return g._exact(q, SECRET, keys).values


def _llr(x: np.ndarray, c: np.ndarray, c2: np.ndarray, delta: int, seed: int, factor: int):  # type: ignore[no-untyped-def]
    """N releases of ``x`` reduced to the log-likelihood-ratio statistic of ``c`` vs ``c2``."""
    y = geometric(np.tile(x, N), sensitivity=delta, epsilon=EPS * factor, source=SeededRandom(seed))
    v = y.value.reshape(N, -1)
    return float(EPS / delta) * (np.abs(v - c) - np.abs(v - c2)).sum(axis=1)


def _estimate(c: np.ndarray, c2: np.ndarray, delta: int, seed: int, noise_factor: int = 1) -> float:
    """Lower confidence bound (alpha = ALPHA) on the ε shown by releases of c and of c2."""
    a = _llr(c, c, c2, delta, seed, noise_factor)
    b = _llr(c2, c, c2, delta, seed + 1, noise_factor)
    return estimate_epsilon(a, b, alpha=ALPHA).lower


EDGE_QUERIES = [
    GraphQuery(Kind.EDGE_COUNT),
    GraphQuery(Kind.DEGREE_HISTOGRAM),
    GraphQuery(Kind.TRIANGLES),
    GraphQuery(Kind.EDGE_ENDS_BY, attribute="g"),
]
NODE_QUERIES = [
    GraphQuery(Kind.EDGE_COUNT),
    GraphQuery(Kind.DEGREE_HISTOGRAM),
    GraphQuery(Kind.DEGREE_AT_LEAST, threshold=D),
]


@pytest.mark.parametrize("q", EDGE_QUERIES, ids=lambda q: q.kind.value)
def test_edge_level_one_edge(graphs: dict[str, Graph], q: GraphQuery) -> None:
    c, c2 = _statistic(graphs["edge_g"], q), _statistic(graphs["edge_g2"], q)
    delta = sensitivity(q, "edge", D)
    assert 0 < np.abs(c - c2).sum() <= delta  # the neighbours differ, within the bound
    lower = _estimate(c, c2, delta, 10)
    assert lower <= EPS, f"empirical ε lower bound {lower:.3f} > {EPS}"


@pytest.mark.parametrize("q", NODE_QUERIES, ids=lambda q: q.kind.value)
def test_node_level_one_node_with_d_edges(graphs: dict[str, Graph], q: GraphQuery) -> None:
    c, c2 = _statistic(graphs["node_g"], q), _statistic(graphs["node_g2"], q)
    delta = sensitivity(q, "node", D)
    assert 0 < np.abs(c - c2).sum() <= delta
    lower = _estimate(c, c2, delta, 20)
    assert lower <= EPS, f"empirical ε lower bound {lower:.3f} > {EPS}"


def test_node_level_hub_counterexample(graphs: dict[str, Graph]) -> None:
    q = GraphQuery(Kind.DEGREE_HISTOGRAM)
    c, c2 = _statistic(graphs["hub_g"], q), _statistic(graphs["hub_g2"], q)
    delta = sensitivity(q, "node", D)
    assert np.abs(c - c2).sum() <= delta
    lower = _estimate(c, c2, delta, 30)
    assert lower <= EPS, f"empirical ε lower bound {lower:.3f} > {EPS}"
    # and the edge count, whose naive truncation moves by HUB_M·D (control (a) below)
    e = GraphQuery(Kind.EDGE_COUNT)
    n, n2 = _statistic(graphs["hub_g"], e), _statistic(graphs["hub_g2"], e)
    assert np.abs(n - n2).sum() <= D
    lower = _estimate(n, n2, D, 40)
    assert lower <= EPS, f"empirical ε lower bound {lower:.3f} > {EPS}"


@pytest.mark.parametrize(("name", "least", "seed"), [("tri", 6, 70), ("clique", 1, 80)])
def test_node_level_triangles_of_a_hub(
    graphs: dict[str, Graph], name: str, least: int, seed: int
) -> None:
    q = GraphQuery(Kind.TRIANGLES)
    c, c2 = _statistic(graphs[f"{name}_g"], q), _statistic(graphs[f"{name}_g2"], q)
    delta = sensitivity(q, "node", D)
    # "tri": the hub adds Δ = D(D − 1)/2 = 6 of the program's triangles (the bound is nearly
    # reached); "clique": the program trades clique triangles for the hub's, a small change
    assert least <= np.abs(c - c2).sum() <= delta
    lower = _estimate(c, c2, delta, seed)
    assert lower <= EPS, f"empirical ε lower bound {lower:.3f} > {EPS}"


def test_control_naive_truncation_triangles_are_refuted() -> None:
    def naive_triangles(frame: pd.DataFrame) -> np.ndarray:
        u, w = frame.a.to_numpy(), frame.b.to_numpy()
        codes, _ = pd.factorize(np.concatenate([u, w]), sort=True)
        kept = naive_truncation(codes[: len(u)], codes[len(u) :], D)
        return np.array([triangle_count(u[kept], w[kept])])

    c, c2 = naive_triangles(_clique_hub(False)), naive_triangles(_clique_hub(True))
    assert int(c[0] - c2[0]) == CLIQUES * 10  # every clique's triangles are dropped
    lower = _estimate(c, c2, sensitivity(GraphQuery(Kind.TRIANGLES), "node", D), 90)
    assert lower > EPS, f"naive truncation not caught: lower bound {lower:.3f}"


def test_control_naive_truncation_on_the_hub_is_refuted() -> None:
    def naive_count(frame: pd.DataFrame) -> np.ndarray:
        u = np.minimum(frame.a.to_numpy(), frame.b.to_numpy())
        w = np.maximum(frame.a.to_numpy(), frame.b.to_numpy())
        codes, _ = pd.factorize(np.concatenate([u, w]), sort=True)
        kept = naive_truncation(codes[: len(u)], codes[len(u) :], D)
        return np.array([int(kept.sum())])

    c, c2 = naive_count(_hub(False)), naive_count(_hub(True))
    assert abs(int(c[0]) - int(c2[0])) == HUB_M * D
    lower = _estimate(c, c2, D, 50)
    assert lower > EPS, f"naive truncation not caught: lower bound {lower:.3f}"


def test_control_half_the_noise_is_refuted(graphs: dict[str, Graph]) -> None:
    q = GraphQuery(Kind.EDGE_COUNT)
    c, c2 = _statistic(graphs["edge_g"], q), _statistic(graphs["edge_g2"], q)
    lower = _estimate(c, c2, 1, 60, noise_factor=2)
    assert lower > EPS, f"half the noise not caught: lower bound {lower:.3f}"

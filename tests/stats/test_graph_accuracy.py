"""Accuracy of graph answers on random graphs: exact statistics, and the intervals' coverage.

1. The exact statistic behind each answer equals an independent reference computed here
   (adjacency matrix, numpy) on Erdős–Rényi and power-law random graphs: edge level for all
   five queries (triangles with ``D`` at least the maximum degree, so the truncation keeps
   every edge), node level with ``D`` at least the maximum degree (the projection then
   keeps every edge and the triangle program's value is the triangle count, so the answers
   are unbiased for the true graph), and node level with a small ``D`` (the projection's
   count and the triangle program's value are at most the truth, degrees at most D).
2. Coverage: ``R = 20,000`` releases of each statistic, drawn by the release path's own
   noise function (``Graph._noise``) and read with the interval the answer reports
   (``Release.interval(0.95)``), must miss the true value in at most ``k*`` of the ``R·size``
   cells, where ``k*`` is the Binomial(R·size, 0.05) upper quantile at ``1e-7`` (the
   intervals are exact: each covers with probability ≥ 0.95, so misses are stochastically
   smaller than that binomial; the cells of a histogram are independent). Four coverage
   checks: false-failure probability below 4e-7 < 1e-6. Negative control: the same check
   with intervals of half the width must fail.
3. End-to-end answers (``Graph.edge_count``, ``.degree_histogram``, ``.edge_count_by``,
   ``.triangle_count`` at both levels, with D at least the maximum degree) cover the truth
   by their own intervals at level ``1 − 1e-9``: fewer than 300 cells (checked), so false
   failure ≤ 3e-7; with the four coverage checks, ≤ 7e-7 < 1e-6.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.errors import PrivacyWarning
from deniable.graph import Graph, GraphQuery, Kind
from deniable.graph.queries import sensitivity
from deniable.noise.testing import SeededRandom

pytestmark = pytest.mark.stats

R = 20_000
LEVEL = 0.95
EPS = Fraction(1, 2)


def _er(n: int, p: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    iu = np.triu_indices(n, 1)
    keep = rng.random(iu[0].size) < p
    return pd.DataFrame({"a": iu[0][keep], "b": iu[1][keep]})


def _power_law(m: int, n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)  # test data only
    w = (np.arange(n) + 5.0) ** (-1 / 1.5)
    cdf = np.cumsum(w) / w.sum()
    a = np.searchsorted(cdf, rng.random(m))
    b = np.searchsorted(cdf, rng.random(m))
    flip = rng.random(m) < 0.5  # both orientations appear in the rows
    return pd.DataFrame({"a": np.where(flip, b, a), "b": np.where(flip, a, b)})


def _reference(frame: pd.DataFrame, n: int) -> dict[str, object]:
    """True statistics of the simple undirected graph of ``frame`` (adjacency matrix)."""
    adj = np.zeros((n, n), dtype=np.int64)
    a, b = frame.a.to_numpy(), frame.b.to_numpy()
    ok = a != b
    adj[a[ok], b[ok]] = 1
    adj[b[ok], a[ok]] = 1
    deg = adj.sum(axis=1)
    return {
        "edges": int(adj.sum() // 2),
        "deg": deg,
        "triangles": int(np.trace(adj @ adj @ adj) // 6),
        "adj": adj,
    }


GROUPS = [0, 1, 2, 3]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(
            budget=Epsilon(epsilon=1000),
            ledger=tmp_path_factory.mktemp("a") / "l.db",
            source=SeededRandom(2),
        )
    n = 300
    nodes = pd.DataFrame({"id": range(n), "g": [i % 4 for i in range(n)]})
    frames = {"er": _er(n, 0.03, 1), "pl": _power_law(3000, n, 2)}
    out: dict[str, object] = {"session": s, "nodes": nodes}
    for name, frame in frames.items():
        ref = _reference(frame, n)
        big = int(np.max(ref["deg"]))  # type: ignore[call-overload]
        out[name] = ref
        for unit, d in (("edge", big), ("node", big), ("small", 3)):
            s.add_graph(
                f"{name}_{unit}",
                frame,
                source_col="a",
                target_col="b",
                unit="node" if unit == "small" else unit,
                max_degree=d,
                nodes=nodes,
                node_key="id",
                domains={"g": GROUPS},
            )
    yield out
    s.close()


def _graph(setup: dict[str, object], name: str) -> Graph:
    s = setup["session"]
    assert isinstance(s, Session)
    return s.graph(name)


def _truth(ref: dict[str, object], q: GraphQuery, d: int) -> np.ndarray:
    deg = np.asarray(ref["deg"])
    if q.kind is Kind.EDGE_COUNT:
        return np.array([ref["edges"]])
    if q.kind is Kind.TRIANGLES:
        return np.array([ref["triangles"]])
    if q.kind is Kind.DEGREE_AT_LEAST:
        return np.array([int((deg >= (q.threshold or 0)).sum())])
    if q.kind is Kind.DEGREE_HISTOGRAM:
        clamped = np.minimum(deg[deg > 0], d)
        return np.bincount(clamped, minlength=d + 1)[1 : d + 1]
    group = np.arange(deg.size) % 4
    return np.bincount(group, weights=deg, minlength=4).astype(np.int64)


QUERIES = [
    GraphQuery(Kind.EDGE_COUNT),
    GraphQuery(Kind.DEGREE_HISTOGRAM),
    GraphQuery(Kind.DEGREE_AT_LEAST, threshold=3),
    GraphQuery(Kind.TRIANGLES),
    GraphQuery(Kind.EDGE_ENDS_BY, attribute="g"),
]


@pytest.mark.parametrize("graph", ["er", "pl"])
@pytest.mark.parametrize("unit", ["edge", "node"])
@pytest.mark.parametrize("q", QUERIES, ids=lambda q: q.kind.value)
def test_exact_statistics_match_the_reference(
    setup: dict[str, object], graph: str, unit: str, q: GraphQuery
) -> None:
    g = _graph(setup, f"{graph}_{unit}")
    keys = GROUPS if q.kind is Kind.EDGE_ENDS_BY else None
    got = g._exact(q, 424242, keys).values
    ref = setup[graph]
    assert isinstance(ref, dict)
    assert got.tolist() == _truth(ref, q, g.info.max_degree).tolist()


@pytest.mark.parametrize("graph", ["er", "pl"])
def test_small_bound_projection_undercounts_and_bounds_degrees(
    setup: dict[str, object], graph: str
) -> None:
    g = _graph(setup, f"{graph}_small")
    ref = setup[graph]
    assert isinstance(ref, dict)
    count = int(g._exact(GraphQuery(Kind.EDGE_COUNT), 7).values[0])
    hist = g._exact(GraphQuery(Kind.DEGREE_HISTOGRAM), 7).values
    assert count <= ref["edges"]
    assert len(hist) == 3 and int((hist * np.arange(1, 4)).sum()) == 2 * count
    if graph == "pl":
        assert count < ref["edges"]  # some truncation happened (hubs above D = 3)
    # node-level triangles with D = 3: each node carries at most Δ = 3 triangles' weight and
    # each triangle weighs on three nodes, so the program's value is at most the truth and
    # at most Δ/3 = 1 per node of degree ≥ 2
    tri = int(g._exact(GraphQuery(Kind.TRIANGLES), 7).values[0])
    assert 0 <= tri <= ref["triangles"]
    assert tri <= int((np.asarray(ref["deg"]) > 1).sum())
    if graph == "pl":
        assert tri < ref["triangles"]


def _misses(g: Graph, q: GraphQuery, truth: np.ndarray, *, width: float = 1.0) -> int:
    delta = sensitivity(q, g.info.unit, g.info.max_degree)
    release = g._noise(np.tile(truth, R), delta, EPS)
    low, high = release.interval(LEVEL)
    mid = (low + high) / 2
    half = (high - low) / 2 * width
    tiled = np.tile(truth, R)
    return int((tiled < mid - half).sum() + (tiled > mid + half).sum())


@pytest.mark.parametrize(
    ("name", "q"),
    [
        ("er_edge", GraphQuery(Kind.DEGREE_HISTOGRAM)),
        ("pl_node", GraphQuery(Kind.EDGE_COUNT)),
        ("pl_node", GraphQuery(Kind.EDGE_ENDS_BY, attribute="g")),
        ("pl_edge", GraphQuery(Kind.TRIANGLES)),
    ],
)
def test_intervals_cover_at_their_level(setup: dict[str, object], name: str, q: GraphQuery) -> None:
    g = _graph(setup, name)
    keys = GROUPS if q.kind is Kind.EDGE_ENDS_BY else None
    truth = g._exact(q, 5, keys).values
    cells = R * truth.size
    limit = int(binom.isf(1e-7, cells, 1 - LEVEL))
    misses = _misses(g, q, truth)
    assert misses <= limit, f"{misses} misses of {cells} > {limit}"
    # negative control: half-width intervals miss far more often
    assert _misses(g, q, truth, width=0.5) > limit


def test_end_to_end_answers_cover_the_truth(setup: dict[str, object]) -> None:
    level = 1 - 1e-9
    cells = 0
    ref = setup["pl"]
    assert isinstance(ref, dict)
    for unit in ("edge", "node"):
        g = _graph(setup, f"pl_{unit}")
        d = g.info.max_degree
        answers = [
            (g.edge_count(epsilon=0.5, level=level), "edges", GraphQuery(Kind.EDGE_COUNT)),
            (
                g.degree_histogram(epsilon=0.5, level=level),
                "nodes",
                GraphQuery(Kind.DEGREE_HISTOGRAM),
            ),
            (
                g.edge_count_by("g", epsilon=0.5, level=level),
                "edges",
                GraphQuery(Kind.EDGE_ENDS_BY, attribute="g"),
            ),
            (g.triangle_count(epsilon=0.5, level=level), "triangles", GraphQuery(Kind.TRIANGLES)),
        ]
        for answer, col, q in answers:
            truth = _truth(ref, q, d)
            assert (answer[f"{col}_low"].to_numpy() <= truth).all()
            assert (truth <= answer[f"{col}_high"].to_numpy()).all()
            cells += truth.size
    assert cells < 300

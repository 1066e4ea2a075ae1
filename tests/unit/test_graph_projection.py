"""Truncation properties on small graphs, checked exhaustively (deniable.graph.projection).

Every simple graph on 5 nodes (2^10 = 1024 of them), under several stable orders of the 10
possible edges: for node level, every node removal; for edge level, every edge removal. The
bounds checked are the ones the sensitivities of deniable.graph.queries rest on. The
counterexamples that make naive truncation (and node-level triangle counts) unsound are
checked too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from deniable.graph.projection import (
    degrees,
    edge_addition_projection,
    mutual_top_d,
    naive_truncation,
    triangle_count,
)
from deniable.graph.queries import GraphQuery, Kind, sensitivity

N = 5
PAIRS = list(itertools.combinations(range(N), 2))
ORDERS = [np.random.default_rng(s).permutation(len(PAIRS)) for s in range(3)]  # test-only
GROUP = np.array([0, 1, 0, 1, 2])  # a node attribute for the edge-ends-by-group bound


def _graphs() -> list[list[int]]:
    return [[i for i in range(len(PAIRS)) if mask >> i & 1] for mask in range(1 << len(PAIRS))]


GRAPHS = _graphs()


def _project(edges: list[int], order: np.ndarray, d: int, how=edge_addition_projection):  # type: ignore[no-untyped-def]
    """Kept edges (as pair indices) of the graph ``edges`` under the stable ``order``."""
    rank = np.empty(len(PAIRS), dtype=np.int64)
    rank[order] = np.arange(len(PAIRS))
    ordered = sorted(edges, key=lambda e: rank[e])
    u = np.array([PAIRS[e][0] for e in ordered], dtype=np.int64)
    w = np.array([PAIRS[e][1] for e in ordered], dtype=np.int64)
    kept = how(u, w, d) if ordered else np.zeros(0, dtype=bool)
    return {e for e, k in zip(ordered, kept, strict=True) if k}


def _stats(kept: set[int], d: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    u = np.array([PAIRS[e][0] for e in kept], dtype=np.int64)
    w = np.array([PAIRS[e][1] for e in kept], dtype=np.int64)
    deg = degrees(u, w, N)
    hist = np.bincount(deg, minlength=N)[1 : d + 1] if deg.size else np.zeros(d, dtype=np.int64)
    return len(kept), deg, hist, np.bincount(GROUP, weights=deg, minlength=3)


@pytest.mark.parametrize("d", [1, 2, 3])
def test_node_level_projection_bounds_hold_on_every_5_node_graph(d: int) -> None:
    sens = {
        k: sensitivity(GraphQuery(k, threshold=1), "node", d)
        for k in Kind
        if k is not Kind.TRIANGLES
    }
    worst = dict.fromkeys(("edges", "hist", "at_least", "groups", "phi"), 0)
    for order in ORDERS:
        for g in GRAPHS:
            full = _stats(_project(g, order, d), d)
            for v in range(N):
                sub = [e for e in g if v not in PAIRS[e]]
                kept_sub = _project(sub, order, d)
                part = _stats(kept_sub, d)
                kept_full = _project(g, order, d)
                k = sum(1 for e in kept_full if v in PAIRS[e])
                others = [x for x in range(N) if x != v]
                phi = int(np.abs(full[1][others] - part[1][others]).sum())
                assert phi <= k <= d  # the potential argument's invariant
                assert 0 <= full[0] - part[0] <= k
                worst["edges"] = max(worst["edges"], full[0] - part[0])
                worst["phi"] = max(worst["phi"], phi)
                worst["hist"] = max(worst["hist"], int(np.abs(full[2] - part[2]).sum()))
                for t in range(1, d + 1):
                    diff = abs(int((full[1] >= t).sum()) - int((part[1] >= t).sum()))
                    worst["at_least"] = max(worst["at_least"], diff)
                worst["groups"] = max(worst["groups"], int(np.abs(full[3] - part[3]).sum()))
    assert worst["edges"] <= sens[Kind.EDGE_COUNT]
    assert worst["hist"] <= sens[Kind.DEGREE_HISTOGRAM]
    assert worst["at_least"] <= sens[Kind.DEGREE_AT_LEAST]
    assert worst["groups"] <= sens[Kind.EDGE_ENDS_BY]
    assert worst["edges"] == d  # the bound is attained (on 5 nodes) for these d
    assert all(deg <= d for g in GRAPHS[:64] for deg in _stats(_project(g, ORDERS[0], d), d)[1])


@pytest.mark.parametrize("d", [1, 2, 3])
def test_edge_level_mutual_top_d_changes_at_most_three_edges(d: int) -> None:
    tri_sens = sensitivity(GraphQuery(Kind.TRIANGLES), "edge", d)
    worst_tri = 0
    for order in ORDERS[:2]:
        rank = np.empty(len(PAIRS), dtype=np.int64)
        rank[order] = np.arange(len(PAIRS))
        for g in GRAPHS:
            kept = _project(g, order, d, mutual_top_d)
            tri = triangle_count(*_ends(kept))
            for e in g:
                sub = [x for x in g if x != e]
                kept_sub = _project(sub, order, d, mutual_top_d)
                lost, gained = kept - kept_sub, kept_sub - kept
                assert lost <= {e}
                assert len(gained) <= 2
                for f in gained:  # f is the (D+1)-th ranked edge at one end of e
                    x = next(x for x in PAIRS[e] if x in PAIRS[f])
                    at_x = sorted((y for y in g if x in PAIRS[y]), key=lambda y: rank[y])
                    assert at_x.index(f) == d
                worst_tri = max(worst_tri, abs(tri - triangle_count(*_ends(kept_sub))))
    assert worst_tri <= tri_sens


def _ends(kept: set[int]) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([PAIRS[e][0] for e in kept], dtype=np.int64),
        np.array([PAIRS[e][1] for e in kept], dtype=np.int64),
    )


def _hub(m: int, d: int, *, with_hub: bool) -> tuple[np.ndarray, np.ndarray]:
    """The counterexample: hub 0 adjacent to m nodes, each with d more edges to own leaves."""
    u: list[int] = []
    w: list[int] = []
    nxt = m + 1
    for i in range(1, m + 1):
        if with_hub:
            u.append(0)
            w.append(i)
        for _ in range(d):
            u.append(i)
            w.append(nxt)
            nxt += 1
    return np.array(u, dtype=np.int64), np.array(w, dtype=np.int64)


def test_naive_truncation_is_unbounded_on_the_hub_counterexample() -> None:
    m, d = 30, 3
    with_hub = naive_truncation(*_hub(m, d, with_hub=True), d).sum()
    without = naive_truncation(*_hub(m, d, with_hub=False), d).sum()
    assert without - with_hub == m * d  # far above the node-level sensitivity D


def test_mutual_top_d_is_not_node_level_stable_on_the_hub() -> None:
    # The other tempting truncation: each node keeps its D lowest-ranked edges. With the
    # hub's edges ranked first, every neighbour spends a slot on the hub, which keeps only
    # D of them: the neighbours lose an edge each, far more than D edges in total.
    m, d = 30, 3
    u, w = _hub(m, d, with_hub=True)
    first = np.argsort(u != 0, kind="stable")  # hub edges first
    with_hub = int(mutual_top_d(u[first], w[first], d).sum())
    no_hub = u != 0
    without = int(mutual_top_d(u[no_hub], w[no_hub], d).sum())
    assert without - with_hub > 5 * d


def test_projection_is_bounded_on_the_hub_counterexample_in_every_order() -> None:
    m, d = 30, 3
    rng = np.random.default_rng(7)  # test-only orders
    for _ in range(200):
        u, w = _hub(m, d, with_hub=True)
        order = rng.permutation(u.size)
        u, w = u[order], w[order]
        keep_hub = edge_addition_projection(u, w, d)
        no_hub = u != 0
        keep_sub = edge_addition_projection(u[no_hub], w[no_hub], d)
        assert 0 <= int(keep_hub.sum()) - int(keep_sub.sum()) <= d


def test_a_node_can_flip_the_kept_edges_along_a_whole_path() -> None:
    # Why triangle counts and one-end groupings are refused at node level: with D = 1 the
    # projection is the greedy matching; a pendant node flips every edge of the path.
    path_u = np.arange(1, 40, dtype=np.int64)
    path_w = path_u + 1
    with_v = edge_addition_projection(np.r_[0, path_u], np.r_[1, path_w], 1)[1:]
    without = edge_addition_projection(path_u, path_w, 1)
    assert (with_v != without).all()
    assert abs(int(with_v.sum()) - int(without.sum())) <= 1  # the count stays within D


def test_projection_refuses_bad_arguments() -> None:
    from deniable.errors import InvalidParameter

    with pytest.raises(InvalidParameter):
        edge_addition_projection([0], [1], 0)
    with pytest.raises(InvalidParameter):
        edge_addition_projection([0, 1], [1], 2)
    assert edge_addition_projection([], [], 2).size == 0

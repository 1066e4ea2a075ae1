"""Node-level triangle counts (deniable.graph.lipschitz): value, sensitivity, engine, failure.

* The certified statistic is within ``[f − 1, f + 1/2]`` of the *full* program ``f`` (one
  variable per triangle, a constraint at every node, solved here independently), on random
  graphs with hubs and every cap ``Δ`` from 0 to 10, solved as one program and component by
  component.
* On graphs whose degrees are at most ``D`` it is the triangle count.
* Node sensitivity, brute force: on random small graphs and on adversarial gadgets (a hub
  joined to cliques ``K_{D+1}`` whose nodes already carry ``Δ`` triangles each), removing any
  one node moves the full program by at most ``Δ`` and the released statistic by at most
  ``Δ + 1``. Negative control: naive degree truncation moves the triangle count by far more
  on the same gadget.
* The engine's patterns (``sqlgen.triangle_structure``) equal a Python reference, with text
  ids and skewed degrees.
* A solver answer that cannot be certified fails the query before anything is charged.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Hashable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy.optimize import linprog

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.errors import InternalError, PrivacyWarning
from deniable.graph import GraphQuery, Kind, lipschitz, sqlgen
from deniable.graph.projection import naive_truncation, triangle_count
from deniable.noise.testing import SeededRandom

Edge = tuple[Hashable, Hashable]
Pattern = tuple[tuple[Hashable | None, ...], int]


def _triangles(edges: Sequence[Edge]) -> list[tuple[Hashable, Hashable, Hashable]]:
    adj: dict[Hashable, set[Hashable]] = {}
    for a, b in edges:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    out = []
    for a, b, c in itertools.combinations(sorted(adj, key=repr), 3):
        if b in adj[a] and c in adj[a] and c in adj[b]:
            out.append((a, b, c))
    return out


def _patterns(edges: Sequence[Edge], cap: int) -> list[Pattern]:
    tris = _triangles(edges)
    load: dict[Hashable, int] = {}
    for t in tris:
        for v in t:
            load[v] = load.get(v, 0) + 1
    out: dict[tuple[Hashable | None, ...], int] = {}
    for t in tris:
        key = tuple(v if load[v] > cap else None for v in t)
        out[key] = out.get(key, 0) + 1
    return list(out.items())


def _full_program(edges: Sequence[Edge], cap: int) -> float:
    """max Σ x_c over all triangles, Σ_{c ∋ v} x_c ≤ cap at every node, 0 ≤ x ≤ 1."""
    tris = _triangles(edges)
    if not tris:
        return 0.0
    nodes = {v: i for i, v in enumerate({v for t in tris for v in t})}
    rows = [nodes[v] for t in tris for v in t]
    cols = [j for j in range(len(tris)) for _ in range(3)]
    a = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(nodes), len(tris)))
    res = linprog(
        -np.ones(len(tris)), A_ub=a, b_ub=np.full(len(nodes), cap), bounds=(0, 1), method="highs"
    )
    assert res.status == 0
    return float(-res.fun)


def _random_graph(rng: np.random.Generator) -> list[Edge]:
    n = int(rng.integers(4, 16))
    p = float(rng.uniform(0.15, 0.8))
    edges: list[Edge] = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < p]
    if rng.random() < 0.5:  # a hub joined to most nodes
        edges += [(100, i) for i in range(n) if rng.random() < 0.9]
    return edges


def _clique_hub(d: int, cliques: int, with_hub: bool) -> list[Edge]:
    """Disjoint cliques K_{d+1} (each node in exactly Δ triangles), and a hub joined to all."""
    edges: list[Edge] = []
    for c in range(cliques):
        members = [10 * c + i for i in range(d + 1)]
        edges += list(itertools.combinations(members, 2))
        if with_hub:
            edges += [(-1, m) for m in members]
    return edges


def _without(edges: Sequence[Edge], v: Hashable) -> list[Edge]:
    return [e for e in edges if v not in e]


@pytest.mark.parametrize("block", [1, lipschitz.BLOCK_VARIABLES])
def test_statistic_is_within_the_certified_range_of_the_full_program(
    block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # block = 1: every connected component is its own program (the decomposition is exact)
    monkeypatch.setattr(lipschitz, "BLOCK_VARIABLES", block)
    rng = np.random.default_rng(2026)  # test data only
    checked = heavy_cases = 0
    for _ in range(150):
        # two disjoint random graphs: the heavy nodes form several components
        edges = _random_graph(rng) + [(a + 1000, b + 1000) for a, b in _random_graph(rng)]
        cap = int(rng.integers(0, 11))
        f = _full_program(edges, cap)
        pats = _patterns(edges, cap)
        got = lipschitz.statistic(pats, cap)
        assert f - 1 - 1e-7 <= got <= f + 0.5 + 1e-7, (f, got, cap)
        checked += 1
        heavy_cases += any(any(v is not None for v in k) for k, _ in pats)
    assert checked == 150 and heavy_cases > 50  # the program was solved, not skipped


@pytest.mark.parametrize("d", [2, 3, 5])
def test_exact_triangle_count_when_degrees_are_at_most_d(d: int) -> None:
    rng = np.random.default_rng(d)  # test data only
    for _ in range(30):
        n = 14
        deg = [0] * n
        edges: list[Edge] = []
        for i, j in itertools.combinations(rng.permutation(n).tolist(), 2):
            if deg[i] < d and deg[j] < d and rng.random() < 0.6:
                edges.append((i, j))
                deg[i] += 1
                deg[j] += 1
        cap = lipschitz.triangle_cap(d)
        assert lipschitz.statistic(_patterns(edges, cap), cap) == len(_triangles(edges))


@pytest.mark.parametrize("d", [2, 3, 4])
def test_node_sensitivity_on_every_node_removal(d: int) -> None:
    cap = lipschitz.triangle_cap(d)
    bound = lipschitz.sensitivity(d)
    assert bound == cap + 1
    rng = np.random.default_rng(100 + d)  # test data only
    graphs = [_random_graph(rng) for _ in range(25)]
    graphs += [_clique_hub(d, k, True) for k in (1, 3, 6)]
    worst_f = worst_stat = 0.0
    for edges in graphs:
        f = _full_program(edges, cap)
        s = lipschitz.statistic(_patterns(edges, cap), cap)
        for v in {x for e in edges for x in e}:
            sub = _without(edges, v)
            worst_f = max(worst_f, abs(f - _full_program(sub, cap)))
            worst_stat = max(worst_stat, abs(s - lipschitz.statistic(_patterns(sub, cap), cap)))
    assert worst_f <= cap + 1e-7
    assert worst_stat <= bound
    assert worst_f >= cap - 1e-7  # the bound is reached: the test can see a violation


def test_control_naive_truncation_moves_triangles_far_beyond_the_bound() -> None:
    d, cliques = 4, 6
    before = _clique_hub(d, cliques, False)
    after = _clique_hub(d, cliques, True)

    def naive(edges: list[Edge]) -> int:
        u = np.array([e[0] for e in edges])
        w = np.array([e[1] for e in edges])
        codes, _ = pd.factorize(np.concatenate([u, w]), sort=True)
        kept = naive_truncation(codes[: len(u)], codes[len(u) :], d)
        return triangle_count(u[kept], w[kept])

    # the hub lifts every clique node to degree D + 1: naive truncation drops every clique
    assert naive(before) - naive(after) == cliques * 10 > lipschitz.sensitivity(d)
    cap = lipschitz.triangle_cap(d)
    change = lipschitz.statistic(_patterns(after, cap), cap) - lipschitz.statistic(
        _patterns(before, cap), cap
    )
    assert 0 <= change <= lipschitz.sensitivity(d)


def _session(tmp_path: Path) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", source=SeededRandom(5))


def _text(h: Hashable | None) -> Hashable | None:
    return h.decode() if isinstance(h, bytes) else h


def _canonical(pats: list[Pattern]) -> list[tuple[tuple[Hashable, ...], int]]:
    out: dict[tuple[Hashable, ...], int] = {}
    for k, n in pats:
        heavy = tuple(sorted((v for v in k if v is not None), key=repr))
        out[heavy] = out.get(heavy, 0) + n
    return sorted(out.items(), key=repr)


@pytest.mark.parametrize("ids", ["int", "text"])
def test_engine_patterns_match_the_reference(tmp_path: Path, ids: str) -> None:
    rng = np.random.default_rng(7)  # test data only
    n, m = 120, 900
    w = (np.arange(n) + 2.0) ** -1.2  # skewed degrees: hubs, many heavy patterns
    a = rng.choice(n, m, p=w / w.sum())
    b = rng.integers(0, n, m)
    frame = pd.DataFrame({"a": a, "b": b})
    if ids == "text":
        frame = frame.astype(str).radd("node-")
    edges = list({(min(x, y), max(x, y)) for x, y in zip(frame.a, frame.b, strict=True) if x != y})
    cap = lipschitz.triangle_cap(4)
    with _session(tmp_path) as s:
        s.add_graph("g", frame, source_col="a", target_col="b", unit="node", max_degree=4)
        g = s.graph("g")
        table = g._run(sqlgen.triangle_structure(g._engine.capabilities, g._ends, cap))
        rows = zip(*(table.column(i).to_pylist() for i in range(4)), strict=True)
        # text ids come back as the UTF-8 bytes of their NFC text (sqlgen.node_id)
        got = [(tuple(_text(h) for h in (h1, h2, h3)), n) for h1, h2, h3, n in rows]
        want = _patterns(edges, cap)
        assert _canonical(got) == _canonical(want)
        assert sum(n for _, n in got) == len(_triangles(edges)) > 100
        assert len(_canonical(want)) > 20  # heavy nodes, pairs and triples occur
        value = g._exact(GraphQuery(Kind.TRIANGLES), 1).values.tolist()
        assert value == [lipschitz.statistic(want, cap)]


def test_an_uncertified_solution_fails_before_any_charge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = pd.DataFrame(_clique_hub(3, 3, True), columns=["a", "b"])
    with _session(tmp_path) as s:
        s.add_graph("g", frame, source_col="a", target_col="b", unit="node", max_degree=3)
        monkeypatch.setattr(lipschitz, "_solve", lambda *args: (0.0, float("inf")))
        with pytest.raises(InternalError, match="could not be certified"):
            s.graph("g").triangle_count(epsilon=1)
        assert s.budget.spent == Epsilon(epsilon=0)


def test_no_heavy_node_needs_no_program() -> None:
    assert lipschitz.statistic([((None, None, None), 5), ((None, None, None), 0)], 3) == 5
    assert lipschitz.statistic([], 3) == 0
    # a cap of 0 (D = 1) allows no triangle at all
    assert lipschitz.statistic([((1, 2, 3), 4), ((None, 2, None), 1)], 0) == 0


def test_every_nan_id_is_one_node() -> None:
    # NaN ≠ NaN in Python: two pattern rows naming the NaN node must still share its one
    # constraint (the engine groups NaN ids as one node); with Δ = 3 the NaN node carries at
    # most 3 triangles, so the program's value is at most 3 + 0 (node 1 carries the rest)
    first, second = float("nan"), float("nan")
    assert first is not second
    pats: list[Pattern] = [((first, None, None), 5), ((second, 1, None), 5)]
    assert lipschitz.statistic(pats, 3) == 3

"""Benchmark of DP graph queries (issue #14) against non-private counts on the same DuckDB.

Data (``--shape``): ``power-law``, a random graph with power-law degrees (Chung–Lu:
``--edges`` edge rows whose two ends are drawn independently with probability ∝
``(i + i0)^(−1/(γ−1))``, γ = 2.5, over ``--nodes`` node ids; a few rows are self-loops or
repeats, which the normalisation drops), or ``communities``, dense communities of 40 nodes
plus power-law hubs (triangle-rich with ``--nodes`` about ``--edges``/10: most nodes lie in
more triangles than a small ``D`` allows, so the node-level triangle program is large);
registered once as a pandas DataFrame in a :class:`~deniable.curator.session.Session`'s
DuckDB engine.

Timed, end to end through the Python API (ledger charge and noise included; a slightly
different ε per repetition so that no answer is a free replay):

* edge level: ``edge_count`` and ``degree_histogram`` (degrees clamped to D);
* node level: ``edge_count`` and ``degree_histogram`` through the edge-addition projection
  (the edge list leaves DuckDB ordered by the keyed hash, the sequential projection runs in
  Python: its parts are timed separately);
* ``triangle_count`` at both levels: edge level through mutual top-D in the engine, node
  level through the heavy-node patterns (engine) and the certified linear program (Python).

Floors, non-private, on the same DuckDB table and connection: ``COUNT(*)`` of the edge rows
(raw), the edge count of the normalised simple graph (``COUNT(*)`` over ``DISTINCT
LEAST(a, b), GREATEST(a, b)``), the exact degree histogram and the exact triangle count
(degree-ordered enumeration) of the normalised graph. Each
DP query is reported as a ratio to the floor of the same statistic (the normalised count or
histogram), measured in the same run (each floor before and after the DP queries of a
repetition): wall-clock and process CPU time (all of DuckDB's
threads; less sensitive to other load on a shared machine), minima of interleaved
repetitions.

With ``--ids text`` every id becomes a string (``"u123456"``): the DP statistics then
compare node identities as the UTF-8 bytes of NFC text (:func:`deniable.graph.sqlgen.node_id`)
while the floors read the raw columns, so the ratios include that normalisation's cost.

Run: ``.venv/bin/python benchmarks/graph.py [--shape power-law] [--ids integer] [--edges 1e7]
[--nodes 2e6] [--max-degree 50] [--repeat 5]`` (writes ``benchmarks/results/graph.md``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.engines.base import DUCKDB_CAPABILITIES
from deniable.graph import lipschitz, sqlgen
from deniable.graph.graph import _dense_ids
from deniable.graph.projection import edge_addition_projection

RESULTS = Path(__file__).resolve().parent / "results" / "graph.md"


def power_law_edges(edges: int, nodes: int, gamma: float = 2.5, seed: int = 1) -> pd.DataFrame:
    """Chung–Lu edge rows with power-law expected degrees (benchmark data, numpy's PRNG)."""
    rng = np.random.default_rng(seed)
    i = np.arange(nodes, dtype=np.float64)
    weight = (i + 10.0) ** (-1.0 / (gamma - 1.0))
    cdf = np.cumsum(weight)
    cdf /= cdf[-1]
    a = np.searchsorted(cdf, rng.random(edges)).astype(np.int64)
    b = np.searchsorted(cdf, rng.random(edges)).astype(np.int64)
    return pd.DataFrame({"a": a, "b": b})


def community_edges(edges: int, nodes: int, size: int = 40, seed: int = 2) -> pd.DataFrame:
    """Dense communities and power-law hubs: a triangle-rich graph (benchmark data).

    Nine edge rows in ten join two random members of one community of ``size`` nodes (many
    triangles, every member in far more than ``D(D − 1)/2`` of them when communities are
    dense); the tenth joins a community member to a node drawn with power-law weights (hubs).
    """
    rng = np.random.default_rng(seed)
    inner = edges - edges // 10
    community = rng.integers(0, max(nodes // size, 1), inner)
    a = community * size + rng.integers(0, size, inner)
    b = community * size + rng.integers(0, size, inner)
    hubs = power_law_edges(edges // 10, nodes, seed=seed + 1)
    return pd.DataFrame(
        {
            "a": np.concatenate([a, hubs.a.to_numpy()]).astype(np.int64),
            "b": np.concatenate([b, hubs.b.to_numpy()]).astype(np.int64),
        }
    )


SHAPES = {"power-law": power_law_edges, "communities": community_edges}


def timed(fn: Callable[[], object], wall: list[float], cpu: list[float]) -> None:
    """Append the wall-clock and the process CPU time (all threads) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    cpu.append(time.process_time() - c0)
    wall.append(time.perf_counter() - w0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", type=float, default=1e7)
    parser.add_argument("--nodes", type=float, default=2e6)
    parser.add_argument("--max-degree", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="power-law")
    parser.add_argument("--ids", choices=["integer", "text"], default="integer")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    m, n, d = int(args.edges), int(args.nodes), args.max_degree

    t0 = time.perf_counter()
    frame = SHAPES[args.shape](m, n)
    if args.ids == "text":  # e.g. "u123456": node identities become bytes of NFC text
        frame = "u" + frame.astype(str)
    gen_time = time.perf_counter() - t0
    tmp = tempfile.mkdtemp()
    session = Session(budget=Epsilon(epsilon=10_000), ledger=os.path.join(tmp, "ledger.db"))
    t0 = time.perf_counter()
    for unit in ("edge", "node"):
        session.add_graph(
            f"g_{unit}", frame, source_col="a", target_col="b", unit=unit, max_degree=d
        )
    reg_time = time.perf_counter() - t0
    g_edge, g_node = session.graph("g_edge"), session.graph("g_node")
    table = g_edge._edges.name
    spec = g_edge._ends
    # the floors read the raw end columns: no node identity (sqlgen.node_id) is computed
    raw_ends = sqlgen.Ends(table, spec.source, spec.target, sqlgen.IdMode.INTEGER)
    caps = DUCKDB_CAPABILITIES

    def run_sql(tree: object) -> object:
        return g_edge._run(tree)  # type: ignore[arg-type]

    from sqlglot import exp

    raw = exp.select(exp.Count(this=exp.Star())).from_(exp.Table(this=exp.to_identifier(table)))
    floors: dict[str, Callable[[], object]] = {
        "COUNT(*) of the edge rows": lambda: run_sql(raw),
        "edge count (normalised)": lambda: run_sql(sqlgen.edge_count(caps, raw_ends)),
        "degree histogram (normalised, exact)": lambda: run_sql(
            sqlgen.clamped_degree_histogram(caps, raw_ends, 10**9)
        ),
        "triangle count (normalised, exact)": lambda: run_sql(
            sqlgen.triangle_total(caps, raw_ends)
        ),
    }
    eps = iter(range(1, 10**6))

    def e() -> float:
        return 0.5 + next(eps) / 10**6

    dp: dict[str, Callable[[], object]] = {
        "edge level: edge count": lambda: g_edge.edge_count(epsilon=e()),
        "edge level: degree histogram": lambda: g_edge.degree_histogram(epsilon=e()),
        "node level: edge count": lambda: g_node.edge_count(epsilon=e()),
        "node level: degree histogram": lambda: g_node.degree_histogram(epsilon=e()),
        "edge level: triangle count": lambda: g_edge.triangle_count(epsilon=e()),
        "node level: triangle count": lambda: g_node.triangle_count(epsilon=e()),
    }
    times: dict[str, list[float]] = {k: [] for k in (*floors, *dp)}
    cpu: dict[str, list[float]] = {k: [] for k in (*floors, *dp)}
    parts: dict[str, list[float]] = {"pull ordered edges": [], "dense ids": [], "projection": []}
    tri_parts: dict[str, list[float]] = {"heavy patterns (engine)": [], "linear program": []}
    for _ in range(args.repeat):
        # floors both before and after the DP queries (the minimum counts), so that neither
        # side always runs right after the node-level parts' large Python arrays
        for name, fn in (*floors.items(), *dp.items(), *floors.items()):
            timed(fn, times[name], cpu[name])
        # the node-level parts
        t = time.perf_counter()
        ordered = run_sql(sqlgen.ordered_edges(caps, spec, 12345))
        parts["pull ordered edges"].append(time.perf_counter() - t)
        t = time.perf_counter()
        u_raw = ordered.column(0).to_numpy()  # type: ignore[attr-defined]
        w_raw = ordered.column(1).to_numpy()  # type: ignore[attr-defined]
        u_ids, w_ids, _ = _dense_ids(u_raw, w_raw)
        parts["dense ids"].append(time.perf_counter() - t)
        t = time.perf_counter()
        kept = edge_addition_projection(u_ids, w_ids, d)
        parts["projection"].append(time.perf_counter() - t)
        # the node-level triangle count's parts
        t = time.perf_counter()
        pat = run_sql(sqlgen.triangle_structure(caps, spec, lipschitz.triangle_cap(d)))
        tri_parts["heavy patterns (engine)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        rows = list(zip(*(pat.column(i).to_pylist() for i in range(4)), strict=True))  # type: ignore[attr-defined]
        lipschitz.statistic(
            (((h1, h2, h3), c) for h1, h2, h3, c in rows), lipschitz.triangle_cap(d)
        )
        tri_parts["linear program"].append(time.perf_counter() - t)
    simple = int(run_sql(sqlgen.edge_count(caps, raw_ends)).column(0)[0].as_py())  # type: ignore[attr-defined]
    triangles = int(run_sql(sqlgen.triangle_total(caps, raw_ends)).column(0)[0].as_py())  # type: ignore[attr-defined]
    patterns = len(rows)
    ends = np.concatenate([u_ids, w_ids])
    deg = np.bincount(ends)
    session.close()

    floor_of = {
        "edge level: edge count": "edge count (normalised)",
        "node level: edge count": "edge count (normalised)",
        "edge level: degree histogram": "degree histogram (normalised, exact)",
        "node level: degree histogram": "degree histogram (normalised, exact)",
        "edge level: triangle count": "triangle count (normalised, exact)",
        "node level: triangle count": "triangle count (normalised, exact)",
    }
    lines = [
        f"## Graph queries (`benchmarks/graph.py`), {args.shape} graph, {args.ids} ids, D = {d}",
        "",
        (
            (
                "A power-law random graph (Chung–Lu, γ = 2.5): "
                if args.shape == "power-law"
                else "Communities of 40 nodes (9 edge rows in 10) and power-law hubs (1 in 10): "
            )
            + f"{m:,} edge rows over {n:,} node ids, "
            f"{simple:,} distinct undirected edges after normalisation, maximum degree "
            f"{int(deg.max()):,}, {int((deg > d).sum()):,} nodes above D = {d}; the projection "
            f"keeps {int(kept.sum()):,} edges; {triangles:,} triangles, whose heavy nodes (in "
            f"more than Δ = {lipschitz.triangle_cap(d):,} triangles) form {patterns:,} patterns: "
            f"the node-level triangle program's variables. DuckDB in-process, "
            f"{os.cpu_count()} CPUs "
            f"({platform.machine()}), minimum of {args.repeat} interleaved runs; data generation "
            f"{gen_time:.1f} s, registration of both graphs {reg_time:.1f} s (not timed below)."
        ),
        "",
        "| query | wall (s) | CPU (s) | × floor, wall | × floor, CPU |",
        "|---|---|---|---|---|",
    ]
    for name in floors:
        lines.append(f"| floor: {name} | {min(times[name]):.3f} | {min(cpu[name]):.3f} | | |")
    for name in dp:
        f = floor_of[name]
        ratio = min(times[name]) / min(times[f])
        cratio = min(cpu[name]) / min(cpu[f])
        lines.append(
            f"| DP {name} | {min(times[name]):.3f} | {min(cpu[name]):.3f} | {ratio:.2f}× "
            f"| {cratio:.2f}× |"
        )
    lines += [
        "",
        "Node-level parts (one run each, minimum): "
        + ", ".join(f"{k} {min(v):.2f} s" for k, v in parts.items())
        + ". The projection is sequential (Day, Li & Lyu's edge-addition order), so it runs "
        "in Python over the edge list DuckDB sends in the keyed-hash order; edge-level "
        "queries stay in the engine.",
        "",
        "Node-level triangle count (no projection: the linear-program Lipschitz extension of "
        "`deniable.graph.lipschitz`), parts (minimum): "
        + ", ".join(f"{k} {min(v):.2f} s" for k, v in tri_parts.items())
        + ". The floor enumerates the triangles the same way (edges oriented by degree, "
        "O(|E|^1.5)).",
        "",
        (
            f"Reproduce: `.venv/bin/python benchmarks/graph.py --shape {args.shape} "
            f"--ids {args.ids} "
            f"--edges {args.edges:g} --nodes {args.nodes:g} --max-degree {d} "
            f"--repeat {args.repeat}`"
        ),
        "",
    ]
    text = "\n".join(lines)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()

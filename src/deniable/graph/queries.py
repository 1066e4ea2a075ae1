"""The graph queries, their sensitivities per privacy level, and what their truncation does.

Neighbouring graphs (unbounded DP): at **edge level**, add or remove one edge (an unordered
pair ``{a, b}``: every row of the edge table naming that pair, in either orientation); at
**node level**, add or remove one node together with all its edges — every row whose
``source_col`` *or* ``target_col`` is that node, and its row of the node table.

L1 sensitivities (``D`` = the declared ``max_degree``; proofs in
:mod:`deniable.graph.projection`, and for node-level triangles in
:mod:`deniable.graph.lipschitz`):

=============================  ==========================  ==================================
query                          edge level                  node level (θ-projection, θ = D)
=============================  ==========================  ==================================
edge count                     1 (no truncation)           D
degree histogram, buckets 1..D 4 (degrees clamped to D)    2D + 1 (projected degrees)
nodes with degree ≥ d          2 (true degrees)            D + 1 (projected degrees)
triangle count                 max(2(D − 1), 1), mutual    D(D − 1)/2 + 1 (no projection: a
                               top-D truncation            linear-program Lipschitz extension)
edge ends per node attribute   2 (no truncation)           2D (projected degrees)
=============================  ==========================  ==================================

Under a ρ-zCDP budget the discrete Gaussian is calibrated to the L2 sensitivity, bounded here
by the L1 sensitivity above (``‖x‖₂ ≤ ‖x‖₁``: sound, a little loose for the histograms).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from deniable.errors import InvalidParameter
from deniable.graph import lipschitz

Unit = Literal["edge", "node"]
UNITS: tuple[Unit, ...] = ("edge", "node")


class Kind(enum.Enum):
    """What a graph query computes."""

    EDGE_COUNT = "edge_count"
    DEGREE_HISTOGRAM = "degree_histogram"
    DEGREE_AT_LEAST = "nodes_with_degree_at_least"
    TRIANGLES = "triangle_count"
    EDGE_ENDS_BY = "edge_count_by"


@dataclass(frozen=True)
class GraphQuery:
    """One graph query (public: no data).

    Attributes:
        kind: what is computed.
        threshold: ``d`` of "nodes with degree ≥ d".
        attribute: the node attribute of an edge count by attribute.
        value_name: the output column of the noisy values.
        key_name: the output column of the keys (histograms and groups), else None.
    """

    kind: Kind
    threshold: int | None = None
    attribute: str | None = None
    value_name: str = "n"
    key_name: str | None = None


def check_unit(unit: object) -> Unit:
    """``unit`` as ``"edge"`` or ``"node"``.

    Raises:
        InvalidParameter: anything else.
    """
    if unit == "edge":
        return "edge"
    if unit == "node":
        return "node"
    raise InvalidParameter(
        "unit must be 'edge' (one edge is protected) or 'node' (a node and all its edges)"
    )


MAX_DEGREE = 100_000
"""Largest declared ``max_degree``: a degree histogram has one row per degree ``1..D``."""


def check_max_degree(max_degree: object) -> int:
    """``max_degree`` as an integer in ``1..MAX_DEGREE`` (a public choice, never from data)."""
    if isinstance(max_degree, bool) or not isinstance(max_degree, int) or max_degree < 1:
        raise InvalidParameter("max_degree must be a positive integer (a public choice)")
    if max_degree > MAX_DEGREE:
        raise InvalidParameter(
            f"max_degree must be at most {MAX_DEGREE:,}: a degree histogram outputs one row "
            "per degree, and noise grows with D (a smaller bound answers better)"
        )
    return max_degree


def sensitivity(query: GraphQuery, unit: Unit, max_degree: int) -> int:
    """The L1 sensitivity of ``query`` at privacy level ``unit`` (table in the module docstring).

    Raises:
        InvalidParameter: a threshold outside ``1..`` (or above ``D`` at node level).

    Examples:
        >>> sensitivity(GraphQuery(Kind.DEGREE_HISTOGRAM), "node", 10)
        21
        >>> sensitivity(GraphQuery(Kind.EDGE_COUNT), "edge", 10)
        1
    """
    d = max_degree
    kind = query.kind
    if kind is Kind.DEGREE_AT_LEAST:
        t = query.threshold
        if isinstance(t, bool) or not isinstance(t, int) or t < 1:
            raise InvalidParameter("the degree threshold d must be a positive integer")
        if unit == "node" and t > d:
            raise InvalidParameter(
                f"at node level degrees are bounded by max_degree = {d}: ask for d ≤ {d}"
            )
    if unit == "edge":
        return {
            Kind.EDGE_COUNT: 1,
            Kind.DEGREE_HISTOGRAM: 4,
            Kind.DEGREE_AT_LEAST: 2,
            Kind.TRIANGLES: max(2 * (d - 1), 1),
            Kind.EDGE_ENDS_BY: 2,
        }[kind]
    if kind is Kind.TRIANGLES:
        return lipschitz.sensitivity(d)
    return {
        Kind.EDGE_COUNT: d,
        Kind.DEGREE_HISTOGRAM: 2 * d + 1,
        Kind.DEGREE_AT_LEAST: d + 1,
        Kind.EDGE_ENDS_BY: 2 * d,
    }[kind]


def unit_text(unit: Unit, source: str, target: str) -> str:
    """The privacy unit as the answer's metadata states it."""
    if unit == "edge":
        return f"edge ({source}, {target})"
    return f"node ({source} or {target})"


def policies(
    query: GraphQuery, unit: Unit, max_degree: int, source: str, target: str
) -> tuple[str, ...]:
    """What was done to the edges before aggregation, as policy (never a count of edges)."""
    d = max_degree
    out = [
        (
            f"the graph is simple and undirected: each unordered pair ({source}, {target}) "
            "counts once (both orientations and duplicates included); rows with a NULL end "
            "or with both ends equal are dropped"
        ),
    ]
    if unit == "edge":
        out.append(
            "edge-level privacy: neighbouring graphs differ in one edge; node attributes "
            "are not protected"
        )
    else:
        out.append(
            f"node-level privacy: neighbouring graphs differ in one node and all its edges "
            f"(every row whose {source} or {target} is that node)"
        )
    kind = query.kind
    if unit == "node" and kind is Kind.TRIANGLES:
        cap = lipschitz.triangle_cap(d)
        out.append(
            f"node-level triangles (Lipschitz extension, Kasiviswanathan et al. 2013): no "
            f"edge is dropped; the count is the value of a linear program that weights each "
            f"triangle in [0, 1] so that no node carries more than {cap} = {d}·{d - 1}/2 "
            f"triangles, certified to the nearest integer (within 1 below and 1/2 above "
            f"the program's value); it equals the triangle count when "
            f"every node lies in at most {cap} triangles (always when degrees are at most "
            f"{d}) and is lower where nodes carry more"
        )
    elif unit == "node":
        out.append(
            f"degree bounding (node level): edge-addition projection (Day, Li & Lyu 2016) — "
            f"edges are visited in a keyed-hash order with a fresh secret per query, and an "
            f"edge is kept iff both its ends have fewer than {d} kept edges; the answer "
            f"describes the projected graph, in which every node has at most {d} edges "
            f"(where degrees exceed {d}, edges are dropped and counts are low)"
        )
        if kind is Kind.DEGREE_HISTOGRAM:
            out.append(f"degrees are those of the projected graph: buckets 1..{d}")
    elif kind is Kind.TRIANGLES:
        out.append(
            f"degree bounding (edge level): each node keeps its {d} lowest-ranked edges "
            f"under a keyed hash with a fresh secret per query, and an edge is kept iff "
            f"both its ends keep it (mutual top-{d}); triangles of the truncated graph are "
            f"counted (where degrees exceed {d} the count is low)"
        )
    elif kind is Kind.DEGREE_HISTOGRAM:
        out.append(f"degrees above {d} are counted in the last bucket ({d} or more)")
    if kind in (Kind.DEGREE_HISTOGRAM, Kind.DEGREE_AT_LEAST):
        out.append("nodes without edges are not counted (the edge table does not show them)")
    if kind is Kind.EDGE_ENDS_BY:
        out.append(
            f"each edge counts once at each end whose node has a row in the node table, "
            f"in the group of that node's {query.attribute!r} (an edge inside one group "
            "counts twice there); values outside the declared domain are dropped"
        )
    return tuple(out)

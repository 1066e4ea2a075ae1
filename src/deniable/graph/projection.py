"""Degree bounding with provable sensitivity: the two truncations the graph queries use.

Graphs are simple and undirected: an edge is an unordered pair ``{u, w}`` of distinct node
ids (rows with a NULL end or ``u = w`` are dropped, duplicates and both orientations count
once). Every edge gets a pseudo-random rank from a keyed hash ``h(u, w)`` of the pair under a
secret drawn fresh for each query, ties broken by ``(u, w)``: the rank of an edge is a
function of the pair and the secret only, never of the rest of the graph (a *stable order*).
Conditioned on the secret, each truncation below is a deterministic function of the graph
whose distance between neighbouring graphs is bounded on *every* input (no promise that the
input's degrees are at most ``D``); the noise is calibrated to that bound, so the release is
DP for every secret, hence DP.

Edge-level: mutual top-``D`` (:func:`mutual_top_d`)
------------------------------------------------------
Each node ``x`` keeps the set ``K(x)`` of its ``D`` lowest-ranked incident edges; an edge is
kept iff it is in the kept sets of both its ends. The result has maximum degree ``≤ D``.

*Claim.* If ``G' = G − e`` with ``e = {u, v}``, then ``T(G) − T(G') ⊆ {e}`` and
``T(G') − T(G) ⊆ {f_u, f_v}`` where ``f_x`` is the ``(D+1)``-th ranked edge of ``x`` in
``G``: at most three edges change status, all in the same known way.
*Proof.* For ``x ∉ {u, v}`` the incident edges, hence ``K(x)``, are the same in both graphs.
For ``x = u``: if ``e ∉ K_G(u)`` then ``K_G'(u) = K_G(u)``; otherwise ``K_G'(u) =
K_G(u) − e + f_u`` (the next edge in ``u``'s order moves up, if there is one). Same for ``v``.
An edge other than ``e``, ``f_u``, ``f_v`` has the same kept sets at both ends, so the same
status; ``f_u`` can only be gained (it enters ``K(u)``; ``K`` of its other end is unchanged,
since that end is not ``v`` — the only ``u``–``v`` edge is ``e``). ∎

Consequence for triangles: ``T`` has maximum degree ``D``, so an edge lies in at most
``D − 1`` triangles of it; ``G``→``G'`` loses at most the ``D − 1`` triangles through ``e``
and gains at most ``2(D − 1)`` through ``f_u`` and ``f_v``, so the triangle count moves by at
most ``2(D − 1)`` (L1 sensitivity ``max(2(D − 1), 1)``). Edge counts, degree histograms and
degree thresholds need no truncation at edge level (see :mod:`deniable.graph.queries`).

Node-level: edge-addition θ-projection (:func:`edge_addition_projection`)
--------------------------------------------------------------------------
Day, Li & Lyu (SIGMOD 2016, "Publishing graph degree distribution with node differential
privacy", §4): visit the edges in the stable order and add ``{x, y}`` to the projection iff
both ``x`` and ``y`` currently have fewer than ``θ = D`` projected edges. The result has
maximum degree ``≤ D``. Day et al. prove that the degree histogram of the projection has L1
sensitivity ``2θ + 1`` under node neighbours; we use the following potential argument, which
gives that bound and the others we need.

*Claim.* Let ``G' = G + v`` (node ``v`` with any number of edges, possibly all ``n − 1``), and
``d``, ``d'`` the projected degrees. Let ``k ≤ D`` be the projected degree of ``v`` in
``G'``. Then ``Σ_{x ≠ v} |d'(x) − d(x)| ≤ k`` and ``0 ≤ |E(π(G'))| − |E(π(G))| ≤ k``.
*Proof.* Run both projections side by side over ``G'``'s order (which restricted to
``G``'s edges is ``G``'s order: stability). Let ``Φ = Σ_{x ≠ v} |d'(x) − d(x)|`` over the
partial degrees, ``Φ = 0`` at the start. (i) An edge ``{v, y}`` exists only in ``G'``; if it
is added, ``Φ`` grows by exactly 1 (at ``y``), and this happens ``k`` times. (ii) An edge
``{x, y}`` without ``v`` is seen by both runs. If both decide alike, ``Φ`` is unchanged. If
it is added in one run only, say in run ``A`` and not in ``B``: ``A`` saw ``d_A(x), d_A(y) <
D`` and ``B`` saw (wlog) ``d_B(x) ≥ D``, so ``d_B(x) > d_A(x)``, and ``A``'s addition closes
the gap at ``x`` by one; at ``y`` the gap moves by one either way. ``Φ`` changes by ``−2`` or
``0``: it never grows. So ``Φ ≤ k`` at the end. For the edge counts, let
``S = Σ_{x ≠ v} (d'(x) − d(x))``; (i) adds 1 to ``S``, an edge added only in ``G'``'s run
adds 2, only in ``G``'s run subtracts 2, so ``|E'| − |E| = k + (S − k)/2 = (S + k)/2`` with
``|S| ≤ Φ ≤ k``. ∎

Consequences (L1 sensitivities at node level, with ``D`` the declared maximum degree):
edge count ``D``; degree histogram over degrees ``1..D`` ``2D + 1`` (at most ``k`` nodes
other than ``v`` change degree, each moving between two buckets or in/out of degree 0, and
``v`` itself adds one); nodes with degree ``≥ d`` (``d ≥ 1``) ``D + 1``; edge ends per node
attribute ``Σ_{x ∈ group} d(x)`` ``2D`` (``k`` at ``v``'s group, ``≤ Φ ≤ k`` elsewhere).

What the projection does *not* bound: the edge sets themselves. One node can start a chain of
alternating decisions along a path (with ``D = 1`` the projection is the greedy matching in
the stable order; adding a pendant edge at the start of a path flips every edge of it), so
statistics that depend on *which* edges survive — triangle counts, counts grouped by the
attribute of one chosen end — have no bound from ``D``. At node level deniable counts
triangles without any projection, by a linear-program Lipschitz extension
(:mod:`deniable.graph.lipschitz`), and refuses the one-end groupings.

Why not naive truncation: keeping an edge iff both ends have degree ``≤ D`` (or mutual
top-``D`` at node level) is unstable: removing a hub lowers the degree of all its
neighbours, and neighbours at ``D + 1`` drop to ``D`` and get all their other edges back —
the edge count moves by up to ``deg(v)·D`` (:func:`naive_truncation`, kept here as the
negative control of the tests; no release path calls it).

The projection is sequential: it runs here, in Python, over the edge list the engine sends
ordered by the keyed hash (documented in ``docs/graphs.md``; the one place where rows leave
the engine). It is ``O(|E|)`` with a small constant.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter

I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


class _NaN:
    """The one NaN key: NaN ≠ NaN in Python, while engines group NaN values together."""

    def __repr__(self) -> str:
        return "NaN"


_NAN = _NaN()


def dict_key(value: object) -> object:
    """``value`` as a dictionary key on which every float NaN is one key (else unchanged).

    For node ids and attribute values read back from the engine, which groups NaN together.

    Examples:
        >>> dict_key(float("nan")) is dict_key(float("nan")), dict_key(1.5)
        (True, 1.5)
    """
    if isinstance(value, float) and math.isnan(value):
        return _NAN
    return value


def _check_d(max_degree: int) -> int:
    if isinstance(max_degree, bool) or not isinstance(max_degree, int | np.integer):
        raise InvalidParameter("max_degree must be a positive integer")
    if max_degree < 1:
        raise InvalidParameter("max_degree must be a positive integer")
    return int(max_degree)


def edge_addition_projection(u: npt.ArrayLike, w: npt.ArrayLike, max_degree: int) -> Bools:
    """Which edges the θ-projection keeps, visiting them in the given (stable) order.

    Args:
        u: first ends (dense integer node ids ``0..n−1``), in the stable order.
        w: second ends, same order.
        max_degree: θ = D.

    Returns:
        A boolean mask over the edges: kept or not. Kept edges give every node at most ``D``
        edges. Node-level sensitivities of its statistics are in the module docstring.

    Examples:
        >>> edge_addition_projection([0, 1, 2], [1, 2, 3], 1).tolist()  # a path, D = 1
        [True, False, True]
    """
    d = _check_d(max_degree)
    uu = np.asarray(u, dtype=np.int64)
    ww = np.asarray(w, dtype=np.int64)
    if uu.shape != ww.shape or uu.ndim != 1:
        raise InvalidParameter("u and w must be one-dimensional arrays of the same length")
    m = int(uu.size)
    keep = bytearray(m)
    if m == 0:
        return np.zeros(0, dtype=bool)
    n = int(max(uu.max(), ww.max())) + 1
    deg = [0] * n
    for i, (a, b) in enumerate(zip(uu.tolist(), ww.tolist(), strict=True)):
        if deg[a] < d and deg[b] < d:
            deg[a] += 1
            deg[b] += 1
            keep[i] = 1
    return np.frombuffer(bytes(keep), dtype=np.uint8).astype(bool)


def mutual_top_d(u: npt.ArrayLike, w: npt.ArrayLike, max_degree: int) -> Bools:
    """Which edges mutual top-``D`` keeps (edges given in the stable order); a reference.

    The engine computes the same thing in SQL (:mod:`deniable.graph.sqlgen`); this version
    is for tests. Edge-level stable: removing one edge changes the status of at most three.

    Examples:
        >>> mutual_top_d([0, 0, 0], [1, 2, 3], 2).tolist()  # a star: the centre keeps two
        [True, True, False]
    """
    d = _check_d(max_degree)
    uu = np.asarray(u, dtype=np.int64)
    ww = np.asarray(w, dtype=np.int64)
    m = int(uu.size)
    if m == 0:
        return np.zeros(0, dtype=bool)
    ends = np.concatenate([uu, ww])
    position = np.concatenate([np.arange(m), np.arange(m)])
    # rank of each edge among its end's edges, in the stable order (position = order)
    order = np.lexsort((position, ends))
    sorted_ends = ends[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_ends)) + 1]
    group_start = np.repeat(starts, np.diff(np.r_[starts, sorted_ends.size]))
    rank = np.empty(2 * m, dtype=np.int64)
    rank[order] = np.arange(2 * m) - group_start
    return np.asarray((rank[:m] < d) & (rank[m:] < d), dtype=bool)


def naive_truncation(u: npt.ArrayLike, w: npt.ArrayLike, max_degree: int) -> Bools:
    """Keep an edge iff both ends have degree ≤ D. NOT node-level stable: tests only."""
    d = _check_d(max_degree)
    uu = np.asarray(u, dtype=np.int64)
    ww = np.asarray(w, dtype=np.int64)
    if uu.size == 0:
        return np.zeros(0, dtype=bool)
    deg = degrees(uu, ww, int(max(uu.max(), ww.max())) + 1)
    return np.asarray((deg[uu] <= d) & (deg[ww] <= d), dtype=bool)


def degrees(u: npt.ArrayLike, w: npt.ArrayLike, n: int) -> I64:
    """Degree of each node ``0..n−1`` in the graph of edges ``(u, w)``."""
    uu = np.asarray(u, dtype=np.int64)
    ww = np.asarray(w, dtype=np.int64)
    return np.asarray(np.bincount(uu, minlength=n) + np.bincount(ww, minlength=n), dtype=np.int64)


def triangle_count(u: npt.ArrayLike, w: npt.ArrayLike) -> int:
    """Number of triangles of a simple undirected graph (a reference for tests)."""
    adj: dict[int, set[int]] = {}
    pairs = list(zip(np.asarray(u).tolist(), np.asarray(w).tolist(), strict=True))
    for a, b in pairs:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    total = 0
    for a, b in pairs:
        total += len(adj[a] & adj[b])
    return total // 3

"""Junction trees and exact inference on them, in log space.

The model of :mod:`deniable.synth.model` is a discrete graphical model whose factors live on
the maximal cliques of a triangulated interaction graph (the *junction tree*). This module
builds that tree from a set of cliques (greedy elimination: zero-fill eliminations first, then
the one whose new clique has the fewest cells) and calibrates it: two passes of sum-product
(or max-product) belief propagation with log-space messages, each a vectorised log-sum-exp.

Everything here is post-processing of public shapes and of DP measurements: no privacy cost.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from deniable.synth.domain import Domain

F64 = npt.NDArray[np.float64]
Clique = tuple[str, ...]


@dataclass(frozen=True)
class Link:
    """How a subset ``sub`` of a clique sits inside it (both in domain order).

    Attributes:
        sub: the subset's attributes.
        axes: the clique's axes to sum out to get ``sub``.
        shape: ``sub``'s array reshaped to broadcast against the clique's (1 on ``axes``).
    """

    sub: Clique
    axes: tuple[int, ...]
    shape: tuple[int, ...]


def link(domain: Domain, clique: Clique, sub: Clique) -> Link:
    """The :class:`Link` of ``sub`` (a subset of ``clique``, both in domain order)."""
    inside = set(sub)
    axes = tuple(i for i, name in enumerate(clique) if name not in inside)
    shape = tuple(1 if name not in inside else domain.shape((name,))[0] for name in clique)
    return Link(sub, axes, shape)


@dataclass(frozen=True)
class JunctionTree:
    """A rooted junction tree over a domain.

    Attributes:
        domain: the attributes and their sizes.
        cliques: the maximal cliques, each in domain order; together they cover every attribute.
        parent: the parent of each clique, -1 for the root (clique 0).
        order: the cliques parents-first (breadth first from the root).
        up: for each clique, its separator with its parent as a :class:`Link` into the clique
            (empty for the root).
        down: for each clique, the same separator as a :class:`Link` into the parent.
    """

    domain: Domain
    cliques: tuple[Clique, ...]
    parent: tuple[int, ...]
    order: tuple[int, ...]
    up: tuple[Link, ...]
    down: tuple[Link, ...]

    def shape(self, node: int) -> tuple[int, ...]:
        """The array shape of clique ``node``."""
        return self.domain.shape(self.cliques[node])

    def cells(self, node: int) -> int:
        """The number of cells of clique ``node``."""
        return self.domain.size(self.cliques[node])

    def largest(self) -> int:
        """The index of the clique with the most cells."""
        return max(range(len(self.cliques)), key=self.cells)

    def containing(self, clique: Sequence[str]) -> int | None:
        """The smallest junction-tree clique that contains ``clique``, or None."""
        want = set(clique)
        best: int | None = None
        for node, members in enumerate(self.cliques):
            if want <= set(members) and (best is None or self.cells(node) < self.cells(best)):
                best = node
        return best


def triangulate(domain: Domain, cliques: Sequence[Sequence[str]]) -> list[Clique]:
    """The maximal cliques of a chordal graph containing every clique and every attribute.

    Greedy elimination: at each step, a vertex whose neighbours are already pairwise connected
    (no fill) if there is one, the one whose elimination clique has fewest cells among those;
    otherwise the vertex whose elimination clique has the fewest cells. On a tree or any
    chordal interaction graph this adds no edge at all.
    """
    n = len(domain.names)
    sizes = domain.sizes
    # Adjacency as bitmasks: fill counts are popcounts, cheap enough for AIM to call this for
    # every candidate clique in every round.
    adj = [0] * n
    for clique in cliques:
        mask = 0
        for name in domain.canonical(clique):
            mask |= 1 << domain.index(name)
        for a in _bits(mask):
            adj[a] |= mask & ~(1 << a)

    def key(v: int) -> tuple[bool, int, int, int]:
        around = adj[v]
        fill = sum((around & ~adj[a] & ~(1 << a)).bit_count() for a in _bits(around)) // 2
        cells = sizes[v] * math.prod(sizes[a] for a in _bits(around))
        return (fill > 0, cells, fill, v)

    keys = {v: key(v) for v in range(n)}
    found: list[int] = []
    while keys:
        v = min(keys, key=keys.__getitem__)
        around = adj[v]
        found.append(around | (1 << v))
        del keys[v]
        for a in _bits(around):
            adj[a] = (adj[a] | around) & ~(1 << a) & ~(1 << v)
        # Only v's neighbours and theirs can have a new neighbourhood or fill count.
        touched = around
        for a in _bits(around):
            touched |= adj[a]
        for a in _bits(touched):
            if a in keys:
                keys[a] = key(a)
    maximal = [c for c in found if not any(c != o and c & o == c for o in found)]
    unique = list(dict.fromkeys(maximal))
    return [tuple(domain.names[i] for i in _bits(c)) for c in unique]


def _bits(mask: int) -> list[int]:
    """The positions of the set bits of ``mask``, ascending."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def clique_cells(domain: Domain, cliques: Sequence[Sequence[str]]) -> int:
    """The cells of the largest clique of the junction tree that ``cliques`` would produce.

    Public: depends only on the domain and the cliques. AIM calls it to check that a
    candidate model stays within a cell limit before choosing it.

    Examples:
        >>> d = Domain(("a", "b", "c"), (2, 3, 4))
        >>> clique_cells(d, [("a", "b"), ("b", "c")])
        12
        >>> clique_cells(d, [("a", "b"), ("b", "c"), ("a", "c")])
        24
    """
    return max(domain.size(c) for c in triangulate(domain, cliques))


def junction_tree(domain: Domain, cliques: Sequence[Sequence[str]]) -> JunctionTree:
    """The junction tree of the triangulated graph of ``cliques`` (every attribute included).

    The tree is a maximum spanning tree of the clique graph weighted by the number of shared
    attributes (which has the running-intersection property for the maximal cliques of a
    chordal graph); disconnected parts are joined by empty separators. Root: the largest
    clique.
    """
    maximal = triangulate(domain, cliques)
    root = max(range(len(maximal)), key=lambda i: domain.size(maximal[i]))
    maximal.insert(0, maximal.pop(root))
    k = len(maximal)
    sets = [set(c) for c in maximal]
    pairs = sorted(
        ((len(sets[i] & sets[j]), i, j) for i in range(k) for j in range(i + 1, k)),
        key=lambda t: -t[0],
    )
    group = list(range(k))

    def find(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    adjacent: list[list[int]] = [[] for _ in range(k)]
    for _, i, j in pairs:
        ri, rj = find(i), find(j)
        if ri != rj:
            group[ri] = rj
            adjacent[i].append(j)
            adjacent[j].append(i)
    parent = [-1] * k
    order = [0]
    seen = {0}
    for node in order:
        for other in adjacent[node]:
            if other not in seen:
                seen.add(other)
                parent[other] = node
                order.append(other)
    up: list[Link] = []
    down: list[Link] = []
    for node in range(k):
        p = parent[node]
        sep = tuple(a for a in maximal[node] if p >= 0 and a in sets[p])
        up.append(link(domain, maximal[node], sep))
        down.append(link(domain, maximal[p if p >= 0 else node], sep))
    return JunctionTree(domain, tuple(maximal), tuple(parent), tuple(order), tuple(up), tuple(down))


FLOOR = -700.0
"""Log values below this are raised to it before ``exp``: ``e^-700 ≈ 1e-304`` is still a normal
double, and subnormal results would make every later operation on the array ~100× slower."""


def exp(values: F64) -> F64:
    """``exp(max(values, FLOOR))``: never subnormal (a cell's mass changes by < 1e-304)."""
    out: F64 = np.exp(np.maximum(values, FLOOR))
    return out


def logsumexp(values: F64, axes: tuple[int, ...]) -> F64:
    """``log(sum(exp(values)))`` over ``axes`` (those axes dropped), without overflow.

    Terms more than 700 below the largest are counted as ``e^-700`` times it (relative error
    below 1e-300 per term).
    """
    if not axes:
        return values
    top = values.max(axis=axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    total = exp(values - top).sum(axis=axes)
    with np.errstate(divide="ignore"):
        out: F64 = np.log(total) + np.squeeze(top, axis=axes)
    return out


def maximum(values: F64, axes: tuple[int, ...]) -> F64:
    """The maximum of ``values`` over ``axes`` (those axes dropped)."""
    if not axes:
        return values
    out: F64 = values.max(axis=axes)
    return out


Reduce = Callable[[F64, tuple[int, ...]], F64]


def calibrate(
    tree: JunctionTree, potentials: Sequence[F64], reduce: Reduce = logsumexp
) -> list[F64]:
    """Unnormalised log beliefs of every clique: collect to the root, then distribute.

    With ``reduce=logsumexp`` (sum-product) each result is ``log Z + log P(x_C)`` of the model
    ``P(x) ∝ exp(Σ_C potentials_C(x_C))``; with ``reduce=maximum`` (max-product) it is the
    largest total log potential of a full assignment that agrees with ``x_C``.
    """
    collected, message = collect(tree, potentials, reduce)
    beliefs: list[F64] = list(collected)
    for node in tree.order:
        p = tree.parent[node]
        if p < 0:
            continue
        # What the parent knows without this child's own message (exact in log space).
        sent = message[node].reshape(tree.down[node].shape)
        back = reduce(beliefs[p] - sent, tree.down[node].axes)
        beliefs[node] = collected[node] + back.reshape(tree.up[node].shape)
    return beliefs


def probabilities(tree: JunctionTree, potentials: Sequence[F64]) -> list[F64]:
    """Each clique's marginal probabilities under ``P(x) ∝ exp(Σ_C potentials_C(x_C))``.

    The same two passes as :func:`calibrate` with sum-product, but the downward pass works on
    probabilities: a child's belief is its collected potential plus the log of its parent's
    marginal on their separator minus its own upward message (that message depends on the
    separator only, so it comes out of the parent's sum). One ``exp`` per cell per pass:
    about a third fewer than the log-space downward pass. Cells below ``e^-700`` of the
    largest are floored there (see :func:`exp`).
    """
    collected, message = collect(tree, potentials)
    root = collected[0]
    out: list[F64] = [exp(root - logsumexp(root, tuple(range(root.ndim))))]
    out += [out[0]] * (len(collected) - 1)
    for node in tree.order[1:]:
        p = tree.parent[node]
        down, up = tree.down[node], tree.up[node]
        on_sep = out[p].sum(axis=down.axes) if down.axes else out[p]
        with np.errstate(divide="ignore"):
            shift = np.log(on_sep) - message[node]
        out[node] = exp(collected[node] + shift.reshape(up.shape))
    return out


def collect(
    tree: JunctionTree, potentials: Sequence[F64], reduce: Reduce = logsumexp
) -> tuple[list[F64], list[F64]]:
    """The upward pass: each clique's potential plus its children's messages, and its message.

    The root's result (index 0) is already its full belief; the message of the root is empty.
    """
    collected = [np.array(p, dtype=np.float64, copy=True) for p in potentials]
    message: list[F64] = [np.zeros(0)] * len(collected)
    for node in reversed(tree.order):
        p = tree.parent[node]
        if p < 0:
            continue
        msg = reduce(collected[node], tree.up[node].axes)
        message[node] = msg
        collected[p] += msg.reshape(tree.down[node].shape)
    return collected, message


def normalise(beliefs: Sequence[F64]) -> list[F64]:
    """Log beliefs shifted so that each clique's probabilities sum to one."""
    out: list[F64] = []
    for b in beliefs:
        z = logsumexp(b, tuple(range(b.ndim)))
        out.append(b - z)
    return out

"""Node-level triangle counts: a Lipschitz extension by linear programming.

No degree truncation bounds how far one node moves the triangle count of the truncated graph
(:mod:`deniable.graph.projection`), so the node-level triangle count is not computed on a
truncated graph. It is the value of a linear program over the whole graph (Kasiviswanathan,
Nissim, Raskhodnikova & Smith, "Analyzing graphs with node differential privacy", TCC 2013,
the LP-based Lipschitz extensions of subgraph counts):

    f(G) = max Σ_c x_c   over the triangles c of G,
           subject to  Σ_{c ∋ v} x_c ≤ Δ  for every node v,   0 ≤ x_c ≤ 1,

with ``Δ = D(D − 1)/2``, the most triangles a node of degree ``≤ D`` can lie in.

*Exact on bounded graphs.* If every node lies in at most ``Δ`` triangles (in particular if
every degree is at most ``D``), ``x ≡ 1`` is feasible and ``f(G)`` is the triangle count.

*Node sensitivity Δ, on every input.* Let ``G' = G + v``. A feasible ``x`` of ``G``, with
``x_c = 0`` on the triangles through ``v``, is feasible for ``G'``: ``f(G') ≥ f(G)``. An
optimal ``x'`` of ``G'`` restricted to the triangles without ``v`` is feasible for ``G``
(every node's load only drops) and loses ``Σ_{c ∋ v} x'_c ≤ Δ``: ``f(G) ≥ f(G') − Δ``. ∎

*The program solved is small.* Call a node heavy when it lies in more than ``Δ`` triangles.
(i) Some optimum sets ``x_c = 1`` on every triangle without a heavy node: raising those to 1
breaks no constraint, as the constraint of a light node ``v`` reads ``Σ_{c ∋ v} x_c ≤ t(v) ≤
Δ`` for every ``x ≤ 1``, and those triangles touch only light nodes. (ii) For the same reason
only the heavy nodes' constraints can bind. (iii) Triangles with the same set ``S`` of heavy
nodes have identical columns in what remains, so they merge into one variable ``X_S ∈ [0,
min(n_S, Δ)]`` (no variable can exceed ``Δ``, the cap of any of its heavy nodes). The engine
returns the patterns ``S`` with their counts ``n_S``
(:func:`deniable.graph.sqlgen.triangle_structure`); the program has one variable per
distinct pattern — a heavy node alone, a pair or a triple of heavy nodes — and one
constraint per heavy node. (iv) Variables that share no heavy node, even through others,
are independent: the program is the sum of one program per connected component, solved in
blocks of whole components (much faster than one program: the simplex is superlinear).

*An exactly certified value.* The solver (HiGHS, through SciPy) works in floating point, so
its answer is not trusted; it only proposes a primal and a dual point, and both bounds are
then computed in exact integer arithmetic (a double is a dyadic rational: the points are
put on a common grid — ``2⁻ᴷ`` for the primal, ``1/(27720·2⁴⁶)`` for the dual, so the
fractions ``k/d``, ``d ≤ 12``, that the duals of these programs usually are stay exact —
and every sum is an integer sum, in int64 where no value can overflow and in Python
integers otherwise). The primal point is clipped to its bounds and, at any node whose
exact load exceeds ``Δ``, lowered until it does not: a feasible point, value ``P ≤ f``. The
dual point gives ``U ≥ f`` by weak duality. No relative padding is left, so the gap ``U −
P`` is the solver's own error, whatever the size of ``f`` (the earlier certificate padded by
``10⁻⁹·f`` and failed on every program worth more than about ``2.5·10⁸``). A block whose
exact gap stays above :data:`BLOCK_GAP` over the solver settings tried — or on which the
solver fails — is solved exactly by a rational simplex (:func:`simplex`, per component,
warm-started from the solver's point), so ``P = U = f`` there; if the blocks' gaps added up
to more than 1/2 (only possible beyond 4096 blocks), the widest are solved exactly too.
There is no failure: :func:`statistic` always returns. The released statistic is ``L +
⌊P + 1/2⌋`` (``L`` the triangles without a heavy node) with ``U − P ≤ 1/2``; then ``P ∈
[f − 1/2, f]`` and the statistic lies in ``[f − 1, f + 1/2]``, so two neighbouring graphs'
statistics, integers, differ by at most ``⌊Δ + 3/2⌋ = Δ + 1``: the sensitivity the noise is
calibrated to (:func:`sensitivity`).

*What the data decides before the charge.* Nothing observable but time: the exact
fallback, when it runs, is slower than the solver (it did not run on a random program of
752k patterns, nor on 300 random programs with counts up to 10¹²; on a large component it
can take minutes). That time, like the solver's, depends on the
data and is listed under the residual channels in ``docs/graphs.md``.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from deniable.graph.projection import dict_key

if TYPE_CHECKING:
    import scipy.sparse as sp

# SciPy (~0.4 s of CPU to import) is imported by :func:`statistic`, before it reads anything,
# not at module import: every service worker and CLI process imports this module, few of them
# count triangles. Importing it first thing in ``statistic`` keeps the import's time out of
# anything the data decides.

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Ints = npt.NDArray[np.int64] | npt.NDArray[np.object_]
"""Exact integers: int64 where no value can overflow, else Python ints (object arrays)."""

MAX_GAP = Fraction(1, 2)
"""Largest total gap ``U − P`` released (the sensitivity proof needs ``≤ 1/2``)."""

BLOCK_VARIABLES = 2000
"""Smallest number of variables solved in one call (whole components are packed)."""

BLOCK_GAP = Fraction(1, 2**13)
"""A block's certified gap small enough to stop trying other solver settings; a block left
above it after every setting is solved exactly (:func:`_exact_value`)."""

DUAL_GRID = 27720 * 2**46
"""Common denominator of the dual points: ``lcm(1..12)·2⁴⁶`` (below 2⁶¹), so the simple
fractions ``k/d`` (``d ≤ 12``) the optimal duals of these programs usually are, are exact."""

_SNAP = 1e-9
"""How close a solver dual must be to ``k/d`` to be tried as exactly ``k/d``."""

_AT_BOUND = 1e-7
"""Relative distance to its bound at which the exact simplex starts a variable there."""

_HUGE = 2.0**900
"""Solver inputs are clipped here (floats; the certificates use the exact integers)."""


def triangle_cap(max_degree: int) -> int:
    """``Δ = D(D − 1)/2``: the most triangles through one node of degree at most ``D``."""
    return max_degree * (max_degree - 1) // 2


def sensitivity(max_degree: int) -> int:
    """L1 node sensitivity of the released statistic: ``Δ + 1`` (module docstring)."""
    return triangle_cap(max_degree) + 1


def statistic(patterns: Iterable[tuple[Sequence[Hashable | None], int]], cap: int) -> int:
    """The certified Lipschitz-extended triangle count ``L + ⌊P + 1/2⌋`` (module docstring).

    A total function: it returns an integer for every list of patterns and every cap
    ``≥ 0`` (a block the floating-point certificate leaves loose is solved exactly); it
    never raises.

    Args:
        patterns: ``((h1, h2, h3), n)`` rows of
            :func:`~deniable.graph.sqlgen.triangle_structure`: the heavy nodes of a triangle
            (None where a node is light) and how many triangles have that pattern.
        cap: ``Δ``, the per-node triangle bound the heavy nodes were defined with.

    Returns:
        An integer in ``[f − 1, f + 1/2]``, ``f`` the program's value; exact (the triangle
        count) when no node is heavy. No privacy loss here: the caller adds noise calibrated
        to :func:`sensitivity`.

    Examples:
        >>> statistic([((None, None, None), 7)], cap=3)
        7
        >>> statistic([(("hub", None, None), 10)], cap=3)  # ten triangles share one hub
        3
    """
    light = 0
    merged: dict[tuple[Hashable, ...], int] = {}
    for nodes, count in patterns:
        # every NaN one key (NaN ≠ NaN would split one node's constraint: 2Δ for one node);
        # the engine's node identities never hold NaN, direct callers may
        heavy = tuple(dict_key(v) for v in nodes if v is not None)
        n = int(count)
        if n <= 0:
            continue
        if not heavy:
            light += n
        else:
            merged[heavy] = merged.get(heavy, 0) + n
    if not merged:
        return light
    return light + _certified_round(merged, int(cap))


@dataclass(frozen=True)
class _Block:
    """Whole components of the program, solved in one call.

    Attributes:
        a: the 0/1 matrix (heavy nodes × variables), CSR with int64 entries.
        bounds: each variable's exact bound ``min(n_S, Δ)`` (int64, or Python ints if
            ``Δ ≥ 2⁶²``).
        floats: the bounds as doubles (for the solver).
        total: ``Σ bounds``, exactly.
        component: each variable's connected component (the exact solve goes one by one).
    """

    a: sp.csr_matrix
    bounds: Ints
    floats: F64
    total: int
    component: I64


def _certified_round(merged: dict[tuple[Hashable, ...], int], cap: int) -> int:
    """``⌊P + 1/2⌋`` for exact bounds ``P ≤ f ≤ U`` with ``U − P ≤ 1/2``, always reached."""
    if cap <= 0:
        return 0  # every heavy node's constraint reads Σ x ≤ 0
    index: dict[Hashable, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for j, heavy in enumerate(merged):
        for v in heavy:
            rows.append(index.setdefault(v, len(index)))
            cols.append(j)
    # no variable exceeds Δ (each of its heavy nodes allows Δ): the same program, and its
    # bounds fit int64 whenever Δ does
    import scipy.sparse as sp

    listed = [min(count, cap) for count in merged.values()]
    bounds: Ints = np.asarray(listed, dtype=np.int64 if cap < 2**62 else object)
    floats = _floats(bounds)
    a = sp.csc_matrix(
        (np.ones(len(rows), dtype=np.int64), (np.asarray(rows), np.asarray(cols))),
        shape=(len(index), len(merged)),
    )
    blocks = []
    for block, component in _blocks(a):
        sub = a[:, block]
        sub = sp.csr_matrix(sub[np.unique(sub.indices), :])
        b = bounds[block]
        exact_sum = b.dtype == np.int64 and block.size * cap < 2**62
        total = int(b.sum()) if exact_sum else sum(b.tolist())
        blocks.append(_Block(sub, b, floats[block], total, component))
    found = [_certified_block(b, cap) for b in blocks]
    # each block's gap is at most BLOCK_GAP, so only beyond 4096 blocks (8·10⁶ variables)
    # can the total exceed 1/2: then the widest blocks are solved exactly until it fits
    widest = sorted(range(len(blocks)), key=lambda i: found[i][1] - found[i][0])
    while sum((hi - lo for lo, hi in found), Fraction(0)) > MAX_GAP:
        i = widest.pop()
        exact = _exact_value(blocks[i], cap, None)
        found[i] = (exact, exact)
    low = sum((lo for lo, _ in found), Fraction(0))
    return max(0, math.floor(low + Fraction(1, 2)))


def _blocks(a: sp.csc_matrix) -> list[tuple[I64, I64]]:
    """The variables in blocks of whole connected components, with their component labels.

    Two variables are connected when they share a heavy node; the program is the sum of
    independent programs, one per component (an exact decomposition). Components are packed
    into blocks of at least :data:`BLOCK_VARIABLES` variables: the simplex is superlinear in
    a program's size, and a call per tiny component would cost more than it saves.
    """
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    n_nodes, n_vars = a.shape
    bipartite = sp.bmat([[None, a], [a.T, None]], format="csr")
    _, label = connected_components(bipartite, directed=False)
    component = label[n_nodes:].astype(np.int64)
    order = np.argsort(component, kind="stable")
    changes = np.flatnonzero(np.diff(component[order])) + 1
    cuts = [0]
    for at in (*changes.tolist(), n_vars):
        if at - cuts[-1] >= BLOCK_VARIABLES or at == n_vars:
            cuts.append(at)
    out = []
    for lo, hi in itertools.pairwise(cuts):
        block = order[lo:hi].astype(np.int64)
        out.append((block, component[block]))
    return out


_ATTEMPTS: tuple[dict[str, object], ...] = (
    {"presolve": False},
    {},
    {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10},
)


def _certified_block(block: _Block, cap: int) -> tuple[Fraction, Fraction]:
    """Exact ``(P, U)``, ``P ≤ optimum ≤ U``, with ``U − P ≤`` :data:`BLOCK_GAP`.

    The best primal and dual bounds over the solver settings tried; a block they leave
    looser (or on which the solver fails) is solved exactly: ``P = U = optimum``.
    """
    low, high, hint = Fraction(-1), None, None
    for options in _ATTEMPTS:
        solved = _solve(block.a, block.floats, float(min(cap, 2**900)), options)
        if solved is None:
            continue
        x, y = solved
        p = _primal_bound(block, cap, x)
        if p > low:
            low, hint = p, x
        u = _dual_bound(block, cap, y)
        high = u if high is None else min(high, u)
        if high - low <= BLOCK_GAP:
            return low, high
    exact = _exact_value(block, cap, hint)
    return exact, exact


def _floats(values: Ints) -> F64:
    """``values`` as doubles, clipped at :data:`_HUGE` (inputs of the solver only)."""
    try:
        return np.minimum(np.asarray(values, dtype=np.float64), _HUGE)
    except OverflowError:
        return np.asarray([float(min(v, 2**900)) for v in values.tolist()], dtype=np.float64)


def _solve(
    a: sp.csr_matrix, bounds: F64, cap: float, options: dict[str, object]
) -> tuple[F64, F64] | None:
    """The solver's primal point and dual multipliers (untrusted), or None if it fails."""
    from scipy.optimize import linprog

    n_vars = bounds.size
    try:
        res = linprog(
            c=-np.ones(n_vars),
            A_ub=a.astype(np.float64),
            b_ub=np.full(a.shape[0], cap),
            bounds=np.column_stack([np.zeros(n_vars), bounds]),
            method="highs",
            options=dict(options),
        )
    except (ValueError, ArithmeticError, RuntimeError):  # any solver failure: exact solve
        return None
    if res.status != 0 or res.x is None or res.ineqlin is None:
        return None
    x = np.asarray(res.x, dtype=np.float64)
    y = -np.asarray(res.ineqlin.marginals, dtype=np.float64)
    return x, y


def _primal_bound(block: _Block, cap: int, x: F64) -> Fraction:
    """The exact value of a feasible point built from ``x``: a lower bound on the optimum.

    ``x`` is clipped to its bounds and rounded down to multiples of ``2⁻ᴷ`` (integers
    ``X``, exact); a node whose exact load ``Σ X`` exceeds ``Δ·2ᴷ`` has each of its
    variables lowered by a little more than its share of the excess, and the loads are
    checked again (exactly) — variables of a node still over its cap after that are set
    to 0, which is always feasible. It loses at most the solver's own infeasibility plus
    two grid steps per variable.
    """
    a, bounds, total = block.a, block.bounds, block.total
    n = bounds.size
    if total.bit_length() > 800:
        return Fraction(0)  # beyond doubles: the exact solve decides
    k = min(40, 61 - total.bit_length())
    exact_ints = k < n.bit_length() + 20
    if exact_ints:  # int64 could overflow: Python integers (slower, same arithmetic)
        k = n.bit_length() + 40
    unit = 1 << k
    cap_k = min(cap, total) * unit  # loads never exceed total·2ᴷ: the same constraint
    x = np.clip(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0), 0.0, block.floats)
    scaled = np.floor(x * float(unit))
    big: I64 | npt.NDArray[np.object_]
    if exact_ints:
        big = np.minimum(
            np.asarray([int(v) for v in scaled.tolist()], dtype=object),
            bounds.astype(object) * unit,
        )
    else:
        big = np.minimum(scaled.astype(np.int64), bounds * unit)  # < total·2ᴷ < 2⁶¹
    csc = a.tocsc()
    for _ in range(4):
        load = _row_sums(a, big)
        over = np.asarray(load > cap_k, dtype=bool)
        if not over.any():
            break
        # Python's int / int is correctly rounded at any size
        ratio = np.zeros(a.shape[0])
        ratio[over] = [(v - cap_k) / v for v in load[over].tolist()]
        share = np.maximum.reduceat(ratio[csc.indices], csc.indptr[:-1])
        cut = np.ceil(big.astype(np.float64) * share * (1 + 2.0**-30)) + (share > 0)
        if exact_ints:
            big = np.maximum(big - np.asarray([int(c) for c in cut.tolist()], dtype=object), 0)
        else:
            big = np.maximum(big - cut.astype(np.int64), 0)
    over = np.asarray(_row_sums(a, big) > cap_k, dtype=bool)
    if over.any():
        big[np.asarray(a.T @ over.astype(np.int64)) > 0] = 0
    value = sum(big.tolist()) if exact_ints else int(big.sum())
    return Fraction(value, unit)


def _row_sums(
    a: sp.csr_matrix, values: I64 | npt.NDArray[np.object_]
) -> npt.NDArray[np.object_] | I64:
    """Exact ``a @ values`` (every row of ``a`` has an entry)."""
    if values.dtype == np.int64:
        return np.asarray(a @ values, dtype=np.int64)
    return np.add.reduceat(values[a.indices], a.indptr[:-1])


def _dual_bound(block: _Block, cap: int, y: F64) -> Fraction:
    """The exact value of a feasible dual point built from ``y``: an upper bound.

    Dual: minimise ``Δ·Σ y_v + Σ_S b_S·u_S`` subject to ``Σ_{v ∈ S} y_v + u_S ≥ 1``,
    ``y, u ≥ 0``; for any ``y ≥ 0`` the smallest feasible ``u`` is ``max(0, 1 − Σ y)``.
    ``y`` is clipped to ``[0, 1]`` and put on the grid ``1/``:data:`DUAL_GRID`, as it is and
    with each value within ``10⁻⁹`` of a fraction ``k/d`` (``d ≤ 12``) set to it; the
    smaller of the two exact values is returned.
    """
    y = np.clip(np.nan_to_num(y, nan=0.0, posinf=1.0, neginf=0.0), 0.0, 1.0)
    grid = DUAL_GRID
    as_is = np.rint(y * float(grid)).astype(np.int64)
    snapped = as_is.copy()
    done = np.zeros(y.size, dtype=bool)
    for d in range(1, 13):
        k = np.rint(y * d)
        close = ~done & (np.abs(y * d - k) <= _SNAP * d)
        snapped[close] = k[close].astype(np.int64) * (grid // d)
        done |= close
    best: int | None = None
    for big in (as_is,) if np.array_equal(as_is, snapped) else (as_is, snapped):
        short = grid - np.asarray(block.a.T @ big, dtype=np.int64)  # ≤ 3·2⁶¹ < 2⁶³: exact
        pos = np.flatnonzero(short > 0)
        value = cap * sum(big.tolist()) + sum(
            map(operator.mul, block.bounds[pos].tolist(), short[pos].tolist())
        )
        best = value if best is None else min(best, value)
    assert best is not None
    return Fraction(best, grid)


def _exact_value(block: _Block, cap: int, hint: F64 | None) -> Fraction:
    """The block's optimum, exactly: the rational simplex of :func:`simplex`, per component.

    ``hint`` (a solver's primal point, or None) only chooses which variables start at their
    upper bound; the result does not depend on it.
    """
    csc = block.a.tocsc()
    order = np.argsort(block.component, kind="stable")
    changes = np.flatnonzero(np.diff(block.component[order])) + 1
    total = Fraction(0)
    for part in np.split(order, changes):
        cols = [csc.indices[csc.indptr[j] : csc.indptr[j + 1]].tolist() for j in part.tolist()]
        rows = {v: i for i, v in enumerate(sorted({v for c in cols for v in c}))}
        local = [[rows[v] for v in c] for c in cols]
        bounds = block.bounds[part].tolist()
        start = None
        if hint is not None:
            start = [
                float(hint[j]) >= (1 - _AT_BOUND) * float(b)
                for j, b in zip(part.tolist(), block.floats[part].tolist(), strict=True)
            ]
        total += simplex(local, bounds, cap, len(rows), start)
    return total


def simplex(
    columns: Sequence[Sequence[int]],
    bounds: Sequence[int],
    cap: int,
    n_rows: int,
    at_upper: Sequence[bool] | None = None,
) -> Fraction:
    """``max Σ x_j`` subject to ``Σ_{j: v ∈ columns[j]} x_j ≤ cap`` and ``0 ≤ x_j ≤ bounds[j]``.

    Exact: a bounded-variable revised simplex over :class:`~fractions.Fraction` with Bland's
    rule (it terminates), starting from the slack basis with the variables flagged in
    ``at_upper`` at their upper bound (dropped where that overloads a row). The basis
    inverse is kept as sparse rows. For the blocks the floating-point certificate leaves
    loose; slow on large programs.

    Args:
        columns: the rows (``0..n_rows−1``) of each variable, 1 to 3 of them.
        bounds: each variable's upper bound (``≥ 0``).
        cap: every row's right-hand side (``≥ 0``).
        n_rows: the number of rows.
        at_upper: optional warm start.

    Returns:
        The optimum, exactly.

    Examples:
        >>> simplex([[0], [0, 1], [1]], [3, 3, 3], 4, 2)
        Fraction(7, 1)
        >>> simplex([[0, 1], [1, 2], [0, 2]], [5, 5, 5], 1, 3)
        Fraction(3, 2)
    """
    n, m = len(columns), n_rows
    upper: list[Fraction | None] = [Fraction(b) for b in bounds] + [None] * m
    col: list[Sequence[int]] = [*columns, *([i] for i in range(m))]
    high = [False] * (n + m)
    if at_upper is not None:
        high[:n] = [bool(h) and b > 0 for h, b in zip(at_upper, bounds, strict=True)]
    load = [0] * m
    for j in range(n):
        if high[j]:
            for v in col[j]:
                load[v] += bounds[j]
    for j in range(n):  # a start that overloads a row starts those variables at 0
        if high[j] and any(load[v] > cap for v in col[j]):
            high[j] = False
    load = [0] * m
    for j in range(n):
        if high[j]:
            for v in col[j]:
                load[v] += bounds[j]
    basis = [n + i for i in range(m)]
    where = [-1] * n + list(range(m))
    value = [Fraction(cap - load[i]) for i in range(m)]
    inverse: list[dict[int, Fraction]] = [{i: Fraction(1)} for i in range(m)]
    while True:
        prices: dict[int, Fraction] = {}
        for r in range(m):
            if basis[r] < n:
                for i, e in inverse[r].items():
                    prices[i] = prices.get(i, Fraction(0)) + e
        entering, rising = -1, True
        for j in range(n + m):
            if where[j] >= 0:
                continue
            reduced = (1 if j < n else 0) - sum((prices.get(v, 0) for v in col[j]), Fraction(0))
            if (not high[j] and reduced > 0) or (high[j] and reduced < 0):
                entering, rising = j, not high[j]
                break
        if entering < 0:
            break
        alpha = [sum((inverse[r].get(v, 0) for v in col[entering]), Fraction(0)) for r in range(m)]
        sign = 1 if rising else -1
        # ratio test, ties to the smallest variable (Bland): the entering variable's own
        # bound first if it is no larger than any basic variable's
        step = upper[entering]
        leave, leave_var, to_upper = -1, entering, False
        for r in range(m):
            rate = -sign * alpha[r]  # d(value[r]) / d(step)
            if rate == 0:
                continue
            ub = upper[basis[r]]
            if rate < 0:
                t, hits_upper = value[r] / -rate, False
            elif ub is not None:
                t, hits_upper = (ub - value[r]) / rate, True
            else:
                continue
            if step is None or t < step or (t == step and basis[r] < leave_var):
                step, leave, leave_var, to_upper = t, r, basis[r], hits_upper
        assert step is not None  # every variable is bounded: the program is bounded
        for r in range(m):
            if alpha[r]:
                value[r] -= sign * step * alpha[r]
        if leave < 0:  # the entering variable goes to its other bound
            high[entering] = not high[entering]
            continue
        top = upper[entering]
        entered = step if rising or top is None else top - step  # slacks only rise
        out = basis[leave]
        where[out], high[out] = -1, to_upper
        basis[leave], where[entering], value[leave] = entering, leave, entered
        pivot = alpha[leave]
        row = {i: e / pivot for i, e in inverse[leave].items()}
        inverse[leave] = row
        for r in range(m):
            if r != leave and alpha[r]:
                f = alpha[r]
                updated = dict(inverse[r])
                for i, e in row.items():
                    x = updated.get(i, Fraction(0)) - f * e
                    if x:
                        updated[i] = x
                    else:
                        updated.pop(i, None)
                inverse[r] = updated
    total = sum((value[r] for r in range(m) if basis[r] < n), Fraction(0))
    return total + sum(
        (Fraction(bounds[j]) for j in range(n) if where[j] < 0 and high[j]), Fraction(0)
    )

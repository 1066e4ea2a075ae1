"""Estimating a distribution from noisy marginals (Private-PGM), and the resulting model.

Given noisy measurements ``y_i = M_i(x) + noise`` of marginals of a table (counts over the
cells of a clique of attributes, noise of public standard deviation ``sd_i``), :func:`estimate`
finds the distribution of a graphical model whose cliques are the measured ones that best
explains them (McKenna, Sheldon, Miklau 2019): it minimises

    L(μ) = ½ Σ_i ‖M_i(μ) − y_i‖² / sd_i²

over the marginals ``μ`` the model can produce (scaled to ``total`` records), by mirror descent
on the model's log potentials with an Armijo line search. Each step calibrates a junction tree
(:mod:`deniable.synth.inference`); the stopping rule is a certified one: the Frank–Wolfe gap,
an upper bound on ``L(μ) − min L`` obtained with one max-product pass, falls below
``tolerance`` per measured cell.

Privacy: everything here is post-processing of the DP measurements — no privacy cost, no
access to the data. The model's size limit (``max_cells``) depends only on the public domain
and the chosen cliques.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from deniable.errors import InvalidParameter
from deniable.noise.source import RandomSource
from deniable.synth.domain import Domain
from deniable.synth.inference import (
    F64,
    JunctionTree,
    Link,
    calibrate,
    clique_cells,
    collect,
    exp,
    junction_tree,
    link,
    logsumexp,
    maximum,
    normalise,
)
from deniable.synth.sample import I64, sample_tree

__all__ = ["GraphicalModel", "Measurement", "clique_cells", "estimate"]

MAX_CELLS = 10**7
"""Default limit on the cells of the model's largest junction-tree clique (≈ 80 MB a table)."""


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal: counts over the cells of a clique, plus independent noise.

    Attributes:
        clique: the attributes measured (domain order is expected; another order is accepted
            and means ``values`` is flattened in that order).
        values: the noisy counts, flattened in C order over the clique's sizes.
        sd: the standard deviation of the noise on each cell (public, > 0).
    """

    clique: tuple[str, ...]
    values: npt.NDArray[np.float64]
    sd: float


@dataclass(frozen=True)
class _Fit:
    """A measurement placed on a junction-tree clique, values shaped in domain order."""

    node: int
    link: Link
    values: F64
    weight: float  # 1 / sd²


def _place(domain: Domain, tree: JunctionTree, m: Measurement) -> _Fit:
    """Validate ``m`` and attach it to the smallest junction-tree clique containing it."""
    if not isinstance(m, Measurement):
        raise InvalidParameter("measurements must be Measurement objects")
    given = tuple(m.clique)
    clique = domain.canonical(given)
    sd = float(m.sd)
    if not math.isfinite(sd) or sd <= 0:
        raise InvalidParameter(f"the measurement of {given} needs a finite sd > 0")
    values = np.asarray(m.values, dtype=np.float64)
    if values.size != domain.size(given):
        raise InvalidParameter(
            f"the measurement of {given} has {values.size} values but the clique has "
            f"{domain.size(given)} cells"
        )
    if not np.isfinite(values).all():
        raise InvalidParameter(f"the measurement of {given} has a value that is not finite")
    shaped = values.reshape(domain.shape(given))
    shaped = np.transpose(shaped, [given.index(a) for a in clique]) if given != clique else shaped
    node = tree.containing(clique)
    if node is None:  # pragma: no cover - triangulation puts every measured clique in one
        raise AssertionError("a measured clique is in no junction-tree clique")
    return _Fit(
        node, link(domain, tree.cliques[node], clique), np.ascontiguousarray(shaped), 1 / sd**2
    )


def _total(fits: Sequence[_Fit]) -> float:
    """The inverse-variance weighted mean of the measurements' sums (at least 1)."""
    num = sum(float(f.values.sum()) * f.weight / f.values.size for f in fits)
    den = sum(f.weight / f.values.size for f in fits)
    return max(1.0, num / den)


def _refuse_large(tree: JunctionTree, max_cells: int) -> None:
    big = tree.largest()
    if tree.cells(big) > max_cells:
        raise InvalidParameter(
            f"the model would need a clique over {tree.cliques[big]} with {tree.cells(big):,} "
            f"cells, over the limit of {max_cells:,}; measure fewer or smaller marginals, "
            "use fewer attributes or coarser bins, or raise max_cells"
        )


def estimate(
    domain: Domain,
    measurements: Sequence[Measurement],
    *,
    total: float | None = None,
    iterations: int = 1000,
    cliques: Sequence[Sequence[str]] = (),
    tolerance: float = 1e-4,
    max_cells: int = MAX_CELLS,
) -> GraphicalModel:
    """The model that best explains the noisy ``measurements`` (Private-PGM estimation).

    Minimises ``½ Σ_i ‖M_i(μ) − y_i‖² / sd_i²`` over the marginals of the graphical model whose
    cliques are the measured ones plus ``cliques``, scaled to ``total`` records.

    Args:
        domain: the attributes and their numbers of cells.
        measurements: the noisy marginals (may be empty: then ``total`` is required and the
            model is uniform).
        total: the (noisy) number of records; by default the inverse-variance weighted mean of
            the measurements' sums.
        iterations: at most this many mirror-descent steps.
        cliques: more cliques for the model's structure (e.g. AIM's candidates).
        tolerance: stop once the certified excess loss ``L(μ) − min L`` is below
            ``tolerance`` per measured cell (in units of the noise variance).
        max_cells: refuse a model whose largest junction-tree clique has more cells.

    Returns:
        The fitted :class:`GraphicalModel`.

    Raises:
        InvalidParameter: a measurement that does not fit the domain, a model over
            ``max_cells``, or no measurement and no ``total``.

    Privacy: post-processing of DP measurements; no privacy cost.

    Examples:
        >>> import numpy as np
        >>> d = Domain(("a", "b"), (2, 2))
        >>> m = Measurement(("a", "b"), np.array([40.0, 10.0, 10.0, 40.0]), sd=1.0)
        >>> model = estimate(d, [m])
        >>> np.round(model.marginal(("a",)), 3).tolist()
        [50.0, 50.0]
    """
    if not isinstance(iterations, int) or iterations < 0:
        raise InvalidParameter("iterations must be a whole number, at least 0")
    if not math.isfinite(tolerance) or tolerance < 0:
        raise InvalidParameter("tolerance must be finite and at least 0")
    structure = [domain.canonical(m.clique) for m in measurements]
    structure += [domain.canonical(c) for c in cliques]
    if clique_cells(domain, structure) > max_cells:
        _refuse_large(junction_tree(domain, structure), max_cells)
    tree = junction_tree(domain, structure)
    fits = [_place(domain, tree, m) for m in measurements]
    if total is None:
        if not fits:
            raise InvalidParameter("with no measurements, pass total (the number of records)")
        total = _total(fits)
    elif not math.isfinite(total) or total <= 0:
        raise InvalidParameter("total must be a finite number of records, above 0")
    theta = [np.zeros(tree.shape(node)) for node in range(len(tree.cliques))]
    if fits:
        theta = _mirror_descent(tree, fits, float(total), theta, iterations, tolerance)
    return GraphicalModel(domain, float(total), tree, normalise(calibrate(tree, theta)))


def _loss(tree: JunctionTree, fits: Sequence[_Fit], mu: Sequence[F64]) -> tuple[float, list[F64]]:
    """The loss at clique marginals ``mu`` and its gradient on each junction-tree clique."""
    loss = 0.0
    grad = [np.zeros_like(m) for m in mu]
    for f in fits:
        diff = mu[f.node].sum(axis=f.link.axes) - f.values if f.link.axes else mu[f.node] - f.values
        loss += 0.5 * f.weight * _dot(diff, diff)
        grad[f.node] += (f.weight * diff).reshape(f.link.shape)
    return loss, grad


def _dot(a: F64, b: F64) -> float:
    """The inner product of two same-shaped arrays (``np.vdot`` is ~1000x slower on 3-d ones)."""
    return float(np.dot(a.ravel(), b.ravel()))


def _marginals(tree: JunctionTree, theta: Sequence[F64], total: float) -> list[F64]:
    return [total * exp(b) for b in normalise(calibrate(tree, theta))]


def _gap(tree: JunctionTree, grad: Sequence[F64], mu: Sequence[F64], total: float) -> float:
    """Frank–Wolfe gap ``⟨∇L, μ⟩ − min_{μ'} ⟨∇L, μ'⟩ ≥ L(μ) − min L`` (one max-product pass).

    The minimum over the model's marginal polytope of a linear function is attained at a single
    record repeated ``total`` times: ``total · min_x Σ_C ∇L_C(x_C)``, a MAP problem.
    """
    inner = sum(_dot(g, m) for g, m in zip(grad, mu, strict=True))
    root, _ = collect(tree, [-g for g in grad], maximum)
    return inner + total * float(root[0].max())


def _mirror_descent(
    tree: JunctionTree,
    fits: Sequence[_Fit],
    total: float,
    theta: list[F64],
    iterations: int,
    tolerance: float,
) -> list[F64]:
    """Mirror descent on the log potentials (entropic mirror map) with Armijo backtracking."""
    measured = sum(f.values.size for f in fits)
    mu = _marginals(tree, theta, total)
    loss, grad = _loss(tree, fits, mu)
    alpha = 1.0 / (total * max(f.weight for f in fits))
    for step in range(iterations):
        if step % 10 == 0 and _gap(tree, grad, mu, total) <= tolerance * measured:
            break
        alpha *= 2.0
        for _ in range(40):
            trial = [t - alpha * g for t, g in zip(theta, grad, strict=True)]
            new_mu = _marginals(tree, trial, total)
            new_loss, new_grad = _loss(tree, fits, new_mu)
            predicted = sum(
                _dot(g, a - b) for g, a, b in zip(grad, mu, new_mu, strict=True)
            )
            if loss - new_loss >= 0.5 * predicted:
                break
            alpha *= 0.5
        else:
            break  # no step decreases the loss any more: converged to float precision
        theta, mu, loss, grad = trial, new_mu, new_loss, new_grad
    return theta


class GraphicalModel:
    """A fitted distribution over a domain, scaled to ``total`` records.

    Attributes:
        domain: the attributes and their sizes.
        total: the number of records the marginals add up to.
        tree: the junction tree the model is calibrated on.
    """

    def __init__(
        self, domain: Domain, total: float, tree: JunctionTree, log_beliefs: Sequence[F64]
    ) -> None:
        self.domain = domain
        self.total = total
        self.tree = tree
        self._log = tuple(log_beliefs)

    @property
    def cliques(self) -> tuple[tuple[str, ...], ...]:
        """The junction tree's cliques (each in domain order)."""
        return self.tree.cliques

    def marginal(self, clique: Sequence[str]) -> F64:
        """Expected counts over ``clique``'s cells, shaped by its sizes in the order given.

        A clique inside one junction-tree clique is a sum of its belief; any other is
        contracted over the smallest subtree that covers it (root marginal times the
        conditionals of the other cliques on it).
        """
        given = tuple(clique)
        names = self.domain.canonical(given)
        node = self.tree.containing(names)
        if node is not None:
            inner = link(self.domain, self.tree.cliques[node], names)
            prob = np.exp(self._log[node])
            out = prob.sum(axis=inner.axes) if inner.axes else prob
        else:
            out = self._contract(names)
        out = self.total * out
        if given != names:
            out = np.transpose(out, [names.index(a) for a in given])
        result: F64 = np.ascontiguousarray(out)
        return result

    def _contract(self, names: tuple[str, ...]) -> F64:
        tree = self.tree
        chosen = {tree.containing((a,)) for a in names}
        nodes: set[int] = set()
        for start in chosen:
            node = start
            while node is not None and node >= 0 and node not in nodes:
                nodes.add(node)
                node = tree.parent[node]
        # Prune the part above the lowest common ancestor of the chosen cliques.
        top = 0
        while top not in chosen:
            below = [n for n in nodes if tree.parent[n] == top]
            if len(below) != 1:
                break
            nodes.discard(top)
            top = below[0]
        attrs = sorted({a for n in nodes for a in tree.cliques[n]}, key=self.domain.index)
        if len(attrs) > 52:
            raise InvalidParameter(
                f"the marginal over {names} spans {len(attrs)} attributes of the model; "
                "ask for it from sampled rows instead"
            )
        label = {a: i for i, a in enumerate(attrs)}
        operands: list[Any] = []
        for n in sorted(nodes):
            logb = self._log[n]
            if n == top:
                factor = np.exp(logb)
            else:
                up = tree.up[n]
                cond = logb - logsumexp(logb, up.axes).reshape(up.shape)
                factor = np.where(np.isfinite(cond), np.exp(np.nan_to_num(cond)), 0.0)
            operands += [factor, [label[a] for a in tree.cliques[n]]]
        operands.append([label[a] for a in names])
        out: F64 = np.einsum(*operands, optimize=True)
        return out

    def sample(self, rows: int, *, source: RandomSource | None = None) -> I64:
        """``rows`` independent rows drawn from the model (cell indices, domain order).

        Args:
            rows: the number of rows (0 or more).
            source: the randomness (default: the OS CSPRNG; SeededRandom in tests).

        Privacy: post-processing of DP measurements; no privacy cost.
        """
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise InvalidParameter("rows must be a whole number, at least 0")
        return sample_tree(self.tree, self._log, rows, source=source)

"""Drawing rows from a calibrated junction tree (ancestral sampling).

The root clique's cells are drawn from its marginal; every other clique's new attributes are
drawn from their conditional given the separator values already drawn (its parent's). Each
step is one vectorised inverse-CDF lookup for all rows at once: the conditional CDFs of all
separator values are laid end to end, row ``s`` shifted by ``s``, so one ``searchsorted``
serves every row. With ``rounded=True`` each separator value's rows get the new cells in
counts rounded from their expectations instead (:func:`allot`), as private-pgm does.

Uniforms come from a :class:`~deniable.noise.source.RandomSource` (28 to 53 random bits each,
one 64-bit word per uniform), never from numpy.random. Floats are fine here: sampling from
the model is post-processing of DP measurements and costs no privacy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from deniable.noise.source import RandomSource, resolve
from deniable.synth.inference import F64, JunctionTree

I64 = npt.NDArray[np.int64]


def uniforms(n: int, source: RandomSource, *, bits: int = 53) -> F64:
    """``n`` independent uniforms on the grid ``{0, 2^-bits, …, 1 − 2^-bits}`` (one word each)."""
    words = source.words(n) >> np.uint64(64 - bits)
    out: F64 = words.astype(np.float64) * 2.0**-bits
    return out


def offsets(n: int, groups: int, source: RandomSource) -> F64:
    """Uniforms coarse enough that ``g + u`` is exact for every group index ``g < groups``.

    ``g`` needs ``bit_length(groups)`` bits, so ``52 − bit_length`` fractional bits (at least
    28 for the 10^7-cell limit) keep ``g + u`` below ``g + 1`` and every comparison exact.
    """
    return uniforms(n, source, bits=52 - max(groups, 1).bit_length())


def draw(cdf: F64, rows: I64, u: F64) -> I64:
    """For each draw ``i``: the first cell ``k`` with ``cdf[rows[i], k] > u[i]``.

    ``cdf`` has one row per conditioning value, each nondecreasing and ending at exactly 1, so
    cells of probability zero are never drawn; ``u`` comes from :func:`offsets`.
    """
    width = cdf.shape[1]
    laid = (cdf + np.arange(cdf.shape[0], dtype=np.float64)[:, None]).ravel()
    hit = np.searchsorted(laid, rows.astype(np.float64) + u, side="right")
    # rows + u is exact (see offsets); the guard only covers the CDF's own rounding.
    out: I64 = np.minimum(hit - rows * width, width - 1).astype(np.int64)
    return out


def conditional_cdf(prob: F64) -> F64:
    """Row-wise CDFs of ``prob`` (rows: conditioning values), each ending at exactly 1.

    A row of total mass zero (a separator value the model gives probability zero, never
    drawn) is made uniform so that the CDF stays well defined.
    """
    mass = prob.sum(axis=1, keepdims=True)
    safe = np.where(mass > 0, prob / np.where(mass > 0, mass, 1.0), 1.0 / prob.shape[1])
    cdf: F64 = np.cumsum(safe, axis=1)
    cdf[:, -1] = 1.0
    return cdf


def allot(cdf: F64, given: I64, source: RandomSource) -> I64:
    """Cells for rows grouped by ``given``, in counts rounded from their expectations.

    A group of ``m`` rows gets ``floor(m·cdf_k + U) − floor(m·cdf_(k−1) + U)`` rows of cell
    ``k`` (systematic rounding, one uniform ``U`` per group): within one of ``m·p_k`` and equal
    to it in expectation, summing to exactly ``m``. Which rows of a group get which cell is a
    uniformly random permutation (random sort keys within the group), so a cell never follows
    the row order left by earlier steps.
    """
    groups, width = cdf.shape
    sizes = np.bincount(given, minlength=groups).astype(np.float64)
    offset = uniforms(groups, source)
    ends = np.floor(sizes[:, None] * cdf + offset[:, None])
    counts = np.diff(ends, axis=1, prepend=0.0).astype(np.int64)
    ordered = np.repeat(np.tile(np.arange(width, dtype=np.int64), groups), counts.ravel())
    # Sorting by group plus a uniform in [0, 1) orders each group's rows uniformly at random.
    keys = given.astype(np.float64) + offsets(given.size, groups, source)
    out = np.empty(given.size, dtype=np.int64)
    out[np.argsort(keys)] = ordered
    return out


def sample_tree(
    tree: JunctionTree,
    log_beliefs: Sequence[F64],
    rows: int,
    *,
    source: RandomSource | None = None,
    rounded: bool = False,
) -> I64:
    """``rows`` rows (cell indices, one column per attribute in domain order) from the model.

    Args:
        tree: the junction tree.
        log_beliefs: normalised log marginals of its cliques (consistent on separators).
        rows: the number of rows, at least 0.
        source: where the uniforms come from (default: the OS CSPRNG).
        rounded: False: independent rows. True: each clique's new attributes are allotted to
            the rows of each separator value in counts rounded from their expectations
            (:func:`allot`; private-pgm's default), then the rows are shuffled: every
            junction-tree marginal of the rows is then much closer to the model's than
            independent rows' (the rows are exchangeable, not independent).
    """
    src = resolve(source)
    domain = tree.domain
    # Column-major while drawing: every step reads and writes whole columns.
    out = np.zeros((rows, len(domain.names)), dtype=np.int64, order="F")
    if rows == 0:
        return np.ascontiguousarray(out)
    for node in tree.order:
        clique = tree.cliques[node]
        sep = tree.up[node].sub
        new = tuple(a for a in clique if a not in sep)
        if not new:
            continue
        # The clique's probabilities as (separator cells) x (new cells).
        prob = np.exp(log_beliefs[node])
        perm = [clique.index(a) for a in sep] + [clique.index(a) for a in new]
        matrix = np.transpose(prob, perm).reshape(domain.size(sep), domain.size(new))
        if sep:
            cols = [domain.index(a) for a in sep]
            given = np.ravel_multi_index(tuple(out[:, c] for c in cols), domain.shape(sep)).astype(
                np.int64
            )
        else:
            given = np.zeros(rows, dtype=np.int64)
        cdf = conditional_cdf(matrix)
        if rounded:
            cells = allot(cdf, given, src)
        else:
            cells = draw(cdf, given, offsets(rows, cdf.shape[0], src))
        picked = np.unravel_index(cells, domain.shape(new))
        for name, values in zip(new, picked, strict=True):
            out[:, domain.index(name)] = values
    if rounded:
        # Rows came out grouped by the root's cells: a random order hides that.
        out = out[np.argsort(src.words(rows), kind="stable")]
    result: I64 = np.ascontiguousarray(out)
    return result

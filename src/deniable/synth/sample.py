"""Drawing rows from a calibrated junction tree (ancestral sampling).

The root clique's cells are drawn from its marginal; every other clique's new attributes are
drawn from their conditional given the separator values already drawn (its parent's). Each
step is one vectorised inverse-CDF lookup for all rows at once: the conditional CDFs of all
separator values are laid end to end, row ``s`` shifted by ``s``, so one ``searchsorted``
serves every row.

Uniforms come from a :class:`~deniable.noise.source.RandomSource` (53 random bits each), never
from numpy.random. Floats are fine here: sampling from the model is post-processing of DP
measurements and costs no privacy.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from deniable.noise.source import RandomSource, resolve
from deniable.synth.inference import F64, JunctionTree

I64 = npt.NDArray[np.int64]


def uniforms(n: int, source: RandomSource) -> F64:
    """``n`` independent uniforms on ``[0, 1)``, each from the top 53 bits of one word."""
    words = source.words(n) >> np.uint64(11)
    out: F64 = words.astype(np.float64) * 2.0**-53
    return out


def draw(cdf: F64, rows: I64, u: F64) -> I64:
    """For each draw ``i``: the first cell ``k`` with ``cdf[rows[i], k] > u[i]``.

    ``cdf`` has one row per conditioning value, each nondecreasing and ending at exactly 1, so
    cells of probability zero are never drawn.
    """
    width = cdf.shape[1]
    laid = (cdf + np.arange(cdf.shape[0], dtype=np.float64)[:, None]).ravel()
    hit = np.searchsorted(laid, rows.astype(np.float64) + u, side="right")
    # Guard against the last cell of a row being lost to rounding of (row + 1).
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


def sample_tree(
    tree: JunctionTree,
    log_beliefs: Sequence[F64],
    rows: int,
    *,
    source: RandomSource | None = None,
) -> I64:
    """``rows`` independent rows (cell indices, one column per attribute in domain order).

    Args:
        tree: the junction tree.
        log_beliefs: normalised log marginals of its cliques (consistent on separators).
        rows: the number of rows, at least 0.
        source: where the uniforms come from (default: the OS CSPRNG).
    """
    src = resolve(source)
    domain = tree.domain
    out = np.zeros((rows, len(domain.names)), dtype=np.int64)
    if rows == 0:
        return out
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
        cells = draw(conditional_cdf(matrix), given, uniforms(rows, src))
        picked = np.unravel_index(cells, domain.shape(new))
        for name, values in zip(new, picked, strict=True):
            out[:, domain.index(name)] = values
    return out

"""AIM (McKenna, Mullins, Sheldon & Miklau, VLDB 2022): adaptive, workload-aware measurements.

The workload is every 2-way and 3-way marginal (with fewer columns, what there is); the
candidates are its downward closure, each weighted by how much of the workload it covers
(``w(c) = Σ_{W} |c ∩ W|``). With ``d`` columns, ``T`` rounds (default ``16·d``) and a total
zCDP budget ``ρ`` fixed in advance and charged once:

1. every 1-way marginal is measured at ``ρ_m = 0.9ρ/T`` each (``σ² = r²/(2ρ_m)``);
2. each round selects a candidate by the exponential mechanism (ε-DP, ε-bounded-range: with
   ``ε²/8 = 0.1ρ/T`` of ρ), scored by ``w(c)·(‖M_c(D) − M_c(p̂)‖₁ − √(2/π)·σ·n_c)`` (the
   L1 error of the current model minus the noise's expected L1 error over the ``n_c`` cells;
   sensitivity ``max w·r``), among the candidates whose model stays within a cell limit that
   grows with the budget spent (``clique_cells``, or already covered by the model);
3. measures it at ``ρ_m``, estimates the model again (post-processing);
4. anneals: when the new measurement changed the model's marginal by less than the noise's
   expected L1 error, σ halves and ε doubles (the next rounds cost 4× more);
5. when what is left would not pay two more rounds, the last round spends all of it
   (0.9 to the measurement, 0.1 to the selection).

The rounds' choices depend on the data; that is fine after the one charge for the whole
fixed budget: every event is admitted by :class:`~deniable.synth.measure.ReleaseLog` only
while the events' ρ add up to at most the charge (adaptive zCDP composition).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from deniable.synth.measure import (
    SCORE_BITS,
    Clique,
    ReleaseLog,
    epsilon_for,
    l1_score,
    selection_rho,
)
from deniable.synth.model import GraphicalModel, clique_cells, estimate

MAX_MODEL_CELLS = 1_000_000
"""Most cells of the model's largest junction-tree clique once the whole budget is spent (the
limit grows in proportion to the budget spent)."""

ROUND_ITERATIONS = 100
"""Most mirror-descent steps of the estimate after each round, which starts from the previous
round's model (warm start, as private-pgm's); the final estimate takes the default."""

MEASURE_SHARE = Fraction(9, 10)
"""Share of each round's ρ spent on its measurement (the rest on its selection)."""


def workload(names: tuple[str, ...]) -> list[Clique]:
    """The default workload: every 2-way and 3-way marginal (1-way with one column)."""
    if len(names) == 1:
        return [names]
    return [c for k in (2, 3) for c in itertools.combinations(names, k)]


def downward_closure(cliques: list[Clique]) -> list[Clique]:
    """Every non-empty subset of every clique, each once, smallest first (domain order)."""
    seen: dict[Clique, None] = {}
    for c in cliques:
        for k in range(1, len(c) + 1):
            for sub in itertools.combinations(c, k):
                seen[sub] = None
    return sorted(seen, key=len)


def candidate_cliques(names: tuple[str, ...]) -> list[Clique]:
    """The marginals AIM may measure (their exact counts are computed before the charge)."""
    return downward_closure(workload(names))


def weights(names: tuple[str, ...]) -> dict[Clique, int]:
    """Each candidate's weight ``Σ_{W ∈ workload} |c ∩ W|`` (public)."""
    load = [set(w) for w in workload(names)]
    return {c: sum(len(set(c) & w) for w in load) for c in candidate_cliques(names)}


def describe_plan(
    d: int, rounds: int | None, rho: Fraction, max_rows: int, max_cells: int = MAX_MODEL_CELLS
) -> dict[str, object]:
    """The public plan (for the ledger's record): rounds, first σ and ε, limits.

    Fixed before any data is used; the rounds' choices, the annealing and so the number of
    rounds depend on the data (after the charge).
    """
    total = _rounds(d, rounds)
    first = MEASURE_SHARE * rho / total
    return {
        "rounds": total,
        "measure_share": str(MEASURE_SHARE),
        "first_sigma": max_rows / math.sqrt(2 * float(first)),
        "first_selection_epsilon": str(epsilon_for((1 - MEASURE_SHARE) * rho / total)),
        "workload": "all 2-way and 3-way marginals",
        "candidates": len(candidate_cliques(tuple(str(i) for i in range(d)))),
        "max_model_cells": max_cells,
    }


def _rounds(d: int, rounds: int | None) -> int:
    # At least d + 1, so that the initial 1-ways take at most d/(d+1) of 0.9ρ.
    return max(16 * d if rounds is None else rounds, d + 1)


def _covered(clique: Clique, measured: list[Clique]) -> bool:
    return any(set(clique) <= set(m) for m in measured)


def run(
    log: ReleaseLog, *, rounds: int | None = None, max_cells: int = MAX_MODEL_CELLS
) -> GraphicalModel:
    """Spend ``log.rho_cap`` by AIM; return the final model (its measurements in ``log``).

    ``max_cells`` bounds the model's largest junction-tree clique once the whole budget is
    spent (public; the estimates' time grows with it).
    """
    domain = log.domain
    names = domain.names
    d = len(names)
    rho = log.rho_cap
    total_rounds = _rounds(d, rounds)
    rho_measure = MEASURE_SHARE * rho / total_rounds
    epsilon = epsilon_for((1 - MEASURE_SHARE) * rho / total_rounds)
    for n in names:
        log.measure((n,), rho=rho_measure)
    model = estimate(domain, log.measurements, iterations=ROUND_ITERATIONS)
    candidates = candidate_cliques(names)
    weight = weights(names)
    r = log.max_rows
    last = False
    while not last:
        remaining = log.remaining
        if remaining < 2 * (rho_measure + selection_rho(epsilon)):
            rho_measure = MEASURE_SHARE * remaining
            epsilon = epsilon_for(remaining - rho_measure)
            last = True
        spent_after = log.spent + rho_measure + selection_rho(epsilon)
        limit = max_cells * spent_after / rho
        measured = [m.clique for m in log.measurements]
        allowed = [
            c
            for c in candidates
            if _covered(c, measured) or clique_cells(domain, [*measured, c]) <= limit
        ]
        sigma = r / math.sqrt(2 * float(rho_measure))
        bias = math.sqrt(2 / math.pi) * sigma
        scores = np.array(
            [
                weight[c]
                * (
                    l1_score(log.exact[c], model.marginal(c).ravel())
                    - round(bias * domain.size(c) * (1 << SCORE_BITS))
                )
                for c in allowed
            ],
            dtype=np.int64,
        )
        top = max(weight[c] for c in allowed)
        index = log.select(allowed, scores, sensitivity=top * r << SCORE_BITS, epsilon=epsilon)
        chosen = allowed[index]
        before = model.marginal(chosen).ravel()
        log.measure(chosen, rho=rho_measure)
        model = estimate(domain, log.measurements, iterations=ROUND_ITERATIONS, start=model)
        after = model.marginal(chosen).ravel()
        if float(np.abs(after - before).sum()) <= bias * domain.size(chosen):
            rho_measure *= 4  # σ halves
            epsilon *= 2
    return estimate(domain, log.measurements, start=model)

"""MST (McKenna, Miklau & Sheldon 2021, "Winning the NIST Contest"): the measurement plan.

With ``d`` columns and a total zCDP budget ``ρ`` (in units of a sensitivity-``r`` marginal,
:mod:`deniable.synth.measure`):

1. measure every 1-way marginal, sharing ``ρ/3`` equally (``ρ/(3d)`` each);
2. select ``d − 1`` pairs forming a maximum spanning tree: Kruskal's algorithm where each
   edge is chosen by the exponential mechanism among the pairs that join two components,
   scored by ``‖M_ab(D) − M̂_ab‖₁``, the L1 distance between the pair's exact marginal and its
   estimate under independence from the noisy 1-ways (sensitivity ``r``: one person moves
   the exact marginal by at most ``r`` in L1, the estimate not at all). The selections share
   ``ρ/3`` equally, each ε-DP with ``ε²/8`` of it (the exponential mechanism is
   ε-bounded-range, hence ε²/8-zCDP: Cesar & Rogers 2021);
3. measure the chosen pairs' marginals, sharing the last ``ρ/3`` equally.

With one column, its 1-way gets all of ``ρ``; with two, the only pair needs no selection and
the 1-ways and the pair get ``ρ/2`` each. Everything after the one charge; generating the
rows is post-processing (:func:`deniable.synth.model.estimate` and ``sample``).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from deniable.synth.measure import SCORE_BITS, Clique, ReleaseLog, epsilon_for, l1_score


def candidate_cliques(names: tuple[str, ...]) -> list[Clique]:
    """The marginals MST may need (its exact counts are computed before the charge)."""
    return [(n,) for n in names] + list(itertools.combinations(names, 2))


def independent_estimate(log: ReleaseLog, a: str, b: str) -> np.ndarray:
    """The pair's counts under independence, from the noisy 1-ways (post-processing).

    Each 1-way is clipped at 0 and normalised (uniform if nothing is left); the total is the
    mean of the noisy 1-ways' sums (at least 1).
    """
    ones = {m.clique: m.values for m in log.measurements if len(m.clique) == 1}
    total = max(1.0, float(np.mean([v.sum() for v in ones.values()])))

    def share(name: str) -> np.ndarray:
        v = np.maximum(ones[(name,)], 0.0)
        s = float(v.sum())
        return v / s if s > 0 else np.full(v.size, 1.0 / v.size)

    out: np.ndarray = total * np.outer(share(a), share(b)).ravel()
    return out


def run(log: ReleaseLog) -> list[Clique]:
    """Spend ``log.rho_cap`` by MST's plan; return the selected pairs (in order).

    The measurements are left in ``log.measurements``; the events (with σ and ε) in
    ``log.events``. Their ρ add up to at most ``log.rho_cap``.
    """
    domain = log.domain
    names = domain.names
    d = len(names)
    rho = log.rho_cap
    if d == 1:
        log.measure(names, rho=rho)
        return []
    if d == 2:
        for n in names:
            log.measure((n,), rho=rho / 4)
        log.measure(names, rho=rho / 2)
        return [names]
    for n in names:
        log.measure((n,), rho=rho / (3 * d))
    epsilon = epsilon_for(rho / (3 * (d - 1)))
    component = {n: n for n in names}

    def find(n: str) -> str:
        while component[n] != n:
            component[n] = component[component[n]]
            n = component[n]
        return n

    scores = {
        (a, b): l1_score(log.exact[(a, b)], independent_estimate(log, a, b))
        for a, b in itertools.combinations(names, 2)
    }
    chosen: list[Clique] = []
    for _ in range(d - 1):
        candidates = [e for e in scores if find(e[0]) != find(e[1])]
        index = log.select(
            candidates,
            np.array([scores[e] for e in candidates], dtype=np.int64),
            sensitivity=log.max_rows << SCORE_BITS,
            epsilon=epsilon,
        )
        a, b = candidates[index]
        component[find(a)] = find(b)
        chosen.append((a, b))
    for pair in chosen:
        log.measure(pair, rho=rho / (3 * (d - 1)))
    return chosen


def describe_plan(d: int, rho: Fraction, max_rows: int) -> dict[str, object]:
    """The public plan (for the ledger's record): ρ shares, σ of each step, selection ε.

    Fixed before any data is used; only which pairs are selected depends on the data.
    """
    shares = budget_shares(d)
    out: dict[str, object] = {k: str(v) for k, v in shares.items()}
    ones = shares["one_way"] * rho / d
    out["one_way_sigma"] = max_rows / math.sqrt(2 * float(ones))
    if d >= 2:
        pairs = shares["two_way"] * rho / max(d - 1, 1)
        out["two_way_sigma"] = max_rows / math.sqrt(2 * float(pairs))
    if d >= 3:
        out["selections"] = d - 1
        out["selection_epsilon"] = str(epsilon_for(rho / (3 * (d - 1))))
    return out


def budget_shares(d: int) -> dict[str, Fraction]:
    """The public split of ρ by step."""
    if d == 1:
        return {"one_way": Fraction(1)}
    if d == 2:
        return {"one_way": Fraction(1, 2), "two_way": Fraction(1, 2)}
    third = Fraction(1, 3)
    return {"one_way": third, "selection": third, "two_way": third}

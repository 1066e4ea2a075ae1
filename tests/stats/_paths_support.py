"""Shared helpers of the statistical tests of the SQL compiler's newer bounding paths.

Row expressions, GROUP BY expressions, joins (public and private), ``COUNT(DISTINCT col)``
and flattened WITH/subqueries all end in the same release stage as plain queries; these
helpers run a query on two neighbouring datasets through the test-only hooks (exact bounded
aggregates with fixed secrets, nothing charged), and sample the plan's own mechanisms
(:func:`deniable.query.release.additive_release`, the function the release path calls) many times
at once.

Each sampled release is a vector over the public domain (one entry per measure and key). It
is reduced to the log-likelihood-ratio statistic of the two reference answers ``c`` (on
``D``) and ``c'`` (on ``D'``), ``T = Σ ε_i·(|y − c| − |y − c'|)/Δ_i`` — a post-processing of
the release, so ε-DP bounds every event on ``T``, and threshold events on ``T`` are the most
revealing ones for discrete Laplace noise (Neyman–Pearson).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from deniable.accounting.loss import PrivacyLoss
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.measures import Measure
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates, additive_release
from deniable.query.testing import exact_aggregates, exact_for_plan

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Register = Callable[[Session, bool], None]
"""Registers the tables of ``D`` (False) or ``D'`` (True) in a fresh session."""
Alter = Callable[[DPPlan], DPPlan]
"""A deliberately broken variant of a plan (negative controls), run on ``D'``."""


@dataclasses.dataclass(frozen=True)
class Pair:
    """A plan (made on ``D``) and the exact bounded aggregates of ``D`` and ``D'``.

    Attributes:
        plan: the plan (it reads no data: the plan made on ``D'`` is checked to be equal).
        d: exact aggregates on ``D``.
        d2: exact aggregates on ``D'``.
        altered: exact aggregates on ``D'`` of each altered plan, by name.
    """

    plan: DPPlan
    d: ExactAggregates
    d2: ExactAggregates
    altered: Mapping[str, ExactAggregates]


def exact_pair(
    tmp: Path,
    budget: PrivacyLoss,
    register: Register,
    query: str,
    *,
    alter: Mapping[str, Alter] | None = None,
    **options: Any,
) -> Pair:
    """Plan ``query`` and run it (noise off, fixed secrets) on ``D`` and on ``D'``."""
    out: list[tuple[DPPlan, ExactAggregates]] = []
    altered: dict[str, ExactAggregates] = {}
    for with_intruder in (False, True):
        s = Session(budget=budget, ledger=tmp / f"ledger-{with_intruder}.db")
        try:
            register(s, with_intruder)
            plan, _, exact = exact_aggregates(s, query, not_private=True, **options)
            out.append((plan, exact))
            if with_intruder:
                for name, fn in (alter or {}).items():
                    _, altered[name] = exact_for_plan(s, fn(plan), not_private=True)
        finally:
            s.close()
    (plan, d), (plan2, d2) = out
    assert plan2.measures == plan.measures  # the plan reads no data
    assert plan.public_domain is not None and plan.public_domain == plan2.public_domain
    return Pair(plan, d, d2, altered)


def domain_vector(plan: DPPlan, exact: ExactAggregates, m: Measure) -> I64:
    """One exact measure over the public domain (in its order), rounded to the noise grid."""
    index = {k: i for i, k in enumerate(exact.keys)}
    values = np.array(
        [exact.measures[m.id][index[k]] if k in index else 0 for k in plan.public_domain or []],
        dtype=np.int64,
    )
    return m.coarsen(values)


def l1_shift(plan: DPPlan, a: ExactAggregates, b: ExactAggregates, m: Measure) -> int:
    """``‖a − b‖₁`` of one measure over the public domain, in the mechanism's units."""
    return int(np.abs(domain_vector(plan, a, m) - domain_vector(plan, b, m)).sum())


def references(plan: DPPlan, pair: Pair) -> list[tuple[I64, I64]]:
    """The two reference answers ``(c, c')`` of each measure (the statistic's centres)."""
    return [
        (domain_vector(plan, pair.d, m), domain_vector(plan, pair.d2, m)) for m in plan.measures
    ]


def llr_samples(
    plan: DPPlan,
    exact: ExactAggregates,
    ref: Sequence[tuple[I64, I64]],
    seed: int,
    n: int,
    *,
    noise: Sequence[Measure] | None = None,
) -> F64:
    """``n`` releases of ``exact`` reduced to the log-likelihood-ratio statistic.

    Args:
        plan: the plan whose measures are released.
        exact: the exact aggregates to add noise to.
        ref: the statistic's two centres per measure (from :func:`references`).
        seed: the seed of the noise (test-only source).
        n: number of releases.
        noise: the measures whose mechanism parameters are used for the noise (default:
            the plan's own; a negative control passes altered ones).
    """
    measures = plan.measures if noise is None else tuple(noise)
    t = np.zeros(n)
    for j, (m, mn, (c, c2)) in enumerate(zip(plan.measures, measures, ref, strict=True)):
        x = np.tile(domain_vector(plan, exact, m), n)
        y = np.asarray(additive_release(mn, x, SeededRandom(1000 * seed + j)).value, dtype=np.int64)
        y = y.reshape(n, -1)
        w = float(m.budget / m.sensitivity)
        t += w * (np.abs(y - c) - np.abs(y - c2)).sum(axis=1)
    return t

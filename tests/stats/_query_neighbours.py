"""Two neighbouring datasets for the empirical privacy tests of whole SQL answers.

``D`` holds 120 users with 1–5 rows each in five public categories; ``D'`` adds an intruder
with ``UNBOUNDED_ROWS = 20`` rows of extreme value (10⁹, clamped to the upper bound 100) in
each of the five categories — far more than the ``MAX_GROUPS = 2`` partitions and
``MAX_ROWS = 3`` rows the table allows. :func:`exact_neighbours` returns the exact bounded
aggregates of both (test-only hook, same secrets), plus those of ``D'`` computed by the same
plan with the bounds relaxed to the intruder's real contribution (same measures, same
fixed-point grids): the negative control "contribution bounding switched off".
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.accounting.loss import PrivacyLoss
from deniable.curator.session import Session
from deniable.query.plan import DPPlan, Measure
from deniable.query.release import ExactAggregates
from deniable.query.testing import exact_aggregates, exact_for_plan

CATS = ["a", "b", "c", "d", "e"]
MAX_GROUPS, MAX_ROWS = 2, 3
UNBOUNDED_GROUPS, UNBOUNDED_ROWS = len(CATS), 20  # the intruder's real contribution


def neighbour_data(with_intruder: bool) -> pd.DataFrame:
    """``D`` (False) or ``D'`` (True); the same 120 users in both."""
    rng = np.random.default_rng(5)
    rows = [
        (f"u{u}", CATS[int(rng.integers(0, 5))], float(rng.uniform(0, 100)))
        for u in range(120)
        for _ in range(int(rng.integers(1, 6)))
    ]
    if with_intruder:
        rows += [("intruder", k, 1e9) for k in CATS for _ in range(UNBOUNDED_ROWS)]
    return pd.DataFrame(rows, columns=["uid", "k", "x"])


@dataclasses.dataclass(frozen=True)
class Neighbours:
    """The plan and exact answers on ``D``, ``D'``, and ``D'`` without effective bounds."""

    plan: DPPlan
    d: ExactAggregates
    d2: ExactAggregates
    d2_unbounded: ExactAggregates


def exact_neighbours(tmp: Path, budget: PrivacyLoss, query: str, **options: Any) -> Neighbours:
    """Plan ``query`` (``options`` as for ``Session.sql``) and run it on both datasets."""
    answers = []
    for with_intruder in (False, True):
        s = Session(budget=budget, ledger=tmp / f"ledger-{with_intruder}.db")
        s.add_table(
            "t",
            neighbour_data(with_intruder),
            privacy_unit="uid",
            bounds={"x": (0, 100)},
            max_groups=MAX_GROUPS,
            max_rows=MAX_ROWS,
            public_keys={"k": CATS},
        )
        plan, _, exact = exact_aggregates(s, query, not_private=True, **options)
        answers.append((plan, exact))
        if with_intruder:
            loose = dataclasses.replace(plan, max_groups=UNBOUNDED_GROUPS, max_rows=UNBOUNDED_ROWS)
            _, unbounded = exact_for_plan(s, loose, not_private=True)
        s.close()
    (plan, d), (plan2, d2) = answers
    assert plan2.measures == plan.measures  # the plan reads no data
    return Neighbours(plan, d, d2, unbounded)


def domain_vector(plan: DPPlan, exact: ExactAggregates, m: Measure) -> npt.NDArray[np.int64]:
    """One measure over the public domain (in its order), rounded to the noise grid."""
    index = {k: i for i, k in enumerate(exact.keys)}
    values = np.array(
        [exact.measures[m.id][index[k]] if k in index else 0 for k in plan.public_domain or []],
        dtype=np.int64,
    )
    return m.coarsen(values)

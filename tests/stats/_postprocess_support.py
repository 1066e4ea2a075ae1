"""Shared helpers of the post-processing statistical tests: exact values of aggregates.

The test-only hook :func:`deniable.query.testing.exact_aggregates` gives the exact bounded
measures per partition (what the noise is added to); these helpers turn them into the exact
value of each aggregate over the public domain, with the formulas of
:mod:`deniable.query.aggregates` (the truth that intervals must cover), and sample many
post-processed answers of one exact aggregate cheaply (no charge, no engine run).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.noise.testing import SeededRandom
from deniable.query.aggregates import Count, Mean, Sum
from deniable.query.execute import build_answer
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates, NoisyAnswer, release

F64 = npt.NDArray[np.float64]


def domain_rows(plan: DPPlan, exact: ExactAggregates) -> list[int]:
    """Row of each public-domain key in ``exact`` (every key must be non-empty)."""
    index = {k: i for i, k in enumerate(exact.keys)}
    return [index[k] for k in plan.public_domain or []]


def exact_values(plan: DPPlan, exact: ExactAggregates) -> dict[str, F64]:
    """Exact COUNT, SUM and AVG of each aggregate of ``plan``, over the public domain.

    The values are those of the bounded, clamped, fixed-point data (the noise's centre).
    """
    rows = domain_rows(plan, exact)

    def val(mid: str) -> F64:
        return np.array([float(exact.measures[mid][i]) for i in rows])

    out: dict[str, F64] = {}
    for a in plan.aggregates:
        ms = [plan.measure(i) for i in a.measures]
        if isinstance(a.aggregate, Count):
            out[a.name] = val(ms[0].id)
        elif isinstance(a.aggregate, Sum):
            out[a.name] = val(ms[0].id) * float(ms[0].row_granularity)
        elif isinstance(a.aggregate, Mean):
            n, s = val(ms[0].id), val(ms[1].id)
            out[a.name] = float(ms[1].row_granularity) * (ms[1].centre + s / n)
        else:  # pragma: no cover - the tests use only these three
            raise AssertionError(f"no exact formula for {a.name}")
    return out


def answers(
    plan: DPPlan, exact: ExactAggregates, seeds: range
) -> Iterator[tuple[NoisyAnswer, pd.DataFrame]]:
    """One post-processed answer frame per seed (release stage only, nothing charged)."""
    for seed in seeds:
        noisy = release(plan, exact, source=SeededRandom(seed))
        answer = build_answer(plan, noisy, loss=plan.loss, remaining=plan.loss, charge_id=None)
        yield noisy, answer.to_pandas()


def outside(truth: F64, low: F64, high: F64) -> npt.NDArray[np.bool_]:
    """Where ``truth`` lies outside ``[low, high]`` (a float slack of 1e-9 relative)."""
    slack = 1e-9 * (1.0 + np.abs(truth))
    with np.errstate(invalid="ignore"):
        return np.asarray((truth < low - slack) | (truth > high + slack), dtype=bool)

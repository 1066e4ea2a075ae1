"""PipelineDP on the benchmark query, with its in-process ``LocalBackend`` (pure Python).

COUNT, SUM and MEAN per category in one ``DPEngine.aggregate`` call, Laplace noise, pure ε = 1.
With MEAN requested, PipelineDP releases two noisy values per category (a count and a
normalised sum, at ε/2 each) and derives count, sum and mean from them;
``max_partitions_contributed = 5``, ``max_contributions_per_partition = 10``, values clamped to
[0, 100], the 50 categories as public partitions. The in-memory form is a list of row tuples.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pandas as pd
import pipeline_dp
from _common import CATEGORIES, EPSILON, HIGH, LOW, MAX_GROUPS, MAX_ROWS, main


def load(path: str) -> list[tuple[int, int, float]]:
    return list(pd.read_parquet(path).itertuples(index=False, name=None))


def prepare(rows: list[tuple[int, int, float]]) -> Any:
    budget = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
    return rows, budget, pipeline_dp.DPEngine(budget, pipeline_dp.LocalBackend())


def query(state: Any) -> tuple[list[Any], list[Any], list[Any]]:
    rows, budget, engine = state
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        metrics=[pipeline_dp.Metrics.COUNT, pipeline_dp.Metrics.SUM, pipeline_dp.Metrics.MEAN],
        max_partitions_contributed=MAX_GROUPS,
        max_contributions_per_partition=MAX_ROWS,
        min_value=LOW,
        max_value=HIGH,
    )
    extractors = pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: r[1],
        value_extractor=lambda r: 0.0 if r[2] != r[2] else r[2],
    )
    out = engine.aggregate(rows, params, extractors, public_partitions=CATEGORIES)
    budget.compute_budgets()
    res = dict(out)  # the LocalBackend is lazy: this runs the pipeline
    return (
        [res[k].count if k in res else None for k in CATEGORIES],
        [res[k].sum if k in res else None for k in CATEGORIES],
        [res[k].mean if k in res else None for k in CATEGORIES],
    )


if __name__ == "__main__":
    main(
        version=version("pipeline-dp"),
        backend="LocalBackend (in-process Python)",
        load=load,
        prepare=prepare,
        query=query,
        count_scale=MAX_GROUPS * MAX_ROWS / (EPSILON / 2),
    )

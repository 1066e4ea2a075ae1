"""PipelineDP's parameter tuning on one shape of ``benchmarks/utility.py`` (run in its own venv).

Runs inside the PipelineDP virtualenv (``.bench-envs/pipeline-dp``), started by
``benchmarks/utility_pipelinedp.py``; reads a Parquet file with columns ``uid`` (the privacy
unit) and ``g`` (one of the public groups) and prints one JSON object on stdout.

1. **Tuning** (PipelineDP's own, *not* differentially private): the contribution histograms of
   the raw data (``computing_histograms.compute_dataset_histograms``), then
   ``analysis.parameter_tuning.tune`` with ``max_partitions_contributed`` and
   ``max_contributions_per_partition`` to tune, COUNT, Laplace noise, δ = 0, the public groups,
   minimising the absolute-error RMSE its utility analysis predicts at the query's ε. It is
   deterministic (no noise), so it runs once per query ε.
2. **Query** with the chosen bounds, ``DPEngine.aggregate`` COUNT on the ``LocalBackend``,
   Laplace, public partitions, ``--repeat`` times with fresh noise at ε; and, for each policy
   used, ``--bounding-samples`` noise-free runs (ε = 10⁹, so the noise is below 10⁻⁶) that read
   the counts PipelineDP's own (random) contribution bounding keeps.
3. Optionally (``--private-l0``) PipelineDP's only *private* bound selection,
   ``DPEngine.calculate_private_contribution_bounds``: ``max_partitions_contributed`` by the
   exponential mechanism at ``ε·share``, the query at ``ε·(1 − share)`` with
   ``max_contributions_per_partition = 1`` (it does not choose that bound; 1 is what its score
   assumes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import version
from typing import Any

import pandas as pd
import pipeline_dp  # type: ignore[import-not-found, import-untyped, unused-ignore]
from analysis import parameter_tuning  # type: ignore[import-not-found, import-untyped, unused-ignore]
from pipeline_dp.dataset_histograms import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
    computing_histograms,
)

NOISE_FREE_EPS = 1e9


def extractors() -> pipeline_dp.DataExtractors:
    return pipeline_dp.DataExtractors(
        privacy_id_extractor=lambda r: r[0],
        partition_extractor=lambda r: r[1],
        value_extractor=lambda r: 0,
    )


def tune(
    rows: list[tuple[int, str]], groups: list[str], eps: float, candidates: int
) -> dict[str, Any]:
    backend = pipeline_dp.LocalBackend()
    t0 = time.perf_counter()
    hist = next(iter(computing_histograms.compute_dataset_histograms(rows, extractors(), backend)))
    t_hist = time.perf_counter() - t0
    options = parameter_tuning.TuneOptions(
        epsilon=eps,
        delta=0,
        aggregate_params=pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.LAPLACE,
            metrics=[pipeline_dp.Metrics.COUNT],
            max_partitions_contributed=1,
            max_contributions_per_partition=1,
        ),
        function_to_minimize=parameter_tuning.MinimizingFunction.ABSOLUTE_ERROR,
        parameters_to_tune=parameter_tuning.ParametersToTune(
            max_partitions_contributed=True,
            max_contributions_per_partition=True,
            noise_kind=False,
        ),
        number_of_parameter_candidates=candidates,
    )
    result, _ = parameter_tuning.tune(rows, backend, hist, options, extractors(), groups)
    result = next(iter(result))
    t_all = time.perf_counter() - t0
    conf = result.utility_analysis_parameters
    best = int(result.index_best)
    predicted = [r.metric_errors[0].absolute_error.rmse for r in result.utility_reports]
    return {
        "l0": int(conf.max_partitions_contributed[best]),
        "linf": int(conf.max_contributions_per_partition[best]),
        "candidates": int(conf.size),
        "l0_grid": sorted({int(x) for x in conf.max_partitions_contributed}),
        "linf_grid": sorted({int(x) for x in conf.max_contributions_per_partition}),
        "predicted_rmse": float(predicted[best]),
        "histogram_s": t_hist,
        "tune_s": t_all,
    }


def count(
    rows: list[tuple[int, str]], groups: list[str], l0: int, linf: int, eps: float
) -> list[float]:
    budget = pipeline_dp.NaiveBudgetAccountant(total_epsilon=eps, total_delta=0)
    engine = pipeline_dp.DPEngine(budget, pipeline_dp.LocalBackend())
    params = pipeline_dp.AggregateParams(
        noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        metrics=[pipeline_dp.Metrics.COUNT],
        max_partitions_contributed=l0,
        max_contributions_per_partition=linf,
    )
    out = engine.aggregate(rows, params, extractors(), public_partitions=groups)
    budget.compute_budgets()
    res = dict(out)
    return [float(res[g].count) for g in groups]


def private_l0(
    rows: list[tuple[int, str]], groups: list[str], calc_eps: float, query_eps: float
) -> int:
    budget = pipeline_dp.NaiveBudgetAccountant(total_epsilon=calc_eps, total_delta=0)
    engine = pipeline_dp.DPEngine(budget, pipeline_dp.LocalBackend())
    params = pipeline_dp.CalculatePrivateContributionBoundsParams(
        aggregation_noise_kind=pipeline_dp.NoiseKind.LAPLACE,
        aggregation_eps=query_eps,
        aggregation_delta=0,
        calculation_eps=calc_eps,
        max_partitions_contributed_upper_bound=len(groups),
    )
    out = engine.calculate_private_contribution_bounds(rows, params, extractors(), groups)
    return int(next(iter(out)).max_partitions_contributed)


class Bounding:
    """Noise-free counts of PipelineDP's own (random) bounding, ``samples`` runs per policy."""

    def __init__(self, rows: list[tuple[int, str]], groups: list[str], samples: int) -> None:
        self.rows, self.groups, self.samples = rows, groups, samples
        self.counts: dict[str, list[list[float]]] = {}

    def add(self, l0: int, linf: int) -> None:
        runs = self.counts.setdefault(f"{l0}x{linf}", [])
        while len(runs) < self.samples:
            runs.append(count(self.rows, self.groups, l0, linf, NOISE_FREE_EPS))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--epsilon", type=float, nargs="+", required=True, help="query budgets")
    p.add_argument("--groups", required=True, help="the public groups, comma-separated")
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--bounding-samples", type=int, default=5, help="noise-free runs per policy")
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--private-l0", type=float, default=None, help="share of ε for its private l0")
    args = p.parse_args()
    frame = pd.read_parquet(args.data)
    groups = args.groups.split(",")
    rows = list(zip(frame["uid"].tolist(), frame["g"].tolist(), strict=True))
    bounding = Bounding(rows, groups, args.bounding_samples)
    out: dict[str, Any] = {"version": version("pipeline-dp"), "groups": groups, "runs": []}
    for eps in args.epsilon:
        t = tune(rows, groups, eps, args.candidates)
        noisy, q_times = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            noisy.append(count(rows, groups, t["l0"], t["linf"], eps))
            q_times.append(time.perf_counter() - t0)
        bounding.add(t["l0"], t["linf"])
        out["runs"].append({"epsilon": eps, "tune": t, "noisy": noisy, "query_s": q_times})
        print(
            f"  pipeline-dp ε={eps:g}: {t['l0']}×{t['linf']} tune {t['tune_s']:.1f}s",
            file=sys.stderr,
        )
    if args.private_l0 is not None:
        total = max(args.epsilon)
        calc, q = total * args.private_l0, total * (1 - args.private_l0)
        picks, noisy, times = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            l0 = private_l0(rows, groups, calc, q)
            times.append(time.perf_counter() - t0)
            picks.append(l0)
            noisy.append(count(rows, groups, l0, 1, q))
            bounding.add(l0, 1)
        out["private_l0"] = {"calc_epsilon": calc, "epsilon": q, "l0": picks, "linf": 1,
                             "noisy": noisy, "tune_s": times}  # fmt: skip
    out["bounded"] = bounding.counts
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

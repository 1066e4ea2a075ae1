"""SmartNoise's MST or AIM synthesizer on a table of integer codes (``smartnoise-synth``).

Run in its own virtualenv (``benchmarks/synth_compare.py --setup`` builds it) as
``<env>/bin/python smartnoise_synth_runner.py SPEC.json``. The spec names the Parquet file of
codes, the public cardinality of each column, the method, ε, δ, the rows to sample and the
Parquet file to write the synthetic codes to. It prints one JSON object on stdout (SmartNoise's
own prints go to stderr).

Identical domains: each column gets a ``LabelTransformer`` fitted beforehand on the public
codes ``0 … k − 1`` (not on the data), so SmartNoise's domain is the public one, column by
column, and its transformer maps each code to itself. The ``TableTransformer`` is therefore
complete before ``fit`` and spends no budget (``preprocessor_eps = 0``).

Time split (wall clock, seconds): ``transform_s`` (SmartNoise's row-by-row preprocessing of
the DataFrame into tuples of codes), ``count_s`` (every exact marginal counted from the data:
the time inside ``mbi.Dataset.project``, wrapped here), ``fit_s`` (all of ``fit``: transform,
counting, noise, selection and estimation), ``sample_s`` (``sample``: the model's rows and
the inverse transform); ``cpu_s``: the CPU time of ``fit`` + ``sample`` (all threads), which
a loaded machine does not inflate as it does wall time.

Sampling: ``sample`` calls mbi's ``MarkovRandomField.synthetic_data`` with its default
``method="round"``. In mbi 1.1.0 (the newest release SmartNoise's ``mbi<2`` pin allows) that
method assigns each row's value from its *rank* among the rows of its parent group (``u =
(rank + U(0,1)) / count``), so two children of the same parent are both monotone in the row
order and come out strongly dependent even when the model says they are independent: its
rows disagree with its own model on every pair of columns that share no clique. The runner
therefore also samples the *same fitted model* with mbi's other method, ``method="sample"``
(i.i.d. draws from the model's conditionals), written to ``output_iid`` and timed as
``sample_iid_s``; the measurements, selections and estimate are the same.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from importlib.metadata import version
from typing import Any

import mbi
import numpy as np
import pandas as pd
from snsynth.aim import AIMSynthesizer
from snsynth.mst import MSTSynthesizer
from snsynth.transform import LabelTransformer, TableTransformer
from snsynth.utils import cdp_rho

COUNT_S = [0.0]


def _timed_project(original: Any) -> Any:
    def project(self: Any, cols: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(self, cols)
        finally:
            COUNT_S[0] += time.perf_counter() - t0

    return project


mbi.Dataset.project = _timed_project(mbi.Dataset.project)


class _IID:
    """A fitted mbi model whose ``synthetic_data`` draws rows i.i.d. (``method="sample"``)."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def synthetic_data(self, rows: int | None = None) -> Any:
        return self.model.synthetic_data(rows=rows, method="sample")


def transformer(cardinalities: dict[str, int]) -> TableTransformer:
    """One LabelTransformer per column, fitted on the public codes, not on the data."""
    columns = []
    for k in cardinalities.values():
        t = LabelTransformer(nullable=False)
        t.fit(list(range(k)))
        columns.append(t)
    table = TableTransformer(columns)
    assert table.fit_complete
    return table


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    frame = pd.read_parquet(spec["data"])
    cards = {str(k): int(v) for k, v in spec["cardinalities"].items()}
    frame = frame[list(cards)]
    np.random.seed(int(spec.get("seed", 0)))  # SmartNoise's selections use np.random
    eps, delta = float(spec["epsilon"]), float(spec["delta"])
    if spec["method"] == "mst":
        synth: Any = MSTSynthesizer(epsilon=eps, delta=delta)
    elif spec["method"] == "aim":
        synth = AIMSynthesizer(epsilon=eps, delta=delta, degree=int(spec.get("degree", 2)))
    else:
        raise SystemExit(f"unknown method {spec['method']!r}")
    table = transformer(cards)
    t0 = time.perf_counter()
    table.transform(frame)  # timed alone: fit repeats it (the same work) inside
    transform_s = time.perf_counter() - t0
    COUNT_S[0] = 0.0
    with contextlib.redirect_stdout(sys.stderr):
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        synth.fit(frame, transformer=table, preprocessor_eps=0.0)
        fit_s = time.perf_counter() - t0
        count_s = COUNT_S[0]
        t0 = time.perf_counter()
        rows = synth.sample(int(spec["rows"]))
        sample_s = time.perf_counter() - t0
        cpu_s = time.process_time() - cpu0  # fit + sample, every thread of the process
        # The same fitted model sampled again with mbi's i.i.d. method (see the docstring).
        synth.synthesizer = _IID(synth.synthesizer)
        t0 = time.perf_counter()
        rows_iid = synth.sample(int(spec["rows"]))
        sample_iid_s = time.perf_counter() - t0
    out = pd.DataFrame(rows, columns=list(cards)).astype("int64")
    out.to_parquet(spec["output"], index=False)
    pd.DataFrame(rows_iid, columns=list(cards)).astype("int64").to_parquet(
        spec["output_iid"], index=False
    )
    result = {
        "version": version("smartnoise-synth"),
        "mbi": version("mbi"),
        "rho": float(cdp_rho(eps, delta)),
        "transform_s": transform_s,
        "count_s": count_s,
        "fit_s": fit_s,
        "sample_s": sample_s,
        "sample_iid_s": sample_iid_s,
        "cpu_s": cpu_s,
        "rows": len(out),
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

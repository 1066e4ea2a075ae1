"""Clamping ranges chosen by expected error (issue 21): tuned vs quantiles vs the oracle.

Workload: ``SELECT g, SUM(v) … GROUP BY g`` (or ``AVG(v)``) over 8 public groups whose
values are spread differently, answered at ``ε_w``. Error: the root-mean-square error per
group against the true, unclamped answer, computed exactly for each clamping range
``[a, b]`` from the data: the clamping bias of each group and the noise the query planner
adds (a sum: the discrete Laplace at sensitivity ``max(|a|, |b|)``; an average: a centred
sum at sensitivity ``(b − a)/2`` and a count, ``ε_w/2`` each, to first order in the noise),
so no repeat noise is needed for the policies but the tuned one.

* **tuned**: ``Session.tune(…, clamps={v: search range}, clamp_workload=…)`` at ``ε_t``
  (half of it on the value histogram), its proposed range (mean over ``--repeat`` tunings,
  each with fresh noise);
* **support only**: from each tuning's same released histogram, the range chosen when the
  choice reads its detected support alone (``ValueHistogram.denoised``: the model before
  tails were modelled), a different post-processing of the same release;
* **quantiles**: the exact 5% and 95% quantiles of the values (the previous proposal,
  here without its DP noise: its best case);
* **search**: the whole search range as the clamp (what a curator without tuning writes);
* **oracle**: the best range on the tuner's own grid, chosen with hindsight from the exact
  errors.

Shapes (one row a person, ``--people`` persons): ``lognormal`` (costs, group medians
``e^(6+0.2g)``), ``pareto`` (a heavy tail, index 1.5), ``signed`` (profits around
``50g − 100`` with ±10⁵ outliers in 0.1% of rows), ``ages`` (uniform 20–80 in a 0–150
search range).

Then a robustness sweep (``--sweep-*``): seven more shapes (Pareto of index 1.1 and 2.5,
exponential, lognormal σ = 2, bimodal, Poisson counts, negated lognormal) beside the four, at
2,000 and 20,000 people and value-histogram budgets ε_h = 0.05, 0.25, 1: the modelled and the
support-only choice read from the same releases (the release path itself, CSPRNG noise).

Run: ``.venv/bin/python benchmarks/clamps.py`` (20,000 and 100,000 people, then the sweep;
writes ``benchmarks/results/clamps.md``).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.accounting.loss import Epsilon
from deniable.curator import session as session_module
from deniable.curator.clamps import (
    ClampChoice,
    ValueHistogram,
    Workload,
    choose_clamps,
    release_value_counts,
    value_edges,
)
from deniable.curator.session import Session

ROOT = Path(__file__).resolve().parent.parent
GROUPS = 8
F64 = npt.NDArray[np.float64]

SEARCH = {
    "lognormal": (0.0, 1e6),
    "pareto": (0.0, 1e7),
    "signed": (-1e6, 1e6),
    "ages": (0.0, 150.0),
}

SWEEP = {
    **SEARCH,
    "pareto 1.1": (0.0, 1e8),
    "pareto 2.5": (0.0, 1e7),
    "exponential": (0.0, 1e6),
    "lognormal σ=2": (0.0, 1e8),
    "bimodal": (0.0, 1e6),
    "counts": (0.0, 1e4),
    "negated lognormal": (-1e7, 1e3),
}
"""The shapes of the robustness sweep (``--sweep``) and their search ranges."""


def shape(name: str, people: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, GROUPS, people)
    if name == "lognormal":
        v = rng.lognormal(6 + 0.2 * g, 1.2)
    elif name == "pareto":
        v = 100 * (rng.pareto(1.5, people) + 1) * (1 + g / 4)
    elif name == "signed":
        v = rng.normal(50 * g - 100, 300)
        out = rng.random(people) < 0.001
        v = np.where(out, rng.choice([-1e5, 1e5], people), v)
    elif name == "ages":
        v = rng.uniform(20, 80, people) + g
    elif name == "pareto 1.1":
        v = 100 * (rng.pareto(1.1, people) + 1) * (1 + g / 4)
    elif name == "pareto 2.5":
        v = 100 * (rng.pareto(2.5, people) + 1) * (1 + g / 4)
    elif name == "exponential":
        v = rng.exponential(1000 * (1 + g / 4))
    elif name == "lognormal σ=2":
        v = rng.lognormal(5 + 0.2 * g, 2.0)
    elif name == "bimodal":
        low = rng.random(people) < 0.7
        v = np.where(low, rng.lognormal(4, 0.5, people), rng.lognormal(9, 0.8, people))
    elif name == "counts":
        v = rng.poisson(3 + g, people).astype(np.float64)
    elif name == "negated lognormal":
        v = -rng.lognormal(6 + 0.2 * g, 1.2)
    else:
        raise ValueError(name)
    return pd.DataFrame({"uid": np.arange(people), "g": g, "v": np.round(v, 2)})


def errors(frame: pd.DataFrame, lows: F64, highs: F64, workload: str, eps: float) -> F64:
    """Exact RMSE per group of each range ``(lows[i], highs[i])`` (see the module doc)."""
    v = frame["v"].to_numpy()
    g = frame["g"].to_numpy()
    sd = math.sqrt(2) / eps  # the discrete Laplace's sd at scale 1/ε, ≈ √2/ε
    out = np.zeros(len(lows))
    for k in range(GROUPS):
        x = v[g == k]
        n = x.size
        clipped = np.clip(x[None, :], lows[:, None], highs[:, None])
        if workload == "sum":
            bias = (clipped - x[None, :]).sum(axis=1)
            noise = sd * np.maximum(np.abs(lows), np.abs(highs))
        else:
            bias = clipped.mean(axis=1) - x.mean()
            centre = (lows + highs) / 2
            s_sd = 2 * sd * (highs - lows) / 2
            n_sd = 2 * sd
            noise = np.hypot(s_sd, (clipped.mean(axis=1) - centre) * n_sd) / n
        out += bias**2 + noise**2
    return np.sqrt(out / GROUPS)


def oracle(
    frame: pd.DataFrame, search: tuple[float, float], workload: str, eps: float
) -> tuple[float, tuple[float, float]]:
    edges = np.asarray(value_edges(*search))
    v = frame["v"].to_numpy()
    # Ranges whose ends are within the values' reach (others are never better).
    lo_c = edges[edges <= max(np.quantile(v, 0.5), edges[0])]
    hi_c = edges[edges >= min(np.quantile(v, 0.5), edges[-1])]
    best = (math.inf, (0.0, 0.0))
    for lo in lo_c:
        his = hi_c[hi_c > lo]
        if his.size == 0:
            continue
        e = errors(frame, np.full(his.size, lo), his, workload, eps)
        i = int(np.argmin(e))
        if e[i] < best[0]:
            best = (float(e[i]), (float(lo), float(his[i])))
    return best


@contextlib.contextmanager
def also_support_only(picks: list[tuple[float, float]]) -> Iterator[None]:
    """Within, each tuning also records the range the choice would have made from the same
    released histogram reading its detected support alone (as before tails were modelled)."""
    chosen = choose_clamps  # what the session calls (imported there by name)

    def both(histogram: ValueHistogram, **kwargs: Any) -> list[ClampChoice]:
        saved = ValueHistogram.modelled
        setattr(ValueHistogram, "modelled", ValueHistogram.denoised)  # noqa: B010
        try:
            before = chosen(histogram, **kwargs)[0]
        finally:
            setattr(ValueHistogram, "modelled", saved)  # noqa: B010
        picks.append((before.low, before.high))
        return chosen(histogram, **kwargs)

    setattr(session_module, "choose_clamps", both)  # noqa: B010
    try:
        yield
    finally:
        setattr(session_module, "choose_clamps", chosen)  # noqa: B010


@dataclass(frozen=True)
class Row:
    """One shape and workload at one size: errors (RMSE per group) of each policy."""

    shape: str
    workload: str
    tuned: float
    tuned_worst: float
    tuned_pick: tuple[float, float]
    support_only: float
    quantiles: float
    search: float
    oracle: float
    oracle_pick: tuple[float, float]
    tune_s: float


def run(
    name: str, workload: Workload, people: int, eps_t: float, eps_w: float, repeat: int, tmp: Path
) -> Row:
    frame = shape(name, people, seed=11)
    search = SEARCH[name]
    s = Session(budget=Epsilon(epsilon=10_000), ledger=tmp / f"{name}-{workload}-{people}.db")
    s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1)

    def tune() -> tuple[float, tuple[float, float], float]:
        began = time.perf_counter()
        report = s.tune("t", epsilon=eps_t, group_by=["g"], groups=GROUPS, workload_epsilon=eps_w,
                        clamps={"v": search}, clamp_workload=workload)  # fmt: skip
        took = time.perf_counter() - began
        lo, hi = report.clamps["v"]
        err = float(errors(frame, np.array([lo]), np.array([hi]), workload, eps_w)[0])
        return err, (lo, hi), took

    support: list[tuple[float, float]] = []
    with also_support_only(support):
        runs = [tune() for _ in range(repeat)]
    before = [
        float(errors(frame, np.array([lo]), np.array([hi]), workload, eps_w)[0])
        for lo, hi in support
    ]
    q_lo, q_hi = np.quantile(frame["v"], [0.05, 0.95])
    quant = float(errors(frame, np.array([q_lo]), np.array([q_hi]), workload, eps_w)[0])
    whole = float(errors(frame, np.array([search[0]]), np.array([search[1]]), workload, eps_w)[0])
    best, best_pick = oracle(frame, search, workload, eps_w)
    picks = sorted(r[1] for r in runs)
    return Row(
        shape=name,
        workload=workload.upper(),
        tuned=float(np.mean([r[0] for r in runs])),
        tuned_worst=float(np.max([r[0] for r in runs])),
        tuned_pick=picks[len(picks) // 2],
        support_only=float(np.mean(before)),
        quantiles=quant,
        search=whole,
        oracle=best,
        oracle_pick=best_pick,
        tune_s=float(np.median([r[2] for r in runs])),
    )


def fmt(x: float) -> str:
    return f"{x:,.4g}"


@functools.cache
def sweep_oracle(name: str, people: int, workload: str, eps_w: float) -> float:
    """The oracle's error for a sweep cell (the same for every ε_h)."""
    return oracle(shape(name, people, seed=11), SWEEP[name], workload, eps_w)[0]


def sweep_cell(
    name: str, people: int, eps_h: float, eps_w: float, repeat: int
) -> dict[str, tuple[float, float]]:
    """Mean error / oracle of the modelled and the support-only choice, both read from the
    same ``repeat`` releases of the value histogram at ``eps_h`` (CSPRNG noise, the release
    path itself; one row a person, so the exact counts are the values' bins), per workload."""
    frame = shape(name, people, seed=11)
    search = SWEEP[name]
    edges = value_edges(*search)
    inner = np.asarray(edges[1:-1])
    exact = np.bincount(
        np.searchsorted(inner, frame["v"].to_numpy(), side="right"), minlength=len(edges) - 1
    ).astype(np.int64)
    eps = Fraction(eps_h).limit_denominator(10_000)
    out: dict[str, tuple[float, float]] = {}
    workloads: tuple[Workload, ...] = ("sum", "avg")
    for workload in workloads:
        floor = sweep_oracle(name, people, workload, eps_w)
        got: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(repeat):
            release = release_value_counts(exact, 1, eps)
            h = ValueHistogram(
                "v", search, edges, np.asarray(release.value, dtype=np.int64), release, 1
            )
            for modelled in (True, False):
                read = ValueHistogram.modelled if modelled else ValueHistogram.denoised
                saved = ValueHistogram.modelled
                setattr(ValueHistogram, "modelled", read)  # noqa: B010
                try:
                    c = choose_clamps(h, workload=workload, epsilon=eps_w, max_groups=1,
                                      max_rows=1, groups=GROUPS)[0]  # fmt: skip
                finally:
                    setattr(ValueHistogram, "modelled", saved)  # noqa: B010
                e = errors(frame, np.array([c.low]), np.array([c.high]), workload, eps_w)[0]
                got[modelled].append(float(e))
        out[workload] = (float(np.mean(got[True])) / floor, float(np.mean(got[False])) / floor)
    return out


def sweep(sizes: list[int], epsilons: list[float], eps_w: float, repeat: int) -> list[str]:
    """The robustness sweep's markdown table (shapes × sizes × workloads; a column pair an ε)."""
    head = "| shape | people | workload | " + " | ".join(
        f"ε_h = {e:g}: modelled | support only" for e in epsilons
    )
    lines = [head + " |", "|---|---|---|" + "---|---|" * len(epsilons)]
    worse = 0
    for people in sizes:
        for name in SWEEP:
            cells = [sweep_cell(name, people, e, eps_w, repeat) for e in epsilons]
            for workload in ("sum", "avg"):
                pairs = [cell[workload] for cell in cells]
                worse += sum(m > b + 0.05 for m, b in pairs)
                lines.append(
                    f"| {name} | {people:,} | {workload.upper()} | "
                    + " | ".join(f"{m:.2f}× | {b:.2f}×" for m, b in pairs)
                    + " |"
                )
                print(lines[-1], flush=True)
    lines += ["", f"Cells where the modelled choice is worse than support only by > 0.05: {worse}."]
    return lines


HEADER = (
    "| shape | workload | search range | tuned | tuned pick (median) | support only (before) "
    "| quantiles 5–95% | search range as clamp | oracle | oracle pick | tuned / oracle "
    "| worst tuning / oracle | support only / oracle | tune s |"
)


def table(rows: list[Row]) -> list[str]:
    lines = [HEADER, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r.tuned_pick
        olo, ohi = r.oracle_pick
        s_lo, s_hi = SEARCH[r.shape]
        o = r.oracle
        lines.append(
            f"| {r.shape} | {r.workload} | [{fmt(s_lo)}, {fmt(s_hi)}] | {fmt(r.tuned)} | "
            f"[{fmt(lo)}, {fmt(hi)}] | {fmt(r.support_only)} | {fmt(r.quantiles)} | "
            f"{fmt(r.search)} | {fmt(o)} | [{fmt(olo)}, {fmt(ohi)}] | "
            f"**{r.tuned / o:.2f}×** | {r.tuned_worst / o:.2f}× | "
            f"{r.support_only / o:.2f}× | {r.tune_s:.2f} |"
        )
    return lines


NOTES = """\
How the choice reads a heavy tail (`ValueHistogram.modelled`, post-processing of the same
release, no extra ε): the bins that stand out of the noise are kept as they are; from each
side's *shoulder* (its outermost bin above 4× the noise's 99.95% half-width) to the end of the
grid, a log-quadratic curve `A·r^j·q^(j(j−1)/2)` (a power law when q = 1, a lognormal's shape
when q < 1) is fitted to the raw noisy counts by least absolute deviations (the likelihood's
maximum under the discrete Laplace noise; the bins past the support count too, pulling the
curve down as much as up), and its expected counts fill the bins past the support up to where
fewer than 0.5 rows remain. A histogram without a shoulder (too few rows for the noise) is read
as before.

Alternatives measured on the sweep's shapes, sizes and budgets before this rule was chosen
(same exact-error model, 8–10 noise draws a cell): a plain geometric tail (q = 1 only)
matched the curve on Pareto but clamped far too wide where the decay accelerates (exponential
and σ = 2 lognormal at 2,000 people: 6–24× the oracle); fitting from the mode rather than the
outermost shoulder failed on the bimodal shape (9×); fitting without a solid shoulder
regressed small, noisy histograms (σ = 2 lognormal at 2,000 people, ε_h = 0.05: 2.5× → 6.3×).
Left as it was: `signed` at 20,000 people, whose ±10⁵ outliers are 10 rows in one bin each
side — no smooth tail leads to them, and no bin shows them.

Also seen in the sweep, the same for both models (the detected support, not the tails): where
no bin stands out at all (2,000 people at ε_h = 0.05) the choice has nothing to go on and can
collapse to a sliver of the range (in an earlier run of this sweep the σ = 2 lognormal's AVG
came out thousands of times the oracle there); and in a few per cent of releases a lone
noise-only bin above the per-bin floor (a 0.05% event a bin, over some 240 bins) stretches the
support to itself, so one draw in 8 can lift a cell's mean (earlier run: Pareto at 2,000
people, ε_h = 1, 3.3× for both). Keeping a lone bin only above a family-wise floor removed
those draws but lost real lone outliers (`signed` at 100,000 people: 1.13× → 2.25×), so it was
not adopted.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--tune-epsilon", type=float, default=0.5)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "clamps.md"))
    parser.add_argument("--sweep-people", type=int, nargs="*", default=[2_000, 20_000])
    parser.add_argument("--sweep-epsilon", type=float, nargs="*", default=[0.05, 0.25, 1.0])
    parser.add_argument("--sweep-repeat", type=int, default=8)
    args = parser.parse_args()
    lines = [
        "## Clamping ranges chosen by expected error (`benchmarks/clamps.py`)",
        "",
        (
            f"Per-group `SUM(v)` and `AVG(v)` over {GROUPS} public groups answered at ε = "
            f"{args.epsilon:g}; error = RMSE per group against the true, unclamped answer (exact "
            "clamping bias of each group and the planner's noise). tuned: `Session.tune(…, "
            f"clamps=…, clamp_workload=…)` at ε = {args.tune_epsilon:g} (half of it on the value "
            f"histogram; mean over {args.repeat} tunings, and the worst of them); support only: "
            "the range chosen from each of the same released histograms reading only the bins "
            "that stand out of the noise (the model before tails were modelled); quantiles: "
            "the exact 5%/95% quantiles (the first proposal without its noise); search: the "
            "whole search range; oracle: the best range on the tuner's grid, chosen in "
            "hindsight from the exact errors (the floor). "
            "One row a person."
        ),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for people in args.people:
            rows = []
            workloads: tuple[Workload, ...] = ("sum", "avg")
            for name in SEARCH:
                for workload in workloads:
                    r = run(
                        name,
                        workload,
                        people,
                        args.tune_epsilon,
                        args.epsilon,
                        args.repeat,
                        Path(tmp),
                    )
                    rows.append(r)
                    print(people, r, flush=True)
            lines += ["", f"{people:,} people:", "", *table(rows)]
    if args.sweep_people and args.sweep_epsilon:
        lines += [
            "",
            (
                "Robustness sweep: more shapes, smaller tables and other histogram budgets "
                f"(ε_h = the value histogram's ε, half the tuning's). Mean over "
                f"{args.sweep_repeat} releases of error / oracle ({GROUPS} groups, workload at "
                f"ε = {args.epsilon:g}), modelled and support-only choices read from the same "
                "releases:"
            ),
            "",
            *sweep(args.sweep_people, args.sweep_epsilon, args.epsilon, args.sweep_repeat),
        ]
    people = " ".join(str(p) for p in args.people)
    lines += [
        "",
        (
            f"Reproduce: `.venv/bin/python benchmarks/clamps.py --people {people} "
            f"--tune-epsilon {args.tune_epsilon:g} --epsilon {args.epsilon:g} "
            f"--repeat {args.repeat} --sweep-people "
            f"{' '.join(str(p) for p in args.sweep_people)} --sweep-epsilon "
            f"{' '.join(f'{e:g}' for e in args.sweep_epsilon)} --sweep-repeat "
            f"{args.sweep_repeat}`. Errors do not depend on the machine's load; tune s "
            "(the median seconds of one tuning, contribution and value histograms together) "
            "does."
        ),
        "",
        NOTES,
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Coverage of the bounding diagnostics (issue 21): do their intervals hold the true share?

With an answer, ``Session.sql(..., diagnostics=ε)`` releases, for each bounding rule, a DP
count of the people it cut and their share of the people the query reads, with an interval
at a stated level (:mod:`deniable.query.diagnostics`). This benchmark asks the same query
``--runs`` times on each data shape, with the diagnostics at ``--epsilon``, and counts how
often each rule's interval holds the **true** share of people cut, computed exactly from
the data in pandas (a person is cut by ``max_groups = m`` when they have more than ``m``
groups, by ``max_rows = r`` when one of their groups has more than ``r`` rows, by a clamp
when one of their values lies outside it).

Shapes: those of ``benchmarks/utility.py`` (``uniform``, ``heavy``, ``spread``) with a
heavy-tailed value column ``x`` (log-normal, clamped to ``[0, 20]``). Query:
``SELECT g, COUNT(*), SUM(x) … GROUP BY g`` at ``max_groups = 2``, ``max_rows = 3``.

Run: ``.venv/bin/python benchmarks/diagnostics.py`` (writes
``benchmarks/results/diagnostics.md``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from utility import GROUPS, shape  # noqa: E402

QUERY = "SELECT g, COUNT(*) AS n, SUM(x) AS sx FROM t GROUP BY g"
MAX_GROUPS, MAX_ROWS, CLAMP = 2, 3, (0.0, 20.0)


def truth(frame: pd.DataFrame) -> dict[str, float]:
    """The exact share of people each rule cuts, keyed like the diagnostics' rules."""
    per_pair = frame.groupby(["uid", "g"]).size()
    groups = per_pair.groupby(level=0).size()
    top = per_pair.groupby(level=0).max()
    outside = ((frame["x"] < CLAMP[0]) | (frame["x"] > CLAMP[1])).groupby(frame["uid"]).any()
    people = len(groups)
    return {
        "max_groups": float((groups > MAX_GROUPS).sum()) / people,
        "max_rows": float((top > MAX_ROWS).sum()) / people,
        "clamp": float(outside.sum()) / people,
    }


def rule_key(rule: str) -> str:
    if rule.startswith("max_groups"):
        return "max_groups"
    if rule.startswith("max_rows"):
        return "max_rows"
    return "clamp"


def run(name: str, people: int, eps: Fraction, runs: int, tmp: Path) -> list[dict[str, object]]:
    frame = shape(name, people, seed=11)
    rng = np.random.default_rng(3)
    frame["x"] = rng.lognormal(1.5, 1.0, len(frame))
    true = truth(frame)
    s = Session(budget=Epsilon(epsilon=10**9), ledger=tmp / f"{name}.db")
    s.add_table("t", frame, privacy_unit="uid", max_groups=MAX_GROUPS, max_rows=MAX_ROWS,
                public_keys={"g": GROUPS}, bounds={"x": CLAMP})  # fmt: skip
    hits: dict[str, int] = {}
    widths: dict[str, list[float]] = {}
    level = 0.0
    for i in range(runs):
        # each at its own ε, so that none is a free replay of an earlier answer
        answer = s.sql(QUERY, epsilon=Fraction(1000 + i, 1000), diagnostics=eps)
        report = answer.diagnostics
        assert report is not None
        level = report.level
        for cut in report.cuts:
            key = rule_key(cut.rule)
            hits[key] = hits.get(key, 0) + int(cut.low <= true[key] <= cut.high)
            widths.setdefault(key, []).append(cut.high - cut.low)
    s.close()
    return [
        {
            "shape": name,
            "rule": key,
            "true share": true[key],
            "coverage": hits[key] / runs,
            "level": level,
            "mean width": float(np.mean(widths[key])),
        }
        for key in sorted(hits)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--people", type=int, default=20_000)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "diagnostics.md"))
    args = parser.parse_args()
    eps = Fraction(args.epsilon).limit_denominator(1000)
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            r
            for n in ("uniform", "heavy", "spread")
            for r in run(n, args.people, eps, args.runs, Path(tmp))
        ]
    lines = [
        "## Bounding diagnostics: coverage (`benchmarks/diagnostics.py`)",
        "",
        (
            f"`{QUERY}` at `max_groups = {MAX_GROUPS}`, `max_rows = {MAX_ROWS}`, `x` clamped "
            f"to [{CLAMP[0]:g}, {CLAMP[1]:g}], asked {args.runs} times per shape with "
            f"diagnostics at ε = {float(eps):g}; coverage = share of runs whose interval holds "
            f"the true share of people the rule cut (computed exactly). {args.people:,} people."
        ),
        "",
        "| shape | rule | true share | coverage | stated level | mean interval width |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['rule']} | {r['true share']:.2%} | {r['coverage']:.1%} "
            f"| {r['level']:.0%} | {r['mean width']:.2%} |"
        )
    lines += [
        "",
        (
            f"Reproduce: `.venv/bin/python benchmarks/diagnostics.py --people {args.people} "
            f"--epsilon {args.epsilon:g} --runs {args.runs}`."
        ),
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""Readable text and optional matplotlib figures for the attack lab's reports.

:func:`render` turns any attack report into a few paragraphs: what the attacker learned from
each unsafe system, and where deniable stopped it (budget, cache, refusal) with the bound
its guarantee promises. :func:`plot` draws one figure per attack (PNG or SVG by the file's
extension), with matplotlib's non-interactive backend.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from deniable.errors import InvalidParameter

if TYPE_CHECKING:
    from deniable.attacks.averaging import AveragingReport
    from deniable.attacks.differencing import DifferencingReport
    from deniable.attacks.kanonymity import KAnonymityReport
    from deniable.attacks.membership import MembershipReport
    from deniable.attacks.publication import PublicationReport
    from deniable.attacks.reconstruction import ReconstructionReport

    AnyReport: TypeAlias = (
        AveragingReport
        | DifferencingReport
        | ReconstructionReport
        | KAnonymityReport
        | MembershipReport
        | PublicationReport
    )


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _bound(b: tuple[float, float] | None) -> str:
    return "" if b is None else f"[{_pct(b[0])}, {_pct(b[1])}]"


def _stop(run: Any) -> str:
    parts = []
    if run.cached:
        parts.append(f"{run.cached} repeats replayed free from the cache (no new information)")
    parts.append(f"{run.charged} answers charged, ε = {run.epsilon_spent:g} in total")
    if run.stopped_by == "budget":
        parts.append("then the budget refused every further question")
    elif run.stopped_by == "refusal":
        parts.append("then a question was refused as unsafe")
    return "; ".join(parts)


def _bit_runs(report: AveragingReport | DifferencingReport, what: str) -> list[str]:
    lines = [f"Prior that the target's secret is 1: {_pct(report.prior)}; truth: {report.truth}."]
    for run in report.runs:
        n = sum(1 for s in run.steps if s.answer is not None)
        verdict = "right" if run.guess == report.truth else "wrong"
        lines.append(f"\n* {run.system}")
        lines.append(
            f"  after {n} answers the posterior that the bit is 1 is {_pct(run.posterior)} "
            f"(guess {run.guess}: {verdict})"
        )
        if run.safe:
            lines.append(f"  {_stop(run)}.")
            lines.append(
                f"  ε = {run.epsilon_spent:g} bounds any posterior to {_bound(run.bound)}: "
                + ("held." if _within(run.posterior, run.bound) else "VIOLATED.")
            )
        else:
            certain = run.posterior > 0.999 or run.posterior < 0.001
            lines.append("  " + ("the system FELL: " + what if certain else "not decisive."))
    return lines


def _within(p: float, bound: tuple[float, float] | None) -> bool:
    return bound is not None and bound[0] - 1e-12 <= p <= bound[1] + 1e-12


def render(report: AnyReport) -> str:
    """The report as readable text (one header line, then one paragraph per system)."""
    from deniable.attacks.averaging import AveragingReport
    from deniable.attacks.differencing import DifferencingReport
    from deniable.attacks.kanonymity import KAnonymityReport
    from deniable.attacks.membership import MembershipReport
    from deniable.attacks.publication import PublicationReport
    from deniable.attacks.reconstruction import ReconstructionReport

    if isinstance(report, AveragingReport):
        head = [
            "Averaging attack: the same count asked again and again.",
            f"Query: {report.query}",
        ]
        return "\n".join(head + _bit_runs(report, "the noise averaged out, the secret is known."))
    if isinstance(report, DifferencingReport):
        head = [
            "Differencing attack: count(all) − count(all but the target).",
            f"Queries: {report.queries[0]}",
            f"         {report.queries[1]}",
        ]
        return "\n".join(head + _bit_runs(report, "the difference gave the target's bit away."))
    if isinstance(report, ReconstructionReport):
        lines = [
            (
                f"Reconstruction attack (Dinur–Nissim): {report.queries} random subset counts, "
                f"decoded by {report.decoder}, to recover {report.n} secret bits "
                f"(chance: about 50%)."
            ),
            "",
            f"Unsafe fresh-noise systems (no budget), by noise scale b (√n = {report.n**0.5:.1f}):",
        ]
        for p in report.sweep:
            label = "exact" if p.scale == 0 else f"b = {p.scale:g}"
            lines.append(f"  {label:>10}: {_pct(p.accuracy)} of the bits recovered")
        lines += [
            "",
            (
                f"* deniable session (budget ε = {report.budget:g}, ε = "
                f"{report.epsilon_per_query:g} per count)"
            ),
            f"  {report.deniable_refused} request(s) for the column itself refused as unsafe; "
            f"{report.deniable_answered} subset counts answered, ε = {report.epsilon_spent:g} "
            "charged"
            + ("; then the budget refused the rest." if report.deniable_stopped_by else "."),
            (
                f"  {_pct(report.deniable_accuracy)} of the bits recovered; no decoder can expect "
                f"more than {_pct(report.accuracy_bound)} at this ε."
            ),
        ]
        return "\n".join(lines)
    if isinstance(report, KAnonymityReport):
        lines = [
            (
                "The k-anonymity leak (Li–Qardaji–Su §3.1): only one person in town is worth "
                f"more than 10 million (they are worth {report.rich_worth:,})."
            ),
        ]
        outcomes: dict[tuple[str, str, str], int] = {}  # in order; identical runs once
        for run in report.runs:
            where = "with" if run.rich_in_data else "without"
            if run.says_present:
                said = (
                    f"the attacker says the rich person is in the data, worth "
                    f"{run.revealed_value:,.0f} (from {run.evidence})"
                )
            else:
                said = "the attacker sees no trace of the rich person"
            key = (run.system, where, said)
            outcomes[key] = outcomes.get(key, 0) + 1
        for (system, where, said), times in outcomes.items():
            again = "" if times == 1 else f" — in all {times} runs, each on a fresh sample"
            lines.append(f"\n* {system}, {where} the rich person: {said}{again}.")
        lines.append(
            f"\nDeniable's releases are {report.guarantee}; with prior 50% the posterior on "
            f"presence stays in {_bound(report.posterior)} (failing with probability ≤ δ). "
            "The rich person's band holds nobody else, so it is suppressed in every run."
        )
        return "\n".join(lines)
    if isinstance(report, MembershipReport):
        lines = [
            (
                f"Membership inference on a released histogram: {report.trials} independent "
                f"trials of {report.size} people, the target (the only rare diagnosis) present "
                f"with prior {_pct(report.prior)}."
            ),
        ]
        for mrun in report.runs:
            lo, hi = mrun.interval
            lines.append(
                f"\n* {mrun.system}: the attacker was right in {_pct(mrun.success_rate)} of the "
                f"trials (95% CI {_pct(lo)}–{_pct(hi)})."
            )
            if mrun.safe:
                replays = sum(s.cached for s in mrun.steps)
                lines.append(
                    f"  {replays} repeats replayed free; ε = {mrun.epsilon_spent:g} charged"
                    + ("; then the budget refused." if mrun.stopped_by == "budget" else ".")
                )
                bound = mrun.bound or 0.0
                lines.append(
                    f"  At ε = {mrun.epsilon_spent:g} no attacker can be right more than "
                    f"{_pct(bound)} of the time (in expectation)."
                )
                if mrun.success_rate > bound:
                    lines.append(
                        f"  The observed {_pct(mrun.success_rate)} is above it by sampling "
                        f"noise alone: its 95% interval ({_pct(lo)}–{_pct(hi)}) holds the "
                        "bound, so it is consistent with the guarantee."
                        if lo <= bound
                        else f"  The observed rate's 95% interval ({_pct(lo)}–{_pct(hi)}) lies "
                        "entirely above the bound: the guarantee does not hold here."
                    )
        return "\n".join(lines)
    if isinstance(report, PublicationReport):
        lines = [
            (
                f"Publishing a table: {report.trials} clinics of {report.size} patients; the "
                "target (aged 93, ZIP 99999, a rare diagnosis: nobody else is) present with "
                "prior 50%. The attacker knows the target's age and ZIP, says 'present' iff a "
                "published row matches them, and links the diagnosis most common among such "
                "rows. Both deniable releases are charged "
                f"ε = {report.epsilon:g}, δ = {report.delta:.3g} (k = {report.k}, "
                f"β = {report.beta:g} for the k-anonymized one)."
            ),
            "",
            "Membership:",
        ]
        for mrun in report.membership:
            lo, hi = mrun.interval
            line = (
                f"* {mrun.system}: right in {_pct(mrun.success_rate)} of the trials "
                f"(95% CI {_pct(lo)}–{_pct(hi)})"
            )
            if mrun.bound is not None:
                verdict = "within" if lo <= mrun.bound else "ABOVE"
                line += f"; no attacker can exceed {_pct(mrun.bound)} ({verdict} it)"
            lines.append(line + ".")
        lines += ["", "Linkage (the rare diagnosis named):"]
        for lrun in report.linkage:
            lines.append(
                f"* {lrun.system}: {lrun.named_present} of {lrun.present} trials with the "
                f"target, {lrun.named_absent} of {lrun.absent} without"
            )
        lines.append(
            "\nFor an (ε, δ)-DP release the rare diagnosis can be named for a present target "
            f"at most e^ε = {math.exp(report.epsilon):.3g} times as often, plus δ, as for an "
            "absent one: the de-identified table names it every time the target is there and "
            "never otherwise."
        )
        return "\n".join(lines)
    raise InvalidParameter(f"not an attack report: {type(report).__name__}")


def to_json(report: AnyReport) -> dict[str, Any]:
    """The report's numbers as JSON-compatible data."""
    return dataclasses.asdict(report)


def plot(report: AnyReport, path: str | Path) -> Path:
    """Draw the report's figure into ``path`` (``.png`` or ``.svg``) and return the path.

    Averaging and differencing: the posterior after each answer, with deniable's bound.
    Reconstruction: accuracy against the noise scale, with deniable's point and bound.
    k-anonymity: the published net-worth ranges. Membership: success rates against bounds.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from deniable.attacks.averaging import AveragingReport
    from deniable.attacks.differencing import DifferencingReport
    from deniable.attacks.kanonymity import KAnonymityReport
    from deniable.attacks.membership import MembershipReport
    from deniable.attacks.publication import PublicationReport
    from deniable.attacks.reconstruction import ReconstructionReport

    out = Path(path)
    if out.suffix.lower() not in (".png", ".svg"):
        raise InvalidParameter("the plot's file name must end in .png or .svg")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    try:
        if isinstance(report, AveragingReport | DifferencingReport):
            for run in report.runs:
                ys = [s.posterior for s in run.steps if s.posterior is not None]
                marker = "o" if len(ys) == 1 else None
                ax.plot(range(1, len(ys) + 1), ys, label=run.system, lw=1.5, marker=marker)
                if run.bound is not None:
                    ax.axhspan(*run.bound, color="tab:green", alpha=0.12, label="deniable's bound")
            ax.set_xscale("log")
            ax.set_xlabel("questions asked")
            ax.set_ylabel("posterior that the secret is 1")
            ax.set_ylim(-0.02, 1.02)
            ax.set_title(f"{report.attack} attack")
        elif isinstance(report, ReconstructionReport):
            xs = [max(p.scale, 0.25) for p in report.sweep]
            ax.plot(xs, [p.accuracy for p in report.sweep], "o-", label="unsafe, no budget")
            ax.axhline(0.5, color="grey", ls=":", label="chance")
            ax.axhline(report.accuracy_bound, color="tab:green", ls="--", label="deniable's bound")
            ax.axvline(report.n**0.5, color="grey", ls="-.", lw=0.8, label="√n")
            ax.plot(
                [1 / report.epsilon_per_query],
                [report.deniable_accuracy],
                "s",
                color="tab:green",
                label=f"deniable ({report.deniable_answered} answers)",
            )
            ax.set_xscale("log")
            ax.set_xlabel("noise scale b (exact answers drawn at the left edge)")
            ax.set_ylabel("fraction of bits recovered")
            ax.set_title("reconstruction attack")
        elif isinstance(report, KAnonymityReport):
            labels = [f"{r.system.split(':')[0]} ({'with' if r.rich_in_data else 'without'})"
                      for r in report.runs]  # fmt: skip
            values = [r.revealed_value or 0.0 for r in report.runs]
            ax.barh(
                range(len(values)), values, color=["tab:red" if v else "tab:green" for v in values]
            )
            ax.set_yticks(range(len(values)), labels, fontsize=7)
            ax.axvline(10_000_000, color="grey", ls=":")
            ax.set_xlabel("net worth revealed (0: nothing revealed)")
            ax.set_title("the k-anonymity leak")
        elif isinstance(report, MembershipReport | PublicationReport):
            runs = report.runs if isinstance(report, MembershipReport) else report.membership
            names = [r.system[:40] for r in runs]
            rates = [r.success_rate for r in runs]
            ax.bar(
                range(len(rates)),
                rates,
                color=["tab:red" if not r.safe else "tab:green" for r in runs],
            )
            for i, r in enumerate(runs):
                if r.bound is not None:
                    ax.hlines(r.bound, i - 0.4, i + 0.4, colors="black", linestyles="--")
            prior = report.prior if isinstance(report, MembershipReport) else 0.5
            ax.axhline(prior if prior >= 0.5 else 1 - prior, color="grey", ls=":")
            ax.set_xticks(range(len(rates)), names, fontsize=7, rotation=10)
            ax.set_ylabel("attacker's success rate")
            ax.set_ylim(0, 1.05)
            ax.set_title("membership inference (dashed: the ε bound)")
        else:
            raise InvalidParameter(f"not an attack report: {type(report).__name__}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        fig.savefig(out)
    finally:
        plt.close(fig)
    return out

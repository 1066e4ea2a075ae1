"""Figures that explain privacy: posterior bounds, noise on neighbours, accuracy, answers, budget.

Every function returns a :class:`matplotlib.figure.Figure` built without pyplot (no global
state, nothing shown, Agg canvas), with labelled axes, a title and a one-line caption in plain
words; :func:`save` writes it as PNG or SVG, chosen from the file's suffix. The numbers each
figure draws come from a tested function (:mod:`~deniable.explain.curves`,
:mod:`~deniable.explain.accuracy`, :mod:`~deniable.explain.errorbars`,
:mod:`~deniable.explain.timeline`). None of them reads data or spends budget.

================================  ==========================================================
figure                            what it shows
================================  ==========================================================
:func:`posterior_figure`          posterior range against the prior for one ε (thesis Fig. 2.1)
:func:`posterior_family_figure`   the same for a family of ε (Fig. 2.2), pure or (ε, δ)
:func:`neighbour_noise_figure`    the released count's law on two neighbours (Figs. 2.4–2.6)
:func:`accuracy_figure`           interval half-width against ε (or ρ)
:func:`answer_figure`             an answer's values with their error bars
:func:`budget_figure`             a dataset's cumulative spending over time, with its cap
================================  ==========================================================
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path

import matplotlib as mpl
import matplotlib.dates as mdates
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from deniable.accounting.loss import Number, show
from deniable.errors import InvalidParameter
from deniable.explain.accuracy import AccuracyCurve
from deniable.explain.curves import neighbour_noise, posterior_curve, posterior_family
from deniable.explain.errorbars import MAX_ROWS, answer_bars
from deniable.explain.posterior import DEFAULT_EVIDENCE, approx_posterior_bounds, split_loss
from deniable.explain.timeline import BudgetTimeline

FORMATS = {".png": "png", ".svg": "svg"}
"""File suffixes :func:`save` writes, and their formats."""

FAMILY = (0.1, 0.5, 1.0, math.log(3), 2.0, 3.0, 5.0)
"""The ε of the default family figure (ln 3 is the thesis' running example)."""

_BLUE = "#1f5fa8"
_RED = "#c0392b"
_GREY = "#555555"


def _figure(width: float = 6.4, height: float = 4.8) -> tuple[Figure, Axes]:
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)  # the Agg canvas: PNG rendering without any GUI backend
    ax = fig.add_subplot(1, 1, 1)
    return fig, ax


def _caption(fig: Figure, text: str, *, bottom: float = 0.2, right: float = 0.96) -> None:
    fig.subplots_adjust(bottom=bottom, top=0.9, left=0.12, right=right)
    fig.text(0.5, 0.015, text, ha="center", va="bottom", fontsize=8, color=_GREY)


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` as PNG (``.png``) or SVG (``.svg``); return the path.

    The files carry no creation date, so the same figure gives the same file.

    Raises:
        InvalidParameter: another suffix.
        OSError: the file cannot be written.
    """
    out = Path(path)
    fmt = FORMATS.get(out.suffix.lower())
    if fmt is None:
        raise InvalidParameter(
            f"cannot tell the image format from {out.name!r}: name the file .png or .svg"
        )
    metadata: dict[str, str | None] = {"Date": None} if fmt == "svg" else {"Software": None}
    # A fixed salt for the SVG's element ids (random by default): reproducible files.
    with mpl.rc_context({"svg.hashsalt": "deniable"}):
        fig.savefig(out, format=fmt, metadata=metadata)
    return out


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (for notebooks' ``_repr_png_``)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# -- posterior bounds (thesis Figures 2.1 and 2.2) ----------------------------------------------


def posterior_figure(
    epsilon: Number,
    *,
    delta: Number = 0,
    evidence: Number = DEFAULT_EVIDENCE,
    prior: Number | None = None,
) -> Figure:
    """The posterior range against the prior for one ε (thesis Figure 2.1).

    With δ > 0 the (ε, δ) bounds for evidence of probability ≥ ``evidence`` are drawn dashed
    beside the pure-ε ones. ``prior`` marks one prior and its range.

    Raises:
        InvalidParameter: as :func:`~deniable.explain.curves.posterior_curve`.
    """
    eps, d = split_loss(epsilon, delta)
    fig, ax = _figure()
    pure = posterior_curve(eps)
    ax.plot(pure.priors, pure.priors, color="black", lw=1, label="no update (posterior = prior)")
    ax.plot(pure.priors, pure.high, color=_BLUE, lw=2, label=f"bounds for ε = {show(eps, 3)}")
    ax.plot(pure.priors, pure.low, color=_BLUE, lw=2)
    ax.fill_between(pure.priors, pure.low, pure.high, color=_BLUE, alpha=0.08)
    title = f"What ε = {show(eps, 3)} lets an attacker learn"
    if d:
        approx = posterior_curve(eps, delta=d, evidence=evidence)
        ax.plot(approx.priors, approx.high, color=_RED, lw=1.5, ls="--", label=approx.label)
        ax.plot(approx.priors, approx.low, color=_RED, lw=1.5, ls="--")
        title = f"What ε = {show(eps, 3)}, δ = {show(d, 2)} lets an attacker learn"
    if prior is not None:
        p = float(prior)
        low, high = approx_posterior_bounds(p, eps, d, evidence=evidence)
        ax.vlines(p, low, high, color=_GREY, lw=3, alpha=0.6)
        ax.annotate(
            f"{p:.0%} → {low:.1%}–{high:.1%}",
            (p, high),
            textcoords="offset points",
            xytext=(6, 4),
            fontsize=9,
        )
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="prior: initial suspicion that the target is in",
           ylabel="posterior: suspicion after seeing the result", title=title)  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    caption = (
        "Whatever the attacker knew and whatever the result,\n"
        "their suspicion ends between the blue lines."
    )
    if d:
        caption += " Dashed: (ε, δ), for evidence not rarer than shown."
    _caption(fig, caption, bottom=0.17)
    return fig


def posterior_family_figure(
    epsilons: Sequence[Number] = FAMILY,
    *,
    delta: Number = 0,
    evidence: Number = DEFAULT_EVIDENCE,
) -> Figure:
    """The posterior range against the prior for a family of ε (thesis Figure 2.2).

    With δ > 0 every curve is the (ε, δ) bound for evidence of probability ≥ ``evidence``.

    Raises:
        InvalidParameter: as :func:`~deniable.explain.curves.posterior_family`.
    """
    curves = posterior_family(epsilons, delta=delta, evidence=evidence)
    fig, ax = _figure(7.0, 5.2)
    ax.plot([0, 1], [0, 1], color="black", lw=1, label="no update")
    # One colour and line style per curve, in order: a colour scale by ε value made close
    # values (0.5, 1, 1.1) indistinguishable.
    tab10 = mpl.colormaps["tab10"]
    palette = [tab10(i) for i in range(10)]
    styles = ("-", "--", "-.", ":")
    for i, c in enumerate(sorted(curves, key=lambda c: c.epsilon)):
        color, ls = palette[i % len(palette)], styles[(i // len(palette)) % len(styles)]
        name = f"ε = {show(c.epsilon, 3)}"
        ax.plot(c.priors, c.high, color=color, ls=ls, lw=1.8, label=name)
        ax.plot(c.priors, c.low, color=color, ls=ls, lw=1.8)
    d = curves[0].delta
    title = "Posterior bounds for several ε"
    if d:
        title += f" (δ = {show(d, 2)}, evidence ≥ {float(evidence):.3g})"
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="prior: initial suspicion that the target is in",
           ylabel="posterior: suspicion after seeing the result", title=title)  # fmt: skip
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    _caption(
        fig,
        "Each pair of curves bounds what an attacker can conclude.\n"
        "Larger ε lets a 10% suspicion grow to near-certainty (ε = 5: up to 94%).",
        bottom=0.17,
        right=0.8,
    )
    return fig


# -- noise on neighbouring counts (thesis Figures 2.4–2.6) --------------------------------------


def neighbour_noise_figure(
    count: int = 1000,
    *,
    epsilon: Number,
    sensitivity: int = 1,
    contribution: int | None = None,
) -> Figure:
    """The law of the released count when the target is out (``count``) and in.

    ``contribution > sensitivity`` shows an under-calibrated mechanism (thesis Figure 2.5):
    the two laws are further apart than ε allows.

    Raises:
        InvalidParameter: as :func:`~deniable.explain.curves.neighbour_noise`.
    """
    nn = neighbour_noise(count, epsilon=epsilon, sensitivity=sensitivity, contribution=contribution)
    fig, ax = _figure(7.0, 4.6)
    ax.step(nn.values, nn.without, where="mid", color=_BLUE, lw=1.6,
            label=f"target out: true count {nn.count}")  # fmt: skip
    ax.step(nn.values, nn.with_target, where="mid", color=_RED, lw=1.6,
            label=f"target in: true count {nn.count + nn.contribution}")  # fmt: skip
    ax.set(
        xlabel="released count",
        ylabel="probability",
        title=(
            f"Noise for ε = {show(nn.epsilon, 3)}, sensitivity {nn.sensitivity}; "
            f"the target adds {nn.contribution}"
        ),
    )
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, loc="upper right")
    ratio = math.exp(nn.actual_epsilon)
    if nn.guaranteed:
        text = (
            f"Any result is at most {ratio:.3g}× more likely with the target than without\n"
            f"(ε = {nn.actual_epsilon:.3g}): the attacker cannot tell which world they are in."
        )
    else:
        text = (
            f"Under-calibrated: a result can be {ratio:.3g}× more likely with the target,\n"
            f"i.e. ε = {nn.actual_epsilon:.3g}, not {float(nn.epsilon):.3g}: "
            "calibrate the noise to the most rows one person adds."
        )
    _caption(fig, text, bottom=0.18)
    return fig


# -- accuracy, answers, budget -----------------------------------------------------------------


def accuracy_figure(curve: AccuracyCurve) -> Figure:
    """Interval half-width against the budget (log-log), one line per output.

    Build ``curve`` with :func:`~deniable.explain.accuracy.accuracy_curve` or
    :func:`~deniable.explain.accuracy.program_accuracy_curve` (no data read, no budget spent).
    """
    fig, ax = _figure()
    order = np.argsort(curve.budgets)
    for label, widths in curve.half_widths.items():
        ax.plot(curve.budgets[order], widths[order], marker="o", ms=3, lw=1.6, label=label)
    ax.set_xscale("log")
    if all(float(np.min(w)) > 0 for w in curve.half_widths.values()):
        ax.set_yscale("log")
    ax.set(
        xlabel=f"privacy budget {curve.parameter}",
        ylabel=f"± half-width of the {curve.level:.0%} interval",
        title=f"Accuracy against {curve.parameter}: {curve.description}",
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    _caption(
        fig,
        f"More budget, narrower intervals: noise only — the value after bounding is within ±\n"
        f"this of the answer with probability ≥ {curve.level:.0%}. Computed without reading "
        "data or spending budget.",
        bottom=0.17,
    )
    return fig


def answer_figure(
    frame: pd.DataFrame,
    *,
    title: str | None = None,
    caption: str | None = None,
    max_rows: int = MAX_ROWS,
) -> Figure:
    """An answer's values with their confidence intervals as error bars, one panel per output.

    Raises:
        InvalidParameter: as :func:`~deniable.explain.errorbars.answer_bars`.
    """
    data = answer_bars(frame, max_rows=max_rows)
    n = len(data.bars)
    height = max(2.6, 0.28 * len(data.labels) + 1.6)
    fig = Figure(figsize=(4.2 * n + 1.2, height + 0.6), dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, n, i + 1) for i in range(n)]
    ys = np.arange(len(data.labels))
    for i, (ax, bars) in enumerate(zip(axes, data.bars, strict=True)):
        below = np.clip(bars.values - bars.low, 0, None)
        above = np.clip(bars.high - bars.values, 0, None)
        ax.errorbar(bars.values, ys, xerr=[below, above], fmt="o", color=_BLUE, ecolor=_GREY,
                    capsize=3, ms=4)  # fmt: skip
        ax.set_yticks(ys, list(data.labels) if i == 0 else [""] * len(ys))
        ax.invert_yaxis()
        ax.set_xlabel(f"{bars.name} (noisy value and interval)")
        ax.grid(True, axis="x", alpha=0.3)
    fig.suptitle(title or "Answer with confidence intervals", fontsize=10)
    fig.subplots_adjust(left=0.25 if len(data.labels[0]) > 6 else 0.15, right=0.97,
                        top=1 - 0.45 / (height + 0.6), bottom=0.9 / (height + 0.6),
                        wspace=0.15)  # fmt: skip
    fig.text(0.5, 0.01, caption or "Bars: intervals of the noise only — each covers the "
             "value after bounding (contribution caps, clamping), not the unbounded one.",
             ha="center", va="bottom", fontsize=8, color=_GREY)  # fmt: skip
    return fig


def budget_figure(timeline: BudgetTimeline) -> Figure:
    """Cumulative budget spent over time, one panel per component, with the cap as a line."""
    names = timeline.names
    fig = Figure(figsize=(7.0, 2.6 * len(names) + 1.2), dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(len(names), 1, i + 1) for i in range(len(names))]
    naive_utc = [t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t for t in timeline.times]
    times = np.array(naive_utc, dtype="datetime64[us]")
    for ax, name in zip(axes, names, strict=True):
        cap = float(timeline.cap[name])
        if len(times):
            spent = timeline.spent_floats(name)
            ax.step(times, spent, where="post", color=_BLUE, lw=2, marker="o", ms=3,
                    label=f"{name} spent")  # fmt: skip
            ax.fill_between(times, spent, step="post", color=_BLUE, alpha=0.1)
        cap_label = f"cap {name} = {show(timeline.cap[name], 4)}"
        ax.axhline(cap, color=_RED, ls="--", lw=1.5, label=cap_label)
        ax.set_ylabel(f"cumulative {name}")
        ax.set_ylim(0, max(cap, float(timeline.spent[name][-1]) if len(times) else 0) * 1.1 or 1)
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(True, alpha=0.3)
    for ax in axes:
        ax.xaxis_date()
        # Concise labels (dates once, then times; no "17:07.500000" for close charges).
        locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(
            mdates.ConciseDateFormatter(locator)  # type: ignore[no-untyped-call]
        )
    axes[-1].set_xlabel("time of the charge (UTC)")
    fig.suptitle(f"Budget spent on {timeline.dataset!r}", fontsize=11)
    left = ", ".join(
        f"{n}: {show(timeline.cap[n] - (timeline.spent[n][-1] if len(times) else 0), 4)}"
        for n in names
    )
    note = f"{len(times)} charges; left: {left}. Read from the ledger; spends nothing."
    fig.text(0.5, 0.01, note, ha="center", va="bottom", fontsize=8, color=_GREY)
    return fig

"""Every explanation figure is written as a real PNG and SVG (numbers are tested elsewhere)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.figure import Figure

from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.explain import plots
from deniable.explain.accuracy import accuracy_curve
from deniable.explain.timeline import budget_timeline
from deniable.ledger import Charge
from deniable.query.answer import Answer, AnswerMetadata

PNG = b"\x89PNG\r\n\x1a\n"
FRAME = pd.DataFrame(
    {
        "region": ["north", "south"],
        "n": [120, 80],
        "n_low": [114.0, 74.0],
        "n_high": [126.0, 86.0],
    }
)


def _charges() -> list[Charge]:
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    return [
        Charge(
            id=i,
            dataset="d",
            analyst="a",
            query_key=f"k{i}",
            query_text="q",
            loss=Epsilon(epsilon=0.5),
            time=t0 + timedelta(hours=i),
            details={},
            status="answered",
        )
        for i in range(1, 4)
    ]


FIGURES: dict[str, Callable[[], Figure]] = {
    "posterior": lambda: plots.posterior_figure(1.1, prior=0.5),
    "posterior_delta": lambda: plots.posterior_figure(1.1, delta=1e-3, evidence=0.01),
    "family": lambda: plots.posterior_family_figure(),
    "family_delta": lambda: plots.posterior_family_figure([0.5, 1, 2], delta=1e-6),
    "noise_2_4": lambda: plots.neighbour_noise_figure(1000, epsilon=math.log(3)),
    "noise_2_5": lambda: plots.neighbour_noise_figure(1000, epsilon=math.log(3), contribution=5),
    "noise_2_6": lambda: plots.neighbour_noise_figure(1000, epsilon=math.log(3), sensitivity=5),
    "accuracy": lambda: plots.accuracy_figure(accuracy_curve([0.1, 0.5, 1, 2], sensitivity=1)),
    "answer": lambda: plots.answer_figure(FRAME, title="SELECT region, COUNT(*) …"),
    "budget": lambda: plots.budget_figure(budget_timeline("d", _charges(), Epsilon(epsilon=2))),
    "budget_empty": lambda: plots.budget_figure(budget_timeline("d", [], Epsilon(epsilon=2))),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_is_written_as_png_and_svg(name: str, tmp_path: Path) -> None:
    fig = FIGURES[name]()
    ax = fig.axes[0]
    assert ax.get_xlabel(), "every figure labels its axes"
    assert fig.texts, "every figure has a caption"
    png = plots.save(fig, tmp_path / f"{name}.png")
    svg = plots.save(fig, tmp_path / f"{name}.SVG")
    data = png.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and len(text) > 10_000


def test_axis_labels_and_titles_say_what_is_shown() -> None:
    fig = plots.posterior_figure(1.1)
    ax = fig.axes[0]
    assert "prior" in ax.get_xlabel() and "posterior" in ax.get_ylabel()
    assert "ε = 1.1" in ax.get_title()
    nn = plots.neighbour_noise_figure(1000, epsilon=math.log(3), contribution=5).axes[0]
    assert nn.get_xlabel() == "released count" and "adds 5" in nn.get_title()


def test_same_figure_same_bytes(tmp_path: Path) -> None:
    a = plots.save(plots.posterior_figure(1), tmp_path / "a.svg").read_bytes()
    b = plots.save(plots.posterior_figure(1), tmp_path / "b.svg").read_bytes()
    assert a == b


def test_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match=r"\.png or \.svg"):
        plots.save(plots.posterior_figure(1), tmp_path / "x.jpg")
    assert not (tmp_path / "x.jpg").exists()


def _answer(frame: pd.DataFrame) -> Answer:
    meta = AnswerMetadata(
        query="SELECT region, COUNT(*) AS n FROM t GROUP BY region",
        loss=Epsilon(epsilon=1), cost=Epsilon(epsilon=1), remaining=Epsilon(epsilon=2),
        level=0.95, bounds={}, max_groups=1, max_rows=1, privacy_unit=None,
        mechanisms={"n": "geometric"},
    )  # fmt: skip
    return Answer(frame, meta)


def test_answer_plot_and_notebook_png() -> None:
    ans = _answer(FRAME)
    fig = ans.plot()
    assert ans.summary() in [t.get_text() for t in fig.texts]
    png = ans._repr_png_()
    assert png is not None and png.startswith(PNG) and len(png) > 5_000
    nothing = _answer(pd.DataFrame({"q": [1.0], "q_low": [math.nan], "q_high": [math.nan]}))
    assert nothing._repr_png_() is None  # nothing to draw: no image, no error


def test_close_epsilons_get_distinct_colours() -> None:
    """ε = 0.5, 1 and 1.1 were three shades of one colour scale (issue 23)."""
    import matplotlib.colors as mcolors

    fig = plots.posterior_family_figure([0.5, 1, 1.1, 2, 5])
    lines = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("ε")]
    looks = {(mcolors.to_hex(line.get_color()), line.get_linestyle()) for line in lines}
    assert len(lines) == 5 and len(looks) == 5
    rgb = [mcolors.to_rgb(line.get_color()) for line in lines]
    closest = min(math.dist(a, b) for i, a in enumerate(rgb) for b in rgb[i + 1 :])
    assert closest > 0.2  # far apart in RGB, not neighbouring shades


def test_budget_axis_reads_as_times_for_close_charges() -> None:
    """Charges half a second apart read '17:07.500000' on the axis before (issue 23)."""
    t0 = datetime(2024, 5, 1, 17, 7, tzinfo=UTC)
    charges = [
        Charge(
            id=i,
            dataset="d",
            analyst="a",
            query_key=f"k{i}",
            query_text="q",
            loss=Epsilon(epsilon=0.1),
            time=t0 + timedelta(milliseconds=500 * i),
            details={},
            status="answered",
        )
        for i in range(1, 6)
    ]
    fig = plots.budget_figure(budget_timeline("d", charges, Epsilon(epsilon=2)))
    fig.canvas.draw()
    labels = [t.get_text() for ax in fig.axes for t in ax.get_xticklabels() if t.get_text()]
    assert labels and not any("00000" in label for label in labels), labels

"""Session.accuracy_curve names outputs as the query does, AVG included (issue 23).

The per-measure curve labelled an AVG's parts ("m0: rows") and left the AVG out.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable import ROW, Session
from deniable.accounting.loss import Epsilon
from deniable.errors import InvalidParameter
from deniable.explain.plots import accuracy_figure

QUERY = "SELECT COUNT(*) AS n, AVG(x) AS mean_x, SUM(x) AS total FROM t"


@pytest.fixture
def session(tmp_path: Path) -> Session:
    s = Session(budget=Epsilon(epsilon=5), ledger=tmp_path / "l.db")
    s.add_table("t", pd.DataFrame({"x": np.arange(100.0)}), privacy_unit=ROW,
                bounds={"x": (0, 100)})  # fmt: skip
    return s


def test_outputs_by_their_names_in_their_units(session: Session) -> None:
    budgets = [0.1, 0.5, 1, 2]
    curve = session.accuracy_curve(QUERY, budgets, rows=1000)
    assert list(curve.half_widths) == ["n", "mean_x", "total"]
    for name, widths in curve.half_widths.items():
        assert (np.diff(widths) < 0).all(), name  # more budget, narrower
        for b, w in zip(budgets, widths, strict=True):
            assert w == pytest.approx(session.accuracy(QUERY, epsilon=b, rows=1000).width(name))
    labels = [t.get_text() for t in accuracy_figure(curve).axes[0].get_legend().get_texts()]
    assert labels == ["n", "mean_x", "total"]
    assert session.budget.spent == Epsilon(epsilon=0)  # nothing read, nothing charged


def test_an_average_without_an_assumed_size_is_named(session: Session) -> None:
    with pytest.raises(InvalidParameter, match=r"'mean_x'.*rows="):
        session.accuracy_curve(QUERY, [0.5, 1])
    with pytest.raises(InvalidParameter, match="positive"):
        session.accuracy_curve(QUERY, [0, 1], rows=10)
    curve = session.accuracy_curve("SELECT COUNT(*) AS n FROM t", [Fraction(1, 2), 1])
    assert list(curve.half_widths) == ["n"]

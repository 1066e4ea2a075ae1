"""A dataset's budget over time, from a real ledger; and an answer's error-bar data."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.errors import InvalidParameter
from deniable.explain.errorbars import answer_bars
from deniable.explain.timeline import ledger_timeline
from deniable.ledger import Ledger


def _ledger(tmp_path: Path, cap: Epsilon | EpsilonDelta | Rho) -> Ledger:
    ledger = Ledger(tmp_path / "l.db")
    ledger.register("d", cap)
    return ledger


def _charge(ledger: Ledger, loss: Epsilon | EpsilonDelta | Rho, i: int) -> None:
    ledger.charge("d", loss, analyst="ann", query_key=f"k{i}", query_text=f"q{i}")


def test_cumulative_epsilon_with_cap(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, Epsilon(epsilon=2))
    for i, e in enumerate([Fraction(1, 2), Fraction(1, 4), Fraction(1, 3)]):
        _charge(ledger, Epsilon(epsilon=e), i)
    tl = ledger_timeline(ledger, "d")
    assert tl.names == ("ε",) and tl.cap == {"ε": 2}
    assert tl.spent["ε"] == (Fraction(1, 2), Fraction(3, 4), Fraction(13, 12))
    assert tl.spent["ε"][-1] == ledger.spent("d").epsilon  # type: ignore[union-attr]
    assert list(tl.times) == sorted(tl.times) and len(tl.times) == 3
    assert tl.spent_floats("ε").tolist() == pytest.approx([0.5, 0.75, 13 / 12])


def test_mixed_charges_are_converted_as_the_ledger_counts_them(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path, EpsilonDelta(epsilon=3, delta=Fraction(1, 10**5)))
    _charge(ledger, Epsilon(epsilon=1), 0)
    _charge(ledger, EpsilonDelta(epsilon=Fraction(1, 2), delta=Fraction(1, 10**6)), 1)
    tl = ledger_timeline(ledger, "d")
    assert tl.spent == {"ε": (1, Fraction(3, 2)), "δ": (0, Fraction(1, 10**6))}
    assert (tl.spent["ε"][-1], tl.spent["δ"][-1]) == (
        ledger.spent("d").epsilon,  # type: ignore[union-attr]
        ledger.spent("d").delta,  # type: ignore[union-attr]
    )
    (tmp_path / "r").mkdir()
    rho = _ledger(tmp_path / "r", Rho(rho=1))
    _charge(rho, Epsilon(epsilon=1), 0)  # pure ε counts as ε²/2
    assert ledger_timeline(rho, "d").spent == {"ρ": (Fraction(1, 2),)}


def test_empty_history(tmp_path: Path) -> None:
    tl = ledger_timeline(_ledger(tmp_path, Epsilon(epsilon=1)), "d")
    assert tl.times == () and tl.spent == {"ε": ()}


# ----------------------------------------------------------------- answer error bars


def test_answer_bars() -> None:
    frame = pd.DataFrame(
        {
            "g": ["a", None],
            "n": [10, 20],
            "n_low": [7.0, 17.0],
            "n_high": [13.0, 23.0],
            "q": [1.0, 2.0],
            "q_low": [np.nan, np.nan],
            "q_high": [np.nan, np.nan],
        }
    )
    bars = answer_bars(frame)
    assert bars.labels == ("a", "NULL")
    (b,) = bars.bars  # q has no interval: not drawn, not a key
    assert b.name == "n" and b.values.tolist() == [10, 20]
    assert b.low.tolist() == [7, 17] and b.high.tolist() == [13, 23]
    single = answer_bars(frame.drop(columns=["g"]).iloc[:1])
    assert single.labels == ("all",)


def test_answer_bars_refuses() -> None:
    with pytest.raises(InvalidParameter, match="no value with an interval"):
        answer_bars(pd.DataFrame({"q": [1.0], "q_low": [np.nan], "q_high": [np.nan]}))
    big = pd.DataFrame({"n": range(100), "n_low": range(100), "n_high": range(100)})
    with pytest.raises(InvalidParameter, match="at most 60"):
        answer_bars(big)


def test_zcdp_dataset_is_shown_in_rho_against_the_filter_caps(tmp_path: Path) -> None:
    """A dataset spent through the zCDP accountant: ρ charges cannot be converted into an
    (ε, δ) cap, so the timeline is drawn in the filter's own currency (ρ, and the δ of
    charges with δ > 0) against its ρ cap and δ pool."""
    ledger = Ledger(tmp_path / "l.db")
    ledger.register("d", EpsilonDelta(epsilon=1, delta=1e-6), accountant="zcdp")
    _charge(ledger, Rho(rho=Fraction(1, 100)), 0)
    _charge(ledger, Epsilon(epsilon=Fraction(1, 10)), 1)
    _charge(ledger, EpsilonDelta(epsilon=Fraction(1, 10), delta=Fraction(1, 10**8)), 2)
    tl = ledger_timeline(ledger, "d")
    budget = ledger.budget_filter("d")
    assert tl.names == ("ρ", "δ")
    assert tl.spent["ρ"] == (Fraction(1, 100), Fraction(3, 200), Fraction(1, 50))
    assert tl.spent["δ"] == (0, 0, Fraction(1, 10**8))
    assert tl.cap == {"ρ": budget.rho_max, "δ": budget.delta_pool}  # type: ignore[union-attr]
    assert 0 < tl.cap["ρ"] < Fraction(1, 10)

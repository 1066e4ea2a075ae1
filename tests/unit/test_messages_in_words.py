"""Budget and allowance messages speak the user's terms (issue 21 §3): "ε = 0.9", not a repr."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from deniable.accounting import Epsilon, EpsilonDelta, Rho
from deniable.errors import BudgetExceeded, InvalidParameter
from deniable.ledger import Ledger


def test_losses_print_as_words() -> None:
    assert str(Epsilon(epsilon=0.9)) == "ε = 0.9"
    assert str(EpsilonDelta(epsilon=1, delta=1e-6)) == "ε = 1, δ = 1e-06"
    assert str(Rho(rho=0.125)) == "ρ = 0.125"
    assert repr(Epsilon(epsilon=0.9)) == "Epsilon(epsilon=0.9)"  # repr stays for debugging


def test_allowance_and_budget_messages(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as led:
        led.register("d", EpsilonDelta(epsilon=1, delta=1e-6))
        with pytest.raises(InvalidParameter) as wrong_kind:
            led.set_allowance("d", "ann", Epsilon(epsilon=0.5))
        text = str(wrong_kind.value)
        assert "ε = 0.5" in text and "(ε, δ) budget" in text and "--delta" in text
        assert "nothing was changed" in text and "Epsilon(" not in text
        led.set_allowance("d", "ann", EpsilonDelta(epsilon=0.5, delta=1e-6))
        led.charge("d", EpsilonDelta(epsilon=0.4, delta=0), analyst="ann", query_key="a",
                   query_text="q")  # fmt: skip
        with pytest.raises(BudgetExceeded) as over:
            led.charge("d", EpsilonDelta(epsilon=0.2, delta=0), analyst="ann", query_key="b",
                       query_text="q")  # fmt: skip
        text = str(over.value)
        assert "ε = 0.2" in text and "nothing was" in text and "EpsilonDelta(" not in text


def test_wrong_column_names_list_the_near_matches(tmp_path: Path) -> None:
    import pandas as pd

    from deniable import ROW, Session
    from deniable.errors import SQLError

    with Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "m.db") as s:
        frame = pd.DataFrame({"age": [1, 2], "income": [3, 4]})
        s.add_table("t", frame, privacy_unit=ROW, bounds={"age": (0, 100)})
        with pytest.raises(
            SQLError, match=r"unknown column 'agee' in table 't'; did you mean 'age'\?"
        ):
            s.sql("SELECT SUM(agee) AS s FROM t", epsilon=0.1)
        with pytest.raises(InvalidParameter, match=r"no column 'incme'; did you mean 'income'\?"):
            s.add_table("u", frame, privacy_unit="incme", max_groups=1, max_rows=1)
        with pytest.raises(SQLError) as far:
            s.sql("SELECT SUM(zzz) AS s FROM t", epsilon=0.1)
        assert "did you mean" not in str(far.value)
        assert s.budget.spent == Epsilon(epsilon=0)


def test_sensitivities_are_shown_in_the_values_units(tmp_path: Path) -> None:
    """A SUM over [0, 100] with 3 rows a person moves by 300, not by 300·2^15 grid units."""
    import pandas as pd

    from deniable import Session

    with Session(budget=Epsilon(epsilon=5), ledger=tmp_path / "s.db") as s:
        frame = pd.DataFrame({"uid": range(100), "v": [1.5] * 100})
        s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=3,
                    bounds={"v": (0, 100)})  # fmt: skip
        answer = s.sql("SELECT SUM(v) AS s, COUNT(*) AS n FROM t", epsilon=1)
        assert "sensitivity 300," in answer.metadata.mechanisms["s"]
        assert "sensitivity 3," in answer.metadata.mechanisms["n"]
        plan = s.plan("SELECT SUM(v) AS s FROM t", epsilon=1)
        recorded = plan.measures[0].describe()["sensitivity_in_value_units"]
        assert abs(float(Fraction(str(recorded))) - 300) < 1e-4  # the grid's rounding of 100


def test_keys_are_labels_and_values_are_quantities(tmp_path: Path) -> None:
    """A year key prints as 1990 (issue 23: the demo printed 1,990); counts keep 1,234."""
    import io

    import pandas as pd
    from rich.console import Console

    from deniable import Session

    with Session(budget=Epsilon(epsilon=1000), ledger=tmp_path / "y.db") as s:
        frame = pd.DataFrame({"uid": range(4000), "year": [1990, 1991] * 2000})
        s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1,
                    public_keys={"year": [1990, 1991]})  # fmt: skip
        answer = s.sql("SELECT year, COUNT(*) AS n FROM t GROUP BY year", epsilon=500)
        out = io.StringIO()
        Console(file=out, width=200).print(answer)
        text = out.getvalue()
        assert "1990" in text and "1,990" not in text
        assert "2,000" in text  # each count is 2,000 ± a fraction at ε = 500


def test_html_keeps_narrow_intervals_apart() -> None:
    """Four digits showed 0.5375 / 0.5375 / 0.5375 (issue 23); now each row gets enough."""
    import pandas as pd

    from deniable.accounting.loss import Epsilon as Eps
    from deniable.query.answer import Answer, AnswerMetadata

    frame = pd.DataFrame(
        {"share": [0.53751, 0.5], "share_low": [0.53748, 0.4], "share_high": [0.53754, 0.6]}
    )
    meta = AnswerMetadata(
        query="q", loss=Eps(epsilon=1), cost=Eps(epsilon=1), remaining=Eps(epsilon=1),
        level=0.95, bounds={}, max_groups=1, max_rows=1, privacy_unit="uid",
        mechanisms={"share": "x"},
    )  # fmt: skip
    html = Answer(frame, meta)._repr_html_()
    assert "0.53751" in html and "0.53748" in html and "0.53754" in html
    assert "<td>0.5</td>" in html and "<td>0.4</td>" in html  # short where short is enough


def test_a_bad_function_argument_is_a_typed_refusal(tmp_path: Path) -> None:
    """DATE_TRUNC(school, …) in a WHERE was an EngineError (HTTP 500, issue 23); it is a
    SQLError (a 400) decided when the query is bound, before any row is read."""
    import pandas as pd

    from deniable import ROW, Session
    from deniable.errors import SQLError

    with Session(budget=Epsilon(epsilon=5), ledger=tmp_path / "d.db") as s:
        s.add_table("t", pd.DataFrame({"school": ["a", "b"] * 10}), privacy_unit=ROW)
        with pytest.raises(SQLError, match="DATE_TRUNC's part name"):
            s.sql(
                "SELECT COUNT(*) AS n FROM t "
                "WHERE DATE_TRUNC(school, DATE '2020-01-01') > DATE '2019-01-01'",
                epsilon=1,
            )
        assert s.budget.spent == Epsilon(epsilon=0)

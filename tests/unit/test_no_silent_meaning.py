"""No silent meaning (issue 21, DESIGN §6 step 6): the unit, the bounds and the intervals say it.

Each test fails on the code before the change: ``add_table`` defaulted to row-level privacy
when no unit was given, accepted a DOUBLE unit column, took ``max_groups = max_rows = 1``
silently for a unit column, showed no row policies on any surface, and captioned intervals
as containing "the true value" (they cover the value after bounding, for the noise only).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

import deniable
from deniable import ROW, InvalidParameter
from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.answer import Answer

STATIC = Path(deniable.__file__).parent / "server" / "console" / "static"
COVERS = "noise only — covers the value after bounding"


def _visits() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "patient_id": [i // 3 for i in range(60)],
            "ward": ["a", "b", "c"] * 20,
            "cost": [float(100 * i) for i in range(60)],
            "weight": [60.5 + i for i in range(60)],
        }
    )


@pytest.fixture
def session(tmp_path: Path) -> Session:
    with pytest.warns(deniable.PrivacyWarning):
        s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db", source=SeededRandom(1))
    return s


# -- the privacy unit --------------------------------------------------------------------------


@pytest.mark.parametrize("given", [{}, {"privacy_unit": None}], ids=["omitted", "None"])
def test_a_table_without_a_stated_unit_is_refused_naming_the_choice(
    session: Session, given: dict[str, object]
) -> None:
    with pytest.raises(InvalidParameter, match=r"add_table\('visits'\) needs the privacy unit"):
        session.add_table("visits", _visits(), **given)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter) as info:
        session.add_table("visits", _visits(), **given)  # type: ignore[arg-type]
    message = str(info.value)
    assert "privacy_unit='patient_id'" in message and "privacy_unit=deniable.ROW" in message
    assert "visits" not in session.tables  # nothing registered


def test_row_is_a_public_sentinel_meaning_each_row_is_its_own_unit(session: Session) -> None:
    assert deniable.ROW is ROW and repr(ROW) == "ROW" and "ROW" in deniable.__all__
    info = session.add_table("visits", _visits(), privacy_unit=ROW)
    assert info.policy.privacy_unit is None
    assert (info.policy.max_groups, info.policy.max_rows) == (1, 1)  # by definition
    with pytest.raises(InvalidParameter, match="need a privacy_unit"):
        session.add_table("other", _visits(), privacy_unit=ROW, max_groups=2)


def test_a_floating_point_unit_column_is_refused(session: Session) -> None:
    with pytest.raises(InvalidParameter, match=r"'weight'.*floating-point column") as info:
        session.add_table("visits", _visits(), privacy_unit="weight", max_groups=1, max_rows=1)
    assert "60.5" not in str(info.value)  # never a value of the column
    # integers and text are fine
    session.add_table("by_int", _visits(), privacy_unit="patient_id", max_groups=1, max_rows=1)
    session.add_table("by_text", _visits(), privacy_unit="ward", max_groups=1, max_rows=1)


# -- contribution bounds -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({}, "max_groups and max_rows"),
        ({"max_groups": 3}, "max_rows"),
        ({"max_rows": 3}, "max_groups"),
    ],
)
def test_a_unit_column_needs_stated_contribution_bounds(
    session: Session, given: dict[str, int], missing: str
) -> None:
    with pytest.raises(InvalidParameter, match=f"'patient_id' but no {missing}:") as info:
        session.add_table("visits", _visits(), privacy_unit="patient_id", **given)  # type: ignore[arg-type]
    assert "declare max_groups" in str(info.value)
    assert "visits" not in session.tables


def test_sums_still_need_clamping_bounds_at_query_time(session: Session) -> None:
    session.add_table("visits", _visits(), privacy_unit="patient_id", max_groups=1, max_rows=3)
    with pytest.raises(deniable.UnsafeQuery, match="bounds"):
        session.sql("SELECT SUM(cost) AS s FROM visits", epsilon=1)


# -- the row-policy line, on every surface ------------------------------------------------------

LINE = "per patient_id: at most 3 groups, 2 rows per group; total clamped to [0, 5000]"
SQL = "SELECT ward, SUM(cost) AS total FROM visits GROUP BY ward"


@pytest.fixture
def answer(session: Session) -> Answer:
    session.add_table(
        "visits",
        _visits(),
        privacy_unit="patient_id",
        max_groups=3,
        max_rows=2,
        bounds={"cost": (0, 5000)},
        public_keys={"ward": ["a", "b", "c"]},
    )
    return session.sql(SQL, epsilon=1)


def test_the_row_policy_line_is_in_the_repr_html_and_rich_output(answer: Answer) -> None:
    assert answer.row_policy == LINE
    assert f"[rows: {LINE}]" in repr(answer)
    assert f"rows: {LINE}" in answer._repr_html_()
    console = Console(width=300, record=True)
    console.print(answer)
    assert f"rows: {LINE}" in console.export_text()


def test_the_row_policy_line_is_in_the_http_and_cli_json(answer: Answer) -> None:
    from deniable.cli.query import answer_doc
    from deniable.server.models import QueryResponse

    body = QueryResponse.of("hospital", answer).model_dump(mode="json")
    assert body["row_policy"] == LINE
    assert body["interval_coverage"] == f"95% intervals: {COVERS}"
    doc = answer_doc(answer, dataset="hospital", ledger=None)
    assert doc["row_policy"] == LINE and doc["interval_coverage"] == body["interval_coverage"]


def test_row_level_answers_say_so(session: Session) -> None:
    session.add_table("visits", _visits(), privacy_unit=ROW)
    a = session.sql("SELECT COUNT(*) AS n FROM visits", epsilon=1)
    assert a.row_policy == "row-level: each row is its own unit (1 group, 1 row)"


def test_the_console_shows_the_row_policy_line() -> None:
    script = (STATIC / "console.js").read_text(encoding="utf-8")
    assert re.search(r"res\.row_policy\b", script)
    assert "res.interval_coverage" in script


# -- what the intervals cover -----------------------------------------------------------------


def test_intervals_say_they_cover_the_value_after_bounding(answer: Answer) -> None:
    assert f"95% intervals: {COVERS}" in answer.summary()
    assert COVERS in repr(answer)


def test_no_caption_claims_the_true_value(answer: Answer) -> None:
    from deniable.explain.accuracy import accuracy_curve
    from deniable.explain.plots import accuracy_figure, answer_figure

    texts = [t.get_text() for t in answer_figure(answer.to_pandas()).texts]
    curve = accuracy_curve([0.5, 1.0], sensitivity=1, mechanism="geometric")
    texts += [t.get_text() for t in accuracy_figure(curve).texts]
    assert any("value after bounding" in t for t in texts)
    for surface in [*texts, *(p.read_text(encoding="utf-8") for p in STATIC.iterdir())]:
        assert "true value" not in surface
    assert "value after bounding" in (STATIC / "chart.js").read_text(encoding="utf-8")

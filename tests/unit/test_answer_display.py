"""How an answer prints in notebooks (HTML) and terminals (rich): readable, no lost digits."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from deniable.accounting.loss import Epsilon
from deniable.query.answer import Answer, AnswerMetadata, _cell, format_number


def answer(frame: pd.DataFrame) -> Answer:
    meta = AnswerMetadata(
        query="SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g",
        loss=Epsilon(epsilon=1),
        cost=Epsilon(epsilon=1),
        remaining=Epsilon(epsilon=2),
        level=0.95,
        bounds={"s": (0.0, 100038.0)},
        max_groups=1,
        max_rows=1,
        privacy_unit=None,
        mechanisms={"n": "geometric", "s": "geometric"},
    )
    return Answer(frame, meta)


FRAME = pd.DataFrame(
    {
        "g": ["a", "b", "c", "d", None],
        "n": np.array([100038, -7, 0, 1234567, 42], dtype=np.int64),
        "s": [100038.0, 0.000123, 1234567.89, math.nan, -1234567.89],
        "s_low": [-100038.4, -0.000123, -12.3456, math.nan, -0.0],
    }
)


def cells(html: str) -> list[str]:
    return re.findall(r"<td>(.*?)</td>", html)


@pytest.mark.parametrize(
    ("value", "plain", "grouped"),
    [
        (100038, "100038", "100,038"),  # an int keeps every digit
        (np.int64(100038), "100038", "100,038"),
        (100038.0, "100038", "100,038"),  # the bound that printed as 1e+05
        (100038.4, "100038", "100,038"),
        (0.000123, "0.000123", "0.000123"),
        (1234567.89, "1234568", "1,234,568"),  # rounded integer above 10^6
        (-1234567.89, "-1234568", "-1,234,568"),
        (-12.3456, "-12.35", "-12.35"),  # 4 significant digits below 10^6
        (1234.5678, "1235", "1,235"),
        (0.5, "0.5", "0.5"),  # trailing zeros dropped
        (-0.0, "0", "0"),
        (math.nan, "—", "—"),
        (np.float64("nan"), "—", "—"),
        (-(2**62), str(-(2**62)), f"{-(2**62):,d}"),
    ],
)
def test_format_number(value: object, plain: str, grouped: str) -> None:
    assert format_number(value, grouping=False) == plain
    assert format_number(value, grouping=True) == grouped


def test_html_keeps_integer_digits_and_shows_nan_as_a_dash() -> None:
    html = answer(FRAME)._repr_html_()
    assert "e+" not in html and "NaN" not in html and "nan" not in html
    row = len(FRAME.columns)
    got = cells(html)
    assert got[0:row] == ["a", "100038", "100038", "-100038"]
    assert got[row : 2 * row] == ["b", "-7", "0.000123", "-0.000123"]
    assert got[2 * row : 3 * row] == ["c", "0", "1234568", "-12.35"]
    assert got[3 * row : 4 * row] == ["d", "1234567", "—", "—"]
    assert got[4 * row : 5 * row] == ["NULL", "42", "-1234568", "0"]
    assert "ε = 1" in html  # the summary is still there


def test_rich_table_keeps_integer_digits_with_separators() -> None:
    console = Console(width=200, record=True, color_system=None)
    console.print(answer(FRAME))
    text = console.export_text()
    for shown in ["100,038", "0.000123", "1,234,568", "-1,234,568", "-12.35", "1,234,567", "—"]:
        assert shown in text
    assert "e+" not in text and "nan" not in text.lower()
    assert [_cell(v) for v in FRAME.iloc[0]] == ["a", "100,038", "100,038", "-100,038"]
    assert _cell(None) == "NULL" and _cell(True) == "True"


def test_int64_column_is_never_rounded() -> None:
    big = np.array([2**53 + 1, 10**15 + 7, -(10**12) - 3], dtype=np.int64)
    html = answer(pd.DataFrame({"n": big}))._repr_html_()
    assert cells(html) == [str(int(v)) for v in big]

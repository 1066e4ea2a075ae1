"""Generalisation hierarchies: declared as data, compiled to DuckDB SQL, checked for coverage."""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import duckdb
import pytest

from deniable.anonymize.recoding import (
    Categorical,
    DateParts,
    Hierarchy,
    Identity,
    Interval,
    Prefix,
    RecodingError,
    load_recoding,
    recoding_from_dict,
)

CON = duckdb.connect()  # shared: opening a DuckDB connection costs ~0.1 s


def _table(values: Sequence[object], sql_type: str) -> None:
    CON.execute(f"CREATE OR REPLACE TABLE t (i INTEGER, x {sql_type})")
    CON.executemany("INSERT INTO t VALUES (?, ?)", [[i, v] for i, v in enumerate(values)])


def apply(
    h: Hierarchy, values: Sequence[object], level: int, sql_type: str = "VARCHAR"
) -> list[object]:
    _table(values, sql_type)
    return [r[0] for r in CON.execute(f"SELECT {h.sql('x', level)} FROM t ORDER BY i").fetchall()]


def covered(h: Hierarchy, values: Sequence[object], sql_type: str = "VARCHAR") -> list[bool]:
    _table(values, sql_type)
    rows = CON.execute(f"SELECT {h.covered_sql('x')} FROM t ORDER BY i").fetchall()
    return [bool(r[0]) for r in rows]


def test_interval_bands() -> None:
    h = Interval(lower=0, upper=120, widths=(10, 20))
    assert apply(h, ["0", "9", "10", "37", "119", None], 1) == [
        "[0, 10)",
        "[0, 10)",
        "[10, 20)",
        "[30, 40)",
        "[110, 120)",
        None,
    ]
    assert apply(h, [37, 119], 2, "INTEGER") == ["[20, 40)", "[100, 120)"]
    assert apply(h, [37], 0, "INTEGER") == ["37"]
    assert apply(h, [37, None], 3, "INTEGER") == ["*", "*"]
    assert covered(h, ["0", "119.5", "120", "-1", "abc", None]) == [
        True,
        True,
        False,
        False,
        False,
        True,
    ]


def test_interval_decimal_bands_and_loss() -> None:
    h = Interval(lower="0", upper="1", widths=(0.25, 0.5))
    assert apply(h, ["0.3", "0.8"], 1) == ["[0.25, 0.50)", "[0.75, 1.00)"]
    negative = Interval(lower="-1.5", upper="1", widths=(0.5,))
    assert apply(negative, ["-1.2", "0.9"], 1) == ["[-1.5, -1.0)", "[0.5, 1.0)"]
    # Many bands: labels by arithmetic in DuckDB instead of a CASE, in the same format.
    many = Interval(lower=0, upper=100_000, widths=(1, 10))
    assert apply(many, ["37", "99999.5", None], 1) == ["[37, 38)", "[99999, 100000)", None]
    fine = Interval(lower=0, upper=100, widths=(0.25,))
    assert apply(fine, ["0.3", "99.9"], 1) == ["[0.25, 0.50)", "[99.75, 100.00)"]
    assert h.level_loss(1) == Fraction(1, 4)
    assert h.label_loss(1, "[0.25, 0.50)") == 0.25
    # Truncated last band: [0, 50), [50, 100), [100, 120) of 120: (50² + 50² + 20²)/120².
    assert Interval(lower=0, upper=120, widths=(50,)).level_loss(1) == Fraction(5400, 14400)
    assert Interval(lower=0, upper=120, widths=(50,)).label_loss(1, "[100, 120)") == pytest.approx(
        20 / 120
    )


def test_interval_rejects_bad_declarations() -> None:
    with pytest.raises(RecodingError, match="multiple"):
        Interval(lower=0, upper=100, widths=(10, 15))
    with pytest.raises(RecodingError, match="lower < upper"):
        Interval(lower=5, upper=5, widths=(1,))
    with pytest.raises(RecodingError, match="> 0"):
        Interval(lower=0, upper=5, widths=(0,))


def test_prefix() -> None:
    h = Prefix(length=5, keep=(3, 1))
    assert apply(h, ["47906", "02139", None], 1) == ["479**", "021**", None]
    assert apply(h, ["47906"], 2) == ["4****"]
    assert covered(h, ["47906", "02139", "2139", "4790a", "479061", None]) == [
        True,
        True,
        False,
        False,
        False,
        True,
    ]
    assert h.level_loss(2) == Fraction(10**4 - 1, 10**5 - 1)
    with pytest.raises(RecodingError, match="decrease"):
        Prefix(length=5, keep=(1, 3))


def test_dates() -> None:
    h = DateParts(
        lower="2000-01-01", upper="2030-01-01", levels=("month", "quarter", "year", "decade")
    )
    d = ["2011-03-04", "2019-12-31", None]
    assert apply(h, d, 0) == ["2011-03-04", "2019-12-31", None]
    assert apply(h, d, 1) == ["2011-03", "2019-12", None]
    assert apply(h, d, 2) == ["2011-Q1", "2019-Q4", None]
    assert apply(h, d, 3) == ["2011", "2019", None]
    assert apply(h, d, 4) == ["2010s", "2010s", None]
    assert apply(h, d, 5) == ["*", "*", "*"]
    assert covered(h, ["2011-03-04", "1999-12-31", "2030-01-01", "2011-02-30", "x"]) == [
        True,
        False,
        False,
        False,
        False,
    ]
    days = 10958  # 2000-01-01 .. 2029-12-31
    assert h.label_loss(3, "2012") == pytest.approx(365 / (days - 1))  # 366 days, leap year
    assert 0 < h.level_loss(1) < h.level_loss(2) < h.level_loss(3) < h.level_loss(4) < 1
    with pytest.raises(RecodingError, match="fine to coarse"):
        DateParts(lower="2000-01-01", upper="2001-01-01", levels=("year", "month"))


def test_categorical() -> None:
    h = Categorical(
        maps=(
            {"flu": "respiratory", "asthma": "respiratory", "cut": "injury", "burn": "injury"},
            {"respiratory": "illness", "injury": "illness"},
        )
    )
    assert h.level_names == ("raw", "level 1", "level 2", "*")
    assert apply(h, ["flu", "cut", None], 1) == ["respiratory", "injury", None]
    assert apply(h, ["flu", "cut"], 2) == ["illness", "illness"]
    assert covered(h, ["flu", "measles", None]) == [True, False, True]
    assert h.level_loss(1) == Fraction(1, 3)  # each value shares its group with one of 3 others
    assert h.level_loss(2) == Fraction(1)
    assert h.label_loss(1, "injury") == pytest.approx(1 / 3)
    with pytest.raises(RecodingError, match="does not cover"):
        Categorical(maps=({"a": "g"}, {"h": "i"}))
    numeric = Categorical(domain=("1", "2", "3"))  # values are compared as text
    assert covered(numeric, [1, 4], "INTEGER") == [True, False]


def test_identity() -> None:
    h = Identity()
    assert apply(h, ["a", None], 0) == ["a", None]
    assert apply(h, ["a", None], 1) == ["*", "*"]
    assert covered(h, ["anything"]) == [True]


def test_recoding_document(tmp_path: Path) -> None:
    doc = {
        "columns": {
            "age": {"type": "interval", "lower": 0, "upper": 120, "widths": [10, 20], "level": 1},
            "zip": {"type": "prefix", "length": 5, "keep": [3, 1], "level": "keep 1"},
            "when": {
                "type": "date",
                "lower": "2000-01-01",
                "upper": "2030-01-01",
                "levels": ["month", "year"],
                "level": "*",
                "candidates": ["month", "year"],
            },
            "dx": {"type": "categorical", "maps": [{"flu": "resp", "cut": "injury"}]},
        }
    }
    spec = recoding_from_dict(doc)
    assert spec.names == ("age", "zip", "when", "dx")
    with pytest.raises(RecodingError, match="no fixed 'level'"):
        spec.fixed()
    doc["columns"]["dx"]["level"] = 0  # type: ignore[index]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    spec = load_recoding(path)
    assert spec.fixed().levels() == {"age": "width 10", "zip": "keep 1", "when": "*", "dx": "raw"}
    # Candidates: 4 (age) × 4 (zip) × 2 (when) × 3 (dx).
    assert len(spec.candidates()) == 96
    yaml_path = tmp_path / "r.yaml"
    yaml_path.write_text(
        "columns:\n  age: {type: interval, lower: 0, upper: 120, widths: [10], level: 1}\n"
        "  when: {type: date, lower: 2000-01-01, upper: 2001-01-01, levels: [month], level: 1}\n"
    )
    assert load_recoding(yaml_path).fixed().levels() == {"age": "width 10", "when": "month"}


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"columns": {"a": {"type": "nope"}}}, "hierarchy type"),
        (
            {"columns": {"a": {"type": "prefix", "length": 5, "keep": [3], "typo": 1}}},
            "unknown keys",
        ),
        ({"columns": {"a": {"type": "prefix", "length": 5}}}, "needs the key 'keep'"),
        ({"columns": {"a": {"type": "identity", "level": 5}}}, "levels 0..1"),
        ({"columns": {"a": {"type": "identity", "level": "coarse"}}}, "unknown identity level"),
        ({"columns": {}}, "map column names"),
        ({"cols": {}}, "single key 'columns'"),
        ({"columns": {"a": {"type": "categorical"}}}, "maps or a domain"),
        (
            {"columns": {"a": {"type": "interval", "lower": "x", "upper": 1, "widths": [1]}}},
            "number",
        ),
    ],
)
def test_bad_documents_are_refused(doc: dict[str, object], match: str) -> None:
    with pytest.raises(RecodingError, match=match):
        recoding_from_dict(doc)


def test_bad_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RecodingError, match="cannot read"):
        load_recoding(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("columns: [unclosed")
    with pytest.raises(RecodingError, match="not valid"):
        load_recoding(bad)


def test_identifiers_and_strings_are_quoted() -> None:
    h = Categorical(maps=({"it's": "o'k"},))
    con = duckdb.connect()
    con.execute('CREATE TABLE t ("we""ird" VARCHAR)')
    con.execute("INSERT INTO t VALUES ('it''s')")
    expr = h.sql('we"ird', 1)
    assert con.execute(f"SELECT {expr} FROM t").fetchall() == [("o'k",)]

"""Public bins of synthetic data (deniable.synth.discretize): sizes, refusals, SQL, decoding.

The binning expression is run by DuckDB on edge values (clamps at both ends, NULL, NaN, ±inf,
keys outside the declared ones) and compared with a Python reference of the documented rule.
"""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest

from deniable.engines.base import DUCKDB_CAPABILITIES
from deniable.errors import InvalidParameter, UnsafeQuery
from deniable.noise.testing import SeededRandom
from deniable.query.catalog import Column, ColumnKind, TableInfo, make_policy
from deniable.query.rewrite.compile import render
from deniable.synth.discretize import MAX_KEYS, Binning, discretize

COLUMNS = (
    Column("pid", "BIGINT", ColumnKind.INTEGER),
    Column("age", "BIGINT", ColumnKind.INTEGER),
    Column("small", "INTEGER", ColumnKind.INTEGER),
    Column("income", "DOUBLE", ColumnKind.REAL),
    Column("sex", "VARCHAR", ColumnKind.TEXT),
    Column("flag", "BOOLEAN", ColumnKind.BOOLEAN),
    Column("note", "VARCHAR", ColumnKind.TEXT),
    Column("score", "DOUBLE", ColumnKind.REAL),
)


def _info(**overrides: object) -> TableInfo:
    settings: dict[str, object] = {
        "bounds": {"age": (0, 99), "small": (1, 3), "income": (-10, 30)},
        "public_keys": {"sex": ["F", "M"]},
    }
    settings.update(overrides)
    policy = make_policy(
        "people",
        COLUMNS,
        privacy_unit="pid",
        max_groups=1,
        max_rows=2,
        bounds=settings["bounds"],  # type: ignore[arg-type]
        public_keys=settings["public_keys"],  # type: ignore[arg-type]
    )
    return TableInfo("people", COLUMNS, policy, "v1")


def test_domain_sizes_follow_the_declarations() -> None:
    d = discretize(_info(), ["age", "small", "income", "sex", "flag"], bins=10)
    # age: 100 integers in 10 bins of 10; small: one bin per value (3); income: 10 bins;
    # sex: 2 keys; flag: false/true. Each + 1 NULL/other cell.
    assert d.domain.sizes == (11, 4, 11, 3, 3)
    assert d.binning("age").width == 10
    assert d.binning("small").width == 1
    assert d.binning("income").width == Fraction(4)
    per_column = discretize(_info(), ["age", "income"], bins={"age": 4, "income": 3})
    assert per_column.domain.sizes == (5, 4)  # age width 25


def test_default_columns_leave_out_the_unit_and_need_declared_domains() -> None:
    with pytest.raises(UnsafeQuery, match="'note'"):
        discretize(_info())  # every column but pid: note has no keys
    ok = discretize(
        _info(
            public_keys={"sex": ["F", "M"], "note": ["a"]},
            bounds={"age": (0, 99), "small": (1, 3), "income": (-10, 30), "score": (0, 1)},
        )
    )
    assert "pid" not in ok.names and len(ok.names) == len(COLUMNS) - 1


@pytest.mark.parametrize(
    ("columns", "kwargs", "error", "words"),
    [
        (["score"], {}, UnsafeQuery, "no declared bounds"),
        (["note"], {}, UnsafeQuery, "no declared domain"),
        (["pid"], {}, InvalidParameter, "privacy unit"),
        (["nope"], {}, InvalidParameter, "no column"),
        (["age", "age"], {}, InvalidParameter, "twice"),
        ([], {}, InvalidParameter, "at least one column"),
        (["age"], {"bins": 0}, InvalidParameter, "bins"),
        (["age"], {"bins": 5000}, InvalidParameter, "bins"),
        (["age"], {"bins": 2.5}, InvalidParameter, "bins"),
    ],
)
def test_refusals_name_the_column_and_the_fix(
    columns: list[str], kwargs: dict[str, object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        discretize(_info(), columns, **kwargs)  # type: ignore[arg-type]


def test_too_many_keys_are_refused() -> None:
    keys = [f"k{i}" for i in range(MAX_KEYS + 1)]
    with pytest.raises(InvalidParameter, match="too many cells"):
        discretize(_info(public_keys={"note": keys}), ["note"])


def _reference(b: Binning, value: object) -> int:
    """The documented rule, in Python."""
    if not b.numeric:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return b.keys.index(None) if None in b.keys else b.null_cell
        return b.keys.index(value) if value in b.keys else b.null_cell
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return b.null_cell
    assert b.lower is not None and b.upper is not None and b.width is not None
    x = Fraction(value) if not isinstance(value, float) or math.isfinite(value) else None
    if x is None:
        return 0 if value < 0 else b.null_cell - 1  # type: ignore[operator]
    x = min(max(x, b.lower), b.upper)
    return min(int((x - b.lower) // b.width), b.null_cell - 1)


def test_the_binning_sql_matches_the_rule_on_edge_values() -> None:
    d = discretize(_info(), ["age", "small", "income", "sex", "flag"], bins=10)
    ages = [None, -5, 0, 9, 10, 55, 99, 100, 10**15]
    smalls = [None, 0, 1, 2, 3, 4, -(2**31)]
    incomes = [None, math.nan, -math.inf, math.inf, -10.0, -9.99, -6.0, 0.0, 29.99, 30.0, 1e300]
    sexes = [None, "F", "M", "f", "X", ""]
    flags = [None, True, False]
    n = max(map(len, (ages, smalls, incomes, sexes, flags)))

    def pad(values: list[object]) -> list[object]:
        return (values * n)[:n]

    frame = pd.DataFrame(
        {
            "age": pd.array(pad(ages), dtype="Int64"),
            "small": pd.array(pad(smalls), dtype="Int32"),
            "income": pd.array(pad(incomes), dtype="float64"),
            "sex": pd.array(pad(sexes), dtype="object"),
            "flag": pd.array(pad(flags), dtype="boolean"),
        }
    )
    frame.loc[0, "income"] = None  # a true NULL as well as NaN
    con = duckdb.connect()
    con.register("people", frame)
    exprs = ", ".join(
        render(b.expression(DUCKDB_CAPABILITIES), "duckdb") + f" AS c{j}"
        for j, b in enumerate(d.binnings)
    )
    got = con.execute(f"SELECT {exprs} FROM people AS __t").fetchall()
    for row, (_, source) in zip(got, frame.iterrows(), strict=True):
        for j, b in enumerate(d.binnings):
            value = source[b.column.name]
            value = None if value is pd.NA or value is None else value
            if isinstance(value, np.generic):
                value = value.item()
            assert row[j] == _reference(b, value), (b.column.name, value, row[j])


def test_decoding_draws_values_of_the_original_type_within_their_bin() -> None:
    d = discretize(_info(), ["age", "income", "sex", "flag"], bins=10)
    rng = np.random.default_rng(0)
    cells = np.stack([rng.integers(0, s, 5000) for s in d.domain.sizes], axis=1)
    table = d.decode(cells, SeededRandom(3))
    age, income = table.column("age"), table.column("income")
    assert str(age.type) == "int64" and str(income.type) == "double"
    assert str(table.column("sex").type) == "string" and str(table.column("flag").type) == "bool"
    for j, name in enumerate(("age", "income")):
        b = d.binning(name)
        values = table.column(name).to_pylist()
        for cell, value in zip(cells[:, j], values, strict=True):
            if cell == b.null_cell:
                assert value is None
                continue
            low, high = b.bin_range(int(cell))
            assert low <= value <= high and (name == "age" or value < high or high == b.upper)
    ages = np.array([v for v in age.to_pylist() if v is not None])
    assert set(np.unique(ages % 10)) == set(range(10))  # every integer of a bin is drawn
    sexes = table.column("sex").to_pylist()
    for cell, value in zip(cells[:, 2], sexes, strict=True):
        assert value == (None if cell == 2 else ("F", "M")[cell])

"""Neighbour parity on Spark: one person's extreme values never decide the outcome.

The Spark counterpart of ``tests/unit/test_neighbour_parity.py`` (DESIGN §6.5; issue 20):
``D`` and ``D′ = D`` plus one person whose rows hold Spark's extremes of the column types it
offers (dates and timestamps at the ends of Spark's range, DECIMAL(38) extremes, NaN/±inf
doubles, long/NFD/empty text, binary, booleans, arrays, maps, structs, NULL) give the same
outcome class for every query: answered and charged on both, or the same typed refusal,
which charges nothing. Spark has no infinite dates; its temporal keys still leave the
engine as text (:func:`deniable.query.rewrite.compile.key_as_text`), so no key is converted
to Python before the charge. A local Spark session is started here.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _parity import outcome, planted_pre_charge_conversion
from _spark import local_spark

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session

# column → (Spark type, normal value over id, extreme values)
COLUMNS: dict[str, tuple[str, str, list[str]]] = {
    "i8": ("bigint", "id % 50", ["9223372036854775807", "-9223372036854775808"]),
    "dec": (
        "decimal(38, 10)",
        "(id % 50) / 4",
        ["9999999999999999999999999999.9999999999", "-9999999999999999999999999999.9999999999"],
    ),
    "f8": (
        "double",
        "(id % 50) / 4",
        ["double('NaN')", "double('Infinity')", "double('-Infinity')"],
    ),
    "txt": (
        "string",
        "concat('k', id % 3)",
        ["repeat('x', 100000)", "''", "concat('e', char(204), char(129))"],
    ),
    "bin": ("binary", "binary(concat('b', id % 3))", ["unhex('00FF')", "binary('')"]),
    "d": (
        "date",
        "date_add(DATE '2020-01-01', int(id % 4))",
        ["DATE '9999-12-31'", "DATE '0001-01-01'"],
    ),
    "ts": (
        "timestamp",
        "TIMESTAMP '2020-01-01 00:00:00' + make_interval(0, 0, 0, 0, int(id % 4))",
        ["TIMESTAMP '9999-12-31 23:59:59.999999'", "TIMESTAMP '0001-01-01 00:00:00'"],
    ),
    "b": ("boolean", "id % 2 = 0", ["true", "false"]),
    "arr": ("array<int>", "array(int(id % 3))", ["array()", "array(NULL)"]),
    "st": ("struct<a:int>", "named_struct('a', int(id % 3))", ["named_struct('a', NULL)"]),
    "mp": ("map<string,int>", "map('k', int(id % 3))", ["map()", "map('k', NULL)"]),
}
NUMERIC = ["i8", "dec", "f8"]
PERSONS, ROWS_EACH = 40, 3
TEMPLATES = [
    "SELECT {c} AS g, COUNT(*) AS n FROM t GROUP BY {c}",
    "SELECT COUNT(*) AS n FROM t WHERE {c} IS NOT NULL",
    "SELECT SUM({c}) AS s FROM t",
    "SELECT MEDIAN({c}) AS m FROM t",
]


def _frames(spark: Any) -> tuple[Any, Any]:
    normal = ", ".join(f"CAST({v} AS {t}) AS {c}" for c, (t, v, _) in COLUMNS.items())
    base = spark.sql(
        f"SELECT id % {PERSONS} AS uid, {normal}, concat('k', id % 2) AS k "
        f"FROM range({PERSONS * ROWS_EACH})"
    )
    depth = max(len(v[2]) for v in COLUMNS.values())
    rows = []
    for j in range(depth + 1):
        cells = [
            f"CAST({'NULL' if j == depth else ex[j % len(ex)]} AS {t}) AS {c}"
            for c, (t, _, ex) in COLUMNS.items()
        ]
        rows.append(f"SELECT CAST(999999 AS bigint) AS uid, {', '.join(cells)}, 'public' AS k")
    person = spark.sql(" UNION ALL ".join(rows))
    return base, base.unionByName(person)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Session, Session]]:
    from deniable.engines.spark import SparkEngine

    spark = local_spark()
    tmp = tmp_path_factory.mktemp("spark-parity")
    made = []
    for n, frame in enumerate(_frames(spark)):
        s = Session(
            budget=EpsilonDelta(epsilon=10**9, delta=Fraction(1, 2)),
            ledger=tmp / f"{n}.db",
            engine=SparkEngine(spark),
        )
        s.add_table(
            "t",
            frame,
            privacy_unit="uid",
            bounds=dict.fromkeys(NUMERIC, (0, 20)),
            max_groups=2,
            max_rows=2,
            public_keys={"k": ["k0", "k1", "public"]},
        )
        made.append(s)
    yield made[0], made[1]
    for s in made:
        s.close()


@pytest.mark.parametrize("template", TEMPLATES)
@pytest.mark.parametrize("column", list(COLUMNS))
def test_one_extreme_person_never_changes_the_outcome(
    sessions: tuple[Session, Session], template: str, column: str
) -> None:
    query = template.format(c=column)
    on_d, on_d2 = (outcome(s, query) for s in sessions)
    assert on_d == on_d2, f"{query!r}: D gives {on_d}, D′ gives {on_d2}"
    assert not on_d[0].startswith("untyped"), on_d


def test_control_a_size_dependent_failure_is_caught(
    sessions: tuple[Session, Session],
) -> None:
    """A planted pre-charge failure on the person's 100,000-character key must be caught."""
    with planted_pre_charge_conversion(longest_text=10_000):
        # only the person's long text matches: their one group is always kept (max_groups 2)
        query = "SELECT txt AS planted, COUNT(*) AS n FROM t WHERE length(txt) > 1000 GROUP BY txt"
        on_d, on_d2 = (outcome(s, query) for s in sessions)
    assert on_d[0] == "answer" and on_d2[0] == "untyped MemoryError", (on_d, on_d2)

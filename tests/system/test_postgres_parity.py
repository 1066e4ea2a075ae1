"""Neighbour parity on PostgreSQL: one person's extreme values never decide the outcome.

The PostgreSQL counterpart of ``tests/unit/test_neighbour_parity.py`` (DESIGN §6.5; issue
20): ``D`` and ``D′ = D`` plus one person whose rows hold PostgreSQL's extremes of every
column type it offers here (``'infinity'``/``'-infinity'``/year 10000/BC dates and
timestamps, unbounded NUMERIC with ``'NaN'``, ±``Infinity`` doubles, NFD/very long/empty
text, BYTEA, INTERVAL, BOOLEAN, UUID, arrays, JSONB, NULL) give the same outcome class for
every query: answered and charged on both, or the same typed refusal, which charges
nothing. Before the fix, ``psycopg`` could not load a ``DATE 'infinity'`` group key (nor a
NUMERIC key past 10³⁸): a free, exact yes/no about that person. The server is started here
(initdb + pg_ctl on a temporary directory).
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _parity import outcome, planted_pre_charge_conversion
from _postgres import PostgresServer, create_reader, shared_server, stop_shared_server

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import EpsilonDelta  # noqa: E402
from deniable.curator.session import Session  # noqa: E402

# column → (PostgreSQL type, normal value over i, extreme values)
COLUMNS: dict[str, tuple[str, str, list[str]]] = {
    "i2": ("smallint", "i % 50", ["32767", "-32768"]),
    "i8": ("bigint", "i % 50", ["9223372036854775807", "-9223372036854775808"]),
    "num": ("numeric", "(i % 50) / 4.0", ["'NaN'", "1e100", "-1e100", "1e-100"]),
    "f8": ("double precision", "(i % 50) / 4.0", ["'NaN'", "'Infinity'", "'-Infinity'", "'-0'"]),
    "txt": ("text", "'k' || (i % 3)", ["'e' || chr(769)", "repeat('x', 100000)", "''"]),
    "bin": ("bytea", "convert_to('b' || (i % 3), 'UTF8')", ["'\\x00ff'::bytea", "''::bytea"]),
    "d": (
        "date",
        "DATE '2020-01-01' + (i % 4)",
        ["'infinity'", "'-infinity'", "'10000-01-01'", "'0044-03-15 BC'"],
    ),
    "ts": (
        "timestamp",
        "TIMESTAMP '2020-01-01' + (i % 4) * INTERVAL '1 hour'",
        ["'infinity'", "'-infinity'", "'12000-01-01 00:00:00'", "'0010-01-01 BC'"],
    ),
    "tstz": (
        "timestamptz",
        "TIMESTAMPTZ '2020-01-01 00:00:00+00' + (i % 4) * INTERVAL '1 hour'",
        ["'infinity'", "'-infinity'", "'12000-01-01 00:00:00+00'"],
    ),
    "iv": ("interval", "(i % 4) * INTERVAL '1 day'", ["'178000000 years'", "'-1 microsecond'"]),
    "b": ("boolean", "i % 2 = 0", ["true", "false"]),
    "u": (
        "uuid",
        "('00000000-0000-0000-0000-00000000000' || (i % 3))::uuid",
        ["'ffffffff-ffff-ffff-ffff-ffffffffffff'", "'00000000-0000-0000-0000-000000000000'"],
    ),
    "arr": ("integer[]", "ARRAY[i % 3]", ["'{}'", "'{NULL}'"]),
    "js": ("jsonb", "jsonb_build_object('a', i % 3)", ["'{}'", "'{\"a\": null}'"]),
}
NUMERIC = ["i2", "i8", "num", "f8"]
PERSONS, ROWS_EACH = 40, 3
TEMPLATES = [
    "SELECT {c} AS g, COUNT(*) AS n FROM t GROUP BY {c}",
    "SELECT COUNT(*) AS n FROM t WHERE {c} IS NOT NULL",
    "SELECT COUNT({c}) AS n FROM t",
    "SELECT SUM({c}) AS s, AVG({c}) AS a FROM t",
    "SELECT MEDIAN({c}) AS m FROM t",
    "SELECT k, COUNT(*) AS n FROM t WHERE {c} = {c} GROUP BY k",
]


def _tables(dsn: str) -> None:
    cols = ", ".join(f"{name} {t}" for name, (t, _, _) in COLUMNS.items())
    normal = ", ".join(f"{v}" for _, (_, v, _) in COLUMNS.items())
    depth = max(len(v[2]) for v in COLUMNS.values())
    person = []
    for j in range(depth + 1):
        cells = [
            "NULL" if j == depth else f"CAST({ex[j % len(ex)]} AS {t})"
            for _, (t, _, ex) in COLUMNS.items()
        ]
        person.append(f"(999999, {', '.join(cells)}, 'public')")
    with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
        cur.execute("CREATE SCHEMA IF NOT EXISTS parity")
        for name, extra in (("d0", False), ("d1", True)):
            cur.execute(f"DROP TABLE IF EXISTS parity.{name}")
            cur.execute(f"CREATE TABLE parity.{name} (uid bigint, {cols}, k text)")
            cur.execute(
                f"INSERT INTO parity.{name} SELECT i % {PERSONS}, {normal}, 'k' || (i % 2) "
                f"FROM generate_series(0, {PERSONS * ROWS_EACH - 1}) AS s(i)"
            )
            if extra:
                cur.execute(f"INSERT INTO parity.{name} VALUES {', '.join(person)}")


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    s = shared_server()
    _tables(s.dsn())
    create_reader(s.dsn(), "parity_reader", [("parity", "d0"), ("parity", "d1")])
    yield s
    stop_shared_server()


@pytest.fixture(scope="module")
def sessions(
    server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Session, Session]]:
    tmp = tmp_path_factory.mktemp("pg-parity")
    made = []
    for name in ("d0", "d1"):
        s = Session(
            budget=EpsilonDelta(epsilon=10**9, delta=Fraction(1, 2)), ledger=tmp / f"{name}.db"
        )
        s.add_table(
            "t",
            server.dsn("parity_reader"),
            table=f"parity.{name}",
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


def test_extreme_keys_arrive_as_postgresql_text(sessions: tuple[Session, Session]) -> None:
    """D′'s partitions include the person's 'infinity' day, held as PostgreSQL's own text."""
    from deniable.query.testing import exact_aggregates

    _, d2 = sessions
    _, _, exact = exact_aggregates(
        d2,
        "SELECT d AS day, COUNT(*) AS n FROM t GROUP BY d",
        not_private=True,
        epsilon=1,
        delta=Fraction(1, 10**6),
    )
    days = {k[0] for k in exact.keys}
    extreme = days & {"infinity", "-infinity", "10000-01-01", "0044-03-15 BC"}
    assert len(extreme) == 2  # the person keeps max_groups = 2 of their 5 days
    decoded = {k[0] for k in exact.decoded_keys(uniform=False)}
    assert dt.date(2020, 1, 1) in decoded and extreme <= decoded  # none of them decodes


def test_control_a_pre_charge_conversion_is_caught(server: PostgresServer, tmp_path: Path) -> None:
    """The planted defect of issue 20 must make this suite fail (its negative control)."""
    made = []
    for name in ("d0", "d1"):
        s = Session(
            budget=EpsilonDelta(epsilon=10**9, delta=Fraction(1, 2)), ledger=tmp_path / name
        )
        s.add_table(
            "t",
            server.dsn("parity_reader"),
            table=f"parity.{name}",
            privacy_unit="uid",
            max_groups=2,
            max_rows=2,
        )
        made.append(s)
    with planted_pre_charge_conversion():
        on_d, on_d2 = (outcome(s, "SELECT d AS g, COUNT(*) AS n FROM t GROUP BY d") for s in made)
    assert on_d[0] == "answer" and on_d2[0] == "untyped OverflowError", (on_d, on_d2)

"""The PostgreSQL engine against a real server (started here: initdb + pg_ctl, a free port).

A table is read in place through ``Session.add_table(name, "postgresql://…", table=…)`` as a
read-only role granted SELECT on that table only; the checks are what the engine promises:
the exact bounded aggregates equal a Python reference, statements run read-only with a
statement timeout and as one statement, failures never quote a row, the analyst's text never
reaches the server (its statement log is read), samples and public tables need the TEMPORARY
privilege and are refused clearly without it, tables of two engines are never joined, and the
data version follows the content.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from deniable import ROW

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import (
    PostgresServer,
    create_reader,
    load_table,
    shared_server,
    stop_shared_server,
)

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import Epsilon, EpsilonDelta  # noqa: E402
from deniable.curator.session import Session  # noqa: E402
from deniable.engines.base import TableBinding  # noqa: E402
from deniable.engines.postgres import PostgresEngine, PostgresTable  # noqa: E402
from deniable.errors import EngineError, InvalidParameter, SQLError, UnsafeQuery  # noqa: E402
from deniable.query.measures import SumMeasure, round_half_away  # noqa: E402
from deniable.query.rewrite.compile import Secrets  # noqa: E402
from deniable.query.testing import exact_aggregates  # noqa: E402

SECRET = "zz-secret-value"  # a private value that must never appear in an error message
UNITS = 300


def _events() -> pa.Table:
    """Every unit has ≤ 2 rows in one category: bounding (max_rows = 2) keeps every row."""
    uid, cat, v, note = [], [], [], []
    for u in range(UNITS):
        for j in range(1 + u % 2):
            uid.append(u)
            cat.append("abc"[u % 3])
            v.append(float((u * 7 + j) % 11))
            note.append(SECRET if u == 5 else f"n{u}")
    return pa.table(
        {
            "uid": pa.array(uid, pa.int64()),
            "cat": pa.array(cat, pa.string()),
            "v": pa.array(v, pa.float64()),
            "note": pa.array(note, pa.string()),
        }
    )


EVENTS = _events()


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """The test server holding ``shop.events`` and two roles (with and without TEMPORARY)."""
    s = shared_server()
    load_table(s.dsn(), "events", EVENTS, schema="shop")
    load_table(
        s.dsn(), "regions", pa.table({"cat": ["a", "b", "c"], "r": ["x", "y", "x"]}), schema="shop"
    )
    create_reader(s.dsn(), "reader", [("shop", "events")])
    create_reader(s.dsn(), "reader_tmp", [("shop", "events"), ("shop", "regions")], temporary=True)
    yield s
    stop_shared_server()


def _session(tmp: Path) -> Session:
    return Session(budget=EpsilonDelta(epsilon=10, delta=1e-3), ledger=tmp / "l.db")


def test_in_place_table_gives_the_exact_bounded_aggregates(
    server: PostgresServer, tmp_path: Path
) -> None:
    with _session(tmp_path) as s:
        info = s.add_table(
            "events",
            server.dsn("reader"),
            table="shop.events",
            privacy_unit="uid",
            bounds={"v": (0, 10)},
            max_rows=2,
            public_keys={"cat": ["a", "b", "c"]},
            max_groups=1,
        )
        assert [(c.name, c.sql_type) for c in info.columns] == [
            ("uid", "BIGINT"),
            ("cat", "TEXT"),
            ("v", "DOUBLE"),
            ("note", "TEXT"),
        ]
        sql = "SELECT cat, COUNT(*) AS n, SUM(v) AS total FROM events GROUP BY cat"
        plan, _, exact = exact_aggregates(
            s, sql, not_private=True, secrets=Secrets(3, 4), epsilon=1
        )
        frame = EVENTS.to_pandas()
        expected_n = frame.groupby("cat").size().to_dict()
        count_id = plan.aggregates[0].measures[0]
        got_n = dict(
            zip([k[0] for k in exact.keys], exact.measures[count_id].tolist(), strict=True)
        )
        assert got_n == expected_n
        # the SUM's measure: each row's value on the measure's fixed-point grid, centred
        m = next(x for x in map(plan.measure, plan.aggregates[1].measures) if x.kind == "sum")
        assert isinstance(m, SumMeasure)
        expected_m: dict[str, int] = {}
        for c, v in zip(frame["cat"], frame["v"], strict=True):
            on_grid = round_half_away(Fraction(v * 2.0**-m.exponent)) - m.centre
            expected_m[c] = expected_m.get(c, 0) + on_grid
        got_m = dict(zip([k[0] for k in exact.keys], exact.measures[m.id].tolist(), strict=True))
        assert got_m == expected_m
        answer = s.sql(sql, epsilon=1)
        assert list(answer.to_pandas()["cat"]) == ["a", "b", "c"]
        assert s.budget.spent == EpsilonDelta(epsilon=1, delta=0)


def test_the_analysts_text_never_reaches_the_server(server: PostgresServer, tmp_path: Path) -> None:
    admin = psycopg.connect(server.dsn(), autocommit=True)
    admin.execute("ALTER SYSTEM SET log_statement = 'all'")
    admin.execute("SELECT pg_reload_conf()")
    log = server.root / "server.log"
    try:
        start = log.stat().st_size
        with _session(tmp_path) as s:
            s.add_table(
                "events",
                server.dsn("reader"),
                table="shop.events",
                privacy_unit="uid",
                max_groups=1,
                max_rows=1,
            )
            text = "SELECT COUNT(*) AS analyst_marker_alias FROM events WHERE cat = 'a'"
            s.sql(text, epsilon=1)
        with log.open("rb") as f:
            f.seek(start)
            logged = f.read().decode(errors="replace")
    finally:
        admin.execute("ALTER SYSTEM RESET log_statement")
        admin.execute("SELECT pg_reload_conf()")
        admin.close()
    assert "BEGIN READ ONLY" in logged and "statement_timeout" in logged  # the log was read
    assert "analyst_marker_alias" not in logged
    assert text not in logged


def test_statements_are_read_only_and_single(server: PostgresServer) -> None:
    # The engine connects as a superuser here: the transaction alone must stop writes.
    engine = PostgresEngine(server.dsn())
    try:
        b = engine.bind("events", PostgresTable("events", schema="shop"), version="v1")
        with pytest.raises(EngineError, match="SQLSTATE 25006"):  # read-only transaction
            engine.run(b, "WITH d AS (DELETE FROM shop.events RETURNING 1) SELECT count(*) FROM d")
        with pytest.raises((EngineError, SQLError)):  # extended protocol: one statement only
            engine.run(b, "SELECT 1; DROP TABLE shop.events")
        rows = engine.run(b, "SELECT count(*) AS n FROM events")
        assert rows.column("n").to_pylist() == [EVENTS.num_rows]
    finally:
        engine.close()


def test_the_bounded_statement_runs_serially_unless_asked(server: PostgresServer) -> None:
    """parallel_workers sets max_parallel_workers_per_gather for the statement (default 0:
    its level-1 aggregation is nearly unique, so a parallel plan only adds work); None keeps
    the server's setting; anything else is refused before connecting."""
    ask = "SELECT current_setting('max_parallel_workers_per_gather') AS p"
    server_default = None
    for workers, want in ((0, "0"), (3, "3"), (None, server_default)):
        engine = PostgresEngine(server.dsn(), parallel_workers=workers)
        try:
            b = engine.bind("events", PostgresTable("events", schema="shop"), version="v1")
            got = engine.run(b, ask).column("p").to_pylist()[0]
            if workers is None:
                with engine.connection.cursor() as cur:
                    cur.execute("SHOW max_parallel_workers_per_gather")
                    row = cur.fetchone()
                assert row is not None
                want = row[0]
            assert got == want
        finally:
            engine.close()
    for bad in (-1, 1.5, True):
        with pytest.raises(InvalidParameter, match="parallel_workers"):
            PostgresEngine(server.dsn(), parallel_workers=bad)  # type: ignore[arg-type]


def test_statement_timeout_cancels_and_names_no_data(server: PostgresServer) -> None:
    engine = PostgresEngine(server.dsn("reader"), statement_timeout=0.2)
    try:
        b = engine.bind("events", "shop.events", version="v1")
        with pytest.raises(EngineError, match=r"statement_timeout of 0\.2 s") as info:
            engine.run(b, "SELECT pg_sleep(3) AS s")
        assert info.value.__context__ is None and info.value.__cause__ is None
        # the connection is usable after the cancellation
        assert engine.run(b, "SELECT 1 AS one").column("one").to_pylist() == [1]
    finally:
        engine.close()


def test_failures_never_quote_a_row(server: PostgresServer) -> None:
    engine = PostgresEngine(server.dsn("reader"))
    try:
        b = engine.bind("events", "shop.events", version="v1")
        with pytest.raises(EngineError) as info:  # invalid input syntax quotes the value
            engine.run(b, "SELECT sum(CAST(note AS integer)) AS s FROM events")
        assert SECRET not in str(info.value)
        assert info.value.__context__ is None and info.value.__cause__ is None
        with pytest.raises(SQLError, match=r"type-check.*operator does not exist"):
            engine.check(b, "SELECT count(*) AS n FROM events WHERE note > 5")
    finally:
        engine.close()


def test_refusals_name_the_engines_limitation(server: PostgresServer, tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        s.add_table(
            "events",
            server.dsn("reader"),
            table="shop.events",
            privacy_unit="uid",
            max_groups=1,
            max_rows=1,
        )
        with pytest.raises(UnsafeQuery, match=r"postgres.*TRY"):
            s.sql("SELECT COUNT(*) AS n FROM events WHERE v * 2 > 3", epsilon=1)
        assert s.budget.spent == EpsilonDelta(epsilon=0, delta=0)


def test_registration_errors(server: PostgresServer, tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        with pytest.raises(InvalidParameter, match="needs table="):
            s.add_table("events", server.dsn("reader"), privacy_unit=ROW)
        with pytest.raises(InvalidParameter, match=r"no table 'shop\.nope'"):
            s.add_table("nope", server.dsn("reader"), table="shop.nope", privacy_unit=ROW)
        with pytest.raises(InvalidParameter, match=r"may not read|no table"):
            s.add_table(
                "regions", server.dsn("reader"), table="shop.regions", privacy_unit=ROW
            )  # no SELECT
        with pytest.raises(InvalidParameter, match="table= names a table of a PostgreSQL"):
            s.add_table("t", pd.DataFrame({"x": [1]}), table="t", privacy_unit=ROW)
    wrong = f"postgresql://reader:hunter2@127.0.0.1:{server.port}/no_such_db"
    with pytest.raises(EngineError) as info:
        PostgresEngine(wrong)
    assert "hunter2" not in str(info.value) and "no_such_db" in str(info.value)


def test_samples_and_public_tables_need_temporary(server: PostgresServer, tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        with pytest.raises(InvalidParameter, match="TEMPORARY"):
            s.add_public_table("ev", server.dsn("reader"), table="shop.events")
        with pytest.raises(InvalidParameter, match="TEMPORARY"):
            s.add_table(
                "events",
                server.dsn("reader"),
                table="shop.events",
                privacy_unit="uid",
                sample_rate=Fraction(1, 2),
                max_groups=1,
                max_rows=1,
            )


def test_sample_keeps_whole_units_and_public_tables_join(
    server: PostgresServer, tmp_path: Path
) -> None:
    url = server.dsn("reader_tmp")
    with Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db") as s:
        s.add_table(
            "events",
            url,
            table="shop.events",
            privacy_unit="uid",
            sample_rate=Fraction(1, 2),
            public_keys={"cat": ["a", "b", "c"]},
            max_groups=1,
            max_rows=1,
        )
        s.add_public_table("regions", url, table="shop.regions", unique_key="cat")
        engine = s._engines["events"]
        assert isinstance(engine, PostgresEngine)
        binding: TableBinding = s._bindings["events"]
        kept = Counter(
            r[0]
            for r in engine.connection.execute(
                f'SELECT uid FROM pg_temp."{binding.name}"'
            ).fetchall()
        )
        full = Counter(EVENTS.column("uid").to_pylist())
        assert all(kept[u] == full[u] for u in kept)  # a unit is kept with all its rows
        # 300 units at rate 1/2: P[kept outside 90..210] < 1e-6 (binomial tail)
        assert 90 <= len(kept) <= 210
        answer = s.sql(
            "SELECT r, COUNT(*) AS n FROM events JOIN regions ON events.cat = regions.cat "
            "GROUP BY r",
            epsilon=1,
        )
        assert sorted(answer.to_pandas()["r"]) == ["x", "y"]


def test_tables_of_two_engines_are_not_joined(server: PostgresServer, tmp_path: Path) -> None:
    with _session(tmp_path) as s:
        s.add_table(
            "events",
            server.dsn("reader"),
            table="shop.events",
            privacy_unit="uid",
            max_groups=1,
            max_rows=1,
        )
        s.add_public_table("regions", pd.DataFrame({"cat": ["a", "b", "c"], "r": ["x", "y", "x"]}))
        with pytest.raises(InvalidParameter, match="different engines"):
            s.sql(
                "SELECT COUNT(*) AS n FROM events JOIN regions ON events.cat = regions.cat",
                epsilon=1,
            )


def test_data_version_follows_the_content(server: PostgresServer) -> None:
    load_table(server.dsn(), "versioned", EVENTS, schema="shop")
    engine = PostgresEngine(server.dsn())
    try:
        first = engine.bind("v", "shop.versioned").version
        assert engine.bind("v", "shop.versioned").version == first
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute("UPDATE shop.versioned SET v = v + 1 WHERE uid = 7")
        assert engine.bind("v", "shop.versioned").version != first
        assert engine.bind("v", "shop.versioned", version="2024-06").version == "2024-06"
    finally:
        engine.close()


def test_frames_keep_nan_null_and_bytes(server: PostgresServer) -> None:
    frame = pa.table(
        {
            "x": pa.array([float("nan"), None, -0.0, 1e300], pa.float64()),
            "t": pa.array(["cafe\u0301", "café", None, ""], pa.string()),
        }
    )
    engine = PostgresEngine(server.dsn())
    try:
        b = engine.bind("f", frame)
        out = engine.run(
            b,
            "SELECT count(*) FILTER (WHERE x = 'NaN'::float8) AS nan, "
            "count(*) FILTER (WHERE x IS NULL) AS null, "
            "count(DISTINCT t) AS texts FROM " + f'"{b.name}"',
        )
        assert out.to_pylist() == [{"nan": 1, "null": 1, "texts": 3}]
    finally:
        engine.close()


def test_temporary_directory_is_removed_on_stop() -> None:
    s = PostgresServer()
    root = s.root
    assert (root / "data" / "PG_VERSION").exists()
    s.stop()
    assert not root.exists()


def test_the_service_answers_a_postgresql_dataset_from_its_config(
    server: PostgresServer, tmp_path: Path
) -> None:
    """A config dataset with ``engine = "postgresql"`` is queried in place by the service."""
    from deniable.ledger.analysts import Principal
    from deniable.server.config import load_config
    from deniable.server.service import Service

    config = tmp_path / "service.toml"
    config.write_text(
        'ledger = "ledger.db"\n'
        "[datasets.shop]\n"
        'engine = "postgresql"\n'
        f'source = "{server.dsn("reader")}"\n'
        'table = "shop.events"\n'
        'privacy_unit = "uid"\n'
        "bounds = { v = [0, 10] }\n"
        "max_groups = 1\n"
        "max_rows = 2\n"
        'public_keys = { cat = ["a", "b", "c"] }\n'
        "budget = { epsilon = 2 }\n"
    )
    with Service(load_config(config)) as service:
        meta = service.metadata("shop")
        assert meta is not None
        answer = service.query(
            Principal(name="ann", role="analyst"),
            "shop",
            "SELECT cat, COUNT(*) AS n FROM events GROUP BY cat",
            epsilon=1,
        )
        assert sorted(answer["cat"].tolist()) == ["a", "b", "c"]
        assert service.budget("shop").spent == Epsilon(epsilon=1)

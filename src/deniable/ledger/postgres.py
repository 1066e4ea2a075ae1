r"""The PostgreSQL backend of the ledger: one budget shared by several service hosts.

``Ledger("postgresql://user@host:port/db", anchor=...)`` keeps every guarantee of the SQLite
ledger (:mod:`deniable.ledger.facade`), with these mechanisms:

* **Serialisable admission across hosts.** Every write transaction takes one
  transaction-scoped advisory lock (``pg_advisory_xact_lock``) before it reads anything, so
  writers run one at a time on the whole database, whichever host they run on; each then
  reads, at ``READ COMMITTED``, everything committed before it. No serialisation failure can
  occur (there is nothing to retry), and waiting longer than the ledger's ``timeout`` fails
  with :class:`~deniable.errors.LedgerError` (``lock_timeout``). Reads use one
  ``REPEATABLE READ`` snapshot.
* **Durability.** A charge returns after ``COMMIT``, which PostgreSQL makes durable in its
  write-ahead log. A lost connection (a restarted server) fails the call closed — no answer
  without a committed charge — and the next call reconnects.
* **Append-only, two walls.** The service's role should not own the tables:
  :func:`grant_service_role` gives it ``SELECT`` and ``INSERT`` and only the column
  updates the ledger makes (a charge's status, a cap, an allowance, an accountant, a
  token's revocation), never ``DELETE`` or ``TRUNCATE``. Triggers refuse deletes, truncation
  and every other update even to the owner.
* **The anchor stays outside the database**: a file on the host (``anchor=``; by default
  ``$XDG_STATE_HOME/deniable/anchors/<hash of the URL>.anchor``), as for SQLite. Several
  hosts may each keep their own anchor; a database rolled back behind any of them is found.
  A host joining a ledger that already has a history starts from a copy of a current
  anchor (the curator's, or another host's): a ledger with entries and no anchor reads as
  a deleted anchor, by design, and is refused until a curator acknowledges it.
* **Backups** are SQLite ledger files (:meth:`PostgresStore.copy_to_sqlite`): one
  ``REPEATABLE READ`` snapshot of every row, verified in full by
  :meth:`deniable.ledger.Ledger.backup` before it is kept.

Connection failures are reported with the server's address and SQLSTATE only, never the
URL (it may hold a password).
"""

from __future__ import annotations

import functools
import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import sql as pgsql

from deniable.errors import InvalidParameter, LedgerError
from deniable.ledger.store import Cursor, Store, Tx

ADVISORY_KEY = 0x64656E6961626C65  # "deniable": the one lock every writer takes
"""The advisory lock key that serialises the ledger's writers (per database)."""

TABLES = (
    "meta",
    "chain",
    "datasets",
    "allowances",
    "curator_events",
    "charges",
    "answers",
    "analysts",
    "accountants",
    "sample_releases",
    "checkpoints",
)
"""The ledger's tables, in an order that respects their foreign keys."""

_LOSS = """
    loss_type TEXT NOT NULL,
    epsilon TEXT,
    delta TEXT,
    rho TEXT,
    CHECK (
        (loss_type = 'epsilon' AND epsilon IS NOT NULL AND delta IS NULL AND rho IS NULL)
        OR (loss_type = 'epsilon_delta' AND epsilon IS NOT NULL AND delta IS NOT NULL
            AND rho IS NULL)
        OR (loss_type = 'rho' AND epsilon IS NULL AND delta IS NULL AND rho IS NOT NULL))"""

_FUNCTION = """CREATE OR REPLACE FUNCTION deniable_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'ledger tables are append-only'; END $$"""


def _walls(table: str, changed: str | None) -> tuple[str, ...]:
    """Triggers refusing deletes, truncation and updates (those where ``changed`` holds)."""
    run = "EXECUTE FUNCTION deniable_append_only()"
    when = "" if changed is None else f" WHEN ({changed})"
    return (
        f"CREATE TRIGGER {table}_append_only_delete BEFORE DELETE ON {table} FOR EACH ROW {run}",
        (
            f"CREATE TRIGGER {table}_append_only_truncate BEFORE TRUNCATE ON {table} "
            f"FOR EACH STATEMENT {run}"
        ),
        (
            f"CREATE TRIGGER {table}_append_only_update BEFORE UPDATE ON {table} FOR EACH ROW"
            f"{when} {run}"
        ),
    )


def _distinct(*columns: str) -> str:
    return " OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in columns)


_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE chain (
        seq BIGINT PRIMARY KEY,
        op TEXT NOT NULL,
        payload TEXT NOT NULL,
        hash TEXT NOT NULL
    )""",
    f"""CREATE TABLE datasets (
        name TEXT PRIMARY KEY,{_LOSS},
        registered_at TEXT NOT NULL
    )""",
    f"""CREATE TABLE allowances (
        dataset TEXT NOT NULL REFERENCES datasets(name),
        analyst TEXT NOT NULL,{_LOSS},
        set_at TEXT NOT NULL,
        PRIMARY KEY (dataset, analyst)
    )""",
    f"""CREATE TABLE curator_events (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        dataset TEXT NOT NULL REFERENCES datasets(name),
        action TEXT NOT NULL CHECK (action IN ('register', 'change_cap', 'set_allowance')),
        analyst TEXT,{_LOSS},
        previous TEXT,
        time TEXT NOT NULL
    )""",
    f"""CREATE TABLE charges (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        dataset TEXT NOT NULL,
        analyst TEXT NOT NULL,
        query_key TEXT NOT NULL,
        query_text TEXT NOT NULL,{_LOSS},
        time TEXT NOT NULL,
        details TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('charged', 'answered')),
        idempotency_key TEXT
    )""",
    # The charges after a checkpoint's last id, of a dataset or of one analyst: one range.
    "CREATE INDEX charges_by_analyst ON charges (dataset, analyst, id)",
    "CREATE INDEX charges_by_dataset ON charges (dataset, id)",
    """CREATE UNIQUE INDEX charges_idempotency ON charges (dataset, analyst, idempotency_key)
    WHERE idempotency_key IS NOT NULL""",
    """CREATE TABLE answers (
        charge_id BIGINT PRIMARY KEY REFERENCES charges(id),
        dataset TEXT NOT NULL,
        query_key TEXT NOT NULL,
        payload BYTEA NOT NULL,
        time TEXT NOT NULL
    )""",
    "CREATE INDEX answers_by_key ON answers (dataset, query_key, charge_id)",
    """CREATE TABLE analysts (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        name TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('curator', 'analyst')),
        digest TEXT NOT NULL UNIQUE,
        created TEXT NOT NULL,
        revoked_at TEXT
    )""",
    "CREATE UNIQUE INDEX analysts_active ON analysts (name) WHERE revoked_at IS NULL",
    """CREATE TABLE accountants (
        dataset TEXT PRIMARY KEY REFERENCES datasets(name),
        spec TEXT NOT NULL,
        set_at TEXT NOT NULL
    )""",
    """CREATE TABLE sample_releases (
        dataset TEXT NOT NULL,
        sample TEXT NOT NULL,
        charge_id BIGINT NOT NULL UNIQUE REFERENCES charges(id),
        rate TEXT NOT NULL,
        time TEXT NOT NULL,
        PRIMARY KEY (dataset, sample)
    )""",
    """CREATE TABLE checkpoints (
        seq BIGINT PRIMARY KEY,
        head TEXT NOT NULL,
        body TEXT NOT NULL,
        hash TEXT NOT NULL
    )""",
    _FUNCTION,
    *_walls("meta", None),
    *_walls("chain", None),
    *_walls("curator_events", None),
    *_walls("answers", None),
    *_walls("sample_releases", None),
    *_walls("checkpoints", None),
    *_walls("datasets", _distinct("name", "registered_at")),
    *_walls("allowances", _distinct("dataset", "analyst")),
    *_walls("accountants", _distinct("dataset")),
    *_walls(
        "analysts",
        _distinct("id", "name", "role", "digest", "created")
        + " OR OLD.revoked_at IS NOT NULL OR NEW.revoked_at IS NULL",
    ),
    *_walls(
        "charges",
        _distinct(
            "id",
            "dataset",
            "analyst",
            "query_key",
            "query_text",
            "loss_type",
            "epsilon",
            "delta",
            "rho",
            "time",
            "details",
            "idempotency_key",
        )
        + " OR NOT (NEW.status = OLD.status OR (OLD.status = 'charged' AND NEW.status = "
        "'answered'))",
    ),
)

# The only updates the ledger makes, by table: the service's role gets exactly these columns.
_UPDATABLE: dict[str, tuple[str, ...]] = {
    "datasets": ("loss_type", "epsilon", "delta", "rho"),
    "allowances": ("loss_type", "epsilon", "delta", "rho", "set_at"),
    "charges": ("status",),
    "analysts": ("revoked_at",),
    "accountants": ("spec", "set_at"),
}


@functools.lru_cache(maxsize=512)
def _placeholders(statement: str) -> str:
    """The shared SQL's ``?`` placeholders as psycopg's ``%s`` (the SQL has no ``%``)."""
    return statement.replace("?", "%s")


def describe(url: str) -> str:
    """``postgresql://user@host:port/db`` of a URL: never its password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except Exception:
        return "postgresql://(a malformed URL)"
    user = str(info.get("user") or "")
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    db = info.get("dbname") or ""
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


def _state(error: BaseException) -> str:
    state = getattr(error, "sqlstate", None)
    return f"SQLSTATE {state}" if state else type(error).__name__


_TABLES = frozenset(
    ("meta", "chain", "datasets", "allowances", "curator_events", "charges", "answers",
     "analysts", "accountants", "sample_releases", "checkpoints")
)  # fmt: skip
"""Every table of a PostgreSQL ledger (all made with the schema; there are no extensions)."""


class PostgresTx(Tx):
    """A transaction on a psycopg connection (``?`` placeholders become ``%s``)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement."""
        if not params:
            return self.conn.execute(sql)
        return self.conn.execute(_placeholders(sql), tuple(params))

    def insert(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one ``INSERT ... RETURNING id``."""
        row = self.conn.execute(_placeholders(sql) + " RETURNING id", tuple(params)).fetchone()
        if row is None:  # pragma: no cover - RETURNING always returns the row
            raise LedgerError("the ledger did not return the new row's id")
        return int(row[0])

    def tables(self) -> set[str]:
        """The tables of the connection's current schema."""
        rows = self.conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        ).fetchall()
        return {str(r[0]) for r in rows}

    def has_table(self, name: str) -> bool:
        """Whether the schema has table ``name``: a PostgreSQL ledger is created with all.

        No catalogue query on the charge path (a dropped table makes the statements that
        need it fail, and the ledger with them: it fails closed).
        """
        return name in _TABLES

    def json_text(self, column: str, *keys: str) -> str:
        """``column::jsonb #>> '{k1,k2}'``."""
        return f"({column}::jsonb #>> '{{{','.join(keys)}}}')"

    def ensure_extensions(self) -> None:
        """Nothing to do: a PostgreSQL ledger is created with every table."""

    def create_schema(self) -> None:
        """Create the tables, indexes, the trigger function and the triggers."""
        for statement in _SCHEMA:
            self.conn.execute(statement)


def default_anchor(location: str) -> str:
    """The default anchor file of a PostgreSQL ledger on this host.

    ``$XDG_STATE_HOME/deniable/anchors/<sha256 of the URL without password>.anchor``
    (``~/.local/state`` when ``XDG_STATE_HOME`` is not set); the directory is made
    (mode 0700) if missing.
    """
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    directory = os.path.join(state, "deniable", "anchors")
    with suppress(OSError):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    digest = hashlib.sha256(location.encode("utf-8")).hexdigest()[:32]
    return os.path.join(directory, f"{digest}.anchor")


class PostgresStore(Store):
    """A ledger in a PostgreSQL database (its current schema), shared by many hosts.

    Args:
        url: ``postgresql://user@host:port/db`` (put a password in ``~/.pgpass`` or
            ``PGPASSWORD``, not in the URL).
        timeout: seconds to wait to connect and for another writer's lock.

    Raises:
        LedgerError: the server cannot be reached (address and SQLSTATE only).
    """

    driver_errors = (psycopg.Error,)

    def __init__(self, url: str, *, timeout: float, read_only: bool = False) -> None:
        self._url = url
        self.read_only = read_only
        self.location = describe(url)
        self.default_anchor = default_anchor(self.location)
        self._timeout = timeout
        self._lock = threading.RLock()
        self._closed = False
        self._conn: psycopg.Connection[Any] | None = None
        self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        failure: str | None = None
        try:
            conn = psycopg.connect(
                self._url,
                autocommit=True,
                connect_timeout=max(1, round(self._timeout)),
                application_name="deniable-ledger",
            )
        except psycopg.Error as e:
            failure = _state(e)
        except Exception as e:  # a malformed URL
            failure = type(e).__name__
        if failure is not None:  # raised outside the handler: the URL may hold a password
            raise LedgerError(f"cannot connect to the ledger at {self.location} ({failure})")
        self._conn = conn
        return conn

    @property
    def connection(self) -> psycopg.Connection[Any] | None:
        """The psycopg connection, or None when closed."""
        return self._conn

    def configure(self) -> None:
        """Nothing per connection: PostgreSQL's commits are durable by default."""

    def _open(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise LedgerError("the ledger is closed")
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                with suppress(psycopg.Error):
                    conn.close()
            conn = self._connect()  # e.g. after the server restarted
        return conn

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Tx]:
        """Run the body in one transaction; psycopg errors become LedgerError with the cause.

        A write transaction takes the ledger's advisory lock first (waiting at most the
        ledger's timeout), which serialises every writer of the database.
        """
        if write and self.read_only:
            raise LedgerError("the ledger was opened read-only: nothing can be written")
        with self._lock:
            conn = self._open()
            try:
                if write:
                    # One round trip (the simple protocol runs the three in order).
                    timeout_ms = max(1, round(self._timeout * 1000))
                    conn.execute(
                        "BEGIN ISOLATION LEVEL READ COMMITTED; "
                        f"SET LOCAL lock_timeout = {timeout_ms}; "
                        f"SELECT pg_advisory_xact_lock({int(ADVISORY_KEY)})"
                    )
                else:
                    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            except psycopg.Error as e:
                self._abandon(conn)
                raise LedgerError(f"cannot start a ledger transaction ({_state(e)})") from e
            try:
                yield PostgresTx(conn)
            except BaseException as e:
                self._abandon(conn)
                if isinstance(e, psycopg.Error):
                    raise LedgerError(f"ledger operation failed ({_state(e)})") from e
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.Error as e:
                self._abandon(conn)
                raise LedgerError(
                    f"cannot commit to the ledger ({_state(e)}); the change may not have been "
                    "recorded, and nothing may be released for it"
                ) from e

    @staticmethod
    def _abandon(conn: psycopg.Connection[Any]) -> None:
        """Roll back what is open (the original error matters more than this one)."""
        if not conn.closed and not conn.broken:
            with suppress(psycopg.Error):
                conn.execute("ROLLBACK")

    def copy_to_sqlite(self, dest: str) -> None:
        """Copy every row, from one ``REPEATABLE READ`` snapshot, into a new SQLite ledger."""
        from deniable.ledger.sqlite import create_sqlite_schema

        copy = sqlite3.connect(dest, isolation_level=None)
        try:
            create_sqlite_schema(copy)
            copy.execute("BEGIN")
            with self.transaction(write=False) as tx:
                for table in TABLES:
                    cursor = tx.execute(f"SELECT * FROM {table}")
                    rows = cursor.fetchall()
                    if not rows:
                        continue
                    marks = ", ".join("?" for _ in rows[0])
                    copy.executemany(
                        f"INSERT INTO {table} VALUES ({marks})",
                        [tuple(r) for r in rows],
                    )
            copy.execute("COMMIT")
        except sqlite3.Error as e:
            raise LedgerError("cannot write the SQLite copy of the ledger") from e
        finally:
            copy.close()

    def close(self) -> None:
        """Close the connection; committed charges are already durable."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                with suppress(psycopg.Error):
                    self._conn.close()
                self._conn = None


def grant_service_role(url: str, role: str) -> None:
    """Give ``role`` exactly what a ledger service needs on the ledger at ``url``.

    Run it as the tables' owner (an administrator), after the ledger was created (opened
    once): ``SELECT`` and ``INSERT`` on every table, ``UPDATE`` of only the columns the
    ledger updates (a charge's status, a cap, an allowance, an accountant, a revocation),
    the identity sequences, and never ``DELETE``, ``TRUNCATE`` or any other ``UPDATE``: a
    service that is compromised cannot rewrite what it recorded. The triggers stay as a
    second wall against the owner.

    Raises:
        InvalidParameter: ``role`` is empty.
        LedgerError: the server refused (e.g. the ledger's tables do not exist yet).
    """
    if not isinstance(role, str) or not role:
        raise InvalidParameter("role must be a non-empty role name")
    store = PostgresStore(url, timeout=30.0)
    try:
        conn = store._open()
        ident = pgsql.Identifier(role)
        try:
            with conn.transaction():
                for table in TABLES:
                    name = pgsql.Identifier(table)
                    conn.execute(pgsql.SQL("REVOKE ALL ON {} FROM {}").format(name, ident))
                    conn.execute(pgsql.SQL("GRANT SELECT, INSERT ON {} TO {}").format(name, ident))
                for table, columns in _UPDATABLE.items():
                    conn.execute(
                        pgsql.SQL("GRANT UPDATE ({}) ON {} TO {}").format(
                            pgsql.SQL(", ").join(pgsql.Identifier(c) for c in columns),
                            pgsql.Identifier(table),
                            ident,
                        )
                    )
                row = conn.execute("SELECT current_schema()").fetchone()
                schema = pgsql.Identifier(str(row[0] if row else "public"))
                conn.execute(
                    pgsql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
                        schema, ident
                    )
                )
        except psycopg.Error as e:
            raise LedgerError(f"cannot grant the ledger's privileges ({_state(e)})") from e
    finally:
        store.close()

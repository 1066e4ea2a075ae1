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
* **Durability, with the flush outside the lock.** A write transaction commits with
  ``synchronous_commit = off``: its changes become visible and its advisory lock is released
  at once, without waiting for the disk. In the same round trip a small transaction that
  writes one WAL record commits with the session's own ``synchronous_commit`` (``on`` by
  default), which flushes the log up to *its* commit record, after the ledger's
  (:data:`COMMIT_AND_FLUSH`); only then does the call return, and the flushed WAL position
  is checked to be past the ledger's commit. So a charge is durable before its answer may
  leave, as before, but the next writer — on any host — does not wait for this one's
  ``fsync``, and PostgreSQL flushes the commits of concurrent writers together (group
  commit). A crash can lose only commits that no flush covered yet: a suffix of the commit
  order (the log is written in order), none of which returned. Admission stays exact: each
  writer reads, under the lock, every commit before it, durable or not; the commits that
  survive a crash are a prefix of that order, each admitted against exactly the charges
  before it, so they never exceed a cap. (A charge refused because of a commit that a crash
  then lost was refused conservatively; nothing was released for either.) A lost
  connection (a restarted server) fails the call closed — no answer without a durable
  charge — and the next call reconnects.
* **Group commit inside a process** (:mod:`deniable.ledger.group`): the concurrent
  charges of one process (a service's thread pool) are admitted in one write transaction,
  in order, each against every commit before it and the members before it — one advisory
  lock, one flush and one anchor write for the batch, one chain entry per charge. A
  refused member writes nothing; a failed transaction fails every member.
* **Few round trips under the lock** (:class:`PostgresTx`): a writer holds the advisory lock
  from its first statement to its ``COMMIT``; what it spends there is mostly round trips.
  A batch of charges takes three: the opening statements with the chain's head and the
  anchor's entries (:func:`deniable.ledger.chain.start`); everything admission reads for
  every member, before the first insert (:meth:`PostgresTx.prefetch`,
  :class:`deniable.ledger.budget.ChargeBatch`), with a block of charge ids from the
  identity sequence (:meth:`PostgresTx.charge_ids_query`); and the inserts and chain
  entries, which need no answer, with the ``COMMIT`` and the flush. A repeated query is
  answered from the rows already read.
* **Append-only, two walls.** The service's role should not own the tables:
  :func:`grant_service_role` gives it ``SELECT`` and ``INSERT`` and only the column
  updates the ledger makes (a charge's status, a cap, an allowance, an accountant, a
  token's revocation), never ``DELETE`` or ``TRUNCATE``. Triggers refuse deletes, truncation
  and every other update even to the owner.
* **The anchor stays outside the database**: a file on the host (``anchor=``; by default
  ``$XDG_STATE_HOME/deniable/anchors/<hash of the URL>.anchor``), as for SQLite. Several
  hosts may each keep their own anchor; a database rolled back behind any of them is found.
  The host's anchor lock is held only to write the anchor, after the flush, and one write
  covers every write of the host durable by then (:func:`deniable.ledger.chain.settle`):
  still no charge returns before an anchor covers it, and an anchor never names an entry
  that is not durable (a crash of the server cannot leave the database behind its anchor).
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
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg import sql as pgsql

from deniable.errors import InvalidParameter, LedgerError
from deniable.ledger import chain
from deniable.ledger.budget import INSERT_CHARGE_WITH_ID
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


FLUSH = "BEGIN; SELECT pg_logical_emit_message(true, 'deniable', 'flush'); COMMIT"
"""A transaction whose commit flushes the write-ahead log up to itself (see below)."""

COMMIT_AND_FLUSH = (
    f"COMMIT; SELECT pg_current_wal_insert_lsn()::text; {FLUSH}; "
    "SELECT pg_current_wal_flush_lsn()::text, current_setting('synchronous_commit')"
)
"""What ends a write transaction, in one round trip (the simple protocol runs them in order).

The write transaction commits with ``synchronous_commit = off``: it becomes visible and
its advisory lock is released at once, without waiting for its write-ahead log to reach
disk. The small transaction after it writes one WAL record (a transactional logical
message, which needs no table and no privilege) and commits with the session's own
``synchronous_commit`` (the server's setting, ``on`` by default), so its commit waits
until the log is flushed up to its own commit record — which lies *after* the ledger's
commit record, so that is flushed too. Concurrent flushes of several sessions are done by
one ``fsync`` (PostgreSQL's group commit). The two positions read around it let
:meth:`PostgresStore.transaction` check it: flushed position ≥ insert position right after
the ledger's commit. A transaction that holds only a transaction id and writes nothing
would not do: PostgreSQL commits it without flushing.
"""


def _lsn(text: str) -> int:
    """A WAL position ``'hi/lo'`` (hex) as an integer."""
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def _flushed(cursor: psycopg.Cursor[Any]) -> tuple[int, int, str]:
    """What :data:`COMMIT_AND_FLUSH` returned.

    Returns:
        The WAL insert position right after the commit, the flushed position after the
        flushing transaction, and the session's ``synchronous_commit``.
    """
    rows: list[Any] = []
    while True:
        result = cursor.pgresult  # (not ``description``: it builds column objects)
        if result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK:
            rows.append(cursor.fetchone())
        if not cursor.nextset():
            break
    rows = rows[-3:]  # after those of statements sent with the commit
    if len(rows) != 3 or any(r is None for r in rows):  # pragma: no cover - fixed statements
        raise LedgerError("the ledger's server did not confirm the commit")
    committed, flushed, level = str(rows[0][0]), str(rows[2][0]), str(rows[2][1])
    return _lsn(committed), _lsn(flushed), level


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


_WRITES = re.compile(r"\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", re.IGNORECASE)
_KEPT_ROWS = 64
"""The largest result a transaction keeps to answer the same statement again."""


class _Rows:
    """The rows of a statement this transaction already ran (a cursor over a list)."""

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows
        self._at = 0

    def fetchone(self) -> Any:
        if self._at >= len(self._rows):
            return None
        self._at += 1
        return self._rows[self._at - 1]

    def fetchall(self) -> list[Any]:
        rest, self._at = self._rows[self._at :], len(self._rows)
        return rest

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


PREPARED = (chain.START, chain.APPEND, INSERT_CHARGE_WITH_ID)
"""Statements a write sends together with others: prepared once per connection, then run
with ``EXECUTE`` (the simple protocol, which batches statements, has no parameters)."""


def _numbered(sql: str) -> str:
    """``?`` placeholders as ``$1``, ``$2``, … (for ``PREPARE``)."""
    parts = sql.split("?")
    return "".join(p + (f"${k + 1}" if k < len(parts) - 1 else "") for k, p in enumerate(parts))


class Prepared:
    """The statements of :data:`PREPARED` prepared on one connection, by name."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.names: dict[str, str] = {}
        self.count = 0
        self.literal = psycopg.ClientCursor(conn)  # quotes parameters for EXECUTE


class PostgresTx(Tx):
    """A transaction on a psycopg connection (``?`` placeholders become ``%s``).

    It saves round trips, which is what a writer spends most of its time on while it holds
    the ledger's advisory lock (every other writer of every host waits meanwhile):

    * the statements that open the transaction (``BEGIN``, settings, the advisory lock) are
      sent with its first statement (the simple protocol runs several statements in order
      and stops at the first error; a statement of :data:`PREPARED` goes as ``EXECUTE``);
    * :meth:`defer` keeps a statement whose result nobody reads (a chain entry) and sends it
      with the next statement or the ``COMMIT``;
    * a ``SELECT`` run twice in one transaction is answered from the first run's rows
      (:meth:`remember` stores rows read by a combined statement), unless the transaction
      wrote to a table the statement names in between. This is exact: a write transaction
      holds the advisory lock, so no other writer commits during it, and a read
      transaction reads one ``REPEATABLE READ`` snapshot.
    """

    def __init__(
        self, conn: psycopg.Connection[Any], opening: str = "", prepared: Prepared | None = None
    ) -> None:
        self.conn = conn
        self.sent = not opening  # whether the transaction was opened on the server
        self._pending: list[str] = [opening] if opening else []
        self._known: dict[tuple[str, tuple[object, ...]], list[Any]] = {}
        self._prepared = prepared
        self._preparing: dict[str, str] = {}  # prepared once the statements carrying them ran

    def take_pending(self) -> list[str]:
        """The statements not sent yet (they go first in the next round trip)."""
        pending, self._pending = self._pending, []
        self.sent = True
        return pending

    def confirm(self) -> None:
        """The statements sent so far ran: what they prepared exists on the connection."""
        if self._prepared is not None and self._preparing:
            self._prepared.names.update(self._preparing)
            self._preparing = {}

    def _as_execute(self, sql: str, params: tuple[object, ...]) -> list[str] | None:
        """``[PREPARE …,] EXECUTE …`` for a statement of :data:`PREPARED`, else None."""
        prepared = self._prepared
        if prepared is None or sql not in PREPARED:
            return None
        out = []
        name = prepared.names.get(sql) or self._preparing.get(sql)
        if name is None:  # a fresh name each attempt: a failed batch may or may not have run it
            prepared.count += 1
            name = f"deniable_{PREPARED.index(sql)}_{prepared.count}"
            out.append(f"PREPARE {name} AS {_numbered(sql)}")
            self._preparing[sql] = name
        if all(type(v) is int for v in params):  # integers need no quoting (START's)
            args = ", ".join(str(v) for v in params)
        else:
            args = prepared.literal.mogrify(", ".join("%s" for _ in params), params)
        out.append(f"EXECUTE {name}({args})")
        return out

    def _forget(self, sql: str) -> None:
        if not self._known:
            return
        written = _WRITES.match(sql)
        if written is None:
            self._known.clear()
            return
        table = re.compile(rf"\b{re.escape(written.group(1))}\b", re.IGNORECASE)
        for key in [k for k in self._known if table.search(k[0])]:
            del self._known[key]

    def _run(self, sql: str, params: tuple[object, ...]) -> psycopg.Cursor[Any]:
        if not self._pending:
            if params:
                return self.conn.execute(_placeholders(sql), params)
            return self.conn.execute(sql)
        batched = [sql] if not params else self._as_execute(sql, params)
        if batched is None:  # the pending statements go alone, then this one
            self.conn.execute("; ".join(self.take_pending()))
            self.confirm()
            return self.conn.execute(_placeholders(sql), params)
        cursor = self.conn.execute("; ".join([*self.take_pending(), *batched]))
        self.confirm()
        while cursor.nextset():  # to the last statement's result
            pass
        return cursor

    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement (or answer a repeated ``SELECT`` from its rows)."""
        args = tuple(params)
        if sql.lstrip()[:6].upper() != "SELECT":
            self._forget(sql)
            return self._run(sql, args)
        key = (sql, args)
        if key in self._known:
            return _Rows(self._known[key])
        rows = self._run(sql, args).fetchall()
        if len(rows) <= _KEPT_ROWS:
            self._known[key] = rows
        return _Rows(rows)

    def remember(self, sql: str, params: Sequence[object], rows: list[Any]) -> None:
        """Answer ``sql`` with ``params`` from ``rows`` (read by a combined statement)."""
        self._known[(sql, tuple(params))] = rows

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        """Send ``sql`` (a write whose result is not read) with the next statement."""
        self._forget(sql)
        args = tuple(params)
        batched = self._as_execute(sql, args)
        if batched is None:
            literal = psycopg.ClientCursor(self.conn)
            batched = [literal.mogrify(_placeholders(sql), args) if args else sql]
        self._pending.extend(batched)

    def prefetch(self, statements: Sequence[tuple[str, Sequence[object]]]) -> list[list[Any]]:
        """Run the ``SELECT`` s in one round trip (with what is pending); keep their rows."""
        if not statements:
            return []
        literal = self._prepared.literal if self._prepared is not None else None
        if literal is None:
            literal = psycopg.ClientCursor(self.conn)
        texts = [
            literal.mogrify(_placeholders(sql), tuple(params)) if params else sql
            for sql, params in statements
        ]
        cursor = self.conn.execute("; ".join([*self.take_pending(), *texts]))
        self.confirm()
        results: list[list[Any]] = []
        while True:
            result = cursor.pgresult
            if result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK:
                results.append(cursor.fetchall())
            if not cursor.nextset():
                break
        results = results[-len(statements) :]  # after those of the pending statements
        if len(results) != len(statements):  # pragma: no cover - every statement is a SELECT
            raise LedgerError("the ledger's server did not answer every read")
        for (sql, params), rows in zip(statements, results, strict=True):
            if len(rows) <= _KEPT_ROWS:
                self._known[(sql, tuple(params))] = rows
        return results

    def charge_ids_query(self, count: int) -> tuple[str, tuple[object, ...]] | None:
        """``count`` values of the charges' identity sequence (taken under the lock)."""
        return (
            "SELECT nextval(pg_get_serial_sequence('charges', 'id')) FROM generate_series(1, ?)",
            (int(count),),
        )

    def insert(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one ``INSERT ... RETURNING id``."""
        self._forget(sql)
        row = self._run(sql + " RETURNING id", tuple(params)).fetchone()
        if row is None:  # pragma: no cover - RETURNING always returns the row
            raise LedgerError("the ledger did not return the new row's id")
        return int(row[0])

    def tables(self) -> set[str]:
        """The tables (and views) of the connection's current schema.

        Read from the catalogue (``pg_class``), which costs the server a fraction of
        ``information_schema.tables`` (that view checks privileges row by row) on every open.
        """
        rows = self._run(
            "SELECT c.relname FROM pg_catalog.pg_class c "
            "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'f')",
            (),
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
            self.execute(statement)


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
    serialises_writers = True

    def __init__(self, url: str, *, timeout: float, read_only: bool = False) -> None:
        self._url = url
        self.read_only = read_only
        self.location = describe(url)
        self.default_anchor = default_anchor(self.location)
        self._timeout = timeout
        self._lock = threading.RLock()
        self._closed = False
        self._conn: psycopg.Connection[Any] | None = None
        self._prepared: Prepared | None = None
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
        ledger's timeout), which serialises every writer of the database, and returns only
        once its commit is durable: it commits without waiting for the disk (the lock is
        released then) and a flushing transaction in the same round trip makes it durable
        (:data:`COMMIT_AND_FLUSH`). Its statements are sent with as few round trips as
        :class:`PostgresTx` can manage.

        Raises:
            LedgerError: the lock was not obtained in time, a statement failed, or the commit
                could not be made or confirmed durable (then nothing may be released: the
                change may or may not have been recorded).
        """
        if write and self.read_only:
            raise LedgerError("the ledger was opened read-only: nothing can be written")
        with self._lock:
            conn = self._open()
            if write:
                timeout_ms = max(1, round(self._timeout * 1000))
                opening = (
                    "BEGIN ISOLATION LEVEL READ COMMITTED; "
                    f"SET LOCAL lock_timeout = {timeout_ms}; "
                    "SET LOCAL synchronous_commit = off; "
                    f"SELECT pg_advisory_xact_lock({int(ADVISORY_KEY)})"
                )
            else:
                opening = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
            if self._prepared is None or self._prepared.conn is not conn:
                self._prepared = Prepared(conn)  # a new connection has none
            tx = PostgresTx(conn, opening, self._prepared)  # sent with the first statement
            try:
                yield tx
            except BaseException as e:
                if tx.sent:
                    self._abandon(conn)
                if isinstance(e, psycopg.Error):
                    raise LedgerError(f"ledger operation failed ({_state(e)})") from e
                raise
            if not write:
                if tx.sent:
                    try:
                        conn.execute("; ".join([*tx.take_pending(), "COMMIT"]))
                        tx.confirm()
                    except psycopg.Error as e:
                        self._abandon(conn)
                        raise LedgerError(f"cannot end a ledger read ({_state(e)})") from e
                return
            try:
                # One round trip: what is still pending, the commit (asynchronous: the lock
                # goes at once), the insert position after it, the flushing transaction, the
                # flushed position.
                cursor = conn.execute("; ".join([*tx.take_pending(), COMMIT_AND_FLUSH]))
                tx.confirm()
                committed_at, flushed_at, level = _flushed(cursor)
            except psycopg.Error as e:
                self._abandon(conn)
                raise LedgerError(
                    f"cannot commit to the ledger or make the commit durable ({_state(e)}); "
                    "the change may or may not have been recorded, and nothing may be "
                    "released for it"
                ) from e
            if level != "off" and flushed_at < committed_at:  # pragma: no cover
                raise LedgerError(
                    "the ledger's server did not flush a commit to its write-ahead log "
                    f"(flushed to {flushed_at:X}, commit at {committed_at:X}); nothing may be "
                    "released for it"
                )

    def _abandon(self, conn: psycopg.Connection[Any]) -> None:
        """Roll back what is open (the original error matters more than this one).

        psycopg answers a ``ROLLBACK`` with ``DEALLOCATE ALL`` (it cannot tell which of its
        prepared statements survived), which drops :data:`PREPARED`'s too: they are
        prepared again, under new names, when next needed.
        """
        if not conn.closed and not conn.broken:
            with suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        if self._prepared is not None:
            self._prepared.names.clear()

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

"""The SQLite backend of the ledger: one file in WAL mode, the embedded default.

* **Durability.** WAL journaling with ``synchronous=FULL``: a committed charge survives
  ``kill -9`` and power loss.
* **Serialisable admission.** A write transaction is ``BEGIN IMMEDIATE``: it takes SQLite's
  single write lock before the spent total is read, so processes sharing the file are
  admitted one at a time and can never overspend the cap together. SQLite's locking is not
  safe over network file systems: several hosts share a PostgreSQL ledger instead
  (:mod:`deniable.ledger.postgres`).
* **Append-only.** Triggers refuse deletes and any update other than marking a charge
  answered, changing a cap, an allowance or an accountant, or revoking a token.
* **Backups.** :meth:`SQLiteStore.copy_to_sqlite` uses SQLite's online backup API. Copying
  the file is wrong: in WAL mode recent commits live in ``<path>-wal`` until a checkpoint, so
  a plain copy of ``<path>`` alone shows less spent than was released, or is corrupt.

The ledger's logic is in :mod:`deniable.ledger.facade` and the modules it uses; this module
also re-exports the public names that used to live here (``from deniable.ledger.sqlite
import Ledger`` keeps working).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from deniable.errors import LedgerError
from deniable.ledger.facade import Ledger
from deniable.ledger.records import (
    LOST_BY_ROLLBACK,
    SCHEMA_VERSION,
    Charge,
    ChargeStatus,
    CuratorEvent,
    SampleRelease,
    new_sample_id,
)
from deniable.ledger.store import Cursor, Store, Tx

__all__ = [
    "LOST_BY_ROLLBACK",
    "SCHEMA_VERSION",
    "Charge",
    "ChargeStatus",
    "CuratorEvent",
    "Ledger",
    "SQLiteStore",
    "SampleRelease",
    "new_sample_id",
]

_LOSS_COLUMNS = """
    loss_type TEXT NOT NULL,
    epsilon TEXT,
    delta TEXT,
    rho TEXT CHECK (
        (loss_type = 'epsilon' AND epsilon IS NOT NULL AND delta IS NULL AND rho IS NULL)
        OR (loss_type = 'epsilon_delta' AND epsilon IS NOT NULL AND delta IS NOT NULL
            AND rho IS NULL)
        OR (loss_type = 'rho' AND epsilon IS NULL AND delta IS NULL AND rho IS NOT NULL))"""


def _refuse(table: str, event: str, when: str = "") -> str:
    return (
        f"CREATE TRIGGER {table}_append_only_{event.lower()} BEFORE {event} ON {table} {when}\n"
        "    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END"
    )


_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
    """CREATE TABLE chain (
        seq INTEGER PRIMARY KEY,
        op TEXT NOT NULL,
        payload TEXT NOT NULL,
        hash TEXT NOT NULL
    ) STRICT""",
    f"""CREATE TABLE datasets (
        name TEXT PRIMARY KEY,{_LOSS_COLUMNS},
        registered_at TEXT NOT NULL
    ) STRICT""",
    f"""CREATE TABLE allowances (
        dataset TEXT NOT NULL REFERENCES datasets(name),
        analyst TEXT NOT NULL,{_LOSS_COLUMNS},
        set_at TEXT NOT NULL,
        PRIMARY KEY (dataset, analyst)
    ) STRICT""",
    f"""CREATE TABLE curator_events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        dataset TEXT NOT NULL REFERENCES datasets(name),
        action TEXT NOT NULL CHECK (action IN ('register', 'change_cap', 'set_allowance')),
        analyst TEXT,{_LOSS_COLUMNS},
        previous TEXT,
        time TEXT NOT NULL
    ) STRICT""",
    # No foreign key to datasets: a curator's acknowledgement may record budget lost by a
    # rollback for a dataset that the (restored or recreated) database does not know yet.
    f"""CREATE TABLE charges (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        dataset TEXT NOT NULL,
        analyst TEXT NOT NULL,
        query_key TEXT NOT NULL,
        query_text TEXT NOT NULL,{_LOSS_COLUMNS},
        time TEXT NOT NULL,
        details TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('charged', 'answered')),
        idempotency_key TEXT
    ) STRICT""",
    "CREATE INDEX charges_by_analyst ON charges (dataset, analyst)",
    """CREATE UNIQUE INDEX charges_idempotency ON charges (dataset, analyst, idempotency_key)
    WHERE idempotency_key IS NOT NULL""",
    """CREATE TABLE answers (
        charge_id INTEGER PRIMARY KEY REFERENCES charges(id),
        dataset TEXT NOT NULL,
        query_key TEXT NOT NULL,
        payload BLOB NOT NULL,
        time TEXT NOT NULL
    ) STRICT""",
    "CREATE INDEX answers_by_key ON answers (dataset, query_key, charge_id)",
    """CREATE TABLE analysts (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        role TEXT NOT NULL CHECK (role IN ('curator', 'analyst')),
        digest TEXT NOT NULL UNIQUE,
        created TEXT NOT NULL,
        revoked_at TEXT
    ) STRICT""",
    "CREATE UNIQUE INDEX analysts_active ON analysts (name) WHERE revoked_at IS NULL",
    _refuse("meta", "DELETE"),
    _refuse("meta", "UPDATE"),
    _refuse("chain", "DELETE"),
    _refuse("chain", "UPDATE"),
    _refuse("curator_events", "DELETE"),
    _refuse("curator_events", "UPDATE"),
    _refuse("answers", "DELETE"),
    _refuse("answers", "UPDATE"),
    _refuse("datasets", "DELETE"),
    _refuse(
        "datasets",
        "UPDATE",
        "WHEN NEW.name IS NOT OLD.name OR NEW.registered_at IS NOT OLD.registered_at",
    ),
    _refuse("allowances", "DELETE"),
    _refuse(
        "allowances",
        "UPDATE",
        "WHEN NEW.dataset IS NOT OLD.dataset OR NEW.analyst IS NOT OLD.analyst",
    ),
    _refuse("analysts", "DELETE"),
    _refuse(
        "analysts",
        "UPDATE",
        "WHEN NEW.id IS NOT OLD.id OR NEW.name IS NOT OLD.name OR NEW.role IS NOT OLD.role "
        "OR NEW.digest IS NOT OLD.digest OR NEW.created IS NOT OLD.created "
        "OR OLD.revoked_at IS NOT NULL OR NEW.revoked_at IS NULL",
    ),
    _refuse("charges", "DELETE"),
    _refuse(
        "charges",
        "UPDATE",
        """WHEN NEW.id IS NOT OLD.id OR NEW.dataset IS NOT OLD.dataset
        OR NEW.analyst IS NOT OLD.analyst OR NEW.query_key IS NOT OLD.query_key
        OR NEW.query_text IS NOT OLD.query_text OR NEW.loss_type IS NOT OLD.loss_type
        OR NEW.epsilon IS NOT OLD.epsilon OR NEW.delta IS NOT OLD.delta
        OR NEW.rho IS NOT OLD.rho OR NEW.time IS NOT OLD.time
        OR NEW.details IS NOT OLD.details OR NEW.idempotency_key IS NOT OLD.idempotency_key
        OR NOT (NEW.status = OLD.status OR (OLD.status = 'charged' AND NEW.status = 'answered'))""",
    ),
)


# Tables added after schema version 2 was released. They are created in new ledgers and,
# in existing ones, by the first write that needs them (so old ledgers open unchanged);
# readers treat a missing table as empty. They are append-only like the others.
_EXTENSIONS: tuple[str, ...] = (
    """CREATE TABLE IF NOT EXISTS accountants (
        dataset TEXT PRIMARY KEY REFERENCES datasets(name),
        spec TEXT NOT NULL,
        set_at TEXT NOT NULL
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS sample_releases (
        dataset TEXT NOT NULL,
        sample TEXT NOT NULL,
        charge_id INTEGER NOT NULL UNIQUE REFERENCES charges(id),
        rate TEXT NOT NULL,
        time TEXT NOT NULL,
        PRIMARY KEY (dataset, sample)
    ) STRICT""",
    """CREATE TABLE IF NOT EXISTS checkpoints (
        seq INTEGER PRIMARY KEY,
        head TEXT NOT NULL,
        body TEXT NOT NULL,
        hash TEXT NOT NULL
    ) STRICT""",
    # (dataset, rowid): the charges after a checkpoint's last id are one range of it.
    "CREATE INDEX IF NOT EXISTS charges_by_dataset ON charges (dataset)",
    """CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_delete BEFORE DELETE ON checkpoints
    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_update BEFORE UPDATE ON checkpoints
    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS accountants_append_only_delete BEFORE DELETE ON accountants
    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS accountants_append_only_update BEFORE UPDATE ON accountants
    WHEN NEW.dataset IS NOT OLD.dataset
    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS sample_releases_append_only_delete
    BEFORE DELETE ON sample_releases
    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END""",
    """CREATE TRIGGER IF NOT EXISTS sample_releases_append_only_update
    BEFORE UPDATE ON sample_releases
    BEGIN SELECT RAISE(ABORT, 'ledger tables are append-only'); END""",
)


class SQLiteTx(Tx):
    """A transaction on an SQLite connection (``?`` placeholders are SQLite's own)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement (SQLite's own ``?`` placeholders)."""
        return self.conn.execute(sql, tuple(params))

    def insert(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one ``INSERT``; the new row's id is SQLite's ``lastrowid``."""
        cursor = self.conn.execute(sql, tuple(params))
        if cursor.lastrowid is None:  # pragma: no cover - sqlite3 always sets it after INSERT
            raise LedgerError("the ledger did not return the new row's id")
        return int(cursor.lastrowid)

    def tables(self) -> set[str]:
        return {str(r[0]) for r in self.conn.execute("SELECT name FROM sqlite_master")}

    def has_table(self, name: str) -> bool:
        row = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None

    def json_text(self, column: str, *keys: str) -> str:
        return f"json_extract({column}, '$.{'.'.join(keys)}')"

    def ensure_extensions(self) -> None:
        have = {
            str(r[0])
            for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE name IN "
                "('accountants', 'sample_releases', 'checkpoints', 'charges_by_dataset')"
            )
        }
        if len(have) < 4:
            for statement in _EXTENSIONS:
                self.conn.execute(statement)

    def create_schema(self) -> None:
        for statement in (*_SCHEMA, *_EXTENSIONS):
            self.conn.execute(statement)

    def log_apart(self) -> bool:
        row = self.conn.execute("PRAGMA journal_mode").fetchone()
        return row is not None and str(row[0]).lower() == "wal"


def create_sqlite_schema(conn: sqlite3.Connection) -> None:
    """Create a new ledger's tables and triggers on ``conn`` (a backup copy's, for one)."""
    SQLiteTx(conn).create_schema()


class SQLiteStore(Store):
    """A ledger in one SQLite file (WAL, ``synchronous=FULL``, foreign keys on).

    Args:
        path: the file (created if missing; its directory must exist).
        timeout: seconds to wait for another process's write lock.

    Raises:
        sqlite3.Error: the file cannot be opened (the ledger maps it to LedgerError).
    """

    driver_errors = (sqlite3.Error,)

    def __init__(self, path: str, *, timeout: float, read_only: bool = False) -> None:
        self.location = path
        self.default_anchor = path + ".anchor"
        self.read_only = read_only
        self._lock = threading.RLock()
        # Read-only: SQLite's own mode=ro, so no statement can write the file (nor create
        # it: a missing file is an error, not a new empty ledger).
        target = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro" if read_only else path
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            target,
            timeout=timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=read_only,
        )

    @property
    def connection(self) -> sqlite3.Connection | None:
        """The sqlite3 connection, or None when closed."""
        return self._conn

    def configure(self) -> None:
        """Set the durable per-connection pragmas (they write nothing to the file)."""
        conn = self._open()
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")

    def finish_open(self) -> None:
        """Switch to WAL once the schema exists (a no-op when it already is; not read-only).

        A new ledger's tables are written before the switch, in the main file itself, so
        the main file of a ledger always holds at least its schema (see
        :meth:`deniable.ledger.store.Tx.log_apart`).
        """
        if self.read_only:
            return
        mode = self._open().execute("PRAGMA journal_mode=WAL").fetchone()
        if mode is None or str(mode[0]).lower() != "wal":
            raise LedgerError(f"the ledger at {self.location!r} cannot use WAL journaling")

    def is_busy(self, error: BaseException) -> bool:
        """Switching a new file to WAL needs an exclusive lock.

        While another connection holds the write lock SQLite reports busy at once, without
        its busy handler (waiting could deadlock): the opener retries.
        """
        cause = error if isinstance(error, sqlite3.Error) else error.__cause__
        return isinstance(cause, sqlite3.OperationalError) and (
            getattr(cause, "sqlite_errorcode", 0) & 0xFF
            in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        )

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError("the ledger is closed")
        return self._conn

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Tx]:
        """Run the body in one transaction; sqlite3 errors become LedgerError with the cause.

        A write transaction is ``BEGIN IMMEDIATE``: it holds the database's write lock from
        its first read, which is what makes read-check-insert serialisable across processes.
        """
        if write and self.read_only:
            raise LedgerError("the ledger was opened read-only: nothing can be written")
        with self._lock:
            conn = self._open()
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as e:
                raise LedgerError("cannot start a ledger transaction") from e
            try:
                yield SQLiteTx(conn)
            except BaseException as e:
                if conn.in_transaction:
                    # The original error matters more; SQLite rolls back on close anyway.
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(e, sqlite3.Error):
                    raise LedgerError(f"ledger operation failed ({type(e).__name__})") from e
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise LedgerError("cannot commit to the ledger; the change was not recorded") from e

    def copy_to_sqlite(self, dest: str) -> None:
        """SQLite's online backup API: one snapshot, including what is still in the WAL."""
        copy = sqlite3.connect(dest, isolation_level=None)
        try:
            with self._lock:
                self._open().backup(copy)
            copy.execute("PRAGMA journal_mode=DELETE")
        finally:
            copy.close()

    def own_files(self) -> tuple[str, ...]:
        """The database file and its ``-wal`` and ``-shm`` companions."""
        return (self.location, self.location + "-wal", self.location + "-shm")

    def close(self) -> None:
        """Close the connection; committed charges are already durable."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

"""The durable budget ledger: one SQLite file, one row per release, no answer without a charge.

Guarantees (DESIGN.md §7):

* **No answer leaves without a committed charge.** :meth:`Ledger.charge` admits and records a
  release in one ``BEGIN IMMEDIATE`` transaction and returns only after ``COMMIT``; with WAL
  and ``synchronous=FULL`` a returned charge survives ``kill -9`` and power loss.
* **Serialisable reservation.** ``BEGIN IMMEDIATE`` takes SQLite's single write lock before the
  spent total is read, so concurrent processes sharing the file are admitted one at a time and
  can never overspend the cap together.
* **Exact arithmetic.** Losses are stored as their type plus exact rationals written as text
  ``"num/den"``; totals are recomputed exactly from the rows, never from floats.
* **The admission rule is not here.** The ledger rebuilds the dataset's filter from the stored
  cap, accountant and charges and asks it; a refused charge raises its
  :class:`~deniable.errors.BudgetExceeded` and writes nothing. The accountant is chosen with
  the cap (:meth:`Ledger.register`, ``accountant=``): ``"basic"`` (the default,
  :class:`deniable.accounting.filter.BudgetFilter`: losses add) or ``"zcdp"`` (an ``(ε, δ)``
  cap spent as ρ-zCDP, :class:`deniable.accounting.renyi.ZCDPFilter`; ρ charges are then
  admitted). The choice is a chained fact like the cap, and can change only before the
  first charge; after it, a zCDP dataset's cap can only be lowered (its filter theorems need
  the budget fixed in advance). The zCDP accountant refuses the charges of queries on a
  Bernoulli sample (increments of one amplified total, valid only added up).
* **Sample discipline** (Li–Qardaji–Su §2.6). A release whose guarantee comes from sampling
  alone (safe k-anonymization) is recorded with :meth:`Ledger.record_sample_release`: the
  sample's opaque identity (:func:`new_sample_id`, never derived from data), its rate β and
  the ``(ε, δ)`` guarantee, charged like any release. The sample is then *consumed*: a second
  release on it is refused, and :meth:`Ledger.sample_consumed` tells a session to answer
  nothing more from it.
* **Budgets belong to the dataset.** Per-analyst allowances are slices of the one global cap
  (analysts who collude add up): a charge must fit both the analyst's slice and the cap.
  Slices may overlap (their sum may exceed the cap); the cap still bounds everyone together.
* **Charges are facts.** The tables are append-only (SQLite triggers refuse deletes and any
  update other than marking a charge answered, changing a cap or an allowance, or revoking a
  token); a curator's change of cap or allowance is itself recorded in ``curator_events``.
* **Tamper evidence** (:mod:`deniable.ledger.integrity`). Every mutation also appends an entry
  to a hash chain in the same transaction, and an anchor file outside the database
  (``<path>.anchor`` by default) records the ledger's identity, last entry and spent totals
  after each commit. Opening the ledger replays the chain and compares it with every table and
  with the anchor; it finds a deleted database (the anchor remains), an older copy restored
  (fewer entries than the anchor), a copy taken without its ``-wal`` file, another ledger's
  file (identity differs) and a hand-edited row (triggers can be dropped by whoever has the
  file; the chain then no longer matches the table). A tampered ledger opens for inspection
  but refuses :meth:`Ledger.charge`, :meth:`Ledger.register`, :meth:`Ledger.set_allowance` and
  :meth:`Ledger.add_analyst` with :class:`~deniable.errors.LedgerTampered` until a curator
  calls :meth:`Ledger.acknowledge`, which never gives budget back.
* **Backups.** :meth:`Ledger.backup` uses SQLite's online backup API. Copying the file is
  wrong: in WAL mode recent commits live in ``<path>-wal`` until a checkpoint, so a plain copy
  of ``<path>`` alone (or of the two files at slightly different moments while a process
  writes) shows less spent than was released — often nothing at all — or is corrupt. The
  backup API copies one consistent snapshot, including what is still in the WAL. Restoring a
  backup over a live ledger is a rollback: its anchor reports it and the curator's
  acknowledgement charges what the backup misses.
* **Schema versions.** A file of schema version 1 (before the chain) is refused with a
  :class:`~deniable.errors.LedgerError` that says how to upgrade it:
  :meth:`Ledger.upgrade` rewrites it in one transaction, replaying every existing row into
  the chain (nothing is dropped or recomputed), and only when the caller asks for it.

The answer cache and its crash window: the query engine charges, computes the noisy answer,
stores it with :meth:`Ledger.store_answer`, then returns it. A repeated identical query (same
``query_key``) is answered from :meth:`Ledger.cached_answer` at no cost — re-publishing a
released answer is post-processing. If the process dies between the charge and the store,
the charge stays (and counts) but there is no stored answer, so the repeat is charged again.
The error is always on the side of paying twice, never of answering twice for one payment:
an answer row cannot exist without the committed charge it references. Two processes asking
the same new query at the same moment may likewise both pay (an idempotency key,
``charge(..., idempotency_key=...)``, makes a retried request pay once).

A :class:`Ledger` object may be shared by threads (calls are serialised by a lock) but not
across ``fork``: open one per process.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Literal

from deniable.accounting.composition import components, from_components
from deniable.accounting.conversions import convert
from deniable.accounting.filter import (
    Accountant,
    BudgetFilter,
    accountant_spec,
    check_accountant,
    make_filter,
    parse_accountant,
)
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, exact
from deniable.accounting.renyi import ZCDPFilter, ZCDPSpent, zcdp_charge
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DuplicateRequest,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
    UnknownDataset,
    UnsafeQuery,
)
from deniable.ledger.analysts import ROLES, AnalystInfo, Principal, Role, new_token, token_digest
from deniable.ledger.integrity import (
    GENESIS,
    Anchor,
    AnchorUnreadable,
    FileLock,
    LedgerReport,
    canonical,
    entry_hash,
    read_anchor,
    write_anchor,
)

SCHEMA_VERSION = 2
"""Version of the on-disk schema, stored in the ``meta`` table (2: hash chain, analysts)."""

LOST_BY_ROLLBACK = "(lost by rollback)"
"""The analyst name of the charges :meth:`Ledger.acknowledge` adds for budget a rollback lost."""

ChargeStatus = Literal["charged", "answered"]
LossType = Literal["epsilon", "epsilon_delta", "rho"]
_Loss4 = tuple[str, str | None, str | None, str | None]

# Column list shared by every table that stores a loss: the type, then exact "num/den" text
# for the components that type has (the others are NULL).
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
# readers treat a missing table as empty. Both are append-only like the others.
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


def new_sample_id() -> str:
    """A fresh opaque identity for a sample (128 random bits, hex): reveals nothing of the data.

    Mint it when the sample is drawn, keep it with the sample, and give it to
    :meth:`Ledger.record_sample_release` when a sampling-based release consumes the sample.
    """
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class SampleRelease:
    """A recorded release whose guarantee comes from sampling (e.g. safe k-anonymization).

    Attributes:
        dataset: the dataset whose budget paid.
        sample: the sample's opaque identity (consumed: it answers nothing else).
        rate: the Bernoulli sampling rate β.
        charge: the charge that paid for it; its loss is the release's ``(ε, δ)``.
        time: commit time (UTC).
    """

    dataset: str
    sample: str
    rate: Fraction
    charge: Charge
    time: datetime


@dataclass(frozen=True, slots=True)
class Charge:
    """One committed release: an immutable fact of the ledger.

    Attributes:
        id: increasing identifier; history is ordered by it (commit order).
        dataset: the dataset whose budget paid.
        analyst: who asked.
        query_key: the engine's key for identical queries (normalised SQL, parameters,
            privacy parameters and data version).
        query_text: the query as the analyst wrote it.
        loss: the privacy loss charged, exact.
        time: commit time (UTC).
        details: JSON-compatible metadata the engine chose to record (mechanisms, bounds).
        status: ``"charged"``, or ``"answered"`` once the answer is stored in the cache.
        idempotency_key: the caller's key for retries of one request, if given.
    """

    id: int
    dataset: str
    analyst: str
    query_key: str
    query_text: str
    loss: PrivacyLoss
    time: datetime
    details: Mapping[str, object] = field(hash=False)
    status: ChargeStatus
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class CuratorEvent:
    """A recorded curator decision: a registration, a change of cap, or an allowance.

    Attributes:
        id: increasing identifier.
        dataset: the dataset concerned.
        action: ``"register"``, ``"change_cap"`` or ``"set_allowance"``.
        analyst: the analyst of an allowance, else None.
        loss: the cap or allowance set.
        previous: the cap or allowance it replaced, if any.
        time: commit time (UTC).
    """

    id: int
    dataset: str
    action: Literal["register", "change_cap", "set_allowance"]
    analyst: str | None
    loss: PrivacyLoss
    previous: PrivacyLoss | None
    time: datetime


_CHARGE_COLUMNS = (
    "id, dataset, analyst, query_key, query_text, loss_type, epsilon, delta, rho, time, details, "
    "status, idempotency_key"
)


class _Write:
    """One write transaction in progress: appends chain entries and collects spent totals."""

    def __init__(self, conn: sqlite3.Connection, seq: int, head: str) -> None:
        self.conn = conn
        self.start = seq
        self.seq = seq
        self.head = head
        self.spent: dict[str, dict[str, str]] = {}  # spent totals for the anchor, as JSON
        self.recompute_all = False
        self.previous: Anchor | None = None

    def append(self, op: str, payload: dict[str, object]) -> int:
        """Append the entry ``op`` with ``payload`` to the chain; return its number."""
        text = canonical({"op": op, **payload})
        seq = self.seq + 1
        digest = entry_hash(self.head, seq, text)
        self.conn.execute(
            "INSERT INTO chain (seq, op, payload, hash) VALUES (?, ?, ?, ?)",
            (seq, op, text, digest),
        )
        self.seq, self.head = seq, digest
        return seq


_WriteMode = Literal["trusted", "lenient", "acknowledge"]


class Ledger:
    """A durable, transactional, tamper-evident privacy-budget ledger in one SQLite file.

    Opening creates the file and its schema if needed, then verifies it (see the module
    docstring); several processes may open and use the same path at once. Nothing here
    releases data, so no method has a privacy loss of its own: :meth:`charge` *records* the
    loss of a release the caller is about to make.

    Args:
        path: the SQLite file (created if missing; its directory must exist).
        timeout: seconds to wait for another process's write lock before failing with
            :class:`~deniable.errors.LedgerError`.
        anchor: the anchor file (default ``<path>.anchor``); its lock is ``<anchor>.lock``.

    Raises:
        LedgerError: the file cannot be opened, is not a deniable ledger, or has a schema
            version this code does not read. A ledger that fails verification still opens;
            see :attr:`tampered` and :meth:`verify`.

    Examples:
        >>> import os, tempfile
        >>> from fractions import Fraction
        >>> from deniable.accounting.loss import Epsilon
        >>> with tempfile.TemporaryDirectory() as d, Ledger(os.path.join(d, "b.db")) as ledger:
        ...     ledger.register("students", Epsilon(epsilon=1))
        ...     c = ledger.charge(
        ...         "students", Epsilon(epsilon=Fraction(1, 4)), analyst="ann",
        ...         query_key="k1", query_text="SELECT COUNT(*) FROM students")
        ...     ledger.remaining("students").epsilon
        Fraction(3, 4)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        anchor: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise InvalidParameter("timeout must be a positive number of seconds")
        self._path = os.fspath(path)
        self._anchor_path = self._path + ".anchor" if anchor is None else os.fspath(anchor)
        self._timeout = float(timeout)
        self._lock = threading.RLock()
        self._flock: FileLock | None = None
        self._ledger_id = ""
        self._report: LedgerReport | None = None
        self._seen: tuple[int, str | None] | None = None
        try:
            conn = sqlite3.connect(
                self._path, timeout=float(timeout), isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise LedgerError(f"cannot open the ledger at {self._path!r}: {e}") from e
        self._conn: sqlite3.Connection | None = conn
        try:
            self._configure(conn, deadline=time.monotonic() + float(timeout))
            self._inspect()
        except BaseException as e:
            self.close()
            if isinstance(e, sqlite3.Error):  # SQLite's message names the cause, not data
                raise LedgerError(f"cannot open the ledger at {self._path!r}: {e}") from e
            raise

    def _configure(self, conn: sqlite3.Connection, *, deadline: float) -> None:
        """Switch to WAL, set durable per-connection pragmas, create or check the schema.

        Switching a new file to WAL needs an exclusive lock; while another connection holds
        the write lock SQLite reports busy at once, without its busy handler (waiting could
        deadlock). When several processes open a new ledger together, the losers retry here,
        with backoff, until ``deadline``.
        """
        delay = 0.001
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()
                if mode is None or str(mode[0]).lower() != "wal":
                    raise LedgerError(f"the ledger at {self._path!r} cannot use WAL journaling")
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA foreign_keys=ON")
                if self._flock is None:
                    self._flock = FileLock(self._anchor_path + ".lock")
                with self._flock.hold(deadline):
                    self._ensure_schema()
                return
            except (sqlite3.Error, LedgerError) as e:
                cause = e if isinstance(e, sqlite3.Error) else e.__cause__
                busy = isinstance(cause, sqlite3.OperationalError) and (
                    getattr(cause, "sqlite_errorcode", 0) & 0xFF
                    in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                )
                if not busy or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 0.05)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The ledger's file path."""
        return self._path

    @property
    def anchor_path(self) -> str:
        """The anchor file's path."""
        return self._anchor_path

    @property
    def ledger_id(self) -> str:
        """The ledger's random identity (hex, 128 bits), made when the file was created."""
        return self._ledger_id

    @property
    def tampered(self) -> bool:
        """Whether the last verification found problems (then writes are refused)."""
        return self._report is not None and not self._report.ok

    def close(self) -> None:
        """Close the connection; committed charges are already durable."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            if self._flock is not None:
                self._flock.close()
                self._flock = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """Run the body in one transaction; sqlite3 errors become LedgerError with the cause.

        A write transaction is ``BEGIN IMMEDIATE``: it holds the database's write lock from
        its first read, which is what makes read-check-insert serialisable across processes.
        Commit happens on leaving the block; any exception rolls everything back.
        """
        with self._lock:
            conn = self._conn
            if conn is None:
                raise LedgerError("the ledger is closed")
            try:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            except sqlite3.Error as e:
                raise LedgerError("cannot start a ledger transaction") from e
            try:
                yield conn
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

    def _ensure_schema(self) -> None:
        # Runs under the writers' lock. An existing ledger is checked under a read
        # transaction; a new one is created under the write lock, with its first chain entry
        # and (when no anchor exists yet) its anchor, so no other opener ever sees a ledger
        # without an anchor.
        with self._transaction(write=False) as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
        created: _Write | None = None
        with self._transaction(write=exists is None) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "meta" not in tables:
                if tables:
                    raise LedgerError(f"{self._path!r} is an SQLite file but not a ledger")
                for statement in (*_SCHEMA, *_EXTENSIONS):
                    conn.execute(statement)
                ledger_id = secrets.token_hex(16)
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [("schema_version", str(SCHEMA_VERSION)), ("ledger_id", ledger_id)],
                )
                created = _Write(conn, 0, GENESIS)
                created.append(
                    "create",
                    {"ledger_id": ledger_id, "schema_version": SCHEMA_VERSION, "time": _now()},
                )
                self._ledger_id = ledger_id
            else:
                row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is None or row[0] != str(SCHEMA_VERSION):
                    found = "none" if row is None else row[0]
                    hint = (
                        " It predates the tamper-evident ledger and is not converted silently; "
                        "nothing was changed. Keep it as the record of what was spent, open it "
                        "with the deniable release that wrote it to read each dataset's "
                        "remaining budget, and register each dataset in a new ledger (another "
                        "path) with that remaining budget as its cap."
                        if found == "1"
                        else ""
                    )
                    raise LedgerError(
                        f"ledger schema version {found} at {self._path!r} is not supported "
                        f"(this deniable reads version {SCHEMA_VERSION}).{hint}"
                    )
                ident = conn.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
                self._ledger_id = "" if ident is None else str(ident[0])
        if created is not None:
            with suppress(AnchorUnreadable):
                if read_anchor(self._anchor_path) is None:
                    self._write_anchor(created, {})

    # -- verification ---------------------------------------------------------------------

    def _inspect(self) -> LedgerReport:
        """Verify the database against its chain and its anchor; remember the verdict.

        The anchor is read under the writers' lock together with the start of a read
        snapshot, so a concurrent writer can never make the anchor look ahead of the
        database; the (linear) replay then runs on the snapshot without holding the lock.
        """
        with self._lock:
            conn = self._conn
            if conn is None or self._flock is None:
                raise LedgerError("the ledger is closed")
            self._flock.acquire(time.monotonic() + self._timeout)
            try:
                anchor, unreadable = self._load_anchor()
                try:
                    conn.execute("BEGIN")
                    conn.execute("SELECT COUNT(*) FROM chain").fetchone()
                except sqlite3.Error as e:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                    raise LedgerError("cannot read the ledger") from e
            finally:
                self._flock.release()
            try:
                report = _audit(conn, anchor, unreadable, anchor_path=self._anchor_path)
            except sqlite3.Error as e:
                raise LedgerError("cannot read the ledger") from e
            finally:
                with suppress(sqlite3.Error):
                    conn.execute("COMMIT")
            self._report = report
            self._seen = (report.seq, _anchor_key(anchor, unreadable))
            return report

    def _load_anchor(self) -> tuple[Anchor | None, str | None]:
        try:
            return read_anchor(self._anchor_path), None
        except AnchorUnreadable as e:
            return None, str(e)

    def verify(self) -> LedgerReport:
        """Check the whole ledger now: chain, tables and anchor. Reading only; no loss.

        Returns:
            A :class:`~deniable.ledger.integrity.LedgerReport`; ``ok`` is False when the
            ledger was deleted and recreated, replaced by an older copy or a copy without its
            ``-wal``, replaced by another ledger, or edited by hand. The verdict also decides
            whether writes are refused from now on.

        Raises:
            LedgerError: the database cannot be read.
        """
        return self._inspect()

    def _tampered_error(self) -> LedgerTampered:
        report = self._report
        problems = () if report is None else report.problems
        first = problems[0] if problems else "verification failed"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return LedgerTampered(
            f"the ledger at {self._path!r} failed verification: {first}{more}. Nothing can be "
            "charged, registered or granted until a curator inspects it with `deniable ledger "
            "verify` and acknowledges it (Ledger.acknowledge(curator=..., reason=...)), which "
            "records what happened and keeps every budget already spent as spent",
            problems=problems,
        )

    def _require_trusted(self) -> None:
        """Refuse when tampered, re-verifying first if the chain or anchor changed since."""
        if not self.tampered:
            return
        conn = self._conn
        if conn is None:
            raise LedgerError("the ledger is closed")
        try:
            row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM chain").fetchone()
        except sqlite3.Error as e:
            raise LedgerError("cannot read the ledger") from e
        anchor, unreadable = self._load_anchor()
        if self._seen != (int(row[0]), _anchor_key(anchor, unreadable)):
            self._inspect()  # e.g. another process's curator acknowledged it meanwhile
        if self.tampered:
            raise self._tampered_error()

    @contextmanager
    def _write(self, mode: _WriteMode) -> Iterator[_Write]:
        """A write transaction that appends to the chain and then re-anchors.

        ``trusted`` refuses on a tampered ledger and checks the anchor against the database
        under the writers' lock before anything is written (a rollback done while this
        process ran is caught here); ``lenient`` (storing answers, revoking tokens: nothing
        that gives budget back) proceeds on a tampered ledger but leaves its anchor alone;
        ``acknowledge`` re-anchors unconditionally.
        """
        with self._lock:
            if mode == "trusted":
                self._require_trusted()
            if self._flock is None:
                raise LedgerError("the ledger is closed")
            self._flock.acquire(time.monotonic() + self._timeout)
            try:
                anchor_state: tuple[_Write, dict[str, dict[str, str]]] | None = None
                with self._transaction(write=True) as conn:
                    row = conn.execute(
                        "SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1"
                    ).fetchone()
                    w = _Write(conn, int(row[0]), str(row[1])) if row else _Write(conn, 0, GENESIS)
                    anchor, unreadable = self._load_anchor()
                    w.previous = anchor
                    if mode != "acknowledge" and not self.tampered:
                        problem = self._live_check(w, anchor, unreadable)
                        if problem is not None:
                            self._report = LedgerReport(
                                ok=False,
                                problems=(problem,),
                                seq=w.seq,
                                head=w.head,
                                anchor_seq=None if anchor is None else anchor.seq,
                                ledger_id=self._ledger_id,
                            )
                            self._seen = (w.seq, _anchor_key(anchor, unreadable))
                            if mode == "trusted":
                                raise self._tampered_error()
                    yield w
                    if w.seq > w.start and (mode == "acknowledge" or not self.tampered):
                        anchor_state = (w, self._anchor_spent(w))
                if anchor_state is not None:
                    self._write_anchor(*anchor_state)
            finally:
                self._flock.release()

    def _live_check(self, w: _Write, anchor: Anchor | None, unreadable: str | None) -> str | None:
        """The anchor must name this ledger at an entry the database has, with its hash."""
        if unreadable is not None:
            return unreadable
        if anchor is None:
            return f"the anchor file {self._anchor_path!r} disappeared while the ledger was in use"
        if anchor.ledger_id != self._ledger_id:
            return "the anchor file now belongs to another ledger"
        if anchor.seq > w.seq:
            return (
                f"the database has {w.seq} entries but its anchor records {anchor.seq}: the "
                "database was replaced by an older copy while in use"
            )
        head: str | None = w.head
        if anchor.seq != w.seq:
            row = w.conn.execute("SELECT hash FROM chain WHERE seq = ?", (anchor.seq,)).fetchone()
            head = None if row is None else str(row[0])
        if head != anchor.head:
            return f"entry {anchor.seq} has another hash than the anchor records"
        return None

    def _anchor_spent(self, w: _Write) -> dict[str, dict[str, str]]:
        """Spent totals for the anchor: the previous anchor's, updated by this transaction.

        The previous anchor is reused only when it describes exactly the entry this
        transaction started from; otherwise (after a crash between a commit and its anchor,
        or after an acknowledgement) every dataset's total is recomputed from the rows.
        """
        prev = w.previous
        if (
            w.recompute_all
            or prev is None
            or prev.ledger_id != self._ledger_id
            or prev.seq != w.start
        ):
            return _all_spent(w.conn)
        spent = dict(prev.spent)
        spent.update(w.spent)
        return spent

    def _write_anchor(self, w: _Write, spent: dict[str, dict[str, str]]) -> None:
        write_anchor(
            self._anchor_path,
            Anchor(ledger_id=self._ledger_id, seq=w.seq, head=w.head, spent=spent),
        )

    def acknowledge(self, *, curator: str, reason: str) -> None:
        """Record a curator's acknowledgement of what verification found, and re-anchor.

        Budget is never given back: for every dataset whose spent total in the anchor file
        exceeds the database's (a rollback lost charges), a charge for the difference is
        appended first, by analyst ``"(lost by rollback)"``. Then the acknowledgement (with
        the problems found and the old anchor) is appended to the chain, the anchor is
        rewritten for this database and writes are allowed again. No privacy loss of its own.

        Raises:
            InvalidParameter: empty curator or reason.
            LedgerError: storage failure (nothing recorded).
        """
        _check_name(curator, "curator")
        _check_name(reason, "reason")
        with self._write("acknowledge") as w:
            conn = w.conn
            anchor, unreadable = self._load_anchor()
            report = _audit(conn, anchor, unreadable, anchor_path=self._anchor_path)
            now = _now()
            if anchor is not None:
                for dataset, loss_json in sorted(anchor.spent.items()):
                    for lost in _lost(w, dataset, loss_json, now):
                        self._insert_charge(
                            w,
                            dataset=dataset,
                            analyst=LOST_BY_ROLLBACK,
                            query_key=f"{LOST_BY_ROLLBACK} {anchor.ledger_id}:{anchor.seq}",
                            query_text="",
                            loss=lost,
                            now=now,
                            details_json=_encode_details(
                                {
                                    "acknowledged_by": curator,
                                    "anchor_seq": anchor.seq,
                                    "anchor_head": anchor.head,
                                    "anchor_ledger_id": anchor.ledger_id,
                                }
                            ),
                            idempotency_key=None,
                        )
            w.append(
                "acknowledge",
                {
                    "curator": curator,
                    "reason": reason,
                    "problems": list(report.problems),
                    "anchor": None
                    if anchor is None
                    else {"ledger_id": anchor.ledger_id, "seq": anchor.seq, "head": anchor.head},
                    "time": now,
                },
            )
            w.recompute_all = True
        self._inspect()

    # -- backup ---------------------------------------------------------------------------

    def backup(self, dest: str | os.PathLike[str]) -> LedgerReport:
        """Write a consistent copy of this verified ledger to ``dest`` (replaced atomically).

        Uses SQLite's online backup API, which copies one snapshot including what is still in
        the ``-wal`` file; other processes may keep writing meanwhile. A plain copy of the
        database file is wrong (see the module docstring). The copy is a single file in
        rollback-journal mode with no anchor: opening it as a ledger reports the missing
        anchor (it is a fork of this ledger that could spend the budget again) until a curator
        acknowledges it; restoring it over this ledger is reported as a rollback.

        Returns:
            The report of the copy's own chain (``anchor_seq`` None).

        Raises:
            LedgerTampered: this ledger fails verification (nothing was written).
            InvalidParameter: ``dest`` is the ledger itself or one of its files.
            LedgerError: the copy failed.
        """
        target = os.path.abspath(os.fspath(dest))
        own = {os.path.abspath(p) for p in self._own_files()}
        if target in own:
            raise InvalidParameter("the backup must go to another file than the ledger's own")
        report = self.verify()
        if not report.ok:
            raise self._tampered_error()
        tmp = f"{target}.tmp-{secrets.token_hex(4)}"
        try:
            copy = sqlite3.connect(tmp, isolation_level=None)
            try:
                with self._lock:
                    if self._conn is None:
                        raise LedgerError("the ledger is closed")
                    self._conn.backup(copy)
                copy.execute("PRAGMA journal_mode=DELETE")
                copy.execute("BEGIN")
                try:
                    result = _audit(copy, None, None, anchor_path=None)
                finally:
                    copy.execute("COMMIT")
            finally:
                copy.close()
            fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, target)
            dir_fd = os.open(os.path.dirname(target), os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except (OSError, sqlite3.Error) as e:
            with suppress(OSError):
                os.unlink(tmp)
            raise LedgerError(f"cannot write the backup to {target!r}") from e
        return result

    def _own_files(self) -> tuple[str, ...]:
        base = (self._path, self._path + "-wal", self._path + "-shm")
        return (*base, self._anchor_path, self._anchor_path + ".lock", self._anchor_path + ".tmp")

    # -- curator --------------------------------------------------------------------------

    def register(
        self,
        dataset: str,
        cap: PrivacyLoss,
        *,
        allow_change: bool = False,
        accountant: Accountant | str | None = None,
    ) -> None:
        """Record ``dataset``'s total budget ``cap`` and the accountant that spends it.

        Registering again with an equal cap (and no accountant, or the same one) is a no-op.
        A different cap or accountant is refused unless the curator passes
        ``allow_change=True``; the change is then recorded (a curator event for the cap, a
        chain entry for the accountant). A changed cap can never fall below what was already
        spent, and its kind (ε, (ε, δ), ρ) and its accountant can change only while nothing
        has been charged. The cap of a dataset spent through the zCDP accountant can only be
        *lowered* once something has been charged (ε and δ both at most the old ones, so the
        filter admits no more than before): the filter theorems it rests on
        (Feldman–Zrnic, Whitehouse et al.; see :mod:`deniable.accounting.renyi`) need the
        budget fixed before the first charge, and a cap raised after answers were seen would
        void the guarantee of the old one without giving the new one.

        Args:
            dataset: the dataset's name.
            cap: the most that may ever be spent on it.
            allow_change: allow a different cap or accountant than the one recorded.
            accountant: ``"basic"`` (losses add; the default for a new dataset), ``"zcdp"``
                or ``"zcdp:delta_share=p/q"`` (an ``(ε, δ)`` cap with δ > 0 spent through
                the ρ-zCDP filter of :mod:`deniable.accounting.renyi`), or None to keep what
                is recorded.

        Raises:
            CapConflict: the dataset has a different cap or accountant and ``allow_change``
                is False.
            InvalidParameter: malformed arguments, an accountant that cannot spend the cap,
                a change that would un-spend budget, or a raised cap of a zCDP dataset that
                has charges (nothing is written).
            LedgerTampered: the ledger failed verification.
            LedgerError: storage failure.
        """
        _check_name(dataset, "dataset")
        _check_loss(cap, "cap")
        wanted = None if accountant is None else parse_accountant(accountant)
        if wanted is not None:
            check_accountant(cap, wanted)
        with self._write("trusted") as w:
            conn = w.conn
            now = _now()
            row = conn.execute(
                "SELECT loss_type, epsilon, delta, rho FROM datasets WHERE name = ?", (dataset,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO datasets (name, loss_type, epsilon, delta, rho, registered_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (dataset, *_encode(cap), now),
                )
                _record_event(w, dataset, "register", None, cap, None, now)
                if wanted is not None and wanted != "basic":
                    _set_accountant(w, dataset, wanted, now)
                w.spent[dataset] = _dataset_spent(conn, dataset, cap, wanted or "basic")
                return
            old = _decode(row)
            old_accountant = _accountant(conn, dataset)
            new_accountant = old_accountant if wanted is None else wanted
            if old == cap and new_accountant == old_accountant:
                return
            if not allow_change:
                what = (
                    f"cap {old}"
                    if old != cap
                    else f"accountant {accountant_spec(old_accountant)!r}"
                )
                raise CapConflict(
                    f"dataset {dataset!r} is already registered with {what}; a curator "
                    "can change it only explicitly, with register(..., allow_change=True)"
                )
            check_accountant(cap, new_accountant)
            charged = conn.execute(
                "SELECT COUNT(*) FROM charges WHERE dataset = ?", (dataset,)
            ).fetchone()[0]
            if charged and new_accountant != old_accountant:
                raise InvalidParameter(
                    f"dataset {dataset!r} already has charges; its accountant cannot change "
                    f"from {accountant_spec(old_accountant)!r} to "
                    f"{accountant_spec(new_accountant)!r}"
                )
            if type(old) is not type(cap):
                if charged:
                    raise InvalidParameter(
                        f"dataset {dataset!r} has charges in {type(old).__name__}; its cap "
                        f"cannot become a {type(cap).__name__}"
                    )
            elif old != cap:
                if charged and new_accountant != "basic":
                    _check_zcdp_cap_change(conn, dataset, old, cap, new_accountant)
                after = _filter(conn, dataset, cap, new_accountant, analyst=None)
                if _over(after):
                    raise InvalidParameter(
                        f"dataset {dataset!r} has already spent {after.spent!r}; its cap cannot "
                        "be lowered below that"
                    )
            if old != cap:
                conn.execute(
                    "UPDATE datasets SET loss_type = ?, epsilon = ?, delta = ?, rho = ? "
                    "WHERE name = ?",
                    (*_encode(cap), dataset),
                )
                _record_event(w, dataset, "change_cap", None, cap, old, now)
            if new_accountant != old_accountant:
                _set_accountant(w, dataset, new_accountant, now)
            w.spent[dataset] = _dataset_spent(conn, dataset, cap, new_accountant)

    def set_allowance(self, dataset: str, analyst: str, cap: PrivacyLoss) -> None:
        """Give ``analyst`` a slice ``cap`` of ``dataset``'s budget (replacing any previous one).

        The slice must be of the dataset cap's kind and fit inside it. Slices of several
        analysts may overlap; every charge must fit both its analyst's slice and the global
        cap. Analysts without an allowance are bounded by the global cap only.

        Raises:
            UnknownDataset: the dataset is not registered.
            InvalidParameter: the slice is of another kind or does not fit inside the cap.
            LedgerTampered: the ledger failed verification.
            LedgerError: storage failure.
        """
        _check_name(dataset, "dataset")
        _check_name(analyst, "analyst")
        _check_loss(cap, "cap")
        with self._write("trusted") as w:
            conn = w.conn
            total = _cap(conn, dataset)
            if not _within(cap, total):
                hint = ""
                if type(cap) is not type(total):
                    cli = (
                        "; on the command line add --delta"
                        if isinstance(total, EpsilonDelta)
                        else ""
                    )
                    hint = (
                        f" (the cap is an {_kind_name(total)} budget: give the allowance as "
                        f"one too{cli})"
                    )
                raise InvalidParameter(
                    f"an allowance is a slice of dataset {dataset!r}'s cap ({total}); "
                    f"{cap} does not fit inside it{hint}; nothing was changed"
                )
            check_accountant(cap, _accountant(conn, dataset))
            row = conn.execute(
                "SELECT loss_type, epsilon, delta, rho FROM allowances "
                "WHERE dataset = ? AND analyst = ?",
                (dataset, analyst),
            ).fetchone()
            previous = None if row is None else _decode(row)
            if previous == cap:
                return
            now = _now()
            conn.execute(
                "INSERT INTO allowances (dataset, analyst, loss_type, epsilon, delta, rho, set_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dataset, analyst) DO UPDATE SET "
                "loss_type = excluded.loss_type, epsilon = excluded.epsilon, "
                "delta = excluded.delta, rho = excluded.rho, set_at = excluded.set_at",
                (dataset, analyst, *_encode(cap), now),
            )
            _record_event(w, dataset, "set_allowance", analyst, cap, previous, now)

    # -- analysts -------------------------------------------------------------------------

    def add_analyst(self, name: str, *, role: Role) -> str:
        """Make a bearer token for a new analyst and return it; it is never shown again.

        Only ``sha256(token)`` is stored. No privacy loss (no data is read).

        Raises:
            InvalidParameter: empty name, unknown role, or an active analyst of that name.
            LedgerTampered: the ledger failed verification.
            LedgerError: storage failure.
        """
        _check_name(name, "name")
        if role not in ROLES:
            raise InvalidParameter("role must be 'curator' or 'analyst'")
        token = new_token()
        digest = token_digest(token)
        with self._write("trusted") as w:
            active = w.conn.execute(
                "SELECT 1 FROM analysts WHERE name = ? AND revoked_at IS NULL", (name,)
            ).fetchone()
            if active is not None:
                raise InvalidParameter(
                    f"analyst {name!r} already has an active token; revoke it first"
                )
            now = _now()
            cursor = w.conn.execute(
                "INSERT INTO analysts (name, role, digest, created) VALUES (?, ?, ?, ?)",
                (name, role, digest, now),
            )
            w.append(
                "add_analyst",
                {
                    "id": cursor.lastrowid,
                    "name": name,
                    "role": role,
                    "digest": digest,
                    "created": now,
                },
            )
        return token

    def revoke_analyst(self, name: str) -> None:
        """Revoke ``name``'s active token; it no longer authenticates. Allowed when tampered.

        Raises:
            InvalidParameter: no active analyst of that name.
            LedgerError: storage failure.
        """
        _check_name(name, "name")
        with self._write("lenient") as w:
            row = w.conn.execute(
                "SELECT id FROM analysts WHERE name = ? AND revoked_at IS NULL", (name,)
            ).fetchone()
            if row is None:
                raise InvalidParameter(f"there is no active analyst named {name!r}")
            now = _now()
            w.conn.execute("UPDATE analysts SET revoked_at = ? WHERE id = ?", (now, row[0]))
            w.append("revoke_analyst", {"id": row[0], "time": now})

    def authenticate(self, token: str) -> Principal | None:
        """Return who ``token`` belongs to, or None (unknown, malformed or revoked).

        The presented token is hashed and compared with every active digest by
        :func:`hmac.compare_digest`, so the time taken does not depend on how much of a
        guess is right.
        """
        if not isinstance(token, str) or not token:
            return None
        try:
            digest = token_digest(token)
        except UnicodeEncodeError:
            return None
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                "SELECT name, role, digest FROM analysts WHERE revoked_at IS NULL"
            ).fetchall()
        found: Principal | None = None
        for name, role, stored in rows:
            if hmac.compare_digest(str(stored), digest) and found is None:
                found = Principal(name=name, role=role)
        return found

    def analysts(self) -> list[AnalystInfo]:
        """Every analyst ever added, in order (never their token digests)."""
        with self._transaction(write=False) as conn:
            rows = conn.execute(
                "SELECT name, role, created, revoked_at FROM analysts ORDER BY id"
            ).fetchall()
        return [
            AnalystInfo(
                name=r[0],
                role=r[1],
                created=datetime.fromisoformat(r[2]),
                revoked_at=None if r[3] is None else datetime.fromisoformat(r[3]),
            )
            for r in rows
        ]

    # -- charging -------------------------------------------------------------------------

    def charge(
        self,
        dataset: str,
        loss: PrivacyLoss,
        *,
        analyst: str,
        query_key: str,
        query_text: str,
        details: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> Charge:
        """Admit and durably record a release of privacy loss ``loss`` on ``dataset``.

        In one ``BEGIN IMMEDIATE`` transaction: read the cap and the exact spent total (and the
        analyst's slice, if any), ask :class:`~deniable.accounting.filter.BudgetFilter` to
        admit ``loss``, insert the charge and its chain entry, commit; then re-anchor. Returns
        only after both, so the caller may compute and release the answer once this returns —
        never before. ``details`` and ``query_text`` are stored as given: put public metadata
        there, never data values.

        The row keeps ``loss`` as given (the fact); totals count it as the dataset's
        accountant does: the basic one in the cap's kind (pure ε into an ``(ε, δ)`` cap as
        ``(ε, 0)``, into a ρ cap as ``ε²/2``), the zCDP one as ``(ρ, δ)`` (ρ as given, ε as
        ``ε²/2``; see :mod:`deniable.accounting.renyi`).

        ``idempotency_key`` makes retries safe: a second charge with the same dataset, analyst
        and key writes nothing and raises :class:`~deniable.errors.DuplicateRequest` naming
        the first charge (use :meth:`answer_for` to return its stored answer).

        Raises:
            DuplicateRequest: this (dataset, analyst, idempotency_key) was already charged.
            BudgetExceeded: ``loss`` does not fit what is left (its ``remaining`` says what
                is); nothing was written.
            UnsafeQuery: a charge of a query on a Bernoulli sample (``details`` has
                ``"sampling"``) against a dataset spent with the zCDP accountant, whose
                theorems do not cover such increments; nothing was written.
            UnknownDataset: the dataset is not registered.
            InvalidParameter: malformed arguments, or a loss the cap's kind cannot express
                (e.g. ρ against an ``(ε, δ)`` cap with the basic accountant); checked before
                anything is written.
            LedgerTampered: the ledger failed verification; nothing was written.
            LedgerError: storage failure; nothing may be released.
        """
        _check_name(dataset, "dataset")
        _check_name(analyst, "analyst")
        _check_loss(loss, "loss")
        if not isinstance(query_key, str) or not query_key:
            raise InvalidParameter("query_key must be a non-empty string")
        if not isinstance(query_text, str):
            raise InvalidParameter("query_text must be a string")
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
        ):
            raise InvalidParameter("idempotency_key must be a non-empty string or None")
        details_json = _encode_details(details)
        with self._write("trusted") as w:
            conn = w.conn
            if idempotency_key is not None:
                row = conn.execute(
                    "SELECT id FROM charges WHERE dataset = ? AND analyst = ? "
                    "AND idempotency_key = ?",
                    (dataset, analyst, idempotency_key),
                ).fetchone()
                if row is not None:
                    raise DuplicateRequest(int(row[0]))
            if (
                details is not None
                and "sampling" in details
                and _accountant(conn, dataset) != "basic"
            ):
                raise UnsafeQuery(_SAMPLED_UNDER_ZCDP)
            charge = self._admit_and_insert(
                w,
                dataset=dataset,
                analyst=analyst,
                query_key=query_key,
                query_text=query_text,
                loss=loss,
                details_json=details_json,
                idempotency_key=idempotency_key,
            )
        return charge  # after the commit and the re-anchoring

    def _admit_and_insert(
        self,
        w: _Write,
        *,
        dataset: str,
        analyst: str,
        query_key: str,
        query_text: str,
        loss: PrivacyLoss,
        details_json: str,
        idempotency_key: str | None,
    ) -> Charge:
        """Admit ``loss`` (dataset and allowance) and insert its charge, inside ``w``.

        The one write path of a release (:meth:`charge`, :meth:`record_sample_release`):
        nothing is written when the filter refuses; the anchor's total follows the charge.
        """
        budget = _admit_both(w.conn, dataset, analyst, loss)
        now = _now()
        charge_id = self._insert_charge(
            w,
            dataset=dataset,
            analyst=analyst,
            query_key=query_key,
            query_text=query_text,
            loss=loss,
            now=now,
            details_json=details_json,
            idempotency_key=idempotency_key,
        )
        w.spent[dataset] = _filter_total(budget)
        return Charge(
            id=charge_id,
            dataset=dataset,
            analyst=analyst,
            query_key=query_key,
            query_text=query_text,
            loss=loss,
            time=datetime.fromisoformat(now),
            details=_decode_details(details_json),
            status="charged",
            idempotency_key=idempotency_key,
        )

    @staticmethod
    def _insert_charge(
        w: _Write,
        *,
        dataset: str,
        analyst: str,
        query_key: str,
        query_text: str,
        loss: PrivacyLoss,
        now: str,
        details_json: str,
        idempotency_key: str | None,
    ) -> int:
        cursor = w.conn.execute(
            "INSERT INTO charges (dataset, analyst, query_key, query_text, loss_type, "
            "epsilon, delta, rho, time, details, status, idempotency_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'charged', ?)",
            (
                dataset,
                analyst,
                query_key,
                query_text,
                *_encode(loss),
                now,
                details_json,
                idempotency_key,
            ),
        )
        charge_id = cursor.lastrowid
        if charge_id is None:  # pragma: no cover - sqlite3 always sets it after INSERT
            raise LedgerError("the ledger did not return the new charge's id")
        w.append(
            "charge",
            {
                "id": charge_id,
                "dataset": dataset,
                "analyst": analyst,
                "query_key": query_key,
                "query_text": query_text,
                "loss": list(_encode(loss)),
                "time": now,
                "details": details_json,
                "idempotency_key": idempotency_key,
            },
        )
        return charge_id

    # -- answer cache ---------------------------------------------------------------------

    def store_answer(self, charge_id: int, payload: bytes | bytearray | memoryview) -> None:
        """Store the released answer of charge ``charge_id`` so an identical query reuses it.

        Storing the same bytes twice is a no-op; a different payload for a charge that
        already has one is refused (a released answer never changes). The chain records the
        answer's SHA-256.

        Raises:
            InvalidParameter: no such charge, or a payload that is not bytes.
            LedgerError: a different answer is already stored, or storage failure.
        """
        if isinstance(charge_id, bool) or not isinstance(charge_id, int):
            raise InvalidParameter("charge_id must be the integer id of a Charge")
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise InvalidParameter("payload must be bytes")
        data = bytes(payload)
        with self._write("lenient") as w:
            conn = w.conn
            row = conn.execute(
                "SELECT dataset, query_key FROM charges WHERE id = ?", (charge_id,)
            ).fetchone()
            if row is None:
                raise InvalidParameter(f"no charge with id {charge_id} in this ledger")
            stored = conn.execute(
                "SELECT payload FROM answers WHERE charge_id = ?", (charge_id,)
            ).fetchone()
            if stored is not None:
                if bytes(stored[0]) == data:
                    return
                raise LedgerError(f"charge {charge_id} already has a different stored answer")
            now = _now()
            conn.execute(
                "INSERT INTO answers (charge_id, dataset, query_key, payload, time) "
                "VALUES (?, ?, ?, ?, ?)",
                (charge_id, row[0], row[1], data, now),
            )
            conn.execute("UPDATE charges SET status = 'answered' WHERE id = ?", (charge_id,))
            w.append(
                "answer",
                {"charge_id": charge_id, "sha256": hashlib.sha256(data).hexdigest(), "time": now},
            )

    def answer_for(self, charge_id: int) -> bytes | None:
        """Return the stored answer of charge ``charge_id``, or None when none was stored."""
        if isinstance(charge_id, bool) or not isinstance(charge_id, int):
            raise InvalidParameter("charge_id must be the integer id of a Charge")
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT payload FROM answers WHERE charge_id = ?", (charge_id,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def cached_answer(self, dataset: str, query_key: str) -> bytes | None:
        """Return the stored answer of the latest answered charge with this key, or None.

        Re-publishing an answer already released costs no privacy. The key must identify the
        query completely — normalised SQL, parameters, privacy parameters and data version.

        Raises:
            LedgerError: storage failure.
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            row = conn.execute(
                "SELECT payload FROM answers WHERE dataset = ? AND query_key = ? "
                "ORDER BY charge_id DESC LIMIT 1",
                (dataset, query_key),
            ).fetchone()
        return None if row is None else bytes(row[0])

    # -- reading --------------------------------------------------------------------------

    def cap(self, dataset: str) -> PrivacyLoss:
        """Return ``dataset``'s total budget.

        Raises:
            UnknownDataset: the dataset is not registered.
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            return _cap(conn, dataset)

    def allowance(self, dataset: str, analyst: str) -> PrivacyLoss | None:
        """Return ``analyst``'s slice of ``dataset``'s budget, or None when it has none."""
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            _cap(conn, dataset)
            return _allowance(conn, dataset, analyst)

    def spent(self, dataset: str, *, analyst: str | None = None) -> PrivacyLoss:
        """Return what was charged on ``dataset`` (by ``analyst`` only, if given).

        With the basic accountant: the exact total in the cap's kind. With the zCDP
        accountant: the ``(ε, δ)`` guarantee of the charges (ε rounded up; see
        :attr:`deniable.accounting.renyi.ZCDPFilter.spent`), which does not add up across
        analysts (composition is not additive); :meth:`budget_filter` gives the exact ρ.
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            cap = _cap(conn, dataset)
            accountant = _accountant(conn, dataset)
            if accountant == "basic":
                return _spent(conn, dataset, cap, analyst=analyst)
            return _filter(conn, dataset, cap, accountant, analyst=analyst).spent

    def remaining(self, dataset: str, *, analyst: str | None = None) -> PrivacyLoss:
        """Return what is left of ``dataset``'s budget (for ``analyst``, if given).

        For an analyst with an allowance this is the component-wise minimum of what is left
        of the slice and of the global cap. With the zCDP accountant it is the largest
        ``(ε, δ)`` single charge that still fits, ``(√(2ρ_left), δ_pool_left)``; the ρ left
        is ``budget_filter(dataset).remaining_rho``.
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            cap = _cap(conn, dataset)
            accountant = _accountant(conn, dataset)
            left = _filter(conn, dataset, cap, accountant, analyst=None).remaining
            if analyst is None:
                return left
            allowance = _allowance(conn, dataset, analyst)
            if allowance is None:
                return left
            mine = _filter(conn, dataset, allowance, accountant, analyst=analyst)
            return _meet(left, mine.remaining)

    def datasets(self) -> list[str]:
        """Return the registered datasets' names, in order of registration."""
        with self._transaction(write=False) as conn:
            rows = conn.execute("SELECT name FROM datasets ORDER BY registered_at, name").fetchall()
        return [str(r[0]) for r in rows]

    def accountant(self, dataset: str) -> Accountant:
        """Return how ``dataset``'s budget is spent: ``"basic"`` or a ``ZCDPAccountant``.

        Raises:
            UnknownDataset: the dataset is not registered.
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            _cap(conn, dataset)
            return _accountant(conn, dataset)

    def budget_filter(
        self, dataset: str, *, analyst: str | None = None
    ) -> BudgetFilter | ZCDPFilter:
        """Return a snapshot of ``dataset``'s filter (its cap, accountant and spent total).

        For a dry run (``can_charge``) or a report (``remaining``, and for the zCDP filter
        ``remaining_rho``, ``rho_max``, ``used``). Charging the snapshot writes nothing:
        only :meth:`charge` spends. With ``analyst``, the filter of the analyst's allowance
        (or of the dataset when the analyst has none).
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            cap = _cap(conn, dataset)
            accountant = _accountant(conn, dataset)
            allowance = None if analyst is None else _allowance(conn, dataset, analyst)
            if allowance is None:
                return _filter(conn, dataset, cap, accountant, analyst=None)
            return _filter(conn, dataset, allowance, accountant, analyst=analyst)

    def can_charge(self, dataset: str, loss: PrivacyLoss, *, analyst: str | None = None) -> bool:
        """Whether :meth:`charge` would admit ``loss`` now (a dry run; nothing is written).

        A cheap early refusal for callers that run an engine before charging; the charge
        itself re-checks atomically.

        Raises:
            UnknownDataset: the dataset is not registered.
            InvalidParameter: a loss the dataset's accountant cannot express.
        """
        _check_name(dataset, "dataset")
        _check_loss(loss, "loss")
        with self._transaction(write=False) as conn:
            try:
                _admit_both(conn, dataset, analyst, loss)
            except BudgetExceeded:
                return False
            return True

    def history(
        self, dataset: str, *, analyst: str | None = None, idempotency_key: str | None = None
    ) -> list[Charge]:
        """Return every charge on ``dataset`` in commit order.

        Only ``analyst``'s, if given; only the one charged with ``idempotency_key`` (an
        indexed look-up: at most one charge), if given.
        """
        _check_name(dataset, "dataset")
        where, args = "dataset = ?", [dataset]
        if analyst is not None:
            _check_name(analyst, "analyst")
            where, args = where + " AND analyst = ?", [*args, analyst]
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not idempotency_key:
                raise InvalidParameter("idempotency_key must be a non-empty string or None")
            where, args = where + " AND idempotency_key = ?", [*args, idempotency_key]
        with self._transaction(write=False) as conn:
            _cap(conn, dataset)
            rows = conn.execute(
                f"SELECT {_CHARGE_COLUMNS} FROM charges WHERE {where} ORDER BY id", args
            ).fetchall()
        return [
            Charge(
                id=r[0],
                dataset=r[1],
                analyst=r[2],
                query_key=r[3],
                query_text=r[4],
                loss=_decode(r[5:9]),
                time=datetime.fromisoformat(r[9]),
                details=_decode_details(r[10]),
                status=r[11],
                idempotency_key=r[12],
            )
            for r in rows
        ]

    def curator_events(self, dataset: str) -> list[CuratorEvent]:
        """Return the curator's recorded decisions on ``dataset`` in order."""
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            _cap(conn, dataset)
            rows = conn.execute(
                "SELECT id, dataset, action, analyst, loss_type, epsilon, delta, rho, previous, "
                "time FROM curator_events WHERE dataset = ? ORDER BY id",
                (dataset,),
            ).fetchall()
        return [
            CuratorEvent(
                id=r[0],
                dataset=r[1],
                action=r[2],
                analyst=r[3],
                loss=_decode(r[4:8]),
                previous=None if r[8] is None else _decode(json.loads(r[8])),
                time=datetime.fromisoformat(r[9]),
            )
            for r in rows
        ]

    # -- sample discipline ----------------------------------------------------------------

    def record_sample_release(
        self,
        dataset: str,
        loss: PrivacyLoss,
        *,
        sample: str,
        rate: Fraction | float | int,
        analyst: str,
        query_text: str,
        details: Mapping[str, object] | None = None,
    ) -> SampleRelease:
        """Charge a release whose guarantee comes from sampling, and consume its sample.

        Li–Qardaji–Su §2.6: a ``(β, ε, δ)``-DPS algorithm (safe k-anonymization) is
        ``(ε, δ)``-DP only if its Bernoulli(β) sample answers nothing else. In one
        transaction this admits ``loss`` (the release's ``(ε, δ)`` guarantee, or any loss
        the dataset's accountant takes) like :meth:`charge` does, records it, and records
        ``sample`` as consumed; afterwards :meth:`sample_consumed` is True and a second
        release on the same sample is refused. Returns after the commit: release only then.

        Args:
            dataset: the dataset whose budget pays.
            loss: the release's privacy loss.
            sample: the sample's opaque identity (:func:`new_sample_id`; never data).
            rate: the sampling rate β in ``(0, 1]``.
            analyst: who releases (recorded).
            query_text: a public description of the release (e.g. the command line).
            details: public metadata (recoding levels, k); never data values.

        Raises:
            UnsafeQuery: the sample was already consumed, or already answered queries (its
                charges name it; nothing written).
            BudgetExceeded: ``loss`` does not fit (nothing written).
            UnknownDataset, InvalidParameter, LedgerTampered, LedgerError: as :meth:`charge`.
        """
        _check_name(dataset, "dataset")
        _check_name(analyst, "analyst")
        _check_loss(loss, "loss")
        _check_sample(sample)
        beta = _rate(rate)
        if not isinstance(query_text, str):
            raise InvalidParameter("query_text must be a string")
        details_json = _encode_details(
            {
                **(dict(details) if details is not None else {}),
                "sample": sample,
                "rate": _text(beta),
            }
        )
        with self._write("trusted") as w:
            conn = w.conn
            _ensure_extensions(conn)
            if _consumed(conn, dataset, sample):
                raise UnsafeQuery(_CONSUMED_MESSAGE)
            if _queried(conn, dataset, sample):
                raise UnsafeQuery(_QUERIED_MESSAGE)
            charge = self._admit_and_insert(
                w,
                dataset=dataset,
                analyst=analyst,
                query_key=f"sample-release:{sample}",
                query_text=query_text,
                loss=loss,
                details_json=details_json,
                idempotency_key=None,
            )
            now = charge.time.isoformat(timespec="microseconds")  # as _now() wrote it
            conn.execute(
                "INSERT INTO sample_releases (dataset, sample, charge_id, rate, time) "
                "VALUES (?, ?, ?, ?, ?)",
                (dataset, sample, charge.id, _text(beta), now),
            )
            w.append(
                "sample_release",
                {
                    "dataset": dataset,
                    "sample": sample,
                    "charge_id": charge.id,
                    "rate": _text(beta),
                    "time": now,
                },
            )
        return SampleRelease(
            dataset=dataset, sample=sample, rate=beta, charge=charge, time=charge.time
        )

    def sample_consumed(self, dataset: str, sample: str) -> bool:
        """Whether ``sample`` was consumed by a sampling-based release on ``dataset``.

        A session must answer nothing from a consumed sample (check before any charge).
        """
        _check_name(dataset, "dataset")
        _check_sample(sample)
        with self._transaction(write=False) as conn:
            return _consumed(conn, dataset, sample)

    def sample_releases(self, dataset: str) -> list[SampleRelease]:
        """Return the sampling-based releases recorded on ``dataset``, in order."""
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            _cap(conn, dataset)
            if not _has_table(conn, "sample_releases"):
                return []
            rows = conn.execute(
                "SELECT sample, rate, charge_id FROM sample_releases WHERE dataset = ? "
                "ORDER BY charge_id",
                (dataset,),
            ).fetchall()
        charges = {c.id: c for c in self.history(dataset)}
        return [
            SampleRelease(
                dataset=dataset,
                sample=str(r[0]),
                rate=Fraction(*_parse(r[1])),
                charge=charges[int(r[2])],
                time=charges[int(r[2])].time,
            )
            for r in rows
        ]


# -- verification (run inside a read transaction) -------------------------------------------


def _anchor_key(anchor: Anchor | None, unreadable: str | None) -> str | None:
    if anchor is not None:
        return f"{anchor.ledger_id}:{anchor.seq}:{anchor.head}"
    return unreadable


class _Replay:
    """The tables' rows as the chain says they must be."""

    def __init__(self) -> None:
        self.ledger_id: str | None = None
        self.datasets: dict[object, tuple[object, ...]] = {}
        self.allowances: dict[object, tuple[object, ...]] = {}
        self.events: dict[object, tuple[object, ...]] = {}
        self.charges: dict[object, tuple[object, ...]] = {}
        self.answers: dict[object, tuple[object, ...]] = {}
        self.analysts: dict[object, tuple[object, ...]] = {}
        self.accountants: dict[object, tuple[object, ...]] = {}
        self.samples: dict[object, tuple[object, ...]] = {}

    def apply(self, seq: int, op: str, d: dict[str, object]) -> None:
        if d.get("op") != op:
            raise ValueError("op")
        if op == "create":
            if seq != 1:
                raise ValueError("create")
            self.ledger_id = str(d["ledger_id"])
            return
        if seq == 1:
            raise ValueError("first")
        if op in ("register", "change_cap", "set_allowance"):
            loss: tuple[object, ...] = tuple(d["loss"])  # type: ignore[arg-type]
            name = d["dataset"]
            self.events[d["event_id"]] = (
                d["event_id"],
                name,
                op,
                d["analyst"],
                *loss,
                d["previous"],
                d["time"],
            )
            if op == "register":
                self.datasets[name] = (name, *loss, d["time"])
            elif op == "change_cap":
                self.datasets[name] = (name, *loss, self.datasets[name][5])
            else:
                key = (name, d["analyst"])
                self.allowances[key] = (*key, *loss, d["time"])
        elif op == "charge":
            loss = tuple(d["loss"])  # type: ignore[arg-type]
            self.charges[d["id"]] = (
                d["id"],
                d["dataset"],
                d["analyst"],
                d["query_key"],
                d["query_text"],
                *loss,
                d["time"],
                d["details"],
                "charged",
                d["idempotency_key"],
            )
        elif op == "answer":
            c = self.charges[d["charge_id"]]
            self.charges[d["charge_id"]] = (*c[:11], "answered", c[12])
            self.answers[d["charge_id"]] = (d["charge_id"], c[1], c[3], d["sha256"], d["time"])
        elif op == "add_analyst":
            self.analysts[d["id"]] = (
                d["id"],
                d["name"],
                d["role"],
                d["digest"],
                d["created"],
                None,
            )
        elif op == "revoke_analyst":
            a = self.analysts[d["id"]]
            self.analysts[d["id"]] = (*a[:5], d["time"])
        elif op == "set_accountant":
            if d["dataset"] not in self.datasets:
                raise ValueError("set_accountant")
            self.accountants[d["dataset"]] = (d["dataset"], d["spec"], d["time"])
        elif op == "sample_release":
            if d["charge_id"] not in self.charges:
                raise ValueError("sample_release")
            key = (d["dataset"], d["sample"])
            self.samples[key] = (*key, d["charge_id"], d["rate"], d["time"])
        elif op != "acknowledge":
            raise ValueError(op)


def _compare(
    table: str,
    expected: dict[object, tuple[object, ...]],
    actual: dict[object, tuple[object, ...]],
    problems: list[str],
) -> None:
    if expected == actual:
        return

    def show(keys: list[object]) -> str:
        shown = ", ".join(str(k) for k in keys[:5])
        return shown + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

    edited = [k for k in expected if k in actual and expected[k] != actual[k]]
    missing = [k for k in expected if k not in actual]
    extra = [k for k in actual if k not in expected]
    if edited:
        problems.append(
            f"table {table}: row(s) {show(edited)} differ from what the chain recorded: the "
            "database was edited by hand"
        )
    if missing:
        problems.append(
            f"table {table}: row(s) {show(missing)} recorded in the chain are missing: rows "
            "were deleted"
        )
    if extra:
        problems.append(
            f"table {table}: row(s) {show(extra)} are not in the chain: rows were added "
            "outside the ledger"
        )


def _rows(
    conn: sqlite3.Connection, sql: str, key: Callable[[tuple[object, ...]], object]
) -> dict[object, tuple[object, ...]]:
    return {key(r): tuple(r) for r in conn.execute(sql)}


def _audit(
    conn: sqlite3.Connection,
    anchor: Anchor | None,
    unreadable: str | None,
    *,
    anchor_path: str | None,
) -> LedgerReport:
    """Replay the chain, compare every table with it, and compare the anchor with the chain.

    ``anchor_path`` None means no anchor is expected (a backup copy).
    """
    problems: list[str] = []
    meta = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM meta")}
    ledger_id = meta.get("ledger_id", "")
    replay = _Replay()
    hashes: dict[int, str] = {}
    seq, head = 0, GENESIS
    intact = True
    for s, op, payload, digest in conn.execute(
        "SELECT seq, op, payload, hash FROM chain ORDER BY seq"
    ):
        if s != seq + 1:
            problems.append(f"chain entries {seq + 1} to {s - 1} are missing: entries were deleted")
            intact = False
            break
        if entry_hash(head, s, payload) != digest:
            problems.append(f"chain entry {s} ({op}) does not match its hash: it was edited")
            intact = False
            break
        try:
            replay.apply(s, op, json.loads(payload))
        except (ValueError, KeyError, TypeError, IndexError):
            problems.append(f"chain entry {s} ({op}) cannot be replayed: it was edited")
            intact = False
            break
        seq, head = s, digest
        hashes[s] = digest
    last = conn.execute("SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1").fetchone()
    db_seq, db_head = (0, GENESIS) if last is None else (int(last[0]), str(last[1]))
    if intact and seq == 0:
        problems.append("the chain is empty: the ledger's first entry was deleted")
        intact = False
    if intact and replay.ledger_id != ledger_id:
        problems.append("the ledger's recorded identity differs from its first chain entry")
    if intact:
        _compare(
            "datasets",
            replay.datasets,
            _rows(
                conn,
                "SELECT name, loss_type, epsilon, delta, rho, registered_at FROM datasets",
                lambda r: r[0],
            ),
            problems,
        )
        _compare(
            "allowances",
            replay.allowances,
            _rows(
                conn,
                "SELECT dataset, analyst, loss_type, epsilon, delta, rho, set_at FROM allowances",
                lambda r: (r[0], r[1]),
            ),
            problems,
        )
        _compare(
            "curator_events",
            replay.events,
            _rows(
                conn,
                "SELECT id, dataset, action, analyst, loss_type, epsilon, delta, rho, previous, "
                "time FROM curator_events",
                lambda r: r[0],
            ),
            problems,
        )
        _compare(
            "charges",
            replay.charges,
            _rows(conn, f"SELECT {_CHARGE_COLUMNS} FROM charges", lambda r: r[0]),
            problems,
        )
        answers: dict[object, tuple[object, ...]] = {
            r[0]: (r[0], r[1], r[2], hashlib.sha256(bytes(r[3])).hexdigest(), r[4])
            for r in conn.execute(
                "SELECT charge_id, dataset, query_key, payload, time FROM answers"
            )
        }
        _compare("answers", replay.answers, answers, problems)
        _compare(
            "analysts",
            replay.analysts,
            _rows(
                conn,
                "SELECT id, name, role, digest, created, revoked_at FROM analysts",
                lambda r: r[0],
            ),
            problems,
        )
        _compare(
            "accountants",
            replay.accountants,
            _rows(conn, "SELECT dataset, spec, set_at FROM accountants", lambda r: r[0])
            if _has_table(conn, "accountants")
            else {},
            problems,
        )
        _compare(
            "sample_releases",
            replay.samples,
            _rows(
                conn,
                "SELECT dataset, sample, charge_id, rate, time FROM sample_releases",
                lambda r: (r[0], r[1]),
            )
            if _has_table(conn, "sample_releases")
            else {},
            problems,
        )
    if anchor_path is not None:
        if unreadable is not None:
            problems.append(unreadable)
        elif anchor is None:
            if db_seq > 1:
                problems.append(
                    f"the anchor file {anchor_path!r} is missing but the ledger has {db_seq} "
                    "entries: the anchor was deleted, or this database is a copy of a ledger"
                )
        elif anchor.ledger_id != ledger_id:
            if db_seq <= 1:
                problems.append(
                    f"the ledger database is new (no entry after its creation) but the anchor "
                    f"file records {anchor.seq} entries of another ledger: the ledger file "
                    "was deleted, or replaced by an empty copy (e.g. one taken without its "
                    "-wal file)"
                )
            else:
                problems.append(
                    f"the ledger's identity differs from the anchor's: this database is "
                    f"another ledger file than the one {anchor_path!r} belongs to"
                )
        elif anchor.seq > db_seq:
            problems.append(
                f"the ledger has {db_seq} entries but its anchor records {anchor.seq}: an older "
                "copy of the ledger was restored (or a copy made without its -wal file)"
            )
        else:
            at = hashes.get(anchor.seq)
            if at is None:
                row = conn.execute("SELECT hash FROM chain WHERE seq = ?", (anchor.seq,)).fetchone()
                at = None if row is None else str(row[0])
            if at != anchor.head:
                problems.append(
                    f"chain entry {anchor.seq} has another hash than the anchor records: the "
                    "history was rewritten"
                )
    return LedgerReport(
        ok=not problems,
        problems=tuple(problems),
        seq=db_seq,
        head=db_head,
        anchor_seq=None if anchor is None else anchor.seq,
        ledger_id=ledger_id,
    )


def _loss_json(loss: PrivacyLoss) -> dict[str, str]:
    kind, e, d, r = _encode(loss)
    out: dict[str, str] = {"type": kind}
    for name, value in (("epsilon", e), ("delta", d), ("rho", r)):
        if value is not None:
            out[name] = value
    return out


def _loss_from_json(data: Mapping[str, str]) -> PrivacyLoss:
    try:
        return _decode((data["type"], data.get("epsilon"), data.get("delta"), data.get("rho")))
    except KeyError as e:
        raise LedgerError("the anchor file holds a malformed privacy loss") from e


def _all_spent(conn: sqlite3.Connection) -> dict[str, dict[str, str]]:
    """Every dataset's exact spent total (in its cap's kind) as loss JSON."""
    out: dict[str, dict[str, str]] = {}
    caps = {
        r[0]: _decode(r[1:5])
        for r in conn.execute("SELECT name, loss_type, epsilon, delta, rho FROM datasets")
    }
    # Datasets with charges but no registration (budget lost by a rollback, acknowledged on
    # a database that does not know the dataset yet) count in their first charge's kind.
    registered = set(caps)
    for row in conn.execute(
        "SELECT dataset, loss_type, epsilon, delta, rho FROM charges WHERE id IN "
        "(SELECT MIN(id) FROM charges GROUP BY dataset)"
    ):
        caps.setdefault(row[0], _decode(row[1:5]))
    for name, cap in sorted(caps.items()):
        if name in registered:
            out[name] = _dataset_spent(conn, name, cap, _accountant(conn, name))
            continue
        try:
            out[name] = _dataset_spent(conn, name, cap, "basic")
        except LedgerError:
            # Lost ρ and δ of a zCDP dataset the database does not know yet.
            out[name] = _zcdp_json(_zcdp_spent(conn, name, analyst=None), "zcdp")
    return out


def _lost(w: _Write, dataset: str, anchored_json: Mapping[str, str], now: str) -> list[PrivacyLoss]:
    """The charges that make up what the anchor says was spent beyond what the database holds.

    A zCDP total lost with its registration is restored too: when the database spends the
    dataset with the basic accountant (the accountant was chosen after the restored copy was
    taken, hence before any charge), the anchor's accountant is recorded again first.
    """
    conn = w.conn
    row = conn.execute(
        "SELECT loss_type, epsilon, delta, rho FROM datasets WHERE name = ?", (dataset,)
    ).fetchone()
    if anchored_json.get("type") == "zcdp":
        anchored = _zcdp_from_json(anchored_json)
        if row is not None and _accountant(conn, dataset) == "basic":
            try:
                choice = parse_accountant(anchored_json.get("spec", "zcdp"))
                check_accountant(_decode(row), choice)
            except InvalidParameter as e:
                raise LedgerError(
                    f"dataset {dataset!r}'s anchor records a zCDP total that its cap cannot "
                    "be spent with; the lost budget cannot be expressed in it"
                ) from e
            _set_accountant(w, dataset, choice, now)
        here = _zcdp_spent(conn, dataset, analyst=None)
        out: list[PrivacyLoss] = []
        if anchored.rho > here.rho:
            out.append(Rho(rho=anchored.rho - here.rho))
        if anchored.delta > here.delta:
            out.append(EpsilonDelta(epsilon=0, delta=anchored.delta - here.delta))
        return out
    loss = _loss_from_json(anchored_json)
    kind_of = loss if row is None else _decode(row)
    if row is not None and _accountant(conn, dataset) != "basic":
        # Anchored before the zCDP choice (made while nothing was charged): count it as given.
        return [loss] if any(components(loss)) else []
    try:
        target = convert(loss, type(kind_of))
    except InvalidParameter as e:
        raise LedgerError(
            f"dataset {dataset!r}'s cap has another kind than the spent total its anchor "
            "records; the lost budget cannot be expressed in it"
        ) from e
    here_basic = _spent(conn, dataset, kind_of, analyst=None)
    diff = tuple(
        max(a - b, Fraction(0))
        for a, b in zip(components(target), components(here_basic), strict=True)
    )
    if not any(diff):
        return []
    return [from_components(type(kind_of), diff)]


# -- helpers (all run inside a transaction) ------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _check_name(value: object, what: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidParameter(f"{what} must be a non-empty string")


def _check_loss(value: object, what: str) -> None:
    if not isinstance(value, Epsilon | EpsilonDelta | Rho):
        raise InvalidParameter(f"{what} must be an Epsilon, EpsilonDelta or Rho")


def _text(f: Fraction) -> str:
    return f"{f.numerator}/{f.denominator}"


def _encode(loss: PrivacyLoss) -> tuple[LossType, str | None, str | None, str | None]:
    """Return ``(loss_type, epsilon, delta, rho)`` with exact ``"num/den"`` components."""
    if isinstance(loss, Epsilon):
        return "epsilon", _text(loss.epsilon), None, None
    if isinstance(loss, EpsilonDelta):
        return "epsilon_delta", _text(loss.epsilon), _text(loss.delta), None
    return "rho", None, None, _text(loss.rho)


def _parse(text: object) -> tuple[int, int]:
    """Parse a stored ``"num/den"`` into ``(num, den)`` without building a Fraction."""
    if isinstance(text, str):
        num, slash, den = text.partition("/")
        try:
            n, d = int(num), int(den)
        except ValueError:
            n, d = -1, 0
        if slash and n >= 0 and d > 0:
            return n, d
    raise LedgerError("the ledger holds a malformed privacy loss")


def _decode(row: tuple[object, ...] | list[object] | sqlite3.Row) -> PrivacyLoss:
    """Rebuild the loss of a row whose first four columns are ``(loss_type, ε, δ, ρ)``."""
    kind, e, d, r = row[0], row[1], row[2], row[3]
    if kind == "epsilon":
        return Epsilon(epsilon=Fraction(*_parse(e)))
    if kind == "epsilon_delta":
        return EpsilonDelta(epsilon=Fraction(*_parse(e)), delta=Fraction(*_parse(d)))
    if kind == "rho":
        return Rho(rho=Fraction(*_parse(r)))
    raise LedgerError("the ledger holds a malformed privacy loss")


def _cap(conn: sqlite3.Connection, dataset: str) -> PrivacyLoss:
    row = conn.execute(
        "SELECT loss_type, epsilon, delta, rho FROM datasets WHERE name = ?", (dataset,)
    ).fetchone()
    if row is None:
        raise UnknownDataset(
            f"dataset {dataset!r} is not registered in this ledger; the curator must register "
            "it with a budget first"
        )
    return _decode(row)


def _allowance(conn: sqlite3.Connection, dataset: str, analyst: str) -> PrivacyLoss | None:
    row = conn.execute(
        "SELECT loss_type, epsilon, delta, rho FROM allowances WHERE dataset = ? AND analyst = ?",
        (dataset, analyst),
    ).fetchone()
    return None if row is None else _decode(row)


def _loss_groups(conn: sqlite3.Connection, dataset: str, *, analyst: str | None) -> list[Any]:
    """Distinct stored losses on ``dataset`` (of one analyst if given) with their counts.

    Rows ``(loss_type, epsilon, delta, rho, count)``, as SQLite returns them: both
    accountants' totals (:func:`_spent`, :func:`_zcdp_spent`) read these.
    """
    where, args = "dataset = ?", [dataset]
    if analyst is not None:
        where, args = where + " AND analyst = ?", [dataset, analyst]
    return conn.execute(
        f"SELECT loss_type, epsilon, delta, rho, COUNT(*) FROM charges WHERE {where} "
        "GROUP BY loss_type, epsilon, delta, rho",
        args,
    ).fetchall()


def _spent(
    conn: sqlite3.Connection, dataset: str, cap: PrivacyLoss, *, analyst: str | None
) -> PrivacyLoss:
    """Exact sum of the charges on ``dataset`` (of one analyst if given), in the cap's kind.

    Each charge counts as the filter counted it when it was admitted: converted into the
    cap's kind by :func:`deniable.accounting.conversions.convert` (exact). SQLite groups
    identical losses first, and numerators over one denominator are added as integers, so
    the exact total costs a few integer operations per distinct loss value.
    """
    rows = _loss_groups(conn, dataset, analyst=analyst)
    kind, kind_name = type(cap), _encode(cap)[0]
    sums: list[dict[int, int]] = [{} for _ in components(cap)]  # per component: den -> num
    for row in rows:
        count = int(row[4])
        if row[0] == kind_name:  # the common case: no conversion, no Fraction built
            values = [_parse(text) for text in row[1:4] if text is not None]
        else:
            try:
                converted = convert(_decode(row), kind)
            except InvalidParameter as e:
                raise LedgerError(
                    f"dataset {dataset!r} holds a charge that its cap's kind cannot express"
                ) from e
            values = [(f.numerator, f.denominator) for f in components(converted)]
        if len(values) != len(sums):
            raise LedgerError("the ledger holds a malformed privacy loss")
        for bucket, (num, den) in zip(sums, values, strict=True):
            bucket[den] = bucket.get(den, 0) + num * count
    total = tuple(sum((Fraction(n, d) for d, n in b.items()), Fraction(0)) for b in sums)
    return from_components(kind, total)


def _within(a: PrivacyLoss, b: PrivacyLoss) -> bool:
    """Whether ``a`` and ``b`` are of one kind and ``a <= b`` component-wise."""
    return type(a) is type(b) and all(
        x <= y for x, y in zip(components(a), components(b), strict=True)
    )


def _meet(a: PrivacyLoss, b: PrivacyLoss) -> PrivacyLoss:
    """Component-wise minimum of two losses of one kind: what fits under both fits under it."""
    if type(a) is not type(b):
        raise LedgerError("an allowance has another loss kind than its dataset's cap")
    return from_components(
        type(a), tuple(min(x, y) for x, y in zip(components(a), components(b), strict=True))
    )


def _admit(budget: BudgetFilter | ZCDPFilter, loss: PrivacyLoss, where: str) -> None:
    """Ask the filter to admit ``loss``; add ``where`` to its refusal, keeping its figures."""
    try:
        budget.charge(loss)
    except BudgetExceeded as e:
        raise BudgetExceeded(f"{where}: {e}", requested=e.requested, remaining=e.remaining) from e


def _record_event(
    w: _Write,
    dataset: str,
    action: Literal["register", "change_cap", "set_allowance"],
    analyst: str | None,
    loss: PrivacyLoss,
    previous: PrivacyLoss | None,
    now: str,
) -> None:
    prev_text = None if previous is None else json.dumps(list(_encode(previous)))
    cursor = w.conn.execute(
        "INSERT INTO curator_events (dataset, action, analyst, loss_type, epsilon, delta, rho, "
        "previous, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (dataset, action, analyst, *_encode(loss), prev_text, now),
    )
    w.append(
        action,
        {
            "event_id": cursor.lastrowid,
            "dataset": dataset,
            "analyst": analyst,
            "loss": list(_encode(loss)),
            "previous": prev_text,
            "time": now,
        },
    )


def _encode_details(details: Mapping[str, object] | None) -> str:
    if details is None:
        return "{}"
    if not isinstance(details, Mapping) or not all(isinstance(k, str) for k in details):
        raise InvalidParameter("details must be a mapping with string keys")
    try:
        return json.dumps(dict(details), sort_keys=True, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidParameter(
            "details must be JSON-serialisable (str, int, finite float, bool, None, lists and "
            "mappings of those)"
        ) from e


def _decode_details(text: str) -> Mapping[str, object]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise LedgerError("the ledger holds malformed charge details")
    return MappingProxyType(value)


# -- accountants and sample releases (all run inside a transaction) ------------------------

_SAMPLED_UNDER_ZCDP = (
    "this dataset spends its budget with the zCDP accountant, which cannot take the charges of "
    "queries on a Bernoulli sample: they are increments of one amplified total, a guarantee "
    "only added up (docs/accounting.md); nothing was charged. Query the table without "
    "sample_rate, or a sampled table of a dataset with accountant='basic'"
)

_CONSUMED_MESSAGE = (
    "this sample was consumed by a release whose guarantee relies on sampling alone (e.g. safe "
    "k-anonymization, Li–Qardaji–Su §2.6); nothing else may be released from it: draw a fresh "
    "sample"
)


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def _ensure_extensions(conn: sqlite3.Connection) -> None:
    """Create the tables added after schema version 2 if this ledger predates them."""
    if not (_has_table(conn, "accountants") and _has_table(conn, "sample_releases")):
        for statement in _EXTENSIONS:
            conn.execute(statement)


def _accountant(conn: sqlite3.Connection, dataset: str) -> Accountant:
    if not _has_table(conn, "accountants"):
        return "basic"
    row = conn.execute("SELECT spec FROM accountants WHERE dataset = ?", (dataset,)).fetchone()
    if row is None:
        return "basic"
    try:
        return parse_accountant(str(row[0]))
    except InvalidParameter as e:
        raise LedgerError(f"dataset {dataset!r} has a malformed accountant") from e


def _set_accountant(w: _Write, dataset: str, accountant: Accountant, now: str) -> None:
    _ensure_extensions(w.conn)
    spec = accountant_spec(accountant)
    w.conn.execute(
        "INSERT INTO accountants (dataset, spec, set_at) VALUES (?, ?, ?) "
        "ON CONFLICT (dataset) DO UPDATE SET spec = excluded.spec, set_at = excluded.set_at",
        (dataset, spec, now),
    )
    w.append("set_accountant", {"dataset": dataset, "spec": spec, "time": now})


def _zcdp_spent(conn: sqlite3.Connection, dataset: str, *, analyst: str | None) -> ZCDPSpent:
    """Exact ``(Σρᵢ, Σδᵢ)`` of the charges on ``dataset`` (of one analyst if given)."""
    rows = _loss_groups(conn, dataset, analyst=analyst)
    rho, delta = Fraction(0), Fraction(0)
    for row in rows:
        one = zcdp_charge(_decode(row))
        rho += one.rho * int(row[4])
        delta += one.delta * int(row[4])
    return ZCDPSpent(rho=rho, delta=delta)


def _filter(
    conn: sqlite3.Connection,
    dataset: str,
    cap: PrivacyLoss,
    accountant: Accountant,
    *,
    analyst: str | None,
) -> BudgetFilter | ZCDPFilter:
    """The filter of ``cap`` (the dataset's or an allowance) with what was spent against it."""
    try:
        if accountant == "basic":
            dataset_cap = _cap(conn, dataset)
            return BudgetFilter(cap, spent=_spent(conn, dataset, dataset_cap, analyst=analyst))
        return make_filter(cap, accountant, spent=_zcdp_spent(conn, dataset, analyst=analyst))
    except InvalidParameter as e:
        raise LedgerError(f"dataset {dataset!r}'s cap cannot be spent by its accountant") from e


def _filter_total(budget: BudgetFilter | ZCDPFilter) -> dict[str, str]:
    """What the anchor records: the exact spent total (a loss, or ``(Σρ, Σδ)``), as JSON."""
    if isinstance(budget, ZCDPFilter):
        return _zcdp_json(budget.used, budget.accountant.spec)
    return _loss_json(budget.spent)


def _check_zcdp_cap_change(
    conn: sqlite3.Connection,
    dataset: str,
    old: PrivacyLoss,
    cap: PrivacyLoss,
    accountant: Accountant,
) -> None:
    """Refuse a new cap for a charged zCDP dataset unless it only lowers the old one.

    The zCDP filter's guarantee (Feldman–Zrnic's Rényi filter, Whitehouse et al.'s filter for
    approximate zCDP) holds for a budget fixed before the first charge. A lower cap only
    makes the filter stop earlier: every run it admits is a run the old filter admits too
    (an analyst may always stop asking), so the old cap's guarantee still covers it (the
    lower cap is then a spending limit; it is the guarantee itself only if lowering did not
    depend on the answers). A higher cap, chosen after answers were seen, is covered by no
    theorem. "Lower" is checked where admission happens: ``ε`` and ``δ`` at most the old
    ones *and* the new ``ρ_max`` and δ pool at most the old ones.

    Raises:
        InvalidParameter: the new cap is not below the old one in that sense.
    """
    before = _filter(conn, dataset, old, accountant, analyst=None)
    after = _filter(conn, dataset, cap, accountant, analyst=None)
    lowered = (
        _within(cap, old)
        and isinstance(before, ZCDPFilter)
        and isinstance(after, ZCDPFilter)
        and after.rho_max <= before.rho_max
        and after.delta_pool <= before.delta_pool
    )
    if not lowered:
        raise InvalidParameter(
            f"dataset {dataset!r} spends its cap through the zCDP accountant and already has "
            f"charges: its cap ({old}) cannot be raised to {cap}. The zCDP filter is sound "
            "for adaptively chosen queries only with a budget fixed before the first charge "
            "(a cap raised after answers were seen voids the guarantee); it may only be "
            "lowered (ε and δ both at most the current ones). Nothing was changed."
        )


def _kind_name(loss: PrivacyLoss) -> str:
    """``(ε, δ)``, ``ε`` or ``ρ``: the kind of a budget, as messages name it."""
    if isinstance(loss, EpsilonDelta):
        return "(ε, δ)"
    return "ε" if isinstance(loss, Epsilon) else "ρ"


def _over(budget: BudgetFilter | ZCDPFilter) -> bool:
    """Whether ``budget`` has spent more than its cap (e.g. after lowering the cap)."""
    if isinstance(budget, ZCDPFilter):
        used = budget.used
        return used.rho > budget.rho_max or used.delta > budget.delta_pool
    return not _within(budget.spent, budget.cap)


def _dataset_spent(
    conn: sqlite3.Connection, dataset: str, cap: PrivacyLoss, accountant: Accountant
) -> dict[str, str]:
    """``dataset``'s exact spent total as the anchor records it (JSON)."""
    if accountant == "basic":
        return _loss_json(_spent(conn, dataset, cap, analyst=None))
    return _zcdp_json(_zcdp_spent(conn, dataset, analyst=None), accountant_spec(accountant))


def _zcdp_json(total: ZCDPSpent, spec: str) -> dict[str, str]:
    """A zCDP total for the anchor: ``Σρ``, ``Σδ`` and the accountant that spends them."""
    return {"type": "zcdp", "rho": _text(total.rho), "delta": _text(total.delta), "spec": spec}


def _zcdp_from_json(data: Mapping[str, str]) -> ZCDPSpent:
    try:
        return ZCDPSpent(rho=Fraction(*_parse(data["rho"])), delta=Fraction(*_parse(data["delta"])))
    except KeyError as e:
        raise LedgerError("the anchor file holds a malformed zCDP total") from e


def _admit_both(
    conn: sqlite3.Connection, dataset: str, analyst: str | None, loss: PrivacyLoss
) -> BudgetFilter | ZCDPFilter:
    """Admit ``loss`` against the dataset's filter and the analyst's allowance, or raise.

    Returns the dataset's filter with ``loss`` charged. Nothing is written here.
    """
    cap = _cap(conn, dataset)
    accountant = _accountant(conn, dataset)
    budget = _filter(conn, dataset, cap, accountant, analyst=None)
    allowance = None if analyst is None else _allowance(conn, dataset, analyst)
    if allowance is None:
        _admit(budget, loss, f"dataset {dataset!r}")
        return budget
    # Check both before writing; when either refuses, report what is really left: the
    # component-wise minimum of the two remainders.
    mine = _filter(conn, dataset, allowance, accountant, analyst=analyst)
    if not (budget.can_charge(loss) and mine.can_charge(loss)):
        left = _meet(budget.remaining_for(loss), mine.remaining_for(loss))
        raise BudgetExceeded(
            f"{loss} does not fit the budget of dataset {dataset!r} for analyst "
            f"{analyst!r}: only {left} is left; nothing was spent",
            requested=loss,
            remaining=left,
        )
    _admit(mine, loss, f"analyst {analyst!r}'s allowance on dataset {dataset!r}")
    _admit(budget, loss, f"dataset {dataset!r}")
    return budget


_QUERIED_MESSAGE = (
    "this sample already answered queries, so a release whose guarantee comes from sampling "
    "alone may not use it (Li–Qardaji–Su §2.6: its sample must answer nothing else); draw a "
    "fresh sample for it; nothing was charged"
)


def _queried(conn: sqlite3.Connection, dataset: str, sample: str) -> bool:
    """Whether a query on ``dataset`` was charged on ``sample`` (its details name it)."""
    row = conn.execute(
        "SELECT 1 FROM charges WHERE dataset = ? "
        "AND json_extract(details, '$.sampling.sample') = ? LIMIT 1",
        (dataset, sample),
    ).fetchone()
    return row is not None


def _consumed(conn: sqlite3.Connection, dataset: str, sample: str) -> bool:
    if not _has_table(conn, "sample_releases"):
        return False
    row = conn.execute(
        "SELECT 1 FROM sample_releases WHERE dataset = ? AND sample = ?", (dataset, sample)
    ).fetchone()
    return row is not None


def _check_sample(sample: object) -> None:
    if (
        not isinstance(sample, str)
        or not 8 <= len(sample) <= 128
        or not all(c.isascii() and (c.isalnum() or c in "-_:.") for c in sample)
    ):
        raise InvalidParameter(
            "sample must be an opaque identity of 8 to 128 letters, digits or '-_:.' "
            "(deniable.ledger.new_sample_id()); never derive it from the data"
        )


def _rate(rate: object) -> Fraction:
    if not isinstance(rate, Fraction | int | float):
        raise InvalidParameter("rate must be a number in (0, 1]")
    beta = exact(rate, "rate")
    if not 0 < beta <= 1:
        raise InvalidParameter("rate must be a sampling rate in (0, 1]")
    return beta

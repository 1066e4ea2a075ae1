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
* **The admission rule is not here.** The ledger rebuilds a
  :class:`deniable.accounting.filter.BudgetFilter` from the stored cap and total and asks it;
  a refused charge raises its :class:`~deniable.errors.BudgetExceeded` and writes nothing.
* **Budgets belong to the dataset.** Per-analyst allowances are slices of the one global cap
  (analysts who collude add up): a charge must fit both the analyst's slice and the cap.
  Slices may overlap (their sum may exceed the cap); the cap still bounds everyone together.
* **Charges are facts.** The ``charges`` table is append-only (SQLite triggers refuse deletes
  and any update other than marking a charge answered); a curator's change of cap or
  allowance is itself recorded in ``curator_events``.

The answer cache and its crash window: the query engine charges, computes the noisy answer,
stores it with :meth:`Ledger.store_answer`, then returns it. A repeated identical query (same
``query_key``) is answered from :meth:`Ledger.cached_answer` at no cost — re-publishing a
released answer is post-processing. If the process dies between the charge and the store,
the charge stays (and counts) but there is no stored answer, so the repeat is charged again.
The error is always on the side of paying twice, never of answering twice for one payment:
an answer row cannot exist without the committed charge it references. Two processes asking
the same new query at the same moment may likewise both pay.

A :class:`Ledger` object may be shared by threads (calls are serialised by a lock) but not
across ``fork``: open one per process.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from types import MappingProxyType
from typing import Literal

from deniable.accounting.composition import components, from_components
from deniable.accounting.conversions import convert
from deniable.accounting.filter import BudgetFilter
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    InvalidParameter,
    LedgerError,
    UnknownDataset,
)

SCHEMA_VERSION = 1
"""Version of the on-disk schema, stored in the ``meta`` table."""

ChargeStatus = Literal["charged", "answered"]
LossType = Literal["epsilon", "epsilon_delta", "rho"]

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

_SCHEMA: tuple[str, ...] = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT",
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
    f"""CREATE TABLE charges (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        dataset TEXT NOT NULL REFERENCES datasets(name),
        analyst TEXT NOT NULL,
        query_key TEXT NOT NULL,
        query_text TEXT NOT NULL,{_LOSS_COLUMNS},
        time TEXT NOT NULL,
        details TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('charged', 'answered'))
    ) STRICT""",
    "CREATE INDEX charges_by_analyst ON charges (dataset, analyst)",
    """CREATE TRIGGER charges_append_only_delete BEFORE DELETE ON charges
    BEGIN SELECT RAISE(ABORT, 'ledger charges are append-only'); END""",
    """CREATE TRIGGER charges_append_only_update BEFORE UPDATE ON charges
    WHEN NEW.id IS NOT OLD.id OR NEW.dataset IS NOT OLD.dataset
        OR NEW.analyst IS NOT OLD.analyst OR NEW.query_key IS NOT OLD.query_key
        OR NEW.query_text IS NOT OLD.query_text OR NEW.loss_type IS NOT OLD.loss_type
        OR NEW.epsilon IS NOT OLD.epsilon OR NEW.delta IS NOT OLD.delta
        OR NEW.rho IS NOT OLD.rho OR NEW.time IS NOT OLD.time
        OR NEW.details IS NOT OLD.details
        OR NOT (NEW.status = OLD.status OR (OLD.status = 'charged' AND NEW.status = 'answered'))
    BEGIN SELECT RAISE(ABORT, 'ledger charges are append-only'); END""",
    """CREATE TABLE answers (
        charge_id INTEGER PRIMARY KEY REFERENCES charges(id),
        dataset TEXT NOT NULL,
        query_key TEXT NOT NULL,
        payload BLOB NOT NULL,
        time TEXT NOT NULL
    ) STRICT""",
    "CREATE INDEX answers_by_key ON answers (dataset, query_key, charge_id)",
)


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


class Ledger:
    """A durable, transactional privacy-budget ledger in one SQLite file.

    Opening creates the file and its schema if needed; several processes may open and use the
    same path at once. Nothing here releases data, so no method has a privacy loss of its own:
    :meth:`charge` *records* the loss of a release the caller is about to make.

    Args:
        path: the SQLite file (created if missing; its directory must exist).
        timeout: seconds to wait for another process's write lock before failing with
            :class:`~deniable.errors.LedgerError`.

    Raises:
        LedgerError: the file cannot be opened, is not a deniable ledger, or has a schema
            version this code does not know.

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

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 30.0) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise InvalidParameter("timeout must be a positive number of seconds")
        self._path = os.fspath(path)
        self._lock = threading.RLock()
        try:
            conn = sqlite3.connect(
                self._path, timeout=float(timeout), isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as e:
            raise LedgerError(f"cannot open the ledger at {self._path!r}") from e
        self._conn: sqlite3.Connection | None = conn
        try:
            self._configure(conn, deadline=time.monotonic() + float(timeout))
        except BaseException as e:
            conn.close()
            self._conn = None
            if isinstance(e, sqlite3.Error):
                raise LedgerError(f"cannot open the ledger at {self._path!r}") from e
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

    def close(self) -> None:
        """Close the connection; committed charges are already durable."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

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
        # An existing ledger is checked under a read transaction (no write lock needed, so
        # opening never waits for a writer); a new one is created under the write lock,
        # where a process that lost the race to create it finds the finished schema.
        with self._transaction(write=False) as conn:
            exists = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"
            ).fetchone()
        with self._transaction(write=exists is None) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            if "meta" not in tables:
                if tables:
                    raise LedgerError(f"{self._path!r} is an SQLite file but not a ledger")
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                    (str(SCHEMA_VERSION),),
                )
                return
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None or row[0] != str(SCHEMA_VERSION):
                found = "none" if row is None else row[0]
                raise LedgerError(
                    f"ledger schema version {found} at {self._path!r} is not supported "
                    f"(this deniable reads version {SCHEMA_VERSION})"
                )

    # -- curator --------------------------------------------------------------------------

    def register(self, dataset: str, cap: PrivacyLoss, *, allow_change: bool = False) -> None:
        """Record ``dataset``'s total budget ``cap``.

        Registering again with an equal cap is a no-op. A different cap is refused unless the
        curator passes ``allow_change=True``; the change is then recorded as a curator event.
        A changed cap can never fall below what was already spent, and its kind (ε, (ε, δ),
        ρ) can change only while nothing has been charged.

        Raises:
            CapConflict: the dataset has a different cap and ``allow_change`` is False.
            InvalidParameter: malformed arguments, or a change that would un-spend budget.
            LedgerError: storage failure.
        """
        _check_name(dataset, "dataset")
        _check_loss(cap, "cap")
        with self._transaction(write=True) as conn:
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
                _record_event(conn, dataset, "register", None, cap, None, now)
                return
            old = _decode(row)
            if old == cap:
                return
            if not allow_change:
                raise CapConflict(
                    f"dataset {dataset!r} is already registered with cap {old!r}; a curator "
                    "can change it only explicitly, with register(..., allow_change=True)"
                )
            if type(old) is not type(cap):
                n = conn.execute(
                    "SELECT COUNT(*) FROM charges WHERE dataset = ?", (dataset,)
                ).fetchone()[0]
                if n:
                    raise InvalidParameter(
                        f"dataset {dataset!r} has charges in {type(old).__name__}; its cap "
                        f"cannot become a {type(cap).__name__}"
                    )
            else:
                spent = _spent(conn, dataset, old, analyst=None)
                if not _within(spent, cap):
                    raise InvalidParameter(
                        f"dataset {dataset!r} has already spent {spent!r}; its cap cannot be "
                        "lowered below that"
                    )
            conn.execute(
                "UPDATE datasets SET loss_type = ?, epsilon = ?, delta = ?, rho = ? WHERE name = ?",
                (*_encode(cap), dataset),
            )
            _record_event(conn, dataset, "change_cap", None, cap, old, now)

    def set_allowance(self, dataset: str, analyst: str, cap: PrivacyLoss) -> None:
        """Give ``analyst`` a slice ``cap`` of ``dataset``'s budget (replacing any previous one).

        The slice must be of the dataset cap's kind and fit inside it. Slices of several
        analysts may overlap; every charge must fit both its analyst's slice and the global
        cap. Analysts without an allowance are bounded by the global cap only.

        Raises:
            UnknownDataset: the dataset is not registered.
            InvalidParameter: the slice is of another kind or does not fit inside the cap.
            LedgerError: storage failure.
        """
        _check_name(dataset, "dataset")
        _check_name(analyst, "analyst")
        _check_loss(cap, "cap")
        with self._transaction(write=True) as conn:
            total = _cap(conn, dataset)
            if not _within(cap, total):
                raise InvalidParameter(
                    f"an allowance is a slice of dataset {dataset!r}'s cap {total!r}; "
                    f"{cap!r} does not fit inside it"
                )
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
            _record_event(conn, dataset, "set_allowance", analyst, cap, previous, now)

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
    ) -> Charge:
        """Admit and durably record a release of privacy loss ``loss`` on ``dataset``.

        In one ``BEGIN IMMEDIATE`` transaction: read the cap and the exact spent total (and the
        analyst's slice, if any), ask :class:`~deniable.accounting.filter.BudgetFilter` to
        admit ``loss``, insert the charge, commit. Returns only after the commit, so the caller
        may compute and release the answer once this returns — never before. ``details`` and
        ``query_text`` are stored as given: put public metadata there, never data values.

        The row keeps ``loss`` as given (the fact); totals count it as the filter does, in the
        cap's kind (pure ε into an ``(ε, δ)`` cap as ``(ε, 0)``, into a ρ cap as ``ε²/2``).

        Raises:
            BudgetExceeded: ``loss`` does not fit what is left (its ``remaining`` says what
                is); nothing was written.
            UnknownDataset: the dataset is not registered.
            InvalidParameter: malformed arguments, or a loss the cap's kind cannot express
                (e.g. ρ against an ``(ε, δ)`` cap); checked before anything is written.
            LedgerError: storage failure; nothing was recorded, so nothing may be released.
        """
        _check_name(dataset, "dataset")
        _check_name(analyst, "analyst")
        _check_loss(loss, "loss")
        if not isinstance(query_key, str) or not query_key:
            raise InvalidParameter("query_key must be a non-empty string")
        if not isinstance(query_text, str):
            raise InvalidParameter("query_text must be a string")
        details_json = _encode_details(details)
        with self._transaction(write=True) as conn:
            cap = _cap(conn, dataset)
            budget = BudgetFilter(cap, spent=_spent(conn, dataset, cap, analyst=None))
            allowance = _allowance(conn, dataset, analyst)
            if allowance is None:
                _admit(budget, loss, f"dataset {dataset!r}")
            else:
                # Check both before writing; when either refuses, report what is really left:
                # the component-wise minimum of the two remainders.
                mine = BudgetFilter(allowance, spent=_spent(conn, dataset, cap, analyst=analyst))
                left = _meet(budget.remaining, mine.remaining)
                if not (budget.can_charge(loss) and mine.can_charge(loss)):
                    raise BudgetExceeded(
                        f"{loss!r} does not fit the budget of dataset {dataset!r} for analyst "
                        f"{analyst!r}: {left!r} is left",
                        requested=loss,
                        remaining=left,
                    )
                _admit(mine, loss, f"analyst {analyst!r}'s allowance on dataset {dataset!r}")
                _admit(budget, loss, f"dataset {dataset!r}")
            now = _now()
            cursor = conn.execute(
                "INSERT INTO charges (dataset, analyst, query_key, query_text, loss_type, "
                "epsilon, delta, rho, time, details, status) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'charged')",
                (dataset, analyst, query_key, query_text, *_encode(loss), now, details_json),
            )
            charge_id = cursor.lastrowid
            if charge_id is None:  # pragma: no cover - sqlite3 always sets it after INSERT
                raise LedgerError("the ledger did not return the new charge's id")
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
        )

    # -- answer cache ---------------------------------------------------------------------

    def store_answer(self, charge_id: int, payload: bytes | bytearray | memoryview) -> None:
        """Store the released answer of charge ``charge_id`` so an identical query reuses it.

        Storing the same bytes twice is a no-op; a different payload for a charge that
        already has one is refused (a released answer never changes).

        Raises:
            InvalidParameter: no such charge, or a payload that is not bytes.
            LedgerError: a different answer is already stored, or storage failure.
        """
        if isinstance(charge_id, bool) or not isinstance(charge_id, int):
            raise InvalidParameter("charge_id must be the integer id of a Charge")
        if not isinstance(payload, bytes | bytearray | memoryview):
            raise InvalidParameter("payload must be bytes")
        data = bytes(payload)
        with self._transaction(write=True) as conn:
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
            conn.execute(
                "INSERT INTO answers (charge_id, dataset, query_key, payload, time) "
                "VALUES (?, ?, ?, ?, ?)",
                (charge_id, row[0], row[1], data, _now()),
            )
            conn.execute("UPDATE charges SET status = 'answered' WHERE id = ?", (charge_id,))

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
        """Return the exact total charged on ``dataset`` (by ``analyst`` only, if given)."""
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            return _spent(conn, dataset, _cap(conn, dataset), analyst=analyst)

    def remaining(self, dataset: str, *, analyst: str | None = None) -> PrivacyLoss:
        """Return what is left of ``dataset``'s budget (for ``analyst``, if given).

        For an analyst with an allowance this is the component-wise minimum of what is left
        of the slice and of the global cap.
        """
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            cap = _cap(conn, dataset)
            left = BudgetFilter(cap, spent=_spent(conn, dataset, cap, analyst=None)).remaining
            if analyst is None:
                return left
            allowance = _allowance(conn, dataset, analyst)
            if allowance is None:
                return left
            mine = BudgetFilter(allowance, spent=_spent(conn, dataset, cap, analyst=analyst))
            return _meet(left, mine.remaining)

    def history(self, dataset: str) -> list[Charge]:
        """Return every charge on ``dataset`` in commit order."""
        _check_name(dataset, "dataset")
        with self._transaction(write=False) as conn:
            _cap(conn, dataset)
            rows = conn.execute(
                "SELECT id, dataset, analyst, query_key, query_text, loss_type, epsilon, delta, "
                "rho, time, details, status FROM charges WHERE dataset = ? ORDER BY id",
                (dataset,),
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


def _spent(
    conn: sqlite3.Connection, dataset: str, cap: PrivacyLoss, *, analyst: str | None
) -> PrivacyLoss:
    """Exact sum of the charges on ``dataset`` (of one analyst if given), in the cap's kind.

    Each charge counts as the filter counted it when it was admitted: converted into the
    cap's kind by :func:`deniable.accounting.conversions.convert` (exact). SQLite groups
    identical losses first, and numerators over one denominator are added as integers, so
    the exact total costs a few integer operations per distinct loss value.
    """
    where, args = "dataset = ?", [dataset]
    if analyst is not None:
        where, args = where + " AND analyst = ?", [dataset, analyst]
    rows = conn.execute(
        f"SELECT loss_type, epsilon, delta, rho, COUNT(*) FROM charges WHERE {where} "
        "GROUP BY loss_type, epsilon, delta, rho",
        args,
    ).fetchall()
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


def _admit(budget: BudgetFilter, loss: PrivacyLoss, where: str) -> None:
    """Ask the filter to admit ``loss``; add ``where`` to its refusal, keeping its figures."""
    try:
        budget.charge(loss)
    except BudgetExceeded as e:
        raise BudgetExceeded(f"{where}: {e}", requested=e.requested, remaining=e.remaining) from e


def _record_event(
    conn: sqlite3.Connection,
    dataset: str,
    action: str,
    analyst: str | None,
    loss: PrivacyLoss,
    previous: PrivacyLoss | None,
    now: str,
) -> None:
    conn.execute(
        "INSERT INTO curator_events (dataset, action, analyst, loss_type, epsilon, delta, rho, "
        "previous, time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            dataset,
            action,
            analyst,
            *_encode(loss),
            None if previous is None else json.dumps(list(_encode(previous))),
            now,
        ),
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

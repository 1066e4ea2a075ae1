"""The ledger's facade: one :class:`Ledger` over a storage backend, every guarantee kept here.

Guarantees (DESIGN.md §7), each with the mechanism that keeps it:

* **No answer leaves without a committed charge.** :meth:`Ledger.charge` admits and records a
  release in one write transaction and returns only after ``COMMIT``; the backends make a
  commit durable (SQLite: WAL with ``synchronous=FULL``; PostgreSQL: its write-ahead log).
* **Serialisable reservation.** A write transaction is serialised against every other writer
  of the ledger from before the spent total is read (SQLite's ``BEGIN IMMEDIATE``;
  PostgreSQL's advisory lock), so concurrent processes — on several hosts, with PostgreSQL —
  are admitted one at a time and can never overspend the cap together.
* **Exact arithmetic.** Losses are stored as their type plus exact rationals written as text
  ``"num/den"``; totals are recomputed exactly from the rows, never from floats.
* **The admission rule is not here.** The ledger rebuilds the dataset's filter from the stored
  cap, accountant and charges and asks it (:mod:`deniable.ledger.budget`); a refused charge
  raises its :class:`~deniable.errors.BudgetExceeded` and writes nothing. The accountant is
  chosen with the cap (:meth:`Ledger.register`, ``accountant=``): ``"basic"`` (the default,
  :class:`deniable.accounting.filter.BudgetFilter`: losses add) or ``"zcdp"`` (an ``(ε, δ)``
  cap spent as ρ-zCDP, :class:`deniable.accounting.renyi.ZCDPFilter`; ρ charges are then
  admitted). The choice is a chained fact like the cap, and can change only before the
  first charge; after it, a zCDP dataset's cap can only be lowered (its filter theorems need
  the budget fixed in advance). The zCDP accountant refuses the charges of queries on a
  Bernoulli sample (increments of one amplified total, valid only added up).
* **Sample discipline** (Li–Qardaji–Su §2.6, :mod:`deniable.ledger.samples`). A release whose
  guarantee comes from sampling alone is recorded with :meth:`Ledger.record_sample_release`;
  the sample is then *consumed*: a second release on it is refused.
* **Budgets belong to the dataset.** Per-analyst allowances are slices of the one global cap
  (analysts who collude add up): a charge must fit both the analyst's slice and the cap.
  Slices may overlap (their sum may exceed the cap); the cap still bounds everyone together.
  A *reserved* slice (``set_allowance(..., reserve=True)``) is also held back: what its
  analyst has not spent of it counts as spent for every other analyst, checked in the same
  serialised transaction as admission (:mod:`deniable.ledger.budget`). Analysts are shown
  their own release numbers (:attr:`Charge.number`), never the global ids.
* **Charges are facts.** The tables are append-only (triggers in both backends, and on
  PostgreSQL grants as a first wall); a curator's change of cap or allowance is itself
  recorded in ``curator_events``.
* **Tamper evidence** (:mod:`deniable.ledger.chain`, :mod:`deniable.ledger.integrity`). Every
  mutation also appends an entry to a hash chain in the same transaction, and an anchor file
  outside the database (``<path>.anchor`` by default) records the ledger's identity, last
  entry and spent totals after each commit. Opening the ledger replays the chain and
  compares it with every table and with the anchor; it finds a deleted database (the anchor
  remains), an older copy restored (fewer entries than the anchor), a copy taken without its
  ``-wal`` file, another ledger's file (identity differs) and a hand-edited row (triggers can
  be dropped by whoever has the file; the chain then no longer matches the table). A
  tampered ledger opens for inspection but refuses :meth:`Ledger.charge`,
  :meth:`Ledger.register`, :meth:`Ledger.set_allowance` and :meth:`Ledger.add_analyst` with
  :class:`~deniable.errors.LedgerTampered` until a curator calls :meth:`Ledger.acknowledge`,
  which never gives budget back (a lost database gets the anchor's caps and spent totals
  back; a row edited by hand is written back or counts at the larger of its two amounts).
  What it cannot see: the database and its anchor restored or copied *together* (a VM
  snapshot of one directory) — keep the anchor on another disk or host (``anchor=``).
* **Backups.** :meth:`Ledger.backup` writes one consistent snapshot as a single SQLite ledger
  file (SQLite's online backup API; a copy of every row from PostgreSQL) and verifies it.
  Restoring a backup over a live ledger is a rollback: its anchor reports it and the
  curator's acknowledgement charges what the backup misses.
* **Schema versions.** A file of schema version 1 (before the chain) is refused with a
  :class:`~deniable.errors.LedgerError` that says how to carry on.

The answer cache and its crash window (:mod:`deniable.ledger.answers`): the query engine
charges, computes the noisy answer, stores it with :meth:`Ledger.store_answer`, then returns
it. A repeated identical query (same ``query_key``) is answered from
:meth:`Ledger.cached_answer` at no cost — re-publishing a released answer is
post-processing. If the process dies between the charge and the store, the charge stays (and
counts) but there is no stored answer, so the repeat is charged again. The error is always on
the side of paying twice, never of answering twice for one payment: an answer row cannot
exist without the committed charge it references. Two processes asking the same new query at
the same moment may likewise both pay (an idempotency key, ``charge(...,
idempotency_key=...)``, makes a retried request pay once).

A :class:`Ledger` object may be shared by threads (calls are serialised by a lock) but not
across ``fork``: open one per process.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager, suppress
from datetime import datetime
from fractions import Fraction
from typing import Any

from deniable.accounting.filter import (
    Accountant,
    BudgetFilter,
    accountant_spec,
    check_accountant,
    parse_accountant,
)
from deniable.accounting.loss import EpsilonDelta, PrivacyLoss
from deniable.accounting.renyi import ZCDPFilter
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DeniableError,
    DuplicateRequest,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
    Remedy,
    UnsafeQuery,
    remedied,
)
from deniable.ledger import analysts as people
from deniable.ledger import answers, budget, chain, samples
from deniable.ledger.analysts import ROLES, AnalystInfo, Principal, Role, new_token, token_digest
from deniable.ledger.budget import (
    ALL_CAPS,
    IDEMPOTENT,
    SAMPLED_UNDER_ZCDP,
    ChargeBatch,
    accountant_of,
    admit_and_insert,
    admit_both,
    admit_charge,
    all_spent,
    allowance_of,
    cap_of,
    check_zcdp_cap_change,
    dataset_spent,
    filter_of,
    insert_charge,
    kind_name,
    lost_budget,
    over,
    record_charge,
    record_event,
    set_accountant,
    spent_total,
    within,
)
from deniable.ledger.chain import (
    Write,
    WriteMode,
    anchor_key,
    audit,
    confirms,
    counted,
    latest_checkpoint,
    live_check,
    make_checkpoint,
    vouched,
)
from deniable.ledger.group import GroupCommit, Request
from deniable.ledger.integrity import (
    GENESIS,
    Anchor,
    AnchorUnreadable,
    FileLock,
    LedgerReport,
    read_anchor,
    write_anchor,
)
from deniable.ledger.records import (
    CHARGE_COLUMNS,
    LOST_BY_ROLLBACK,
    SCHEMA_VERSION,
    Charge,
    CuratorEvent,
    SampleRelease,
    check_loss,
    check_name,
    check_not_reserved,
    decode_details,
    decode_loss,
    encode_details,
    encode_loss,
    fraction_text,
    parse_fraction,
    utc_now,
)
from deniable.ledger.store import Counted, Store, Tx

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
"""Prefixes of a ledger location that names a PostgreSQL database instead of a file."""


def open_store(location: str, *, timeout: float, read_only: bool = False) -> Store:
    """The backend for ``location``: PostgreSQL for a ``postgresql://`` URL, else SQLite.

    Backends are imported here, when used, so SQLite users never load a PostgreSQL driver.
    """
    if location.startswith(POSTGRES_SCHEMES):
        from deniable.ledger.postgres import PostgresStore

        return PostgresStore(location, timeout=timeout, read_only=read_only)
    from deniable.ledger.sqlite import SQLiteStore

    return SQLiteStore(location, timeout=timeout, read_only=read_only)


class Ledger:
    """A durable, transactional, tamper-evident privacy-budget ledger.

    Opening creates the database and its schema if needed, then verifies it (see the module
    docstring); several processes may open and use the same ledger at once. Nothing here
    releases data, so no method has a privacy loss of its own: :meth:`charge` *records* the
    loss of a release the caller is about to make.

    Args:
        path: the SQLite file (created if missing; its directory must exist), or a
            ``postgresql://user@host:port/db`` URL (:mod:`deniable.ledger.postgres`).
        timeout: seconds to wait for another process's write lock before failing with
            :class:`~deniable.errors.LedgerError`.
        anchor: the anchor file (default ``<path>.anchor`` for a file; for PostgreSQL a
            file named after the URL under ``$XDG_STATE_HOME/deniable/anchors``); its lock
            is ``<anchor>.lock``. Keep it outside the database's disk or server.
        read_only: open only to read and verify (``deniable ledger verify``): nothing is
            ever written — no schema, no journal-mode switch, no anchor, no lock file; the
            SQLite file is opened with ``mode=ro``. Every write method raises
            :class:`~deniable.errors.LedgerError`. A missing file or a database that is not
            a ledger is an error rather than a new ledger.

    Raises:
        LedgerError: the database cannot be opened, is not a deniable ledger, or has a schema
            version this code does not read; or it is an SQLite file in WAL mode without
            tables — the main file of a ledger copied without its ``-wal`` (where its
            commits are), which is never taken for a new ledger. A ledger that fails
            verification still opens; see :attr:`tampered` and :meth:`verify`.

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
        read_only: bool = False,
    ) -> None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise InvalidParameter("timeout must be a positive number of seconds")
        location = os.fspath(path)
        if location == ":memory:" or location.startswith("file::memory:"):
            # Refused before anything is opened or written (no anchor file in the cwd).
            raise LedgerError(
                "an in-memory ledger is not durable (it forgets every charge when it closes, "
                "and cannot use the WAL journal a ledger needs): give a file path"
            )
        self._read_only = bool(read_only)
        self._timeout = float(timeout)
        self._lock = threading.RLock()
        self._flock: FileLock | None = None
        self._ledger_id = ""
        self._report: LedgerReport | None = None
        self._seen: tuple[int, str | None] | None = None
        self._store: Store | None = None
        self._counted: tuple[str, Counted] | None = None  # the vouched checkpoint's totals
        self._group = GroupCommit(self._charge_batch)  # concurrent charges (PostgreSQL)
        self._path = location
        self._anchor_path = location + ".anchor" if anchor is None else os.fspath(anchor)
        try:
            store = open_store(location, timeout=float(timeout), read_only=self._read_only)
        except LedgerError:
            raise
        except Exception as e:
            if isinstance(e, InvalidParameter):
                raise
            raise LedgerError(f"cannot open the ledger at {location!r}: {e}") from e
        self._store = store
        self._path = store.location
        if anchor is None:
            self._anchor_path = store.default_anchor
        try:
            self._configure(store, deadline=time.monotonic() + float(timeout))
            self._inspect()
        except BaseException as e:
            self.close()
            if isinstance(e, store.driver_errors):  # the driver names the cause, not data
                raise LedgerError(f"cannot open the ledger at {self._path!r}: {e}") from e
            raise

    def _configure(self, store: Store, *, deadline: float) -> None:
        """Configure the connection, then create or check the schema under the writers' lock.

        When several processes open a new SQLite ledger together, the losers see a busy
        database and retry here, with backoff, until ``deadline``.
        """
        delay = 0.001
        while True:
            try:
                store.configure()
                if self._flock is None:
                    self._flock = FileLock(self._anchor_path + ".lock", create=not self._read_only)
                with self._flock.hold(deadline):
                    self._ensure_schema()
                    store.finish_open()
                return
            except Exception as e:
                retry = isinstance(e, (LedgerError, *store.driver_errors)) and store.is_busy(e)
                if not retry or time.monotonic() >= deadline:
                    raise
            time.sleep(delay)
            delay = min(2 * delay, 0.05)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """Where the ledger is: its file path, or its URL (without any password)."""
        return self._path

    @property
    def read_only(self) -> bool:
        """Whether the ledger was opened only to read (every write raises LedgerError)."""
        return self._read_only

    @property
    def anchor_path(self) -> str:
        """The anchor file's path."""
        return self._anchor_path

    @property
    def ledger_id(self) -> str:
        """The ledger's random identity (hex, 128 bits), made when the ledger was created."""
        return self._ledger_id

    @property
    def tampered(self) -> bool:
        """Whether the last verification found problems (then writes are refused)."""
        return self._report is not None and not self._report.ok

    @property
    def _conn(self) -> Any:
        """The backend's driver connection (None when closed); for tests and diagnostics."""
        return None if self._store is None else self._store.connection

    def close(self) -> None:
        """Close the connection; committed charges are already durable."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            if self._flock is not None:
                self._flock.close()
                self._flock = None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _transaction(self, *, write: bool) -> Any:
        """One transaction of the backend (see :meth:`deniable.ledger.store.Store.transaction`)."""
        with self._lock:
            if self._store is None:
                raise LedgerError("the ledger is closed")
            return self._store.transaction(write=write)

    def _ensure_schema(self) -> None:
        # Runs under the writers' lock. An existing ledger is checked under a read
        # transaction; a new one is created under the write lock, with its first chain entry
        # and (when no anchor exists yet) its anchor, so no other opener ever sees a ledger
        # without an anchor.
        with self._transaction(write=False) as tx:
            tables = tx.tables()
            if "meta" not in tables:
                if tables:
                    raise LedgerError(f"{self._path!r} is a database but not a ledger")
                if tx.log_apart():
                    raise LedgerError(
                        f"{self._path!r} is a ledger's database file without its write-ahead "
                        "log: its commits are in the '-wal' file that was not copied with it. "
                        "It is not opened as a new ledger (that would forget what was spent); "
                        "put the '-wal' file beside it, or make copies with `deniable ledger "
                        "backup`. Nothing was changed"
                    )
                if self._read_only:
                    raise LedgerError(
                        f"{self._path!r} is not a ledger (an empty database); nothing was changed"
                    )
            exists = "meta" in tables
        created: Write | None = None
        with self._transaction(write=not exists) as tx:
            tables = tx.tables()
            if "meta" not in tables:
                if tables:
                    raise LedgerError(f"{self._path!r} is a database but not a ledger")
                tx.create_schema()
                ledger_id = secrets.token_hex(16)
                for key, value in (
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("ledger_id", ledger_id),
                ):
                    tx.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
                created = Write(tx, 0, GENESIS)
                created.append(
                    "create",
                    {"ledger_id": ledger_id, "schema_version": SCHEMA_VERSION, "time": utc_now()},
                )
                self._ledger_id = ledger_id
            else:
                row = tx.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
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
                ident = tx.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
                self._ledger_id = "" if ident is None else str(ident[0])
        if created is None and not self._read_only:
            # A new ledger whose first anchor could not be written (say, its directory was
            # missing) gets it now, still before the switch to WAL (see Tx.log_apart).
            with self._transaction(write=False) as tx:
                first = None
                if not tx.log_apart():
                    rows = tx.execute("SELECT seq, hash FROM chain ORDER BY seq LIMIT 2").fetchall()
                    if len(rows) == 1 and int(rows[0][0]) == 1:
                        first = Write(tx, 1, str(rows[0][1]))
            if first is not None:
                created = first
        if created is not None:
            # Before the switch to a write-ahead log (finish_open): a ledger in WAL mode
            # always had an anchor (see Tx.log_apart).
            with suppress(AnchorUnreadable):
                if read_anchor(self._anchor_path) is None:
                    self._write_anchor(created, {}, {})

    # -- verification ---------------------------------------------------------------------

    def _inspect(self, *, full: bool = False) -> LedgerReport:
        """Verify the database against its chain and its anchor; remember the verdict.

        Without ``full``, from the checkpoint the anchor vouches for (see
        :func:`deniable.ledger.chain.audit`): the cost follows the entries since it.

        The anchor is read under the writers' lock together with the start of a read
        snapshot, so a concurrent writer can never make the anchor look ahead of the
        database; the replay then runs on the snapshot without holding the lock.
        """
        with self._lock:
            if self._store is None or self._flock is None:
                raise LedgerError("the ledger is closed")
            with ExitStack() as stack:
                self._flock.acquire(time.monotonic() + self._timeout)
                try:
                    anchor, unreadable = self._load_anchor()
                    try:
                        tx = stack.enter_context(self._store.transaction(write=False))
                        tx.execute("SELECT MAX(seq) FROM chain").fetchone()  # pins the snapshot
                    except LedgerError as e:
                        raise LedgerError("cannot read the ledger") from e
                finally:
                    self._flock.release()
                try:
                    report = audit(tx, anchor, unreadable, anchor_path=self._anchor_path, full=full)
                except LedgerError:
                    raise
                except Exception as e:
                    if isinstance(e, self._store.driver_errors):
                        raise LedgerError("cannot read the ledger") from e
                    raise
            self._report = report
            self._seen = (report.seq, anchor_key(anchor, unreadable))
            return report

    def _load_anchor(self) -> tuple[Anchor | None, str | None]:
        try:
            return read_anchor(self._anchor_path), None
        except AnchorUnreadable as e:
            return None, str(e)

    def verify(self, *, full: bool = False) -> LedgerReport:
        """Check the ledger now: chain, tables and anchor. Reading only; no loss.

        Opening the ledger runs the same check. By default it starts from the last
        checkpoint the anchor vouches for: the entries after it are replayed and their rows
        compared, the small tables (datasets, allowances, accountants, analysts, samples)
        compared whole, the anchor compared with the chain — so it stays fast however long
        the history. ``full=True`` replays the whole chain from its first entry and compares
        every row and every checkpoint (``deniable ledger verify --full``; backups do it):
        a hand edit of a row older than the last checkpoint is found only then (it cannot
        change what admission counts, which takes the checkpoint's totals).

        Returns:
            A :class:`~deniable.ledger.integrity.LedgerReport`; ``ok`` is False when the
            ledger was deleted and recreated, replaced by an older copy or a copy without its
            ``-wal``, replaced by another ledger, or edited by hand. The verdict also decides
            whether writes are refused from now on.

        Raises:
            LedgerError: the database cannot be read.
        """
        return self._inspect(full=full)

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
        with self._transaction(write=False) as tx:
            row = tx.execute("SELECT COALESCE(MAX(seq), 0) FROM chain").fetchone()
        anchor, unreadable = self._load_anchor()
        if self._seen != (int(row[0]), anchor_key(anchor, unreadable)):
            self._inspect()  # e.g. another process's curator acknowledged it meanwhile
        if self.tampered:
            raise self._tampered_error()

    @contextmanager
    def _write(self, mode: WriteMode) -> Iterator[Write]:
        """A write transaction that appends to the chain and then re-anchors.

        ``trusted`` refuses on a tampered ledger and checks the anchor against the database
        under the writers' lock before anything is written (a rollback done while this
        process ran is caught here); ``lenient`` (storing answers, revoking tokens: nothing
        that gives budget back) proceeds on a tampered ledger but leaves its anchor alone;
        ``acknowledge`` re-anchors unconditionally.

        On a store that serialises its writers itself (PostgreSQL,
        ``Store.serialises_writers``) the anchor's lock is not held through the transaction:
        the anchor is read before the database's lock (it is written only for durable
        entries, so it can lag behind the database, never lead it), and after the durable
        commit :func:`deniable.ledger.chain.settle` returns once an anchor covers this write.
        """
        with self._lock:
            if mode == "trusted":
                self._require_trusted()
            if self._flock is None or self._store is None:
                raise LedgerError("the ledger is closed")
            # A database that serialises its writers on every host by itself (PostgreSQL)
            # needs the host's anchor lock only to write the anchor, after the durable
            # commit (chain.settle); otherwise it spans the transaction and the anchor.
            apart = self._store.serialises_writers
            if not apart:
                self._flock.acquire(time.monotonic() + self._timeout)
            try:
                anchor_state: (
                    tuple[Write, dict[str, dict[str, str]], dict[str, list[str | None]]] | None
                ) = None
                with self._transaction(write=True) as tx:
                    if apart:  # the anchor may lag, never lead: read before the lock
                        anchor, unreadable = self._load_anchor()
                        w = chain.start(tx, anchor)
                    else:
                        row = tx.execute(
                            "SELECT seq, hash FROM chain ORDER BY seq DESC LIMIT 1"
                        ).fetchone()
                        w = Write(tx, int(row[0]), str(row[1])) if row else Write(tx, 0, GENESIS)
                        anchor, unreadable = self._load_anchor()
                    w.previous = (
                        chain.newest_base(w, anchor, self._ledger_id, self._anchor_path)
                        if apart
                        else anchor
                    )
                    tx.counted = self._counted_by(tx, anchor)
                    if mode != "acknowledge" and not self.tampered:
                        problem = live_check(
                            w,
                            anchor,
                            unreadable,
                            ledger_id=self._ledger_id,
                            anchor_path=self._anchor_path,
                        )
                        if problem is not None:
                            self._report = LedgerReport(
                                ok=False,
                                problems=(problem,),
                                seq=w.seq,
                                head=w.head,
                                anchor_seq=None if anchor is None else anchor.seq,
                                ledger_id=self._ledger_id,
                            )
                            self._seen = (w.seq, anchor_key(anchor, unreadable))
                            if mode == "trusted":
                                raise self._tampered_error()
                    yield w
                    if w.seq > w.start and mode != "acknowledge" and not self.tampered:
                        self._maybe_checkpoint(w)
                    if w.seq > w.start and (mode == "acknowledge" or not self.tampered):
                        if mode != "acknowledge" and w.checkpoint is None:
                            w.checkpoint = self._still_vouched(w.previous)
                        anchor_state = (w, self._anchor_spent(w), self._anchor_caps(w))
                        if apart:
                            chain.propose(self._anchor_path, self._anchor_of(*anchor_state))
                if anchor_state is not None and apart:
                    chain.settle(
                        self._anchor_path,
                        self._flock,
                        self._anchor_of(*anchor_state),
                        deadline=time.monotonic() + self._timeout,
                        force=mode == "acknowledge",
                    )
                elif anchor_state is not None:
                    self._write_anchor(*anchor_state)
            finally:
                if not apart:
                    self._flock.release()

    def _recomputes(self, w: Write) -> bool:
        """Whether the anchor written for ``w`` recomputes every total (:meth:`_anchor_spent`)."""
        prev = w.previous
        return (
            w.recompute_all
            or prev is None
            or prev.ledger_id != self._ledger_id
            or prev.seq != w.start
        )

    def _anchor_spent(self, w: Write) -> dict[str, dict[str, str]]:
        """Spent totals for the anchor: the previous anchor's, updated by this transaction.

        The previous anchor is reused only when it describes exactly the entry this
        transaction started from; otherwise (after a crash between a commit and its anchor,
        or after an acknowledgement) every dataset's total is recomputed from the rows.
        """
        prev = w.previous
        if prev is None or self._recomputes(w):
            return all_spent(w.conn, also=() if prev is None else prev.spent)
        spent = dict(prev.spent)
        spent.update(w.spent)
        return spent

    def _anchor_caps(self, w: Write) -> dict[str, list[str | None]]:
        """Caps and accountants for the anchor: the previous anchor's unless they changed."""
        prev = w.previous
        if (
            not (w.recompute_all or w.caps_changed)
            and prev is not None
            and prev.caps is not None
            and prev.ledger_id == self._ledger_id
            and prev.seq == w.start
        ):
            return prev.caps
        conn = w.conn
        return {
            str(r[0]): [*r[1:5], accountant_spec(accountant_of(conn, str(r[0])))]
            for r in conn.execute(ALL_CAPS)
        }

    def _write_anchor(
        self, w: Write, spent: dict[str, dict[str, str]], caps: dict[str, list[str | None]]
    ) -> None:
        write_anchor(self._anchor_path, self._anchor_of(w, spent, caps))

    def _anchor_of(
        self, w: Write, spent: dict[str, dict[str, str]], caps: dict[str, list[str | None]]
    ) -> Anchor:
        """The anchor that vouches for ``w``'s last entry."""
        return Anchor(
            ledger_id=self._ledger_id,
            seq=w.seq,
            head=w.head,
            spent=spent,
            checkpoint=w.checkpoint,
            caps=caps,
        )

    # -- checkpoints ----------------------------------------------------------------------

    def _still_vouched(self, anchor: Anchor | None) -> tuple[int, str] | None:
        """The checkpoint the previous anchor vouched for, kept by the next anchor."""
        if anchor is None or anchor.ledger_id != self._ledger_id:
            return None
        return anchor.checkpoint

    def _maybe_checkpoint(self, w: Write) -> None:
        """Make a checkpoint inside ``w`` when enough entries followed the last one.

        Built from the checkpoint the previous anchor vouches for (or from entry 1) by
        replaying the chain only (:func:`deniable.ledger.chain.make_checkpoint`); the anchor
        written after this commit vouches for it. When another writer (another host, with
        its own anchor) made a later checkpoint, this one is checked against the chain
        (:func:`deniable.ledger.chain.confirms`) and then vouched for, so that every host's
        admission and open start from a recent checkpoint.
        """
        tx = w.conn
        if not tx.has_table("checkpoints"):
            top = None
        else:
            top = tx.execute("SELECT seq FROM checkpoints ORDER BY seq DESC LIMIT 1").fetchone()
        latest_seq = 0 if top is None else int(top[0])
        mine = self._still_vouched(w.previous)
        if w.seq - latest_seq >= chain.CHECKPOINT_EVERY:
            base, _ = vouched(tx, w.previous, self._ledger_id)
            made = make_checkpoint(w, base)
            w.checkpoint = (made.seq, made.hash)
        elif latest_seq > (0 if mine is None else mine[0]):
            base, _ = vouched(tx, w.previous, self._ledger_id)
            latest = latest_checkpoint(tx)
            if latest is not None and confirms(tx, base, latest):
                w.checkpoint = (latest.seq, latest.hash)

    def _counted_by(self, tx: Tx, anchor: Anchor | None) -> Counted | None:
        """The totals of the checkpoint ``anchor`` vouches for (None: count every row).

        A checkpoint's body is read and hashed once per object: later transactions that
        find the same (entry, hash) reuse the totals already checked.
        """
        mine = self._still_vouched(anchor)
        if mine is None:
            return None
        if self._counted is not None and self._counted[0] == f"{mine[0]}:{mine[1]}":
            row = tx.execute("SELECT hash FROM checkpoints WHERE seq = ?", (mine[0],)).fetchone()
            if row is not None and str(row[0]) == mine[1]:
                return self._counted[1]
        found, _ = vouched(tx, anchor, self._ledger_id)
        if found is None:
            return None
        try:
            result = counted(found)
        except (ValueError, KeyError, TypeError) as e:
            raise LedgerError("the ledger's checkpoint cannot be read") from e
        self._counted = (f"{found.seq}:{found.hash}", result)
        return result

    @contextmanager
    def _read(self) -> Iterator[Tx]:
        """A read transaction that counts charges as admission does (from the checkpoint)."""
        anchor, _ = self._load_anchor()
        with self._transaction(write=False) as tx:
            tx.counted = self._counted_by(tx, anchor)
            yield tx

    def acknowledge(self, *, curator: str, reason: str) -> None:
        """Record a curator's acknowledgement of what verification found, and re-anchor.

        Budget is never given back, whatever was done to the database:

        * **rows edited or deleted by hand** (the chain is intact, a table differs from it):
          caps, allowances, accountants, revocations and consumed samples are written back
          as the chain records them; every other differing row is *accepted* as the database
          holds it, and each charge whose row lost budget (deleted, or edited to a smaller
          amount) is charged again for what it lost, to its analyst, so that every disputed
          charge counts at the larger of its two amounts. The accepted rows are listed in the
          acknowledgement's chain entry, and a checkpoint is made there;
        * **a lost or older database** (the anchor is ahead): datasets the anchor records
          but the database lost are registered again with the anchor's cap and accountant;
          then for every dataset whose spent total in the anchor exceeds the database's, a
          charge for the difference is appended, by analyst ``"(lost by rollback)"``.

        Then the acknowledgement (with the problems found and the old anchor) is appended to
        the chain, the anchor is rewritten for this database and writes are allowed again.
        No privacy loss of its own.

        Raises:
            InvalidParameter: empty curator or reason.
            LedgerError: storage failure, or the chain itself was edited (an entry changed
                or removed: nothing can be compared with it; restore the last backup — made
                by :meth:`backup`, verified — and acknowledge that); nothing is recorded.
        """
        check_name(curator, "curator")
        check_name(reason, "reason")
        with self._write("acknowledge") as w:
            conn = w.conn
            anchor, unreadable = self._load_anchor()
            report = audit(conn, anchor, unreadable, anchor_path=self._anchor_path, full=True)
            conn.counted = None  # the acknowledgement counts every row
            now = utc_now()
            accepted = [] if report.ok else self._settle_disputes(w, curator, now)
            if anchor is not None:
                self._restore_caps(w, anchor, now)
                for dataset, loss_json in sorted(anchor.spent.items()):
                    for lost in lost_budget(w, dataset, loss_json, now):
                        insert_charge(
                            w,
                            dataset=dataset,
                            analyst=LOST_BY_ROLLBACK,
                            query_key=f"{LOST_BY_ROLLBACK} {anchor.ledger_id}:{anchor.seq}",
                            query_text="",
                            loss=lost,
                            now=now,
                            details_json=encode_details(
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
                    **({"accepted": accepted} if accepted else {}),
                },
            )
            w.recompute_all = True
            if accepted:
                # Checkpoints before this entry count charges as the chain first had them;
                # admission must now count them as accepted (plus what was charged again).
                made = make_checkpoint(w, None)
                w.checkpoint = (made.seq, made.hash)
        self._inspect()

    def _settle_disputes(self, w: Write, curator: str, now: str) -> list[list[object]]:
        """Settle, inside an acknowledgement, the rows that differ from the chain.

        Without giving budget back (see :meth:`acknowledge`). Returns the accepted rows as
        ``[table, key, row the chain recorded, row as found]`` for the chain entry.
        """
        conn = w.conn
        try:
            found = chain.disputes(conn)
        except LedgerError as e:
            raise LedgerError(
                "the ledger's chain itself was edited (an entry changed or removed), so no row "
                "can be checked against it and nothing was acknowledged: restore the last "
                "backup (`deniable ledger backup` makes verified copies) over the ledger and "
                "acknowledge that; the anchor's totals are then charged again"
            ) from e
        if any(d.table in ("datasets", "allowances", "accountants", "analysts",
                           "sample_releases") for d in found):  # fmt: skip
            for d in found:
                budget.restore_row(conn, d.table, d.expected, d.found)
            found = chain.disputes(conn)
        for d in found:
            if d.table != "charges" or d.expected is None:
                continue
            for lost in budget.lost_by_edit(d.expected, d.found):
                insert_charge(
                    w,
                    dataset=str(d.expected[1]),
                    analyst=str(d.expected[2]),
                    query_key=f"(disputed charge {d.expected[0]})",
                    query_text="",
                    loss=lost,
                    now=now,
                    details_json=encode_details(
                        {"acknowledged_by": curator, "disputed_charge": d.expected[0]}
                    ),
                    idempotency_key=None,
                )
        return [
            [
                d.table,
                list(d.key) if isinstance(d.key, tuple) else d.key,
                None if d.expected is None else list(d.expected),
                None if d.found is None else list(d.found),
            ]
            for d in found
        ]

    @staticmethod
    def _restore_caps(w: Write, anchor: Anchor, now: str) -> None:
        """Register again, with the anchor's cap and accountant, datasets the database lost.

        A deleted (or older) database would otherwise forget a dataset's cap: the next
        registration could give it any cap at all. Datasets the database still has keep
        their recorded cap (a curator changes it explicitly, with ``allow_change``).
        """
        if not anchor.caps:
            return
        conn = w.conn
        for dataset, (kind, eps, delta, rho, spec) in sorted(anchor.caps.items()):
            known = conn.execute("SELECT 1 FROM datasets WHERE name = ?", (dataset,)).fetchone()
            if known is not None:
                continue
            try:
                cap = decode_loss((kind, eps, delta, rho))
                accountant = parse_accountant(spec or "basic")
            except (InvalidParameter, ValueError, TypeError) as e:
                raise LedgerError(
                    f"the anchor's cap of dataset {dataset!r} cannot be read; nothing was "
                    "acknowledged"
                ) from e
            conn.execute(
                "INSERT INTO datasets (name, loss_type, epsilon, delta, rho, registered_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (dataset, *encode_loss(cap), now),
            )
            record_event(w, dataset, "register", None, cap, None, now)
            if accountant != "basic":
                set_accountant(w, dataset, accountant, now)

    # -- backup ---------------------------------------------------------------------------

    def backup(self, dest: str | os.PathLike[str]) -> LedgerReport:
        """Write a consistent copy of this verified ledger to ``dest`` (replaced atomically).

        The copy is one snapshot of the whole ledger as a single SQLite ledger file in
        rollback-journal mode: SQLite's online backup API (which includes what is still in
        the ``-wal`` file), or every row of a PostgreSQL ledger; other processes may keep
        writing meanwhile. A plain copy of an SQLite database file is wrong (see
        :mod:`deniable.ledger.sqlite`). The copy is verified in full (its whole chain
        replayed) before it replaces ``dest``. It has no anchor: opening it as a ledger
        reports the missing anchor (it is a fork of this ledger that could spend the budget
        again) until a curator acknowledges it; restoring it over this ledger is reported as
        a rollback.

        Returns:
            The report of the copy's own chain (``anchor_seq`` None).

        Raises:
            LedgerTampered: this ledger fails verification (nothing was written).
            InvalidParameter: ``dest`` is the ledger itself or one of its files.
            LedgerError: the copy failed.
        """
        from deniable.ledger.sqlite import SQLiteTx

        target = os.path.abspath(os.fspath(dest))
        own = {os.path.abspath(p) for p in self._own_files()}
        if target in own:
            raise InvalidParameter("the backup must go to another file than the ledger's own")
        report = self.verify(full=True)
        if not report.ok:
            raise self._tampered_error()
        tmp = f"{target}.tmp-{secrets.token_hex(4)}"
        try:
            with self._lock:
                if self._store is None:
                    raise LedgerError("the ledger is closed")
                self._store.copy_to_sqlite(tmp)
            copy = sqlite3.connect(tmp, isolation_level=None)
            try:
                copy.execute("BEGIN")
                try:
                    result = audit(SQLiteTx(copy), None, None, anchor_path=None)
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
        except (OSError, sqlite3.Error, LedgerError) as e:
            with suppress(OSError):
                os.unlink(tmp)
            raise LedgerError(f"cannot write the backup to {target!r}") from e
        return result

    def _own_files(self) -> tuple[str, ...]:
        base = () if self._store is None else self._store.own_files()
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
        check_name(dataset, "dataset")
        check_loss(cap, "cap")
        wanted = None if accountant is None else parse_accountant(accountant)
        if wanted is not None:
            check_accountant(cap, wanted)
        with self._write("trusted") as w:
            conn = w.conn
            now = utc_now()
            row = conn.execute(
                "SELECT loss_type, epsilon, delta, rho FROM datasets WHERE name = ?", (dataset,)
            ).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO datasets (name, loss_type, epsilon, delta, rho, registered_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (dataset, *encode_loss(cap), now),
                )
                record_event(w, dataset, "register", None, cap, None, now)
                if wanted is not None and wanted != "basic":
                    set_accountant(w, dataset, wanted, now)
                w.spent[dataset] = dataset_spent(conn, dataset, cap, wanted or "basic")
                return
            old = decode_loss(row)
            old_accountant = accountant_of(conn, dataset)
            new_accountant = old_accountant if wanted is None else wanted
            if old == cap and new_accountant == old_accountant:
                return
            if not allow_change:
                what = (
                    f"cap {old}"
                    if old != cap
                    else f"accountant {accountant_spec(old_accountant)!r}"
                )
                problem = f"dataset {dataset!r} is already registered with {what}"
                raise remedied(
                    CapConflict(
                        f"{problem}; a curator can change it only explicitly, with "
                        "register(..., allow_change=True)"
                    ),
                    problem,
                    Remedy("allow_change"),
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
                    check_zcdp_cap_change(conn, dataset, old, cap, new_accountant)
                after = filter_of(conn, dataset, cap, new_accountant, analyst=None)
                if over(after):
                    raise InvalidParameter(
                        f"dataset {dataset!r} has already spent {after.spent!r}; its cap cannot "
                        "be lowered below that"
                    )
                budget.check_cap_keeps_reservations(conn, dataset, cap, new_accountant)
            if old != cap:
                conn.execute(
                    "UPDATE datasets SET loss_type = ?, epsilon = ?, delta = ?, rho = ? "
                    "WHERE name = ?",
                    (*encode_loss(cap), dataset),
                )
                record_event(w, dataset, "change_cap", None, cap, old, now)
            if new_accountant != old_accountant:
                set_accountant(w, dataset, new_accountant, now)
            w.spent[dataset] = dataset_spent(conn, dataset, cap, new_accountant)

    def set_allowance(
        self, dataset: str, analyst: str, cap: PrivacyLoss, *, reserve: bool = False
    ) -> None:
        """Give ``analyst`` a slice ``cap`` of ``dataset``'s budget (replacing any previous one).

        The slice must be of the dataset cap's kind and fit inside it. Slices of several
        analysts may overlap; every charge must fit both its analyst's slice and the global
        cap. Analysts without an allowance are bounded by the global cap only.

        With ``reserve`` the slice is also *reserved* (a reserved slice): what ``analyst``
        has not spent of it is subtracted from what every other analyst may spend, so they
        can always spend all of it (admission for any other analyst A requires
        ``spent + x ≤ cap − Σ_{B ≠ A} max(0, reserved_B − spent_B)``, exactly). A
        reservation is refused when it exceeds what is unspent and unreserved. Without
        ``reserve``, a reservation the analyst held is released (the slice is then a cap
        only). No privacy loss.

        Raises:
            UnknownDataset: the dataset is not registered.
            InvalidParameter: the slice is of another kind or does not fit inside the cap,
                or (``reserve``) exceeds what is unspent and unreserved; nothing changed.
            LedgerTampered: the ledger failed verification.
            LedgerError: storage failure.
        """
        check_name(dataset, "dataset")
        check_name(analyst, "analyst")
        check_not_reserved(analyst)
        check_loss(cap, "cap")
        if not isinstance(reserve, bool):
            raise InvalidParameter("reserve must be True or False")
        with self._write("trusted") as w:
            conn = w.conn
            total = cap_of(conn, dataset)
            if not within(cap, total):
                hint = ""
                if type(cap) is not type(total):
                    cli = (
                        "; on the command line add --delta"
                        if isinstance(total, EpsilonDelta)
                        else ""
                    )
                    hint = (
                        f" (the cap is an {kind_name(total)} budget: give the allowance as "
                        f"one too{cli})"
                    )
                raise InvalidParameter(
                    f"an allowance is a slice of dataset {dataset!r}'s cap ({total}); "
                    f"{cap} does not fit inside it{hint}; nothing was changed"
                )
            check_accountant(cap, accountant_of(conn, dataset))
            row = conn.execute(
                "SELECT loss_type, epsilon, delta, rho FROM allowances "
                "WHERE dataset = ? AND analyst = ?",
                (dataset, analyst),
            ).fetchone()
            previous = None if row is None else decode_loss(row)
            now = utc_now()
            budget.set_reservation(w, dataset, analyst, cap if reserve else None, now)
            if previous == cap:
                return
            conn.execute(
                "INSERT INTO allowances (dataset, analyst, loss_type, epsilon, delta, rho, set_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (dataset, analyst) DO UPDATE SET "
                "loss_type = excluded.loss_type, epsilon = excluded.epsilon, "
                "delta = excluded.delta, rho = excluded.rho, set_at = excluded.set_at",
                (dataset, analyst, *encode_loss(cap), now),
            )
            record_event(w, dataset, "set_allowance", analyst, cap, previous, now)

    # -- analysts -------------------------------------------------------------------------

    def add_analyst(self, name: str, *, role: Role) -> str:
        """Make a bearer token for a new analyst and return it; it is never shown again.

        Only ``sha256(token)`` is stored. No privacy loss (no data is read).

        A name is never reused: one that was ever added is refused, even after its holder
        was revoked (the same person gets a new token with :meth:`rotate_token`).

        Raises:
            InvalidParameter: empty name, unknown role, or a name already given.
            LedgerTampered: the ledger failed verification.
            LedgerError: storage failure.
        """
        check_name(name, "name")
        if role not in ROLES:
            raise InvalidParameter("role must be 'curator' or 'analyst'")
        token = new_token()
        digest = token_digest(token)
        with self._write("trusted") as w:
            people.insert_analyst(w, name, role, digest)
        return token

    def rotate_token(self, name: str) -> str:
        """Give analyst ``name`` a new token (revoking the active one); return it once.

        The way to re-issue a token to the *same* person — after a leak, or to reinstate a
        revoked analyst: they keep their name, role, history, allowances and stored
        answers. A name is never given to anyone else (:meth:`add_analyst` refuses it).
        Only ``sha256(token)`` is stored. No privacy loss.

        Raises:
            InvalidParameter: no analyst of that name was ever added.
            LedgerTampered: the ledger failed verification.
            LedgerError: storage failure.
        """
        check_name(name, "name")
        token = new_token()
        digest = token_digest(token)
        with self._write("trusted") as w:
            people.rotate(w, name, digest)
        return token

    def revoke_analyst(self, name: str) -> None:
        """Revoke ``name``'s active token; it no longer authenticates. Allowed when tampered.

        Raises:
            InvalidParameter: no active analyst of that name.
            LedgerError: storage failure.
        """
        check_name(name, "name")
        with self._write("lenient") as w:
            people.revoke(w, name)

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
        with self._transaction(write=False) as tx:
            return people.find(tx, digest)

    def analysts(self) -> list[AnalystInfo]:
        """Every analyst ever added, in order (never their token digests)."""
        with self._transaction(write=False) as tx:
            return people.listing(tx)

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

        In one write transaction (SQLite's ``BEGIN IMMEDIATE``; PostgreSQL's advisory lock):
        read the cap and the exact spent total (and the analyst's slice, if any), ask
        :class:`~deniable.accounting.filter.BudgetFilter` to admit ``loss``, insert the charge
        and its chain entry, commit durably; then re-anchor. Returns only after both, so the
        caller may compute and release the answer once this returns — never before. On
        PostgreSQL, charges made concurrently by threads of this process share the
        transaction (group commit, :mod:`deniable.ledger.group`): each is admitted in turn
        against everything before it, the earlier members included, and raises only its own
        refusal. ``details`` and ``query_text`` are stored as given: put public metadata
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
        check_name(dataset, "dataset")
        check_name(analyst, "analyst")
        check_loss(loss, "loss")
        if not isinstance(query_key, str) or not query_key:
            raise InvalidParameter("query_key must be a non-empty string")
        if not isinstance(query_text, str):
            raise InvalidParameter("query_text must be a string")
        if idempotency_key is not None and (
            not isinstance(idempotency_key, str) or not idempotency_key
        ):
            raise InvalidParameter("idempotency_key must be a non-empty string or None")
        details_json = encode_details(details)
        request = Request(
            dataset=dataset,
            loss=loss,
            analyst=analyst,
            query_key=query_key,
            query_text=query_text,
            details_json=details_json,
            sampled=details is not None and "sampling" in details,
            idempotency_key=idempotency_key,
        )
        store = self._store
        if store is not None and store.serialises_writers:
            # Concurrent charges of this process share one transaction (group.py); they
            # queue there, not on self._lock, which the running batch holds.
            return self._group.submit(request)
        with self._write("trusted") as w:
            budget_ = self._admit(w, request)
            charge = self._record(w, request, budget_)
        return charge  # after the commit and the re-anchoring

    @staticmethod
    def _admit(w: Write, r: Request) -> BudgetFilter | ZCDPFilter:
        """Check and admit one charge inside ``w``; nothing is written (or it raises)."""
        conn = w.conn
        if r.idempotency_key is not None:
            if conn.batch is not None:
                found = conn.batch.duplicate(r.dataset, r.analyst, r.idempotency_key)
            else:
                row = conn.execute(IDEMPOTENT, (r.dataset, r.analyst, r.idempotency_key)).fetchone()
                found = None if row is None else int(row[0])
            if found is not None:
                raise DuplicateRequest(found)
        if r.sampled and accountant_of(conn, r.dataset) != "basic":
            raise UnsafeQuery(SAMPLED_UNDER_ZCDP)
        return admit_charge(w, dataset=r.dataset, analyst=r.analyst, loss=r.loss)

    @staticmethod
    def _record(w: Write, r: Request, admitted: BudgetFilter | ZCDPFilter) -> Charge:
        """Insert the charge :meth:`_admit` admitted, and its chain entry, inside ``w``."""
        return record_charge(
            w,
            admitted,
            dataset=r.dataset,
            analyst=r.analyst,
            query_key=r.query_key,
            query_text=r.query_text,
            loss=r.loss,
            details_json=r.details_json,
            idempotency_key=r.idempotency_key,
        )

    def _charge_batch(self, batch: list[Request]) -> None:
        """Admit and record ``batch`` in order, in one write transaction (group commit).

        Each member is checked and admitted against everything before it, the earlier
        members included; a refused member gets its error and nothing of it is written (the
        checks come before its first write). Returns after the durable commit and the
        anchor, like :meth:`charge`; raises (for every member) when the transaction failed.
        """
        tx: Tx | None = None
        try:
            with self._write("trusted") as w:
                tx = w.conn
                # Everything admission reads, in one round trip before the first insert;
                # then the batch's own charges are counted as they are inserted. The
                # overlay stays until the transaction ends, so the anchor's totals (when
                # they are recomputed: another host wrote since this host's last write)
                # count the batch's datasets without reading them again.
                overlay = ChargeBatch(tx.counted[0] if tx.counted is not None else 0)
                members = [(r.dataset, r.analyst, r.idempotency_key) for r in batch]
                overlay.prefetch(tx, members, every_cap=self._recomputes(w))
                tx.batch = overlay
                for r in batch:
                    try:
                        admitted = self._admit(w, r)
                    except DeniableError as e:  # a refusal: nothing of it was written
                        r.error = e
                        continue
                    r.result = self._record(w, r, admitted)
        finally:
            if tx is not None:
                tx.batch = None

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
            answers.store(w, charge_id, data)

    def answer_for(self, charge_id: int) -> bytes | None:
        """Return the stored answer of charge ``charge_id``, or None when none was stored."""
        if isinstance(charge_id, bool) or not isinstance(charge_id, int):
            raise InvalidParameter("charge_id must be the integer id of a Charge")
        with self._transaction(write=False) as tx:
            return answers.by_charge(tx, charge_id)

    def cached_answer(self, dataset: str, query_key: str) -> bytes | None:
        """Return the stored answer of the latest answered charge with this key, or None.

        Re-publishing an answer already released costs no privacy. The key must identify the
        query completely — normalised SQL, parameters, privacy parameters and data version.

        Raises:
            LedgerError: storage failure.
        """
        check_name(dataset, "dataset")
        with self._transaction(write=False) as tx:
            return answers.by_key(tx, dataset, query_key)

    # -- reading --------------------------------------------------------------------------

    def cap(self, dataset: str) -> PrivacyLoss:
        """Return ``dataset``'s total budget.

        Raises:
            UnknownDataset: the dataset is not registered.
        """
        check_name(dataset, "dataset")
        with self._read() as conn:
            return cap_of(conn, dataset)

    def allowance(self, dataset: str, analyst: str) -> PrivacyLoss | None:
        """Return ``analyst``'s slice of ``dataset``'s budget, or None when it has none."""
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap_of(conn, dataset)
            return allowance_of(conn, dataset, analyst)

    def spent(self, dataset: str, *, analyst: str | None = None) -> PrivacyLoss:
        """Return what was charged on ``dataset`` (by ``analyst`` only, if given).

        With the basic accountant: the exact total in the cap's kind. With the zCDP
        accountant: the ``(ε, δ)`` guarantee of the charges (ε rounded up; see
        :attr:`deniable.accounting.renyi.ZCDPFilter.spent`), which does not add up across
        analysts (composition is not additive); :meth:`budget_filter` gives the exact ρ.
        """
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap = cap_of(conn, dataset)
            accountant = accountant_of(conn, dataset)
            if accountant == "basic":
                return spent_total(conn, dataset, cap, analyst=analyst)
            return filter_of(conn, dataset, cap, accountant, analyst=analyst).spent

    def remaining(self, dataset: str, *, analyst: str | None = None) -> PrivacyLoss:
        """Return what is left of ``dataset``'s budget (for ``analyst``, if given).

        Without ``analyst``: the cap less everything spent (reserved or not). For an
        analyst: their own slice of it, the component-wise minimum of what is left of their
        allowance (if any) and of what the dataset can still give them — the cap less
        everything spent and every *other* analyst's unspent reservation
        (:func:`deniable.ledger.budget.analyst_remaining`). With the zCDP accountant it is
        the largest ``(ε, δ)`` single charge that still fits, ``(√(2ρ_left), δ_pool_left)``;
        the ρ left is ``budget_filter(dataset).remaining_rho``.
        """
        check_name(dataset, "dataset")
        with self._read() as conn:
            if analyst is not None:
                return budget.analyst_remaining(conn, dataset, analyst)
            cap = cap_of(conn, dataset)
            accountant = accountant_of(conn, dataset)
            return filter_of(conn, dataset, cap, accountant, analyst=None).remaining

    def datasets(self) -> list[str]:
        """Return the registered datasets' names, in order of registration."""
        with self._read() as conn:
            rows = conn.execute("SELECT name FROM datasets ORDER BY registered_at, name").fetchall()
        return [str(r[0]) for r in rows]

    def accountant(self, dataset: str) -> Accountant:
        """Return how ``dataset``'s budget is spent: ``"basic"`` or a ``ZCDPAccountant``.

        Raises:
            UnknownDataset: the dataset is not registered.
        """
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap_of(conn, dataset)
            return accountant_of(conn, dataset)

    def budget_filter(
        self, dataset: str, *, analyst: str | None = None
    ) -> BudgetFilter | ZCDPFilter:
        """Return a snapshot of ``dataset``'s filter (its cap, accountant and spent total).

        For a dry run (``can_charge``) or a report (``remaining``, and for the zCDP filter
        ``remaining_rho``, ``rho_max``, ``used``). Charging the snapshot writes nothing:
        only :meth:`charge` spends. With ``analyst``, the filter of the analyst's allowance
        (or of the dataset when the analyst has none).
        """
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap = cap_of(conn, dataset)
            accountant = accountant_of(conn, dataset)
            allowance = None if analyst is None else allowance_of(conn, dataset, analyst)
            if allowance is None:
                return filter_of(conn, dataset, cap, accountant, analyst=None)
            return filter_of(conn, dataset, allowance, accountant, analyst=analyst)

    def can_charge(self, dataset: str, loss: PrivacyLoss, *, analyst: str | None = None) -> bool:
        """Whether :meth:`charge` would admit ``loss`` now (a dry run; nothing is written).

        A cheap early refusal for callers that run an engine before charging; the charge
        itself re-checks atomically.

        Raises:
            UnknownDataset: the dataset is not registered.
            InvalidParameter: a loss the dataset's accountant cannot express.
        """
        check_name(dataset, "dataset")
        check_loss(loss, "loss")
        with self._read() as conn:
            try:
                admit_both(conn, dataset, analyst, loss)
            except BudgetExceeded:
                return False
            return True

    def check_charge(self, dataset: str, loss: PrivacyLoss, *, analyst: str | None) -> None:
        """Raise the refusal :meth:`charge` would raise for ``loss`` now, if any (a dry run).

        For a named analyst the refusal says only what *they* may still spend (their own
        slice: see :meth:`remaining`), never the dataset's spent total or other analysts'
        reservations. Nothing is written.

        Raises:
            BudgetExceeded: ``loss`` does not fit.
            UnknownDataset: the dataset is not registered.
            InvalidParameter: a loss the dataset's accountant cannot express.
        """
        check_name(dataset, "dataset")
        check_loss(loss, "loss")
        with self._read() as conn:
            admit_both(conn, dataset, analyst, loss)

    def reservation(self, dataset: str, analyst: str) -> PrivacyLoss | None:
        """``analyst``'s reserved slice of ``dataset`` (see :meth:`set_allowance`), or None."""
        check_name(dataset, "dataset")
        check_name(analyst, "analyst")
        with self._read() as conn:
            cap_of(conn, dataset)
            return budget.reservation_of(conn, dataset, analyst)

    def reservations(self, dataset: str) -> dict[str, PrivacyLoss]:
        """Every analyst's reserved slice of ``dataset``, by name (curators' view)."""
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap_of(conn, dataset)
            return budget.reservations_of(conn, dataset)

    def release_number(self, dataset: str, analyst: str, charge_id: int) -> int | None:
        """The number ``analyst`` knows charge ``charge_id`` by, or None if it is not theirs.

        Analysts are shown their own release numbers (1, 2, 3, … per dataset, in commit
        order), never the ledger's global ids, which count everyone's releases.
        """
        check_name(dataset, "dataset")
        check_name(analyst, "analyst")
        if isinstance(charge_id, bool) or not isinstance(charge_id, int):
            raise InvalidParameter("charge_id must be the integer id of a Charge")
        with self._read() as conn:
            return budget.release_number(conn, dataset, analyst, charge_id)

    def charge_of_release(self, dataset: str, analyst: str, number: int) -> int | None:
        """The global id of ``analyst``'s release ``number`` on ``dataset``, or None."""
        check_name(dataset, "dataset")
        check_name(analyst, "analyst")
        if isinstance(number, bool) or not isinstance(number, int):
            raise InvalidParameter("a release number is an integer (1, 2, …)")
        with self._read() as conn:
            return budget.charge_by_number(conn, dataset, analyst, number)

    def history(
        self, dataset: str, *, analyst: str | None = None, idempotency_key: str | None = None
    ) -> list[Charge]:
        """Return every charge on ``dataset`` in commit order.

        Only ``analyst``'s, if given; only the one charged with ``idempotency_key`` (an
        indexed look-up: at most one charge), if given. Each charge carries its
        :attr:`~deniable.ledger.records.Charge.number`: its rank among its analyst's charges
        on the dataset (what that analyst is shown instead of the global id).
        """
        check_name(dataset, "dataset")
        where, args = "dataset = ?", [dataset]
        if analyst is not None:
            check_name(analyst, "analyst")
            where, args = where + " AND analyst = ?", [*args, analyst]
        if idempotency_key is not None:
            if not isinstance(idempotency_key, str) or not idempotency_key:
                raise InvalidParameter("idempotency_key must be a non-empty string or None")
            where, args = where + " AND idempotency_key = ?", [*args, idempotency_key]
        with self._read() as conn:
            cap_of(conn, dataset)
            rows = conn.execute(
                f"SELECT {CHARGE_COLUMNS} FROM charges WHERE {where} ORDER BY id", args
            ).fetchall()
            numbers: list[int | None]
            if idempotency_key is None:
                numbers = list(budget.number_rows(rows))
            else:
                numbers = [budget.release_number(conn, dataset, r[2], r[0]) for r in rows]
        return [
            Charge(
                id=r[0],
                dataset=r[1],
                analyst=r[2],
                query_key=r[3],
                query_text=r[4],
                loss=decode_loss(r[5:9]),
                time=datetime.fromisoformat(r[9]),
                details=decode_details(r[10]),
                status=r[11],
                idempotency_key=r[12],
                number=n,
            )
            for r, n in zip(rows, numbers, strict=True)
        ]

    def curator_events(self, dataset: str) -> list[CuratorEvent]:
        """Return the curator's recorded decisions on ``dataset`` in order."""
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap_of(conn, dataset)
            rows = conn.execute(
                "SELECT id, dataset, action, analyst, loss_type, epsilon, delta, rho, previous, "
                "time FROM curator_events WHERE dataset = ? ORDER BY id",
                (dataset,),
            ).fetchall()
        return [
            CuratorEvent(
                id=r[0],
                dataset=r[1],
                action=budget.event_action(r[2], r[3]),
                analyst=budget.event_analyst(r[3]),
                loss=decode_loss(r[4:8]),
                previous=None if r[8] is None else decode_loss(json.loads(r[8])),
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
        ``sample`` as samples.consumed; afterwards :meth:`sample_consumed` is True and a second
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
            UnsafeQuery: the sample was already samples.consumed, or already answered queries (its
                charges name it; nothing written).
            BudgetExceeded: ``loss`` does not fit (nothing written).
            UnknownDataset, InvalidParameter, LedgerTampered, LedgerError: as :meth:`charge`.
        """
        check_name(dataset, "dataset")
        check_name(analyst, "analyst")
        check_loss(loss, "loss")
        samples.check_sample(sample)
        beta = samples.sampling_rate(rate)
        if not isinstance(query_text, str):
            raise InvalidParameter("query_text must be a string")
        details_json = encode_details(
            {
                **(dict(details) if details is not None else {}),
                "sample": sample,
                "rate": fraction_text(beta),
            }
        )
        with self._write("trusted") as w:
            conn = w.conn
            conn.ensure_extensions()
            if samples.consumed(conn, dataset, sample):
                raise UnsafeQuery(samples.CONSUMED_MESSAGE)
            if samples.queried(conn, dataset, sample):
                raise UnsafeQuery(samples.QUERIED_MESSAGE)
            charge = admit_and_insert(
                w,
                dataset=dataset,
                analyst=analyst,
                query_key=f"sample-release:{sample}",
                query_text=query_text,
                loss=loss,
                details_json=details_json,
                idempotency_key=None,
            )
            now = charge.time.isoformat(timespec="microseconds")  # as utc_now() wrote it
            samples.record_consumed(w, dataset, sample, charge.id, fraction_text(beta), now)
        return SampleRelease(
            dataset=dataset, sample=sample, rate=beta, charge=charge, time=charge.time
        )

    def sample_consumed(self, dataset: str, sample: str) -> bool:
        """Whether ``sample`` was samples.consumed by a sampling-based release on ``dataset``.

        A session must answer nothing from a samples.consumed sample (check before any charge).
        """
        check_name(dataset, "dataset")
        samples.check_sample(sample)
        with self._read() as conn:
            return samples.consumed(conn, dataset, sample)

    def sample_releases(self, dataset: str) -> list[SampleRelease]:
        """Return the sampling-based releases recorded on ``dataset``, in order."""
        check_name(dataset, "dataset")
        with self._read() as conn:
            cap_of(conn, dataset)
            if not conn.has_table("sample_releases"):
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
                rate=Fraction(*parse_fraction(r[1])),
                charge=charges[int(r[2])],
                time=charges[int(r[2])].time,
            )
            for r in rows
        ]

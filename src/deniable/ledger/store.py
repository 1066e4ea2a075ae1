"""The ledger's storage interface: what a backend (SQLite, PostgreSQL) must provide.

The ledger's logic — admission, the hash chain, replay and audit, the anchor, checkpoints —
is written once, against :class:`Tx` (one open transaction) and :class:`Store` (a database
that opens transactions). A backend supplies only what differs between databases:

* **transactions**: a *write* transaction is serialised against every other writer of the
  same ledger, in every process and on every host, from its first read (SQLite's
  ``BEGIN IMMEDIATE``; PostgreSQL's transaction-scoped advisory lock); a *read* transaction
  sees one consistent snapshot;
* **the dialect**: placeholders (``?`` in the shared SQL; a backend may translate), the id of
  an inserted row, a JSON field of a text column, the list of tables;
* **the schema and its append-only walls**: the tables, and triggers (plus, on PostgreSQL,
  grants) that refuse deletes and every update the ledger does not make itself;
* **a consistent copy** as a single SQLite ledger file, for :meth:`Ledger.backup`.

Driver errors inside a transaction become :class:`~deniable.errors.LedgerError` with the
driver's error as ``__cause__``; nothing fallible runs after a commit except the anchor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol


class Cursor(Protocol):
    """The result of :meth:`Tx.execute` (a DB-API cursor)."""

    def fetchone(self) -> Any:
        """The next row, or None."""

    def fetchall(self) -> list[Any]:
        """All remaining rows."""

    def __iter__(self) -> Iterator[Any]:
        """Iterate over the remaining rows."""


Counted = tuple[int, Mapping[str, list[tuple[str, str, str | None, str | None, str | None, int]]]]
"""What a checkpoint counts: the last charge id it includes, and per dataset its charges as
``(analyst, loss_type, ε, δ, ρ, count)``."""


class Overlay(Protocol):
    """A batch of charges admitted in one transaction (:class:`deniable.ledger.budget.ChargeBatch`).

    While it is set on a transaction (:attr:`Tx.batch`), admission counts the charges from
    one read per dataset made before the batch's first insert plus the batch's own inserts,
    which register here; charge ids may come from a block reserved for the batch.
    """

    def loss_groups(self, tx: Tx, dataset: str, analyst: str | None, mark: int) -> list[Any]:
        """Rows ``(loss_type, ε, δ, ρ, count)`` of the charges after id ``mark``."""

    def duplicate(self, dataset: str, analyst: str, key: str) -> int | None:
        """The id of the charge with this idempotency key, or None."""

    def next_id(self) -> int | None:
        """A reserved charge id, or None (the charge is then inserted with ``RETURNING``)."""

    def record(
        self, dataset: str, analyst: str, loss: tuple[str, str | None, str | None, str | None],
        key: str | None, charge_id: int,
    ) -> None:  # fmt: skip
        """Register a charge this transaction inserted."""


class Tx(ABC):
    """One open transaction on a ledger's database: the only way ledger logic touches storage.

    SQL is written with ``?`` placeholders and the SQL both SQLite and PostgreSQL accept;
    everything else goes through the methods below.

    Attributes:
        counted: set by the ledger when a checkpoint the anchor vouches for counts the
            charges up to some id (totals then add only the rows after it); None: every
            charge row counts.
    """

    counted: Counted | None = None
    batch: Overlay | None = None
    """Set while a batch of charges is admitted (:class:`deniable.ledger.budget.ChargeBatch`):
    admission then counts the charges from one read per dataset plus the batch's own."""

    @abstractmethod
    def execute(self, sql: str, params: Sequence[object] = ()) -> Cursor:
        """Run one statement with ``?`` placeholders and return its cursor."""

    def defer(self, sql: str, params: Sequence[object] = ()) -> None:
        """Run a write whose result is not read; a backend may send it with the next statement.

        Default: at once. It fails, if it fails, by the next statement or the commit.
        """
        self.execute(sql, params)

    def remember(self, sql: str, params: Sequence[object], rows: list[Any]) -> None:
        """Let the transaction answer ``sql`` with ``params`` from ``rows`` (already read).

        A backend whose round trips are costly (PostgreSQL) answers the statement from
        ``rows`` if the transaction has not written to a table it names since; the default
        ignores it (the statement then runs).
        """
        return None

    def prefetch(self, statements: Sequence[tuple[str, Sequence[object]]]) -> list[list[Any]]:
        """Run several ``SELECT`` s and return each one's rows, in order.

        A backend whose round trips are costly (PostgreSQL) sends them together and keeps
        their rows as :meth:`remember` does. Default: one after another.
        """
        return [self.execute(sql, params).fetchall() for sql, params in statements]

    def charge_ids_query(self, count: int) -> tuple[str, tuple[object, ...]] | None:
        """A ``SELECT`` of ``count`` new charge ids (one per row), or None when unsupported.

        A backend that can (PostgreSQL: the charges' identity sequence, read under the
        writers' lock, so the ids grow in commit order) lets a batch insert its charges
        without reading each id back; None: charges are inserted with :meth:`insert`.
        """
        return None

    @abstractmethod
    def insert(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one ``INSERT`` of a row into a table with an ``id`` key; return the new id."""

    @abstractmethod
    def tables(self) -> set[str]:
        """The names of the tables in the ledger's schema."""

    def has_table(self, name: str) -> bool:
        """Whether the ledger's schema has table ``name``."""
        return name in self.tables()

    @abstractmethod
    def json_text(self, column: str, *keys: str) -> str:
        """An SQL expression: the text at ``keys`` inside the JSON text of ``column``."""

    @abstractmethod
    def ensure_extensions(self) -> None:
        """Create the tables added after schema version 2 if this ledger predates them."""

    @abstractmethod
    def create_schema(self) -> None:
        """Create every table, index and append-only trigger of a new ledger."""

    def log_apart(self) -> bool:
        """Whether recent commits live in a log file beside the database (SQLite's WAL mode).

        A ledger is created, and its anchor written, before its database switches to a
        write-ahead log. So an SQLite file in WAL mode that has no tables, or only its first
        entry and no anchor, is a ledger's main file copied without its ``-wal`` (or whose
        anchor was deleted) — never a new ledger. Default: False (PostgreSQL has no such file).
        """
        return False


class Store(ABC):
    """A ledger's database: opens transactions, copies itself, closes.

    Attributes:
        location: where the ledger is, for messages (a path, or a URL without password).
        read_only: opened only to read (``Ledger(..., read_only=True)``): the backend
            refuses every write as a second wall behind the ledger's own refusal.
        default_anchor: the anchor file used when the caller names none.
        driver_errors: the driver's exception types (mapped to LedgerError when opening).
    """

    location: str
    default_anchor: str
    driver_errors: tuple[type[BaseException], ...]

    read_only: bool = False

    serialises_writers: bool = False
    """Whether the database alone serialises every writer, on every host, and
    :meth:`transaction` returns from a write only once its commit is durable (PostgreSQL:
    its advisory lock, then a flush). The ledger then holds its anchor's lock only to write
    the anchor, after the commit, and one anchor write covers every write of the host that
    became durable before it (:func:`deniable.ledger.chain.settle`). False (SQLite): the
    anchor's lock is held from before the transaction until its anchor is written."""

    @abstractmethod
    def configure(self) -> None:
        """Per-connection settings (durability); may raise a busy error. Writes nothing."""

    def finish_open(self) -> None:
        """Called under the writers' lock once the schema exists (SQLite: switch to WAL)."""
        return None

    def is_busy(self, error: BaseException) -> bool:
        """Whether ``error`` means another opener holds a lock for now (retry later)."""
        return False

    @abstractmethod
    def transaction(self, *, write: bool) -> AbstractContextManager[Tx]:
        """One transaction; commit on leaving the block, roll back on any exception.

        Raises:
            LedgerError: the transaction cannot start or commit, or a statement failed
                (the driver's error is the cause).
        """

    @abstractmethod
    def copy_to_sqlite(self, dest: str) -> None:
        """Write one consistent snapshot of the whole ledger to a new SQLite file ``dest``.

        Raises:
            LedgerError: the copy failed.
        """

    def own_files(self) -> tuple[str, ...]:
        """Files that belong to the database itself (a backup must not overwrite them)."""
        return ()

    @property
    def connection(self) -> Any:
        """The driver's connection (for tests and diagnostics), or None when closed."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Close the connection; committed work is already durable."""

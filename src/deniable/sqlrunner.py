"""What the toolkits need from an engine to run the SQL they generate: :class:`SQLRunner`.

``sampling`` and ``anonymize`` do their work inside an engine (rows never travel into
Python): they write SQL text (identifiers and literals from :mod:`deniable.sqlnames`) and
hand it to an object with this small interface. The toolkits import only this protocol,
never an engine; the DuckDB adapter is :class:`deniable.engines.duckdb.DuckDBRunner`, which
wraps a connection the caller owns::

    from deniable.engines.duckdb import DuckDBRunner
    strongly_safe(DuckDBRunner(duckdb.connect("data.db")), "people", spec, k=10, beta=0.1,
                  epsilon=1.0)

Contract for implementations: run exactly the text given (deniable's own SQL, never an
analyst's), and on failure raise :class:`deniable.errors.SQLError` when the engine refused
the statement at bind time (a fact about the SQL and the schema, not the data) or
:class:`deniable.errors.EngineError` otherwise, with a message that never contains the
engine's own text about rows (it may quote private data). Nothing here releases anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from deniable.errors import InternalError, InvalidParameter

if TYPE_CHECKING:
    import pyarrow as pa

Params = Mapping[str, object]
"""Named parameters of a statement (``$name`` in the SQL text)."""


@runtime_checkable
class SQLRunner(Protocol):
    """Runs SQL text deniable generated, in one engine session (temporary tables persist)."""

    @property
    def dialect(self) -> str:
        """The sqlglot dialect of the SQL this runner accepts (declared capability)."""
        ...

    def execute(self, sql: str, params: Params | None = None) -> None:
        """Run one statement (DDL or a query whose result is discarded)."""
        ...

    def rows(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        """Run a query and return its rows (callers fetch only aggregates)."""
        ...

    def arrow(self, sql: str) -> pa.Table:
        """Run a query and return its result as an Arrow table."""
        ...

    def columns(self, relation: str) -> tuple[tuple[str, str], ...] | None:
        """The ``(name, type)`` pairs of ``relation``'s columns, reading no rows.

        ``relation`` is SQL text: a quoted table name or a parenthesised query. Returns None
        when the engine cannot read it.
        """
        ...

    def register(self, name: str, data: pa.Table) -> None:
        """Make an Arrow table queryable under ``name`` (no copy where the engine allows)."""
        ...

    def unregister(self, name: str) -> None:
        """Undo :meth:`register`."""
        ...

    def table(self, name: str) -> Any:
        """The engine's lazy handle on table ``name`` (for a DuckDB runner, a relation)."""
        ...


def one_row(runner: SQLRunner, sql: str) -> tuple[Any, ...]:
    """Run a query that returns exactly one row and return it.

    Raises:
        InternalError: the query returned another number of rows (a bug in the caller).
    """
    rows = runner.rows(sql)
    if len(rows) != 1:
        raise InternalError(f"expected one row, got {len(rows)}")
    return tuple(rows[0])


def require_runner(runner: object) -> SQLRunner:
    """Return ``runner`` if it has the :class:`SQLRunner` methods, else raise.

    Raises:
        InvalidParameter: e.g. a bare DuckDB connection (wrap it in
            :class:`deniable.engines.duckdb.DuckDBRunner`).
    """
    if not isinstance(runner, SQLRunner):
        raise InvalidParameter(
            f"expected an SQLRunner, got {type(runner).__name__}; wrap a DuckDB connection "
            "as deniable.engines.duckdb.DuckDBRunner(con)"
        )
    return runner

"""The PostgreSQL engine: deniable's bounded statement runs inside the database.

Rows never leave PostgreSQL. A table is registered *in place*
(``PostgresEngine(dsn).bind("events", PostgresTable("events"))``, or
``Session.add_table("events", "postgresql://reader@db:5432/shop", table="events", …)``):
only its schema is read (``information_schema.columns``); each query sends one statement that
deniable compiled (never the analyst's text) and gets back the per-group aggregates.

**How a statement runs.** In one transaction ``BEGIN READ ONLY`` with ``SET LOCAL``
``statement_timeout`` (default 60 s, :data:`DEFAULT_STATEMENT_TIMEOUT`), a fixed
``search_path`` (``pg_catalog`` first, so a function of a user schema can never stand in for
``hashtextextended`` or ``normalize``, then the schemas of the bound tables) and fixed text
formats of values (``extra_float_digits``, ``DateStyle``, ``TimeZone``, ``IntervalStyle``:
the keyed hashes read values as text, so their orders must not depend on a session setting).
The statement goes through the extended query protocol, which accepts exactly one statement.
:meth:`PostgresEngine.check` asks for the plan (``EXPLAIN``, no row read);
:meth:`PostgresEngine.run` runs it.

**The role.** The engine connects as the role given in the URL. Give it the least it needs::

    CREATE ROLE deniable_reader LOGIN PASSWORD '…';
    GRANT CONNECT ON DATABASE shop TO deniable_reader;
    GRANT USAGE ON SCHEMA public TO deniable_reader;
    GRANT SELECT ON public.events TO deniable_reader;     -- the registered tables only
    -- only for samples and public lookup tables (temporary copies, see below):
    GRANT TEMPORARY ON DATABASE shop TO deniable_reader;

Every statement runs read-only anyway; the grant is the defence against a bug in deniable or
a stolen configuration. Put the password in ``~/.pgpass`` or ``PGPASSWORD`` rather than in the
URL (the URL is never printed by deniable: errors name only host, port and database).

**Errors.** PostgreSQL's messages about the statement and the schema (SQLSTATE class 42:
an undefined column, a type mismatch) become :class:`~deniable.errors.SQLError` with the
primary message; every other failure (a timeout, a data exception whose message may quote a
value, a lost connection) becomes :class:`~deniable.errors.EngineError` naming only its
SQLSTATE, with no PostgreSQL exception attached (not even as the context).

**Data version (the answer cache).** By default :meth:`PostgresEngine.bind` fingerprints the
table's content once, at registration (one scan in PostgreSQL: the row count and an
order-independent sum of 64-bit hashes of the rows' text), exactly as the DuckDB engine does
for a file. An identical question asked again in the session is replayed from the ledger
(free, the earlier answer) even if rows changed since: replays are post-processing of what was
already paid for, so this affects freshness, never privacy. A table that changes should be
registered with ``version=`` (e.g. the load date, or a snapshot id) and registered again when
it changes; PostgreSQL's statistics counters or ``xmin`` are not used, because they are
neither exact (counters lag and can be reset) nor cheap (``xmin`` needs a scan too).

**Samples and public tables.** :meth:`PostgresEngine.sample` (a Bernoulli sample of privacy
units, with the keyed SHA-256 coin of :mod:`deniable.sampling.bernoulli` computed in
PostgreSQL) and :meth:`PostgresEngine.materialize` (a snapshot of a public table) create
``TEMPORARY`` tables: they live in the connection's own temporary schema, which only this
engine can see, and vanish when it closes. They need the ``TEMPORARY`` privilege; without it
they are refused with :class:`~deniable.errors.InvalidParameter` saying so. DataFrames and
Arrow tables given to :meth:`PostgresEngine.bind` are loaded the same way (``COPY`` into a
temporary table): that is how the conformance suite and tests feed the engine.

**Limitations** (declared in :data:`~deniable.engines.base.POSTGRES_CAPABILITIES`): no
``TRY``, so a row predicate that could raise (arithmetic, casts) is refused by the compiler,
naming the engine. Text comparisons follow the database's collation (DuckDB compares bytes).
``round(double precision)`` rounds ties to even (DuckDB and Spark round them away from zero):
the compiler clamps every per-row sum value to its bounds' grid units *after* rounding, so a
value at a bound with a half-unit remainder cannot leave the sensitivity here
(:func:`deniable.query.rewrite.compile.row_expression`;
``tests/system/test_postgres_rounding.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar, TypeVar

import psycopg
import pyarrow as pa
from psycopg import sql as pgsql

from deniable.engines.base import POSTGRES_CAPABILITIES, SAMPLE_ALIAS, Capabilities, TableBinding
from deniable.errors import EngineError, InternalError, InvalidParameter, SQLError
from deniable.noise.source import RandomSource, resolve

__all__ = [
    "DEFAULT_STATEMENT_TIMEOUT",
    "PostgresEngine",
    "PostgresTable",
    "is_postgres_url",
]

DEFAULT_STATEMENT_TIMEOUT = 60.0
"""Seconds a generated statement may run before PostgreSQL cancels it."""

_URL_PREFIXES = ("postgresql://", "postgres://")
_PREFIX = "__deniable_"
_T = TypeVar("_T")

# Session settings that change how values print as text (the keyed hashes read text).
_TEXT_SETTINGS = (
    ("extra_float_digits", "1"),
    ("datestyle", "ISO, MDY"),
    ("intervalstyle", "postgres"),
    ("timezone", "UTC"),
    ("bytea_output", "hex"),
)

# information_schema.columns.data_type -> a name deniable.query.catalog.kind_of classifies.
_TYPE_NAMES = {
    "smallint": "SMALLINT",
    "integer": "INTEGER",
    "bigint": "BIGINT",
    "real": "REAL",
    "double precision": "DOUBLE",
    "text": "TEXT",
    "character varying": "VARCHAR",
    "character": "CHAR",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp without time zone": "TIMESTAMP",
    "timestamp with time zone": "TIMESTAMP WITH TIME ZONE",
    "time without time zone": "TIME",
    "time with time zone": "TIME WITH TIME ZONE",
    "interval": "INTERVAL",
}


def is_postgres_url(source: object) -> bool:
    """Whether ``source`` is a PostgreSQL connection URL (``postgresql://…``)."""
    return isinstance(source, str) and source.lower().startswith(_URL_PREFIXES)


@dataclass(frozen=True, slots=True)
class PostgresTable:
    """A table (or view) of the engine's database, registered in place.

    Attributes:
        name: the table's name, exactly as in the catalog (case-sensitive, unquoted).
        schema: its schema; None: the first schema of the role's ``search_path`` holding it.

    Examples:
        >>> PostgresTable.parse("analytics.events")
        PostgresTable(name='events', schema='analytics')
    """

    name: str
    schema: str | None = None

    @classmethod
    def parse(cls, text: str) -> PostgresTable:
        """``"table"`` or ``"schema.table"`` (names with a dot: build the object directly)."""
        if not isinstance(text, str) or not text.strip():
            raise InvalidParameter("table must name a PostgreSQL table, e.g. table = 'events'")
        parts = text.split(".")
        if len(parts) == 1:
            return cls(name=parts[0])
        if len(parts) == 2 and all(parts):
            return cls(name=parts[1], schema=parts[0])
        raise InvalidParameter(
            f"table {text!r} is not 'table' or 'schema.table'; for names containing dots pass "
            "PostgresTable(name=..., schema=...)"
        )


@dataclass(frozen=True, slots=True)
class _Relation:
    schema: str  # the real schema ('pg_temp_N' for our temporary tables)
    name: str
    temporary: bool


class PostgresEngine:
    """Runs deniable's generated SQL inside a PostgreSQL server (13+).

    One connection per engine, used under a lock (the engine may be shared by threads).

    Args:
        dsn: ``postgresql://role@host:port/database`` (libpq URL; options such as
            ``sslmode`` go in its query string). Never printed.
        statement_timeout: seconds one generated statement may run (``SET LOCAL
            statement_timeout``); the query then fails with EngineError and costs nothing.
        connect_timeout: seconds to wait for the connection.
        parallel_workers: ``max_parallel_workers_per_gather`` for the bounded statement
            (``SET LOCAL``); None keeps the server's setting. Default 0: its first step groups
            by (privacy unit, group), which is nearly unique, so a parallel partial
            aggregation hands the single finalising process about as many rows as the table
            holds and does the hashing twice (measured on 2 cores at 10⁷ rows: 2.52× → 2.34×
            the two-level floor, which PostgreSQL itself plans serially).

    Raises:
        InvalidParameter: ``dsn`` is not a PostgreSQL URL, or a timeout is not positive.
        EngineError: the server cannot be reached or refuses the login.
    """

    capabilities: ClassVar[Capabilities] = POSTGRES_CAPABILITIES

    def __init__(
        self,
        dsn: str,
        *,
        statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT,
        connect_timeout: float = 10.0,
        parallel_workers: int | None = 0,
    ) -> None:
        if not is_postgres_url(dsn):
            raise InvalidParameter("dsn must be a URL starting with postgresql://")
        for what, value in (
            ("statement_timeout", statement_timeout),
            ("connect_timeout", connect_timeout),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise InvalidParameter(f"{what} must be a positive number of seconds")
            if not math.isfinite(value):
                raise InvalidParameter(f"{what} must be finite")
        self._dsn = dsn
        self._where = _describe(dsn)
        self._timeout_ms = max(1, round(statement_timeout * 1000))
        if parallel_workers is not None and (
            isinstance(parallel_workers, bool)
            or not isinstance(parallel_workers, int)
            or parallel_workers < 0
        ):
            raise InvalidParameter("parallel_workers must be None or an integer ≥ 0")
        self._parallel_workers = parallel_workers
        failure: str | None = None
        try:
            self._con = psycopg.connect(
                dsn,
                autocommit=True,
                connect_timeout=max(1, math.ceil(connect_timeout)),
                application_name="deniable",
            )
        except psycopg.Error as e:
            failure = _state(e)
        except Exception as e:  # a malformed URL (psycopg raises ProgrammingError or ValueError)
            failure = type(e).__name__
        if failure is not None:  # raised outside the handler: the URL may hold a password
            raise EngineError(f"could not connect to PostgreSQL at {self._where} ({failure})")
        self._lock = threading.RLock()
        self._relations: dict[str, _Relation] = {}
        self._counter = itertools.count()
        self._closed = False

    @property
    def dsn(self) -> str:
        """The connection URL (secret if it holds a password: never print it)."""
        return self._dsn

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The engine's connection (tests and benchmarks only)."""
        return self._con

    # -- registration ------------------------------------------------------------------------

    def bind(self, name: str, source: object, *, version: str | None = None) -> TableBinding:
        """Make ``source`` queryable and describe its schema (no row leaves PostgreSQL).

        Args:
            name: the table's public name (unused for an in-place table).
            source: a :class:`PostgresTable` or a ``"schema.table"`` string (a table of the
                engine's database, read in place), or a pandas/polars DataFrame or Arrow
                table, loaded with ``COPY`` into a temporary table of this connection.
            version: the data version for the answer cache; by default a fingerprint of the
                content (one scan inside PostgreSQL; see the module docstring).

        Raises:
            InvalidParameter: no such table (or no SELECT privilege on it), an unsupported
                source or column type, or two tables of one name in different schemas.
            EngineError: PostgreSQL failed (the message names only the SQLSTATE).
        """
        del name
        self._open()
        if isinstance(source, str):
            source = PostgresTable.parse(source)
        if isinstance(source, PostgresTable):
            relation = self._in_place(source)
        elif _is_frame(source):
            relation = self._load(_to_arrow(source))
        else:
            raise InvalidParameter(
                "a PostgreSQL engine reads a table of its database (PostgresTable or "
                "'schema.table') or loads a DataFrame/Arrow table; got "
                f"{type(source).__name__}"
            )
        columns = self._columns(relation)
        if not columns:
            raise InvalidParameter(
                f"the table {relation.name!r} has no column the role may read (grant SELECT)"
            )
        if version is None:
            version = self._fingerprint(relation, columns)
        self._relations[relation.name] = relation
        return TableBinding(name=relation.name, columns=columns, version=version)

    def _in_place(self, table: PostgresTable) -> _Relation:
        if table.name.startswith((_PREFIX, "pg_")):
            raise InvalidParameter(
                f"table names starting with {_PREFIX!r} or 'pg_' are reserved; rename the table "
                "or register a view of it"
            )
        target = pgsql.Identifier(table.name)
        if table.schema is not None:
            target = pgsql.Identifier(table.schema, table.name)
        query = pgsql.SQL(
            "SELECT n.nspname, c.relname, pg_catalog.has_table_privilege(c.oid, 'SELECT') "
            "FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.oid = pg_catalog.to_regclass({})"
        ).format(pgsql.Literal(target.as_string(self._con)))
        # An unqualified name resolves in the role's own search_path (not deniable's fixed
        # one, which holds only pg_catalog and the schemas of tables already bound).
        rows = self._transaction(
            lambda cur: _fetch(cur, query),
            read_only=True,
            what="reading the catalog",
            home=table.schema is None,
        )
        shown = table.name if table.schema is None else f"{table.schema}.{table.name}"
        if not rows:
            raise InvalidParameter(
                f"PostgreSQL at {self._where} has no table {shown!r} visible to the role "
                "(check the name, the schema and USAGE on the schema)"
            )
        schema, relname, readable = rows[0]
        if not readable:
            raise InvalidParameter(
                f"the role may not read {shown!r}: GRANT SELECT ON {shown} TO the role"
            )
        clash = self._relations.get(relname)
        if clash is not None and clash.schema != schema:
            raise InvalidParameter(
                f"a table named {relname!r} of schema {clash.schema!r} is already bound to this "
                f"engine; one engine reads one table per name (register a view under another "
                "name)"
            )
        return _Relation(schema=str(schema), name=str(relname), temporary=False)

    def _load(self, data: pa.Table) -> _Relation:
        """COPY an Arrow table into a new temporary table (binary COPY, no text round trip)."""
        name = f"{_PREFIX}{next(self._counter)}"
        columns: list[pgsql.Composable] = []
        types: list[str] = []
        for field in data.schema:
            pg_type = _pg_type(field)
            columns.append(
                pgsql.SQL("{} {}").format(pgsql.Identifier(field.name), pgsql.SQL(pg_type))
            )
            types.append(pg_type.split("(", 1)[0].lower())
        create = pgsql.SQL("CREATE TEMPORARY TABLE {} ({})").format(
            pgsql.Identifier(name), pgsql.SQL(", ").join(columns)
        )
        copy = pgsql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(pgsql.Identifier(name))

        def work(cur: psycopg.Cursor[Any]) -> str:
            cur.execute(create)
            with cur.copy(copy) as out:
                out.set_types(types)
                for batch in data.to_batches(max_chunksize=65536):
                    values = [_copy_values(c) for c in batch.columns]
                    for row in zip(*values, strict=True):
                        out.write_row(row)
            cur.execute(pgsql.SQL("ANALYZE {}").format(pgsql.Identifier(name)))
            return _temp_schema(cur)

        schema = self._transaction(work, read_only=False, what="loading a table")
        return _Relation(schema=schema, name=name, temporary=True)

    def _columns(self, relation: _Relation) -> tuple[tuple[str, str], ...]:
        """``(name, type)`` of each readable column, from ``information_schema.columns``."""
        query = pgsql.SQL(
            "SELECT column_name, data_type, numeric_precision, numeric_scale "
            "FROM information_schema.columns WHERE table_schema = {} AND table_name = {} "
            "ORDER BY ordinal_position"
        ).format(pgsql.Literal(relation.schema), pgsql.Literal(relation.name))
        rows = self._transaction(
            lambda cur: _fetch(cur, query), read_only=True, what="reading the catalog"
        )
        return tuple((str(r[0]), _type_name(str(r[1]), r[2], r[3])) for r in rows)

    def _fingerprint(self, relation: _Relation, columns: tuple[tuple[str, str], ...]) -> str:
        # Count and an order-independent sum of row hashes: equal data, equal version.
        query = pgsql.SQL(
            "SELECT count(*), coalesce(sum(pg_catalog.hashtextextended(CAST(__t AS text), 0)"
            "::numeric), 0) FROM {} AS __t"
        ).format(_qualified(relation))
        rows = self._transaction(
            lambda cur: _fetch(cur, query), read_only=True, what="fingerprinting the table"
        )
        digest = hashlib.sha256(repr((columns, str(rows[0][0]), str(rows[0][1]))).encode())
        return digest.hexdigest()[:32]

    # -- queries -----------------------------------------------------------------------------

    def check(self, binding: TableBinding, sql: str) -> None:
        """Plan ``sql`` (``EXPLAIN``, no row read) in a read-only transaction.

        Raises:
            SQLError: PostgreSQL refused the statement (SQLSTATE class 42: types, names);
                this depends only on the SQL and the schema.
            EngineError: PostgreSQL failed otherwise; the message names only the SQLSTATE.
            InternalError: the text is not one SELECT statement (a bug).
        """
        self._relation(binding)
        _require_select(sql)
        self._transaction(
            lambda cur: cur.execute("EXPLAIN " + sql, binary=True, prepare=False),
            read_only=True,
            what="checking the query",
            refusal="the query does not type-check against the table",
        )

    def run(self, binding: TableBinding, sql: str) -> pa.Table:
        """Run ``sql`` in a read-only transaction; return its (aggregated) result.

        Raises:
            EngineError: PostgreSQL failed (timeout, out of memory); nothing was charged.
        """
        self._relation(binding)
        _require_select(sql)

        def work(cur: psycopg.Cursor[Any]) -> pa.Table:
            if self._parallel_workers is not None:
                cur.execute(
                    pgsql.SQL("SET LOCAL max_parallel_workers_per_gather = {}").format(
                        pgsql.Literal(self._parallel_workers)
                    )
                )
            cur.execute(sql, binary=True, prepare=False)
            names = [d.name for d in cur.description or ()]
            oids = [d.type_code for d in cur.description or ()]
            rows = cur.fetchall()
            return _arrow(names, oids, rows)

        result: pa.Table = self._transaction(
            work, read_only=True, what="computing the bounded aggregates"
        )
        return result

    def sample(
        self,
        binding: TableBinding,
        *,
        rate: Fraction,
        identity: str | None,
        source: RandomSource | None = None,
    ) -> TableBinding:
        """A Bernoulli(``rate``) sample of privacy units, as a temporary table; bind it.

        The coin of :class:`~deniable.sampling.bernoulli.BernoulliFilter`, computed in
        PostgreSQL: a unit with text identity ``u`` is kept iff ``SHA-256(k ‖ u) < T``
        (digests compared as bytes, ``T = ⌊β·2^256⌋``), with a 128-bit key ``k`` from
        ``source`` sent as a bound parameter and never stored. Without ``identity`` each row
        is a unit, identified by its ``ctid`` (``(page,item)``, prefix-free text) within the
        statement's snapshot. Every unit is kept with probability ``⌊β·2^256⌋/2^256 ≤ β``,
        independently as far as anyone without the key can tell. Nothing is released or
        charged here.

        Raises:
            InvalidParameter: ``binding`` is not bound here, or the role lacks the TEMPORARY
                privilege (or the source is a view and units are rows).
            EngineError: PostgreSQL failed while drawing the sample.
        """
        relation = self._relation(binding)
        rate = Fraction(rate)
        if not 0 < rate <= 1:
            raise InvalidParameter("rate must be in (0, 1]")
        key = resolve(source).words(2).tobytes().hex()
        threshold = (rate.numerator << 256) // rate.denominator
        name = f"{_PREFIX}sample_{next(self._counter)}"
        unit = "CAST(__t.ctid AS text)" if identity is None else identity
        if threshold >= 1 << 256:
            where: pgsql.Composable = pgsql.SQL("TRUE")
            params: tuple[object, ...] = ()
        else:
            where = pgsql.SQL(
                "pg_catalog.sha256(pg_catalog.convert_to(%s || ({}), 'UTF8')) < %s"
            ).format(pgsql.SQL(unit.replace("%", "%%")))
            params = (key, threshold.to_bytes(32, "big"))
        statement = pgsql.SQL(
            "CREATE TEMPORARY TABLE {} AS SELECT * FROM {} AS {} WHERE {}"
        ).format(
            pgsql.Identifier(name), _qualified(relation), pgsql.Identifier(SAMPLE_ALIAS), where
        )

        def work(cur: psycopg.Cursor[Any]) -> str:
            cur.execute(statement, params, prepare=False)
            cur.execute(pgsql.SQL("ANALYZE {}").format(pgsql.Identifier(name)))
            return _temp_schema(cur)

        schema = self._transaction(work, read_only=False, what="drawing the sample", temp=True)
        self._relations[name] = _Relation(schema=schema, name=name, temporary=True)
        version = f"{binding.version}/sample-{uuid.uuid4().hex}"
        return TableBinding(name=name, columns=binding.columns, version=version)

    def joinable(self, binding: TableBinding, other: TableBinding) -> bool:
        """Whether one statement can read both bindings: both are bound to this engine."""
        return binding.name in self._relations and other.name in self._relations

    def materialize(self, binding: TableBinding) -> TableBinding:
        """Copy a bound table into a temporary table of this connection (a snapshot).

        Raises:
            InvalidParameter: not bound here, or the role lacks the TEMPORARY privilege.
            EngineError: PostgreSQL failed while copying.
        """
        relation = self._relation(binding)
        name = f"{_PREFIX}copy_{next(self._counter)}"
        statement = pgsql.SQL("CREATE TEMPORARY TABLE {} AS SELECT * FROM {}").format(
            pgsql.Identifier(name), _qualified(relation)
        )

        def work(cur: psycopg.Cursor[Any]) -> str:
            cur.execute(statement, prepare=False)
            cur.execute(pgsql.SQL("ANALYZE {}").format(pgsql.Identifier(name)))
            return _temp_schema(cur)

        schema = self._transaction(work, read_only=False, what="copying a table", temp=True)
        self._relations[name] = _Relation(schema=schema, name=name, temporary=True)
        return TableBinding(name=name, columns=binding.columns, version=binding.version)

    def close(self) -> None:
        """Close the connection (its temporary tables go with it)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._relations.clear()
                self._con.close()

    # -- internals ---------------------------------------------------------------------------

    def _open(self) -> None:
        if self._closed:
            raise InvalidParameter("this PostgreSQL engine is closed")

    def _relation(self, binding: TableBinding) -> _Relation:
        self._open()
        try:
            return self._relations[binding.name]
        except KeyError:
            raise InvalidParameter("this table is not bound to this engine") from None

    def _search_path(self) -> pgsql.Composable:
        schemas = dict.fromkeys(r.schema for r in self._relations.values() if not r.temporary)
        names = [pgsql.Identifier("pg_catalog"), *(pgsql.Identifier(s) for s in schemas)]
        return pgsql.SQL(", ").join(names)

    def _transaction(
        self,
        work: Callable[[psycopg.Cursor[Any]], _T],
        *,
        read_only: bool,
        what: str,
        temp: bool = False,
        refusal: str = "PostgreSQL refused a statement deniable generated",
        home: bool = False,
    ) -> _T:
        """Run ``work`` in one transaction with deniable's settings; translate failures.

        ``home``: keep the role's own ``search_path`` (catalog look-ups of unqualified names,
        whose statement qualifies every function with ``pg_catalog``).
        """
        refused: str | None = None
        failure: str | None = None
        state: str | None = None
        with self._lock:
            self._open()
            try:
                with self._cursor(read_only=read_only, home=home) as cur:
                    return work(cur)
            except psycopg.Error as e:
                state = e.sqlstate
                if state is not None and state.startswith("42") and state != "42501":
                    refused = _primary(e)
                else:
                    failure = _state(e)
        # Raised outside the handlers: PostgreSQL's exception is not even the __context__.
        if state == "42501" and temp:
            raise InvalidParameter(
                f"the PostgreSQL role lacks the TEMPORARY privilege needed for {what} "
                "(GRANT TEMPORARY ON DATABASE … TO the role), or SELECT on the table"
            )
        if state == "42501":
            raise InvalidParameter(f"the PostgreSQL role may not do this ({what}): grant SELECT")
        if refused is not None:
            raise SQLError(f"{refusal}: {refused}")
        if state == "57014":
            raise EngineError(
                f"PostgreSQL cancelled the statement while {what} (statement_timeout of "
                f"{self._timeout_ms / 1000:g} s reached, or cancelled); nothing was charged"
            )
        raise EngineError(f"PostgreSQL failed while {what} ({failure}); nothing was charged")

    @contextmanager
    def _cursor(self, *, read_only: bool, home: bool = False) -> Iterator[psycopg.Cursor[Any]]:
        con = self._con
        with con.cursor() as cur:
            cur.execute("BEGIN READ ONLY" if read_only else "BEGIN")
            try:
                settings = [
                    pgsql.SQL("SET LOCAL statement_timeout = {}").format(
                        pgsql.Literal(self._timeout_ms)
                    ),
                    *(
                        []
                        if home
                        else [pgsql.SQL("SET LOCAL search_path = {}").format(self._search_path())]
                    ),
                    *(
                        pgsql.SQL("SET LOCAL {} = {}").format(pgsql.SQL(k), pgsql.Literal(v))
                        for k, v in _TEXT_SETTINGS
                    ),
                ]
                cur.execute(pgsql.SQL("; ").join(settings))
                yield cur
            except BaseException:
                if not con.closed:
                    with suppress(psycopg.Error):
                        cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")


# -- helpers --------------------------------------------------------------------------------


def _describe(dsn: str) -> str:
    """``host:port/database`` of a URL (never the user's password)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except Exception:
        return "the given URL"
    host = info.get("host") or "localhost"
    port = info.get("port") or "5432"
    db = info.get("dbname") or "(default database)"
    return f"{host}:{port}/{db}"


def _state(error: psycopg.Error) -> str:
    state = error.sqlstate
    return f"SQLSTATE {state}" if state else type(error).__name__


def _primary(error: psycopg.Error) -> str:
    """The primary message of a class-42 error (about the SQL and the schema, no row)."""
    diag = error.diag
    message = diag.message_primary if diag is not None else None
    return (message or type(error).__name__).splitlines()[0]


def _temp_schema(cur: psycopg.Cursor[Any]) -> str:
    """The real name of this connection's temporary schema (``pg_temp_N``)."""
    cur.execute(
        "SELECT nspname FROM pg_catalog.pg_namespace WHERE oid = pg_catalog.pg_my_temp_schema()"
    )
    row = cur.fetchone()
    return str(row[0]) if row else "pg_temp"


def _fetch(cur: psycopg.Cursor[Any], query: pgsql.SQL | pgsql.Composed) -> list[tuple[Any, ...]]:
    cur.execute(query)
    return list(cur.fetchall())


def _qualified(relation: _Relation) -> pgsql.Composable:
    if relation.temporary:
        return pgsql.Identifier(relation.name)  # the temporary schema is searched first
    return pgsql.Identifier(relation.schema, relation.name)


def _require_select(sql: str) -> None:
    # Defence in depth: deniable only ever runs one SELECT it generated itself (the
    # extended protocol refuses a second statement; the transaction is read-only).
    head = sql.lstrip()[:6].upper()
    if not (head.startswith("SELECT") or head.startswith("WITH")):
        raise InternalError("the generated SQL is not a SELECT statement")


def _type_name(data_type: str, precision: object, scale: object) -> str:
    if data_type == "numeric":
        if isinstance(precision, int) and isinstance(scale, int):
            return f"DECIMAL({precision},{scale})"
        return "NUMERIC"
    return _TYPE_NAMES.get(data_type, data_type.upper())


def _pg_type(field: pa.Field) -> str:
    t = field.type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_integer(t) and not (pa.types.is_uint64(t)):
        return "BIGINT"
    if pa.types.is_uint64(t):
        return "NUMERIC(20, 0)"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "REAL"
    if pa.types.is_float64(t):
        return "DOUBLE PRECISION"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "TEXT"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    if pa.types.is_date(t):
        return "DATE"
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ" if t.tz is not None else "TIMESTAMP"
    if pa.types.is_decimal(t):
        return f"NUMERIC({t.precision}, {t.scale})"
    raise InvalidParameter(
        f"column {field.name!r} has type {t}, which deniable cannot load into PostgreSQL; "
        "convert it to an integer, float, string, boolean, date or timestamp column"
    )


def _copy_values(column: pa.Array | pa.ChunkedArray) -> list[object]:
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_float16(column.type):
        column = column.cast(pa.float32())
    values: list[object] = column.to_pylist()
    return values


def _is_frame(source: object) -> bool:
    module = type(source).__module__.split(".", 1)[0]
    name = type(source).__name__
    if module == "pandas" and name == "DataFrame":
        return True
    if module == "polars" and name in ("DataFrame", "LazyFrame"):
        return True
    return module == "pyarrow" and name in ("Table", "RecordBatch", "RecordBatchReader")


def _to_arrow(source: object) -> pa.Table:
    module = type(source).__module__.split(".", 1)[0]
    if isinstance(source, pa.Table):
        return source
    if isinstance(source, pa.RecordBatch):
        return pa.Table.from_batches([source])
    if isinstance(source, pa.RecordBatchReader):
        return source.read_all()
    if module == "polars":
        frame: Any = source
        if type(source).__name__ == "LazyFrame":
            frame = frame.collect()
        table: pa.Table = frame.to_arrow()
        return table
    return pa.Table.from_pandas(source, preserve_index=False)


# Result types by PostgreSQL type OID (the generated statement returns only these).
_INT_OIDS = frozenset({20, 21, 23})
_FLOAT_OIDS = frozenset({700, 701})
_TEXT_OIDS = frozenset({25, 1042, 1043})
_NUMERIC_OID = 1700
_BOOL_OID = 16


def _arrow(names: Sequence[str], oids: Sequence[int], rows: list[tuple[Any, ...]]) -> pa.Table:
    """The result rows as an Arrow table; exact integers stay exact (int64 or decimal)."""
    columns: list[pa.Array] = []
    for j, oid in enumerate(oids):
        values = [r[j] for r in rows]
        if oid in _INT_OIDS:
            columns.append(pa.array(values, type=pa.int64()))
        elif oid in _FLOAT_OIDS:
            columns.append(pa.array(values, type=pa.float64()))
        elif oid in _TEXT_OIDS:
            columns.append(pa.array(values, type=pa.string()))
        elif oid == _BOOL_OID:
            columns.append(pa.array(values, type=pa.bool_()))
        elif oid == _NUMERIC_OID:
            columns.append(_numeric(values))
        else:
            columns.append(pa.array(values))
    return pa.table(columns, names=list(names)) if names else pa.table({})


def _numeric(values: list[Decimal | None]) -> pa.Array:
    """NUMERIC values: int64 when integral and in range, else decimal128(38, s)."""
    present = [v for v in values if v is not None]
    if all(v.is_finite() and v == v.to_integral_value() for v in present):
        ints = [None if v is None else int(v) for v in values]
        if all(i is None or -(2**63) <= i < 2**63 for i in ints):
            return pa.array(ints, type=pa.int64())
        if all(i is None or abs(i) < 10**38 for i in ints):
            return pa.array(ints, type=pa.decimal128(38, 0))
    if not all(v.is_finite() for v in present):
        return pa.array([None if v is None else float(v) for v in values], type=pa.float64())
    scale = max((-int(v.as_tuple().exponent) for v in present), default=0)
    scale = max(0, min(scale, 37))
    return pa.array(values, type=pa.decimal128(38, scale))

"""Bernoulli sampling of a table inside the engine (DuckDB SQL), with a secret per-unit coin.

Every privacy unit (a row, or all rows sharing the values of the ``by`` columns, e.g. a
``user_id``) is kept independently with probability ``β``; the amplification theorem of
Li–Qardaji–Su then makes an ``(ε, δ)``-DP mechanism run on the sample
``(ln(1 + β(e^ε − 1)), βδ)``-DP with respect to the whole table
(:func:`deniable.accounting.amplification.amplify_bernoulli`).

**How the coin is drawn.** The sample is computed by the engine, not in Python: no row is
fetched. A 128-bit key ``k`` is drawn from the CSPRNG (``deniable.noise``; never stored, never
written into SQL text: it is a bound query parameter), and a unit with identity ``u`` is kept
iff

    ``SHA-256(hex(k) ‖ enc(u)) < T``,  ``T = ⌊β·2^256⌋``,

comparing the 64-hex-digit digests as strings (equal-length lowercase hex compares like the
numbers). ``enc`` is prefix-free: ``rowid`` in decimal followed by ``.``, or, for ``by``
columns, each value as ``<byte length>:<text>`` (``<decimal>.`` for integer columns; a
marker for NULL). So the inclusion probability is
exactly ``T/2^256 ∈ (β − 2^-256, β]`` (the accounting uses ``β``, an upper bound, and the
amplified loss grows with the rate, so that is safe).

**Why a keyed hash and not DuckDB's sampler.** ``USING SAMPLE bernoulli(β) REPEATABLE(s)``
draws from a non-cryptographic generator whose state a 64-bit seed fixes: someone who sees
which rows were kept (or a release that depends on it) may reconstruct the state and hence
the target's coin. With a keyed pseudo-random function the coins of distinct identities are,
to anyone without the key, indistinguishable from independent Bernoulli(``T/2^256``) draws
(assuming SHA-256 with a secret fixed-length prefix is a PRF on prefix-free inputs — the
length-extension weakness of secret-prefix hashing needs an observed digest, and no digest
ever leaves the engine). Learning the coins of other units therefore says nothing about the
target's, which is what the amplification theorem needs. Cost: one SHA-256 per row, about
0.5 µs per row per core in DuckDB 2.0 (10⁷ rows in ≈ 2.7 s on 2 idle cores, some 20 times a
plain GROUP BY over the same rows; DuckDB's own non-cryptographic sampler is ~2× a GROUP BY).

**Identity.** By default the identity is the base table's ``rowid`` (units are rows); pass
``by=[privacy unit column]`` to sample whole privacy units, which is what user-level
guarantees need (rows with equal identity are kept or dropped together). Views and other
relations without ``rowid`` and without ``by`` are numbered with ``row_number() OVER ()``,
whose order does not depend on the key, then the sample is materialised so that it is fixed.

**One sample, one budget.** A :class:`SampledTable` charges queries the *amplified* loss of
everything run on that same sample: the cumulative cost is ``amplify(Σ losses)``, so each
charge is the increment (amplification is not additive: charging each query its own
amplified loss would under-count). Drawing a new sample per release is cheaper, see
:mod:`deniable.sampling.fresh`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction
from types import TracebackType
from typing import Any

from deniable.accounting.amplification import amplify_bernoulli, sampling_rate
from deniable.accounting.filter import BudgetFilter
from deniable.accounting.loss import Epsilon, EpsilonDelta, Number, PrivacyLoss
from deniable.errors import InvalidParameter, SQLError
from deniable.noise.source import RandomSource, resolve
from deniable.sampling.account import SampleAccount
from deniable.sqlnames import quote_identifier, quote_table
from deniable.sqlrunner import SQLRunner, require_runner

__all__ = [
    "ROWID_IDENTITY",
    "BernoulliFilter",
    "SampledTable",
    "identity_sql",
    "quote_identifier",
    "sample_table",
]

ROWID_IDENTITY = "(CAST(rowid AS VARCHAR) || '.')"
"""The identity of a base-table row: its ``rowid`` in decimal, terminated (prefix-free)."""

_INTEGER_TYPES = frozenset(
    {
        "TINYINT",
        "SMALLINT",
        "INTEGER",
        "BIGINT",
        "HUGEINT",
        "UTINYINT",
        "USMALLINT",
        "UINTEGER",
        "UBIGINT",
        "UHUGEINT",
    }
)

_ROW_NUMBER = "__deniable_row_number"
_names = itertools.count()
_filters = itertools.count()


def identity_sql(columns: Sequence[str], types: Mapping[str, str] | None = None) -> str:
    """SQL for a prefix-free text identity of the ``columns`` (one privacy unit per value).

    Each value becomes ``<byte length>:<text>``, or ``<decimal>.`` for a column whose DuckDB
    type (``types``, optional) is an integer type; NULL becomes ``-`` (or ``N`` for an
    integer column). Every field's encodings form a prefix-free set, so distinct tuples of
    values whose texts differ get distinct identities and no identity is a prefix of another.

    Examples:
        >>> print(identity_sql(["u"]))
        COALESCE(CAST(strlen(CAST("u" AS VARCHAR)) AS VARCHAR) || ':' || CAST("u" AS VARCHAR), '-')
        >>> print(identity_sql(["u"], {"u": "BIGINT"}))
        COALESCE(CAST("u" AS VARCHAR) || '.', 'N')
    """
    if isinstance(columns, str) or not columns:
        raise InvalidParameter("by must be a non-empty list of column names")
    parts = []
    for col in columns:
        c = f"CAST({quote_identifier(col)} AS VARCHAR)"
        if types is not None and types.get(col, "").upper() in _INTEGER_TYPES:
            parts.append(f"COALESCE({c} || '.', 'N')")  # digits and a sign: no '.' inside
        else:
            parts.append(f"COALESCE(CAST(strlen({c}) AS VARCHAR) || ':' || {c}, '-')")
    return " || ".join(parts)


class BernoulliFilter:
    """A secret coin per privacy unit: an SQL predicate keeping each unit w.p. ``≈ β``.

    The key is drawn from ``source`` (the CSPRNG by default) when the filter is made and is
    only ever passed to the engine as a query parameter. The same filter applied twice gives
    the same sample (use it for the several passes of one release); a new filter gives an
    independent sample.

    Args:
        rate: the sampling rate ``β ∈ (0, 1]`` (an exact rational; floats are dyadic).
        source: where the key comes from.

    Examples:
        >>> from deniable.noise.testing import SeededRandom
        >>> flt = BernoulliFilter(rate=0.25, source=SeededRandom(0))
        >>> flt.effective_rate == Fraction(1, 4)
        True
        >>> sql, params = flt.predicate(ROWID_IDENTITY)
        >>> sorted(p.rsplit("_", 1)[0] for p in params)
        ['deniable_sample_key', 'deniable_sample_threshold']
    """

    __slots__ = ("_key", "_key_param", "_threshold", "_threshold_param", "rate")

    def __init__(self, *, rate: Number, source: RandomSource | None = None) -> None:
        self.rate = sampling_rate(rate)
        self._key = resolve(source).words(2).tobytes().hex()
        # Parameter names unique per filter, so that several filters fit in one statement.
        serial = next(_filters)
        self._key_param = f"deniable_sample_key_{serial}"
        self._threshold_param = f"deniable_sample_threshold_{serial}"
        threshold = (self.rate.numerator << 256) // self.rate.denominator  # ⌊β·2^256⌋
        self._threshold = None if threshold >= 1 << 256 else f"{threshold:064x}"

    @property
    def effective_rate(self) -> Fraction:
        """The exact inclusion probability ``⌊β·2^256⌋/2^256`` (``≤ β``, within ``2^-256``)."""
        if self._threshold is None:
            return Fraction(1)
        return Fraction(int(self._threshold, 16), 1 << 256)

    def predicate(self, identity: str) -> tuple[str, dict[str, Any]]:
        """Return ``(sql, params)``: a boolean SQL expression and its named parameters.

        ``identity`` is an SQL expression giving each privacy unit's identity as text
        (:data:`ROWID_IDENTITY` or :func:`identity_sql`). Merge ``params`` into the named
        parameters of the statement that uses ``sql``.
        """
        if self._threshold is None:
            return "TRUE", {}
        sql = f"(sha256(${self._key_param} || ({identity})) < ${self._threshold_param})"
        return sql, {self._key_param: self._key, self._threshold_param: self._threshold}

    def __repr__(self) -> str:  # never show the key
        return f"BernoulliFilter(rate={self.rate})"


def _columns(runner: SQLRunner, table_sql: str) -> dict[str, str]:
    """Column names and engine type names of a table (reads no rows)."""
    columns = runner.columns(table_sql)
    if columns is None:
        raise SQLError(f"cannot read table {table_sql}")
    return dict(columns)


def _has_rowid(runner: SQLRunner, table_sql: str) -> bool:
    return runner.columns(f"(SELECT rowid FROM {table_sql})") is not None


class SampledTable:
    """A materialised Bernoulli sample in the engine, which charges queries amplified losses.

    Made by :func:`sample_table`. The sample is a temporary table (:attr:`name`) in the same
    engine session (``runner``); its size is private (it reveals how many units were kept)
    and is therefore not exposed. Use it as a context manager, or call :meth:`drop`, to remove it.
    """

    def __init__(
        self,
        runner: SQLRunner,
        *,
        name: str,
        source_table: str,
        rate: Fraction,
        effective_rate: Fraction,
        by: tuple[str, ...] | None,
    ) -> None:
        self._runner = runner
        self.name = name
        self.source_table = source_table
        self.rate = rate
        self.effective_rate = effective_rate
        self.by = by
        self._account = SampleAccount(rate=rate)
        self._dropped = False

    # -- the data ---------------------------------------------------------------------------

    @property
    def sql_name(self) -> str:
        """The quoted name to use in SQL."""
        return quote_identifier(self.name)

    def relation(self) -> Any:
        """The engine's lazy handle on the sample (a DuckDB relation): nothing is fetched."""
        self._check_alive()
        return self._runner.table(self.name)

    def drop(self) -> None:
        """Remove the sample from the engine (idempotent)."""
        if not self._dropped:
            self._runner.execute(f"DROP TABLE IF EXISTS {self.sql_name}")
            self._dropped = True

    def __enter__(self) -> SampledTable:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.drop()

    def _check_alive(self) -> None:
        if self._dropped:
            raise InvalidParameter("this sample was dropped")

    # -- accounting --------------------------------------------------------------------------

    def amplify(self, loss: Epsilon | EpsilonDelta) -> EpsilonDelta:
        """The loss of ``loss``'s mechanism run on this sample, *if it were the only one*."""
        return amplify_bernoulli(loss, self.rate)

    @property
    def spent(self) -> EpsilonDelta:
        """The amplified loss charged so far for everything run on this sample."""
        return self._account.spent

    @property
    def spent_on_sample(self) -> EpsilonDelta:
        """The composed (unamplified) loss of everything run on this sample."""
        return self._account.spent_on_sample

    def charge(self, loss: PrivacyLoss, *, budget: BudgetFilter | None = None) -> EpsilonDelta:
        """Record a mechanism with loss ``loss`` run on this sample; return what it costs.

        The cost is the increment ``amplify(S + loss) − amplify(S)`` where ``S`` is what was
        already run on this sample (basic composition), so that the total charged is always
        the amplified loss of everything run on the sample
        (:class:`~deniable.sampling.account.SampleAccount`). If ``budget`` is given the cost
        is charged to it; if the budget refuses, nothing is recorded.

        Raises:
            InvalidParameter: for a ρ-zCDP loss (convert it first), or a dropped sample.
            UnsafeQuery: the sample was claimed by a sampling-based (DPS) algorithm.
            BudgetExceeded: ``budget`` cannot pay the cost.
        """
        self._check_alive()
        with self._account.pending(loss) as cost:
            if budget is not None:
                budget.charge(cost)  # the only fallible write; raises before any state changes
        return cost

    def claim_exclusive(self) -> None:
        """Reserve this sample for one algorithm whose guarantee comes from sampling alone.

        See :meth:`deniable.sampling.account.SampleAccount.claim_exclusive`.

        Raises:
            UnsafeQuery: a mechanism was already charged on this sample.
        """
        self._check_alive()
        self._account.claim_exclusive()

    def __repr__(self) -> str:
        return (
            f"SampledTable(name={self.name!r}, source={self.source_table!r}, "
            f"rate={self.rate}, by={self.by})"
        )


def sample_table(
    runner: SQLRunner,
    table: str,
    *,
    rate: Number,
    by: Sequence[str] | None = None,
    source: RandomSource | None = None,
) -> SampledTable:
    """Draw a Bernoulli(``rate``) sample of ``table`` in the engine and materialise it.

    Each privacy unit (row, or ``by`` value) is kept independently with probability ``rate``
    (exactly ``⌊β·2^256⌋/2^256``) using a fresh secret key from ``source``; see the module
    docstring for the construction and its guarantee. Runs one ``CREATE TEMP TABLE … AS
    SELECT … WHERE <coin>`` statement: no row comes into Python.

    Drawing the sample releases nothing and costs nothing; queries on it are charged through
    :meth:`SampledTable.charge`.

    Args:
        runner: the engine holding ``table`` (DuckDB SQL), e.g.
            :class:`deniable.engines.duckdb.DuckDBRunner` around your connection.
        table: a table or view name, optionally ``schema.name``.
        rate: ``β ∈ (0, 1]``.
        by: columns identifying the privacy unit; None samples rows.
        source: randomness for the key (the CSPRNG by default).

    Raises:
        SQLError: the table cannot be read.
        InvalidParameter: bad rate, or ``by`` names an unknown column.

    Examples:
        >>> import duckdb
        >>> from deniable.engines.duckdb import DuckDBRunner
        >>> con = duckdb.connect()
        >>> _ = con.execute("CREATE TABLE people AS SELECT range AS id FROM range(1000)")
        >>> with sample_table(DuckDBRunner(con), "people", rate=0.5) as s:
        ...     s.amplify(Epsilon(epsilon=1)).epsilon < 1
        True
    """
    runner = require_runner(runner)
    beta = sampling_rate(rate)
    table_sql = quote_table(table)
    columns = _columns(runner, table_sql)
    src = resolve(source)
    flt = BernoulliFilter(rate=beta, source=src)
    name = f"deniable_sample_{next(_names)}_{src.words(1).tobytes().hex()[:8]}"
    if by is not None:
        by_cols = (by,) if isinstance(by, str) else tuple(by)
        unknown = [c for c in by_cols if c not in columns]
        if unknown or not by_cols:
            raise InvalidParameter(f"by: unknown column(s) {unknown} of {table}")
        where, params = flt.predicate(identity_sql(by_cols, columns))
        select = f"SELECT * FROM {table_sql} WHERE {where}"
    elif _has_rowid(runner, table_sql):
        by_cols = None
        where, params = flt.predicate(ROWID_IDENTITY)
        select = f"SELECT * FROM {table_sql} WHERE {where}"
    else:
        by_cols = None
        rn = quote_identifier(_ROW_NUMBER)
        if _ROW_NUMBER in columns:
            raise InvalidParameter(f"column name {_ROW_NUMBER} is reserved")
        where, params = flt.predicate(f"(CAST({rn} AS VARCHAR) || '.')")
        select = (
            f"SELECT * EXCLUDE ({rn}) FROM "
            f"(SELECT *, row_number() OVER () AS {rn} FROM {table_sql}) WHERE {where}"
        )
    runner.execute(f"CREATE TEMP TABLE {quote_identifier(name)} AS {select}", params)
    return SampledTable(
        runner,
        name=name,
        source_table=table,
        rate=beta,
        effective_rate=flt.effective_rate,
        by=by_cols,
    )

"""What the query compiler needs from an engine: declared capabilities and five calls.

Engines are thin adapters. The compiler reads :class:`Capabilities` (never an engine's name)
to choose how to build the generated statement, a sqlglot expression tree rendered in the
engine's dialect by sqlglot's generator; the session calls :meth:`Engine.bind` once per
table (and :meth:`Engine.sample` for a table queried through a sample) and then
:meth:`Engine.check` and :meth:`Engine.run` with SQL that deniable generated.
No engine ever receives the analyst's text.

Capability sets of engines that do not exist yet (:data:`POSTGRES_CAPABILITIES`,
:data:`SPARK_CAPABILITIES`) live here so that the compiler's output for them can be rendered
and reviewed (golden tests) before their adapters land.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from sqlglot import exp

if TYPE_CHECKING:
    from fractions import Fraction

    import pyarrow as pa

    from deniable.noise.source import RandomSource

SAMPLE_ALIAS = "__t"
"""The alias of the table in the identity expression given to :meth:`Engine.sample` (the
compiler's alias of the source table)."""

Unary = Callable[[exp.Expression], exp.Expression]
"""Builds an expression of one argument (e.g. the engine's hash of a value)."""
Binary = Callable[[exp.Expression, exp.Expression], exp.Expression]
"""Builds an expression of two arguments (e.g. the bitwise exclusive or of two hashes)."""


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Facts about an engine's SQL that change how deniable builds a query.

    Functions are given either as a name (a plain call ``name(arg, …)``) or as a builder of
    the sqlglot expression; the compiler only calls :meth:`hash`, :meth:`xor`, :meth:`nfc`
    and :meth:`is_nan_test`.

    Attributes:
        dialect: the sqlglot dialect the statement is rendered in.
        try_expression: ``TRY(expr)`` turns a runtime error into NULL (used so that no row
            predicate can fail on one dataset and not on its neighbour).
        semi_join: ``SEMI JOIN`` / ``ANTI JOIN`` are available (else ``[NOT] EXISTS``).
        null_safe_equal: ``IS NOT DISTINCT FROM`` may be used as a join condition (else
            ``(a = b OR (a IS NULL AND b IS NULL))``).
        hash_function: a deterministic, well-mixed 64-bit hash of one value, never NULL
            (unsigned when :attr:`unsigned_hash`, else a signed BIGINT).
        xor_function: bitwise exclusive or of two such hashes (or of a hash and a key);
            None: sqlglot's bitwise xor of the dialect (``#`` in PostgreSQL, ``^`` in Spark).
        unicode_nfc: normalises text to Unicode NFC (None: the engine has none; text privacy
            units are then refused).
        is_nan: tests a double for NaN.
        unsigned_hash: hashes are UBIGINT (the keys are cast to UBIGINT, else BIGINT).
        wide_sum: ``sum`` of BIGINT returns a wider exact type (HUGEINT, NUMERIC), so that
            sums over many rows never overflow; else they are summed as DECIMAL(38, 0).
        try_arithmetic: without :attr:`try_expression`, ``try_add``, ``try_subtract``,
            ``try_multiply``, ``try_divide`` and ``TRY_CAST`` exist (Spark): the row
            predicate's arithmetic is spelled with them. Otherwise a predicate that could
            raise at run time (arithmetic, casts) is refused on an engine without TRY.
        int_hash_function: a cheaper hash for the 64-bit integers inside the keyed hash
            chain (None: :attr:`hash_function`); PostgreSQL's ``hashint8extended`` avoids
            the text conversion ``hashtextextended`` needs.
        pack_counts: a count of values may ride in the low bits of its sum (one aggregate
            instead of two; partitions of ``2^bits`` rows or more are then summed again from
            their rows). Worth it where common table expressions are computed once (DuckDB,
            PostgreSQL); Spark recomputes them for each use, so the re-sum would cost another
            scan and several shuffles.
        wide_packing: a packed count rides in a sum kept in the engine's wide sum type
            (DuckDB's HUGEINT, PostgreSQL's NUMERIC; read back as :attr:`wide_bitwise` says),
            so only the per-row packed value must fit BIGINT: the count gets as many low bits
            as that allows (up to the compiler's ``PACK_BITS_MAX``). With 32 bits or more the
            re-sum of partitions of ``2^bits`` rows is left out (see the compiler's
            ``GIANT_FREE_BITS``).
        wide_bitwise: ``>>`` and ``&`` apply to the wide sum type and are exact on negative
            values (DuckDB's HUGEINT), so a wide packed sum ``p`` is read back as ``p >> bits``
            and ``p & (2^bits - 1)``. Else (PostgreSQL's NUMERIC has neither operator) it is
            read back with exact decimal arithmetic: ``floor(p * 2^-bits)`` (``2^-bits``
            written out as its finite decimal expansion: a NUMERIC product is exact, where a
            NUMERIC quotient would be rounded) and ``p - 2^bits * floor(p * 2^-bits)``, the
            same floor quotient and non-negative remainder for negative sums too. Only read
            with :attr:`wide_packing`.
        repartition_by_unit: the rows of the level-1 aggregation are hinted to be
            repartitioned by privacy unit (Spark's ``REPARTITION(__u)`` hint), so that one
            shuffle serves both the (unit, partition) aggregation and the per-unit partition
            window; without it Spark shuffles twice (measured at 10⁷ rows on local Spark:
            2.83× → 2.18× the two-level floor; 3·10⁷: 2.50× → 1.83×). It moves raw rows
            rather than per-(unit, partition) partial aggregates, which costs more where units
            have many rows per partition.
        wide_integer: an exact integer type of at least 127 bits whose integer division
            (sqlglot's ``IntDiv``) truncates towards zero and stays exact: ``HUGEINT`` in
            DuckDB (its DECIMAL division is a double), ``DECIMAL(38, 0)`` elsewhere.
        utf8_bytes: the UTF-8 bytes of a text, as the engine's binary type (BLOB, bytea,
            BINARY): values compared, grouped and hashed byte for byte, whatever the text's
            collation (graph node ids, :func:`deniable.graph.sqlgen.node_id`).
    """

    dialect: str
    try_expression: bool
    semi_join: bool
    null_safe_equal: bool
    hash_function: str | Unary
    xor_function: str | Binary | None
    unicode_nfc: str | Unary | None
    is_nan: str | Unary
    unsigned_hash: bool = True
    wide_sum: bool = True
    try_arithmetic: bool = False
    wide_integer: str = "DECIMAL(38, 0)"
    int_hash_function: str | Unary | None = None
    pack_counts: bool = True
    wide_packing: bool = False
    wide_bitwise: bool = True
    repartition_by_unit: bool = False
    utf8_bytes: str | Unary = "encode"

    def bytes_of(self, text: exp.Expression) -> exp.Expression:
        """The UTF-8 bytes of ``text`` (see :attr:`utf8_bytes`)."""
        return _call1(self.utf8_bytes, text)

    def hash(self, value: exp.Expression) -> exp.Expression:
        """The engine's 64-bit hash of ``value`` (see :attr:`hash_function`)."""
        return _call1(self.hash_function, value)

    def int_hash(self, value: exp.Expression) -> exp.Expression:
        """The engine's 64-bit hash of a non-NULL 64-bit integer (a step of the chain)."""
        return _call1(self.int_hash_function or self.hash_function, value)

    def xor(self, a: exp.Expression, b: exp.Expression) -> exp.Expression:
        """Bitwise exclusive or of two 64-bit integers."""
        f = self.xor_function
        if f is None:
            return exp.BitwiseXor(this=a, expression=b)
        if isinstance(f, str):
            return exp.Anonymous(this=f, expressions=[a, b])
        return f(a, b)

    def nfc(self, text: exp.Expression) -> exp.Expression | None:
        """``text`` normalised to Unicode NFC, or None when the engine cannot."""
        if self.unicode_nfc is None:
            return None
        return _call1(self.unicode_nfc, text)

    def is_nan_test(self, value: exp.Expression) -> exp.Expression:
        """A predicate: ``value`` (a double) is NaN."""
        return _call1(self.is_nan, value)


def _call1(f: str | Unary, arg: exp.Expression) -> exp.Expression:
    if isinstance(f, str):
        return exp.Anonymous(this=f, expressions=[arg])
    return f(arg)


def _type(t: exp.DType) -> exp.DataType:
    return exp.DataType.build(t)


def _postgres_hash(value: exp.Expression) -> exp.Expression:
    # hashtextextended(text, seed) -> bigint, of the value's text; NULL hashes to 0.
    text = exp.Cast(this=value, to=_type(exp.DataType.Type.TEXT))
    hashed = exp.Anonymous(this="hashtextextended", expressions=[text, exp.Literal.number(0)])
    return exp.Coalesce(this=hashed, expressions=[exp.Literal.number(0)])


def _postgres_int_hash(value: exp.Expression) -> exp.Expression:
    # hashint8extended(bigint, seed) -> bigint: the chain's steps are BIGINTs, never NULL.
    return exp.Anonymous(this="hashint8extended", expressions=[value, exp.Literal.number(0)])


def _postgres_is_nan(value: exp.Expression) -> exp.Expression:
    # PostgreSQL has no isnan(): NaN equals NaN (and only NaN) among double precision values.
    nan = exp.Cast(this=exp.Literal.string("NaN"), to=_type(exp.DataType.Type.DOUBLE))
    return exp.EQ(this=value, expression=nan)


def _postgres_bytes(text: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="convert_to", expressions=[text, exp.Literal.string("UTF8")])


def _spark_bytes(text: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this="encode", expressions=[text, exp.Literal.string("UTF-8")])


def _normalize_nfc(text: exp.Expression) -> exp.Expression:
    return exp.Normalize(this=text, form=exp.var("NFC"))


DUCKDB_CAPABILITIES = Capabilities(
    dialect="duckdb",
    try_expression=True,
    semi_join=True,
    null_safe_equal=True,
    hash_function="hash",
    xor_function="xor",
    unicode_nfc="nfc_normalize",
    is_nan="isnan",
    unsigned_hash=True,
    wide_sum=True,
    wide_integer="HUGEINT",
    wide_packing=True,
)
"""DuckDB: ``hash`` (UBIGINT), ``xor``, ``TRY``, SEMI JOIN, ``nfc_normalize``, HUGEINT sums."""

POSTGRES_CAPABILITIES = Capabilities(
    dialect="postgres",
    try_expression=False,
    semi_join=False,
    null_safe_equal=True,
    hash_function=_postgres_hash,
    int_hash_function=_postgres_int_hash,
    xor_function=None,
    unicode_nfc=_normalize_nfc,
    is_nan=_postgres_is_nan,
    unsigned_hash=False,
    wide_sum=True,
    wide_bitwise=False,
    utf8_bytes=_postgres_bytes,
)
"""PostgreSQL (13+): ``hashtextextended`` of the text (BIGINT), ``#``, ``EXISTS``,
``normalize(…, NFC)``, NUMERIC sums; no TRY, so row predicates that could raise are refused."""

SPARK_CAPABILITIES = Capabilities(
    dialect="spark",
    try_expression=False,
    semi_join=True,
    null_safe_equal=True,
    hash_function="xxhash64",
    xor_function=None,
    unicode_nfc=None,
    is_nan="isnan",
    unsigned_hash=False,
    wide_sum=False,
    try_arithmetic=True,
    pack_counts=False,
    repartition_by_unit=True,
    utf8_bytes=_spark_bytes,
)
"""Spark SQL (3.3+): ``xxhash64`` (BIGINT), ``^``, LEFT SEMI JOIN, ``try_*`` arithmetic,
DECIMAL(38, 0) sums; no NFC normalisation, so text privacy units are refused."""


@dataclass(frozen=True, slots=True)
class TableBinding:
    """How generated SQL refers to one registered table.

    Attributes:
        name: the identifier to use in ``FROM`` (quoted by the compiler).
        columns: ``(name, engine type)`` pairs, from the schema only.
        version: an opaque data version.
    """

    name: str
    columns: tuple[tuple[str, str], ...]
    version: str


class Engine(Protocol):
    """An engine adapter."""

    capabilities: ClassVar[Capabilities]

    def bind(self, name: str, source: object, *, version: str | None = None) -> TableBinding:
        """Make ``source`` queryable; return how to refer to it."""
        ...

    def check(self, binding: TableBinding, sql: str) -> None:
        """Bind and type-check generated SQL without reading rows; raise on error."""
        ...

    def run(self, binding: TableBinding, sql: str) -> pa.Table:
        """Run generated SQL and return its (aggregated) result."""
        ...

    def sample(
        self,
        binding: TableBinding,
        *,
        rate: Fraction,
        identity: str | None,
        source: RandomSource | None = None,
    ) -> TableBinding:
        """Materialise a Bernoulli(``rate``) sample of privacy units; return its binding.

        ``identity`` is an SQL expression of a unit's text identity over the table aliased
        :data:`SAMPLE_ALIAS` (None: rows are units).
        """
        ...

    def joinable(self, binding: TableBinding, other: TableBinding) -> bool:
        """Whether one statement can read both tables (e.g. the same database connection)."""
        ...

    def materialize(self, binding: TableBinding) -> TableBinding:
        """Copy a bound table into the engine; return the copy's binding.

        A snapshot that later changes of the source cannot reach: public tables rely on it,
        so that properties checked at registration (a unique key) keep holding.
        """
        ...

    def close(self) -> None:
        """Release the engine's resources."""
        ...


def column_names(binding: TableBinding) -> Sequence[str]:
    """The column names of a binding, in order."""
    return [c for c, _ in binding.columns]

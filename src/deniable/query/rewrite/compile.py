"""Stage 4 of the SQL compiler: generate the engine's bounded-aggregation statement.

The generated statement is one ``WITH … SELECT``, built as a sqlglot expression tree from
deniable's own identifiers, literals and the validated WHERE tree — never from the analyst's
text, and never by formatting SQL text. sqlglot's generator renders the tree in the engine's
dialect (:meth:`CompiledQuery.render`); what differs between engines is read from their
:class:`~deniable.engines.base.Capabilities`, never from their names. Its shape follows the
rewrite rules, applied in order (each one CTE below):

1. **filter and clamp** (``rows``): the row predicate (wrapped so that it cannot raise: a
   failing expression counts as FALSE), public-key domains, non-NULL privacy unit; one
   canonical unit, the group keys, and each measure's per-row value: NaN→NULL, clamp to the
   bounds (±inf clamps too), round to the fixed-point grid as an integer, and clamp that
   integer to the bounds' grid units (engines break rounding ties differently).
2. **per unit and partition** (``l1``): ``GROUP BY unit, keys`` — the work of the two-level
   floor, which a user-level DP query cannot avoid.
3. **bound partitions**: each unit keeps the ``max_groups`` partitions ranked first by
   ``H(secret₂; unit, keys)`` — a window over the (unit, partition) rows, not over rows.
4. **bound rows**: a kept partition where a unit has ``n`` rows contributes to every
   additive measure (counts, sums, sums of squares) the *expected value* of a uniform
   ``max_rows``-row subset of them: ``min(n, r)`` rows, and ``round(T·r/n)`` (half away
   from zero, in an exact wide integer) of each total ``T`` — its own totals when
   ``n ≤ r``. No row is ranked or read again for them. The contribution is a deterministic
   function of the unit's own rows, bounded by ``r`` times the per-row bound exactly as a
   random subset's (``|T| ≤ n·max``), so sensitivities are unchanged; it is clamped to that
   bound as well, so that no arithmetic mistake could exceed it. A centred sum is scaled
   after centring (one rounding). The answer has less variance than a random subset's
   and no bias beyond half a grid unit per partition. A count of values packed in the low
   bits of its sum is exact below ``2^bits`` rows; partitions with more are summed again
   from their rows (``__giant``). Where the engine keeps such sums wide (capability
   ``wide_packing``: DuckDB's HUGEINT) the count gets ``bits ≥ GIANT_FREE_BITS`` (32) and
   the re-sum is left out: a partition of over 4·10⁹ rows of one unit in one group would
   read its totals modulo ``2^bits`` — inexact, still clamped to its bounds.
   Histograms (quantiles, MIN, MAX) and distinct counts need real rows: the kept partitions
   above ``max_rows`` keep ``max_rows`` rows ranked by ``H(secret₁; unit, keys, values)``
   (read again, joined to the short list of those partitions), every other kept partition
   keeps all its rows (read again through a second join, no ranking). Only the rows read
   again are clamped and binned. ``H(key; a₀, a₁, …)`` is the keyed chain hash of
   :meth:`_Sql.keyed_hash` (not the engine's multi-argument hash, whose orders are far
   from uniform); the keys come from a CSPRNG for each query, so the rows and partitions
   kept are chosen independently of their magnitudes. Ungrouped queries with such
   measures use the plain form below (there, most rows are in partitions above
   ``max_rows``).
5. **aggregate** per partition: number of units, rows, values, exact integer sums (clamped
   to ±(2^62−1) so that they fit the exact samplers), and — for quantiles — histograms over
   the candidate grid, all in one result set (``__part`` 0 for aggregates, ``j`` for the
   histogram of the ``j``-th quantile).

Which partitions a unit keeps does not depend on its rows, so bounding partitions before or
after rows gives the same result; doing it first leaves fewer partitions to scale or re-read.
The *plain form* of steps 3–4 — rank every row (``__ranked``), then every partition of the
kept rows, with the same hashes and tie-breaks, and the additive totals of every row of the
kept partitions — keeps exactly the same partitions and rows for the same secrets, so both
forms give identical aggregates; it is the reference that tests compare the default form
with (:data:`PLAIN_FORM`). Tables without a privacy unit skip steps 2–4 (each row is a unit
and contributes one row to one partition).

Row hashes use the values as well as the unit and keys (no engine gives a stable row id for
every source): identical rows tie, and which of two identical rows is kept does not matter.

Where an engine lacks something the statement needs, the compiler either spells the
capability's alternative (``EXISTS`` for SEMI JOIN, ``(a = b OR (a IS NULL AND b IS NULL))``
for IS NOT DISTINCT FROM, ``try_add``… for TRY, DECIMAL sums for HUGEINT) or refuses with
:class:`~deniable.errors.UnsafeQuery` naming the engine's limitation. Every refusal depends
only on the query, the catalog and the engine, never on the data.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from deniable.engines.base import SAMPLE_ALIAS, Capabilities
from deniable.errors import InternalError, UnsafeQuery
from deniable.query.catalog import Bounds, Column, ColumnKind
from deniable.query.measures import (
    ClampedMeasure,
    DistinctValues,
    HistogramMeasure,
    Measure,
    RowCount,
    SquaresMeasure,
    SumMeasure,
    UnitCount,
    ValueCount,
)
from deniable.query.plan import DPPlan
from deniable.query.postprocess import COMPARISONS, construct
from deniable.query.rowexpr import Clamp
from deniable.sqlnames import identifier

SUM_LIMIT = 2**62 - 1
"""Partition sums are clamped to ±SUM_LIMIT (a 1-Lipschitz post-processing of exact sums)."""

SOURCE = SAMPLE_ALIAS  # the alias of the source table in generated SQL
"""Alias of the source table in the generated SQL."""
PART = "__part"
UNITS = "__units"
BIN = "__bin"
COUNT = "__count"

PLAIN_FORM: bool | None = None
# The most low bits a packed count may take (tests lower it so that partitions above 2^bits
# rows, which are summed again from their rows, occur in small data).
PACK_BITS_MAX = 40
# With wide packing (DuckDB), a count of this many low bits or more is exact for every
# partition below 2^bits rows (over 4·10⁹ rows of one unit in one group), and the re-sum of
# larger partitions is left out: their packed totals are read modulo 2^bits, so their
# contribution is not exact, but it is still clamped to the partition's bounds (privacy
# does not depend on it).
GIANT_FREE_BITS = 32
"""Test-only switch of the form of histogram and distinct measures.

None (the default): the fast form for grouped queries, the plain form for ungrouped ones;
True or False: the plain or the fast form for every query. The plain form (rank every row,
then every partition) is the reference that the fast form must reproduce exactly, for the
same secrets; oracle tests force each form in turn to compare them.
"""

_T = exp.DataType.Type

# Row-predicate nodes that can raise at run time on some values (overflow, division by
# zero, failing casts): without TRY they would make a query fail on one dataset and not on
# its neighbour.
_MAY_RAISE: tuple[type[exp.Expression], ...] = (
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.IntDiv,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Cast,  # TryCast included
    exp.Anonymous,
)
# Nodes that cannot raise at run time once the statement binds, provided every comparison
# compares values of one family (an engine may convert a text column to a number row by row,
# and fail on some rows: ``text_col = 5``). A predicate of these alone needs no TRY — which
# would hide it from the engine's optimiser (a TRY-wrapped join key cannot drive a hash join).
_CANNOT_RAISE: tuple[type[exp.Expression], ...] = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Not,
    exp.And,
    exp.Or,
    exp.Is,
)
_COMPARISONS: tuple[type[exp.Expression], ...] = (
    *COMPARISONS,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
)
_FAMILY = {
    ColumnKind.INTEGER: "number",
    ColumnKind.REAL: "number",
    ColumnKind.TEXT: "text",
    ColumnKind.BOOLEAN: "boolean",
    ColumnKind.TEMPORAL: "temporal",
}
_TRY_FUNCTIONS: dict[type[exp.Expression], str] = {
    exp.Add: "try_add",
    exp.Sub: "try_subtract",
    exp.Mul: "try_multiply",
    exp.Div: "try_divide",
}


@dataclass(frozen=True, slots=True)
class Secrets:
    """The two per-query keys of the pseudo-random orders (from the CSPRNG)."""

    rows: int
    partitions: int


@dataclass(frozen=True)
class CompiledQuery:
    """The generated statement and how to read its result.

    Attributes:
        sql: the statement rendered in the dialect of the capabilities it was compiled for.
        key_columns: result column of each group key, in order.
        measure_columns: result column of each non-histogram measure, by measure id.
        histogram_parts: ``__part`` value of each histogram measure, by measure id.
        statement: the statement as a sqlglot expression tree (one read-only query).
        distinct_parts: ``__part`` value of each distinct-count measure, by measure id
            (its rows hold the partition's count of distinct values in ``__count``).
    """

    sql: str
    key_columns: tuple[str, ...]
    measure_columns: dict[str, str]
    histogram_parts: dict[str, int]
    statement: exp.Expression
    distinct_parts: dict[str, int] = dataclasses.field(default_factory=dict)

    def render(self, dialect: str, *, pretty: bool = False) -> str:
        """The statement rendered by sqlglot's generator for ``dialect``.

        Only meaningful for the dialect of the capabilities the plan was compiled with (the
        tree holds that engine's functions). Rendering never drops a construct silently: a
        node the dialect cannot express raises.

        Raises:
            InternalError: sqlglot cannot express the statement in ``dialect`` (a bug: the
                engine's capabilities do not match its dialect).
        """
        return render(self.statement, dialect, pretty=pretty)


def render(tree: exp.Expression, dialect: str, *, pretty: bool = False, copy: bool = True) -> str:
    """``tree`` rendered in ``dialect`` (lower-case function names; unsupported nodes raise).

    ``copy=False`` skips sqlglot's defensive copy of the whole tree (half the cost of
    rendering a large statement); for the compiler's own first rendering, in the dialect the
    tree was built for, whose generator leaves it as it is.

    Raises:
        InternalError: sqlglot cannot express ``tree`` in ``dialect``.
    """
    try:
        return str(
            tree.sql(
                dialect=dialect,
                copy=copy,
                pretty=pretty,
                normalize_functions="lower",
                unsupported_level=ErrorLevel.RAISE,
            )
        )
    except SqlglotError as e:
        raise InternalError(f"the statement cannot be rendered for {dialect}: {e}") from None


# --- small tree builders -------------------------------------------------------------------


def _ident(name: str) -> exp.Identifier:
    """One of deniable's own (safe, unquoted) names: aliases, CTEs, generated columns."""
    return exp.to_identifier(name)


def _ref(name: str, table: str | None = None) -> exp.Column:
    """A reference to one of deniable's own (safe, unquoted) column names."""
    return exp.Column(this=_ident(name), table=_ident(table) if table else None)


def _refs(names: Sequence[str]) -> list[exp.Expression]:
    return [_ref(n) for n in names]


def _int(value: int) -> exp.Expression:
    return exp.Literal.number(value)


def _type(t: exp.DType) -> exp.DataType:
    return exp.DataType.build(t)


def _cast(e: exp.Expression, t: exp.DType) -> exp.Cast:
    return exp.Cast(this=e, to=_type(t))


def _paren(e: exp.Expression) -> exp.Paren:
    return exp.Paren(this=e)


def _alias(e: exp.Expression, name: str) -> exp.Alias:
    return exp.Alias(this=e, alias=_ident(name))


def _case(
    whens: Sequence[tuple[exp.Expression, exp.Expression]], default: exp.Expression
) -> exp.Case:
    return exp.Case(ifs=[exp.If(this=c, true=v) for c, v in whens], default=default)


def _least(a: exp.Expression, b: exp.Expression) -> exp.Least:
    # ignore_nulls: the engines' own least/greatest, which skip NULLs
    return exp.Least(this=a, expressions=[b], ignore_nulls=True)


def _greatest(a: exp.Expression, b: exp.Expression) -> exp.Greatest:
    return exp.Greatest(this=a, expressions=[b], ignore_nulls=True)


def _is_null(e: exp.Expression) -> exp.Is:
    return exp.Is(this=e, expression=exp.Null())


def _not_null(e: exp.Expression) -> exp.Expression:
    # Spelled "e IS NOT NULL", not "NOT e IS NULL": DuckDB estimates the cardinality of the
    # former from its statistics and of the latter by a default selectivity (other plans).
    return exp.Is(this=e, expression=exp.Not(this=exp.Null()))


def _and(*conds: exp.Expression) -> exp.Expression:
    return functools.reduce(lambda a, b: exp.And(this=a, expression=b), conds)


def _or(*conds: exp.Expression) -> exp.Expression:
    return functools.reduce(lambda a, b: exp.Or(this=a, expression=b), conds)


def _table(name: str, alias: str | None = None) -> exp.Table:
    """One of deniable's own tables (a CTE), by its safe unquoted name."""
    return exp.Table(this=_ident(name), alias=exp.TableAlias(this=_ident(alias)) if alias else None)


def _relation(name: str, alias: str) -> exp.Table:
    """An engine relation (its name quoted: it is not ours to trust), under ``alias``."""
    return exp.Table(this=identifier(name), alias=exp.TableAlias(this=_ident(alias)))


def _subquery(query: exp.Expression, alias: str) -> exp.Subquery:
    return exp.Subquery(this=query, alias=exp.TableAlias(this=_ident(alias)))


def _select(
    columns: Sequence[exp.Expression],
    source: exp.Expression,
    *,
    where: exp.Expression | None = None,
    group: Sequence[exp.Expression] = (),
    distinct: bool = False,
) -> exp.Select:
    q = exp.Select(expressions=list(columns)).from_(source, copy=False)
    if where is not None:
        q.set("where", exp.Where(this=where))
    if group:
        q.set("group", exp.Group(expressions=list(group)))
    if distinct:
        q.set("distinct", exp.Distinct())
    return q


def _union_all(parts: Sequence[exp.Expression]) -> exp.Expression:
    return functools.reduce(
        lambda a, b: exp.Union(this=a, expression=b, distinct=False), parts[1:], parts[0]
    )


def _row_number(partition: Sequence[exp.Expression], order: Sequence[exp.Expression]) -> exp.Window:
    return exp.Window(
        this=exp.RowNumber(),
        partition_by=list(partition),
        order=exp.Order(expressions=[exp.Ordered(this=o) for o in order]),
    )


def _sum(caps: Capabilities, e: exp.Expression) -> exp.Sum:
    """``sum(e)`` of BIGINT values that never overflows (wider exact type)."""
    if not caps.wide_sum:
        wide = exp.DataType(
            this=_T.DECIMAL,
            expressions=[exp.DataTypeParam(this=_int(38)), exp.DataTypeParam(this=_int(0))],
        )
        e = exp.Cast(this=e, to=wide)
    return exp.Sum(this=e)


class _Sql:
    """Builders of the dialect-dependent parts (identifiers and literals rendered by sqlglot)."""

    def __init__(
        self, caps: Capabilities, kinds: Mapping[tuple[str, str], ColumnKind] | None = None
    ) -> None:
        self.caps = caps
        self.kinds = kinds

    def col(self, name: str) -> exp.Column:
        """A column of the source table, qualified by its alias ``__t`` (never ambiguous)."""
        return exp.Column(this=identifier(name), table=_ident(SOURCE))

    def ref(self, column: Column) -> exp.Expression:
        """A column's per-row value: the table's column, or a derived column's expression.

        A derived expression is lowered for the engine and made total (a row where it
        raises gives NULL).
        """
        if column.expr is None:
            return self.col(column.name)
        # made total before deniable's own clamps are spelled: their casts of a number to
        # DOUBLE cannot fail, and an engine without TRY must not refuse them
        return _paren(self.lower(_total_predicate(column.expr, self.caps, self.kinds)))

    def lower(self, tree: exp.Expression) -> exp.Expression:
        """Deniable's own nodes spelled for the engine; unqualified columns qualified."""

        def spell(n: exp.Expression) -> exp.Expression:
            if isinstance(n, Clamp):
                x = n.this
                real = isinstance(n.args.get("real"), exp.Boolean) and n.args["real"].this
                lo, hi = n.args["low"], n.args["high"]
                if real:
                    lo, hi = _cast(lo, _T.DOUBLE), _cast(hi, _T.DOUBLE)
                    return _clamp_real(self.caps, _cast(x, _T.DOUBLE), lo, hi)
                return _clamp(x, lo, hi)
            if isinstance(n, exp.Column) and not n.table:
                return self.col(n.name)
            return n

        out = tree.transform(spell)
        assert isinstance(out, exp.Expression)
        return out

    def lit(self, value: object) -> exp.Expression:
        if isinstance(value, float):
            return self.double(value)
        if isinstance(value, bool) or value is None or isinstance(value, int | str):
            converted = exp.convert(value)
            assert isinstance(converted, exp.Expression)
            return converted
        raise InternalError(f"cannot render a {type(value).__name__} literal")

    def double(self, value: float) -> exp.Expression:
        # Through text: the shortest repr round-trips to the same double exactly.
        return _cast(exp.Literal.string(repr(float(value))), _T.DOUBLE)

    def null_safe_eq(self, a: exp.Expression, b: exp.Expression) -> exp.Expression:
        if self.caps.null_safe_equal:
            return exp.NullSafeEQ(this=a, expression=b)
        return _paren(
            _or(exp.EQ(this=a, expression=b), _paren(_and(_is_null(a.copy()), _is_null(b.copy()))))
        )

    def semi(
        self, left: str, right: str, on: Sequence[tuple[str, str]], *, anti: bool
    ) -> exp.Select:
        """``SELECT l.* FROM left l [ANTI|SEMI] JOIN right r ON …`` in the dialect."""
        cond = _and(*(self.null_safe_eq(_ref(a, "__l"), _ref(b, "__r")) for a, b in on))
        star = exp.Column(this=exp.Star(), table=_ident("__l"))
        if self.caps.semi_join:
            q = _select([star], _table(left, "__l"))
            return q.join(
                exp.Join(this=_table(right, "__r"), on=cond, kind="ANTI" if anti else "SEMI"),
                copy=False,
            )
        exists: exp.Expression = exp.Exists(
            this=_select([_int(1)], _table(right, "__r"), where=cond)
        )
        return _select([star], _table(left, "__l"), where=exp.Not(this=exists) if anti else exists)

    def semi_source(
        self,
        select: Sequence[exp.Expression],
        source: exp.Expression,
        where: exp.Expression | None,
        right: str,
        on: Sequence[tuple[exp.Expression, exp.Expression]],
    ) -> exp.Select:
        """``SELECT select FROM source WHERE where``, restricted to rows matching ``right``."""
        cond = _and(*(self.null_safe_eq(a, b) for a, b in on))
        if self.caps.semi_join:
            q = _select(select, source, where=where)
            return q.join(exp.Join(this=_table(right, "__r"), on=cond, kind="SEMI"), copy=False)
        exists = exp.Exists(this=_select([_int(1)], _table(right, "__r"), where=cond))
        return _select(select, source, where=exists if where is None else _and(where, exists))

    def keyed_hash(self, key: int, args: Sequence[str]) -> exp.Expression:
        """A pseudo-random 64-bit function of the columns ``args`` under the secret ``key``.

        A chain that re-hashes after each argument: ``h₀ = key ⊕ H(a₀)``,
        ``hᵢ = H(hᵢ₋₁) ⊕ H(aᵢ)``, result ``H(hₙ)``. Not the engine's multi-argument hash:
        DuckDB's ``hash(a, b, c)`` combines the per-argument hashes with a weak step, so
        the order it induces on the keys of one unit is far from uniform (one category of
        50 was kept in a top 5 twice as often as another); the chain mixes every argument
        through the full hash (chi-square tests in ``tests/stats/test_bounding_uniform.py``).
        """
        caps = self.caps
        if not 0 <= key < 2**63:
            raise InternalError("hash keys are 63-bit")
        key_type = _T.UBIGINT if caps.unsigned_hash else _T.BIGINT
        acc = caps.xor(_cast(_int(key), key_type), caps.hash(_ref(args[0])))
        for arg in args[1:]:
            acc = caps.xor(caps.int_hash(acc), caps.hash(_ref(arg)))
        return caps.int_hash(acc)

    def order_hash(self, key: int, args: Sequence[str]) -> exp.Expression:
        """:meth:`keyed_hash` as a tree (a substituted ``keyed_hash`` may return SQL text)."""
        h: exp.Expression | str = self.keyed_hash(key, args)
        if isinstance(h, str):
            # Only a test's substitute order (a negative control) returns text.
            parsed = sqlglot.parse_one(h, read=self.caps.dialect)
            assert isinstance(parsed, exp.Expression)
            return parsed
        return h


def keyed_hash(caps: Capabilities, key: int, args: Sequence[str]) -> exp.Expression:
    """The keyed chain hash of the columns ``args`` under the secret ``key``.

    The pseudo-random order every bounding step uses (:meth:`_Sql.keyed_hash`), for other
    generators of engine SQL (graphs) to share.
    """
    return _Sql(caps).keyed_hash(key, args)


def _no_nfc(column: Column, caps: Capabilities) -> UnsafeQuery:
    return UnsafeQuery(
        f"this engine ({caps.dialect}) has no Unicode NFC normalisation, so privacy unit "
        f"{column.name!r} ({column.sql_type}) could count one person as two; use an integer "
        "privacy unit on this engine"
    )


def canonical_unit_expression(column: Column, caps: Capabilities) -> exp.Expression:
    """A privacy unit's canonical form as a tree (see :func:`canonical_unit_sql`).

    Raises:
        UnsafeQuery: the engine cannot normalise text and the unit is text (or of a type
            whose text is not plain ASCII digits).
    """
    s = _Sql(caps)
    col = s.col(column.name)
    if column.kind is ColumnKind.INTEGER:
        return col
    value: exp.Expression = col
    if column.kind is ColumnKind.REAL:
        # -0.0 is 0.0 (abs keeps the column's type); NaN is no identifier (NULL: dropped).
        zero = exp.EQ(this=col.copy(), expression=_int(0))
        value = _case(
            [(caps.is_nan_test(col.copy()), exp.Null()), (zero, exp.Abs(this=col.copy()))],
            col.copy(),
        )
    text = value if column.kind is ColumnKind.TEXT else _cast(value, _T.VARCHAR)
    normal = caps.nfc(text)
    if normal is not None:
        return normal
    if column.kind in (ColumnKind.TEXT, ColumnKind.OTHER):
        raise _no_nfc(column, caps)
    return text  # numbers, booleans and dates render as ASCII: NFC changes nothing


def canonical_unit_sql(column: Column, caps: Capabilities) -> str:
    """SQL of a privacy unit's canonical form (see :func:`~deniable.query.catalog.canonical_unit`).

    Integers as themselves, text as its NFC normalisation, other types as the NFC
    normalisation of their VARCHAR text. Reals are made canonical first: ``-0.0`` becomes
    ``0.0`` (one person, however the zero is spelled) and NaN becomes NULL, so that rows
    with a NaN unit are dropped exactly like rows with a NULL unit (NaN identifies nobody).

    Raises:
        UnsafeQuery: the engine has no NFC normalisation and the unit is text.
    """
    return render(canonical_unit_expression(column, caps), caps.dialect)


def unit_identity(column: Column, caps: Capabilities) -> exp.Expression:
    """A privacy unit's identity as text, as a tree (see :func:`unit_identity_sql`)."""
    unit = canonical_unit_expression(column, caps)
    if column.kind is not ColumnKind.TEXT:
        unit = _cast(unit, _T.VARCHAR)
    tagged = exp.DPipe(this=exp.Literal.string("u:"), expression=unit)
    return exp.Coalesce(this=tagged, expressions=[exp.Literal.string("N")])


def unit_identity_sql(column: Column, caps: Capabilities) -> str:
    """SQL of a privacy unit's identity as text, for the per-unit sampling coin.

    Built on :func:`canonical_unit_sql`, so that the rows the query path treats as one person
    share one coin: the canonical value's text behind a ``'u:'`` tag (one column, so equal
    identities mean equal canonical units). NULL (and NaN) units share the identity ``'N'``;
    their rows are dropped by every query anyway.
    """
    return render(unit_identity(column, caps), caps.dialect)


def _value(s: _Sql, column: Column | None) -> exp.Expression:
    """The column as a double with NaN turned into NULL (reals), or as it is (integers)."""
    assert column is not None
    col = s.ref(column)
    if column.kind is ColumnKind.REAL:
        x = _cast(col, _T.DOUBLE)
        return _paren(_case([(s.caps.is_nan_test(x), exp.Null())], x.copy()))
    return col


def _clamped_double(s: _Sql, m: ClampedMeasure) -> exp.Expression:
    assert m.column is not None
    x = _cast(s.ref(m.column), _T.DOUBLE)
    lo, hi = s.double(m.lower_f), s.double(m.upper_f)
    if m.column.kind is ColumnKind.INTEGER:
        return _clamp(x, lo, hi)
    return _clamp_real(s.caps, x, lo, hi)


def _clamp_real(
    caps: Capabilities, x: exp.Expression, lo: exp.Expression, hi: exp.Expression
) -> exp.Expression:
    """A double clamped to ``[lo, hi]``.

    NULL and NaN stay NULL (ignored, as SQL ignores NULL); ±inf clamp to the bounds.
    """
    missing = _or(_is_null(x), caps.is_nan_test(x.copy()))
    return _paren(_case([(missing, exp.Null())], _least(_greatest(x.copy(), lo), hi)))


def _clamp(x: exp.Expression, lo: exp.Expression, hi: exp.Expression) -> exp.Expression:
    # least/greatest skip NULLs (greatest(NULL, lo) is lo): keep NULL as NULL explicitly.
    return _paren(_case([(_is_null(x), exp.Null())], _least(_greatest(x.copy(), lo), hi)))


def _sum_units(s: _Sql, m: SumMeasure) -> exp.Expression:
    """A sum's per-row value in grid units: ``round(clamp(x)·2^-e)``, clamped again to ``[a, b]``.

    ``a = row_low + centre`` and ``b = row_high + centre`` are the bounds rounded half away
    from zero (:func:`deniable.query.measures.round_half_away`), which is what the
    sensitivity is computed from. Engines do not all round ties that way: PostgreSQL's
    ``round(double precision)`` rounds half to even, so a bound with a half-unit remainder
    (``lower·2^-e = 2k + ½``) would give ``2k = a − 1`` there and a centred sum on a table
    without a privacy unit (where one row is the whole contribution) could leave its
    sensitivity by one grid unit. Clamping *after* rounding makes every row's value lie in
    ``[a, b]`` whatever the tie rule; where the engine rounds half away from zero (DuckDB,
    Spark) the clamp never changes a value. NULL and NaN stay NULL (one CASE, so the
    column is referenced as often as by the clamp of the double alone).
    """
    assert m.column is not None
    x = _cast(s.ref(m.column), _T.DOUBLE)
    lo, hi = s.double(m.lower_f), s.double(m.upper_f)
    missing: exp.Expression = _is_null(x)
    if m.column.kind is not ColumnKind.INTEGER:
        missing = _or(missing, s.caps.is_nan_test(x.copy()))
    clamped = _least(_greatest(x.copy(), lo), hi)
    units = _cast(
        exp.Round(this=exp.Mul(this=clamped, expression=_scale(s, m.exponent))), _T.BIGINT
    )
    on_grid = _least(_greatest(units, _int(m.row_low + m.centre)), _int(m.row_high + m.centre))
    return _paren(_case([(missing, exp.Null())], on_grid))


def _centre(m: Measure) -> int:
    """The integer a centred sum subtracts from each unit (0 for other measures)."""
    return m.centre if isinstance(m, SumMeasure) else 0


def _scale(s: _Sql, exponent: int) -> exp.Expression:
    return s.double(float(Fraction(2) ** -exponent))


def row_expression(
    m: Measure, caps: Capabilities, kinds: Mapping[tuple[str, str], ColumnKind] | None = None
) -> exp.Expression | None:
    """The per-row value of a measure as a tree (None for ``rows`` and ``units``)."""
    s = _Sql(caps, kinds)
    if isinstance(m, RowCount | UnitCount):
        return None
    if isinstance(m, ValueCount | DistinctValues):
        return _value(s, m.column)
    if isinstance(m, SumMeasure):
        if m.integer_column and m.exponent == 0:
            lo, hi = int(m.lower_f), int(m.upper_f)
            return _cast(_clamp(_value(s, m.column), s.lit(lo), s.lit(hi)), _T.BIGINT)
        # centred sums subtract centre × count at aggregation (exact integers)
        return _sum_units(s, m)
    if isinstance(m, SquaresMeasure):
        d = _paren(exp.Sub(this=_clamped_double(s, m), expression=s.double(m.midpoint_f)))
        square = _paren(exp.Mul(this=d, expression=d.copy()))
        return _cast(
            exp.Round(this=exp.Mul(this=square, expression=_scale(s, m.exponent))), _T.BIGINT
        )
    if isinstance(m, HistogramMeasure):
        step_inv = s.double(m.grid / (m.upper_f - m.lower_f))
        offset = _paren(exp.Sub(this=_clamped_double(s, m), expression=s.double(m.lower_f)))
        raw = _cast(exp.Round(this=exp.Mul(this=offset, expression=step_inv)), _T.BIGINT)
        return _clamp(raw, _int(0), s.lit(m.grid))
    raise InternalError(f"unknown measure kind {m.kind}")


def _cannot_raise(pred: exp.Expression, kinds: Mapping[tuple[str, str], ColumnKind]) -> bool:
    """Whether ``pred`` provably cannot raise at run time (see ``_CANNOT_RAISE``)."""

    def family(e: exp.Expression) -> str | None:
        while isinstance(e, exp.Paren):
            e = e.this
        if isinstance(e, exp.Column):
            kind = kinds.get((e.table, e.name))
            return None if kind is None else _FAMILY.get(kind)
        if isinstance(e, exp.Literal):
            return "text" if e.is_string else "number"
        if isinstance(e, exp.Boolean):
            return "boolean"
        if isinstance(e, exp.Null):
            return "null"
        return None

    for n in pred.walk():
        if isinstance(n, _CANNOT_RAISE):
            continue
        if not isinstance(n, _COMPARISONS):
            return False
        operands = [n.this]
        if isinstance(n, exp.In):
            operands += list(n.expressions)
        elif isinstance(n, exp.Between):
            operands += [n.args["low"], n.args["high"]]
        else:
            operands.append(n.expression)
        families = {family(o) for o in operands} - {"null"}
        if None in families or len(families) > 1:
            return False
        if families == {"temporal"} and any(not isinstance(o, exp.Column) for o in operands):
            return False
    return True


def _total_predicate(
    pred: exp.Expression,
    caps: Capabilities,
    kinds: Mapping[tuple[str, str], ColumnKind] | None = None,
) -> exp.Expression:
    """The analyst's predicate made total: a row where it raises counts as not matching.

    Raises:
        UnsafeQuery: the engine has no way to catch a run-time error of this predicate.
    """
    if kinds is not None and _cannot_raise(pred, kinds):
        return pred
    if caps.try_expression:
        return exp.Try(this=pred)
    if caps.try_arithmetic:

        def spell(n: exp.Expression) -> exp.Expression:
            name = _TRY_FUNCTIONS.get(type(n))
            if name is not None:
                assert isinstance(n, exp.Binary)
                return exp.Anonymous(this=name, expressions=[n.this, n.expression])
            if isinstance(n, exp.TryCast):
                return exp.TryCast(this=n.this, to=n.args["to"], safe=True)
            return n

        # transform does not descend into a replaced node: repeat until none is left
        while any(type(n) in _TRY_FUNCTIONS for n in pred.walk()):
            spelled = pred.transform(spell)
            assert isinstance(spelled, exp.Expression)
            pred = spelled
        spelled = pred.transform(spell)  # the casts
        assert isinstance(spelled, exp.Expression)
        pred = spelled
    for n in pred.walk():
        if isinstance(n, exp.Neg) and not isinstance(n.this, exp.Literal):
            raising = "negation"
        elif isinstance(n, _MAY_RAISE) and not (
            caps.try_arithmetic
            and (isinstance(n, exp.TryCast) or _is_try_call(n) or _literal_divisor(n))
        ):
            raising = construct(n)
        else:
            continue
        raise UnsafeQuery(
            f"this engine ({caps.dialect}) cannot catch run-time errors in WHERE (no TRY): "
            f"{raising} could fail on some rows and not on others, which would reveal "
            "them; use comparisons, AND/OR/NOT, IN, BETWEEN, LIKE and IS NULL on columns "
            "and literals"
        )
    return pred


def _literal_divisor(n: exp.Expression) -> bool:
    """An integer division or modulo by an integer literal other than 0 (cannot raise).

    No division by zero, and no overflow (only ``MIN // -1`` overflows; a literal ``-1`` is a
    ``Neg`` node, never a digit string).
    """
    if not isinstance(n, exp.IntDiv | exp.Mod):
        return False
    d = n.expression
    while isinstance(d, exp.Paren):
        d = d.this
    if not isinstance(d, exp.Literal) or d.is_string or not str(d.this).isdigit():
        return False
    return int(d.this) != 0


def _is_try_call(n: exp.Expression) -> bool:
    return isinstance(n, exp.Anonymous) and n.name in _TRY_FUNCTIONS.values()


def column_kinds(plan: DPPlan) -> dict[tuple[str, str], ColumnKind]:
    """The kind of every column the statement can read, by (table alias, column name)."""
    out = {(SOURCE, c.name): c.kind for c in plan.query.table.columns}
    for j in plan.query.joins:
        out.update({(j.alias, c.name): c.kind for c in j.table.columns})
    return out


def where_conditions(
    plan: DPPlan, caps: Capabilities, *, domains: bool = True
) -> list[exp.Expression]:
    """The row filters: the analyst's predicate (made total), public domains, non-NULL unit.

    ``domains=False`` leaves out the public-domain filters: for rows read again by their
    (unit, keys), whose keys already passed them.

    Raises:
        UnsafeQuery: the engine cannot make the analyst's predicate total.
    """
    kinds = column_kinds(plan)
    s = _Sql(caps, kinds)
    out: list[exp.Expression] = []
    query = plan.query
    if query.where is not None:
        qualified = s.lower(query.where)
        total = _total_predicate(qualified, caps, kinds)
        out.append(
            total if total is qualified else exp.Coalesce(this=total, expressions=[exp.false()])
        )
    policy = query.table.policy
    public_columns = {
        (j.alias, name): tuple(values)
        for j in query.joins
        if j.table.public
        for name, values in j.table.domains.items()
    }
    for k, values in zip(plan.keys, plan.key_domains, strict=True):
        if values is None or not domains:
            continue
        present = [v for v in values if v is not None]
        e = k.expr
        if isinstance(e, exp.Column) and public_columns.get((e.table, e.name)) == tuple(values):
            # a column of a joined public table, whose domain is its own values: every
            # joined row's key is in it, or NULL where a LEFT JOIN found no match
            if len(present) == len(values):
                out.append(_not_null(s.ref(k)))
            continue
        parts: list[exp.Expression] = []
        if _integer_range(present):
            # a contiguous range of integers: two literals instead of a long IN list
            lo, hi = min(present), max(present)  # type: ignore[type-var]
            parts.append(exp.Between(this=s.ref(k), low=s.lit(lo), high=s.lit(hi)))
        elif present:
            parts.append(exp.In(this=s.ref(k), expressions=[s.lit(v) for v in present]))
        if len(present) < len(values):
            parts.append(_is_null(s.ref(k)))
        out.append(_paren(_or(*parts)))
    if policy.privacy_unit is not None:
        unit = query.table.column(policy.privacy_unit)
        out.append(_not_null(s.col(unit.name)))
        if unit.kind is ColumnKind.REAL:  # NaN identifies nobody: dropped like NULL
            out.append(exp.Not(this=caps.is_nan_test(s.col(unit.name))))
    return out


def _integer_range(values: Sequence[object]) -> bool:
    """Whether ``values`` are all the integers from their least to their greatest."""
    if len(values) < 3 or not all(type(v) is int for v in values):
        return False
    ints = [v for v in values if isinstance(v, int)]
    return max(ints) - min(ints) + 1 == len(set(ints))


def compile_plan(
    plan: DPPlan,
    caps: Capabilities,
    table: str,
    secrets: Secrets,
    relations: Mapping[str, str] | None = None,
) -> CompiledQuery:
    """Generate the one statement computing every measure of ``plan`` on bounded data.

    Args:
        plan: the DP plan.
        caps: the engine's capabilities.
        table: the engine's name for the main table (quoted here).
        secrets: per-query keys of the row and partition orders.
        relations: the engine's name of each joined table, by catalog name.

    Returns:
        The statement (a tree and its rendering for ``caps.dialect``) and the layout of its
        result. The result has one row per non-empty partition with ``__part = 0`` (plus one
        row per non-empty histogram cell of each quantile); it holds aggregates only, never
        rows. Compiling releases nothing and costs no privacy.

    Raises:
        UnsafeQuery: the engine lacks something this query needs (a TRY for its WHERE, an
            NFC normalisation for its text privacy unit); decided without reading data.
    """
    kinds = column_kinds(plan)
    s = _Sql(caps, kinds)
    policy = plan.query.table.policy
    unit = policy.privacy_unit
    keys = [f"__k{i}" for i in range(len(plan.keys))]
    # measures read from the bounded rows themselves: histograms and distinct counts
    histograms = [m for m in plan.measures if m.kind in ("histogram", "distinct")]
    # Without group keys a unit's partition is all its rows, and units above max_rows hold
    # most rows (a power law of rows per unit): re-reading them would cost more than ranking
    # every row (measured: 1.35x slower at 10^7 rows), so ungrouped queries keep the plain
    # form. Which form runs depends on the query alone; both keep the same rows.
    plain = bool(histograms) and (not plan.keys if PLAIN_FORM is None else PLAIN_FORM)
    additive = [m for m in plan.measures if m.kind not in ("histogram", "distinct")]
    # Distinct per-row values, shared by the measures that need the same one: one fixed-point
    # sum of x serves SUM(x) and AVG(x). A per-row value of a column is NULL exactly when the
    # column is NULL or NaN, so counting the non-NULL entries of any of them counts the
    # values: COUNT(x) and the count behind a centred sum reuse such a column when one exists.
    aliases: dict[exp.Expression, str] = {}
    measure_alias: dict[str, str] = {}
    by_column: dict[str, str] = {}
    for meas in plan.measures:
        if meas.kind in ("sum", "squares", "histogram", "distinct"):
            expr = row_expression(meas, caps, kinds)
            assert expr is not None and meas.column is not None
            measure_alias[meas.id] = aliases.setdefault(expr, f"__v{len(aliases)}")
            by_column.setdefault(meas.column.name, measure_alias[meas.id])
    count_alias: dict[str, str] = {}
    for meas in additive:
        if meas.kind == "values" or _centre(meas):
            assert meas.column is not None
            if meas.column.name not in by_column:
                expr = _value(s, meas.column)
                assert expr is not None
                by_column[meas.column.name] = aliases.setdefault(expr, f"__v{len(aliases)}")
            count_alias[meas.id] = by_column[meas.column.name]
            if meas.kind == "values":
                measure_alias[meas.id] = count_alias[meas.id]
    value_cols = list(aliases.items())
    values = [a for _, a in value_cols]
    needed: dict[tuple[str, str], str] = {}
    for meas in additive:
        a = measure_alias.get(meas.id)
        if a is None:
            continue
        if meas.kind == "values" or _centre(meas):
            needed.setdefault(("count", count_alias[meas.id]), f"__c{count_alias[meas.id][3:]}")
        if meas.kind in ("sum", "squares"):
            needed.setdefault(("sum", a), f"__s{a[3:]}")

    unit_column = plan.query.table.column(unit) if unit is not None else None
    filters = where_conditions(plan, caps)
    reread_filters = where_conditions(plan, caps, domains=False)

    def row_columns(only: Sequence[str] | None = None) -> list[exp.Expression]:
        """The per-row select list of step 1 (a fresh tree at each use).

        ``only``: the per-row values to compute (default: all of them).
        """
        cols: list[exp.Expression] = []
        if unit_column is not None:
            cols.append(_alias(canonical_unit_expression(unit_column, caps), "__u"))
        cols += [_alias(s.ref(k), kid) for k, kid in zip(plan.keys, keys, strict=True)]
        cols += [_alias(e.copy(), a) for e, a in value_cols if only is None or a in only]
        if not cols:  # e.g. COUNT(*) over a table without privacy unit
            cols.append(_alias(_int(1), "__one"))
        return cols

    def source() -> exp.Expression:
        main = _relation(table, SOURCE)
        for j in plan.query.joins:
            name = (relations or {}).get(j.table.name)
            if name is None:
                raise InternalError(f"no engine relation for joined table {j.table.name!r}")
            # a condition that raises on some rows matches nothing there
            lowered = s.lower(j.on)
            on = _total_predicate(lowered, caps, kinds)
            if on is not lowered:
                on = exp.Coalesce(this=on, expressions=[exp.false()])
            side = {"side": "LEFT"} if j.kind == "LEFT" else {"kind": "INNER"}
            main.append("joins", exp.Join(this=_relation(name, j.alias), on=on, **side))
        return main

    def row_filter(*, reread: bool = False) -> exp.Expression | None:
        chosen = reread_filters if reread else filters
        return _and(*(f.copy() for f in chosen)) if chosen else None

    def rows_query(only: Sequence[str] | None = None) -> exp.Select:
        return _select(row_columns(only), source(), where=row_filter())

    ctes: list[tuple[str, exp.Expression]] = []
    group_uk = ["__u", *keys]
    uk_pairs = [(k, k) for k in group_uk]
    r, m = plan.max_rows, plan.max_groups
    cap_partitions = bool(plan.keys) and not (
        plan.public_domain is not None and len(plan.public_domain) <= m
    )

    def part_hash() -> exp.Expression:
        return s.order_hash(secrets.partitions, group_uk)

    # Per (unit, partition) aggregates, as (aggregate, column), and how the fast form reads
    # each needed column back from them. With at most max_rows rows of at most 2^40 units
    # each, the sums of a partition within the bounds fit BIGINT; the others are clamped
    # here and recomputed from their rows.
    wide_packing = caps.wide_packing and caps.wide_sum
    packed = (
        _packable(plan, needed, measure_alias, wide=wide_packing)
        if unit is not None and not plain and caps.pack_counts
        else {}
    )
    level1_spec: list[tuple[str, str, str]] = []  # (kind, value column, output column)
    unpacked_spec: list[tuple[str, str, int]] = []  # (output column, packed column, bits)
    for (fn, a), col in needed.items():
        if a in packed:
            # Σ (value·2^bits + 1) over non-NULL values: the sum above the count
            bits, p = packed[a], f"__p{a[3:]}"
            if fn == "sum":
                level1_spec.append(("packed", a, p))
                unpacked_spec.append((col, p, bits))  # ⌊p / 2^bits⌋
            else:
                unpacked_spec.append((col, p, -bits))  # p mod 2^bits
            continue
        level1_spec.append((fn, a, col))
        unpacked_spec.append((col, "", 0))
    level1_cols = ["__n", *(out for _, _, out in level1_spec)]

    def level1() -> list[exp.Expression]:
        aggs: list[exp.Expression] = [_alias(exp.Count(this=exp.Star()), "__n")]
        for kind, a, out in level1_spec:
            if kind == "packed":
                bits = packed[a]
                shifted = exp.Add(
                    this=exp.Mul(this=_ref(a), expression=_int(2**bits)), expression=_int(1)
                )
                agg: exp.Expression = _sum(caps, exp.Coalesce(this=shifted, expressions=[_int(0)]))
                if not wide_packing:
                    agg = clamp_bigint(agg)
            elif kind == "count":
                agg = exp.Count(this=_ref(a))
            else:
                agg = clamp_bigint(_sum(caps, _ref(a)))
            aggs.append(_alias(agg, out))
        return aggs

    def unpacked() -> list[exp.Expression]:
        cols: list[exp.Expression] = [*_refs(group_uk), _ref("__n")]
        decimal = wide_packing and not caps.wide_bitwise  # NUMERIC: no >> nor &
        for out, p, bits in unpacked_spec:
            if not p:
                cols.append(_ref(out))
            elif decimal:
                part = _floor_shift(p, bits) if bits > 0 else _low_bits(p, -bits)
                cols.append(_alias(part, out))
            elif bits > 0:
                shift = exp.BitwiseRightShift(this=_ref(p), expression=_int(bits))
                cols.append(_alias(_paren(shift), out))
            else:
                mask = exp.BitwiseAnd(this=_ref(p), expression=_int(2**-bits - 1))
                cols.append(_alias(_paren(mask), out))
        return cols

    def cte(name: str, query: exp.Expression) -> None:
        ctes.append((name, query))

    def bounded(rank: str, limit: int) -> exp.Expression:
        # "row_number() … <= k" alone would be rewritten by DuckDB into a per-group top-k
        # aggregate that is twice as slow as the window itself; the extra "> 0" keeps the
        # window.
        return _and(
            exp.LTE(this=_ref(rank), expression=_int(limit)),
            exp.GT(this=_ref(rank), expression=_int(0)),
        )

    # ORDER BY ties are broken by the keys (distinct within a unit) and the values (equal
    # only for identical rows).
    def rank_rows(vals: Sequence[str]) -> exp.Expression:
        order = [s.order_hash(secrets.rows, [*group_uk, *vals]), *_refs(vals)]
        return _alias(_row_number(_refs(group_uk), order), "__rn")

    def rank_parts() -> exp.Expression:
        return _alias(_row_number([_ref("__u")], [part_hash(), *_refs(keys)]), "__pr")

    # Step 4 for additive measures: each kept partition contributes the expected value of a
    # uniform max_rows-subset of its rows, computed from its totals (see _kept_columns).
    kept_outputs = _kept_outputs(plan, additive, needed, measure_alias, count_alias)

    def kept(totals: str) -> None:
        """``__kept``: the scaled contributions of the partitions of ``totals``."""
        wide = [_alias(_numerator(caps, o), f"__y{i}") for i, o in enumerate(kept_outputs)]
        inner = _select([*_refs([*group_uk, "__n"]), *wide], _table(totals))
        cols: list[exp.Expression] = [*_refs(group_uk)]
        cols.append(_alias(_least(_ref("__n"), _int(r)), "__n"))
        cols += [_alias(_scaled(f"__y{i}", o, r), o.name) for i, o in enumerate(kept_outputs)]
        cte("__kept", _select(cols, _subquery(inner, "__w")))

    def separate_totals(rows: str, only: Sequence[str] | None = None) -> exp.Select:
        """Per (unit, partition) of ``rows``: ``__n`` and each needed column.

        Only those of the value columns ``only`` (default all), as separate sums and counts.
        """
        aggs: list[exp.Expression] = [_alias(exp.Count(this=exp.Star()), "__n")]
        for (fn, a), col in needed.items():
            if only is not None and a not in only:
                continue
            agg = exp.Count(this=_ref(a)) if fn == "count" else clamp_bigint(_sum(caps, _ref(a)))
            aggs.append(_alias(agg, col))
        return _select([*_refs(group_uk), *aggs], _table(rows), group=_refs(group_uk))

    bounded_rows: str | None
    if unit is not None and not plain:
        assert unit_column is not None
        # 2. one row per (unit, partition); the rows are read again below, not materialised.
        # Histograms and distinct counts are read from the rows re-read in step 4: their
        # per-row values are not computed here.
        l1_values = [a for _, a, _ in level1_spec] if histograms else None
        l1_rows = rows_query(l1_values)
        if cap_partitions and caps.repartition_by_unit:
            # one shuffle of the rows by unit serves both the (unit, partition) aggregation
            # and the per-unit window of step 3 (else: one shuffle for each)
            by_unit = exp.Anonymous(this="REPARTITION", expressions=[_ref("__u")])
            l1_rows.set("hint", exp.Hint(expressions=[by_unit]))
        cte(
            "__l1",
            _select(
                [*_refs(group_uk), *level1()],
                _subquery(l1_rows, "__r"),
                group=_refs(group_uk),
            ),
        )
        # 3. at most max_groups partitions per unit (a window over partitions, not rows)
        if cap_partitions:
            inner = _select([exp.Star(), rank_parts()], _table("__l1"))
            cte(
                "__capped",
                _select(
                    _refs(["__u", *keys, *level1_cols]),
                    _subquery(inner, "__p"),
                    where=bounded("__pr", m),
                ),
            )
        else:
            cte("__capped", _select([exp.Star()], _table("__l1")))
        # the rows of some kept partitions, read again from the source: the join runs on
        # the source table, so the per-row expressions are computed for those rows alone
        on: list[tuple[exp.Expression, exp.Expression]] = [
            (canonical_unit_expression(unit_column, caps), _ref("__u", "__r"))
        ]
        on += [(s.ref(k), _ref(kid, "__r")) for k, kid in zip(plan.keys, keys, strict=True)]

        def reread(name: str, partitions: str, only: Sequence[str] | None = None) -> None:
            select = row_columns(only)
            cte(name, s.semi_source(select, source(), row_filter(reread=True), partitions, on))

        if histograms:
            # 4. the bounded rows that histograms and distinct counts read: max_rows rows
            # ranked at random in kept partitions above max_rows (only those are ranked),
            # and every row of the other kept partitions
            row_values = [a for a in values if a in {measure_alias[h.id] for h in histograms}]
            heavy = exp.GT(this=_ref("__n"), expression=_int(r))
            light = exp.LTE(this=_ref("__n"), expression=_int(r))
            cte("__heavy", _select(_refs(group_uk), _table("__capped"), where=heavy))
            reread("__hrows", "__heavy", row_values)
            inner = _select([exp.Star(), rank_rows(row_values)], _table("__hrows"))
            cte(
                "__hkept",
                _select(
                    _refs([*group_uk, *row_values]),
                    _subquery(inner, "__h"),
                    where=bounded("__rn", r),
                ),
            )
            cte("__light", _select(_refs(group_uk), _table("__capped"), where=light))
            reread("__lrows", "__light", row_values)
            cte(
                "__bounded",
                _union_all(
                    [
                        _select(_refs([*group_uk, *row_values]), _table(name))
                        for name in ("__lrows", "__hkept")
                    ]
                ),
            )
        if packed and (not wide_packing or min(packed.values()) < GIANT_FREE_BITS):
            # A packed count is exact below 2^bits rows; partitions with more (a unit with
            # hundreds of thousands of rows in one group) are summed again from their rows.
            # Only the packed columns are read again: the others are exact in __capped.
            giant = exp.GTE(this=_ref("__n"), expression=_int(2 ** min(packed.values())))
            exact = [col for (_, a), col in needed.items() if a not in packed]
            cte(
                "__giant",
                _select(_refs([*group_uk, "__n", *exact]), _table("__capped"), where=giant),
            )
            reread("__grows", "__giant", sorted(packed))
            cte("__gl1", separate_totals("__grows", sorted(packed)))
            same = _and(*(s.null_safe_eq(_ref(k, "__g"), _ref(k, "__c")) for k in group_uk))
            resummed = _select(
                [
                    *(_ref(k, "__g") for k in group_uk),
                    _ref("__n", "__c"),
                    *(_ref(col, "__c" if col in exact else "__g") for col, _, _ in unpacked_spec),
                ],
                _table("__gl1", "__g"),
            )
            resummed.append("joins", exp.Join(this=_table("__giant", "__c"), on=same, kind="INNER"))
            cte(
                "__totals",
                _union_all(
                    [
                        _select(unpacked(), _table("__capped"), where=exp.Not(this=giant)),
                        resummed,
                    ]
                ),
            )
        else:
            cte("__totals", _select(unpacked(), _table("__capped")))
        kept("__totals")
        agg_source, bounded_rows = "__kept", "__bounded" if histograms else None
    elif unit is not None:
        # 3–4, plain form: rank every row, then every partition (same orders as above).
        cte("__rows", rows_query())
        hist_values = [a for a in values if a in {measure_alias[h.id] for h in histograms}]
        cte("__ranked", _select([exp.Star(), rank_rows(hist_values)], _table("__rows")))
        row_cols = _refs([*group_uk, *values])
        cte("__rkept", _select(row_cols, _table("__ranked"), where=bounded("__rn", r)))
        if cap_partitions:
            distinct = _select(_refs(group_uk), _table("__rkept"), distinct=True)
            cte("__parts", _select([*_refs(group_uk), rank_parts()], _subquery(distinct, "__d")))
            cte("__pkept", _select([exp.Star()], _table("__parts"), where=bounded("__pr", m)))
            cte("__bounded", s.semi("__rkept", "__pkept", uk_pairs, anti=False))
            cte("__all", separate_totals("__rows"))
            cte("__totals", s.semi("__all", "__pkept", uk_pairs, anti=False))
        else:
            cte("__bounded", _select([exp.Star()], _table("__rkept")))
            cte("__totals", separate_totals("__rows"))
        kept("__totals")
        agg_source, bounded_rows = "__kept", "__bounded"
    else:
        cte("__rows", rows_query())
        agg_source, bounded_rows = "__rows", "__rows"

    # Final aggregates: one row per partition.
    def sum_of(column: str | None) -> exp.Expression:
        return _sum(caps, _ref(column)) if column is not None else _sum(caps, _int(0))

    measure_columns: dict[str, str] = {}
    # Units per partition: kept (unit, partition) rows, or rows without a unit.
    final: list[exp.Expression] = [
        _alias(_int(0), PART),
        *_refs(keys),
        _alias(_cast(exp.Count(this=exp.Star()), _T.BIGINT), UNITS),
    ]
    for meas in additive:
        out = f"__m_{meas.id}"
        measure_columns[meas.id] = out
        total: exp.Expression
        if meas.kind in ("rows", "units"):
            rows_or_units: exp.Expression = (
                sum_of("__n")
                if unit is not None and meas.kind == "rows"
                else exp.Count(this=exp.Star())
            )
            final.append(_alias(clamp_bigint(rows_or_units), out))
            continue
        if unit is not None:
            # the scaled contribution of each kept partition, one column per measure kind
            scaled = sum_of(kept_outputs.column_of(meas.id))
            final.append(_alias(clamp_bigint(scaled), out))
            continue
        a, ca = measure_alias[meas.id], count_alias.get(meas.id)
        count = exp.Count(this=_ref(ca) if ca else exp.Null())
        total = _sum(caps, _ref(a))
        value: exp.Expression
        if meas.kind == "values":
            value = count
        elif _centre(meas):
            value = _paren(
                exp.Sub(this=total, expression=exp.Mul(this=s.lit(_centre(meas)), expression=count))
            )
        else:
            value = total
        final.append(_alias(clamp_bigint(value), out))

    def null_bigint(name: str) -> exp.Expression:
        return _alias(_cast(exp.Null(), _T.BIGINT), name)

    parts: list[exp.Expression] = [
        _select(
            [*final, null_bigint(BIN), null_bigint(COUNT)],
            _table(agg_source),
            group=_refs(keys),
        )
    ]
    histogram_parts: dict[str, int] = {}
    distinct_parts: dict[str, int] = {}
    # Histograms of one per-row bin value are one engine histogram (a quantile's point and
    # interval endpoints, or two quantiles of one column, share it).
    hist_part: dict[str, int] = {}
    j = 0
    for meas in histograms:
        assert bounded_rows is not None
        col = measure_alias[meas.id]
        if meas.kind == "histogram" and col in hist_part:
            histogram_parts[meas.id] = hist_part[col]
            continue
        j += 1
        head = [
            _alias(_int(j), PART),
            *_refs(keys),
            null_bigint(UNITS),
            *(null_bigint(measure_columns[mm.id]) for mm in additive),
        ]
        # NULL values (NULL or NaN in the column) are in no bin and are no distinct value.
        # They are left out by the count, not by a WHERE: an engine would push such a filter
        # below the join that re-reads the rows and compute the per-row value for every row
        # of the table instead of the kept ones.
        if meas.kind == "distinct":
            distinct_parts[meas.id] = j
            count = exp.Count(this=exp.Distinct(expressions=[_ref(col)]))
            sel = [*head, null_bigint(BIN), _alias(_cast(count, _T.BIGINT), COUNT)]
            group = _refs(keys)
        else:
            histogram_parts[meas.id] = hist_part[col] = j
            count = exp.Count(this=_ref(col))
            sel = [
                *head,
                _alias(_cast(_ref(col), _T.BIGINT), BIN),
                _alias(_cast(count, _T.BIGINT), COUNT),
            ]
            group = _refs([*keys, col])
        part = _select(sel, _table(bounded_rows), group=group)
        part.set("having", exp.Having(this=exp.GT(this=count.copy(), expression=_int(0))))
        parts.append(part)
    statement = _union_all(parts)
    as_text = [kid for k, kid in zip(plan.keys, keys, strict=True) if key_as_text(k)]
    if as_text:
        # Keys whose Python conversion could fail or be unhashable (dates past 9999 or
        # 'infinity', intervals, lists) leave the engine as its own text: reading the result
        # before the charge can then never raise on one person's value (DESIGN §6.5).
        names = [e.alias_or_name for e in parts[0].expressions]
        statement = _select(
            [_alias(_cast(_ref(n), _T.VARCHAR), n) if n in as_text else _ref(n) for n in names],
            _subquery(statement, "__result"),
        )
    statement.set(
        "with_",
        exp.With(
            expressions=[
                exp.CTE(this=q, alias=exp.TableAlias(this=_ident(name))) for name, q in ctes
            ]
        ),
    )
    # The engine adapter checks, before running it, that this is exactly one read-only query.
    return CompiledQuery(
        sql=render(statement, caps.dialect, copy=False),
        key_columns=tuple(keys),
        measure_columns=measure_columns,
        histogram_parts=histogram_parts,
        statement=statement,
        distinct_parts=distinct_parts,
    )


DIAGNOSTIC_RULES = ("max_groups", "max_rows")
"""The bounding rules whose cut people are counted (then one per clamped column)."""


def diagnostics_statement(
    plan: DPPlan, caps: Capabilities, table: str, clamps: Sequence[tuple[Column, Bounds]]
) -> str:
    """One row: the people the query's rows belong to, and how many of them each rule cut.

    Columns ``people``, ``max_groups`` (people with more partitions than ``max_groups``),
    ``max_rows`` (people with a partition of more than ``max_rows`` rows) and ``clamp<i>``
    (people with a value of ``clamps[i]``'s column outside its bounds), over the rows the
    query reads (its WHERE, public domains, a non-NULL unit). A person counts at most once
    in each column: each has sensitivity 1. Single-table queries only (the caller refuses
    joins). Computes aggregates only; releases nothing by itself.
    """
    kinds = column_kinds(plan)
    s = _Sql(caps, kinds)
    unit_name = plan.query.table.policy.privacy_unit
    assert unit_name is not None
    u = canonical_unit_expression(plan.query.table.column(unit_name), caps)
    keys = [_alias(s.ref(k), f"__k{i}") for i, k in enumerate(plan.keys)]
    outside = []
    for i, (column, bounds) in enumerate(clamps):
        x = _cast(s.ref(column), _T.DOUBLE)
        lo, hi = s.double(float(bounds.lower)), s.double(float(bounds.upper))
        out = _or(exp.LT(this=x, expression=lo), exp.GT(this=x.copy(), expression=hi))
        hit = _case([(out, _int(1))], _int(0))
        outside.append(_alias(exp.Max(this=hit), f"__c{i}"))
    filters = where_conditions(plan, caps)
    per_pair = _select(
        [_alias(u, "__u"), *keys, _alias(exp.Count(this=exp.Star()), "__n"), *outside],
        _relation(table, SOURCE),
        where=_and(*filters) if filters else None,
        group=[_ref("__u"), *(_ref(f"__k{i}") for i in range(len(keys)))],
    )
    m, r = plan.max_groups, plan.max_rows

    def flag(cond: exp.Expression, name: str) -> exp.Expression:
        return _alias(_case([(cond, _int(1))], _int(0)), name)

    per_person = _select(
        [
            flag(exp.GT(this=exp.Count(this=exp.Star()), expression=_int(m)), "__g"),
            flag(exp.GT(this=exp.Max(this=_ref("__n")), expression=_int(r)), "__r"),
            *(_alias(exp.Max(this=_ref(f"__c{i}")), f"__c{i}") for i in range(len(clamps))),
        ],
        _subquery(per_pair, "__pp"),
        group=[_ref("__u")],
    )
    totals = [
        _alias(_cast(exp.Count(this=exp.Star()), _T.BIGINT), "people"),
        _alias(_cast(_sum(caps, _ref("__g")), _T.BIGINT), "max_groups"),
        _alias(_cast(_sum(caps, _ref("__r")), _T.BIGINT), "max_rows"),
        *(
            _alias(_cast(_sum(caps, _ref(f"__c{i}")), _T.BIGINT), f"clamp{i}")
            for i in range(len(clamps))
        ),
    ]
    return render(_select(totals, _subquery(per_person, "__per")), caps.dialect, copy=False)


def key_as_text(column: Column) -> bool:
    """Whether a group key leaves the engine as text (a total representation).

    Temporal keys (a date of year 10000, ``'infinity'``) and composite or exotic ones (lists,
    structs, maps, intervals, PostgreSQL's unbounded NUMERIC) have engine values that Python
    cannot always convert or hash; they are fetched as the engine's text and decoded only
    once released (:func:`deniable.query.release.decode_key`). Integers, floats, booleans,
    text and binary arrive as they are.
    """
    if column.kind is ColumnKind.TEMPORAL:
        return True
    if column.kind is ColumnKind.REAL:
        base = column.sql_type.strip().upper().split("(", 1)[0].strip()
        return base in ("DECIMAL", "NUMERIC")
    if column.kind is ColumnKind.OTHER:
        base = column.sql_type.strip().upper().split("(", 1)[0].strip()
        return base not in ("BLOB", "BYTEA", "BINARY", "VARBINARY", "BYTES")
    return False


def _floor_shift(packed: str, bits: int) -> exp.Expression:
    """``⌊packed / 2^bits⌋`` of an exact decimal column, exactly (also when it is negative).

    ``2^-bits`` is written out as its finite decimal expansion (``5^bits / 10^bits``): an
    exact decimal product (PostgreSQL's NUMERIC keeps every digit of a product, while it
    rounds a quotient to a few digits, which could carry it over the next integer).
    """
    scale = "0." + str(5**bits).zfill(bits)  # 2^-bits = 5^bits / 10^bits
    return exp.Floor(this=exp.Mul(this=_ref(packed), expression=exp.Literal.number(scale)))


def _low_bits(packed: str, bits: int) -> exp.Expression:
    """``packed − 2^bits·⌊packed / 2^bits⌋`` (in ``[0, 2^bits)``) of an exact decimal column."""
    low = exp.Mul(this=_int(2**bits), expression=_floor_shift(packed, bits))
    return _paren(exp.Sub(this=_ref(packed), expression=low))


def _packable(
    plan: DPPlan,
    needed: dict[tuple[str, str], str],
    measure_alias: dict[str, str],
    *,
    wide: bool = False,
) -> dict[str, int]:
    """The columns whose count of values can ride in the low bits of their sum, and the bits.

    One aggregate instead of two: over millions of (unit, partition) groups a second
    aggregate costs more than the arithmetic. With ``bits`` low bits, the packed sum of a
    partition of fewer than ``2^bits`` rows holds its count exactly and fits BIGINT, which is
    checked here from the largest |per-row value| (+1 for the rounding); ``bits`` is the
    largest such, at most :data:`PACK_BITS_MAX` and with ``2^bits > max_rows``. Partitions
    with more rows are summed again (``__giant``). Other columns keep a sum and a count.
    With ``wide`` (the sum is kept in the engine's wide type), only one row's packed value
    must fit BIGINT, which leaves more bits to the count.
    """
    reach: dict[str, int] = {}
    for meas in plan.measures:
        if isinstance(meas, SumMeasure | SquaresMeasure):
            a = measure_alias[meas.id]
            low = meas.row_low + meas.centre if isinstance(meas, SumMeasure) else 0
            high = meas.row_high + _centre(meas)
            top = max(abs(low), abs(high)) + 1
            reach[a] = max(reach.get(a, 0), top)
    least_bits = plan.max_rows.bit_length()
    out: dict[str, int] = {}
    for fn, a in needed:
        if fn != "count" or ("sum", a) not in needed or a not in reach:
            continue
        bits = max(
            (
                b
                for b in range(least_bits, PACK_BITS_MAX + 1)
                if (
                    reach[a] * 2**b + 1 <= SUM_LIMIT
                    if wide
                    else (2**b - 1) * (reach[a] * 2**b + 1) <= SUM_LIMIT
                )
            ),
            default=None,
        )
        if bits is not None:
            out[a] = bits
    return out


@dataclass(frozen=True)
class KeptOutput:
    """One per-partition column of ``__kept``: a scaled contribution and its bounds.

    Attributes:
        name: the column.
        total: the partition's sum column, or None for a count.
        count: the partition's count column (None: a plain sum).
        centre: the integer subtracted per value (``total − centre·count``).
        low: least contribution of one partition (integer units).
        high: greatest contribution of one partition.
    """

    name: str
    total: str | None
    count: str | None
    centre: int
    low: int
    high: int


class KeptOutputs(list[KeptOutput]):
    """The columns of ``__kept``, and which one each additive measure sums."""

    def __init__(self) -> None:
        super().__init__()
        self.by_measure: dict[str, str] = {}

    def column_of(self, measure_id: str) -> str:
        """The column holding ``measure_id``'s per-partition contributions."""
        return self.by_measure[measure_id]


def _kept_outputs(
    plan: DPPlan,
    additive: Sequence[Measure],
    needed: Mapping[tuple[str, str], str],
    measure_alias: Mapping[str, str],
    count_alias: Mapping[str, str],
) -> KeptOutputs:
    """The scaled per-partition columns that the additive measures sum (shared when equal).

    A centred sum gets its own column, scaled after centring: scaling the sum and the count
    apart and subtracting would round twice and could leave the bounds.
    """
    r = plan.max_rows
    outputs = KeptOutputs()
    seen: dict[tuple[str | None, str | None, int, int, int], str] = {}
    for meas in additive:
        total: str | None = None
        count: str | None = None
        centre = 0
        if isinstance(meas, ValueCount):
            count, low, high = needed[("count", count_alias[meas.id])], 0, r
        elif isinstance(meas, SumMeasure | SquaresMeasure):
            total = needed[("sum", measure_alias[meas.id])]
            row_low = meas.row_low if isinstance(meas, SumMeasure) else 0
            low, high = r * min(row_low, 0), r * max(meas.row_high, 0)
            if _centre(meas):
                centre = _centre(meas)
                count = needed[("count", count_alias[meas.id])]
        else:
            continue  # rows and units
        spec = (total, count, centre, low, high)
        if spec not in seen:
            seen[spec] = f"__x{len(seen)}"
            outputs.append(KeptOutput(seen[spec], total, count, centre, low, high))
        outputs.by_measure[meas.id] = seen[spec]
    return outputs


def _numerator(caps: Capabilities, o: KeptOutput) -> exp.Expression:
    """A partition's total for ``o`` (``total − centre·count``) in an exact wide integer."""
    wide = exp.DataType.build(caps.wide_integer)

    def w(column: str) -> exp.Expression:
        return exp.Cast(this=_ref(column), to=wide.copy())

    if o.total is None:
        assert o.count is not None
        return w(o.count)
    if o.count is None:
        return w(o.total)
    scaled_count = exp.Mul(this=_int(o.centre), expression=w(o.count))
    return _paren(exp.Sub(this=w(o.total), expression=scaled_count))


def _scaled(total: str, o: KeptOutput, r: int) -> exp.Expression:
    """A partition's contribution from its wide ``total`` column, as BIGINT.

    The total itself if the partition has at most ``r`` rows, else the expected total of a
    uniform ``r``-row subset, ``round(total·r / n)`` (half away from zero, exact); clamped to
    ``[o.low, o.high]``, which the arithmetic already guarantees (``|total| ≤ n·max``), so
    that no packing or overflow mistake can exceed the sensitivity.
    """
    n = _ref("__n")

    def x() -> exp.Expression:
        return _paren(exp.Mul(this=_ref(total), expression=_int(r)))

    def halves(a: exp.Expression) -> exp.Expression:  # a // (2·n)
        return exp.IntDiv(
            this=_paren(a), expression=_paren(exp.Mul(this=_int(2), expression=n.copy()))
        )

    up = halves(exp.Add(this=exp.Mul(this=_int(2), expression=x()), expression=n.copy()))
    down = halves(exp.Sub(this=n.copy(), expression=exp.Mul(this=_int(2), expression=x())))
    rounded = _case([(exp.GTE(this=x(), expression=_int(0)), up)], exp.Neg(this=_paren(down)))
    value = _case([(exp.GT(this=n.copy(), expression=_int(r)), rounded)], _ref(total))
    return _cast(_least(_greatest(value, _int(o.low)), _int(o.high)), _T.BIGINT)


def clamp_bigint(expr: exp.Expression) -> exp.Expression:
    """``expr`` (NULL read as 0) clamped to ±SUM_LIMIT and cast to BIGINT (never raises).

    greatest/least skip NULLs, so the COALESCE must come first.
    """
    zeroed = exp.Coalesce(this=expr, expressions=[_int(0)])
    return _cast(_least(_greatest(zeroed, _int(-SUM_LIMIT)), _int(SUM_LIMIT)), _T.BIGINT)

"""Stage 4 of the SQL compiler: generate the engine's bounded-aggregation SQL from a DP plan.

The generated statement is one ``WITH … SELECT``, built from deniable's own identifiers
(quoted by sqlglot), literals rendered by sqlglot, and the validated WHERE AST re-rendered by
sqlglot — never from the analyst's text. Its shape follows the rewrite rules, applied in
order (each one line of SQL below):

1. **filter and clamp** (``rows``): the row predicate (wrapped so that it cannot raise: a
   failing expression counts as FALSE), public-key domains, non-NULL privacy unit; one
   canonical unit, the group keys, and each measure's per-row value: NaN→NULL, clamp to the
   bounds (±inf clamps too), round to the fixed-point grid as an integer.
2. **per unit and partition** (``l1``): ``GROUP BY unit, keys`` — the work of the two-level
   floor, which a user-level DP query cannot avoid.
3. **bound partitions**: each unit keeps the ``max_groups`` partitions ranked first by
   ``H(secret₂; unit, keys)`` — a window over the (unit, partition) rows, not over rows.
4. **bound rows**: kept partitions where a unit has more than ``max_rows`` rows are
   recomputed from their rows (read again, joined to the short list of such partitions)
   ranked by ``H(secret₁; unit, keys, values)``; every other partition keeps all its
   rows and needs no ranking. A query of counts only needs no rows: a partition keeps
   ``min(rows, max_rows)`` of them, whichever they are. The keys come from a CSPRNG for
   each query, so the rows and partitions kept are chosen independently of their
   magnitudes. ``H(key; a₀, a₁, …)`` is the keyed chain hash of :meth:`_Sql.keyed_hash`
   (not the engine's multi-argument hash, whose orders are far from uniform).
5. **aggregate** per partition: number of units, rows, values, exact integer sums (clamped
   to ±(2^62−1) so that they fit the exact samplers), and — for quantiles — histograms over
   the candidate grid, all in one result set (``__part`` 0 for aggregates, ``j`` for the
   histogram of the ``j``-th quantile).

Which partitions a unit keeps does not depend on its rows, so bounding partitions before or
after rows gives the same result; doing it first leaves fewer partitions to recompute.
Queries with a quantile need row-level bounded data for their histograms; they use the
plain form of steps 3–4 (rank every row and every partition) with the same hashes, so both
forms keep exactly the same rows for the same secrets. Tables without a privacy unit skip
steps 2–4 (each row is a unit and contributes one row to one partition).

Row hashes use the values as well as the unit and keys (no engine gives a stable row id for
every source): identical rows tie, and which of two identical rows is kept does not matter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from deniable.engines.base import SAMPLE_ALIAS, Capabilities
from deniable.errors import InternalError
from deniable.query.catalog import Column, ColumnKind
from deniable.query.plan import DPPlan, Measure

SUM_LIMIT = 2**62 - 1
"""Partition sums are clamped to ±SUM_LIMIT (a 1-Lipschitz post-processing of exact sums)."""

SOURCE = SAMPLE_ALIAS  # the alias of the source table in generated SQL
"""Alias of the source table in the generated SQL."""
PART = "__part"
UNITS = "__units"
BIN = "__bin"
COUNT = "__count"


@dataclass(frozen=True, slots=True)
class Secrets:
    """The two per-query keys of the pseudo-random orders (from the CSPRNG)."""

    rows: int
    partitions: int


@dataclass(frozen=True)
class CompiledQuery:
    """The generated SQL and how to read its result.

    Attributes:
        sql: one SELECT statement for the engine.
        key_columns: result column of each group key, in order.
        measure_columns: result column of each non-histogram measure, by measure id.
        histogram_parts: ``__part`` value of each histogram measure, by measure id.
    """

    sql: str
    key_columns: tuple[str, ...]
    measure_columns: dict[str, str]
    histogram_parts: dict[str, int]


class _Sql:
    """Spelling helpers for one dialect (identifiers and literals rendered by sqlglot)."""

    def __init__(self, caps: Capabilities) -> None:
        self.caps = caps

    def id(self, name: str) -> str:
        return str(exp.to_identifier(name, quoted=True).sql(dialect=self.caps.dialect))

    def col(self, name: str) -> str:
        """A column of the source table, qualified by its alias ``__t`` (never ambiguous)."""
        return f"{SOURCE}.{self.id(name)}"

    def lit(self, value: object) -> str:
        if isinstance(value, float):
            return self.double(value)
        if isinstance(value, bool) or value is None or isinstance(value, int | str):
            return str(exp.convert(value).sql(dialect=self.caps.dialect))
        raise InternalError(f"cannot render a {type(value).__name__} literal")

    def double(self, value: float) -> str:
        # Through text: the shortest repr round-trips to the same double exactly.
        return f"CAST({self.lit(repr(float(value)))} AS DOUBLE)"

    def null_safe_eq(self, a: str, b: str) -> str:
        if self.caps.null_safe_equal:
            return f"{a} IS NOT DISTINCT FROM {b}"
        return f"({a} = {b} OR ({a} IS NULL AND {b} IS NULL))"

    def semi(self, left: str, right: str, on: Sequence[tuple[str, str]], *, anti: bool) -> str:
        """``SELECT l.* FROM left l [ANTI|SEMI] JOIN right r ON …`` in the dialect."""
        cond = " AND ".join(self.null_safe_eq(f"__l.{a}", f"__r.{b}") for a, b in on)
        if self.caps.semi_join:
            kind = "ANTI" if anti else "SEMI"
            return f"SELECT __l.* FROM {left} AS __l {kind} JOIN {right} AS __r ON {cond}"
        neg = "NOT " if anti else ""
        return (
            f"SELECT __l.* FROM {left} AS __l WHERE {neg}EXISTS "
            f"(SELECT 1 FROM {right} AS __r WHERE {cond})"
        )

    def semi_source(
        self, select: str, source: str, where: str, right: str, on: Sequence[tuple[str, str]]
    ) -> str:
        """``SELECT select FROM source WHERE where``, restricted to rows matching ``right``."""
        cond = " AND ".join(self.null_safe_eq(a, b) for a, b in on)
        if self.caps.semi_join:
            tail = f" WHERE {where}" if where else ""
            return f"SELECT {select} FROM {source} SEMI JOIN {right} AS __r ON {cond}{tail}"
        exists = f"EXISTS (SELECT 1 FROM {right} AS __r WHERE {cond})"
        return f"SELECT {select} FROM {source} WHERE " + (
            f"{where} AND {exists}" if where else exists
        )

    def keyed_hash(self, key: int, args: Sequence[str]) -> str:
        """A pseudo-random 64-bit function of ``args`` under the secret ``key``.

        A chain that re-hashes after each argument: ``h₀ = key ⊕ H(a₀)``,
        ``hᵢ = H(hᵢ₋₁) ⊕ H(aᵢ)``, result ``H(hₙ)``. Not the engine's multi-argument hash:
        DuckDB's ``hash(a, b, c)`` combines the per-argument hashes with a weak step, so
        the order it induces on the keys of one unit is far from uniform (one category of
        50 was kept in a top 5 twice as often as another); the chain mixes every argument
        through the full hash (chi-square tests in ``tests/stats/test_bounding_uniform.py``).
        """
        h, x = self.caps.hash_function, self.caps.xor_function
        if not 0 <= key < 2**63:
            raise InternalError("hash keys are 63-bit")
        acc = f"{x}(CAST({key} AS UBIGINT), {h}({args[0]}))"
        for arg in args[1:]:
            acc = f"{x}({h}({acc}), {h}({arg}))"
        return f"{h}({acc})"


def canonical_unit_sql(column: Column, caps: Capabilities) -> str:
    """SQL of a privacy unit's canonical form (see :func:`~deniable.query.catalog.canonical_unit`).

    Integers as themselves, text as its NFC normalisation, other types as the NFC
    normalisation of their VARCHAR text.
    """
    s = _Sql(caps)
    col = s.col(column.name)
    if column.kind is ColumnKind.INTEGER:
        return col
    text = col if column.kind is ColumnKind.TEXT else f"CAST({col} AS VARCHAR)"
    return f"{caps.unicode_nfc}({text})" if caps.unicode_nfc else text


def unit_identity_sql(column: Column, caps: Capabilities) -> str:
    """SQL of a privacy unit's identity as text, for the per-unit sampling coin.

    Built on :func:`canonical_unit_sql`, so that the rows the query path treats as one person
    share one coin: the canonical value's text behind a ``'u:'`` tag (one column, so equal
    identities mean equal canonical units). NULL units share the identity ``'N'``; their rows
    are dropped by every query anyway.
    """
    unit = canonical_unit_sql(column, caps)
    if column.kind is not ColumnKind.TEXT:
        unit = f"CAST({unit} AS VARCHAR)"
    return f"COALESCE('u:' || {unit}, 'N')"


def _value(s: _Sql, m: Measure) -> str:
    """The column as a double with NaN turned into NULL (reals), or as it is (integers)."""
    assert m.column is not None
    col = s.col(m.column.name)
    if m.column.kind is ColumnKind.REAL:
        x = f"CAST({col} AS DOUBLE)"
        return f"(CASE WHEN {s.caps.is_nan}({x}) THEN NULL ELSE {x} END)"
    if m.column.kind is ColumnKind.INTEGER:
        return col
    return col


def _clamped_double(s: _Sql, m: Measure) -> str:
    assert m.column is not None
    x = f"CAST({s.col(m.column.name)} AS DOUBLE)"
    lo, hi = s.double(m.lower_f), s.double(m.upper_f)
    if m.column.kind is ColumnKind.INTEGER:
        return _clamp(x, lo, hi)
    # NULL and NaN stay NULL (ignored, as SQL ignores NULL); ±inf clamp to the bounds.
    return (
        f"(CASE WHEN {x} IS NULL OR {s.caps.is_nan}({x}) THEN NULL "
        f"ELSE least(greatest({x}, {lo}), {hi}) END)"
    )


def _clamp(x: str, lo: str, hi: str) -> str:
    # least/greatest skip NULLs (greatest(NULL, lo) is lo): keep NULL as NULL explicitly.
    return f"(CASE WHEN {x} IS NULL THEN NULL ELSE least(greatest({x}, {lo}), {hi}) END)"


def row_expression(m: Measure, caps: Capabilities) -> str | None:
    """The per-row SQL value of a measure (None for ``rows`` and ``units``)."""
    s = _Sql(caps)
    if m.kind in ("rows", "units"):
        return None
    if m.kind == "values":
        return _value(s, m)
    if m.kind == "sum":
        if m.integer_column and m.exponent == 0:
            lo, hi = int(m.lower_f), int(m.upper_f)
            clamped = _clamp(_value(s, m), s.lit(lo), s.lit(hi))
            units = f"CAST({clamped} AS BIGINT)"
        else:
            scale = s.double(float(Fraction(2) ** -m.exponent))
            units = f"CAST(round({_clamped_double(s, m)} * {scale}) AS BIGINT)"
        return units  # centred sums subtract centre × count at aggregation (exact integers)
    if m.kind == "squares":
        scale = s.double(float(Fraction(2) ** -m.exponent))
        d = f"({_clamped_double(s, m)} - {s.double(m.midpoint_f)})"
        return f"CAST(round(({d} * {d}) * {scale}) AS BIGINT)"
    if m.kind == "histogram":
        step_inv = s.double(m.grid / (m.upper_f - m.lower_f))
        raw = (
            f"CAST(round(({_clamped_double(s, m)} - {s.double(m.lower_f)}) * {step_inv}) AS BIGINT)"
        )
        return _clamp(raw, "0", s.lit(m.grid))
    raise InternalError(f"unknown measure kind {m.kind}")


def where_sql(plan: DPPlan, caps: Capabilities) -> list[str]:
    """The row filters: the analyst's predicate (made total), public domains, non-NULL unit."""
    s = _Sql(caps)
    out: list[str] = []
    query = plan.query
    if query.where is not None:
        qualified = query.where.transform(
            lambda n: (
                exp.column(n.name, table=SOURCE, quoted=True) if isinstance(n, exp.Column) else n
            )
        )
        pred = qualified.sql(dialect=caps.dialect)
        if caps.try_expression:
            pred = f"TRY({pred})"
        out.append(f"COALESCE({pred}, FALSE)")
    policy = query.table.policy
    for k in plan.keys:
        values = policy.public_keys.get(k.name)
        if values is None:
            continue
        col = s.col(k.name)
        present = [v for v in values if v is not None]
        parts = []
        if present:
            parts.append(f"{col} IN ({', '.join(s.lit(v) for v in present)})")
        if len(present) < len(values):
            parts.append(f"{col} IS NULL")
        out.append("(" + " OR ".join(parts) + ")")
    if policy.privacy_unit is not None:
        out.append(f"{s.col(policy.privacy_unit)} IS NOT NULL")
    return out


def compile_plan(plan: DPPlan, caps: Capabilities, table: str, secrets: Secrets) -> CompiledQuery:
    """Generate the one statement computing every measure of ``plan`` on bounded data.

    Args:
        plan: the DP plan.
        caps: the engine's capabilities.
        table: the engine's name for the table (quoted here).
        secrets: per-query keys of the row and partition orders.

    Returns:
        The SQL and the layout of its result. The result has one row per non-empty
        partition with ``__part = 0`` (plus one row per non-empty histogram cell of each
        quantile); it holds aggregates only, never rows.
    """
    s = _Sql(caps)
    policy = plan.query.table.policy
    unit = policy.privacy_unit
    keys = [f"__k{i}" for i in range(len(plan.keys))]
    keys_sql = [s.id(k) for k in keys]
    histograms = [m for m in plan.measures if m.kind == "histogram"]
    additive = [m for m in plan.measures if m.kind != "histogram"]
    # Distinct per-row values, shared by the measures that need the same one: one fixed-point
    # sum of x serves SUM(x) and AVG(x). A per-row value of a column is NULL exactly when the
    # column is NULL or NaN, so counting the non-NULL entries of any of them counts the
    # values: COUNT(x) and the count behind a centred sum reuse such a column when one exists.
    aliases: dict[str, str] = {}
    measure_alias: dict[str, str] = {}
    by_column: dict[str, str] = {}
    for meas in plan.measures:
        if meas.kind in ("sum", "squares", "histogram"):
            expr = row_expression(meas, caps)
            assert expr is not None and meas.column is not None
            measure_alias[meas.id] = aliases.setdefault(expr, f"__v{len(aliases)}")
            by_column.setdefault(meas.column.name, measure_alias[meas.id])
    count_alias: dict[str, str] = {}
    for meas in additive:
        if meas.kind == "values" or (meas.kind == "sum" and meas.centre):
            assert meas.column is not None
            if meas.column.name not in by_column:
                expr = row_expression(dataclasses.replace(meas, kind="values"), caps)
                assert expr is not None
                by_column[meas.column.name] = aliases.setdefault(expr, f"__v{len(aliases)}")
            count_alias[meas.id] = by_column[meas.column.name]
            if meas.kind == "values":
                measure_alias[meas.id] = count_alias[meas.id]
    value_cols = list(aliases.items())
    needed: dict[tuple[str, str], str] = {}
    for meas in additive:
        a = measure_alias.get(meas.id)
        if a is None:
            continue
        if meas.kind == "values" or (meas.kind == "sum" and meas.centre):
            needed.setdefault(("count", count_alias[meas.id]), f"__c{count_alias[meas.id][3:]}")
        if meas.kind in ("sum", "squares"):
            needed.setdefault(("sum", a), f"__s{a[3:]}")

    select_rows: list[str] = []
    if unit is not None:
        select_rows.append(f"{canonical_unit_sql(plan.query.table.column(unit), caps)} AS __u")
    select_rows += [f"{s.col(k.name)} AS {kid}" for k, kid in zip(plan.keys, keys_sql, strict=True)]
    select_rows += [f"{expr} AS {a}" for expr, a in value_cols]
    if not select_rows:  # e.g. COUNT(*) over a table without privacy unit
        select_rows.append("1 AS __one")
    filters = where_sql(plan, caps)
    select_list, source, where = (
        ", ".join(select_rows),
        f"{s.id(table)} AS {SOURCE}",
        " AND ".join(filters),
    )
    rows_sql = f"SELECT {select_list} FROM {source}" + (f" WHERE {where}" if where else "")
    ctes: list[tuple[str, str]] = []
    group_uk = ", ".join(["__u", *keys_sql])
    uk_pairs = [("__u", "__u")] + [(k, k) for k in keys_sql]
    row_hash = s.keyed_hash(secrets.rows, ["__u", *keys_sql, *(a for _, a in value_cols)])
    part_hash = s.keyed_hash(secrets.partitions, ["__u", *keys_sql])
    r, m = plan.max_rows, plan.max_groups
    cap_partitions = bool(plan.keys) and not (
        plan.public_domain is not None and len(plan.public_domain) <= m
    )

    # Per (unit, partition) aggregates, as (aggregate, column), and how the fast form reads
    # each needed column back from them. With at most max_rows rows of at most 2^40 units
    # each, the sums of a partition within the bounds fit BIGINT; the others are clamped
    # here and recomputed from their rows.
    packed = _packable(plan, needed, measure_alias) if unit is not None and not histograms else {}
    level1: list[tuple[str, str]] = [("count(*)", "__n")]
    unpacked = ["__u", *keys_sql, "__n"]
    for (fn, a), col in needed.items():
        if a in packed:
            # Σ (value·2^bits + 1) over non-NULL values: the sum above the count
            bits, p = packed[a], f"__p{a[3:]}"
            if fn == "sum":
                level1.append((clamp_bigint(f"sum(COALESCE({a} * {2**bits} + 1, 0))"), p))
                unpacked.append(f"({p} >> {bits}) AS {col}")  # ⌊p / 2^bits⌋
            else:
                unpacked.append(f"({p} & {2**bits - 1}) AS {col}")  # p mod 2^bits
            continue
        agg = f"count({a})" if fn == "count" else clamp_bigint(f"sum({a})")
        level1.append((agg, col))
        unpacked.append(col)
    level1_aggs = ", ".join(f"{agg} AS {col}" for agg, col in level1)
    unpacked_cols = ", ".join(unpacked)

    def cte(name: str, *parts: str) -> None:
        ctes.append((name, " ".join(parts)))

    # ORDER BY ties are broken by the keys (distinct within a unit) and the values (equal
    # only for identical rows). Besides, "row_number() … <= k" alone would be rewritten by
    # DuckDB into a per-group top-k aggregate that is twice as slow as the window itself;
    # the extra "> 0" keeps the window.
    value_order = [a for _, a in value_cols]
    rank_rows = (
        f"row_number() OVER (PARTITION BY {group_uk} ORDER BY "
        f"{', '.join([row_hash, *value_order])}) AS __rn"
    )
    rank_parts = (
        f"row_number() OVER (PARTITION BY __u ORDER BY {', '.join([part_hash, *keys_sql])}) AS __pr"
    )
    if unit is not None and not histograms:
        pcols = ", ".join(["__u", *keys_sql, *(col for _, col in level1)])
        # 2. one row per (unit, partition); the rows are read again below, not materialised
        cte(
            "__l1",
            f"SELECT {group_uk}, {level1_aggs} FROM ({rows_sql}) AS __r",
            f"GROUP BY {group_uk}",
        )
        # 3. at most max_groups partitions per unit (a window over partitions, not rows)
        if cap_partitions:
            cte(
                "__capped",
                f"SELECT {pcols} FROM (SELECT *, {rank_parts} FROM __l1) AS __p",
                f"WHERE __pr <= {m} AND __pr > 0",
            )
        else:
            cte("__capped", "SELECT * FROM __l1")
        if not needed:
            # 4. counts only: a partition keeps min(rows, max_rows) rows, whichever they are
            cte("__kept", f"SELECT {group_uk}, least(__n, {r}) AS __n FROM __capped")
        else:
            # 4. recompute only the kept partitions where a unit has more than max_rows rows
            cte("__heavy", f"SELECT {group_uk} FROM __capped WHERE __n > {r}")
            # only the rows of those partitions: the join runs on the source table, so the
            # per-row expressions are computed for them alone
            unit_expr = canonical_unit_sql(plan.query.table.column(unit), caps)
            on = [(unit_expr, "__r.__u")] + [
                (s.col(k.name), f"__r.{kid}") for k, kid in zip(plan.keys, keys_sql, strict=True)
            ]
            cte("__hrows", s.semi_source(select_list, source, where, "__heavy", on))
            cte(
                "__hl1",
                f"SELECT {group_uk}, {level1_aggs}",
                f"FROM (SELECT *, {rank_rows} FROM __hrows) AS __h",
                f"WHERE __rn <= {r} AND __rn > 0 GROUP BY {group_uk}",
            )
            cte(
                "__kept",
                f"SELECT {unpacked_cols} FROM __capped WHERE __n <= {r}",
                f"UNION ALL SELECT {unpacked_cols} FROM __hl1",
            )
        agg_source, bounded_rows = "__kept", None
    elif unit is not None:
        # 3–4, plain form: rank every row, then every partition (same orders as above).
        cte("__rows", rows_sql)
        cte("__ranked", f"SELECT *, {rank_rows} FROM __rows")
        row_cols = ", ".join(["__u", *keys_sql, *(a for _, a in value_cols)])
        cte("__rkept", f"SELECT {row_cols} FROM __ranked WHERE __rn <= {r} AND __rn > 0")
        if cap_partitions:
            cte(
                "__parts",
                f"SELECT {group_uk}, {rank_parts}",
                f"FROM (SELECT DISTINCT {group_uk} FROM __rkept) AS __d",
            )
            cte("__pkept", f"SELECT * FROM __parts WHERE __pr <= {m} AND __pr > 0")
            cte("__bounded", s.semi("__rkept", "__pkept", uk_pairs, anti=False))
        else:
            cte("__bounded", "SELECT * FROM __rkept")
        cte(
            "__kept",
            f"SELECT {group_uk}, {level1_aggs} FROM __bounded GROUP BY {group_uk}",
        )
        agg_source, bounded_rows = "__kept", "__bounded"
    else:
        cte("__rows", rows_sql)
        agg_source, bounded_rows = "__rows", "__rows"

    # Final aggregates: one row per partition.
    def clamp_sum(expr: str) -> str:
        return f"CAST(least(greatest(COALESCE({expr}, 0), {-SUM_LIMIT}), {SUM_LIMIT}) AS BIGINT)"

    measure_columns: dict[str, str] = {}
    # Units per partition: kept (unit, partition) rows, or rows without a unit.
    final: list[str] = ["0 AS " + PART, *keys_sql, f"CAST(count(*) AS BIGINT) AS {UNITS}"]
    for meas in additive:
        out = f"__m_{meas.id}"
        measure_columns[meas.id] = out
        if meas.kind in ("rows", "units"):
            n = "sum(__n)" if unit is not None and meas.kind == "rows" else "count(*)"
            final.append(f"{clamp_sum(n)} AS {out}")
            continue
        a, ca = measure_alias[meas.id], count_alias.get(meas.id, "NULL")
        if unit is not None:
            count = f"sum({needed.get(('count', ca), '0')})"
            total = f"sum({needed.get(('sum', a), '0')})"
        else:
            count, total = f"count({ca})", f"sum({a})"
        if meas.kind == "values":
            expr = count
        elif meas.centre:
            expr = f"({total} - {s.lit(meas.centre)} * {count})"
        else:
            expr = total
        final.append(f"{clamp_sum(expr)} AS {out}")
    hist_cols = [f"CAST(NULL AS BIGINT) AS {BIN}", f"CAST(NULL AS BIGINT) AS {COUNT}"]
    group = f" GROUP BY {', '.join(keys_sql)}" if keys_sql else ""
    parts = [f"SELECT {', '.join(final + hist_cols)} FROM {agg_source}{group}"]
    histogram_parts: dict[str, int] = {}
    null_measures = [f"CAST(NULL AS BIGINT) AS {measure_columns[mm.id]}" for mm in additive]
    for j, meas in enumerate(histograms, start=1):
        histogram_parts[meas.id] = j
        assert bounded_rows is not None
        col = measure_alias[meas.id]
        sel = [
            f"{j} AS {PART}",
            *keys_sql,
            f"CAST(NULL AS BIGINT) AS {UNITS}",
            *null_measures,
            f"CAST({col} AS BIGINT) AS {BIN}",
            f"CAST(count(*) AS BIGINT) AS {COUNT}",
        ]
        parts.append(
            f"SELECT {', '.join(sel)} FROM {bounded_rows} WHERE {col} IS NOT NULL "
            f"GROUP BY {', '.join([*keys_sql, col])}"
        )
    body = " UNION ALL ".join(parts)
    # The engine adapter checks, before running it, that this is exactly one read-only query.
    sql = "WITH " + ", ".join(f"{name} AS ({q})" for name, q in ctes) + " " + body
    return CompiledQuery(
        sql=sql,
        key_columns=tuple(keys),
        measure_columns=measure_columns,
        histogram_parts=histogram_parts,
    )


def _packable(
    plan: DPPlan, needed: dict[tuple[str, str], str], measure_alias: dict[str, str]
) -> dict[str, int]:
    """The columns whose count of values can ride in the low bits of their sum, and the bits.

    One aggregate instead of two: over millions of (unit, partition) groups a second
    aggregate costs more than the arithmetic. Packed sums are read only for partitions of at
    most max_rows rows, where the count is below 2^bits (2^bits > max_rows) and the packed
    sum fits BIGINT, which is checked here from the largest |per-row value| (+1 for the
    rounding); other columns keep a sum and a count.
    """
    reach: dict[str, int] = {}
    for meas in plan.measures:
        if meas.kind in ("sum", "squares"):
            a = measure_alias[meas.id]
            top = max(abs(meas.row_low + meas.centre), abs(meas.row_high + meas.centre)) + 1
            reach[a] = max(reach.get(a, 0), top)
    r = plan.max_rows
    bits = r.bit_length()
    return {
        a: bits
        for fn, a in needed
        if fn == "count"
        and ("sum", a) in needed
        and a in reach
        and r * (reach[a] * 2**bits + 1) <= SUM_LIMIT
    }


def clamp_bigint(expr: str) -> str:
    """``expr`` (NULL read as 0) clamped to ±SUM_LIMIT and cast to BIGINT (never raises).

    greatest/least skip NULLs, so the COALESCE must come first.
    """
    return f"CAST(least(greatest(COALESCE({expr}, 0), {-SUM_LIMIT}), {SUM_LIMIT}) AS BIGINT)"

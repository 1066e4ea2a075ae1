"""The engine statements of the graph queries, as sqlglot trees rendered per dialect.

No SQL is built from strings: identifiers come from :func:`deniable.sqlnames.identifier`,
the keyed hash from the query compiler's chain (the same pseudo-random order the table
queries use), and the engine's :class:`~deniable.engines.base.Capabilities` decide the
dialect. Every statement starts from the *normalised* edge set ``__e(u, w)``: distinct
unordered pairs of distinct, non-NULL ends, ``u < w``, each end being its node's *identity*
(:func:`node_id`): an integer id as it is, any other id as the UTF-8 bytes of its canonical
text (NFC; reals with ``-0.0`` as ``0.0`` and NaN as NULL, as for privacy units). Bytes
compare, group and hash byte for byte in every engine and in Python, whatever the column's
collation: a case-insensitive column cannot make one engine node two Python nodes (which
would multiply its degree or triangle budget), and the keyed hash of an edge never depends
on which spelling the engine kept.

Node attributes are matched against their declared (public) domain in the engine
(:func:`attribute_groups`): at node level Python receives each node's index in the domain or
NULL, never a private attribute value it would have to convert (a ``DATE 'infinity'`` once
made that conversion raise before the charge).

The statements return exact aggregates (no noise): internal to the release path of
:mod:`deniable.graph.graph`, which charges the ledger before anything computed from them
leaves.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlglot import exp

from deniable.engines.base import Capabilities
from deniable.errors import InvalidParameter, UnsafeQuery
from deniable.query.catalog import Column, ColumnKind, kind_of
from deniable.query.rewrite.compile import keyed_hash
from deniable.sqlnames import identifier

EDGES = "__e"
HASHED = "__h"
ENDS = "__x"
RANKED = "__r"
KEPT = "__k"
DEGREES = "__d"
NODES = "__n"


class IdMode(enum.Enum):
    """How node ids are compared: the common type of the end columns and the node key."""

    INTEGER = "integer"  # all integer columns: ids as they are
    REAL = "real"  # numbers, some real: doubles, NaN as NULL and -0.0 as 0.0
    BYTES = "bytes"  # anything else: the UTF-8 bytes of the canonical (NFC) text


_WIDE_INTEGERS = ("HUGEINT", "UHUGEINT", "UBIGINT")
"""Integer types whose values may not fit a signed 64-bit integer in Python's arrays."""


def _base(sql_type: str) -> str:
    return sql_type.strip().upper().split("(", 1)[0].strip()


def id_mode(*columns: Column) -> IdMode:
    """The :class:`IdMode` that compares values of all ``columns`` alike.

    Integers of at most 64 signed bits: INTEGER; floating-point columns only: REAL; anything
    else (text, dates, wider integers as exact text, …): BYTES. Mixes of integers with
    reals, and DECIMAL ids, are refused by :func:`check_id_columns` (as doubles, distinct
    integers above 2⁵³ would become one node; as text, ``5`` and ``5.0`` would be two).
    """
    kinds = {c.kind for c in columns}
    if kinds == {ColumnKind.INTEGER}:
        wide = any(_base(c.sql_type) in _WIDE_INTEGERS for c in columns)
        return IdMode.BYTES if wide else IdMode.INTEGER
    decimal = any(_base(c.sql_type) in ("DECIMAL", "NUMERIC") for c in columns)
    if kinds == {ColumnKind.REAL} and not decimal:
        return IdMode.REAL
    return IdMode.BYTES


def check_id_columns(*columns: Column) -> None:
    """Refuse id columns that no mode compares exactly and alike (see :func:`id_mode`).

    Raises:
        InvalidParameter: integer and floating-point id columns mixed, or a DECIMAL id.
    """
    shown = ", ".join(f"{c.name!r} ({c.sql_type})" for c in columns)
    if any(_base(c.sql_type) in ("DECIMAL", "NUMERIC") for c in columns):
        raise InvalidParameter(
            f"node ids must be integers, text or floating-point numbers; got {shown}: cast "
            "DECIMAL ids to BIGINT (or to text) before registering the graph"
        )
    kinds = {c.kind for c in columns}
    if ColumnKind.INTEGER in kinds and ColumnKind.REAL in kinds:
        raise InvalidParameter(
            f"the node id columns mix integers and floating-point numbers ({shown}): give "
            "them one type (with pandas, integer ids with missing values need the nullable "
            "'Int64' dtype, not float64)"
        )


@dataclass(frozen=True)
class Ends:
    """An edge table as the statements read it: its name, its two end columns, the id mode.

    Attributes:
        table: the edge table's name in ``FROM``.
        source: the column of one end (name, engine type, kind).
        target: the column of the other end.
        mode: how node ids compare (:func:`id_mode` of the ends and the node key).
    """

    table: str
    source: Column
    target: Column
    mode: IdMode

    @classmethod
    def of(
        cls,
        table: str,
        columns: Mapping[str, str],
        source: str,
        target: str,
        node_key: Column | None = None,
    ) -> Ends:
        """From the edge table's ``{column: engine type}``, its end columns and the node key."""
        a, b = node_column(source, columns[source]), node_column(target, columns[target])
        return cls(table, a, b, id_mode(a, b, *([] if node_key is None else [node_key])))


def node_column(name: str, sql_type: str) -> Column:
    """A node id column (an end column or a node table's key) with its kind."""
    return Column(name, sql_type, kind_of(sql_type))


def node_id(caps: Capabilities, column: Column, mode: IdMode) -> exp.Expression:
    """The identity of the node a value of ``column`` names (module docstring).

    Raises:
        UnsafeQuery: the ids are text (or of another non-numeric type) and the engine cannot
            normalise text to NFC (Spark), so one node could be spelled two ways.
    """
    col = _col(column.name)
    if mode is IdMode.INTEGER:
        return col
    if mode is IdMode.REAL:
        return _real(caps, col)
    kind = column.kind
    if kind is ColumnKind.INTEGER:
        return caps.bytes_of(exp.Cast(this=col, to=exp.DataType.build("VARCHAR")))
    if kind is ColumnKind.REAL:
        real = _real(caps, col)
        return caps.bytes_of(exp.Cast(this=real, to=exp.DataType.build("VARCHAR")))
    text = col if kind is ColumnKind.TEXT else exp.Cast(this=col, to=exp.DataType.build("VARCHAR"))
    normal = caps.nfc(text)
    if normal is None:
        if kind in (ColumnKind.TEXT, ColumnKind.OTHER):
            raise UnsafeQuery(
                f"this engine ({caps.dialect}) has no Unicode NFC normalisation, so node id "
                f"column {column.name!r} ({column.sql_type}) could count one node as two; use "
                "integer node ids on this engine"
            )
        return caps.bytes_of(text)  # booleans and dates render as ASCII
    return caps.bytes_of(normal)


def _real(caps: Capabilities, col: exp.Expression) -> exp.Expression:
    """``col`` as a double, NaN as NULL (no node) and ``-0.0`` as ``0.0`` (one node)."""
    x = exp.Cast(this=col, to=exp.DataType.build("DOUBLE"))
    zero = exp.Cast(this=exp.Literal.number(0), to=exp.DataType.build("DOUBLE"))
    return exp.Case(
        ifs=[
            exp.If(this=caps.is_nan_test(x.copy()), true=exp.Null()),
            exp.If(this=exp.EQ(this=x.copy(), expression=zero.copy()), true=zero),
        ],
        default=x.copy(),
    )


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(this=identifier(name), table=None if table is None else identifier(table))


def _table(name: str, alias: str | None = None) -> exp.Table:
    t = exp.Table(this=identifier(name))
    if alias is not None:
        t.set("alias", exp.TableAlias(this=identifier(alias)))
    return t


def _alias(e: exp.Expression, name: str) -> exp.Alias:
    return exp.Alias(this=e, alias=identifier(name))


def _int(v: int) -> exp.Expression:
    return exp.Literal.number(v)


def _count() -> exp.Count:
    return exp.Count(this=exp.Star())


def normalised_edges(caps: Capabilities, ends: Ends) -> exp.Select:
    """``SELECT DISTINCT LEAST(a, b) AS u, GREATEST(a, b) AS w FROM table WHERE …``.

    ``a`` and ``b`` are the ends' node identities (:func:`node_id`). Rows with a NULL end
    and self-loops are dropped; both orientations of a pair and duplicates become one edge
    (simple undirected graph).
    """
    a, b = node_id(caps, ends.source, ends.mode), node_id(caps, ends.target, ends.mode)
    where = exp.and_(
        exp.Not(this=exp.Is(this=a.copy(), expression=exp.Null())),
        exp.Not(this=exp.Is(this=b.copy(), expression=exp.Null())),
        exp.NEQ(this=a.copy(), expression=b.copy()),
    )
    return (
        exp.select(
            _alias(exp.Least(this=a.copy(), expressions=[b.copy()]), "u"),
            _alias(exp.Greatest(this=a.copy(), expressions=[b.copy()]), "w"),
        )
        .distinct()
        .from_(_table(ends.table))
        .where(where)
    )


def _with(
    query: exp.Select,
    caps: Capabilities,
    ends: Ends,
    *ctes: tuple[str, exp.Expression],
) -> exp.Select:
    """``WITH __e AS (normalised edges), ctes… query`` (common table expressions in order)."""
    out = query.with_(identifier(EDGES), as_=normalised_edges(caps, ends))
    for name, body in ctes:
        out = out.with_(identifier(name), as_=body)
    return out


def _ends() -> exp.Expression:
    """``SELECT u AS x FROM __e UNION ALL SELECT w AS x FROM __e``: one row per edge end."""
    left = exp.select(_alias(_col("u"), "x")).from_(_table(EDGES))
    right = exp.select(_alias(_col("w"), "x")).from_(_table(EDGES))
    return exp.union(left, right, distinct=False)


def _degrees() -> exp.Select:
    """``SELECT x, COUNT(*) AS d FROM ends GROUP BY x``: the degree of every non-isolated node."""
    return (
        exp.select(_col("x"), _alias(_count(), "d"))
        .from_(exp.Subquery(this=_ends(), alias=exp.TableAlias(this=identifier(ENDS))))
        .group_by(_col("x"))
    )


def render(tree: exp.Expression, caps: Capabilities) -> str:
    """The tree as SQL text of the engine's dialect."""
    return str(tree.sql(dialect=caps.dialect))


def edge_count(caps: Capabilities, ends: Ends) -> exp.Select:
    """``COUNT(*)`` of the normalised edges (one column ``n``)."""
    return _with(exp.select(_alias(_count(), "n")).from_(_table(EDGES)), caps, ends)


def clamped_degree_histogram(caps: Capabilities, ends: Ends, max_degree: int) -> exp.Select:
    """Nodes per clamped degree ``LEAST(degree, D)``: columns ``b`` (1..D) and ``n``."""
    b = exp.Least(this=_col("d"), expressions=[_int(max_degree)])
    q = exp.select(_alias(b, "b"), _alias(_count(), "n")).from_(_table(DEGREES)).group_by(b.copy())
    return _with(q, caps, ends, (DEGREES, _degrees()))


def nodes_with_degree_at_least(caps: Capabilities, ends: Ends, d: int) -> exp.Select:
    """Nodes whose (true) degree is at least ``d`` (one column ``n``)."""
    q = (
        exp.select(_alias(_count(), "n"))
        .from_(_table(DEGREES))
        .where(exp.GTE(this=_col("d"), expression=_int(d)))
    )
    return _with(q, caps, ends, (DEGREES, _degrees()))


def _order_hash(caps: Capabilities, key: int) -> exp.Expression:
    return keyed_hash(caps, key, ["u", "w"])


def triangles_mutual_top_d(caps: Capabilities, ends: Ends, max_degree: int, key: int) -> exp.Select:
    """Triangles of the mutual top-``D`` truncation (one column ``n``).

    Every edge end ranks its node's edges by ``(keyed hash, u, w)``; an edge is kept iff its
    rank is at most ``D`` at both ends; the triangles ``u < w < x`` of the kept edges are
    counted. Edge-level stable (:mod:`deniable.graph.projection`).
    """
    hashed = exp.select(_col("u"), _col("w"), _alias(_order_hash(caps, key), "h")).from_(
        _table(EDGES)
    )
    both = exp.union(
        exp.select(_alias(_col("u"), "x"), _col("u"), _col("w"), _col("h")).from_(_table(HASHED)),
        exp.select(_alias(_col("w"), "x"), _col("u"), _col("w"), _col("h")).from_(_table(HASHED)),
        distinct=False,
    )
    rank = exp.Window(
        this=exp.RowNumber(),
        partition_by=[_col("x")],
        order=exp.Order(
            expressions=[exp.Ordered(this=_col(c)) for c in ("h", "u", "w")],
        ),
    )
    ranked = exp.select(_col("u"), _col("w"), _alias(rank, "r")).from_(
        exp.Subquery(this=both, alias=exp.TableAlias(this=identifier(ENDS)))
    )
    kept = (
        exp.select(_col("u"), _col("w"))
        .from_(_table(RANKED))
        .group_by(_col("u"), _col("w"))
        .having(exp.LTE(this=exp.Max(this=_col("r")), expression=_int(max_degree)))
    )
    e1, e2, e3 = "__k1", "__k2", "__k3"
    q = _close_wedges(
        exp.select(_alias(_count(), "n")),
        (_table(KEPT, e1), _table(KEPT, e2), _table(KEPT, e3)),
        (e1, e2, e3),
        apex="u",
        end="w",
    )
    return _with(q, caps, ends, (HASHED, hashed), (RANKED, ranked), (KEPT, kept))


def edge_ends_by_group(
    caps: Capabilities,
    ends: Ends,
    nodes: str,
    node_key: Column,
    attribute: Column,
    domain: Sequence[object],
) -> exp.Select:
    """Edge ends per declared attribute value: columns ``g`` (its index, BIGINT) and ``n``.

    Each edge counts once at each end whose node has a row in ``nodes``; an edge between two
    nodes of the same group counts twice there. The node table is read one row per key, and
    each node's attribute is matched against the declared ``domain`` in the engine
    (:func:`attribute_groups`): ``g`` is the value's position in ``domain``; ends whose value
    is outside it (NULL, a ``DATE 'infinity'``, a year beyond 9999) are left out. No
    attribute value is converted in Python, whatever its type.
    """
    groups = attribute_groups(caps, nodes, node_key, attribute, domain, ends.mode)
    q = (
        exp.select(_alias(_col("g", NODES), "g"), _alias(_count(), "n"))
        .from_(exp.Subquery(this=_ends(), alias=exp.TableAlias(this=identifier(ENDS))))
        .join(
            exp.Subquery(this=groups, alias=exp.TableAlias(this=identifier(NODES))),
            on=exp.EQ(this=_col("k", NODES), expression=_col("x", ENDS)),
        )
        .where(exp.Not(this=exp.Is(this=_col("g", NODES), expression=exp.Null())))
        .group_by(_col("g", NODES))
    )
    return _with(q, caps, ends)


NUMBERS = "__i"


def _numbers() -> exp.Select:
    """``__i(x, i)``: every node identity ``x`` with a dense number ``i`` (0, 1, …, by ``x``)."""
    both = exp.union(
        exp.select(_alias(_col("u"), "x")).from_(_table(EDGES)),
        exp.select(_alias(_col("w"), "x")).from_(_table(EDGES)),
        distinct=True,
    )
    number = exp.Sub(
        this=exp.Window(
            this=exp.RowNumber(), order=exp.Order(expressions=[exp.Ordered(this=_col("x"))])
        ),
        expression=_int(1),
    )
    return exp.select(_col("x"), _alias(number, "i")).from_(
        exp.Subquery(this=both, alias=exp.TableAlias(this=identifier(ENDS)))
    )


def numbered(ends: Ends) -> bool:
    """Whether the node-level statements number the nodes in the engine (bytes identities).

    Python then receives 64-bit integers, not bytes to factorise (much slower).
    """
    return ends.mode is IdMode.BYTES


def ordered_edges(caps: Capabilities, ends: Ends, key: int) -> exp.Select:
    """The normalised edges ``(u, w)`` in the stable order ``(keyed hash, u, w)``.

    The input of the node-level projection, which is sequential and runs in Python. With
    :func:`numbered` ids, each end is given as its node's number in ``__i`` instead (the
    order is still that of the identities).
    """
    order = (
        exp.Ordered(this=_order_hash(caps, key)),
        exp.Ordered(this=_col("u", EDGES)),
        exp.Ordered(this=_col("w", EDGES)),
    )
    if not numbered(ends):
        q = exp.select(_col("u"), _col("w")).from_(_table(EDGES)).order_by(*order)
        return _with(q, caps, ends)
    iu, iw = "__iu", "__iw"
    q = (
        exp.select(_alias(_col("i", iu), "u"), _alias(_col("i", iw), "w"))
        .from_(_table(EDGES))
        .join(_table(NUMBERS, iu), on=exp.EQ(this=_col("x", iu), expression=_col("u", EDGES)))
        .join(_table(NUMBERS, iw), on=exp.EQ(this=_col("x", iw), expression=_col("w", EDGES)))
        .order_by(*order)
    )
    return _with(q, caps, ends, (NUMBERS, _numbers()))


def numbered_attributes(
    caps: Capabilities,
    ends: Ends,
    nodes: str,
    node_key: Column,
    attribute: Column,
    domain: Sequence[object],
) -> exp.Select:
    """:func:`attribute_groups` keyed by the node numbers of :func:`ordered_edges`.

    Only nodes that are an end of some edge have a number (others have no degree).
    """
    attrs = "__a"
    q = (
        exp.select(_alias(_col("i", NUMBERS), "k"), _alias(_col("g", attrs), "g"))
        .from_(
            exp.Subquery(
                this=attribute_groups(caps, nodes, node_key, attribute, domain, ends.mode),
                alias=exp.TableAlias(this=identifier(attrs)),
            )
        )
        .join(_table(NUMBERS), on=exp.EQ(this=_col("x", NUMBERS), expression=_col("k", attrs)))
    )
    return _with(q, caps, ends, (NUMBERS, _numbers()))


DOMAIN = "__dv"
PER_NODE = "__p"


def attribute_groups(
    caps: Capabilities,
    nodes: str,
    node_key: Column,
    attribute: Column,
    domain: Sequence[object],
    mode: IdMode,
) -> exp.Select:
    """One row per node: ``k`` its identity, ``g`` the index in ``domain`` of its attribute.

    The attribute value (``MIN`` over the node's rows, as :func:`node_attributes`) is matched
    against the declared (public) domain *in the engine* (:func:`domain_literals`): ``g`` is
    the position of the value it equals, or NULL when it equals none (NULL, a value outside
    the domain, a ``DATE 'infinity'`` or a year beyond 9999). Private attribute values never
    leave the engine: what Python receives is an integer below ``len(domain)`` or NULL.
    """
    k = node_id(caps, node_key, mode)
    per_node = (
        exp.select(_alias(k, "k"), _alias(exp.Min(this=_col(attribute.name)), "a"))
        .from_(_table(nodes))
        .where(exp.Not(this=exp.Is(this=k.copy(), expression=exp.Null())))
        .group_by(k.copy())
    )
    literals, nan_index = domain_literals(caps, attribute, domain)
    value = _col("a", PER_NODE)
    group: exp.Expression = exp.Null()
    q = exp.select(_alias(_col("k", PER_NODE), "k")).from_(
        exp.Subquery(this=per_node, alias=exp.TableAlias(this=identifier(PER_NODE)))
    )
    if literals:
        rows = [exp.Tuple(expressions=[lit, _int(i)]) for lit, i in literals]
        values = exp.Values(
            expressions=rows,
            alias=exp.TableAlias(
                this=identifier(DOMAIN), columns=[identifier("v"), identifier("i")]
            ),
        )
        q = q.join(
            values,
            on=exp.EQ(this=match_key(caps, attribute, value.copy()), expression=_col("v", DOMAIN)),
            join_type="left",
        )
        group = _col("i", DOMAIN)
    if nan_index is not None:
        nan = caps.is_nan_test(exp.Cast(this=value.copy(), to=exp.DataType.build("DOUBLE")))
        group = exp.Case(ifs=[exp.If(this=nan, true=_int(nan_index))], default=group)
    # BIGINT even when no declared value can match (g is then NULL, not of the NULL type)
    return q.select(_alias(exp.Cast(this=group, to=exp.DataType.build("BIGINT")), "g"))


def match_key(caps: Capabilities, attribute: Column, value: exp.Expression) -> exp.Expression:
    """The engine expression a node's attribute ``value`` is compared with the literals as.

    Text as its UTF-8 bytes (no collation can make two declared values equal, or a value
    equal a declared one it differs from), other non-standard types (enums, UUIDs…) as the
    bytes of their text, floating-point values as doubles, the rest as they are.
    """
    family = _family(attribute)
    if family == "text":
        return caps.bytes_of(value)
    if family == "other":
        return caps.bytes_of(exp.Cast(this=value, to=exp.DataType.build("VARCHAR")))
    if family == "real":
        return exp.Cast(this=value, to=exp.DataType.build("DOUBLE"))
    return value


def _family(attribute: Column) -> str:
    t = attribute.sql_type.strip().upper()
    base = _base(t)
    kind = attribute.kind
    if kind is ColumnKind.INTEGER:
        return "wide" if base in (*_WIDE_INTEGERS, "UHUGEINT") else "integer"
    if kind is ColumnKind.REAL:
        return "decimal" if base in ("DECIMAL", "NUMERIC") else "real"
    if kind is ColumnKind.TEXT:
        return "text"
    if kind is ColumnKind.BOOLEAN:
        return "boolean"
    if kind is ColumnKind.TEMPORAL:
        if base == "DATE":
            return "date"
        if "TZ" in base or "WITH TIME ZONE" in t:
            return "timestamptz" if base.startswith("TIMESTAMP") else "none"
        if base.startswith(("TIMESTAMP", "DATETIME")):
            return "timestamp"
        if base == "TIME":
            return "time"
        return "none"  # intervals: no declared value is an interval
    return "other"


def domain_literals(
    caps: Capabilities, attribute: Column, domain: Sequence[object]
) -> tuple[list[tuple[exp.Expression, int]], int | None]:
    """The declared values a value of ``attribute`` can equal, as typed engine literals.

    Returns ``([(literal, index)], nan_index)``: each literal is in the representation of
    :func:`match_key` and stands for ``domain[index]``; ``nan_index`` is the index of a
    float NaN in the domain when the attribute is floating-point (every NaN is one group).
    A declared value matches an attribute value when they are equal as Python values
    (``1 == 1.0 == True``, ``Decimal('1.5') == 1.5``; a date never equals a datetime, text
    only text); values no attribute value can equal have no literal. Everything here is
    public: the declared domain and the column's type.
    """
    family = _family(attribute)
    out: list[tuple[exp.Expression, int]] = []
    seen: set[str] = set()
    nan_index: int | None = None
    for i, v in enumerate(domain):
        if family == "real" and isinstance(v, float) and math.isnan(v):
            nan_index = i if nan_index is None else nan_index
            continue
        lit = _literal(caps, attribute, family, v)
        if lit is None:
            continue
        text = lit.sql(dialect=caps.dialect)
        if text not in seen:  # distinct declared values give distinct literals; be sure
            seen.add(text)
            out.append((lit, i))
    return out, nan_index


_DECIMAL_TYPE = re.compile(r"^\s*(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)\s*$", re.I)


def _literal(
    caps: Capabilities, attribute: Column, family: str, v: object
) -> exp.Expression | None:
    """``v`` as a literal of ``family`` (:func:`domain_literals`), or None if nothing equals it."""
    if v is None:
        return None
    number = v if isinstance(v, int | float | decimal.Decimal) else None  # bool is an int
    if family in ("integer", "wide"):
        if number is None or not _integral(number):
            return None
        n = int(number)
        limit = 2**127 if family == "wide" else 2**63
        return exp.Literal.number(n) if -limit <= n < limit else None
    if family == "boolean":
        if number is None or number not in (0, 1):
            return None
        return exp.true() if number == 1 else exp.false()
    if family == "real":
        if number is None:
            return None
        try:
            x = float(number)
        except OverflowError:
            return None
        if math.isnan(x) or x != number:  # Python compares int/Decimal with float exactly
            return None
        text = repr(x) if math.isfinite(x) else ("Infinity" if x > 0 else "-Infinity")
        return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build("DOUBLE"))
    if family == "decimal":
        return None if number is None else _decimal_literal(attribute, number)
    if family in ("text", "other"):
        return caps.bytes_of(exp.Literal.string(v)) if isinstance(v, str) else None
    if family == "date":
        if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime):
            return _typed(v.isoformat(), "DATE")
        return None
    if family in ("timestamp", "timestamptz"):
        if not isinstance(v, datetime.datetime) or (v.tzinfo is None) != (family == "timestamp"):
            return None
        return _typed(v.isoformat(sep=" "), "TIMESTAMP" if family == "timestamp" else "TIMESTAMPTZ")
    if family == "time":
        if isinstance(v, datetime.time) and v.tzinfo is None:
            return _typed(v.isoformat(), "TIME")
        return None
    return None


def _integral(v: int | float | decimal.Decimal) -> bool:
    if isinstance(v, int):
        return True
    if isinstance(v, float):
        return math.isfinite(v) and v.is_integer()
    return v.is_finite() and v == v.to_integral_value()


def _decimal_literal(attribute: Column, v: int | float | decimal.Decimal) -> exp.Expression | None:
    """``v`` cast to the column's DECIMAL type, if that type holds it exactly."""
    d = decimal.Decimal(v)  # exact for floats and ints
    if not d.is_finite():
        return None
    m = _DECIMAL_TYPE.match(attribute.sql_type)
    precision, scale = (int(m.group(1)), int(m.group(2))) if m else (38, 18)
    with decimal.localcontext() as ctx:
        ctx.prec = 200
        quantum = decimal.Decimal(1).scaleb(-scale)
        if d != d.quantize(quantum) or abs(d) >= decimal.Decimal(10) ** (precision - scale):
            return None
        text = format(d.quantize(quantum), "f")
    to = exp.DataType.build(attribute.sql_type if m else "DECIMAL(38, 18)")
    return exp.Cast(this=exp.Literal.number(text), to=to)


def _typed(text: str, sql_type: str) -> exp.Expression:
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build(sql_type))


def node_attributes(
    caps: Capabilities, nodes: str, node_key: Column, attribute: str, mode: IdMode
) -> exp.Select:
    """``SELECT id(key) AS k, MIN(attribute) AS g FROM nodes GROUP BY id(key)``: one row per node.

    ``id`` is the node identity (:func:`node_id`), so keys match the edges' ends. The key is
    unique when the graph is registered; the aggregation keeps one row per node even if the
    source changes afterwards (a deterministic per-node choice).
    """
    k = node_id(caps, node_key, mode)
    return (
        exp.select(_alias(k, "k"), _alias(exp.Min(this=_col(attribute)), "g"))
        .from_(_table(nodes))
        .where(exp.Not(this=exp.Is(this=k.copy(), expression=exp.Null())))
        .group_by(k.copy())
    )


def key_profile(caps: Capabilities, nodes: str, node_key: Column, mode: IdMode) -> exp.Select:
    """Rows, distinct node identities and non-NULL ones of the node table.

    A registration check (:func:`node_id`); nothing is released.
    """
    k = node_id(caps, node_key, mode)
    return exp.select(
        _count(),
        exp.Count(this=exp.Distinct(expressions=[k.copy()])),
        exp.Count(this=k.copy()),
    ).from_(_table(nodes))


def distinct_values(nodes: str, attribute: str) -> exp.Select:
    """Distinct values of a node attribute, ordered (edge level: the node table is public)."""
    c = _col(attribute)
    return exp.select(c).distinct().from_(_table(nodes)).order_by(c.copy())


TRIANGLES = "__t"
HEAVY = "__v"
ORIENTED = "__o"


def _triangle_list() -> exp.Select:
    """Every triangle once, as ``(x, y, z)``: ``x`` its lowest node by ``(degree, id)``.

    Edges are oriented from the end lower in ``(degree, id)`` to the other; a triangle is
    found from its lowest node, which has both other nodes among its out-neighbours, so the
    self-join of the oriented edges is ``O(|E|^1.5)`` rows however skewed the degrees are.
    ``y < z`` by id, and ``(y, z)`` is looked up in the normalised edges.
    """
    du, dw = "__du", "__dw"
    low_first = exp.LTE(this=_col("d", du), expression=_col("d", dw))
    oriented = (
        exp.select(
            _alias(exp.If(this=low_first, true=_col("u", EDGES), false=_col("w", EDGES)), "a"),
            _alias(
                exp.If(this=low_first.copy(), true=_col("w", EDGES), false=_col("u", EDGES)), "b"
            ),
        )
        .from_(_table(EDGES))
        .join(_table(DEGREES, du), on=exp.EQ(this=_col("x", du), expression=_col("u", EDGES)))
        .join(_table(DEGREES, dw), on=exp.EQ(this=_col("x", dw), expression=_col("w", EDGES)))
    )
    o1, o2, e3 = "__o1", "__o2", "__e3"
    return _close_wedges(
        exp.select(
            _alias(_col("a", o1), "x"), _alias(_col("b", o1), "y"), _alias(_col("b", o2), "z")
        ),
        (
            exp.Subquery(this=oriented, alias=exp.TableAlias(this=identifier(o1))),
            exp.Subquery(this=oriented.copy(), alias=exp.TableAlias(this=identifier(o2))),
            _table(EDGES, e3),
        ),
        (o1, o2, e3),
        apex="a",
        end="b",
    )


def _close_wedges(
    select: exp.Select,
    sources: tuple[exp.Expression, exp.Expression, exp.Expression],
    names: tuple[str, str, str],
    *,
    apex: str,
    end: str,
) -> exp.Select:
    """``select`` over the triangles: two edges from one apex, closed by a third edge.

    ``first ⋈ second ON first.apex = second.apex AND first.end < second.end`` (each wedge
    once), then ``⋈ third ON (third.u, third.w) = (first.end, second.end)``; the third
    source holds normalised edges ``u < w``.
    """
    n1, n2, n3 = names
    first, second, third = sources
    return (
        select.from_(first)
        .join(
            second,
            on=exp.and_(
                exp.EQ(this=_col(apex, n1), expression=_col(apex, n2)),
                exp.LT(this=_col(end, n1), expression=_col(end, n2)),
            ),
        )
        .join(
            third,
            on=exp.and_(
                exp.EQ(this=_col("u", n3), expression=_col(end, n1)),
                exp.EQ(this=_col("w", n3), expression=_col(end, n2)),
            ),
        )
    )


def triangle_structure(caps: Capabilities, ends: Ends, cap: int) -> exp.Select:
    """Triangles grouped by their *heavy* nodes: columns ``h1``, ``h2``, ``h3``, ``n``.

    A node is heavy when it lies in more than ``cap`` triangles. Each output row is one
    pattern: ``hᵢ`` is the ``i``-th node of the triangle ``(x, y, z)`` if that node is heavy,
    else NULL, and ``n`` counts the triangles with that pattern. The row of three NULLs counts
    the triangles without a heavy node. This is the whole input of the node-level triangle
    count's linear program (:mod:`deniable.graph.lipschitz`); its size is the number of
    distinct heavy patterns, not the number of triangles.
    """
    per_node = exp.union(
        exp.union(
            exp.select(_alias(_col("x"), "v")).from_(_table(TRIANGLES)),
            exp.select(_alias(_col("y"), "v")).from_(_table(TRIANGLES)),
            distinct=False,
        ),
        exp.select(_alias(_col("z"), "v")).from_(_table(TRIANGLES)),
        distinct=False,
    )
    heavy = (
        exp.select(_col("v"))
        .from_(exp.Subquery(this=per_node, alias=exp.TableAlias(this=identifier(ENDS))))
        .group_by(_col("v"))
        .having(exp.GT(this=_count(), expression=_int(cap)))
    )
    hs = ("__h1", "__h2", "__h3")
    picks = [
        _alias(
            exp.Case(
                ifs=[
                    exp.If(
                        this=exp.Not(this=exp.Is(this=_col("v", h), expression=exp.Null())),
                        true=_col(c, TRIANGLES),
                    )
                ]
            ),
            f"h{i + 1}",
        )
        for i, (h, c) in enumerate(zip(hs, ("x", "y", "z"), strict=True))
    ]
    q = exp.select(*picks, _alias(_count(), "n")).from_(_table(TRIANGLES))
    for h, c in zip(hs, ("x", "y", "z"), strict=True):
        q = q.join(
            _table(HEAVY, h),
            on=exp.EQ(this=_col("v", h), expression=_col(c, TRIANGLES)),
            join_type="left",
        )
    q = q.group_by(*(exp.Literal.number(i) for i in (1, 2, 3)))
    return _with(
        q, caps, ends, (DEGREES, _degrees()), (TRIANGLES, _triangle_list()), (HEAVY, heavy)
    )


def triangle_total(caps: Capabilities, ends: Ends) -> exp.Select:
    """The exact triangle count of the normalised graph (one column ``n``); not a release.

    The same degree-ordered enumeration as :func:`triangle_structure`: the non-private floor
    the benchmarks compare node-level triangle counts with.
    """
    q = exp.select(_alias(_count(), "n")).from_(_table(TRIANGLES))
    return _with(q, caps, ends, (DEGREES, _degrees()), (TRIANGLES, _triangle_list()))

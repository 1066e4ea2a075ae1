"""The catalog: what the curator declared about each table — public metadata only.

A :class:`TableInfo` holds a table's column names and types (read from the engine's schema,
never from its rows), the curator's :class:`TablePolicy` (privacy unit, clamping bounds,
contribution bounds, public group keys) and a data version used by the answer cache. Every
refusal of a query is decided from this metadata and the query text, before any row is read,
so a query can never fail on one dataset and succeed on a neighbouring one.

The privacy unit is always stated by the curator — a column, or :data:`ROW` for row-level
privacy — and a unit column comes with its contribution bounds (``max_groups``,
``max_rows``): nothing that changes what a query computes is a silent default. A binary
floating-point column cannot be a unit (rounding would make one person two).

Privacy units have one canonical form (:func:`canonical_unit`, mirrored in the engine SQL by
:func:`deniable.query.rewrite.compile.canonical_unit_sql`): integer columns compare as
integers (the same as comparing their decimal text), text columns as their Unicode NFC
normalisation — case, spaces and every other character are kept as they are, nothing is
trimmed or folded — and any other type as the text of its ``CAST(... AS VARCHAR)``. One person
therefore cannot pass as two by writing ``'é'`` composed in one row and decomposed in
another. Rows whose privacy unit is NULL are dropped before anything is computed (a NULL
cannot be attributed to one person, and grouping all NULLs into one pseudo-person would
not bound the change that removing one of them makes).
"""

from __future__ import annotations

import difflib
import enum
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sqlglot.expressions import Expression

from deniable.errors import InvalidParameter

MAX_BOUND = Fraction(2**53)
"""Largest magnitude of a clamping bound: values are clamped and scaled in doubles."""

MAX_ROWS = 2**20
"""Largest ``max_rows``: bounded per-partition sums then fit 64-bit integers exactly."""

MAX_PUBLIC_KEYS = 100_000
"""Most values one column's public key domain may list."""


class RowLevel(enum.Enum):
    """The type of :data:`ROW`, the explicit declaration of row-level privacy."""

    ROW = "row"

    def __repr__(self) -> str:
        return "ROW"


ROW: Final = RowLevel.ROW
"""Row-level privacy, stated: ``add_table(..., privacy_unit=ROW)``.

Neighbouring datasets then differ in one row, so the guarantee protects one row — a person
with ``k`` rows is protected only as ``k`` rows are (group privacy: about ``k·ε``). Declare
a privacy-unit column instead whenever one person can have several rows. Exported as
``deniable.ROW``.
"""

UNIT_CHOICE = (
    "privacy_unit='patient_id' (the column that identifies a person: all of a person's rows "
    "are protected together) or privacy_unit=deniable.ROW (each row is its own unit: only "
    "right when no person has two rows)"
)
"""How to state the privacy unit, for error messages (Python spelling)."""

BOUNDS_CHOICE = (
    "declare max_groups (most groups one person may contribute to per query) and max_rows "
    "(most rows one person may contribute to one group), e.g. max_groups=1, max_rows=1 when "
    "each person has one row; they are public choices, never read from the data"
)
"""How to state contribution bounds, for error messages (Python spelling)."""


class ColumnKind(enum.Enum):
    """How deniable treats a column's type."""

    INTEGER = "integer"
    REAL = "real"
    TEXT = "text"
    BOOLEAN = "boolean"
    TEMPORAL = "temporal"
    OTHER = "other"

    @property
    def numeric(self) -> bool:
        """Whether values of this kind can be clamped and summed."""
        return self in (ColumnKind.INTEGER, ColumnKind.REAL)


_INTEGER_TYPES = {
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "INT",
    "BIGINT",
    "HUGEINT",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
    "INT1",
    "INT2",
    "INT4",
    "INT8",
}
_REAL_TYPES = {"FLOAT", "DOUBLE", "REAL", "FLOAT4", "FLOAT8"}
_TEXT_TYPES = {"VARCHAR", "TEXT", "STRING", "CHAR", "BPCHAR"}
_TEMPORAL_PREFIXES = ("DATE", "TIME", "TIMESTAMP", "INTERVAL")


def kind_of(sql_type: str) -> ColumnKind:
    """Classify an engine type name (e.g. ``"BIGINT"``, ``"DECIMAL(10,2)"``).

    Examples:
        >>> kind_of("DECIMAL(18,3)").value
        'real'
    """
    t = sql_type.strip().upper()
    base = t.split("(", 1)[0].strip()
    if base in _INTEGER_TYPES:
        return ColumnKind.INTEGER
    if base in _REAL_TYPES or base in ("DECIMAL", "NUMERIC"):
        return ColumnKind.REAL
    if base in _TEXT_TYPES:
        return ColumnKind.TEXT
    if base in ("BOOLEAN", "BOOL"):
        return ColumnKind.BOOLEAN
    if base.startswith(_TEMPORAL_PREFIXES):
        return ColumnKind.TEMPORAL
    return ColumnKind.OTHER


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a registered table (name, engine type, kind), or a derived one.

    A derived column stands for a row expression computed by the engine (``expr``, a
    sqlglot tree over the generated statement's table aliases): a joined table's column, a
    column of a WITH table or subquery, an aggregate's argument, a grouping expression. Its
    ``name`` is unique per expression (it names the value in the generated statement and in
    caches), never shown to the analyst as a column of the table.
    """

    name: str
    sql_type: str
    kind: ColumnKind
    expr: Expression | None = None


@dataclass(frozen=True, slots=True)
class Bounds:
    """A clamping range ``[lower, upper]`` (exact rationals, ``lower < upper``)."""

    lower: Fraction
    upper: Fraction

    @property
    def midpoint(self) -> Fraction:
        """``(lower + upper) / 2``."""
        return (self.lower + self.upper) / 2

    def as_floats(self) -> tuple[float, float]:
        """The bounds as doubles (exact: they are dyadic or integers below 2^53)."""
        return float(self.lower), float(self.upper)


def make_bounds(value: object, column: str) -> Bounds:
    """Validate a ``(lower, upper)`` pair given by the curator or the analyst.

    Raises:
        InvalidParameter: not a pair of finite numbers with ``lower < upper`` and magnitudes
            at most 2^53.

    Examples:
        >>> make_bounds((0, 6000), "scholarship").upper
        Fraction(6000, 1)
    """
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise InvalidParameter(f"bounds of {column!r} must be a pair (lower, upper)")
    out: list[Fraction] = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float | Fraction):
            raise InvalidParameter(f"bounds of {column!r} must be numbers")
        if isinstance(v, float) and not math.isfinite(v):
            raise InvalidParameter(f"bounds of {column!r} must be finite")
        f = Fraction(v)
        if abs(f) > MAX_BOUND:
            raise InvalidParameter(f"bounds of {column!r} must lie within ±2^53")
        out.append(f)
    if not out[0] < out[1]:
        raise InvalidParameter(f"bounds of {column!r} must satisfy lower < upper")
    return Bounds(out[0], out[1])


@dataclass(frozen=True)
class TablePolicy:
    """The curator's privacy policy for one table.

    Attributes:
        privacy_unit: the column identifying a person (user-level privacy), or None for
            row-level privacy (each row is its own unit; stated as :data:`ROW`).
        bounds: clamping range of each numeric column that may be summed or averaged.
        max_groups: most partitions (groups) one privacy unit may contribute to per query.
        max_rows: most rows one privacy unit may contribute to one partition.
        public_keys: declared domains of group-key columns; their values are public, so every
            one of them is output (empty groups included) and no partition selection is
            needed.
    """

    privacy_unit: str | None
    bounds: Mapping[str, Bounds]
    max_groups: int
    max_rows: int
    public_keys: Mapping[str, tuple[object, ...]]


@dataclass(frozen=True)
class TableInfo:
    """A registered table: name, schema, policy and data version.

    Attributes:
        name: the name analysts use in ``FROM``.
        columns: the schema (names and engine types).
        policy: the curator's :class:`TablePolicy`.
        version: an opaque data version (part of the answer cache's key).
        sample_rate: when queries run on a Bernoulli sample of the table's privacy units,
            its rate ``β`` (they are then charged the amplified loss); None otherwise.
        public: a public table (a lookup table whose content is public, e.g. regions of
            states): private tables may join it; it is never queried on its own.
        unique_keys: the column sets whose values are unique (and never NULL) in a public
            table: a join that equates one of them matches at most one public row, so it
            never multiplies a private row.
        domains: each column's distinct values in a public table (public; used as the
            domain of group keys taken from it), for columns with at most
            ``MAX_PUBLIC_KEYS`` distinct values.
    """

    name: str
    columns: tuple[Column, ...]
    policy: TablePolicy
    version: str
    sample_rate: Fraction | None = None
    public: bool = False
    unique_keys: tuple[tuple[str, ...], ...] = ()
    domains: Mapping[str, tuple[object, ...]] = field(default_factory=dict)

    def lookup(self, name: str) -> Column | None:
        """Find a column by exact name, else by a unique case-insensitive match."""
        for c in self.columns:
            if c.name == name:
                return c
        folded = [c for c in self.columns if c.name.lower() == name.lower()]
        return folded[0] if len(folded) == 1 else None

    def column(self, name: str) -> Column:
        """Like :meth:`lookup`, raising InvalidParameter for an unknown column."""
        c = self.lookup(name)
        if c is None:
            names = [col.name for col in self.columns]
            raise InvalidParameter(
                f"table {self.name!r} has no column {name!r}{near_matches(str(name), names)}"
            )
        return c


def near_matches(name: str, names: Iterable[str]) -> str:
    """``"; did you mean 'age'?"`` for the schema names close to ``name`` (case-blind), or ``""``.

    Column names are schema, never data: they may appear in messages.
    """
    by_lower: dict[str, str] = {}
    for n in names:
        by_lower.setdefault(n.lower(), n)
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    if not close:
        return ""
    shown = " or ".join(repr(by_lower[c]) for c in close)
    return f"; did you mean {shown}?"


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidParameter(f"{what} must be a positive integer")
    return value


def make_policy(
    table: str,
    columns: Iterable[Column],
    *,
    privacy_unit: str | RowLevel | None,
    bounds: Mapping[str, object] | None,
    max_groups: int | None,
    max_rows: int | None,
    public_keys: Mapping[str, Iterable[object]] | None,
) -> TablePolicy:
    """Validate the curator's declarations against the schema and build a :class:`TablePolicy`.

    Nothing that changes what a query computes is chosen silently: with a privacy-unit
    column the curator states ``max_groups`` and ``max_rows``; with :data:`ROW` (or None,
    which internal callers such as public tables use) each row is its own unit and both are
    1 by definition. The unit column must not be a binary floating-point column (its values
    do not identify people reliably: ``0.1 + 0.2`` is not ``0.3``); integers, text, dates,
    decimals and UUIDs are fine.

    Raises:
        InvalidParameter: unknown columns, a floating-point unit column, a unit column
            without ``max_groups``/``max_rows``, bounds on non-numeric columns, a privacy
            unit that is also declared public, or malformed values.

    Examples:
        >>> cols = [Column("pid", "BIGINT", ColumnKind.INTEGER)]
        >>> p = make_policy("t", cols, privacy_unit="pid", bounds=None, max_groups=2,
        ...                 max_rows=3, public_keys=None)
        >>> p.privacy_unit, p.max_groups, p.max_rows
        ('pid', 2, 3)
        >>> make_policy("t", cols, privacy_unit=ROW, bounds=None, max_groups=None,
        ...             max_rows=None, public_keys=None).privacy_unit is None
        True
    """
    info = TableInfo(table, tuple(columns), TablePolicy(None, {}, 1, 1, {}), "")
    unit: str | None = None
    if privacy_unit is not None and privacy_unit is not ROW:
        if not isinstance(privacy_unit, str):
            raise InvalidParameter(f"privacy_unit must be a column name or ROW: {UNIT_CHOICE}")
        col = info.column(privacy_unit)
        if _binary_float(col.sql_type):
            raise InvalidParameter(
                f"the privacy unit {col.name!r} of table {table!r} is a floating-point column "
                f"({col.sql_type}): floats do not identify people reliably (rounding makes one "
                "person two, or two people one); use an integer, text, date, decimal or UUID "
                "column, e.g. CAST the identifier to BIGINT or VARCHAR before registering"
            )
        unit = col.name
    out_bounds: dict[str, Bounds] = {}
    for col_name, pair in (bounds or {}).items():
        col = info.column(col_name)
        if not col.kind.numeric:
            raise InvalidParameter(
                f"bounds can only be declared on numeric columns; {col.name!r} is {col.sql_type}"
            )
        b = make_bounds(pair, col.name)
        if col.kind is ColumnKind.INTEGER:
            b = integer_bounds(b, col.name)
        out_bounds[col.name] = b
    keys: dict[str, tuple[object, ...]] = {}
    for col_name, values in (public_keys or {}).items():
        col = info.column(col_name)
        if col.name == unit:
            raise InvalidParameter("the privacy unit cannot have public keys: it identifies people")
        if isinstance(values, str | bytes) or not isinstance(values, Iterable):
            raise InvalidParameter(f"public_keys[{col_name!r}] must be a list of values")
        vals = tuple(dict.fromkeys(_public_value(v, col) for v in values))
        if not vals:
            raise InvalidParameter(f"public_keys[{col_name!r}] is empty")
        if len(vals) > MAX_PUBLIC_KEYS:
            raise InvalidParameter(f"public_keys[{col_name!r}] lists more than {MAX_PUBLIC_KEYS}")
        keys[col.name] = vals
    if unit is None:
        if max_groups not in (None, 1) or max_rows not in (None, 1):
            raise InvalidParameter(
                "max_groups and max_rows need a privacy_unit: without one each row is its own "
                "unit and contributes one row to one group"
            )
        m, r = 1, 1
    else:
        if max_groups is None or max_rows is None:
            missing = " and ".join(
                n for n, v in (("max_groups", max_groups), ("max_rows", max_rows)) if v is None
            )
            raise InvalidParameter(
                f"table {table!r} has privacy unit {unit!r} but no {missing}: {BOUNDS_CHOICE}"
            )
        m = _positive_int(max_groups, "max_groups")
        r = _positive_int(max_rows, "max_rows")
        if r > MAX_ROWS:
            raise InvalidParameter(f"max_rows must be at most {MAX_ROWS}")
    return TablePolicy(
        privacy_unit=unit,
        bounds=MappingProxyType(out_bounds),
        max_groups=m,
        max_rows=r,
        public_keys=MappingProxyType(keys),
    )


def _binary_float(sql_type: str) -> bool:
    """Whether an engine type is binary floating point (FLOAT, DOUBLE, REAL; not DECIMAL)."""
    base = sql_type.strip().upper().split("(", 1)[0].strip()
    return base in _REAL_TYPES or base == "DOUBLE PRECISION"


def integer_bounds(b: Bounds, column: str) -> Bounds:
    """Tighten bounds of an integer column to integers: ``[ceil(lower), floor(upper)]``."""
    lo, hi = Fraction(math.ceil(b.lower)), Fraction(math.floor(b.upper))
    if not lo < hi:
        raise InvalidParameter(
            f"bounds of integer column {column!r} must contain at least two integers"
        )
    return Bounds(lo, hi)


def _public_value(value: object, col: Column) -> object:
    if value is None:
        return None
    if col.kind is ColumnKind.INTEGER:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidParameter(f"public keys of integer column {col.name!r} must be ints")
        return value
    if col.kind is ColumnKind.REAL:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidParameter(f"public keys of column {col.name!r} must be numbers")
        return value
    if col.kind is ColumnKind.TEXT:
        if not isinstance(value, str):
            raise InvalidParameter(f"public keys of text column {col.name!r} must be strings")
        return value
    if col.kind is ColumnKind.BOOLEAN:
        if not isinstance(value, bool):
            raise InvalidParameter(f"public keys of boolean column {col.name!r} must be bools")
        return value
    raise InvalidParameter(
        f"public keys are supported on integer, real, text and boolean columns; "
        f"{col.name!r} is {col.sql_type}"
    )


def canonical_unit(value: object) -> int | str | None:
    r"""The canonical form of a privacy-unit identifier, as the engine compares it.

    Integers stay integers; strings are NFC-normalised (nothing else: no case folding, no
    trimming); anything else becomes its text. Real numbers are made canonical first, as
    :func:`deniable.query.rewrite.compile.canonical_unit_sql` does in the engine: ``-0.0``
    becomes ``0.0`` (one person, however the zero is spelled) and NaN becomes None — a NaN
    identifies nobody, so its rows are dropped exactly like rows whose unit is NULL. Two
    identifiers denote the same person iff their canonical forms are equal and not None.

    Examples:
        >>> canonical_unit("e\u0301") == canonical_unit("\u00e9")
        True
        >>> canonical_unit(" Bob") == canonical_unit("Bob")
        False
        >>> canonical_unit(-0.0) == canonical_unit(0.0)
        True
        >>> canonical_unit(float("nan")) is None
        True
    """
    import numbers  # (local: this function is the file's only user)

    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, numbers.Real):  # floats, numpy floats (ints were handled above)
        if math.isnan(value):
            return None
        if value == 0:
            value = abs(value)  # -0.0 -> 0.0, keeping the value's type
    return str(value)

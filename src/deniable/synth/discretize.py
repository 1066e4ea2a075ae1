"""Public bins for synthetic data: each column becomes a small integer domain.

Synthetic data is generated over a discrete domain; this module maps each requested column of
a registered table to one, from what the curator declared and nothing else (never from the
data, so that the domain, and every size derived from it, is public):

* a **numeric column with declared bounds** ``[lower, upper]`` gets ``bins`` equal-width
  bins over the range; values are clamped into it first (a value below ``lower`` lands in
  the first bin, above ``upper`` in the last). An integer column keeps integer bins: width
  ``w = ⌈(upper − lower + 1)/bins⌉`` integers, so there may be fewer than ``bins`` of them
  (one per value when the range is small);
* a **column with declared public keys** (text, integer or real without bounds) or a
  **boolean** column (its keys are ``false, true``) gets one cell per key;
* every column gets **one extra last cell**: NULL (and NaN) for numeric columns, "NULL or any
  value not among the keys" for keyed columns. It decodes to NULL.

Or, asked for explicitly in ``bins`` (:mod:`deniable.synth.learn`; measured with DP, charged
within the same release, after its one charge):

* ``Quantiles(n, within=(lo, hi))``: a numeric column gets at most ``n`` bins whose edges are
  DP quantiles, read from a noisy histogram on a public grid over ``within`` (or the declared
  bounds); values outside the range are clamped into the first or last bin;
* ``SelectKeys(max_keys)``: a text or integer column without declared keys gets the keys that
  DP partition selection releases (at most ``max_keys``), the rest going to the last cell.

Until they are measured such columns have a *placeholder* binning (:attr:`Binning.learn` set):
its number of cells is the largest the measurement can give (so every size check before the
charge is public), and its expression has the types of the final one (for the engine's check).

A column without such a declaration is refused (:class:`~deniable.errors.UnsafeQuery`): its
domain would have to come from the data. The binning is a sqlglot expression (the integer
cell index of a row, never NULL) rendered in each engine's dialect; it cannot raise on any
value (the casts it makes apply only to values already clamped into the declared range).

Decoding (:meth:`Discretization.decode`) turns cell indices back into values of the column's
type: a key for keyed columns; for numeric columns a value drawn uniformly within its bin
(integers stay integers), using :mod:`deniable.noise` (post-processing: no privacy cost).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from sqlglot import exp

from deniable.engines.base import SAMPLE_ALIAS, Capabilities
from deniable.errors import InternalError, InvalidParameter, UnsafeQuery
from deniable.noise.source import RandomSource
from deniable.noise.uniform import uniform_below, uniform_int
from deniable.query.catalog import Column, ColumnKind, TableInfo
from deniable.sqlnames import identifier
from deniable.synth.domain import Domain

I64 = npt.NDArray[np.int64]

DEFAULT_BINS = 16
"""Bins of a numeric column when the caller names no other number."""

MAX_BINS = 1024
"""Most bins one numeric column may have."""

MAX_KEYS = 1000
"""Most public keys one keyed column may have in a synthetic table (each is a cell)."""

_T = exp.DataType.Type

GRID = 256
"""Cells of the public grid a DP quantile histogram is measured on (``Quantiles.grid``)."""

LOG_OCTAVES = 20
"""A ``scale="log"`` grid spans this many octaves: its first cell is ``2^-20`` of the range."""

DEFAULT_SELECTED_KEYS = 100
"""Most keys a ``SelectKeys`` column keeps by default."""


@dataclass(frozen=True)
class Quantiles:
    """Ask for DP quantile bins of a numeric column (public parameters; charged in the release).

    Attributes:
        n: most bins (the edges are the noisy ``j/n`` quantiles, ``j = 1 … n − 1``; equal
            edges merge, so there may be fewer).
        within: the public search range ``(lo, hi)``; values outside it are clamped into the
            first or last bin. Default: the column's declared bounds.
        grid: cells of the public grid the quantiles are read from (at most ``MAX_BINS``).
        scale: ``"linear"`` (equal cells) or ``"log"`` (cells growing geometrically from
            ``lo`` over ``LOG_OCTAVES`` octaves: for skewed values such as incomes).

    Examples:
        >>> Quantiles(8, within=(0, 10**7), scale="log")
        Quantiles(n=8, within=(0, 10000000), grid=256, scale='log')
    """

    n: int = DEFAULT_BINS
    within: tuple[float | int | Fraction, float | int | Fraction] | None = None
    grid: int = GRID
    scale: str = "linear"

    def __post_init__(self) -> None:
        for name, value in (("n", self.n), ("grid", self.grid)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidParameter(f"Quantiles.{name} must be an integer")
        if not 1 <= self.n <= MAX_BINS:
            raise InvalidParameter(f"Quantiles.n must be in [1, {MAX_BINS}]")
        if not 2 <= self.grid <= MAX_BINS:
            raise InvalidParameter(f"Quantiles.grid must be in [2, {MAX_BINS}]")
        if self.scale not in ("linear", "log"):
            raise InvalidParameter("Quantiles.scale must be 'linear' or 'log'")
        if self.within is not None:
            lo, hi = _range(self.within)
            if not lo < hi:
                raise InvalidParameter("Quantiles.within must be (lo, hi) with lo < hi")


@dataclass(frozen=True)
class SelectKeys:
    """Ask for a column's keys by DP partition selection (public parameters; charged).

    Attributes:
        max_keys: most keys kept (when more are selected, a uniformly random ``max_keys`` of
            them: post-processing); at most ``MAX_KEYS``.

    Examples:
        >>> SelectKeys(20)
        SelectKeys(max_keys=20)
    """

    max_keys: int = DEFAULT_SELECTED_KEYS

    def __post_init__(self) -> None:
        if isinstance(self.max_keys, bool) or not isinstance(self.max_keys, int):
            raise InvalidParameter("SelectKeys.max_keys must be an integer")
        if not 1 <= self.max_keys <= MAX_KEYS:
            raise InvalidParameter(f"SelectKeys.max_keys must be in [1, {MAX_KEYS}]")


BinSpec = int | Quantiles | SelectKeys
"""What ``bins`` says of one column: equal-width bins, DP quantiles, or DP-selected keys."""


def _range(within: tuple[object, object]) -> tuple[Fraction, Fraction]:
    try:
        lo, hi = within
        out = []
        for v in (lo, hi):
            if isinstance(v, bool) or not isinstance(v, int | float | Fraction):
                raise TypeError
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError
            out.append(Fraction(v))
    except (TypeError, ValueError) as e:
        raise InvalidParameter("Quantiles.within must be two finite numbers (lo, hi)") from e
    return out[0], out[1]


def _int(value: int) -> exp.Expression:
    return exp.Literal.number(value)


def _double(value: Fraction) -> exp.Expression:
    # Through text: the shortest repr round-trips to the same double exactly.
    return exp.Cast(this=exp.Literal.string(repr(float(value))), to=exp.DataType.build(_T.DOUBLE))


def _bigint(e: exp.Expression) -> exp.Expression:
    return exp.Cast(this=e, to=exp.DataType.build(_T.BIGINT))


def _case(
    whens: Sequence[tuple[exp.Expression, exp.Expression]], default: exp.Expression
) -> exp.Case:
    return exp.Case(ifs=[exp.If(this=c, true=v) for c, v in whens], default=default)


def _literal(value: object) -> exp.Expression:
    if isinstance(value, float):
        return _double(Fraction(value))
    converted = exp.convert(value)
    assert isinstance(converted, exp.Expression)
    return converted


@dataclass(frozen=True)
class Binning:
    """How one column becomes cells ``0 … cells − 1`` (the last is NULL / other).

    Three forms: equal-width bins over ``[lower, upper]`` (``width`` set), bins between
    explicit ``edges`` inside ``[lower, upper]`` (``width`` None; DP quantile bins and their
    public grid), or one cell per key (``lower`` None).

    Attributes:
        column: the column as registered.
        cells: the number of cells, the NULL/other cell included.
        lower: numeric binning: the clamping range's lower end.
        upper: numeric binning: the clamping range's upper end.
        width: equal-width binning: the width of a bin (an integer for integer columns).
        keys: keyed binning: the key of each cell but the last, in declared order.
        edges: edge binning: the inner edges, strictly increasing inside ``(lower, upper)``;
            bin ``i`` holds ``[e_i, e_{i+1})`` with ``e_0 = lower`` and the last bin ends at
            ``upper`` (integers for integer columns).
        learn: a placeholder to be measured with DP (``Quantiles`` or ``SelectKeys``): its
            ``cells`` is the most the measurement can give; it is never decoded.
    """

    column: Column
    cells: int
    lower: Fraction | None = None
    upper: Fraction | None = None
    width: Fraction | None = None
    keys: tuple[object, ...] = ()
    edges: tuple[Fraction, ...] = ()
    learn: Quantiles | SelectKeys | None = None

    @property
    def numeric(self) -> bool:
        """Whether this bins a numeric range (equal-width or edges; else keyed)."""
        return self.lower is not None

    @property
    def null_cell(self) -> int:
        """The cell of NULL (and, for keyed columns, of values not among the keys)."""
        return self.cells - 1

    def _checked_form(self) -> Binning:
        """The binning whose expression the engine checks (a placeholder: dummy values).

        The dummy literals have the final form's types; the check reads no row.
        """
        if self.learn is None:
            return self
        if isinstance(self.learn, SelectKeys):
            dummy: object = 0 if self.column.kind is ColumnKind.INTEGER else ""
            return Binning(self.column, 2, keys=(dummy,))
        assert self.lower is not None and self.upper is not None
        middle = (self.lower + self.upper) / 2
        if self.column.kind is ColumnKind.INTEGER:
            middle = Fraction(math.floor(middle))
        return Binning(self.column, 3, self.lower, self.upper, edges=(middle,))

    def expression(self, caps: Capabilities) -> exp.Expression:
        """The cell index of the row's value, a BIGINT never NULL, over alias ``__t``.

        No branch can raise: values are compared with literals before any cast, and the
        only casts apply to values clamped into the declared range (or are casts to DOUBLE).
        A placeholder gives an expression of the same form and types (dummy literals).
        """
        if self.learn is not None:
            return self._checked_form().expression(caps)
        col = exp.Column(this=identifier(self.column.name), table=exp.to_identifier(SAMPLE_ALIAS))
        null = _int(self.null_cell)
        if not self.numeric:
            if not self.keys:  # no key selected: every value is "NULL or other"
                return _bigint(null)
            whens: list[tuple[exp.Expression, exp.Expression]] = []
            for i, key in enumerate(self.keys):
                if key is None:
                    test: exp.Expression = exp.Is(this=col.copy(), expression=exp.Null())
                else:
                    test = exp.EQ(this=col.copy(), expression=_literal(key))
                whens.append((test, _int(i)))
            return _bigint(_case(whens, null))
        assert self.lower is not None and self.upper is not None
        if self.width is None:
            return self._edge_expression(caps, col)
        top = _int(self.null_cell - 1)
        if self.column.kind is ColumnKind.INTEGER:
            lo, hi = int(self.lower), int(self.upper)
            offset = exp.Sub(this=_bigint(col.copy()), expression=_int(lo))
            inside = exp.IntDiv(this=exp.Paren(this=offset), expression=_int(int(self.width)))
            return _bigint(
                _case(
                    [
                        (exp.Is(this=col.copy(), expression=exp.Null()), null),
                        (exp.LTE(this=col.copy(), expression=_int(lo)), _int(0)),
                        (exp.GTE(this=col.copy(), expression=_int(hi)), top),
                    ],
                    _bigint(inside),
                )
            )
        x = exp.Cast(this=col, to=exp.DataType.build(_T.DOUBLE))
        shifted = exp.Sub(this=x.copy(), expression=_double(self.lower))
        scaled = exp.Div(this=exp.Paren(this=shifted), expression=_double(self.width))
        inside_bin = exp.Least(this=_bigint(exp.Floor(this=scaled)), expressions=[top.copy()])
        return _bigint(
            _case(
                [
                    (exp.Is(this=x.copy(), expression=exp.Null()), null),
                    (caps.is_nan_test(x.copy()), null.copy()),
                    (exp.LTE(this=x.copy(), expression=_double(self.lower)), _int(0)),
                    (exp.GTE(this=x.copy(), expression=_double(self.upper)), top),
                ],
                inside_bin,
            )
        )

    def _edge_expression(self, caps: Capabilities, col: exp.Column) -> exp.Expression:
        """Bins between edges: a balanced tree of comparisons (depth ``log2`` of the bins).

        Integers are compared with integer literals, reals as DOUBLE with NaN first; every
        value (±∞, beyond the range) lands in a bin, NULL and NaN in the last cell.
        """
        integer = self.column.kind is ColumnKind.INTEGER
        x: exp.Expression = col if integer else exp.Cast(this=col, to=exp.DataType.build(_T.DOUBLE))

        def lit(e: Fraction) -> exp.Expression:
            return _int(int(e)) if integer else _double(e)

        def tree(low: int, high: int) -> exp.Expression:  # bins low … high − 1
            if high - low == 1:
                return _int(low)
            mid = (low + high) // 2  # edge mid separates bin mid − 1 from bin mid
            test = exp.LT(this=x.copy(), expression=lit(self.edges[mid - 1]))
            return _case([(test, tree(low, mid))], tree(mid, high))

        null = _int(self.null_cell)
        whens: list[tuple[exp.Expression, exp.Expression]] = [
            (exp.Is(this=x.copy(), expression=exp.Null()), null)
        ]
        if not integer:
            whens.append((caps.is_nan_test(x.copy()), null.copy()))
        return _bigint(_case(whens, tree(0, len(self.edges) + 1)))

    def label(self, cell: int) -> str:
        """A readable name of a cell (a bin's range, a key, or NULL/other): public."""
        if cell == self.null_cell:
            return "NULL" if self.numeric else "NULL or other"
        if not self.numeric:
            return repr(self.keys[cell])
        low, high = self.bin_range(cell)
        if self.column.kind is ColumnKind.INTEGER:
            return f"[{int(low)}, {int(high)}]"
        return f"[{float(low):g}, {float(high):g}{']' if cell == self.null_cell - 1 else ')'}"

    def bin_range(self, cell: int) -> tuple[Fraction, Fraction]:
        """A numeric bin's values: ``[low, high]`` for integers, ``[low, high)`` for reals."""
        assert self.lower is not None and self.upper is not None
        integer = self.column.kind is ColumnKind.INTEGER
        if self.width is None:
            ends = (self.lower, *self.edges, self.upper)
            low, high = ends[cell], ends[cell + 1]
            last = cell == len(self.edges)
            return low, (high if last or not integer else high - 1)
        low = self.lower + cell * self.width
        if integer:
            return low, min(low + self.width - 1, self.upper)
        return low, min(low + self.width, self.upper)

    def decode(self, cells: I64, source: RandomSource | None = None) -> pa.Array:
        """Values of the column's type for cell indices (post-processing, no privacy cost).

        Keys for keyed columns; for numeric bins a value drawn uniformly within the bin
        (integers: each integer of the bin equally likely; reals: a uniform 53-bit grid
        over ``[low, high)``); NULL for the last cell.
        """
        if self.learn is not None:
            raise InternalError("a placeholder binning is measured before it is decoded")
        cells = np.asarray(cells, dtype=np.int64)
        null = cells == self.null_cell
        if not self.numeric:
            values = pa.array([*self.keys, None], type=_arrow_type(self.column))
            return values.take(pa.array(np.clip(cells, 0, self.null_cell)))
        safe = np.where(null, 0, cells)
        ranges = [self.bin_range(c) for c in range(self.null_cell)] or [(Fraction(0),) * 2]
        if self.column.kind is ColumnKind.INTEGER:
            lows = np.array([int(r[0]) for r in ranges])
            highs = np.array([int(r[1]) for r in ranges])
            span = (highs - lows + 1)[safe]
            drawn = lows[safe] + uniform_below(span, source=source)
            return pa.array(drawn, type=pa.int64(), mask=null)
        assert self.upper is not None
        lows_r = np.array([float(r[0]) for r in ranges])
        highs_r = np.array([float(r[1]) for r in ranges])
        unit = uniform_int(2**53, cells.size, source=source).astype(np.float64) / 2.0**53
        low = lows_r[safe]
        drawn_real = np.minimum(low + unit * (highs_r[safe] - low), float(self.upper))
        return pa.array(drawn_real, type=pa.float64(), mask=null)


def _arrow_type(column: Column) -> pa.DataType:
    if column.kind is ColumnKind.INTEGER:
        return pa.int64()
    if column.kind is ColumnKind.REAL:
        return pa.float64()
    if column.kind is ColumnKind.BOOLEAN:
        return pa.bool_()
    return pa.string()


@dataclass(frozen=True)
class Discretization:
    """The binning of every requested column, in the order requested: a public domain."""

    binnings: tuple[Binning, ...]

    @property
    def names(self) -> tuple[str, ...]:
        """The columns, in order."""
        return tuple(b.column.name for b in self.binnings)

    @property
    def domain(self) -> Domain:
        """The discrete domain: one attribute per column, its number of cells."""
        return Domain(self.names, tuple(b.cells for b in self.binnings))

    def binning(self, name: str) -> Binning:
        """The binning of column ``name``."""
        for b in self.binnings:
            if b.column.name == name:
                return b
        raise InvalidParameter(f"column {name!r} is not part of this discretization")

    def decode(self, cells: I64, source: RandomSource | None = None) -> pa.Table:
        """A table of values from a ``(rows, columns)`` array of cell indices."""
        cells = np.asarray(cells, dtype=np.int64).reshape(-1, len(self.binnings))
        arrays = [b.decode(cells[:, j], source) for j, b in enumerate(self.binnings)]
        return pa.Table.from_arrays(arrays, names=list(self.names))

    @property
    def pending(self) -> tuple[Binning, ...]:
        """The placeholder binnings still to be measured with DP, in column order."""
        return tuple(b for b in self.binnings if b.learn is not None)

    def replace(self, learned: Mapping[str, Binning]) -> Discretization:
        """This discretization with the named columns' binnings replaced (measured ones)."""
        return Discretization(tuple(learned.get(b.column.name, b) for b in self.binnings))

    def describe(self) -> list[dict[str, object]]:
        """Public description of each column's cells (for the ledger and the report)."""
        out: list[dict[str, object]] = []
        for b in self.binnings:
            entry: dict[str, object] = {"column": b.column.name, "cells": b.cells}
            if isinstance(b.learn, Quantiles):
                entry.update(
                    quantiles=b.learn.n,
                    lower=str(b.lower),
                    upper=str(b.upper),
                    grid=b.learn.grid,
                    scale=b.learn.scale,
                    most_cells=True,
                    null_cell=True,
                )
            elif isinstance(b.learn, SelectKeys):
                entry.update(selected_keys=b.learn.max_keys, most_cells=True)
                entry.update(other_or_null_cell=True)
            elif b.numeric and b.width is None:
                entry.update(
                    lower=str(b.lower),
                    upper=str(b.upper),
                    # As the engine compares them: doubles (integers for integer columns).
                    edges=[str(int(e)) if e.denominator == 1 else repr(float(e)) for e in b.edges],
                    null_cell=True,
                )
            elif b.numeric:
                entry.update(
                    lower=str(b.lower), upper=str(b.upper), width=str(b.width), null_cell=True
                )
            else:
                entry.update(keys=len(b.keys), other_or_null_cell=True)
            out.append(entry)
        return out


def discretize(
    info: TableInfo,
    columns: Sequence[str] | None = None,
    bins: int | Mapping[str, BinSpec] = DEFAULT_BINS,
) -> Discretization:
    """The public binning of ``columns`` of a registered table (all but the unit by default).

    Reads the catalog only (declared bounds and public keys), never the data. Columns asked
    for with ``Quantiles`` or ``SelectKeys`` get placeholders (:attr:`Binning.learn`) of their
    most cells, measured later by :mod:`deniable.synth.learn`.

    Args:
        info: the table's catalog entry.
        columns: the columns of the synthetic table (default: every column but the privacy
            unit).
        bins: bins of each numeric column (one number, or one per column name; public); per
            column also ``Quantiles(...)`` (DP quantile bins) or ``SelectKeys(...)`` (keys by
            DP partition selection).

    Raises:
        InvalidParameter: an unknown or repeated column, the privacy unit column, a number of
            bins that is not an integer in ``[1, MAX_BINS]``, more than ``MAX_KEYS`` keys.
        UnsafeQuery: a numeric column without declared bounds, keys or ``Quantiles(within=)``,
            a text or other column without declared keys or ``SelectKeys``: its domain would
            come from the data.

    Examples:
        >>> from deniable.query.catalog import make_policy
        >>> cols = (Column("age", "BIGINT", ColumnKind.INTEGER),
        ...         Column("sex", "VARCHAR", ColumnKind.TEXT))
        >>> policy = make_policy("p", cols, privacy_unit=None, bounds={"age": (0, 99)},
        ...                      max_groups=None, max_rows=None, public_keys={"sex": ["F", "M"]})
        >>> d = discretize(TableInfo("p", cols, policy, "v"), bins=10)
        >>> d.domain
        Domain(names=('age', 'sex'), sizes=(11, 3))
    """
    policy = info.policy
    if columns is None:
        names = [c.name for c in info.columns if c.name != policy.privacy_unit]
    else:
        if isinstance(columns, str):
            raise InvalidParameter("columns must be a list of column names, not one string")
        names = [info.column(c).name for c in columns]
    if not names:
        raise InvalidParameter("a synthetic table needs at least one column")
    if len(set(names)) != len(names):
        raise InvalidParameter("columns lists a column twice")
    if isinstance(bins, Mapping):
        unknown = [k for k in bins if k not in names]
        if unknown:
            raise InvalidParameter(
                f"bins names {unknown[0]!r}, which is not a column of the synthetic table"
            )
    out = []
    for name in names:
        if name == policy.privacy_unit:
            raise InvalidParameter(
                f"{name!r} is the privacy unit: it identifies people, so it cannot be a column "
                "of the synthetic table"
            )
        out.append(_binning(info, info.column(name), _bins_of(bins, name)))
    return Discretization(tuple(out))


def _bins_of(bins: int | Mapping[str, BinSpec], name: str) -> BinSpec:
    value = bins.get(name, DEFAULT_BINS) if isinstance(bins, Mapping) else bins
    if isinstance(value, Quantiles | SelectKeys):
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BINS:
        raise InvalidParameter(
            f"bins must be an integer in [1, {MAX_BINS}], Quantiles(...) or SelectKeys(...) "
            f"(column {name!r})"
        )
    return value


def _quantile_placeholder(info: TableInfo, column: Column, spec: Quantiles) -> Binning:
    if not column.kind.numeric:
        raise InvalidParameter(
            f"Quantiles bins need a numeric column; {column.name!r} is {column.sql_type}"
        )
    bounds = info.policy.bounds.get(column.name)
    if spec.within is not None:
        lower, upper = _range(spec.within)
    elif bounds is not None:
        lower, upper = bounds.lower, bounds.upper
    else:
        raise UnsafeQuery(
            f"numeric column {column.name!r} has no declared bounds: give Quantiles a public "
            f"search range (bins={{{column.name!r}: Quantiles(n, within=(lo, hi))}}) or "
            "declare its bounds"
        )
    if column.kind is ColumnKind.INTEGER:
        lower, upper = Fraction(math.ceil(lower)), Fraction(math.floor(upper))
        if lower >= upper:
            raise InvalidParameter(
                f"Quantiles.within of integer column {column.name!r} holds fewer than two integers"
            )
    return Binning(column, spec.n + 1, lower, upper, learn=spec)


def _binning(info: TableInfo, column: Column, bins: BinSpec) -> Binning:
    policy = info.policy
    bounds = policy.bounds.get(column.name)
    if isinstance(bins, Quantiles):
        return _quantile_placeholder(info, column, bins)
    if isinstance(bins, SelectKeys):
        if column.kind not in (ColumnKind.TEXT, ColumnKind.INTEGER):
            raise InvalidParameter(
                f"SelectKeys selects keys of text or integer columns; {column.name!r} is "
                f"{column.sql_type} (use Quantiles for real numbers, or declare its keys)"
            )
        return Binning(column, bins.max_keys + 1, learn=bins)
    if column.kind.numeric and bounds is not None:
        lower, upper = bounds.lower, bounds.upper
        if column.kind is ColumnKind.INTEGER:
            span = int(upper - lower) + 1
            width = -(-span // bins)
            return Binning(column, -(-span // width) + 1, lower, upper, Fraction(width))
        return Binning(column, bins + 1, lower, upper, (upper - lower) / bins)
    keys = policy.public_keys.get(column.name)
    if keys is None and column.kind is ColumnKind.BOOLEAN:
        keys = (False, True)
    if keys is None:
        if column.kind.numeric:
            raise UnsafeQuery(
                f"numeric column {column.name!r} has no declared bounds: declare them "
                f"(add_table(..., bounds={{{column.name!r}: (lower, upper)}})) so that its "
                f"bins are public, ask for DP quantile bins over a public range "
                f"(bins={{{column.name!r}: Quantiles(n, within=(lo, hi))}}), or leave the "
                "column out"
            )
        raise UnsafeQuery(
            f"column {column.name!r} ({column.sql_type}) has no declared domain: declare its "
            f"values (add_table(..., public_keys={{{column.name!r}: [...]}})) so that its cells "
            f"are public, select them with DP (bins={{{column.name!r}: SelectKeys()}}, needs "
            "δ > 0), or leave the column out"
        )
    if len(keys) > MAX_KEYS:
        raise InvalidParameter(
            f"column {column.name!r} has {len(keys)} public keys; a synthetic table takes at "
            f"most {MAX_KEYS} per column (too many cells)"
        )
    return Binning(column, len(keys) + 1, keys=tuple(keys))


def cells_of(domain: Domain, cliques: Sequence[Sequence[str]]) -> int:
    """Total cells of the marginals on ``cliques`` (public)."""
    return sum(math.prod(domain.shape(c)) for c in cliques)

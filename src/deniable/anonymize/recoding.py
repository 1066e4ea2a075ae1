"""Generalisation hierarchies and recodings, declared as data and compiled to DuckDB SQL.

A *hierarchy* says how one column can be coarsened: level 0 is the raw value, the last
level is ``'*'`` (the column suppressed), and the levels in between are declared:

* :class:`Interval` — numeric bands (age → 10-year bands → 20-year bands);
* :class:`Prefix` — keep the first digits (ZIP 47906 → ``479**`` → ``4****``);
* :class:`DateParts` — day → month → quarter → year → decade;
* :class:`Categorical` — value → group → super-group maps;
* :class:`Identity` — raw or ``'*'`` only.

Each hierarchy declares its *domain* (a numeric range, a length and alphabet, a date range,
the list of categories); a value outside the domain is *not covered* and makes the
anonymizer refuse before anything is published. A recoding is a hierarchy and a level per
column; it is a fixed, data-independent function of a row, which is what Theorem 3.9 needs.
NULL stays NULL at every level but ``'*'`` (it is a value of its own).

Recodings are written in YAML or JSON (or built in Python)::

    columns:
      age:   {type: interval, lower: 0, upper: 120, widths: [10, 20], level: 1}
      zip:   {type: prefix, length: 5, keep: [3, 1], level: 1}
      admitted: {type: date, lower: 2000-01-01, upper: 2030-01-01,
                 levels: [month, year], level: year}
      diagnosis:
        type: categorical
        maps:
          - {flu: respiratory, asthma: respiratory, fracture: injury}
          - {respiratory: illness, injury: illness}
        level: 1
        candidates: [0, 1, 2]      # the levels the ε-safe selection may choose from

``level`` is an index (0 = raw), ``'*'``, or a level's name; ``candidates`` defaults to
every level. Published values are text (VARCHAR).

Information loss uses Iyengar's Loss Metric: a published value standing for ``m`` of the
``M`` domain values loses ``(m − 1)/(M − 1)`` (for numeric bands, the band's length over the
domain's); the raw level loses 0 and ``'*'`` loses 1.
"""

from __future__ import annotations

import calendar
import datetime as dt
import itertools
import json
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

import yaml

from deniable.errors import InvalidParameter
from deniable.sqlnames import quote_identifier, quote_literal

SUPPRESSED = "*"
_CASE_BANDS = 128  # up to this many bands, labels come from a CASE (binding cost grows)


class RecodingError(InvalidParameter):
    """The recoding is malformed or does not fit the table."""


class UnknownColumn(RecodingError):
    """The recoding names a column that the table does not have."""


class UncoveredValue(RecodingError):  # kept for callers; the release path no longer raises it
    """A value of the table lies outside its hierarchy's declared domain."""


class Hierarchy(ABC):
    """How one column can be generalised; level 0 is raw, level :attr:`top` is ``'*'``."""

    kind: ClassVar[str]

    @property
    @abstractmethod
    def level_names(self) -> tuple[str, ...]:
        """Names of every level, from ``'raw'`` (0) to ``'*'`` (top)."""

    @property
    def top(self) -> int:
        """Index of the ``'*'`` level."""
        return len(self.level_names) - 1

    def level_index(self, level: int | str) -> int:
        """Resolve a level given as an index, ``'*'``, or a name; raise if unknown."""
        if isinstance(level, bool):
            raise RecodingError(f"a {self.kind} level must be an index or a name, not a bool")
        if isinstance(level, int):
            if 0 <= level <= self.top:
                return level
            raise RecodingError(f"a {self.kind} hierarchy has levels 0..{self.top}, got {level}")
        names = self.level_names
        if level in names:
            return names.index(level)
        raise RecodingError(f"unknown {self.kind} level {level!r}; levels are {list(names)}")

    def sql(self, column: str, level: int) -> str:
        """A DuckDB VARCHAR expression giving the column's value at ``level``; total.

        At an intermediate level a value outside the hierarchy's domain (or of the wrong
        type) is published as ``'*'``, the top level: the recoding stays a fixed function
        of every possible value, and no value can make the release fail (a refusal that
        depended on whether some row lies outside the domain would tell that for free).
        """
        col = quote_identifier(column)
        if level == self.top:
            return quote_literal(SUPPRESSED)
        if level == 0:
            return self._raw_sql(col)
        return (
            f"(CASE WHEN {self.covered_sql(column)} THEN {self._level_sql(col, level)} "
            f"ELSE {quote_literal(SUPPRESSED)} END)"
        )

    def _raw_sql(self, col: str) -> str:
        return f"CAST({col} AS VARCHAR)"

    @abstractmethod
    def _level_sql(self, col: str, level: int) -> str:
        """The expression of an intermediate level (``0 < level < top``)."""

    @abstractmethod
    def covered_sql(self, column: str) -> str:
        """A DuckDB boolean that is TRUE when the value is NULL or inside the domain."""

    def level_loss(self, level: int) -> Fraction:
        """The Loss Metric of ``level`` averaged uniformly over the domain (exact, in [0, 1]).

        Data-independent: used by the ε-safe selection's utility score.
        """
        if level == 0:
            return Fraction(0)
        if level == self.top:
            return Fraction(1)
        return self._level_loss(level)

    @abstractmethod
    def _level_loss(self, level: int) -> Fraction: ...

    def label_loss(self, level: int, label: str | None) -> float:
        """The Loss Metric of one published value at ``level`` (NULL loses nothing)."""
        if label is None or level == 0:
            return 0.0
        if level == self.top:
            return 1.0
        return self._label_loss(level, label)

    @abstractmethod
    def _label_loss(self, level: int, label: str) -> float: ...


# --------------------------------------------------------------------------- hierarchies


@dataclass(frozen=True)
class Identity(Hierarchy):
    """Raw value or ``'*'``; every value is covered.

    Examples:
        >>> Identity().level_names
        ('raw', '*')
    """

    kind: ClassVar[str] = "identity"

    @property
    def level_names(self) -> tuple[str, ...]:
        """``('raw', '*')``."""
        return ("raw", SUPPRESSED)

    def _level_sql(self, col: str, level: int) -> str:  # pragma: no cover - no such level
        raise AssertionError("identity has no intermediate level")

    def covered_sql(self, column: str) -> str:
        """Always TRUE."""
        return "TRUE"

    def _level_loss(self, level: int) -> Fraction:  # pragma: no cover - no such level
        raise AssertionError("identity has no intermediate level")

    def _label_loss(self, level: int, label: str) -> float:  # pragma: no cover
        raise AssertionError("identity has no intermediate level")


@dataclass(frozen=True)
class Interval(Hierarchy):
    """Numeric bands ``[lower + i·w, lower + (i + 1)·w)`` of each width, domain ``[lower, upper)``.

    Widths must grow and each must be a multiple of the previous one, so bands nest.
    Values are read as numbers (text is cast); a value that is not a number is not covered.
    Band boundaries are computed in double precision.

    Examples:
        >>> h = Interval(lower=0, upper=120, widths=(10, 20))
        >>> h.level_names
        ('raw', 'width 10', 'width 20', '*')
        >>> float(h.level_loss(1))
        0.08333333333333333
    """

    lower: Fraction | int | float | str
    upper: Fraction | int | float | str
    widths: tuple[Fraction | int | float | str, ...]
    kind: ClassVar[str] = "interval"

    def __post_init__(self) -> None:
        lo, hi = _number(self.lower, "lower"), _number(self.upper, "upper")
        ws = tuple(_number(w, "width") for w in self.widths)
        if not lo < hi:
            raise RecodingError("an interval hierarchy needs lower < upper")
        if any(w <= 0 for w in ws):
            raise RecodingError("interval widths must be > 0")
        for a, b in itertools.pairwise(ws):
            if not (b > a and (b / a).denominator == 1):
                raise RecodingError(
                    "interval widths must grow and each be a multiple of the previous one "
                    f"(so bands nest); got {[_fmt(w) for w in ws]}"
                )
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        object.__setattr__(self, "widths", ws)

    @property
    def _lo(self) -> Fraction:
        return Fraction(self.lower)

    @property
    def _hi(self) -> Fraction:
        return Fraction(self.upper)

    @property
    def level_names(self) -> tuple[str, ...]:
        """``raw``, ``width w`` for each width, ``*``."""
        return ("raw", *(f"width {_fmt(Fraction(w))}" for w in self.widths), SUPPRESSED)

    def _places(self) -> int:
        return max(_decimal_places(Fraction(x)) for x in (self._lo, self._hi, *self.widths))

    def _level_sql(self, col: str, level: int) -> str:
        w = Fraction(self.widths[level - 1])
        lo, hi, places = self._lo, self._hi, self._places()
        v = f"TRY_CAST({col} AS DOUBLE)"
        idx = f"CAST(floor(({v} - {float(lo)!r}) / {float(w)!r}) AS BIGINT)"
        count = math.ceil((hi - lo) / w)
        if count <= _CASE_BANDS:  # a CASE on the band index is ~5× faster than arithmetic
            branches = " ".join(
                f"WHEN {i} THEN "
                + quote_literal(
                    f"[{_fixed(lo + i * w, places)}, {_fixed(min(lo + (i + 1) * w, hi), places)})"
                )
                for i in range(count)
            )
            return f"(CASE {idx} {branches} END)"
        typ = "BIGINT" if places == 0 else f"DECIMAL(38, {places})"
        start = f"(CAST({_fmt(lo)} AS {typ}) + {idx} * CAST({_fmt(w)} AS {typ}))"
        end = f"least({start} + CAST({_fmt(w)} AS {typ}), CAST({_fmt(hi)} AS {typ}))"
        return f"('[' || CAST({start} AS VARCHAR) || ', ' || CAST({end} AS VARCHAR) || ')')"

    def covered_sql(self, column: str) -> str:
        """NULL, or a number in ``[lower, upper)``."""
        col = quote_identifier(column)
        v = f"TRY_CAST({col} AS DOUBLE)"
        return (
            f"({col} IS NULL OR ({v} IS NOT NULL AND {v} >= {float(self._lo)!r}"
            f" AND {v} < {float(self._hi)!r}))"
        )

    def _bands(self, w: Fraction) -> list[Fraction]:
        lo, hi = self._lo, self._hi
        count = math.ceil((hi - lo) / w)
        return [min(w, hi - (lo + i * w)) for i in range(count)]

    def _level_loss(self, level: int) -> Fraction:
        span = self._hi - self._lo
        w = Fraction(self.widths[level - 1])
        if math.ceil(span / w) > 1_000_000:  # closed form when bands are many: full bands
            return min(w / span, Fraction(1))
        return sum((b * b for b in self._bands(w)), Fraction(0)) / (span * span)

    def _label_loss(self, level: int, label: str) -> float:
        m = re.fullmatch(r"\[(.+), (.+)\)", label)
        if m is None:  # pragma: no cover - labels are produced by _level_sql
            return float(self._level_loss(level))
        a, b = Fraction(m.group(1)), Fraction(m.group(2))
        return float((b - a) / (self._hi - self._lo))


@dataclass(frozen=True)
class Prefix(Hierarchy):
    """Keep the first characters of a fixed-length code: ``47906`` → ``479**`` → ``4****``.

    The domain is every string of ``length`` characters from ``alphabet`` (digits by default);
    read codes as text (a CSV read with types guessed loses leading zeros).

    Examples:
        >>> h = Prefix(length=5, keep=(3, 1))
        >>> h.level_names
        ('raw', 'keep 3', 'keep 1', '*')
        >>> h.level_loss(1)
        Fraction(11, 11111)
    """

    length: int
    keep: tuple[int, ...]
    alphabet: str = "0123456789"
    kind: ClassVar[str] = "prefix"

    def __post_init__(self) -> None:
        if not isinstance(self.length, int) or self.length < 1:
            raise RecodingError("a prefix hierarchy needs length ≥ 1")
        keep = tuple(self.keep)
        if any(not isinstance(p, int) or not 0 <= p < self.length for p in keep):
            raise RecodingError(f"prefix keep values must be integers in [0, {self.length})")
        if any(b >= a for a, b in itertools.pairwise(keep)):
            raise RecodingError("prefix keep values must decrease (coarser levels keep less)")
        if len(set(self.alphabet)) != len(self.alphabet) or not self.alphabet:
            raise RecodingError(
                "a prefix alphabet must be a non-empty string of distinct characters"
            )
        object.__setattr__(self, "keep", keep)

    @property
    def level_names(self) -> tuple[str, ...]:
        """``raw``, ``keep p`` for each prefix length, ``*``."""
        return ("raw", *(f"keep {p}" for p in self.keep), SUPPRESSED)

    def _level_sql(self, col: str, level: int) -> str:
        p = self.keep[level - 1]
        stars = quote_literal(SUPPRESSED * (self.length - p))
        return f"(left(CAST({col} AS VARCHAR), {p}) || {stars})"

    def covered_sql(self, column: str) -> str:
        """NULL, or exactly ``length`` characters of the alphabet."""
        col = quote_identifier(column)
        chars = "".join(re.escape(c) for c in self.alphabet)
        pattern = quote_literal(f"[{chars}]{{{self.length}}}")
        return f"({col} IS NULL OR regexp_full_match(CAST({col} AS VARCHAR), {pattern}))"

    def _level_loss(self, level: int) -> Fraction:
        a, n = len(self.alphabet), self.length
        hidden = n - self.keep[level - 1]
        if a == 1:
            return Fraction(0)
        return Fraction(a**hidden - 1, a**n - 1)

    def _label_loss(self, level: int, label: str) -> float:
        return float(self._level_loss(level))


_DATE_LEVELS = ("month", "quarter", "year", "decade")


@dataclass(frozen=True)
class DateParts(Hierarchy):
    """Dates generalised to month, quarter, year or decade; domain ``[lower, upper)``.

    Text is cast to DATE (ISO ``YYYY-MM-DD``); timestamps keep their date. The raw level is
    the date in ISO form.

    Examples:
        >>> h = DateParts(lower="2000-01-01", upper="2030-01-01", levels=("month", "year"))
        >>> h.level_names
        ('day', 'month', 'year', '*')
    """

    lower: dt.date | str
    upper: dt.date | str
    levels: tuple[str, ...]
    kind: ClassVar[str] = "date"

    def __post_init__(self) -> None:
        lo, hi = _date(self.lower, "lower"), _date(self.upper, "upper")
        if not lo < hi:
            raise RecodingError("a date hierarchy needs lower < upper")
        levels = tuple(self.levels)
        if any(lv not in _DATE_LEVELS for lv in levels):
            raise RecodingError(f"date levels must be among {list(_DATE_LEVELS)}")
        order = [_DATE_LEVELS.index(lv) for lv in levels]
        if order != sorted(set(order)):
            raise RecodingError("date levels must go from fine to coarse without repeats")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        object.__setattr__(self, "levels", levels)

    @property
    def _lo(self) -> dt.date:
        assert isinstance(self.lower, dt.date)
        return self.lower

    @property
    def _hi(self) -> dt.date:
        assert isinstance(self.upper, dt.date)
        return self.upper

    @property
    def level_names(self) -> tuple[str, ...]:
        """``day``, the declared levels, ``*``."""
        return ("day", *self.levels, SUPPRESSED)

    def _raw_sql(self, col: str) -> str:
        return f"CAST(TRY_CAST({col} AS DATE) AS VARCHAR)"

    def _level_sql(self, col: str, level: int) -> str:
        d = f"TRY_CAST({col} AS DATE)"
        part = self.levels[level - 1]
        if part == "month":
            return f"strftime({d}, '%Y-%m')"
        if part == "quarter":
            return f"(strftime({d}, '%Y') || '-Q' || CAST(quarter({d}) AS VARCHAR))"
        if part == "year":
            return f"strftime({d}, '%Y')"
        return f"(CAST(year({d}) // 10 * 10 AS VARCHAR) || 's')"

    def covered_sql(self, column: str) -> str:
        """NULL, or a date in ``[lower, upper)``."""
        col = quote_identifier(column)
        d = f"TRY_CAST({col} AS DATE)"
        lo, hi = quote_literal(self._lo.isoformat()), quote_literal(self._hi.isoformat())
        return f"({col} IS NULL OR ({d} IS NOT NULL AND {d} >= DATE {lo} AND {d} < DATE {hi}))"

    def _period(self, part: str, day: dt.date) -> tuple[dt.date, dt.date]:
        if part == "month":
            start = day.replace(day=1)
            end = start + dt.timedelta(days=calendar.monthrange(day.year, day.month)[1])
        elif part == "quarter":
            m0 = 3 * ((day.month - 1) // 3) + 1
            start = dt.date(day.year, m0, 1)
            end = dt.date(day.year + 1, 1, 1) if m0 == 10 else dt.date(day.year, m0 + 3, 1)
        elif part == "year":
            start, end = dt.date(day.year, 1, 1), dt.date(day.year + 1, 1, 1)
        else:
            y0 = day.year // 10 * 10
            start, end = dt.date(max(y0, 1), 1, 1), dt.date(min(y0 + 10, 9999), 1, 1)
        return max(start, self._lo), min(end, self._hi)

    def _days(self) -> int:
        return (self._hi - self._lo).days

    def _level_loss(self, level: int) -> Fraction:
        part, n = self.levels[level - 1], self._days()
        if n == 1:
            return Fraction(0)
        total, day = 0, self._lo
        while day < self._hi:
            start, end = self._period(part, day)
            m = (end - start).days
            total += m * (m - 1)
            day = end
        return Fraction(total, n * (n - 1))

    def _label_loss(self, level: int, label: str) -> float:
        part, n = self.levels[level - 1], self._days()
        if n == 1:
            return 0.0
        if part == "month":
            day = dt.date(int(label[:4]), int(label[5:7]), 1)
        elif part == "quarter":
            day = dt.date(int(label[:4]), 3 * (int(label[-1]) - 1) + 1, 1)
        elif part == "year":
            day = dt.date(int(label[:4]), 1, 1)
        else:
            day = dt.date(max(int(label[:-1]), 1), 1, 1)
        start, end = self._period(part, max(day, self._lo))
        return ((end - start).days - 1) / (n - 1)


@dataclass(frozen=True)
class Categorical(Hierarchy):
    """Categories mapped to groups, groups to super-groups; the domain is the first map's keys.

    ``maps[0]`` maps each raw value (compared as text) to its level-1 group; ``maps[i]`` maps
    every level-``i`` group to a level-``i+1`` group. With no maps, give ``domain``.

    Examples:
        >>> h = Categorical(maps=({"flu": "resp", "asthma": "resp", "cut": "injury"},))
        >>> h.level_names, float(h.level_loss(1))
        (('raw', 'level 1', '*'), 0.3333333333333333)
    """

    maps: tuple[Mapping[str, str], ...] = ()
    domain: tuple[str, ...] = ()
    kind: ClassVar[str] = "categorical"

    def __post_init__(self) -> None:
        maps = tuple({str(a): str(b) for a, b in m.items()} for m in self.maps)
        if maps:
            domain = tuple(maps[0])
            if self.domain and set(map(str, self.domain)) != set(domain):
                raise RecodingError("a categorical domain must equal the first map's keys")
        else:
            domain = tuple(str(v) for v in self.domain)
        if not domain:
            raise RecodingError("a categorical hierarchy needs maps or a domain")
        if len(set(domain)) != len(domain):
            raise RecodingError("a categorical domain lists a value twice")
        for i, (a, b) in enumerate(itertools.pairwise(maps), start=1):
            missing = set(a.values()) - set(b)
            if missing:
                raise RecodingError(
                    f"categorical map {i + 1} does not cover level-{i} groups {sorted(missing)}"
                )
        object.__setattr__(self, "maps", maps)
        object.__setattr__(self, "domain", domain)

    @property
    def level_names(self) -> tuple[str, ...]:
        """``raw``, ``level i`` for each map, ``*``."""
        return ("raw", *(f"level {i}" for i in range(1, len(self.maps) + 1)), SUPPRESSED)

    def composed(self, level: int) -> dict[str, str]:
        """The map from raw value to its label at ``level`` (0 < level < top)."""
        out = {v: v for v in self.domain}
        for m in self.maps[:level]:
            out = {v: m[g] for v, g in out.items()}
        return out

    def _level_sql(self, col: str, level: int) -> str:
        branches = " ".join(
            f"WHEN {quote_literal(v)} THEN {quote_literal(g)}"
            for v, g in self.composed(level).items()
        )
        return f"(CASE CAST({col} AS VARCHAR) {branches} END)"

    def covered_sql(self, column: str) -> str:
        """NULL, or one of the domain's values (as text)."""
        col = quote_identifier(column)
        values = ", ".join(quote_literal(v) for v in self.domain)
        return f"({col} IS NULL OR CAST({col} AS VARCHAR) IN ({values}))"

    def _sizes(self, level: int) -> dict[str, int]:
        sizes: dict[str, int] = {}
        for g in self.composed(level).values():
            sizes[g] = sizes.get(g, 0) + 1
        return sizes

    def _level_loss(self, level: int) -> Fraction:
        n = len(self.domain)
        if n == 1:
            return Fraction(0)
        sizes = self._sizes(level)
        return Fraction(sum(s * (s - 1) for s in sizes.values()), n * (n - 1))

    def _label_loss(self, level: int, label: str) -> float:
        n = len(self.domain)
        if n == 1:
            return 0.0
        return (self._sizes(level).get(label, 1) - 1) / (n - 1)


# --------------------------------------------------------------------------- recodings


@dataclass(frozen=True)
class RecodedColumn:
    """One output column: its hierarchy and the level it is published at."""

    name: str
    hierarchy: Hierarchy
    level: int

    @property
    def level_name(self) -> str:
        """The level's name (``'raw'``, ``'width 10'``, ``'*'``…)."""
        return self.hierarchy.level_names[self.level]

    @property
    def height(self) -> float:
        """Generalisation height, ``level / top`` (0 raw, 1 suppressed)."""
        return self.level / self.hierarchy.top

    def sql(self) -> str:
        """The column's recoded VARCHAR expression, aliased to its name."""
        return f"{self.hierarchy.sql(self.name, self.level)} AS {quote_identifier(self.name)}"


@dataclass(frozen=True)
class Recoding:
    """A fixed recoding: a hierarchy and a level for each published column.

    It maps a row to its published tuple without looking at any other row (global
    recoding), so a strongly safe release may use it when it was fixed before seeing the
    data.

    Examples:
        >>> r = Recoding((RecodedColumn("age", Interval(lower=0, upper=120, widths=(10,)), 1),))
        >>> r.levels()
        {'age': 'width 10'}
    """

    columns: tuple[RecodedColumn, ...]

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if not names:
            raise RecodingError("a recoding needs at least one column")
        if len(set(names)) != len(names):
            raise RecodingError("a recoding lists a column twice")
        for c in self.columns:
            c.hierarchy.level_index(c.level)

    @property
    def names(self) -> tuple[str, ...]:
        """The published columns, in order."""
        return tuple(c.name for c in self.columns)

    def levels(self) -> dict[str, str]:
        """Column → level name."""
        return {c.name: c.level_name for c in self.columns}

    def select_sql(self) -> str:
        """The SELECT list producing the published tuple."""
        return ", ".join(c.sql() for c in self.columns)

    def utility_weight(self) -> Fraction:
        """``1 − mean_col level_loss``: the information a kept row retains, in [0, 1]."""
        total = sum((c.hierarchy.level_loss(c.level) for c in self.columns), Fraction(0))
        return 1 - total / len(self.columns)


@dataclass(frozen=True)
class ColumnSpec:
    """A column of a recoding file: its hierarchy, fixed level and ε-safe candidates."""

    hierarchy: Hierarchy
    level: int | None = None
    candidates: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        h = self.hierarchy
        if self.level is not None:
            object.__setattr__(self, "level", h.level_index(self.level))
        cands = range(h.top + 1) if self.candidates is None else self.candidates
        resolved = tuple(sorted({h.level_index(c) for c in cands}))
        if not resolved:
            raise RecodingError("candidates must list at least one level")
        object.__setattr__(self, "candidates", resolved)


@dataclass(frozen=True)
class RecodingSpec:
    """Everything a recoding file declares: hierarchies, fixed levels, candidate levels.

    Examples:
        >>> spec = recoding_from_dict({"columns": {"sex": {"type": "identity", "level": 0}}})
        >>> spec.fixed().levels()
        {'sex': 'raw'}
    """

    columns: tuple[tuple[str, ColumnSpec], ...]

    def __post_init__(self) -> None:
        names = [n for n, _ in self.columns]
        if not names:
            raise RecodingError("a recoding needs at least one column")
        if len(set(names)) != len(names):
            raise RecodingError("a recoding lists a column twice")

    @property
    def names(self) -> tuple[str, ...]:
        """The published columns, in order."""
        return tuple(n for n, _ in self.columns)

    def hierarchy(self, name: str) -> Hierarchy:
        """The hierarchy of column ``name``."""
        return dict(self.columns)[name].hierarchy

    def fixed(self) -> Recoding:
        """The recoding given by every column's ``level`` (for a strongly safe release)."""
        missing = [n for n, c in self.columns if c.level is None]
        if missing:
            raise RecodingError(
                f"columns {missing} have no fixed 'level'; give one for a strongly safe release "
                "or choose the recoding with the ε-safe selection"
            )
        return Recoding(
            tuple(RecodedColumn(n, c.hierarchy, c.level) for n, c in self.columns)  # type: ignore[arg-type]
        )

    def candidate_count(self) -> int:
        """How many recodings :meth:`candidates` would list (without building them)."""
        return math.prod(len(c.candidates or ()) for _, c in self.columns)

    def candidates(self) -> list[Recoding]:
        """Every combination of candidate levels (the ε-safe selection's range)."""
        per_col = [c.candidates or () for _, c in self.columns]
        return [
            Recoding(
                tuple(
                    RecodedColumn(n, c.hierarchy, lv)
                    for (n, c), lv in zip(self.columns, combo, strict=True)
                )
            )
            for combo in itertools.product(*per_col)
        ]

    def check_columns(self, available: Iterable[str]) -> None:
        """Raise :class:`UnknownColumn` if the recoding names a column not in ``available``."""
        have = list(available)
        unknown = [n for n in self.names if n not in have]
        if unknown:
            raise UnknownColumn(
                f"the recoding names unknown columns {unknown}; the table has {have}"
            )


_HIERARCHY_KEYS: dict[str, set[str]] = {
    "identity": set(),
    "interval": {"lower", "upper", "widths"},
    "prefix": {"length", "keep", "alphabet"},
    "date": {"lower", "upper", "levels"},
    "categorical": {"maps", "domain"},
}


def hierarchy_from_dict(data: Mapping[str, Any]) -> Hierarchy:
    """Build a hierarchy from its declaration (the ``type`` key picks the kind).

    Examples:
        >>> hierarchy_from_dict({"type": "prefix", "length": 5, "keep": [3]}).level_names
        ('raw', 'keep 3', '*')
    """
    kind = data.get("type")
    if kind not in _HIERARCHY_KEYS:
        raise RecodingError(
            f"hierarchy type must be one of {sorted(_HIERARCHY_KEYS)}, got {kind!r}"
        )
    fields = {k: v for k, v in data.items() if k not in {"type", "level", "candidates"}}
    extra = set(fields) - _HIERARCHY_KEYS[kind]
    if extra:
        raise RecodingError(f"unknown keys {sorted(extra)} for a {kind} hierarchy")
    try:
        if kind == "identity":
            return Identity()
        if kind == "interval":
            return Interval(
                lower=fields["lower"], upper=fields["upper"], widths=tuple(_seq(fields, "widths"))
            )
        if kind == "prefix":
            return Prefix(
                length=fields["length"],
                keep=tuple(_seq(fields, "keep")),
                alphabet=str(fields.get("alphabet", "0123456789")),
            )
        if kind == "date":
            return DateParts(
                lower=fields["lower"], upper=fields["upper"], levels=tuple(_seq(fields, "levels"))
            )
        maps = tuple(_seq(fields, "maps")) if "maps" in fields else ()
        if any(not isinstance(m, Mapping) for m in maps):
            raise RecodingError("categorical maps must be a list of mappings")
        domain = tuple(_seq(fields, "domain")) if "domain" in fields else ()
        return Categorical(maps=maps, domain=domain)
    except KeyError as e:
        raise RecodingError(f"a {kind} hierarchy needs the key {e.args[0]!r}") from None


def recoding_from_dict(data: Mapping[str, Any]) -> RecodingSpec:
    """Build a :class:`RecodingSpec` from a parsed YAML/JSON document (``columns:`` mapping)."""
    if not isinstance(data, Mapping) or set(data) != {"columns"}:
        raise RecodingError("a recoding document is a mapping with the single key 'columns'")
    cols = data["columns"]
    if not isinstance(cols, Mapping) or not cols:
        raise RecodingError("'columns' must map column names to hierarchies")
    out: list[tuple[str, ColumnSpec]] = []
    for name, decl in cols.items():
        if not isinstance(decl, Mapping):
            raise RecodingError(f"column {name!r}: the declaration must be a mapping")
        h = hierarchy_from_dict(decl)
        cands = decl.get("candidates")
        if cands is not None and not isinstance(cands, list):
            raise RecodingError(f"column {name!r}: candidates must be a list of levels")
        out.append(
            (
                str(name),
                ColumnSpec(
                    h,
                    level=decl.get("level"),
                    candidates=None if cands is None else tuple(cands),
                ),
            )
        )
    return RecodingSpec(tuple(out))


def load_recoding(path: str | Path) -> RecodingSpec:
    """Read a recoding from a YAML or JSON file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise RecodingError(f"cannot read the recoding file {p}: {e.strerror}") from None
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        raise RecodingError(f"the recoding file {p} is not valid YAML/JSON: {e}") from None
    return recoding_from_dict(data)


# --------------------------------------------------------------------------- helpers


def _seq(fields: Mapping[str, Any], key: str) -> Sequence[Any]:
    value = fields[key]
    if not isinstance(value, list | tuple):
        raise RecodingError(f"{key!r} must be a list")
    return value


def _number(value: object, name: str) -> Fraction:
    if isinstance(value, bool):
        raise RecodingError(f"{name} must be a number")
    try:
        if isinstance(value, float):
            if not math.isfinite(value):
                raise RecodingError(f"{name} must be finite")
            return Fraction(repr(value))  # the decimal the user wrote, not the binary double
        if isinstance(value, Fraction | int | str):
            return Fraction(value)
    except (ValueError, ZeroDivisionError):
        pass
    raise RecodingError(f"{name} must be a number, got {value!r}")


def _date(value: object, name: str) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    raise RecodingError(f"{name} must be a date (YYYY-MM-DD), got {value!r}")


def _decimal_places(x: Fraction) -> int:
    places = 0
    while x.denominator != 1 and places < 30:
        x *= 10
        places += 1
    if x.denominator != 1:
        raise RecodingError("interval bounds and widths must be decimal numbers")
    return places


def _fixed(x: Fraction, places: int) -> str:
    """``x`` with exactly ``places`` decimals, as DuckDB prints a DECIMAL (x is decimal)."""
    scaled = x * 10**places
    if scaled.denominator != 1:  # pragma: no cover - places comes from _decimal_places
        raise RecodingError("interval bounds and widths must be decimal numbers")
    n = abs(scaled.numerator)
    sign = "-" if scaled < 0 else ""
    if places == 0:
        return f"{sign}{n}"
    return f"{sign}{n // 10**places}.{n % 10**places:0{places}d}"


def _fmt(x: Fraction) -> str:
    if x.denominator == 1:
        return str(x.numerator)
    return str(float(x))

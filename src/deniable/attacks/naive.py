"""UNSAFE query-based systems, for the attack lab's demonstrations only.

Nothing here is differentially private, and nothing here may be used to release data. These
are the baselines the attack lab breaks, written the way real systems were:

* :class:`UnsafeExactSystem` answers every count exactly;
* :class:`UnsafeFreshNoiseSystem` adds fresh noise to every answer, but answers without limit
  (the averaging attack removes the noise);
* :class:`UnsafeStickyNoiseSystem` adds noise that is a fixed, seeded function of the query
  text, so that repeating a query returns the same answer (as some commercial systems did);
  semantically equivalent rewrites get fresh noise, and average it away;
* :func:`unsafe_mondrian` is a Mondrian-style clustering k-anonymizer whose generalised
  ranges are the minimum and maximum of each cluster, so one extreme value shows through
  (Li–Qardaji–Su §3.1).

The noisy systems draw their noise from :mod:`deniable.noise` with an explicit, possibly
seeded source — they are unsafe by design, and say so in their names.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import duckdb
import numpy as np
import pandas as pd

from deniable.errors import InvalidParameter
from deniable.noise import discrete_laplace
from deniable.noise.source import RandomSource
from deniable.noise.testing import SeededRandom
from deniable.sqlnames import quote_identifier

__all__ = [
    "UnsafeExactSystem",
    "UnsafeFreshNoiseSystem",
    "UnsafeQuerySystem",
    "UnsafeStickyNoiseSystem",
    "unsafe_mondrian",
]


class UnsafeQuerySystem:
    """UNSAFE: a query-based system over in-memory tables that answers counts with no budget.

    Queries are DuckDB SQL returning numbers: one row and one column for :meth:`count`, or
    ``key, value`` rows for :meth:`histogram`. Subclasses decide the noise; this class adds
    none. The exact values are memoised per query text (a detail of speed: the data never
    changes), which does not change any answer.

    Args:
        tables: table name → DataFrame.
    """

    name = "unsafe: exact answers"

    def __init__(self, tables: dict[str, pd.DataFrame]) -> None:
        if not tables:
            raise InvalidParameter("an unsafe demonstration system needs at least one table")
        self._con = duckdb.connect()
        for table_name, frame in tables.items():
            self._con.register("__frame", frame)
            self._con.execute(
                f"CREATE TABLE {quote_identifier(table_name)} AS SELECT * FROM __frame"
            )
            self._con.unregister("__frame")
        self._exact: dict[str, list[tuple[object, float]]] = {}
        self.queries = 0

    def close(self) -> None:
        """Release the in-memory database."""
        self._con.close()

    def _rows(self, sql: str) -> list[tuple[object, float]]:
        cached = self._exact.get(sql)
        if cached is None:
            rows = self._con.execute(sql).fetchall()
            if rows and len(rows[0]) == 1:
                cached = [(None, float(r[0])) for r in rows]
            elif rows and len(rows[0]) == 2:
                cached = [(r[0], float(r[1])) for r in rows]
            else:
                cached = [(tuple(r[:-1]), float(r[-1])) for r in rows]
            self._exact[sql] = cached
        return cached

    def _noise(self, sql: str, size: int) -> np.ndarray:
        del sql
        return np.zeros(size)

    def count(self, sql: str) -> float:
        """Answer a one-number query (no privacy whatsoever)."""
        self.queries += 1
        rows = self._rows(sql)
        if len(rows) != 1:
            raise InvalidParameter("count() needs a query returning exactly one row")
        return float(rows[0][1] + self._noise(sql, 1)[0])

    def histogram(self, sql: str) -> dict[object, float]:
        """Answer ``SELECT keys…, value … GROUP BY keys…`` (no privacy whatsoever).

        Keys are the first column's values, or tuples of all but the last column's.
        """
        self.queries += 1
        rows = self._rows(sql)
        noise = self._noise(sql, len(rows))
        return {k: float(v + z) for (k, v), z in zip(rows, noise, strict=True)}

    @property
    def noise_scale(self) -> float:
        """Scale ``b`` of the discrete Laplace noise, ``P[k] ∝ e^(−|k|/b)`` (0: exact)."""
        return 0.0

    def with_fresh_noise(
        self, *, scale: float, source: RandomSource | None = None
    ) -> UnsafeFreshNoiseSystem:
        """UNSAFE: the same data behind fresh noise of scale ``scale`` (shares this database)."""
        if not scale > 0:
            raise InvalidParameter("scale must be > 0")
        out = UnsafeFreshNoiseSystem.__new__(UnsafeFreshNoiseSystem)
        out._con, out._exact, out.queries = self._con, self._exact, 0
        out._scale, out._source = scale, source
        return out

    @property
    def sticky(self) -> bool:
        """Whether repeating a query text returns the same answer."""
        return True


class UnsafeExactSystem(UnsafeQuerySystem):
    """UNSAFE: every count answered exactly, as often as asked (differencing breaks it)."""

    name = "unsafe: exact answers"


class UnsafeFreshNoiseSystem(UnsafeQuerySystem):
    """UNSAFE: fresh discrete Laplace noise of scale ``b`` per answer, with no query limit.

    Each answer alone is ``1/b``-DP for a count, but nothing limits how many are given, so
    the losses add up without bound (averaging removes the noise).

    Args:
        tables: table name → DataFrame.
        scale: the noise scale ``b > 0``.
        source: the randomness (a seeded source is fine here: this system is unsafe anyway).
    """

    name = "unsafe: fresh noise per query, no budget"

    def __init__(
        self,
        tables: dict[str, pd.DataFrame],
        *,
        scale: float,
        source: RandomSource | None = None,
    ) -> None:
        super().__init__(tables)
        if not scale > 0:
            raise InvalidParameter("scale must be > 0")
        self._scale = scale
        self._source = source

    def _noise(self, sql: str, size: int) -> np.ndarray:
        del sql
        return discrete_laplace(self._scale, size, source=self._source).astype(float)

    @property
    def noise_scale(self) -> float:
        """Scale ``b`` of the noise."""
        return self._scale

    @property
    def sticky(self) -> bool:
        """False: every answer carries fresh noise."""
        return False


class UnsafeStickyNoiseSystem(UnsafeQuerySystem):
    """UNSAFE: noise seeded by the query text, so a repeated query gets the same answer.

    The noise of a query is discrete Laplace of scale ``b`` drawn from a generator seeded by
    ``(seed, normalised text)`` (whitespace collapsed, case folded). Repeating a query teaches
    nothing new, but ``… AND id <> -1``, ``… AND id <> -2`` … are different texts with
    independent noise and the same true value: averaging them removes the noise.

    Args:
        tables: table name → DataFrame.
        scale: the noise scale ``b > 0``.
        seed: the system's secret seed.
    """

    name = "unsafe: sticky noise keyed on the query text"

    def __init__(self, tables: dict[str, pd.DataFrame], *, scale: float, seed: int) -> None:
        super().__init__(tables)
        if not scale > 0:
            raise InvalidParameter("scale must be > 0")
        self._scale = scale
        self._seed = seed

    def _noise(self, sql: str, size: int) -> np.ndarray:
        text = re.sub(r"\s+", " ", sql.strip()).lower()
        digest = hashlib.sha256(f"{self._seed}\x00{text}".encode()).digest()
        seeded = SeededRandom(int.from_bytes(digest[:16], "little"))
        return discrete_laplace(self._scale, size, source=seeded).astype(float)

    @property
    def noise_scale(self) -> float:
        """Scale ``b`` of the noise."""
        return self._scale


@dataclass(frozen=True)
class MondrianRelease:
    """UNSAFE: a Mondrian k-anonymous table: each row's quasi-identifiers as cluster ranges.

    Attributes:
        frame: one row per input row, with ``<col>_low`` and ``<col>_high`` per
            quasi-identifier (the minimum and maximum of the row's cluster) and a
            ``cluster`` number.
        k: every cluster holds at least ``k`` rows.
        columns: the generalised quasi-identifiers.
    """

    frame: pd.DataFrame
    k: int
    columns: tuple[str, ...] = field(default=())


def unsafe_mondrian(frame: pd.DataFrame, columns: list[str], *, k: int) -> MondrianRelease:
    """UNSAFE: Mondrian-style clustering k-anonymity (LeFevre et al. 2006), strict splits.

    Recursively split the rows at the median of the quasi-identifier with the widest
    normalised range, as long as both halves keep at least ``k`` rows; then replace each
    value by its cluster's ``[min, max]``. The output is k-anonymous, but the ranges are
    computed from the data, so one extreme value shows through its cluster's range
    (Li–Qardaji–Su §3.1). Deterministic; no privacy guarantee of any kind.

    Raises:
        InvalidParameter: ``k < 1``, fewer than ``k`` rows, or unknown columns.
    """
    if k < 1 or len(frame) < k:
        raise InvalidParameter("k must be ≥ 1 and the table must have at least k rows")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InvalidParameter(f"unknown columns {missing}")
    values = frame[columns].to_numpy(dtype=float)
    spans = values.max(axis=0) - values.min(axis=0)
    spans[spans == 0] = 1.0
    labels = np.zeros(len(frame), dtype=np.int64)
    stack = [np.arange(len(frame))]
    clusters: list[np.ndarray] = []
    while stack:
        idx = stack.pop()
        part = values[idx]
        order = np.argsort(-(part.max(axis=0) - part.min(axis=0)) / spans, kind="stable")
        for dim in order:
            col = part[:, dim]
            median = float(np.median(col))
            left, right = idx[col <= median], idx[col > median]
            if len(left) >= k and len(right) >= k:
                stack.extend([left, right])
                break
        else:
            clusters.append(idx)
    out = pd.DataFrame(index=frame.index)
    for number, idx in enumerate(clusters):
        labels[idx] = number
    out["cluster"] = labels
    for j, name in enumerate(columns):
        low = np.empty(len(frame))
        high = np.empty(len(frame))
        for idx in clusters:
            low[idx] = values[idx, j].min()
            high[idx] = values[idx, j].max()
        out[f"{name}_low"] = low
        out[f"{name}_high"] = high
    return MondrianRelease(out.reset_index(drop=True), k, tuple(columns))

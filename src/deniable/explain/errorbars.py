"""An answer's values with their confidence intervals, ready to draw as error bars.

Works on the answer's table (a pandas DataFrame in which each output ``x`` comes with
``x_low``/``x_high``, as :class:`deniable.query.answer.Answer` holds it), so that ``explain``
need not import ``query`` (DESIGN.md §2). Everything in an answer is post-processing of charged
releases: drawing it costs nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.errors import InvalidParameter

F64 = npt.NDArray[np.float64]

MAX_ROWS = 60
"""Rows beyond which an error-bar chart stops being readable (and is refused)."""


@dataclass(frozen=True)
class Bars:
    """One output column: its values and interval bounds, per row.

    Attributes:
        name: the output column.
        values: the noisy values.
        low: the lower interval bounds.
        high: the upper interval bounds.
    """

    name: str
    values: F64
    low: F64
    high: F64


@dataclass(frozen=True)
class AnswerBars:
    """What the answer's error-bar figure draws.

    Attributes:
        labels: one label per row (its group keys joined by ``", "``, or ``"all"``).
        bars: one entry per output column that has an interval.
    """

    labels: tuple[str, ...]
    bars: tuple[Bars, ...]


def _label(values: tuple[object, ...]) -> str:
    parts = ["NULL" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
             for v in values]  # fmt: skip
    return ", ".join(parts)


def answer_bars(frame: pd.DataFrame, *, max_rows: int = MAX_ROWS) -> AnswerBars:
    """Return the values and intervals of every output ``x`` that has ``x_low``/``x_high``.

    Group-key columns (those that are neither an output — a column with ``_low``/``_high``
    companions — nor a bound) label the rows.

    Raises:
        InvalidParameter: no output with an interval (e.g. only quantiles), or more than
            ``max_rows`` rows.

    Examples:
        >>> f = pd.DataFrame({"k": ["a"], "n": [10], "n_low": [7.0], "n_high": [13.0]})
        >>> answer_bars(f).labels, answer_bars(f).bars[0].high.tolist()
        (('a',), [13.0])
    """
    cols = [str(c) for c in frame.columns]
    outputs = [c for c in cols if f"{c}_low" in cols and f"{c}_high" in cols]
    with_interval = [
        c
        for c in outputs
        if pd.api.types.is_numeric_dtype(frame[c]) and frame[f"{c}_low"].notna().any()
    ]
    if not with_interval:
        raise InvalidParameter("the answer has no value with an interval to draw")
    if len(frame) > max_rows:
        raise InvalidParameter(
            f"the answer has {len(frame)} rows; error bars are drawn for at most {max_rows} "
            "(filter or aggregate further, or pass max_rows)"
        )
    taken = set(outputs) | {f"{c}_{s}" for c in outputs for s in ("low", "high")}
    keys = [c for c in cols if c not in taken]
    if keys:
        rows = frame[keys].itertuples(index=False, name=None)
        labels = tuple(_label(tuple(r)) for r in rows)
    else:
        labels = ("all",) if len(frame) == 1 else tuple(f"row {i + 1}" for i in range(len(frame)))

    def floats(c: str) -> F64:
        return np.asarray(pd.to_numeric(frame[c], errors="coerce"), dtype=np.float64)

    bars = tuple(Bars(c, floats(c), floats(f"{c}_low"), floats(f"{c}_high")) for c in with_interval)
    return AnswerBars(labels=labels, bars=bars)

"""The answer object: noisy values with confidence intervals, and what they cost.

An :class:`Answer` wraps a pandas DataFrame with, for each aggregate output ``x``, the noisy
value ``x`` and the bounds ``x_low``/``x_high`` of its confidence interval (NaN for quantiles,
whose accuracy is stated as a rank error in :attr:`AnswerMetadata.notes`), plus metadata: the
loss charged by this call (zero when it came from the cache), the budget left, the
contribution bounds and clamping ranges used, and the mechanism of every column. Everything
in it is post-processing of charged releases and may be shared freely.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from html import escape as html_escape
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, show
from deniable.errors import InternalError, InvalidParameter

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure
    from rich.console import Console, ConsoleOptions, RenderResult

    from deniable.query.diagnostics import BoundingDiagnostics

_META_KEY = b"deniable.answer"


def loss_to_json(loss: PrivacyLoss) -> dict[str, str]:
    """An exact JSON form of a loss."""
    if isinstance(loss, Epsilon):
        return {"type": "epsilon", "epsilon": str(loss.epsilon)}
    if isinstance(loss, EpsilonDelta):
        return {"type": "epsilon_delta", "epsilon": str(loss.epsilon), "delta": str(loss.delta)}
    return {"type": "rho", "rho": str(loss.rho)}


def loss_from_json(data: Mapping[str, str]) -> PrivacyLoss:
    """Inverse of :func:`loss_to_json`."""
    kind = data.get("type")
    if kind == "epsilon":
        return Epsilon(epsilon=Fraction(data["epsilon"]))
    if kind == "epsilon_delta":
        return EpsilonDelta(epsilon=Fraction(data["epsilon"]), delta=Fraction(data["delta"]))
    if kind == "rho":
        return Rho(rho=Fraction(data["rho"]))
    raise InternalError("a stored answer has an unknown loss type")


def zero_like(loss: PrivacyLoss) -> PrivacyLoss:
    """The zero loss of the same kind."""
    if isinstance(loss, Epsilon):
        return Epsilon(epsilon=0)
    if isinstance(loss, EpsilonDelta):
        return EpsilonDelta(epsilon=0, delta=0)
    return Rho(rho=0)


def show_loss(loss: PrivacyLoss) -> str:
    """Short human form: ``ε = 0.5``, ``ε = 1, δ = 1e-06``, ``ρ = 0.1``; never overflows."""
    if isinstance(loss, Epsilon):
        return f"ε = {show(loss.epsilon, 4)}"
    if isinstance(loss, EpsilonDelta):
        return f"ε = {show(loss.epsilon, 4)}, δ = {show(loss.delta, 3)}"
    return f"ρ = {show(loss.rho, 4)}"


@dataclass(frozen=True)
class AnswerMetadata:
    """What an answer cost and how it was computed (all public).

    Attributes:
        query: the query text as asked.
        loss: the loss charged by this call (zero when served from the cache).
        cost: what the answer cost when it was first computed.
        remaining: the dataset's budget left after this call.
        level: confidence level of the intervals.
        bounds: clamping range used by each output column that clamps (by output name).
        max_groups: partitions per privacy unit kept (effective).
        max_rows: rows per privacy unit and partition kept.
        privacy_unit: the privacy unit column, or None for row-level privacy.
        mechanisms: how each output column was computed.
        notes: accuracy notes (e.g. the rank error of a quantile).
        partition_selection: how group keys were released.
        cached: whether this answer was served from the cache.
        charge_id: the ledger charge that paid for the answer.
        sample_rate: the rate ``β`` of the Bernoulli sample of privacy units the answer was
            computed on (its values describe the sample, and its cost is the amplified
            loss), or None when it was computed on the whole table.
        loss_on_sample: the loss of the answer's mechanisms on the sample, before
            amplification (None without sampling).
        row_policies: the rules applied to rows before aggregation (rows dropped, per-person
            caps, clamping), stated as policy — never as a count of affected rows, which
            would depend on the data.
        population: whether counts and sums are population-scale estimates from the sample
            (divided by ``sample_rate``, with intervals that include the sampling error;
            see :func:`deniable.query.execute.population_release`) rather than the sample's.
    """

    query: str
    loss: PrivacyLoss
    cost: PrivacyLoss
    remaining: PrivacyLoss
    level: float
    bounds: dict[str, tuple[float, float]]
    max_groups: int
    max_rows: int
    privacy_unit: str | None
    mechanisms: dict[str, str]
    notes: dict[str, str] = field(default_factory=dict)
    partition_selection: str | None = None
    cached: bool = False
    charge_id: int | None = None
    sample_rate: float | None = None
    loss_on_sample: PrivacyLoss | None = None
    row_policies: tuple[str, ...] = ()
    population: bool = False

    def to_json(self) -> dict[str, Any]:
        """JSON-compatible form (the stored part: not ``loss``/``remaining``/``cached``)."""
        return {
            "query": self.query,
            "cost": loss_to_json(self.cost),
            "level": self.level,
            "bounds": {k: list(v) for k, v in self.bounds.items()},
            "max_groups": self.max_groups,
            "max_rows": self.max_rows,
            "privacy_unit": self.privacy_unit,
            "mechanisms": self.mechanisms,
            "notes": self.notes,
            "partition_selection": self.partition_selection,
            "charge_id": self.charge_id,
            "sample_rate": self.sample_rate,
            "loss_on_sample": None
            if self.loss_on_sample is None
            else loss_to_json(self.loss_on_sample),
            "row_policies": list(self.row_policies),
            "population": self.population,
        }


_CLAMP = re.compile(r"^(?P<name>.+): values clamped to (?P<range>\[[^\]]*\]) before aggregation$")
"""A clamping rule as :func:`deniable.query.execute.row_policies` states it."""


def row_policy_line(meta: AnswerMetadata) -> str:
    """The row policies that applied, in one line a person can read.

    Built from the metadata only (public): the privacy unit and the contribution bounds in
    effect, then each clamping range with the outputs it applied to, e.g. ``per patient_id: at
    most 3 groups, 23 rows per group; total clamped to [0, 5000]``. The full list is
    :attr:`AnswerMetadata.row_policies`.

    Examples:
        >>> from deniable.accounting.loss import Epsilon
        >>> m = AnswerMetadata(query="q", loss=Epsilon(epsilon=1), cost=Epsilon(epsilon=1),
        ...     remaining=Epsilon(epsilon=0), level=0.95, bounds={"total": (0.0, 5000.0)},
        ...     max_groups=3, max_rows=23, privacy_unit="patient_id", mechanisms={})
        >>> row_policy_line(m)
        'per patient_id: at most 3 groups, 23 rows per group; total clamped to [0, 5000]'
    """
    unit = meta.privacy_unit

    def many(n: int, word: str) -> str:
        return f"{n} {word}" if n == 1 else f"{n} {word}s"

    if unit is None:
        head = "row-level: each row is its own unit (1 group, 1 row)"
    elif unit.startswith("node ("):  # a graph answer (deniable.graph.queries.unit_text)
        head = f"per {unit}: at most {many(meta.max_rows, 'edge')} (degree bound)"
    elif unit.startswith("edge ("):
        head = f"per {unit}: each edge is its own unit"
    else:
        head = (
            f"per {unit}: at most {many(meta.max_groups, 'group')}, "
            f"{many(meta.max_rows, 'row')} per group"
        )
    clamps: dict[str, list[str]] = {}
    for rule in meta.row_policies:
        hit = _CLAMP.match(rule)
        if hit is not None:
            clamps.setdefault(hit["range"], []).append(hit["name"])
    if not clamps:
        for name, (lo, hi) in meta.bounds.items():
            clamps.setdefault(f"[{lo:g}, {hi:g}]", []).append(name)
    parts = [head]
    parts += [
        f"{', '.join(dict.fromkeys(names))} clamped to {rng}" for rng, names in clamps.items()
    ]
    return "; ".join(parts)


NONNEGATIVE_NOTE = (
    "clipped at 0 (nonnegative=True): post-processing, no privacy cost; biased upward near "
    "0, and the interval still holds the bounded count"
)
"""The note a count clipped at 0 carries (:meth:`Answer.clipped_at_zero`)."""


def interval_coverage(meta: AnswerMetadata) -> str:
    """What the answer's intervals cover, in words (they account for the noise only).

    An interval covers the value computed *after* bounding (contribution caps and clamping),
    not the unbounded statistic; with a sample it covers the sample's value, or with
    population estimates the population's bounded value, sampling error included.

    Examples:
        >>> from deniable.accounting.loss import Epsilon
        >>> m = AnswerMetadata(query="q", loss=Epsilon(epsilon=1), cost=Epsilon(epsilon=1),
        ...     remaining=Epsilon(epsilon=0), level=0.95, bounds={}, max_groups=1,
        ...     max_rows=1, privacy_unit=None, mechanisms={})
        >>> interval_coverage(m)
        '95% intervals: noise only — covers the value after bounding'
    """
    pct = f"{meta.level:.0%} intervals"
    if meta.population:
        return f"{pct}: noise and sampling error — covers the population's value after bounding"
    if meta.sample_rate is not None:
        return f"{pct}: noise only — covers the sample's value after bounding"
    return f"{pct}: noise only — covers the value after bounding"


class Answer:
    """A DP answer: a DataFrame of noisy values and intervals, with its metadata.

    Behaves like a small read-only table: ``answer["n"]``, ``len(answer)``,
    ``answer.columns``; converts with :meth:`to_pandas`, :meth:`to_polars`, :meth:`to_arrow`.
    """

    def __init__(
        self,
        frame: pd.DataFrame,
        metadata: AnswerMetadata,
        diagnostics: BoundingDiagnostics | None = None,
    ) -> None:
        self._frame = frame
        self.metadata = metadata
        self.diagnostics = diagnostics
        """The bounding diagnostics released with this answer (a separate, charged release:
        :mod:`deniable.query.diagnostics`), or None. Not stored with a replayed answer."""

    # -- table access --------------------------------------------------------------------

    @property
    def frame(self) -> pd.DataFrame:
        """A copy of the answer as a pandas DataFrame."""
        return self._frame.copy()

    def to_pandas(self) -> pd.DataFrame:
        """The answer as a pandas DataFrame (a copy)."""
        return self._frame.copy()

    def to_arrow(self) -> pa.Table:
        """The answer as an Arrow table."""
        return pa.Table.from_pandas(self._frame, preserve_index=False)

    def to_polars(self) -> pl.DataFrame:
        """The answer as a polars DataFrame."""
        import polars as pl

        out = pl.from_arrow(self.to_arrow())
        assert isinstance(out, pl.DataFrame)
        return out

    @property
    def columns(self) -> list[str]:
        """The answer's column names."""
        return [str(c) for c in self._frame.columns]

    def __getitem__(self, key: str) -> pd.Series:
        return self._frame[key].copy()

    def __len__(self) -> int:
        return len(self._frame)

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    # -- metadata shortcuts ----------------------------------------------------------------

    @property
    def loss(self) -> PrivacyLoss:
        """The loss charged by this call."""
        return self.metadata.loss

    @property
    def remaining(self) -> PrivacyLoss:
        """The budget left after this call."""
        return self.metadata.remaining

    @property
    def cached(self) -> bool:
        """Whether the answer came from the cache (at no cost)."""
        return self.metadata.cached

    @property
    def mechanisms(self) -> dict[str, str]:
        """How each output column was computed."""
        return dict(self.metadata.mechanisms)

    @property
    def bounds(self) -> dict[str, tuple[float, float]]:
        """Clamping ranges used."""
        return dict(self.metadata.bounds)

    # -- storage ---------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Serialise (Arrow IPC with the metadata in the schema) for the answer cache."""
        table = self.to_arrow()
        meta = dict(table.schema.metadata or {})
        meta[_META_KEY] = json.dumps(self.metadata.to_json(), sort_keys=True).encode()
        table = table.replace_schema_metadata(meta)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return sink.getvalue()

    @classmethod
    def from_bytes(
        cls, payload: bytes, *, loss: PrivacyLoss, remaining: PrivacyLoss, cached: bool
    ) -> Answer:
        """Rebuild a stored answer, with this call's loss and the current budget."""
        table = pa.ipc.open_stream(payload).read_all()
        raw = (table.schema.metadata or {}).get(_META_KEY)
        if raw is None:
            raise InternalError("a stored answer lacks its metadata")
        data = json.loads(raw)
        meta = AnswerMetadata(
            query=data["query"],
            loss=loss,
            cost=loss_from_json(data["cost"]),
            remaining=remaining,
            level=float(data["level"]),
            bounds={k: (float(v[0]), float(v[1])) for k, v in data["bounds"].items()},
            max_groups=int(data["max_groups"]),
            max_rows=int(data["max_rows"]),
            privacy_unit=data["privacy_unit"],
            mechanisms=dict(data["mechanisms"]),
            notes=dict(data["notes"]),
            partition_selection=data["partition_selection"],
            cached=cached,
            charge_id=data["charge_id"],
            sample_rate=data.get("sample_rate"),
            loss_on_sample=None
            if data.get("loss_on_sample") is None
            else loss_from_json(data["loss_on_sample"]),
            row_policies=tuple(data.get("row_policies", ())),
            population=bool(data.get("population", False)),
        )
        frame = table.replace_schema_metadata(None).to_pandas()
        return cls(frame, meta)

    def with_metadata(self, **changes: Any) -> Answer:
        """A copy with some metadata fields replaced."""
        return Answer(self._frame, replace(self.metadata, **changes), self.diagnostics)

    def with_diagnostics(self, diagnostics: BoundingDiagnostics) -> Answer:
        """A copy shown with its bounding diagnostics."""
        return Answer(self._frame, self.metadata, diagnostics)

    def clipped_at_zero(self, columns: Iterable[str]) -> Answer:
        """A copy whose ``columns`` (counts) and their interval ends are at least 0.

        Post-processing of the released values: no privacy cost. A count is never negative,
        so an interval that holds the (bounded) count still holds it after its ends are
        raised to 0. The values are **biased upward near 0**: where the true count is 0, the
        clipped value averages about half the noise's mean absolute deviation instead of 0,
        and sums of clipped counts overstate the total. For reports that must not show a
        negative count; totals and further arithmetic should use the unclipped answer.
        """
        frame = self._frame.copy()
        notes = dict(self.metadata.notes)
        for name in columns:
            if name not in frame.columns:
                continue
            for column in (name, f"{name}_low", f"{name}_high"):
                if column in frame.columns:
                    frame[column] = frame[column].clip(lower=0)
            note = NONNEGATIVE_NOTE
            notes[name] = f"{notes[name]}; {note}" if name in notes else note
        return Answer(frame, replace(self.metadata, notes=notes), self.diagnostics)

    # -- display ---------------------------------------------------------------------------

    def summary(self) -> str:
        """One line: cost, budget left, level."""
        m = self.metadata
        paid = "cached, no cost" if m.cached else f"charged {show_loss(m.loss)}"
        if m.sample_rate is not None and m.loss_on_sample is not None:
            paid += (
                f" (on a {m.sample_rate:.3g} sample of the privacy units: "
                f"{show_loss(m.loss_on_sample)} before amplification)"
            )
            if m.population:
                paid += "; population estimates (sampling error in the intervals)"
        return f"{paid}; remaining {show_loss(m.remaining)}; {interval_coverage(m)}"

    @property
    def row_policy(self) -> str:
        """The row policies that applied, in one line (:func:`row_policy_line`)."""
        return row_policy_line(self.metadata)

    def __repr__(self) -> str:
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            text = f"{self._frame!r}\n[{self.summary()}]\n[rows: {self.row_policy}]"
        if self.diagnostics is not None:
            d = self.diagnostics
            text += "".join(f"\n[bounding: {line}]" for line in d.lines())
            text += f"\n[bounding diagnostics charged ε = {float(d.epsilon):g}]"
        return text

    def _repr_html_(self) -> str:
        shown = self._frame.copy()
        digits = _interval_digits(self._frame)
        for c in shown.columns:
            if _numeric(shown[c]):
                shown[c] = [
                    format_number(v, grouping=False, digits=digits.get(c, [4] * len(shown))[i])
                    for i, v in enumerate(shown[c])
                ]
        html = shown.to_html(index=False, na_rep="NULL")
        return (
            f"{html}<p><small>{html_escape(self.summary())}<br>"
            f"rows: {html_escape(self.row_policy)}</small></p>"
        )

    def plot(self, *, max_rows: int = 60) -> Figure:
        """The answer's values with their confidence intervals as error bars (a Figure).

        Post-processing of the released answer: costs nothing. Save it with
        :func:`deniable.explain.plots.save` (``.png`` or ``.svg``).

        Raises:
            InvalidParameter: no value with an interval (e.g. only quantiles), or more than
                ``max_rows`` rows.
        """
        from deniable.explain.plots import answer_figure

        return answer_figure(
            self._frame, title=self.metadata.query, caption=self.summary(), max_rows=max_rows
        )

    def _repr_png_(self) -> bytes | None:
        """Error bars for notebooks; None (no image) when there is nothing to draw."""
        from deniable.explain.plots import png_bytes

        try:
            return png_bytes(self.plot())
        except InvalidParameter:
            return None

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=self.metadata.query, title_justify="left")
        cols = self.columns
        for c in cols:
            table.add_column(c, justify="right" if _numeric(self._frame[c]) else "left")
        # released values are quantities (1,234,568); group keys are labels (a year 1990)
        measured = set(self.metadata.mechanisms)
        grouped = [
            c in measured or any(c == f"{m}_low" or c == f"{m}_high" for m in measured)
            for c in cols
        ]
        for row in self._frame.itertuples(index=False):
            table.add_row(*(_cell(v, grouping=g) for v, g in zip(row, grouped, strict=True)))
        yield table
        yield Text(self.summary(), style="dim")
        yield Text(f"rows: {self.row_policy}", style="dim")


def _interval_digits(frame: pd.DataFrame) -> dict[str, list[int]]:
    """Per row, the significant digits that keep a value and its interval's ends apart.

    Four digits collapse a narrow interval (``0.5375 / 0.5375 / 0.5375``); each row of a
    value ``x`` with ``x_low``/``x_high`` gets the fewest digits (4 to 12) at which the three
    print differently wherever they differ.
    """
    out: dict[str, list[int]] = {}
    for c in frame.columns:
        low, high = f"{c}_low", f"{c}_high"
        if low not in frame.columns or high not in frame.columns or not _numeric(frame[c]):
            continue
        per_row = []
        for v, lo, hi in zip(frame[c], frame[low], frame[high], strict=True):
            triple = [x for x in (v, lo, hi) if isinstance(x, int | float | np.number)]
            distinct = len({float(x) for x in triple})
            d = 4
            while (
                d < 12
                and len({format_number(x, grouping=False, digits=d) for x in triple}) < distinct
            ):
                d += 1
            per_row.append(d)
        for name in (c, low, high):
            out[name] = per_row
    return out


def _numeric(series: pd.Series) -> bool:
    return bool(pd.api.types.is_numeric_dtype(series))


def _cell(v: object, *, grouping: bool = True) -> str:
    if v is None or v is pd.NA:
        return "NULL"
    if isinstance(v, bool | np.bool_ | str):
        return str(v)
    if isinstance(v, int | float | np.integer | np.floating):
        return format_number(v, grouping=grouping)
    return str(v)


def format_number(v: object, *, grouping: bool, digits: int = 4) -> str:
    """A number for people: integer digits are never lost, nor shown in exponent form.

    Integers print in full; floats with 4 significant digits below 10^6 (fewer decimals as
    the integer part grows, trailing zeros dropped, exponent form only below 10^-4), as
    rounded integers from 10^6, and with 6 significant digits from 10^15 (where a double's
    integer digits stop being meaningful); NaN and missing values as an em dash. ``grouping`` adds
    thousands separators (``1,234,568``).

    Examples:
        >>> format_number(100038.0, grouping=False), format_number(0.000123, grouping=False)
        ('100038', '0.000123')
        >>> format_number(1234567.89, grouping=True), format_number(-12.3456, grouping=True)
        ('1,234,568', '-12.35')
    """
    comma = "," if grouping else ""
    if v is None or v is pd.NA:
        return "—"
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, int | np.integer):
        return f"{int(v):{comma}d}"
    if not isinstance(v, float | np.floating):
        return str(v)
    x = float(v)
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if abs(x) >= 1e15:  # beyond 2^53 a double's integer digits are not all meaningful
        return f"{x:.6g}"
    if abs(x) >= 1e6:
        return f"{round(x):{comma}d}"
    if abs(x) >= 1:
        decimals = max(0, digits - len(str(int(abs(x)))))
        text = f"{x:{comma}.{decimals}f}"
        text = text.rstrip("0").rstrip(".") if "." in text else text
    else:
        text = f"{x:.{digits}g}"  # 0.000123 stays fixed; exponent form from 1e-05 down
    return "0" if text in ("-0", "0") else text

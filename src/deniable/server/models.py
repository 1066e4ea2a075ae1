"""The HTTP API's request and response bodies (pydantic), and their translation.

Losses travel as ``{"type": "epsilon", "epsilon": 0.5, "exact": {"epsilon": "1/2"}, ...}``:
floats for convenience, exact rationals (``"num/den"``) because the ledger is exact.
Query answers are columnar: ``values[column]`` lists the released values of each output,
``intervals[column]`` the bounds of its confidence interval (``null`` where none exists, e.g.
for quantiles, whose accuracy is a rank error stated in ``notes``).

The builder's JSON form (``QueryRequest.builder``) is a small, closed subset of
:mod:`deniable.query.builder` — filters, group keys, aggregates, order, limit — translated
into builder calls, so it compiles to the same SQL, plan, charge and cache entry as the
equivalent text.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

import numpy as np
import pandas as pd
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue, model_validator
from pydantic.json_schema import SkipJsonSchema

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.curator.tune import EDGES, JOINT_EDGES, Choice, UtilityAnalysis
from deniable.errors import InvalidParameter
from deniable.query import builder as b
from deniable.query.answer import Answer, interval_coverage, row_policy_line, show_loss
from deniable.server.service import (
    AccuracyResult,
    BudgetView,
    GraphMetadata,
    SynthResult,
    TuneResult,
)
from deniable.synth.discretize import MAX_BINS, MAX_KEYS, Quantiles, SelectKeys

Scalar = int | float | str | bool | None
Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Request(BaseModel):
    """A request body: no unknown fields, and strict types (``true`` is not a number).

    The published schema is the contract both ways: a body it allows is never refused as
    malformed (422), and a body it forbids is never accepted. Fields listed in
    ``not_null`` may be left out but never sent as ``null`` (the schema gives them no
    ``null`` type, so that ``oneOf`` shapes such as "exactly one of sql and builder" are
    expressed by which keys are present).
    """

    model_config = ConfigDict(extra="forbid", strict=True)
    not_null: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _refuse_nulls(cls, data: object) -> object:
        if isinstance(data, dict):
            nulls = [n for n in cls.not_null if n in data and data[n] is None]
            if nulls:
                raise ValueError(f"{', '.join(nulls)}: leave it out rather than send null")
        return data


def _integral(value: object) -> object:
    """JSON Schema's ``integer`` includes ``3.0``: read an integral float as its int.

    Booleans and fractional floats pass through, and the strict ``int`` refuses them.
    """
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


Integral = BeforeValidator(_integral)
"""Put last in ``Annotated[int, Field(...), Integral]``: a strict integer that also takes a
JSON number with no fractional part (``139.0``). Last, so that the bounds stay in the
published schema as ``minimum``/``maximum``."""


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _json_number(value: object) -> object:
    """A query-string number must be written as JSON writes one (``1e-3``, not ``1_0``)."""
    if isinstance(value, str) and not _JSON_NUMBER.fullmatch(value):
        raise ValueError("write the number as a decimal, e.g. 0.5 or 1e-3")
    return value


QueryNumber = BeforeValidator(_json_number)
"""Put last in ``Annotated[float, Query(...), QueryNumber]``: python's float syntax (``1_0``,
spaces, ``infinity``) is not the schema's ``number``, so it is refused (422)."""


def _no_default(schema: dict[str, Any]) -> None:
    # A field that may be left out but not be null: its default (None) is not a value.
    schema.pop("default", None)


ONE_QUERY_FORM: list[JsonValue] = [{"required": ["sql"]}, {"required": ["builder"]}]
"""Exactly one of ``sql`` and ``builder`` (JSON Schema ``oneOf``)."""


# -- errors ----------------------------------------------------------------------------------


class ErrorDetail(_Model):
    """A machine-readable error: a stable ``code`` and a message for people."""

    code: str = Field(description="stable machine-readable code, e.g. budget_exceeded")
    message: str = Field(description="what went wrong and what to change; never data")
    requested: LossOut | None = Field(
        default=None, description="budget_exceeded: the loss the refused request asked for"
    )
    remaining: LossOut | None = Field(
        default=None, description="budget_exceeded: what the caller could still spend then"
    )
    line: int | None = Field(default=None, description="sql_error: 1-based line, when known")
    column: int | None = Field(default=None, description="sql_error: 1-based column, when known")


class ErrorBody(_Model):
    """Every error response has this body."""

    error: ErrorDetail


# -- losses ----------------------------------------------------------------------------------


class LossOut(_Model):
    """A privacy loss: floats for convenience, exact rationals in ``exact``."""

    type: Literal["epsilon", "epsilon_delta", "rho"]
    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None
    exact: dict[str, str] = Field(description='exact components as "num/den" text')
    text: str = Field(description="short human form, e.g. 'ε = 0.5'")

    @classmethod
    def of(cls, loss: PrivacyLoss) -> LossOut:
        """The response form of ``loss``."""
        if isinstance(loss, Epsilon):
            parts = {"epsilon": loss.epsilon}
            kind: Literal["epsilon", "epsilon_delta", "rho"] = "epsilon"
        elif isinstance(loss, EpsilonDelta):
            parts = {"epsilon": loss.epsilon, "delta": loss.delta}
            kind = "epsilon_delta"
        else:
            parts = {"rho": loss.rho}
            kind = "rho"
        return cls(
            type=kind,
            **{k: float(v) for k, v in parts.items()},
            exact={k: str(v) for k, v in parts.items()},
            text=show_loss(loss),
        )


ErrorDetail.model_rebuild()  # its budget fields are LossOut, defined after it


Number = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Spend = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A loss a request spends: more than 0 (the service refuses 0; an ε too small to plan is
refused for its meaning, 400)."""


class LossIn(_Request):
    """A privacy loss given by a curator: ``epsilon``; ``epsilon`` and ``delta``; or ``rho``.

    Whether the loss is of the dataset's kind (an ε cap takes ``epsilon``, a ρ cap ``rho``)
    is the service's check: a well-formed loss of the wrong kind gets 400.
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["epsilon"], "properties": {"rho": False}},
                {"required": ["rho"], "properties": {"epsilon": False, "delta": False}},
            ],
            "examples": [{"epsilon": 0.5}, {"epsilon": 0.5, "delta": 1e-6}, {"rho": 0.1}],
        },
    )
    not_null = ("epsilon", "delta", "rho")

    epsilon: Number | SkipJsonSchema[None] = Field(None, json_schema_extra=_no_default)
    delta: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | SkipJsonSchema[None] = Field(
        None, json_schema_extra=_no_default
    )
    rho: Number | SkipJsonSchema[None] = Field(None, json_schema_extra=_no_default)

    @model_validator(mode="after")
    def _one_shape(self) -> LossIn:
        if (self.epsilon is None) == (self.rho is None) or (
            self.rho is not None and self.delta is not None
        ):
            raise ValueError("give epsilon; epsilon and delta; or rho")
        return self

    def to_loss(self) -> PrivacyLoss:
        """The exact loss (floats read as the decimals they print as).

        Raises:
            InvalidParameter: not one of the three shapes.
        """
        if self.epsilon is not None and self.delta is None and self.rho is None:
            return Epsilon(epsilon=self.epsilon)
        if self.epsilon is not None and self.delta is not None and self.rho is None:
            return EpsilonDelta(epsilon=self.epsilon, delta=self.delta)
        if self.rho is not None and self.epsilon is None and self.delta is None:
            return Rho(rho=self.rho)
        raise InvalidParameter("give epsilon; epsilon and delta; or rho")


# -- metadata --------------------------------------------------------------------------------


class BudgetOut(_Model):
    """A dataset's budget as the caller sees it."""

    dataset: str
    cap: LossOut
    spent: LossOut = Field(description="spent by everyone (curator) or by the caller")
    remaining: LossOut = Field(
        description="what the caller may still spend: for an analyst, their own slice (the "
        "least of what is left of their allowance and of what the dataset can still give "
        "them: its cap less everything spent and other analysts' unspent reservations); "
        "for a curator, the cap less everything spent"
    )
    allowance: LossOut | None = Field(description="the caller's slice of the cap, if any")
    reserved: LossOut | None = Field(
        description="the caller's reserved slice, if any: what they have not spent of it is "
        "held back from every other analyst",
    )


class ColumnOut(_Model):
    """A column: name and engine type."""

    name: str
    type: str


class TableOut(_Model):
    """What the curator declared about a table; nothing computed from its rows."""

    name: str
    public: bool = Field(description="a public lookup table: joinable, never queried alone")
    columns: list[ColumnOut]
    privacy_unit: str | None
    bounds: dict[str, list[float]] = Field(description="declared clamping ranges")
    public_keys: dict[str, list[Scalar]] = Field(description="declared group-key domains")
    max_groups: int
    max_rows: int
    unique_keys: list[list[str]]


class GraphOut(_Model):
    """What the curator declared about a graph; nothing computed from its edges or nodes.

    Query it with ``SELECT COUNT(*) FROM g``, ``SELECT degree, COUNT(*) FROM degrees(g)
    GROUP BY degree``, ``SELECT COUNT(*) FROM degrees(g) WHERE degree >= d``, ``SELECT
    COUNT(*) FROM triangles(g)`` (edge level only) or, with a node table, ``SELECT n.attr,
    COUNT(*) FROM g e JOIN nodes n ON n.key IN (e.a, e.b) GROUP BY n.attr``.
    """

    name: str = Field(description="the name used in FROM g, degrees(g), triangles(g)")
    unit: Literal["edge", "node"] = Field(
        description="privacy unit: one edge, or a node and all its edges"
    )
    max_degree: int = Field(description="declared degree bound D that answers truncate to")
    source_col: str = Field(description="the edge table's column of one end")
    target_col: str = Field(description="the edge table's column of the other end")
    node_key: str | None = Field(description="the node table's id column, if any")
    nodes_name: str | None = Field(description="the node table's name in JOINs, if any")
    node_attributes: list[str] = Field(description="the node table's attribute columns")
    domains: dict[str, list[Scalar]] = Field(description="declared node-attribute values")


class DatasetOut(_Model):
    """A dataset's public metadata and the caller's budget."""

    name: str
    table: str | None = Field(description="the private table, or null for a graph-only dataset")
    tables: list[TableOut]
    graphs: list[GraphOut] = Field(description="graphs sharing the dataset's budget")
    budget: BudgetOut


class DatasetSummary(_Model):
    """One line of the dataset list."""

    name: str
    table: str | None = Field(description="the private table, or null for a graph-only dataset")
    graphs: list[str] = Field(description="names of the dataset's graphs")
    budget: BudgetOut


# -- queries ---------------------------------------------------------------------------------

CompareOp = Literal["=", "!=", "<", "<=", ">", ">=", "in", "not_in", "is_null", "is_not_null"]


class Filter(_Request):
    """A row filter ``column op value`` (all filters AND together)."""

    column: Name
    op: CompareOp
    value: Scalar | list[Scalar] = None


AggregateName = Literal[
    "count", "count_distinct", "sum", "mean", "variance", "stddev", "median", "quantile"
]


class AggregateSpec(_Request):
    """One aggregate output."""

    function: AggregateName
    column: Name | None = Field(None, description="the column (none for count(*))")
    q: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None, description="the quantile's level (quantile only)"
    )
    alias: Name | None = None


class OrderSpec(_Request):
    """Sort by an output name."""

    name: Name
    descending: bool = False


class BuilderQuery(_Request):
    """The builder's JSON form: one table, filters, group keys, aggregates, order, limit."""

    table: Name
    where: list[Filter] = Field(default_factory=list, max_length=50)
    group_by: list[Name] = Field(default_factory=list, max_length=10)
    aggregates: list[AggregateSpec] = Field(min_length=1, max_length=50)
    order_by: list[OrderSpec] = Field(default_factory=list, max_length=10)
    limit: Annotated[int, Field(ge=0, le=1_000_000), Integral] | None = None

    def to_query(self) -> b.Query:
        """The equivalent :class:`deniable.query.builder.Query` (no data read).

        Raises:
            InvalidParameter: a malformed part (e.g. ``quantile`` without ``q``).
        """
        q = b.Query(self.table)
        for f in self.where:
            q = q.where(_condition(f))
        if self.group_by:
            q = q.group_by(*self.group_by)
        q = q.agg(*(_aggregate(a) for a in self.aggregates))
        for o in self.order_by:
            q = q.order_by(b.desc(o.name) if o.descending else b.asc(o.name))
        if self.limit is not None:
            q = q.limit(self.limit)
        return q


def _condition(f: Filter) -> b.Expr:
    c = b.col(f.column)
    if f.op in ("is_null", "is_not_null"):
        return c.is_null() if f.op == "is_null" else c.is_not_null()
    if f.op in ("in", "not_in"):
        if not isinstance(f.value, list) or not f.value:
            raise InvalidParameter(f"filter {f.op!r} needs a non-empty list value")
        cond = c.isin(f.value)
        return ~cond if f.op == "not_in" else cond
    if isinstance(f.value, list):
        raise InvalidParameter(f"filter {f.op!r} needs a single value, not a list")
    ops = {
        "=": c.__eq__,
        "!=": c.__ne__,
        "<": c.__lt__,
        "<=": c.__le__,
        ">": c.__gt__,
        ">=": c.__ge__,
    }
    return ops[f.op](f.value)


def _aggregate(a: AggregateSpec) -> b.Expr:
    if a.function == "count":
        agg: b.Expr = b.count() if a.column is None else b.count(a.column)
    else:
        if a.column is None:
            raise InvalidParameter(f"aggregate {a.function!r} needs a column")
        if a.function == "quantile":
            if a.q is None:
                raise InvalidParameter("aggregate 'quantile' needs q (e.g. 0.5)")
            agg = b.quantile(a.column, a.q)
        else:
            fn = {
                "count_distinct": b.count_distinct,
                "sum": b.sum_,
                "mean": b.mean,
                "variance": b.variance,
                "stddev": b.stddev,
                "median": b.median,
            }[a.function]
            agg = fn(a.column)
    return agg if a.alias is None else agg.alias(a.alias)


class _QueryForm(_Request):
    """A request naming a query: SQL text or the builder's JSON form, exactly one."""

    not_null = ("sql", "builder")

    sql: Annotated[str, Field(min_length=1, max_length=20_000)] | SkipJsonSchema[None] = Field(
        None, description="the query as SQL text (or give builder)", json_schema_extra=_no_default
    )
    builder: BuilderQuery | SkipJsonSchema[None] = Field(
        None,
        description="the query in the builder's JSON form (or give sql)",
        json_schema_extra=_no_default,
    )

    @model_validator(mode="after")
    def _one_form(self) -> Self:
        if (self.sql is None) == (self.builder is None):
            raise ValueError("give exactly one of sql and builder")
        return self


class QueryRequest(_QueryForm):
    """A query: SQL text or the builder's JSON form, and what to spend on it."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": ONE_QUERY_FORM,
            "examples": [
                {"sql": "SELECT COUNT(*) AS n FROM students", "epsilon": 0.1},
                {
                    "sql": "SELECT degree, COUNT(*) AS n FROM degrees(friends) GROUP BY degree",
                    "epsilon": 0.1,
                },
                {
                    "builder": {
                        "table": "students",
                        "group_by": ["school"],
                        "aggregates": [{"function": "count", "alias": "n"}],
                    },
                    "epsilon": 0.1,
                },
            ],
        },
    )

    epsilon: Spend | None = Field(None, description="ε to spend (ε and (ε, δ) budgets)")
    delta: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None, description="δ to spend on selecting private group keys"
    )
    rho: Spend | None = Field(None, description="ρ to spend (ρ-zCDP budgets)")
    level: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(
        0.95, description="confidence level of the intervals"
    )
    nonnegative: bool = Field(
        False,
        description="clip counts and their interval ends at 0 (free post-processing, biased "
        "upward near 0); by default counts are unbiased and may be negative",
    )


class IntervalOut(_Model):
    """The confidence interval bounds of one output column, row by row."""

    low: list[float | None]
    high: list[float | None]


class QueryResponse(_Model):
    """A DP answer: released values, their intervals, the charge and the budget left."""

    dataset: str
    query: str = Field(description="the query as compiled (SQL)")
    columns: list[str] = Field(description="output names, in order")
    values: dict[str, list[Scalar]] = Field(description="released values by output name")
    intervals: dict[str, IntervalOut] = Field(description="intervals of noisy outputs")
    level: float
    charge: LossOut = Field(description="what this request was charged (zero for a replay)")
    charge_id: int | None = Field(
        description="the release that paid for this answer: an analyst's own release number "
        "(1, 2, … on this dataset, as in their history), a curator's ledger charge id; null "
        "for a replay of another analyst's answer"
    )
    cached: bool = Field(description="a free replay of an identical earlier query")
    remaining: LossOut = Field(description="what the caller may still spend")
    mechanisms: dict[str, str]
    notes: dict[str, str]
    bounds: dict[str, list[float]]
    privacy_unit: str | None
    max_groups: int
    max_rows: int
    partition_selection: str | None
    row_policies: list[str]
    row_policy: str = Field(
        description="the row policies that applied, in one line (privacy unit, contribution "
        "bounds, clamping ranges)"
    )
    interval_coverage: str = Field(
        description="what the intervals cover: the noise only, around the value after bounding"
    )

    @classmethod
    def of(cls, dataset: str, answer: Answer) -> QueryResponse:
        """The response form of ``answer`` (post-processing only)."""
        frame = answer.to_pandas()
        names = [str(c) for c in frame.columns]
        paired = {n for n in names if f"{n}_low" in names and f"{n}_high" in names}
        bounds_cols = {f"{n}_low" for n in paired} | {f"{n}_high" for n in paired}
        columns = [n for n in names if n not in bounds_cols]
        m = answer.metadata
        return cls(
            dataset=dataset,
            query=m.query,
            columns=columns,
            values={n: [_scalar(v) for v in frame[n].tolist()] for n in columns},
            intervals={
                n: IntervalOut(
                    low=[_real(v) for v in frame[f"{n}_low"].tolist()],
                    high=[_real(v) for v in frame[f"{n}_high"].tolist()],
                )
                for n in columns
                if n in paired
            },
            level=m.level,
            charge=LossOut.of(m.loss),
            charge_id=m.charge_id,
            cached=m.cached,
            remaining=LossOut.of(m.remaining),
            mechanisms=dict(m.mechanisms),
            notes=dict(m.notes),
            bounds={k: list(v) for k, v in m.bounds.items()},
            privacy_unit=m.privacy_unit,
            max_groups=m.max_groups,
            max_rows=m.max_rows,
            partition_selection=m.partition_selection,
            row_policies=list(m.row_policies),
            row_policy=row_policy_line(m),
            interval_coverage=interval_coverage(m),
        )


def _real(v: object) -> float | None:
    if v is None or v is pd.NA or isinstance(v, bool | np.bool_):
        return None
    if isinstance(v, int | float | np.integer | np.floating):
        x = float(v)
        return x if math.isfinite(x) else None
    return None


def _scalar(v: object) -> Scalar:
    """A JSON value: NaN and missing values as null, dates as ISO text."""
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        x = float(v)
        return x if math.isfinite(x) else None
    if isinstance(v, str):
        return v
    if isinstance(v, _dt.date | _dt.datetime | pd.Timestamp):
        return v.isoformat()
    return str(v)


def scalars(values: tuple[object, ...]) -> list[Scalar]:
    """Declared public values as JSON values."""
    return [_scalar(v) for v in values]


# -- accuracy before spending, and tuning the bounds ------------------------------------------

Positive = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class AccuracyRequest(_QueryForm):
    """A dry run: the accuracy a query would get, and optionally the least loss for a target.

    Give the query (``sql`` or ``builder``) and either the loss to spend (``epsilon``;
    ``epsilon`` and ``delta``; or ``rho``) or a ``target`` (half-widths by output name), or
    both. Nothing is read from the data and nothing is charged.
    """

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": ONE_QUERY_FORM,
            "examples": [
                {
                    "sql": "SELECT school, COUNT(*) AS n FROM students GROUP BY school",
                    "epsilon": 0.1,
                },
                {
                    "sql": "SELECT COUNT(*) AS n, AVG(grade) AS g FROM students",
                    "target": {"n": 5, "g": 2},
                    "rows": 100,
                },
            ],
        },
    )

    epsilon: Spend | None = Field(None, description="ε the query would spend")
    delta: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None, description="δ it would spend on selecting private group keys"
    )
    rho: Spend | None = Field(None, description="ρ it would spend (ρ-zCDP budgets)")
    level: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(
        0.95, description="confidence level of the intervals"
    )
    rows: Annotated[int, Field(ge=1, le=10**12), Integral] | None = Field(
        None,
        description="assumed rows per group, for AVG, VARIANCE and STDDEV (whose width "
        "depends on it); a guess, never read from the data",
    )
    target: Annotated[dict[Name, Positive], Field(min_length=1, max_length=50)] | None = Field(
        None,
        description="wanted half-widths by output name (user units): the answer then "
        "includes the least loss that meets every one",
    )


class OutputAccuracyOut(_Model):
    """The expected accuracy of one output (its interval's half-width, before any noise)."""

    name: str = Field(description="the output's name, as the query gives it")
    half_width: float | None = Field(
        description="the interval's half-width in the output's units at `level`; null when "
        "it depends on the data and no `rows` was assumed, and for quantiles"
    )
    rank_error: float | None = Field(
        description="quantiles, MEDIAN, MIN, MAX: rows the value may be off by in rank"
    )
    depends_on: str | None = Field(description="what the width depends on, if anything")
    target: float | None = Field(description="the half-width asked for in `target`, if any")
    meets_target: bool | None = Field(description="whether `half_width` meets `target`")


class AccuracyResponse(_Model):
    """A dry run's answer: expected half-widths, and the least loss meeting the target.

    Nothing was read from the data and nothing was charged (``charged`` is always false).
    """

    dataset: str
    query: str = Field(description="the query as compiled (SQL)")
    level: float
    loss: LossOut = Field(
        description="the loss the widths are for: the one asked, else the least loss found"
    )
    least_loss: LossOut | None = Field(
        description="the least loss whose widths meet every target (when `target` is given)"
    )
    assumed_rows: int | None
    outputs: list[OutputAccuracyOut] = Field(description="each aggregate output, in order")
    remaining: LossOut = Field(description="what the caller may still spend")
    fits: bool = Field(description="whether `loss` fits what the caller may still spend")
    charged: Literal[False] = Field(default=False, description="always false: a dry run is free")
    interval_coverage: str = Field(
        description="what the intervals cover: the noise only, around the value after bounding"
    )

    @classmethod
    def of(cls, dataset: str, result: AccuracyResult) -> AccuracyResponse:
        """The response form of a :class:`~deniable.server.service.AccuracyResult`."""
        report = result.report
        targets = {k.lower(): v for k, v in result.target.items()}
        outputs = []
        for o in report.outputs:
            t = targets.get(o.name.lower())
            width = _real(o.half_width)
            outputs.append(
                OutputAccuracyOut(
                    name=o.name,
                    half_width=width,
                    rank_error=_real(o.rank_error),
                    depends_on=o.depends_on,
                    target=t,
                    meets_target=None if t is None or width is None else width <= t,
                )
            )
        return cls(
            dataset=dataset,
            query=result.query,
            level=report.level,
            loss=LossOut.of(result.loss),
            least_loss=None if result.least is None else LossOut.of(result.least),
            assumed_rows=report.assumed_rows,
            outputs=outputs,
            remaining=LossOut.of(result.remaining),
            fits=result.fits,
            interval_coverage=(
                "the noise only: each interval would cover the value after bounding "
                "(clamping and contribution bounds), not the bounding's bias"
            ),
        )


class TuneRequest(_Request):
    """Measure contributions with DP (charged) and propose ``max_groups`` and ``max_rows``."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [{"table": "students", "group_by": ["school"], "epsilon": 0.1, "groups": 3}]
        },
    )

    table: Name = Field(description="the private table (with a privacy-unit column)")
    group_by: list[Name] = Field(
        default_factory=list, max_length=10, description="the workload's grouping columns"
    )
    epsilon: Positive = Field(description="ε the measurement spends (charged to the caller)")
    workload_epsilon: Positive = Field(
        1.0, description="ε of the workload the proposal's error is computed for (free)"
    )
    groups: Annotated[int, Field(ge=1, le=10**9), Integral] = Field(
        1, description="the workload's number of groups (a public number)"
    )
    apply: bool = Field(
        False,
        description="make the best proposal the table's bounds in this service process "
        "(until it restarts; write it in the configuration to keep it)",
    )
    clamps: dict[Name, Annotated[list[Finite], Field(min_length=2, max_length=2)]] = Field(
        default_factory=dict,
        max_length=20,
        description="numeric columns and a public search range [low, high] each: propose "
        "the clamping range with the least expected error of clamp_workload (half of "
        "epsilon then measures the values: a second charge)",
    )
    clamp_workload: Literal["sum", "avg"] = Field(
        "sum", description="the aggregate per group the clamping ranges are chosen for"
    )


class ClampChoiceOut(_Model):
    """One candidate clamping range and its expected error per group (post-processing)."""

    low: float
    high: float
    bias: float = Field(description="expected error from clamping, per group")
    noise_sd: float = Field(description="the noise's standard deviation per group")
    expected_error: float


class ClampOut(_Model):
    """A proposed clamping range, and the trade-off it was chosen from."""

    low: float
    high: float
    workload: Literal["sum", "avg"]
    trade_off: list[ClampChoiceOut] = Field(
        description="for upper ends around the chosen one, the best range each (its error)"
    )


class ChoiceOut(_Model):
    """One candidate policy and its expected error per group (post-processing, free)."""

    max_groups: int
    max_rows: int
    rows_kept: float | None = Field(description="expected share of rows the bounds keep")
    bias: float | None = Field(description="expected rows lost per group (from bounding)")
    noise_sd: float | None = Field(description="the noise's standard deviation per group")
    expected_error: float | None = Field(description="√(bias² + noise²), in rows per group")

    @classmethod
    def of(cls, c: Choice) -> ChoiceOut:
        """The response form of a :class:`~deniable.curator.tune.Choice`."""
        return cls(
            max_groups=c.max_groups,
            max_rows=c.max_rows,
            rows_kept=_real(c.kept),
            bias=_real(c.bias),
            noise_sd=_real(c.noise),
            expected_error=_real(c.error),
        )


class TuneResponse(_Model):
    """The DP contribution histograms (charged) and the proposals built from them (free)."""

    dataset: str
    table: str
    group_by: list[str]
    charge: LossOut = Field(description="what the measurement was charged")
    charge_id: int
    remaining: LossOut = Field(description="what the caller may still spend")
    bin_low: list[int] = Field(description="the least value of each histogram bin (public)")
    joint_bin_low: list[int] = Field(
        description="the least value of each bin of either axis of 'rows_by_groups' (public)"
    )
    histograms: dict[str, list[int]] = Field(
        description="noisy numbers of people per bin: 'rows' (rows per person), 'groups' "
        "(groups per person), 'rows_per_group' (a person's largest group), 'rows_by_groups' "
        "(the joint of rows and groups per person on the coarser grid joint_bin_low, "
        "flattened row-major)"
    )
    workload_epsilon: float
    groups: int
    best: ChoiceOut
    proposals: list[ChoiceOut] = Field(description="the 10 best candidates, best first")
    applied: bool = Field(description="whether the best candidate became the table's bounds")
    configuration: str = Field(description="the best candidate as configuration lines")
    clamps: dict[str, ClampOut] = Field(
        default_factory=dict, description="the proposed clamping ranges, by column"
    )
    clamp_charge_id: int | None = Field(
        None, description="the charge of the value histograms (when clamps were asked)"
    )

    @classmethod
    def of(cls, dataset: str, result: TuneResult) -> TuneResponse:
        """The response form of a :class:`~deniable.server.service.TuneResult`."""
        report = result.report
        h = report.histograms
        best = report.best
        return cls(
            dataset=dataset,
            table=result.table,
            group_by=list(h.groups),
            charge=LossOut.of(Epsilon(epsilon=h.epsilon + report.clamp_epsilon)),
            charge_id=h.charge_id,
            remaining=LossOut.of(result.remaining),
            bin_low=list(EDGES),
            joint_bin_low=list(JOINT_EDGES),
            histograms={k: [int(x) for x in v.tolist()] for k, v in h.counts.items()},
            workload_epsilon=float(report.workload_epsilon),
            groups=report.groups,
            best=ChoiceOut.of(best),
            proposals=[ChoiceOut.of(c) for c in report.choices[:10]],
            applied=result.applied,
            configuration=f"max_groups = {best.max_groups}\nmax_rows = {best.max_rows}",
            clamps={
                column: ClampOut(
                    low=low,
                    high=high,
                    workload="avg" if report.clamp_workload == "avg" else "sum",
                    trade_off=[
                        ClampChoiceOut(
                            low=float(r["low"]),
                            high=float(r["high"]),
                            bias=float(r["bias"]),
                            noise_sd=float(r["noise sd"]),
                            expected_error=float(r["expected error"]),
                        )
                        for r in report.clamp_table(column).to_dict(orient="records")
                    ],
                )
                for column, (low, high) in report.clamps.items()
            },
            clamp_charge_id=report.clamp_charge_id,
        )


MAX_SYNTHETIC_ROWS_HTTP = 200_000
"""Most rows one synthetic table may have over HTTP (its size is the request's, public)."""


class QuantileBinsIn(_Model):
    """A numeric column's bins at DP quantiles, measured within the release (ρ/10 of it)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    n: Annotated[int, Field(ge=2, le=MAX_BINS), Integral] = Field(
        16, description="most bins (edges at the noisy j/n quantiles)"
    )
    within: Annotated[list[Finite], Field(min_length=2, max_length=2)] | None = Field(
        None,
        description="the public search range [lo, hi] (default: the column's declared bounds)",
    )
    scale: Literal["linear", "log"] = Field(
        "linear", description="grid cells equal (linear) or growing geometrically (log)"
    )

    def spec(self) -> Quantiles:
        """The synthesizer's form of this request."""
        within = None if self.within is None else (self.within[0], self.within[1])
        return Quantiles(self.n, within=within, scale=self.scale)


class SynthesizeRequest(_Request):
    """A DP synthetic table of a private table (curators; charged once)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"table": "students", "rows": 1000, "epsilon": 1, "delta": 1e-6, "method": "mst"}
            ]
        },
    )

    table: Name = Field(description="the private table")
    rows: Annotated[int, Field(ge=1, le=MAX_SYNTHETIC_ROWS_HTTP), Integral] = Field(
        description="rows of the synthetic table (a public number)"
    )
    columns: list[Name] | None = Field(
        None, max_length=64, description="its columns (default: all but the privacy unit)"
    )
    epsilon: Spend | None = Field(None, description="ε of the release (with delta)")
    delta: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] | None = Field(
        None, description="δ of the release"
    )
    rho: Spend | None = Field(None, description="ρ of the release (instead of ε and δ)")
    method: Literal["mst", "aim"] = Field("mst", description="MST or AIM")
    bins: Annotated[int, Field(ge=2, le=1024), Integral] = Field(
        16, description="equal-width bins of each numeric column over its declared bounds"
    )
    quantiles: dict[Name, QuantileBinsIn] | None = Field(
        None,
        max_length=64,
        description="columns binned at DP quantiles instead (measured within the release)",
    )
    select_keys: dict[Name, Annotated[int, Field(ge=1, le=MAX_KEYS), Integral]] | None = Field(
        None,
        max_length=64,
        description=(
            "columns whose keys DP partition selection chooses (within the release; needs "
            "delta), each with the most keys kept"
        ),
    )

    def bin_specs(self) -> dict[str, Quantiles | SelectKeys]:
        """The measured columns' specifications (empty: every column's bins are public)."""
        out: dict[str, Quantiles | SelectKeys] = {
            c: q.spec() for c, q in (self.quantiles or {}).items()
        }
        for c, most in (self.select_keys or {}).items():
            if c in out:
                raise InvalidParameter(f"column {c!r} is in both quantiles and select_keys")
            out[c] = SelectKeys(max_keys=most)
        return out


class SynthEventOut(_Model):
    """One noisy release inside a synthetic release (public: cliques and noise scales)."""

    kind: Literal["marginal", "selection", "bins", "keys"] = Field(
        description=(
            "a noisy marginal, a selected clique, a column's DP quantile histogram, or a "
            "column's keys by partition selection"
        )
    )
    clique: list[str]
    rho: str = Field(description="its zCDP loss, exact")
    sigma: float | None = Field(
        None, description="the Gaussian noise's σ in counts (marginals, bins)"
    )
    epsilon: str | None = Field(None, description="its ε (selections, keys)")
    delta: str | None = Field(None, description="its δ (keys)")


class SynthesizeResponse(_Model):
    """The synthetic table, what it was charged, and what was measured."""

    dataset: str
    table: str
    method: str
    charge: LossOut = Field(description="the one charge of the whole release")
    charge_id: int
    remaining: LossOut = Field(description="what the caller may still spend")
    columns: list[str]
    data: dict[str, list[Any]] = Field(description="the synthetic rows, column by column")
    measurements: list[SynthEventOut] = Field(
        description="every measured marginal and selection, in order"
    )

    @classmethod
    def of(cls, dataset: str, result: SynthResult) -> SynthesizeResponse:
        """The response form of a :class:`~deniable.server.service.SynthResult`."""
        syn = result.synthetic
        return cls(
            dataset=dataset,
            table=result.table,
            method=syn.method,
            charge=LossOut.of(syn.loss),
            charge_id=syn.charge_id,
            remaining=LossOut.of(result.remaining),
            columns=list(syn.table.column_names),
            data=syn.table.to_pydict(),
            measurements=[
                SynthEventOut(
                    kind=_event_kind(e.kind),
                    clique=list(e.clique),
                    rho=str(e.rho),
                    sigma=e.sigma,
                    epsilon=None if e.epsilon is None else str(e.epsilon),
                    delta=None if e.delta is None else str(e.delta),
                )
                for e in syn.events
            ],
        )


def _event_kind(kind: str) -> Literal["marginal", "selection", "bins", "keys"]:
    if kind in ("selection", "bins", "keys"):
        return kind  # type: ignore[return-value]
    return "marginal"


class UtilityAnalysisRequest(_Request):
    """A NON-PRIVATE exact analysis of what each candidate policy keeps (curators only)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"table": "students", "group_by": ["school"]}]},
    )

    table: Name = Field(description="the private table (with a privacy-unit column)")
    group_by: list[Name] = Field(
        default_factory=list, max_length=10, description="the workload's grouping columns"
    )


NON_PRIVATE_LABEL = (
    "NON-PRIVATE: exact values computed from the data without noise, for the curator only. "
    "Not differentially private, not charged, never stored as an answer: do not share them "
    "with analysts."
)


class UtilityAnalysisResponse(_Model):
    """NON-PRIVATE: the exact share of rows each ``(max_groups, max_rows)`` would keep."""

    non_private: Literal[True] = Field(default=True, description="always true: these are exact")
    label: str = Field(default=NON_PRIVATE_LABEL, description="what these numbers are")
    dataset: str
    table: str
    group_by: list[str]
    rows: int = Field(description="the table's rows with a privacy unit (exact)")
    candidates: list[int] = Field(description="the bounds tried, on both axes")
    kept_share: list[list[float | None]] = Field(
        description="kept_share[i][j]: expected share of rows kept with max_groups = "
        "candidates[i] and max_rows = candidates[j] (exact)"
    )
    charged: Literal[False] = Field(default=False, description="always false: nothing is charged")

    @classmethod
    def of(
        cls, dataset: str, table: str, group_by: list[str], u: UtilityAnalysis
    ) -> UtilityAnalysisResponse:
        """The response form of a :class:`~deniable.curator.tune.UtilityAnalysis`."""
        n = len(u.candidates)
        return cls(
            dataset=dataset,
            table=table,
            group_by=group_by,
            rows=u.rows,
            candidates=list(u.candidates),
            kept_share=[
                [_real(u.share(u.candidates[i], u.candidates[j])) for j in range(n)]
                for i in range(n)
            ],
        )


# -- history and management ------------------------------------------------------------------


class ReleaseOut(_Model):
    """One committed charge of the ledger."""

    id: int = Field(
        description="an analyst's own release number in their history (1, 2, … on this "
        "dataset: the global ids count everyone's releases); the ledger's charge id for "
        "curators"
    )
    number: int = Field(
        description="the release number its analyst knows it by (1, 2, … per dataset)"
    )
    dataset: str
    analyst: str
    query: str
    loss: LossOut
    time: _dt.datetime
    status: str = Field(description="'charged', or 'answered' once the answer is stored")


class AnalystOut(_Model):
    """A registered analyst (never its token or digest)."""

    name: str
    role: Literal["curator", "analyst"]
    created: _dt.datetime
    revoked_at: _dt.datetime | None


class NewAnalyst(_Request):
    """An analyst to create."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.@-]+$")]
    role: Literal["curator", "analyst"] = "analyst"


class NewAnalystOut(_Model):
    """A created analyst and its token, shown once (only its hash is stored)."""

    name: str
    role: Literal["curator", "analyst"]
    token: str


class AllowanceIn(LossIn):
    """An analyst's slice of a dataset's cap, reserved for them or not."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "oneOf": [
                {"required": ["epsilon"], "properties": {"rho": False}},
                {"required": ["rho"], "properties": {"epsilon": False, "delta": False}},
            ],
            "examples": [{"epsilon": 0.5}, {"epsilon": 0.5, "reserve": True}, {"rho": 0.1}],
        },
    )

    reserve: bool = Field(
        False,
        description="also reserve the slice: what the analyst has not spent of it is held "
        "back from every other analyst (refused when it exceeds what is unspent and "
        "unreserved); false releases a reservation they held",
    )


class AllowanceOut(_Model):
    """An analyst's view of a dataset's budget."""

    analyst: str
    budget: BudgetOut


class ExplainOut(_Model):
    """What ε means for an attacker with a given prior (Desfontaines, Prop. 1)."""

    epsilon: float
    prior: float
    posterior_low: float
    posterior_high: float
    text: str


class WhoAmI(_Model):
    """The caller."""

    name: str
    role: str


def budget_out(view: BudgetView) -> BudgetOut:
    """The response form of a :class:`~deniable.server.service.BudgetView`."""
    return BudgetOut(
        dataset=view.dataset,
        cap=LossOut.of(view.cap),
        spent=LossOut.of(view.spent),
        remaining=LossOut.of(view.remaining),
        allowance=None if view.allowance is None else LossOut.of(view.allowance),
        reserved=None if view.reserved is None else LossOut.of(view.reserved),
    )


def public_keys_out(keys: Mapping[str, tuple[object, ...]]) -> dict[str, list[Scalar]]:
    """Declared domains as JSON lists."""
    return {k: scalars(v) for k, v in keys.items()}


def graph_out(g: GraphMetadata) -> GraphOut:
    """The response form of a :class:`~deniable.server.service.GraphMetadata`."""
    return GraphOut(
        name=g.name,
        unit="node" if g.unit == "node" else "edge",
        max_degree=g.max_degree,
        source_col=g.source_col,
        target_col=g.target_col,
        node_key=g.node_key,
        nodes_name=g.nodes_name,
        node_attributes=list(g.node_attributes),
        domains=public_keys_out(g.domains),
    )

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
from collections.abc import Mapping
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, model_validator

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InvalidParameter
from deniable.query import builder as b
from deniable.query.answer import Answer, interval_coverage, row_policy_line, show_loss
from deniable.server.service import BudgetView, GraphMetadata

Scalar = int | float | str | bool | None
Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ----------------------------------------------------------------------------------


class ErrorDetail(_Model):
    """A machine-readable error: a stable ``code`` and a message for people."""

    code: str = Field(description="stable machine-readable code, e.g. budget_exceeded")
    message: str = Field(description="what went wrong and what to change; never data")


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


Number = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class LossIn(_Model):
    """A privacy loss given by a curator: ``epsilon``; ``epsilon`` and ``delta``; or ``rho``."""

    epsilon: Number | None = None
    delta: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    rho: Number | None = None

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
    remaining: LossOut = Field(description="what the caller may still spend")
    allowance: LossOut | None = Field(description="the caller's slice of the cap, if any")


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


class Filter(_Model):
    """A row filter ``column op value`` (all filters AND together)."""

    column: Name
    op: CompareOp
    value: Scalar | list[Scalar] = None


AggregateName = Literal[
    "count", "count_distinct", "sum", "mean", "variance", "stddev", "median", "quantile"
]


class AggregateSpec(_Model):
    """One aggregate output."""

    function: AggregateName
    column: Name | None = Field(None, description="the column (none for count(*))")
    q: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None, description="the quantile's level (quantile only)"
    )
    alias: Name | None = None


class OrderSpec(_Model):
    """Sort by an output name."""

    name: Name
    descending: bool = False


class BuilderQuery(_Model):
    """The builder's JSON form: one table, filters, group keys, aggregates, order, limit."""

    table: Name
    where: list[Filter] = Field(default_factory=list, max_length=50)
    group_by: list[Name] = Field(default_factory=list, max_length=10)
    aggregates: list[AggregateSpec] = Field(min_length=1, max_length=50)
    order_by: list[OrderSpec] = Field(default_factory=list, max_length=10)
    limit: Annotated[int, Field(ge=0, le=1_000_000)] | None = None

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


class QueryRequest(_Model):
    """A query: SQL text or the builder's JSON form, and what to spend on it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
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
            ]
        },
    )

    sql: Annotated[str, Field(min_length=1, max_length=20_000)] | None = None
    builder: BuilderQuery | None = None
    epsilon: Number | None = Field(None, description="ε to spend (ε and (ε, δ) budgets)")
    delta: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None, description="δ to spend on selecting private group keys"
    )
    rho: Number | None = Field(None, description="ρ to spend (ρ-zCDP budgets)")
    level: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(
        0.95, description="confidence level of the intervals"
    )

    @model_validator(mode="after")
    def _one_form(self) -> QueryRequest:
        if (self.sql is None) == (self.builder is None):
            raise ValueError("give exactly one of sql and builder")
        return self


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
    charge_id: int | None
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


# -- history and management ------------------------------------------------------------------


class ReleaseOut(_Model):
    """One committed charge of the ledger."""

    id: int
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


class NewAnalyst(_Model):
    """An analyst to create."""

    name: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.@-]+$")]
    role: Literal["curator", "analyst"] = "analyst"


class NewAnalystOut(_Model):
    """A created analyst and its token, shown once (only its hash is stored)."""

    name: str
    role: Literal["curator", "analyst"]
    token: str


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

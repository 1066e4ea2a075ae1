"""``compile``: a query's text and the catalog in, a :class:`QueryProgram` out — pure.

The one artifact in the middle of the query path (DESIGN.md §6). A program holds everything
public about how a query will be answered: the DP plan (aggregates and their measures,
contribution bounds, budget split, how keys are released), the typed privacy events of the
release and their composition — checked here, once, against the loss to be charged — and
the key under which its answer is cached. It reads no data and charges nothing; the bounded
aggregation statement is a sqlglot tree built from it for any engine's dialect
(:meth:`QueryProgram.statement`), and :func:`deniable.query.execute.execute` runs, charges
and releases it. The Session, the CLI, the service, the attack lab and the tests all go
through these two calls.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from deniable.accounting.loss import PrivacyLoss, Rho
from deniable.engines.base import Capabilities
from deniable.mechanisms.events import PrivacyEvent
from deniable.query.answer import loss_to_json
from deniable.query.catalog import TableInfo
from deniable.query.catalog.validate import validate
from deniable.query.parse import parse
from deniable.query.plan import QUANTILE_GRID, DPPlan, make_plan, requested_loss
from deniable.query.rewrite.compile import CompiledQuery, Secrets, compile_plan

CACHE_KEY_VERSION = 1

Number = float | int | Fraction


@dataclass(frozen=True)
class QueryOptions:
    """What the analyst asks to spend, and how (every field public).

    Attributes:
        budget_kind: the kind of the dataset's budget (the loss is expressed in it).
        epsilon: ε to spend (pure and (ε, δ) budgets).
        delta: δ to spend on selecting private group keys ((ε, δ) budgets).
        rho: ρ to spend (zCDP budgets).
        split: relative weights of the aggregates' shares of the budget.
        bounds: clamping ranges overriding the curator's.
        max_groups: groups per privacy unit kept (overrides the table's policy).
        max_rows: rows per privacy unit and group kept (overrides the table's policy).
        level: confidence level of the intervals.
        quantile_grid: steps of the quantile candidate grid.
    """

    budget_kind: type[PrivacyLoss]
    epsilon: Number | None = None
    delta: Number | None = None
    rho: Number | None = None
    split: Mapping[str, Number] | None = None
    bounds: Mapping[str, Sequence[Number]] | None = None
    max_groups: int | None = None
    max_rows: int | None = None
    level: float = 0.95
    quantile_grid: int = QUANTILE_GRID


@dataclass(frozen=True)
class QueryProgram:
    """A compiled query: everything public about its answer, nothing read from data.

    Attributes:
        plan: the DP plan.
        cache_key: identical for identical questions on identical data (text normalised,
            options, policy and data version); a replay is served from the ledger's cache.
    """

    plan: DPPlan
    cache_key: str

    @property
    def text(self) -> str:
        """The query as the analyst wrote it."""
        return self.plan.query.parsed.text

    @property
    def table(self) -> TableInfo:
        """The private table the program reads."""
        return self.plan.query.table

    @property
    def loss(self) -> PrivacyLoss:
        """What executing the program costs (before amplification by sampling)."""
        return self.plan.loss

    @property
    def events(self) -> tuple[PrivacyEvent, ...]:
        """The typed privacy events of the release; they compose to :attr:`loss`."""
        return self.plan.events

    def statement(
        self,
        caps: Capabilities,
        relation: str,
        secrets: Secrets,
        joined: Mapping[str, str] | None = None,
    ) -> CompiledQuery:
        """The bounded-aggregation statement for an engine, with per-execution secrets.

        Args:
            caps: the engine's capabilities (its dialect).
            relation: the engine's name for the main table.
            secrets: keys of the pseudo-random row and partition orders (from the CSPRNG
                at each execution; fixed ones only in tests).
            joined: the engine's name of each joined table, by catalog name.
        """
        return compile_plan(self.plan, caps, relation, secrets, joined)


def compile(query: str, catalog: Mapping[str, TableInfo], options: QueryOptions) -> QueryProgram:
    """Compile ``query`` against ``catalog``; pure: reads no data, charges nothing.

    The composition of the program's privacy events is checked here against the loss to be
    charged (:func:`deniable.query.plan.check_loss`) — once, before anything is written.

    Raises:
        SQLError: the text does not parse, or names unknown tables/columns.
        UnsafeQuery: the query would release rows or unbounded values.
        InvalidParameter: malformed options.
        InternalError: the plan's events do not compose to its loss (a bug).

    Examples:
        >>> import pandas as pd
        >>> from deniable.accounting.loss import Epsilon
        >>> from deniable.query.catalog import Column, ColumnKind, TableInfo, make_policy
        >>> cols = (Column("x", "BIGINT", ColumnKind.INTEGER),)
        >>> t = TableInfo("t", cols, make_policy("t", cols, privacy_unit=None, bounds=None,
        ...     max_groups=None, max_rows=None, public_keys=None), "v1")
        >>> p = compile("SELECT COUNT(*) AS n FROM t", {"t": t},
        ...             QueryOptions(budget_kind=Epsilon, epsilon=0.5))
        >>> p.loss
        Epsilon(epsilon=0.5)
    """
    if not isinstance(options, QueryOptions):
        raise TypeError("options must be a QueryOptions")
    plan = _planner(query, catalog, options)(
        requested_loss(
            options.budget_kind, epsilon=options.epsilon, delta=options.delta, rho=options.rho
        )
    )
    return QueryProgram(plan=plan, cache_key=_cache_key(plan, options))


def plans_at(
    query: str, catalog: Mapping[str, TableInfo], options: QueryOptions
) -> Callable[[Fraction], DPPlan]:
    """Parse and validate ``query`` once; plan it at any total budget (ε, or ρ).

    For budget searches (:func:`deniable.query.accuracy.budget_for`): each plan equals
    :func:`compile`'s at that budget (``options``' own ε or ρ is replaced), without parsing
    the text again. Reads no data.

    Raises:
        SQLError, UnsafeQuery, InvalidParameter: as :func:`compile`, when first called for
            the text and when a budget is planned.
    """
    plan = _planner(query, catalog, options)
    rho = options.budget_kind is Rho

    def at(budget: Fraction) -> DPPlan:
        return plan(
            requested_loss(
                options.budget_kind,
                epsilon=None if rho else budget,
                delta=options.delta,
                rho=budget if rho else None,
            )
        )

    return at


def _planner(
    query: str, catalog: Mapping[str, TableInfo], options: QueryOptions
) -> Callable[[PrivacyLoss], DPPlan]:
    """``query`` parsed and validated against ``catalog`` once; plans it for a requested loss."""
    validated = validate(
        parse(query),
        catalog,
        bounds=options.bounds,
        max_groups=options.max_groups,
        max_rows=options.max_rows,
    )

    def plan(requested: PrivacyLoss) -> DPPlan:
        return make_plan(
            validated,
            requested,
            split=options.split,
            level=options.level,
            quantile_grid=options.quantile_grid,
        )

    return plan


def _policy_json(info: TableInfo) -> dict[str, object]:
    policy = info.policy
    return {
        "unit": policy.privacy_unit,
        "bounds": {k: [str(b.lower), str(b.upper)] for k, b in policy.bounds.items()},
        "max_groups": policy.max_groups,
        "max_rows": policy.max_rows,
        "public_keys": {k: [repr(v) for v in vs] for k, vs in policy.public_keys.items()},
    }


def _cache_key(plan: DPPlan, options: QueryOptions) -> str:
    info = plan.query.table
    payload: dict[str, object] = {
        "v": CACHE_KEY_VERSION,
        "sql": plan.query.parsed.normalized,
        "table": info.name,
        "data": info.version,
        "policy": _policy_json(info),
        "loss": loss_to_json(plan.requested),
        "split": None
        if options.split is None
        else {str(k): str(Fraction(v)) for k, v in options.split.items()},
        "bounds": None
        if options.bounds is None
        else {str(k): [str(Fraction(x)) for x in v] for k, v in options.bounds.items()},
        "max_groups": plan.query.max_groups,
        "max_rows": plan.query.max_rows,
        "level": repr(plan.level),
        "quantile_grid": options.quantile_grid,
    }
    if plan.query.joins:
        # the joined tables' data and declarations are part of the question too
        payload["joins"] = [
            {"table": j.table.name, "data": j.table.version, "policy": _policy_json(j.table)}
            for j in plan.query.joins
        ]
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()

"""The curator's session: tables, policy, budget, ledger and answer cache in one object.

A :class:`Session` owns a durable ledger entry (one dataset, one total budget shared by
all its tables and analysts), the registered tables (data stays in the engine) and the query
path: parse → validate → plan → compile → run the bounded aggregation in the engine →
charge the ledger → add noise → store and return the answer. Refused queries (unsafe SQL,
bad parameters, over budget) fail before anything is charged; a failure of the engine
happens before the charge too, and nothing computed from the data leaves before the charge
is committed.

Privacy guarantee: with neighbouring datasets differing in all rows of one privacy unit
(one row for tables without one), every answer is DP with the loss charged for it, and by
sequential composition everything ever answered on the session's dataset is within its cap.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from deniable.accounting.amplification import sampling_rate
from deniable.accounting.conversions import convert
from deniable.accounting.filter import BudgetFilter
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.engines.base import Engine, TableBinding
from deniable.engines.duckdb import DuckDBEngine
from deniable.errors import BudgetExceeded, InternalError, InvalidParameter, PrivacyWarning
from deniable.ledger import Charge, Ledger
from deniable.noise.source import RandomSource, resolve
from deniable.query.answer import (
    Answer,
    AnswerMetadata,
    loss_to_json,
    show_loss,
    zero_like,
)
from deniable.query.catalog import Column, TableInfo, kind_of, make_policy
from deniable.query.catalog.validate import validate
from deniable.query.parse import parse
from deniable.query.plan import QUANTILE_GRID, DPPlan, check_loss, make_plan, requested_loss
from deniable.query.release import ExactAggregates, NoisyAnswer, read_result, release
from deniable.query.rewrite.compile import (
    CompiledQuery,
    Secrets,
    compile_plan,
    unit_identity_sql,
)
from deniable.sampling.account import SampleAccount

CACHE_KEY_VERSION = 1


@dataclass(frozen=True)
class BudgetStatus:
    """The session dataset's budget as the ledger records it.

    Attributes:
        cap: the total budget.
        spent: exact total charged so far.
        remaining: what is left.
        history: every charge, in commit order.
    """

    cap: PrivacyLoss
    spent: PrivacyLoss
    remaining: PrivacyLoss
    history: list[Charge]

    def __repr__(self) -> str:
        return (
            f"BudgetStatus(cap: {show_loss(self.cap)}; spent: {show_loss(self.spent)}; "
            f"remaining: {show_loss(self.remaining)}; {len(self.history)} releases)"
        )


class Session:
    """A curator's DP query session over registered tables.

    Args:
        budget: the dataset's total privacy budget (``Epsilon``, ``EpsilonDelta`` or ``Rho``).
        ledger: the ledger file (created if missing) or an open :class:`~deniable.ledger.Ledger`.
        dataset: the ledger's name for this dataset (its budget is shared by all sessions
            opened on the same ledger with this name, across processes).
        analyst: who is asking (recorded with every charge).
        engine: the engine adapter (default: a private embedded DuckDB).
        source: randomness for noise and the bounding orders (default: the OS CSPRNG;
            a seeded source is for tests only and triggers a PrivacyWarning).

    Raises:
        InvalidParameter: malformed arguments, or a ledger that already holds this dataset
            with a different cap (:class:`~deniable.ledger.CapConflict`).

    Examples:
        >>> import tempfile, os, pandas as pd
        >>> from deniable.accounting.loss import Epsilon
        >>> d = tempfile.mkdtemp()
        >>> s = Session(budget=Epsilon(epsilon=1), ledger=os.path.join(d, "ledger.db"))
        >>> _ = s.add_table("t", pd.DataFrame({"x": range(100)}))
        >>> a = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
        >>> a.columns
        ['n', 'n_low', 'n_high']
        >>> s.budget.remaining
        Epsilon(epsilon=0.5)
        >>> s.close()
    """

    def __init__(
        self,
        *,
        budget: PrivacyLoss,
        ledger: str | os.PathLike[str] | Ledger,
        dataset: str = "default",
        analyst: str = "analyst",
        engine: Engine | None = None,
        source: RandomSource | None = None,
    ) -> None:
        if not isinstance(budget, Epsilon | EpsilonDelta | Rho):
            raise InvalidParameter("budget must be an Epsilon, EpsilonDelta or Rho")
        if not isinstance(dataset, str) or not dataset:
            raise InvalidParameter("dataset must be a non-empty string")
        if not isinstance(analyst, str) or not analyst:
            raise InvalidParameter("analyst must be a non-empty string")
        if source is not None and not getattr(source, "secure", False):
            warnings.warn(
                "this session draws noise from a non-secure (seeded) source: for tests only",
                PrivacyWarning,
                stacklevel=2,
            )
        self._owns_ledger = not isinstance(ledger, Ledger)
        self._ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
        self._owns_engine = engine is None
        self._engine: Engine = DuckDBEngine() if engine is None else engine
        self._source = source
        self._budget = budget
        self._dataset = dataset
        self._analyst = analyst
        self._tables: dict[str, TableInfo] = {}
        self._bindings: dict[str, TableBinding] = {}
        self._samples: dict[str, SampleAccount] = {}
        try:
            self._ledger.register(dataset, budget)
        except BaseException:
            self.close()
            raise

    # -- curator ---------------------------------------------------------------------------

    def add_table(
        self,
        name: str,
        source: object,
        *,
        privacy_unit: str | None = None,
        bounds: Mapping[str, Sequence[float | int | Fraction]] | None = None,
        max_groups: int | None = None,
        max_rows: int | None = None,
        public_keys: Mapping[str, Sequence[object]] | None = None,
        version: str | None = None,
        sample_rate: float | Fraction | None = None,
    ) -> TableInfo:
        """Register a table. Its rows stay in the engine; only its schema is read here.

        Args:
            name: the name analysts use in ``FROM``.
            source: a Parquet/CSV path, a pandas or polars DataFrame, an Arrow table, a
                DuckDB relation, or a DuckDB connection holding a table called ``name``.
            privacy_unit: the column identifying a person (user-level privacy); None means
                each row is its own unit.
            bounds: clamping range ``(lower, upper)`` of numeric columns that may be summed,
                averaged or used in quantiles. Must not be derived from the data.
            max_groups: most groups one person may contribute to per query (default 1).
            max_rows: most rows one person may contribute to one group (default 1).
            public_keys: declared domains of group-key columns (public; all are output).
            version: the data version for the answer cache (default: a content fingerprint
                computed in the engine; re-register after changing the data).
            sample_rate: answer queries on a Bernoulli(β) sample of the privacy units
                instead of the whole table (β ∈ (0, 1]). The sample is drawn once, here, in
                the engine, with a secret key from the session's randomness; every privacy
                unit (in its canonical form) is kept or dropped with all its rows. Queries
                on it are charged the amplified loss of Li–Qardaji–Su Theorem 1: the *n*-th
                query costs ``amplify(L₁ + … + Lₙ) − amplify(L₁ + … + Lₙ₋₁)`` where
                ``amplify(ε, δ) = (ln(1 + β(e^ε − 1)), βδ)``, so the session's charges for the
                sample add up to the amplified loss of everything asked of it. Answers
                describe the sample (divide counts and sums by β to estimate the table's;
                the intervals cover the noise, not the sampling error). Needs an ``Epsilon``
                or ``EpsilonDelta`` budget. The sample lives as long as the session.

        Returns:
            The table's catalog entry (public metadata).

        Raises:
            InvalidParameter: unknown columns, bad bounds, unsupported source, duplicate name,
                a sampling rate outside (0, 1] or with a ρ-zCDP budget.
        """
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name must be a non-empty string")
        if any(n.lower() == name.lower() for n in self._tables):
            raise InvalidParameter(f"a table named {name!r} is already registered")
        rate = None if sample_rate is None else self._sample_rate(sample_rate)
        binding = self._engine.bind(name, source, version=version)
        columns = tuple(Column(c, t, kind_of(t)) for c, t in binding.columns)
        policy = make_policy(
            name,
            columns,
            privacy_unit=privacy_unit,
            bounds=bounds,
            max_groups=max_groups,
            max_rows=max_rows,
            public_keys=public_keys,
        )
        if rate is not None:
            unit = policy.privacy_unit
            identity = (
                None
                if unit is None
                else unit_identity_sql(
                    next(c for c in columns if c.name == unit), self._engine.capabilities
                )
            )
            binding = self._engine.sample(
                binding, rate=rate, identity=identity, source=self._source
            )
            self._samples[name] = SampleAccount(rate=rate)
        info = TableInfo(
            name=name,
            columns=columns,
            policy=policy,
            version=binding.version,
            sample_rate=rate,
        )
        self._tables[name] = info
        self._bindings[name] = binding
        return info

    def _sample_rate(self, sample_rate: float | Fraction) -> Fraction:
        if isinstance(self._budget, Rho):
            raise InvalidParameter(
                "sample_rate needs an Epsilon or EpsilonDelta budget: amplification by "
                "sampling (Li–Qardaji–Su) is stated for (ε, δ)-DP, not ρ-zCDP"
            )
        return sampling_rate(sample_rate)

    @property
    def tables(self) -> Mapping[str, TableInfo]:
        """Registered tables (public metadata)."""
        return MappingProxyType(self._tables)

    @property
    def budget(self) -> BudgetStatus:
        """The dataset's cap, spent total, remaining budget and release history."""
        return BudgetStatus(
            cap=self._ledger.cap(self._dataset),
            spent=self._ledger.spent(self._dataset),
            remaining=self._ledger.remaining(self._dataset),
            history=self._ledger.history(self._dataset),
        )

    # -- analyst ---------------------------------------------------------------------------

    def plan(
        self,
        query: str,
        *,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        rho: float | Fraction | None = None,
        split: Mapping[str, float | int | Fraction] | None = None,
        bounds: Mapping[str, Sequence[float | int | Fraction]] | None = None,
        max_groups: int | None = None,
        max_rows: int | None = None,
        level: float = 0.95,
        quantile_grid: int = QUANTILE_GRID,
    ) -> DPPlan:
        """Plan ``query`` without running it: no data is read and nothing is charged.

        Raises the same refusals as :meth:`sql`.
        """
        parsed = parse(query)
        validated = validate(
            parsed, self._tables, bounds=bounds, max_groups=max_groups, max_rows=max_rows
        )
        requested = requested_loss(type(self._budget), epsilon=epsilon, delta=delta, rho=rho)
        return make_plan(
            validated, requested, split=split, level=level, quantile_grid=quantile_grid
        )

    def explain(self, query: str, **options: Any) -> str:
        """The DP plan and the generated engine SQL of ``query`` (secrets shown as 0)."""
        plan = self.plan(query, **options)
        binding = self._bindings[plan.query.table.name]
        compiled = compile_plan(plan, self._engine.capabilities, binding.name, Secrets(0, 0))
        return json.dumps(plan.describe(), indent=2) + "\n\n" + compiled.sql

    def sql(
        self,
        query: str,
        *,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        rho: float | Fraction | None = None,
        split: Mapping[str, float | int | Fraction] | None = None,
        bounds: Mapping[str, Sequence[float | int | Fraction]] | None = None,
        max_groups: int | None = None,
        max_rows: int | None = None,
        level: float = 0.95,
        quantile_grid: int = QUANTILE_GRID,
    ) -> Answer:
        """Answer an aggregate SQL query with differential privacy.

        The loss charged is ``epsilon`` (pure budgets), ``(epsilon, delta)`` with δ spent only
        on selecting private group keys (approximate budgets), or ``rho`` (zCDP budgets) — or
        nothing when the identical query (same normalised SQL, options and data version) was
        answered before, in which case the stored answer is returned.

        Args:
            query: ``SELECT keys, aggregates FROM table [WHERE …] [GROUP BY …] [ORDER BY …]
                [LIMIT …]``.
            epsilon: ε to spend (pure and (ε, δ) budgets).
            delta: δ to spend on partition selection (private group keys only).
            rho: ρ to spend (zCDP budgets).
            split: relative weights of the aggregates' shares of the budget (by output
                name; ``"(partition selection)"`` for the key selection).
            bounds: clamping ranges overriding the curator's (public choices, not from data).
            max_groups: groups per person kept (overrides the table's policy).
            max_rows: rows per person and group kept (overrides the table's policy).
            level: confidence level of the intervals.
            quantile_grid: number of steps of the quantile candidate grid.

        Returns:
            An :class:`~deniable.query.answer.Answer`.

        Raises:
            SQLError: the text does not parse, or names unknown tables/columns.
            UnsafeQuery: the query would release rows or unbounded values.
            InvalidParameter: malformed options.
            BudgetExceeded: the query does not fit in what is left (nothing was spent).
            LedgerError: the ledger could not record the charge (nothing was released).
            InternalError: a bug was detected; nothing was released.
        """
        plan = self.plan(
            query,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            split=split,
            bounds=bounds,
            max_groups=max_groups,
            max_rows=max_rows,
            level=level,
            quantile_grid=quantile_grid,
        )
        key = self._query_key(plan, split=split, bounds=bounds, quantile_grid=quantile_grid)
        stored = self._ledger.cached_answer(self._dataset, key)
        if stored is not None:
            return Answer.from_bytes(
                stored,
                loss=zero_like(plan.loss),
                remaining=self._ledger.remaining(self._dataset),
                cached=True,
            )
        account = self._samples.get(plan.query.table.name)
        with nullcontext(None) if account is None else account.pending(plan.loss) as amplified:
            cost = plan.loss if amplified is None else self._sampled_cost(plan, amplified)
            self._precheck_budget(cost)
            _, exact = self._exact(plan, self._secrets())
            check_loss(plan)
            details = plan.describe()
            if account is not None:
                details["sampling"] = {
                    "rate": str(account.rate),
                    "loss_on_sample": loss_to_json(plan.loss),
                    "charged": loss_to_json(cost),
                }
            charge = self._ledger.charge(
                self._dataset,
                cost,
                analyst=self._analyst,
                query_key=key,
                query_text=query,
                details=details,
            )
        # Only now, after the commit, is anything computed from the data made public.
        noisy = release(plan, exact, source=self._source)
        answer = build_answer(
            plan,
            noisy,
            loss=cost,
            remaining=self._ledger.remaining(self._dataset),
            charge_id=charge.id,
            sample_rate=None if account is None else account.rate,
        )
        self._ledger.store_answer(charge.id, answer.to_bytes())
        return answer

    # -- internals -------------------------------------------------------------------------

    def _precheck_budget(self, loss: PrivacyLoss) -> None:
        # A cheap early refusal before the engine runs; the ledger re-checks atomically.
        cap = self._ledger.cap(self._dataset)
        spent = self._ledger.spent(self._dataset)
        budget = BudgetFilter(cap, spent=spent)
        if not budget.can_charge(loss):
            left = budget.remaining
            raise BudgetExceeded(
                f"this query costs {show_loss(loss)} but only {show_loss(left)} is left of "
                f"the budget of dataset {self._dataset!r}; nothing was spent",
                requested=loss,
                remaining=left,
            )

    def _sampled_cost(self, plan: DPPlan, amplified: EpsilonDelta) -> PrivacyLoss:
        """The amplified cost in the budget's kind; never more than the plan's own loss."""
        cost: PrivacyLoss = convert(amplified, type(plan.loss))
        if not cost <= plan.loss:  # type: ignore[operator]
            raise InternalError("the amplified loss exceeds the loss on the sample")
        return cost

    def _secrets(self) -> Secrets:
        words = resolve(self._source).words(2)
        return Secrets(rows=int(words[0]) >> 1, partitions=int(words[1]) >> 1)

    def _exact(self, plan: DPPlan, secrets: Secrets) -> tuple[CompiledQuery, ExactAggregates]:
        """Run the generated bounded aggregation (no noise, no charge). Internal only."""
        binding = self._bindings[plan.query.table.name]
        compiled = compile_plan(plan, self._engine.capabilities, binding.name, secrets)
        self._engine.check(binding, compiled.sql)
        result = self._engine.run(binding, compiled.sql)
        return compiled, read_result(result, compiled, plan)

    def _query_key(
        self,
        plan: DPPlan,
        *,
        split: Mapping[str, float | int | Fraction] | None,
        bounds: Mapping[str, Sequence[float | int | Fraction]] | None,
        quantile_grid: int,
    ) -> str:
        info = plan.query.table
        policy = info.policy
        payload = {
            "v": CACHE_KEY_VERSION,
            "sql": plan.query.parsed.normalized,
            "table": info.name,
            "data": info.version,
            "policy": {
                "unit": policy.privacy_unit,
                "bounds": {k: [str(b.lower), str(b.upper)] for k, b in policy.bounds.items()},
                "max_groups": policy.max_groups,
                "max_rows": policy.max_rows,
                "public_keys": {k: [repr(v) for v in vs] for k, vs in policy.public_keys.items()},
            },
            "loss": loss_to_json(plan.requested),
            "split": None
            if split is None
            else {str(k): str(Fraction(v)) for k, v in split.items()},
            "bounds": None
            if bounds is None
            else {str(k): [str(Fraction(x)) for x in v] for k, v in bounds.items()},
            "max_groups": plan.query.max_groups,
            "max_rows": plan.query.max_rows,
            "level": repr(plan.level),
            "quantile_grid": quantile_grid,
        }
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def close(self) -> None:
        """Close the engine and ledger this session opened (caller-owned ones stay open)."""
        if self._owns_engine:
            self._engine.close()
        if self._owns_ledger:
            self._ledger.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def build_answer(
    plan: DPPlan,
    noisy: NoisyAnswer,
    *,
    loss: PrivacyLoss,
    remaining: PrivacyLoss,
    charge_id: int | None,
    sample_rate: Fraction | None = None,
) -> Answer:
    """Assemble the answer frame (keys, values, intervals) and metadata; post-processing only."""
    data: dict[str, object] = {}
    by_name = {c.name: c for c in noisy.columns}
    key_index = {k.name: i for i, k in enumerate(plan.keys)}
    for out in plan.outputs:
        if out.key is not None:
            i = key_index[out.key.name]
            data[out.name] = [k[i] for k in noisy.keys]
            continue
        col = by_name[out.name]
        data[out.name] = col.values
        nan = np.full(len(noisy.keys), np.nan)
        data[f"{out.name}_low"] = nan if col.low is None else col.low
        data[f"{out.name}_high"] = nan if col.high is None else col.high
    frame = pd.DataFrame(data)
    # ORDER BY keys not in the output still sort (they are released keys).
    hidden: list[str] = []
    for name, _ in plan.query.order_by:
        if name not in frame.columns:
            i = key_index[name]
            frame[name] = pd.Series([k[i] for k in noisy.keys], dtype=object)
            hidden.append(name)
    if plan.query.order_by:
        frame = frame.sort_values(
            [n for n, _ in plan.query.order_by],
            ascending=[not d for _, d in plan.query.order_by],
            kind="mergesort",
            na_position="last",
        )
    frame = frame.drop(columns=hidden)
    start = plan.query.offset or 0
    stop = None if plan.query.limit is None else start + plan.query.limit
    frame = frame.iloc[start:stop].reset_index(drop=True)
    selection = None
    if plan.selection is not None:
        selection = (
            f"private keys: optimal partition selection (Desfontaines et al. 2022), "
            f"ε = {float(plan.selection.epsilon):.4g}, δ = {float(plan.selection.delta):.3g} "
            f"(per group ε/{plan.selection.max_groups}, δ/{plan.selection.max_groups}); "
            f"{noisy.selected} groups released"
        )
    elif plan.keys:
        selection = "public keys: every declared key is output, empty groups included"
    meta = AnswerMetadata(
        query=plan.query.parsed.text,
        loss=loss,
        cost=plan.loss,
        remaining=remaining,
        level=plan.level,
        bounds={
            o.name: (float(o.bounds.lower), float(o.bounds.upper))
            for o in plan.outputs
            if o.bounds is not None
        },
        max_groups=plan.max_groups,
        max_rows=plan.max_rows,
        privacy_unit=plan.query.table.policy.privacy_unit,
        mechanisms={c.name: c.mechanism for c in noisy.columns},
        notes={c.name: c.note for c in noisy.columns if c.note},
        partition_selection=selection,
        charge_id=charge_id,
        sample_rate=None if sample_rate is None else float(sample_rate),
        loss_on_sample=None if sample_rate is None else plan.loss,
    )
    return Answer(frame, meta)

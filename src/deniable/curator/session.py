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

import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np
from sqlglot import exp

from deniable.accounting.amplification import sampling_rate
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, exact
from deniable.accounting.renyi import ZCDPAccountant, ZCDPFilter
from deniable.anonymize import Anonymization
from deniable.curator.clamps import (
    ClampAnalysis,
    ClampChoice,
    Workload,
    choose_clamps,
    clamp_analysis,
    value_edges,
    value_histograms,
)
from deniable.curator.publish import Recodings, anonymize_table
from deniable.curator.tune import (
    TuneReport,
    UtilityAnalysis,
    contribution_histograms,
    propose,
    utility_analysis,
)
from deniable.engines.base import Engine, TableBinding
from deniable.engines.duckdb import DuckDBEngine
from deniable.errors import InvalidParameter, PrivacyWarning, UnsafeQuery
from deniable.explain.accuracy import AccuracyCurve
from deniable.graph import Graph, GraphInfo
from deniable.graph import register as register_graph
from deniable.graph.sql import answer as answer_graph_sql
from deniable.graph.sql import graph_of
from deniable.ledger import Charge, Ledger, new_sample_id
from deniable.noise.source import RandomSource
from deniable.query.accuracy import AccuracyReport
from deniable.query.accuracy import accuracy as query_accuracy
from deniable.query.accuracy import budget_for as query_budget_for
from deniable.query.answer import Answer, show_loss
from deniable.query.builder import Query
from deniable.query.catalog import (
    MAX_PUBLIC_KEYS,
    ROW,
    UNIT_CHOICE,
    Column,
    ColumnKind,
    RowLevel,
    TableInfo,
    kind_of,
    make_policy,
)
from deniable.query.diagnostics import bounding_diagnostics
from deniable.query.execute import execute, precheck_budget, run_bounded
from deniable.query.plan import QUANTILE_GRID, DPPlan
from deniable.query.program import QueryOptions, QueryProgram, plans_at
from deniable.query.program import compile as compile_query
from deniable.query.release import ExactAggregates
from deniable.query.rewrite.compile import CompiledQuery, Secrets, unit_identity_sql
from deniable.sampling.account import SampleAccount
from deniable.sqlnames import identifier
from deniable.synth.discretize import BinSpec
from deniable.synth.release import Synthetic
from deniable.synth.release import synthesize as synthesize_table

MAX_PUBLIC_ROWS = 1_000_000
"""Largest public lookup table (it is read whole at registration)."""


@dataclass(frozen=True)
class BudgetStatus:
    """The session dataset's budget as the ledger records it.

    Attributes:
        cap: the total budget.
        spent: exact total charged so far.
        remaining: what is left (under the zCDP accountant: the largest single (ε, δ) charge
            that still fits).
        history: every charge, in commit order.
        remaining_rho: under the zCDP accountant, the ρ still admissible (Gaussian answers
            spend it as is); None under the basic accountant.
    """

    cap: PrivacyLoss
    spent: PrivacyLoss
    remaining: PrivacyLoss
    history: list[Charge]
    remaining_rho: Rho | None = None

    def __repr__(self) -> str:
        rho = "" if self.remaining_rho is None else f" (zCDP: {show_loss(self.remaining_rho)})"
        return (
            f"BudgetStatus(cap: {show_loss(self.cap)}; spent: {show_loss(self.spent)}; "
            f"remaining: {show_loss(self.remaining)}{rho}; {len(self.history)} releases)"
        )


class Session:
    """A curator's DP query session over registered tables.

    Args:
        budget: the dataset's total privacy budget (``Epsilon``, ``EpsilonDelta`` or ``Rho``).
        ledger: the ledger file (created if missing), a ``postgresql://`` URL, or an open
            :class:`~deniable.ledger.Ledger`.
        anchor: the ledger's anchor file (default ``<ledger>.anchor``, beside it; for a
            URL, a file on this host). Put it on another disk or host than the ledger: a
            restore or copy that takes the ledger and its anchor together is undetectable.
            Not with an open Ledger (it has its anchor already).
        dataset: the ledger's name for this dataset (its budget is shared by all sessions
            opened on the same ledger with this name, across processes).
        analyst: who is asking (recorded with every charge).
        engine: the engine adapter of tables registered from files, DataFrames and DuckDB
            objects (default: a private embedded DuckDB). Tables registered from a
            ``postgresql://`` URL run in a PostgreSQL engine of that URL, which the session
            opens (one per URL) and closes.
        statement_timeout: seconds one generated statement may run in a PostgreSQL engine
            the session opens (default 60).
        source: randomness for noise and the bounding orders (default: the OS CSPRNG;
            a seeded source is for tests only and triggers a PrivacyWarning).
        accountant: how the ledger spends an ``EpsilonDelta`` budget: ``"basic"`` (losses
            add; the default for a new dataset), or ``"zcdp"`` (ρ-zCDP filter,
            :mod:`deniable.accounting.renyi`: queries may then pass ``rho=`` for Gaussian
            noise, and many more answers fit); None keeps what the ledger records.

    Raises:
        InvalidParameter: malformed arguments, or a ledger that already holds this dataset
            with a different cap (:class:`~deniable.ledger.CapConflict`).

    Examples:
        >>> import tempfile, os, pandas as pd
        >>> from deniable.accounting.loss import Epsilon
        >>> d = tempfile.mkdtemp()
        >>> s = Session(budget=Epsilon(epsilon=1), ledger=os.path.join(d, "ledger.db"))
        >>> from deniable import ROW
        >>> _ = s.add_table("t", pd.DataFrame({"x": range(100)}), privacy_unit=ROW)
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
        statement_timeout: float | None = None,
        accountant: str | ZCDPAccountant | None = None,
        anchor: str | os.PathLike[str] | None = None,
    ) -> None:
        if anchor is not None and isinstance(ledger, Ledger):
            raise InvalidParameter("anchor= names the anchor of a ledger path, not of a Ledger")
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
        self._ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger, anchor=anchor)
        self._owns_engine = engine is None
        self._engine: Engine = DuckDBEngine() if engine is None else engine
        self._source = source
        self._budget = budget
        self._dataset = dataset
        self._analyst = analyst
        self._tables: dict[str, TableInfo] = {}
        self._bindings: dict[str, TableBinding] = {}
        self._engines: dict[str, Engine] = {}  # each table's engine, by table name
        self._opened: dict[str, Engine] = {}  # PostgreSQL engines the session opened, by URL
        self._statement_timeout = statement_timeout
        self._samples: dict[str, SampleAccount] = {}
        self._zcdp = False
        self._graphs: dict[str, Graph] = {}
        try:
            self._ledger.register(dataset, budget, accountant=accountant)
            self._zcdp = self._ledger.accountant(dataset) != "basic"
        except BaseException:
            self.close()
            raise

    # -- curator ---------------------------------------------------------------------------

    def add_table(
        self,
        name: str,
        source: object,
        *,
        privacy_unit: str | RowLevel | None = None,
        bounds: Mapping[str, Sequence[float | int | Fraction]] | None = None,
        max_groups: int | None = None,
        max_rows: int | None = None,
        public_keys: Mapping[str, Sequence[object]] | None = None,
        version: str | None = None,
        sample_rate: float | Fraction | None = None,
        table: str | None = None,
    ) -> TableInfo:
        """Register a table. Its rows stay in the engine; only its schema is read here.

        Args:
            name: the name analysts use in ``FROM``.
            source: a Parquet/CSV path, a pandas or polars DataFrame, an Arrow table, a
                DuckDB relation, a DuckDB connection holding a table called ``name``, or a
                PostgreSQL URL ``postgresql://role@host:port/database`` with ``table``: the
                rows stay in PostgreSQL, the bounded statement runs there (read-only, with
                a statement timeout, as that role) and only per-group aggregates come back
                (:mod:`deniable.engines.postgres`; needs the ``postgres`` extra).
            privacy_unit: required: the column identifying a person (user-level privacy: all
                of a person's rows are protected together; integer, text, date, decimal or
                UUID, not floating point), or :data:`deniable.ROW` (row-level privacy: each
                row is its own unit — only right when no person has two rows).
            bounds: clamping range ``(lower, upper)`` of numeric columns that may be summed,
                averaged or used in quantiles. Must not be derived from the data.
            max_groups: with a privacy-unit column, required: most groups one person may
                contribute to per query (rows beyond it are dropped at random). With
                :data:`~deniable.ROW` it is 1 by definition and may be left out.
            max_rows: with a privacy-unit column, required: most rows one person may
                contribute to one group. With :data:`~deniable.ROW`, 1 by definition.
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
                describe the sample, unless asked with ``population=True`` (see
                :meth:`sql`). Needs an ``Epsilon``
                or ``EpsilonDelta`` budget. The sample lives as long as the session.
            table: with a PostgreSQL URL, the table to read in place (``"events"`` or
                ``"schema.events"``).

        Returns:
            The table's catalog entry (public metadata).

        Raises:
            InvalidParameter: no ``privacy_unit`` stated, a privacy-unit column without
                ``max_groups``/``max_rows`` or of floating-point type, unknown columns, bad
                bounds, unsupported source, duplicate name, a sampling rate outside (0, 1] or
                with a ρ-zCDP budget.

        Examples:
            >>> import tempfile, os, pandas as pd
            >>> from deniable.accounting.loss import Epsilon
            >>> s = Session(budget=Epsilon(epsilon=1),
            ...             ledger=os.path.join(tempfile.mkdtemp(), "ledger.db"))
            >>> visits = pd.DataFrame({"patient_id": [1, 1, 2], "cost": [10, 20, 30]})
            >>> s.add_table("visits", visits)
            Traceback (most recent call last):
            ...
            deniable.errors.InvalidParameter: add_table('visits') needs the privacy unit: ...
            >>> _ = s.add_table("visits", visits, privacy_unit="patient_id", max_groups=1,
            ...                 max_rows=2, bounds={"cost": (0, 100)})
            >>> s.close()
        """
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name must be a non-empty string")
        if privacy_unit is None:
            raise InvalidParameter(
                f"add_table({name!r}) needs the privacy unit: {UNIT_CHOICE}. There is no "
                "default, because the choice decides whom the answers protect"
            )
        if any(n.lower() == name.lower() for n in (*self._tables, *self._graphs)):
            raise InvalidParameter(f"a table or graph named {name!r} is already registered")
        rate = None if sample_rate is None else self._sample_rate(sample_rate)
        engine, source = self._engine_for(source, table)
        binding = engine.bind(name, source, version=version)
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
                    next(c for c in columns if c.name == unit), engine.capabilities
                )
            )
            binding = engine.sample(binding, rate=rate, identity=identity, source=self._source)
            self._samples[name] = SampleAccount(rate=rate, identity=new_sample_id())
        info = TableInfo(
            name=name,
            columns=columns,
            policy=policy,
            version=binding.version,
            sample_rate=rate,
        )
        self._tables[name] = info
        self._bindings[name] = binding
        self._engines[name] = engine
        return info

    def _engine_for(self, source: object, table: str | None) -> tuple[Engine, object]:
        """The engine of a source (a PostgreSQL URL: the URL's engine) and what it binds."""
        if not _is_postgres_url(source):
            if table is not None:
                raise InvalidParameter(
                    "table= names a table of a PostgreSQL source; give source as "
                    "'postgresql://role@host:port/database'"
                )
            return self._engine, source
        if table is None:
            raise InvalidParameter(
                "a PostgreSQL source needs table= (the table to read in place, e.g. "
                "table='events' or table='analytics.events')"
            )
        assert isinstance(source, str)
        return self._postgres(source), table

    def _postgres(self, url: str) -> Engine:
        """The session's PostgreSQL engine of ``url`` (opened on first use)."""
        try:
            from deniable.engines.postgres import DEFAULT_STATEMENT_TIMEOUT, PostgresEngine
        except ImportError:
            raise InvalidParameter(
                "PostgreSQL sources need psycopg: pip install 'deniable[postgres]'"
            ) from None
        default = self._engine
        if isinstance(default, PostgresEngine) and default.dsn == url:
            return default
        engine = self._opened.get(url)
        if engine is None:
            timeout = self._statement_timeout
            engine = PostgresEngine(
                url,
                statement_timeout=DEFAULT_STATEMENT_TIMEOUT if timeout is None else timeout,
            )
            self._opened[url] = engine
        return engine

    def add_public_table(
        self,
        name: str,
        source: object,
        *,
        unique_key: str | Sequence[str] | None = None,
        table: str | None = None,
    ) -> TableInfo:
        """Register a public lookup table (e.g. regions of states) that private tables join.

        Its content is public: deniable reads it here (a snapshot is copied into the engine,
        so that later changes of the source cannot reach queries), checks which columns are
        unique, and records each column's distinct values as a public domain (group keys
        taken from it need no partition selection). It is never queried alone. A join with it
        must equate one of its unique keys, so that it never multiplies a private row.

        Args:
            name: the name analysts use in ``JOIN``.
            source: as for :meth:`add_table`.
            unique_key: the column(s) whose values are unique; checked against the data. By
                default every single column that is unique and never NULL is a key.
            table: with a PostgreSQL URL, the table to read (copied into a temporary table
                of the connection: the role needs the TEMPORARY privilege).

        Raises:
            InvalidParameter: a duplicate name, an unknown column, a declared key that is not
                unique (or holds NULL), more than 1,000,000 rows.
        """
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name must be a non-empty string")
        if any(n.lower() == name.lower() for n in (*self._tables, *self._graphs)):
            raise InvalidParameter(f"a table or graph named {name!r} is already registered")
        engine, source = self._engine_for(source, table)
        binding = engine.materialize(engine.bind(name, source))
        columns = tuple(Column(c, t, kind_of(t)) for c, t in binding.columns)
        info = TableInfo(
            name=name,
            columns=columns,
            policy=make_policy(
                name,
                columns,
                privacy_unit=ROW,
                bounds=None,
                max_groups=None,
                max_rows=None,
                public_keys=None,
            ),
            version=binding.version,
        )
        rows, distinct, non_null = self._public_profile(engine, binding, columns)
        if rows > MAX_PUBLIC_ROWS:
            raise InvalidParameter(
                f"public table {name!r} has more than {MAX_PUBLIC_ROWS} rows; a lookup table "
                "is small"
            )
        unique = [
            (c.name,) for c in columns if distinct[c.name] == rows and non_null[c.name] == rows
        ]
        if unique_key is not None:
            declared = (unique_key,) if isinstance(unique_key, str) else tuple(unique_key)
            key = tuple(info.column(k).name for k in declared)
            if not key:
                raise InvalidParameter("unique_key names no column")
            if self._distinct_rows(engine, binding, key) != rows or any(
                non_null[k] != rows for k in key
            ):
                raise InvalidParameter(
                    f"unique_key {key} of public table {name!r} is not unique (or holds NULL)"
                )
            keys: tuple[tuple[str, ...], ...] = (key,)
        else:
            keys = tuple(unique)
        domains = {
            c.name: self._distinct_values(engine, binding, c.name)
            for c in columns
            if distinct[c.name] <= MAX_PUBLIC_KEYS and c.kind is not ColumnKind.OTHER
        }
        info = dataclasses.replace(
            info, public=True, unique_keys=keys, domains=MappingProxyType(domains)
        )
        self._tables[name] = info
        self._bindings[name] = binding
        self._engines[name] = engine
        return info

    def _public_profile(
        self, engine: Engine, binding: TableBinding, columns: tuple[Column, ...]
    ) -> tuple[int, dict[str, int], dict[str, int]]:
        """Rows, distinct and non-NULL values per column of a public table (public data)."""
        exprs: list[exp.Expression] = [exp.Count(this=exp.Star())]
        for c in columns:
            col = exp.Column(this=identifier(c.name))
            exprs.append(exp.Count(this=exp.Distinct(expressions=[col])))
            exprs.append(exp.Count(this=col.copy()))
        query = exp.select(*exprs).from_(exp.Table(this=identifier(binding.name)))
        row = engine.run(binding, query.sql(dialect=engine.capabilities.dialect))
        values = [int(row.column(i)[0].as_py()) for i in range(row.num_columns)]
        distinct = {c.name: values[1 + 2 * i] for i, c in enumerate(columns)}
        non_null = {c.name: values[2 + 2 * i] for i, c in enumerate(columns)}
        return values[0], distinct, non_null

    def _distinct_rows(self, engine: Engine, binding: TableBinding, key: tuple[str, ...]) -> int:
        sub = (
            exp.select(*(exp.Column(this=identifier(k)) for k in key))
            .distinct()
            .from_(exp.Table(this=identifier(binding.name)))
        )
        query = exp.select(exp.Count(this=exp.Star())).from_(sub.subquery("__d"))
        out = engine.run(binding, query.sql(dialect=engine.capabilities.dialect))
        return int(out.column(0)[0].as_py())

    def _distinct_values(
        self, engine: Engine, binding: TableBinding, column: str
    ) -> tuple[object, ...]:
        col = exp.Column(this=identifier(column))
        query = (
            exp.select(col)
            .distinct()
            .from_(exp.Table(this=identifier(binding.name)))
            .order_by(col.copy())
        )
        out = engine.run(binding, query.sql(dialect=engine.capabilities.dialect))
        return tuple(out.column(0).to_pylist())

    def table(self, name: str) -> Query:
        """Start a Python query on a registered table; ``.run(epsilon=…)`` answers it here.

        The builder writes the SQL an analyst would type, so a builder query and the
        equivalent text have the same plan, charge and cache entry.

        Examples:
            >>> import tempfile, os, pandas as pd
            >>> from deniable.accounting.loss import Epsilon
            >>> from deniable.query.builder import count
            >>> d = tempfile.mkdtemp()
            >>> s = Session(budget=Epsilon(epsilon=1), ledger=os.path.join(d, "l.db"))
            >>> frame = pd.DataFrame({"k": ["a", "b"] * 50})
            >>> from deniable import ROW
            >>> _ = s.add_table("t", frame, privacy_unit=ROW, public_keys={"k": ["a", "b"]})
            >>> s.table("t").group_by("k").agg(count().alias("n")).run(epsilon=0.5).columns
            ['k', 'n', 'n_low', 'n_high']
            >>> s.close()
        """
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name must be a non-empty string")
        return Query(name, session=self)

    def add_graph(
        self,
        name: str,
        edges: object,
        *,
        source_col: str,
        target_col: str,
        unit: str = "edge",
        max_degree: int,
        nodes: object | None = None,
        node_key: str | None = None,
        nodes_name: str | None = None,
        domains: Mapping[str, Sequence[object]] | None = None,
        table: str | None = None,
        nodes_table: str | None = None,
    ) -> GraphInfo:
        """Register a graph: an edge table and optionally a node table (same engine).

        Its answers are charged to this session's budget (:mod:`deniable.graph`).

        Args:
            name: the graph's name (in ``FROM`` and :meth:`graph`).
            edges: the edge table, any source :meth:`add_table` takes.
            source_col: the column of one end of each edge.
            target_col: the column of the other end (the graph is undirected).
            unit: ``"edge"`` (one edge is protected) or ``"node"`` (a node and all its
                edges: every row where it is either end).
            max_degree: the public degree bound ``D`` that node-level answers (and edge-level
                triangle counts) truncate to; their sensitivities follow from it.
            nodes: a node table (one row per node id, its attributes), or None.
            node_key: the node table's id column (unique, never NULL).
            nodes_name: the node table's name in SQL joins (default ``"nodes"``).
            domains: the public values of node attributes used in ``edge_count_by``
                (needed at node level, where node attributes are private).
            table: with ``edges`` a PostgreSQL URL, the edge table read in place (as
                :meth:`add_table`'s ``table=``).
            nodes_table: with ``nodes`` a PostgreSQL URL, the node table read in place; it
                must live in the same database as the edges.

        Raises:
            InvalidParameter: a duplicate name, unknown columns, a bad unit or max_degree,
                edge and node tables of two engines.
        """
        if not isinstance(name, str) or not name:
            raise InvalidParameter("name must be a non-empty string")
        if any(n.lower() == name.lower() for n in (*self._tables, *self._graphs)):
            raise InvalidParameter(f"a table or graph named {name!r} is already registered")
        engine, source = self._engine_for(edges, table)
        binding = engine.bind(name, source)
        node_binding = None
        if nodes is not None:
            node_engine, node_source = self._engine_for(nodes, nodes_table)
            if node_engine is not engine:
                raise InvalidParameter(
                    "the edge and node tables must be read by one engine: both from files "
                    "or DataFrames, or both from the same PostgreSQL database"
                )
            node_binding = engine.bind(nodes_name or "nodes", node_source)
        elif nodes_table is not None:
            raise InvalidParameter("nodes_table= needs nodes= (the node table's PostgreSQL URL)")
        graph = register_graph(
            name,
            engine=engine,
            edges=binding,
            nodes=node_binding,
            source_col=source_col,
            target_col=target_col,
            unit=unit,
            max_degree=max_degree,
            node_key=node_key,
            nodes_name=nodes_name,
            domains=domains,
            ledger=self._ledger,
            dataset=self._dataset,
            analyst=self._analyst,
            budget_kind=type(self._budget),
            source=self._source,
        )
        self._graphs[name] = graph
        return graph.info

    def graph(self, name: str) -> Graph:
        """The registered graph ``name``: its DP queries (``.edge_count(epsilon=…)``, …)."""
        for n, graph in self._graphs.items():
            if isinstance(name, str) and n.lower() == name.lower():
                return graph
        raise InvalidParameter(f"no graph named {name!r} is registered")

    def sample_id(self, name: str) -> str:
        """The opaque identity of table ``name``'s Bernoulli sample (random; reveals no data).

        Give it to :meth:`deniable.ledger.Ledger.record_sample_release` when a release whose
        guarantee comes from sampling alone consumes this sample; the session then refuses
        every query on the table.

        Raises:
            InvalidParameter: the table was not registered with ``sample_rate``.
        """
        account = self._samples.get(name) if isinstance(name, str) else None
        sample_id = None if account is None else account.identity
        if sample_id is None:
            raise InvalidParameter(f"table {name!r} is not a sampled table (sample_rate=)")
        return sample_id

    def _sample_rate(self, sample_rate: float | Fraction) -> Fraction:
        if isinstance(self._budget, Rho):
            raise InvalidParameter(
                "sample_rate needs an Epsilon or EpsilonDelta budget: amplification by "
                "sampling (Li–Qardaji–Su) is stated for (ε, δ)-DP, not ρ-zCDP"
            )
        if self._zcdp:
            # A sampled table's charges are increments of one amplified total; only their
            # sum is a guarantee, so they must add (basic accountant), not compose as zCDP.
            raise InvalidParameter(
                "sample_rate needs the basic accountant: the charges of queries on one sample "
                "are valid only added up, not composed as zCDP; open a session on another "
                "dataset name with accountant='basic' for sampled tables"
            )
        return sampling_rate(sample_rate)

    @property
    def tables(self) -> Mapping[str, TableInfo]:
        """Registered tables (public metadata)."""
        return MappingProxyType(self._tables)

    @property
    def budget(self) -> BudgetStatus:
        """The dataset's cap, spent total, remaining budget and release history."""
        left = self._ledger.budget_filter(self._dataset) if self._zcdp else None
        return BudgetStatus(
            cap=self._ledger.cap(self._dataset),
            spent=self._ledger.spent(self._dataset),
            remaining=self._ledger.remaining(self._dataset),
            history=self._ledger.history(self._dataset),
            remaining_rho=left.remaining_rho if isinstance(left, ZCDPFilter) else None,
        )

    # -- analyst ---------------------------------------------------------------------------

    def plan(
        self,
        query: str | Query,
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
        return self.compile(
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
        ).plan

    def compile(
        self,
        query: str | Query,
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
    ) -> QueryProgram:
        """Compile ``query`` against the registered tables: no data read, nothing charged.

        Raises the same refusals as :meth:`sql`.
        """
        if isinstance(query, Query):
            query = query.to_sql()
        # Under the zCDP accountant an (ε, δ) budget also takes ρ charges (Gaussian noise).
        zcdp_query = self._zcdp and rho is not None and epsilon is None
        options = QueryOptions(
            budget_kind=Rho if zcdp_query else type(self._budget),
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
        return compile_query(query, self._tables, options)

    def _planner(self, query: str | Query, **options: Any) -> Callable[[Fraction], DPPlan]:
        """``query`` parsed and validated once, planned at any total budget (ε or ρ)."""
        text = query.to_sql() if isinstance(query, Query) else query
        rho = isinstance(self._budget, Rho)
        known = {"delta", "split", "bounds", "max_groups", "max_rows", "level", "quantile_grid"}
        unknown = set(options) - known
        if unknown:
            raise InvalidParameter(f"unknown options {sorted(unknown)}")
        settings = QueryOptions(
            budget_kind=Rho if rho else type(self._budget),
            epsilon=None if rho else Fraction(1),
            rho=Fraction(1) if rho else None,
            **options,
        )
        return plans_at(text, self._tables, settings)

    def accuracy(
        self, query: str | Query, *, rows: int | None = None, **options: Any
    ) -> AccuracyReport:
        """The interval half-width every output would get, before spending anything.

        Reads no data and charges nothing: the query is compiled with ``options`` (as for
        :meth:`sql`: ``epsilon=``, ``delta=``, ``rho=``, bounds…) and each aggregate's own
        interval rule is applied to the plan's noise (:mod:`deniable.query.accuracy`).
        Counts and sums need nothing else; AVG, VARIANCE and STDDEV need ``rows=``, an
        assumed number of rows per group; quantiles, MEDIAN, MIN and MAX report their rank
        margin in rows, and with ``rows=`` a half-width assuming that many rows spread evenly
        over the bounds.
        """
        return query_accuracy(self.plan(query, **options), rows=rows)

    def accuracy_curve(
        self,
        query: str | Query,
        budgets: Sequence[float | Fraction],
        *,
        rows: int | None = None,
        delta: float | Fraction | None = None,
        **options: Any,
    ) -> AccuracyCurve:
        """Each output's interval half-width as the budget varies, named as the query names it.

        Reads no data and charges nothing: the query is parsed once and planned at each
        budget (ε, or ρ on a zCDP budget); every output gets its own interval rule
        (:func:`deniable.query.accuracy.accuracy`), in its own units — an AVG as an average,
        not as the count and sum it is made of. Draw it with
        :func:`deniable.explain.plots.accuracy_figure`.

        Raises:
            InvalidParameter: no budget or one that is not positive; an output whose width
                depends on the data and no ``rows=`` (an assumed rows per group) to assume,
                named; a query with no output that has a width (options as for
                :meth:`budget_for`).
        """
        if "epsilon" in options or "rho" in options:
            raise InvalidParameter("accuracy_curve varies epsilon (or rho): leave them out")
        values = [exact(b, "budget") for b in budgets]
        if not values or any(b <= 0 for b in values):
            raise InvalidParameter("give one or more positive budgets (ε, or ρ) to plot")
        plan_at = self._planner(query, delta=delta, **options)
        widths: dict[str, list[float]] = {}
        level = 0.95
        for b in values:
            report = query_accuracy(plan_at(b), rows=rows)
            level = report.level
            for out in report.outputs:
                if out.half_width is None:
                    if out.depends_on is None:
                        continue  # nothing noisy to draw (e.g. a public key)
                    raise InvalidParameter(
                        f"the interval of {out.name!r} depends on {out.depends_on}: pass "
                        "rows= (an assumed number of rows per group) to draw it"
                    )
                widths.setdefault(out.name, []).append(out.half_width)
        if not widths:
            raise InvalidParameter("the query has no output with an interval to draw")
        text = query.to_sql() if isinstance(query, Query) else query
        return AccuracyCurve(
            parameter="ρ" if isinstance(self._budget, Rho) else "ε",
            budgets=np.array([float(b) for b in values], dtype=np.float64),
            half_widths={k: np.array(v, dtype=np.float64) for k, v in widths.items()},
            level=level,
            description=" ".join(text.split())[:60]
            + ("" if rows is None else f" ({rows:,} rows per group assumed)"),
        )

    def budget_for(
        self,
        query: str | Query,
        target: Mapping[str, float],
        *,
        rows: int | None = None,
        delta: float | Fraction | None = None,
        **options: Any,
    ) -> PrivacyLoss:
        """The least privacy loss whose intervals meet ``target`` (half-widths per output).

        Returns ``Epsilon(ε)`` (``EpsilonDelta(ε, δ)`` with ``delta=`` for private keys), or
        ``Rho(ρ)`` on a ρ-zCDP budget; ``options`` as for :meth:`sql` (``level=`` sets the
        confidence level). Reads no data, charges nothing.

        Raises:
            InvalidParameter: an unknown output, an output with no interval known in
                advance (quantiles and AVG without ``rows=``), a target that is not positive.
        """
        if "epsilon" in options or "rho" in options:
            raise InvalidParameter("budget_for finds epsilon (or rho): leave them out")
        name = "rho" if isinstance(self._budget, Rho) else "epsilon"
        # parsed and validated once, planned at each budget tried (a dozen or so)
        plan_at = self._planner(query, delta=delta, **options)
        found = query_budget_for(plan_at, target, rows=rows)
        if name == "rho":
            return Rho(rho=found)
        if delta is not None and delta > 0:
            return EpsilonDelta(epsilon=found, delta=delta)
        return Epsilon(epsilon=found)

    def tune(
        self,
        table: str,
        *,
        epsilon: float | Fraction,
        group_by: Sequence[str] = (),
        workload_epsilon: float | Fraction = 1,
        groups: int = 1,
        clamps: Mapping[str, Sequence[float | int | Fraction]] | None = None,
        clamp_workload: Workload = "sum",
        apply: bool = False,
        analyst: str | None = None,
    ) -> TuneReport:
        """Measure how much people contribute (DP, charged) and propose contribution bounds.

        Spends ``epsilon`` from this dataset's ledger (pure ε-DP, four contribution
        histograms: :mod:`deniable.curator.tune`), then ranks every candidate
        ``(max_groups, max_rows)`` by the expected error per group of a ``COUNT(*) …
        GROUP BY group_by`` over ``groups`` groups answered at ``workload_epsilon``
        (post-processing, free). With ``apply=True`` the best candidate becomes the table's
        policy (:meth:`set_bounds`).

        ``clamps`` maps numeric columns to a public *search range* ``(lo, hi)``: each gets a
        DP histogram of its values on a public grid over the range (at most
        ``max_groups·max_rows`` of the best candidate's rows a person:
        :mod:`deniable.curator.clamps`), and the proposed clamping range is the one that
        minimises the expected error (clamping bias and noise) of one ``SUM`` (or ``AVG``:
        ``clamp_workload``) of the column per group, at ``workload_epsilon`` under the best
        candidate's bounds. Then half of ``epsilon`` goes to the contribution histograms and
        the other half to the value histograms (one charge each); ``apply=True`` also sets
        those bounds. ``analyst``: who the charges are recorded under (default: the
        session's analyst).

        Raises:
            InvalidParameter: an unknown table or column, a table without a privacy unit
                column (a row is one person: nothing to tune).
            BudgetExceeded: ``epsilon`` does not fit what is left (nothing spent).
        """
        info = self._table_info(table)
        unit = info.policy.privacy_unit
        if unit is None:
            raise InvalidParameter(
                f"table {info.name!r} protects single rows (privacy_unit=ROW): each person "
                "adds one row, so there are no contribution bounds to tune"
            )
        columns = [info.column(g).name for g in group_by]
        search: dict[str, tuple[float, float]] = {}
        for c, r in (clamps or {}).items():
            col = info.column(c)
            if col.kind not in (ColumnKind.INTEGER, ColumnKind.REAL):
                raise InvalidParameter(
                    f"column {col.name!r} is not numeric: only numeric columns have clamps"
                )
            if len(r) != 2:
                raise InvalidParameter(
                    f"the search range of {col.name!r} must be two numbers (low, high)"
                )
            search[col.name] = (float(r[0]), float(r[1]))
            value_edges(*search[col.name])  # a malformed range is refused before any charge
        if clamp_workload not in ("sum", "avg"):
            raise InvalidParameter('clamp_workload must be "sum" or "avg"')
        total = exact(epsilon, "epsilon")
        if total <= 0:
            raise InvalidParameter("epsilon must be > 0 (the privacy loss of the measurement)")
        precheck_budget(self._ledger, self._dataset, Epsilon(epsilon=total), what="tuning")
        share = total / 2 if search else total
        histograms = contribution_histograms(
            self._engines[info.name],
            self._bindings[info.name],
            info.column(unit),
            columns,
            ledger=self._ledger,
            dataset=self._dataset,
            analyst=analyst or self._analyst,
            epsilon=share,
            source=self._source,
            table_name=info.name,
        )
        choices = tuple(propose(histograms, epsilon=workload_epsilon, groups=groups))
        best = choices[0]
        proposed: dict[str, tuple[float, float]] = {}
        clamp_choices: dict[str, tuple[ClampChoice, ...]] = {}
        clamp_charge: int | None = None
        if search:
            values, clamp_charge = value_histograms(
                self._engines[info.name],
                self._bindings[info.name],
                info.column(unit),
                search,
                rows_per_person=best.max_groups * best.max_rows,
                ledger=self._ledger,
                dataset=self._dataset,
                analyst=analyst or self._analyst,
                epsilon=total - share,
                source=self._source,
                table_name=info.name,
            )
            for column, histogram in values.items():
                ranked = choose_clamps(
                    histogram,
                    workload=clamp_workload,
                    epsilon=workload_epsilon,
                    max_groups=best.max_groups,
                    max_rows=best.max_rows,
                    groups=groups,
                )
                clamp_choices[column] = tuple(ranked)
                proposed[column] = (ranked[0].low, ranked[0].high)
        report = TuneReport(
            histograms,
            choices,
            Fraction(workload_epsilon),
            groups,
            clamps=proposed,
            clamp_choices=clamp_choices,
            clamp_workload=clamp_workload,
            clamp_charge_id=clamp_charge,
            clamp_epsilon=total - share,
        )
        if apply:
            self.set_bounds(info.name, max_groups=best.max_groups, max_rows=best.max_rows,
                            bounds=proposed or None)  # fmt: skip
        return report

    def utility_analysis(self, table: str, *, group_by: Sequence[str] = ()) -> UtilityAnalysis:
        """NON-PRIVATE: the exact share of rows each candidate policy would keep.

        For the curator only, who holds the data: it reads the rows exactly, adds no noise,
        is never charged and never stored as an answer; do not show it to analysts.
        """
        info = self._table_info(table)
        if info.policy.privacy_unit is None:
            raise InvalidParameter(f"table {info.name!r} protects single rows: nothing to bound")
        return utility_analysis(
            self._engines[info.name],
            self._bindings[info.name],
            info.column(info.policy.privacy_unit),
            [info.column(g).name for g in group_by],
        )

    def clamp_analysis(self, table: str, column: str, search: Sequence[float]) -> ClampAnalysis:
        """NON-PRIVATE: the exact share of ``column``'s values each clamping range would clamp.

        The values counted on the public grid over the search range ``(low, high)`` (the one
        :meth:`tune` uses); :meth:`~deniable.curator.clamps.ClampAnalysis.clamped_share`
        and :meth:`~deniable.curator.clamps.ClampAnalysis.ranges` read it. For the curator
        only: exact, no noise, never charged or stored as an answer.

        Raises:
            InvalidParameter: an unknown table or column, a column that is not numeric, a
                malformed range.
        """
        info = self._table_info(table)
        col = info.column(column)
        if col.kind not in (ColumnKind.INTEGER, ColumnKind.REAL):
            raise InvalidParameter(f"column {col.name!r} is not numeric: it has no clamps")
        if len(search) != 2:
            raise InvalidParameter("the search range must be two numbers (low, high)")
        unit = info.policy.privacy_unit
        return clamp_analysis(
            self._engines[info.name],
            self._bindings[info.name],
            info.column(unit) if unit is not None else None,
            col.name,
            float(search[0]),
            float(search[1]),
        )

    def anonymize(
        self,
        table: str,
        recoding: Recodings,
        *,
        k: int,
        beta: float,
        epsilon: float | None = None,
        delta: float | None = None,
        selection_epsilon: float | None = None,
        analyst: str | None = None,
    ) -> Anonymization:
        """Publish ``table`` k-anonymized from a β-sample, charged to this dataset's ledger.

        Privacy loss: the ``(ε, δ)`` of Li–Qardaji–Su's Theorem 3.9 (a fixed ``recoding``;
        give ``epsilon`` or ``delta``) or 3.11 (``selection_epsilon``: the recoding chosen
        among the candidate levels by the exponential mechanism), per person when the table
        has a privacy unit (one random row each), charged once before the table is returned
        (:mod:`deniable.curator.publish`). ``recoding``: a
        :class:`~deniable.anonymize.RecodingSpec`, its dict form or a YAML/JSON file.

        Raises:
            InvalidParameter, RecodingError, UnknownColumn: before anything runs.
            BudgetExceeded: the release does not fit what is left (nothing spent).
        """
        info = self._table_info(table)
        return anonymize_table(
            info,
            self._engines[info.name],
            self._bindings[info.name],
            recoding,
            ledger=self._ledger,
            dataset=self._dataset,
            analyst=analyst or self._analyst,
            k=k,
            beta=beta,
            epsilon=epsilon,
            delta=delta,
            selection_epsilon=selection_epsilon,
            source=self._source,
        )

    def synthesize(
        self,
        table: str,
        *,
        columns: Sequence[str] | None = None,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        rho: float | Fraction | None = None,
        method: str = "aim",
        rows: int | None = None,
        bins: int | Mapping[str, BinSpec] = 16,
        analyst: str | None = None,
        source: RandomSource | None = None,
    ) -> Synthetic:
        """Release a DP synthetic table (MST or AIM), charged once to this dataset's ledger.

        The marginals are counted in the table's engine (each person bounded to
        ``max_rows`` rows), noised with the discrete Gaussian and selected adaptively after
        one charge of ``(epsilon, delta)`` (basic accountant) or ``rho`` (ρ budgets, zCDP
        accountant): :mod:`deniable.synth.release`. Numeric columns need declared bounds
        (``bins`` equal-width bins) or ``Quantiles(n, within=(lo, hi))`` (bins at DP
        quantiles); other columns declared public keys or ``SelectKeys()`` (keys by DP
        partition selection, which needs ``delta``). Quantiles and keys are measured within
        the same release and charge, with ``ρ/10`` of it (:mod:`deniable.synth.learn`).

        ``source`` overrides the session's randomness for this release (a seeded source is
        for tests only and triggers a PrivacyWarning).

        Raises:
            InvalidParameter, UnsafeQuery, BudgetExceeded: before anything is spent.
        """
        if source is not None and not getattr(source, "secure", False):
            warnings.warn(
                "this release draws from a non-secure (seeded) source: for tests only",
                PrivacyWarning,
                stacklevel=2,
            )
        info = self._table_info(table)
        return synthesize_table(
            info,
            self._engines[info.name],
            self._bindings[info.name],
            ledger=self._ledger,
            dataset=self._dataset,
            analyst=analyst or self._analyst,
            columns=columns,
            epsilon=epsilon,
            delta=delta,
            rho=rho,
            method=method,
            rows=rows,
            bins=bins,
            source=source or self._source,
        )

    def set_bounds(
        self,
        table: str,
        *,
        max_groups: int,
        max_rows: int,
        bounds: Mapping[str, Sequence[float | int | Fraction]] | None = None,
    ) -> TableInfo:
        """Replace a person-level table's ``max_groups`` and ``max_rows`` (public choices).

        ``bounds`` sets (or replaces) clamping ranges of columns; the others stay. Later
        queries are bounded by them; what was spent stays spent.

        Raises:
            InvalidParameter: an unknown table, a row-level table, bounds that are not
                positive integers.
        """
        info = self._table_info(table)
        if info.policy.privacy_unit is None:
            raise InvalidParameter(f"table {info.name!r} protects single rows: both bounds are 1")
        policy = make_policy(
            info.name,
            info.columns,
            privacy_unit=info.policy.privacy_unit,
            bounds={
                **{c: (b.lower, b.upper) for c, b in info.policy.bounds.items()},
                **(bounds or {}),
            },
            max_groups=max_groups,
            max_rows=max_rows,
            public_keys=info.policy.public_keys,
        )
        updated = dataclasses.replace(info, policy=policy)
        self._tables[info.name] = updated
        return updated

    def _table_info(self, table: str) -> TableInfo:
        for name, info in self._tables.items():
            if name.lower() == str(table).lower() and not info.public:
                return info
        raise InvalidParameter(f"no private table named {table!r}; tables: {list(self._tables)}")

    def explain(self, query: str, **options: Any) -> str:
        """The DP plan and the generated engine SQL of ``query`` (secrets shown as 0)."""
        program = self.compile(query, **options)
        binding = self._bindings[program.table.name]
        joined = {n: b.name for n, b in self._joined(program.plan).items()}
        caps = self._engines[program.table.name].capabilities
        compiled = program.statement(caps, binding.name, Secrets(0, 0), joined)
        return json.dumps(program.plan.describe(), indent=2) + "\n\n" + compiled.sql

    def sql(
        self,
        query: str | Query,
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
        analyst: str | None = None,
        population: bool = False,
        diagnostics: float | Fraction | None = None,
        nonnegative: bool = False,
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
            analyst: who is asking, for this query only (default: the session's analyst);
                the charge is recorded under this name and counts against its allowance.
            population: on a table registered with ``sample_rate``, report population-scale
                estimates — counts and sums divided by β, intervals that include the
                sampling error — instead of the sample's values (post-processing: same
                charge). AVG, VARIANCE, STDDEV, quantiles and COUNT(DISTINCT col) are
                refused (ask SUM(x) / COUNT(x) for a mean). No effect on other tables.
            diagnostics: also release, for this extra ε (its own charge, pure ε-DP), how
                many people each bounding rule cut (:mod:`deniable.query.diagnostics`),
                shown with the answer (``answer.diagnostics``); single-table queries on a
                person-level table.
            nonnegative: clip the COUNT outputs and their interval ends at 0 (free
                post-processing; the values are then biased upward near 0 — see
                :meth:`~deniable.query.answer.Answer.clipped_at_zero`). Off by default: a
                count is released unbiased, and may be negative.

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
        graph = graph_of(query, self._graphs)
        if graph is not None:  # a query over a registered graph (deniable.graph.sql)
            assert isinstance(query, str)
            table_only = {
                "split": split is not None,
                "bounds": bounds is not None,
                "max_groups": max_groups is not None,
                "max_rows": max_rows is not None,
                "quantile_grid": quantile_grid != QUANTILE_GRID,
                "population": population,
                "nonnegative": nonnegative,
            }
            table_only["diagnostics"] = diagnostics is not None
            given = [name for name, set_ in table_only.items() if set_]
            if given:
                raise InvalidParameter(
                    f"{given[0]}= applies to table queries, not to graph {graph.info.name!r}: "
                    "a graph's bounding is its declared max_degree; remove the option"
                )
            return answer_graph_sql(
                graph, query, epsilon=epsilon, rho=rho, delta=delta, level=level, analyst=analyst
            )
        program = self.compile(
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
        if diagnostics is not None:  # refused before anything runs when it cannot be done
            self._check_diagnostics(program)
        answer = self.execute(program, analyst=analyst, population=population)
        if nonnegative:
            answer = answer.clipped_at_zero(program.plan.count_outputs())
        if diagnostics is None:
            return answer
        table = program.table.name
        report = bounding_diagnostics(
            program.plan,
            self._engines[table],
            self._bindings[table],
            ledger=self._ledger,
            dataset=self._dataset,
            analyst=analyst or self._analyst,
            query_text=program.text,
            epsilon=diagnostics,
            level=level,
            source=self._source,
        )
        return answer.with_diagnostics(report)

    def _check_diagnostics(self, program: QueryProgram) -> None:
        if program.plan.query.table.policy.privacy_unit is None:
            raise InvalidParameter("diagnostics count people: this table protects single rows")
        if program.plan.query.joins:
            raise InvalidParameter("diagnostics are computed on single-table queries only")

    def execute(
        self,
        program: QueryProgram,
        *,
        analyst: str | None = None,
        share_replays: bool = True,
        idempotency_key: str | None = None,
        population: bool = False,
    ) -> Answer:
        """Answer a compiled program (see :meth:`sql`; ``population`` as there).

        Charged ``program.loss`` (amplified on a sampled table) to ``analyst`` (default: the
        session's analyst), or nothing for a replay. With ``share_replays=False`` a stored
        answer is replayed only to the analyst who paid for it (another analyst asking the
        same question pays again, and learns nothing about who asked before). An
        ``idempotency_key`` is recorded with the charge; a second charge with the same key
        for the same analyst raises :class:`~deniable.errors.DuplicateRequest` and spends
        nothing.
        """
        if analyst is not None and (not isinstance(analyst, str) or not analyst):
            raise InvalidParameter("analyst must be a non-empty string")
        name = program.table.name
        if self._tables.get(name) is not program.table:
            raise InvalidParameter(
                f"this program was compiled against another registration of table {name!r}; "
                "compile it again"
            )
        account = self._samples.get(name)
        sample_id = None if account is None else account.identity
        if sample_id is not None and self._ledger.sample_consumed(self._dataset, sample_id):
            # Li–Qardaji–Su §2.6: a sample consumed by a sampling-based release answers
            # nothing else (refused before any charge, replays included).
            raise UnsafeQuery(
                f"the sample of table {name!r} was consumed by a release whose guarantee "
                "relies on sampling alone (e.g. safe k-anonymization); it answers nothing "
                "else: register the table again to draw a fresh sample"
            )
        return execute(
            program,
            self._engines[name],
            self._ledger,
            dataset=self._dataset,
            analyst=self._analyst if analyst is None else analyst,
            binding=self._bindings[name],
            source=self._source,
            sample=self._samples.get(name),
            joined=self._joined(program.plan),
            cache_scope=None if share_replays else (analyst or self._analyst),
            idempotency_key=idempotency_key,
            population=population,
        )

    def _joined(self, plan: DPPlan) -> dict[str, TableBinding]:
        main_name = plan.query.table.name
        main = self._bindings[main_name]
        engine = self._engines[main_name]
        out = {j.table.name: self._bindings[j.table.name] for j in plan.query.joins}
        for name, binding in out.items():
            if self._engines[name] is not engine:
                raise InvalidParameter(
                    f"tables {main_name!r} and {name!r} live in different engines (e.g. one "
                    "in PostgreSQL, the other in DuckDB, or two PostgreSQL URLs), so one "
                    "query cannot join them: register both from the same source (for a "
                    "PostgreSQL table, register its lookup tables from the same URL)"
                )
            if not engine.joinable(main, binding):
                raise InvalidParameter(
                    f"tables {plan.query.table.name!r} and {name!r} live in different "
                    "databases of the engine (one was registered from your own DuckDB "
                    "connection or relation), so one query cannot join them: register both "
                    "from files or DataFrames, or both from the same connection"
                )
        return out

    # -- internals -------------------------------------------------------------------------

    def _exact(self, plan: DPPlan, secrets: Secrets) -> tuple[CompiledQuery, ExactAggregates]:
        """Run the generated bounded aggregation (no noise, no charge). Internal only."""
        binding = self._bindings[plan.query.table.name]
        engine = self._engines[plan.query.table.name]
        return run_bounded(plan, engine, binding, secrets, self._joined(plan))

    def close(self) -> None:
        """Close the engines and ledger this session opened (caller-owned ones stay open)."""
        for opened in self._opened.values():
            opened.close()
        self._opened.clear()
        if self._owns_engine:
            self._engine.close()
        if self._owns_ledger:
            self._ledger.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_postgres_url(source: object) -> bool:
    """Whether ``source`` is a PostgreSQL URL (checked without importing psycopg)."""
    return isinstance(source, str) and source.lower().startswith(("postgresql://", "postgres://"))

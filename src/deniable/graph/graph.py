"""A registered graph and its release path: exact statistic → ledger charge → noise → Answer.

A graph is an edge table (two columns naming the ends of each edge) and, optionally, a node
table with one row per node id (its attributes). Its privacy unit is ``"edge"`` or
``"node"`` and its ``max_degree`` ``D`` is a public choice of the curator. The queries, their
sensitivities and the truncations are in :mod:`deniable.graph.queries` and
:mod:`deniable.graph.projection`.

The release path follows :func:`deniable.query.execute.execute` (DESIGN.md §6.5): a replay
of the identical question on the same data is served from the ledger at no cost; otherwise
an early refusal when the cost does not fit, the exact statistic (in the engine; at node
level the sequential projection runs here, over the edge list the engine sends in the
keyed-hash order), the ledger charge in one transaction, and only then the noise. A refused
or failed query costs nothing.

Privacy: each answer is ε-DP (discrete Laplace, ``epsilon``) or ρ-zCDP (discrete Gaussian,
``rho``) for the graph's privacy unit, with the sensitivity of its query and unit; it is
charged to the session's dataset, so graph and table answers share one budget.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.engines.base import Engine, TableBinding
from deniable.errors import BudgetExceeded, InvalidParameter, UnsafeQuery
from deniable.graph import lipschitz, sqlgen
from deniable.graph.projection import dict_key, edge_addition_projection
from deniable.graph.queries import (
    GraphQuery,
    Kind,
    Unit,
    check_max_degree,
    check_unit,
    policies,
    sensitivity,
    unit_text,
)
from deniable.ledger import Ledger
from deniable.mechanisms import Release, discrete_gaussian, geometric
from deniable.noise.exact import positive_fraction
from deniable.noise.source import RandomSource, resolve
from deniable.query.answer import Answer, AnswerMetadata, loss_to_json, show_loss, zero_like
from deniable.query.catalog import Column

MAX_DOMAIN = 10_000
"""Most values of a node attribute that an edge count by attribute may output."""

I64 = npt.NDArray[np.int64]
Budget = float | Fraction | None


@dataclass(frozen=True)
class GraphInfo:
    """A registered graph's public metadata.

    Attributes:
        name: the name queries use.
        source_col: the edge table's first end column.
        target_col: the edge table's second end column.
        unit: ``"edge"`` or ``"node"``.
        max_degree: the declared maximum degree ``D`` (public).
        node_key: the node table's id column, or None without a node table.
        nodes_name: the node table's name in SQL joins, or None without a node table.
        node_columns: the node table's columns.
        domains: declared domains of node attributes (public).
        version: the data version (edge and node tables) for the answer cache.
    """

    name: str
    source_col: str
    target_col: str
    unit: Unit
    max_degree: int
    node_key: str | None = None
    nodes_name: str | None = None
    node_columns: tuple[str, ...] = ()
    domains: Mapping[str, tuple[object, ...]] = field(default_factory=dict)
    version: str = ""


@dataclass(frozen=True)
class Exact:
    """Exact values of one query (internal: never released without noise)."""

    keys: list[object]
    values: I64


class Graph:
    """A registered graph: the Python API of its DP queries.

    Each method answers one query with differential privacy for the graph's privacy unit,
    charging ``epsilon`` (Epsilon and EpsilonDelta budgets, as ``(ε, 0)`` for the latter) or
    ``rho`` (Rho budgets) to the session's dataset before the answer is returned, and returns
    an :class:`~deniable.query.answer.Answer` with the noisy values, exact confidence
    intervals and the truncation policy in ``answer.metadata.row_policies``.
    """

    def __init__(
        self,
        info: GraphInfo,
        *,
        engine: Engine,
        edges: TableBinding,
        nodes: TableBinding | None,
        ledger: Ledger,
        dataset: str,
        analyst: str,
        budget_kind: type[PrivacyLoss],
        source: RandomSource | None = None,
    ) -> None:
        self.info = info
        self._engine = engine
        self._edges = edges
        self._nodes = nodes
        self._ledger = ledger
        self._dataset = dataset
        self._analyst = analyst
        self._kind = budget_kind
        self._source = source
        self._node_key = None
        if nodes is not None and info.node_key is not None:
            self._node_key = sqlgen.node_column(info.node_key, dict(nodes.columns)[info.node_key])
        self._ends = sqlgen.Ends.of(
            edges.name, dict(edges.columns), info.source_col, info.target_col, self._node_key
        )

    # -- the Python API --------------------------------------------------------------------

    def edge_count(
        self,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        level: float = 0.95,
        analyst: str | None = None,
    ) -> Answer:
        """Number of edges (edge level Δ = 1; node level: of the projection, Δ = D)."""
        q = GraphQuery(Kind.EDGE_COUNT, value_name="edges")
        return self.run(q, epsilon=epsilon, rho=rho, level=level, analyst=analyst)

    def degree_histogram(
        self,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        level: float = 0.95,
        analyst: str | None = None,
    ) -> Answer:
        """Nodes per degree ``1..D``: one row per degree, every degree output.

        Edge level: true degrees clamped to ``D`` (the last bucket is "D or more"), Δ = 4.
        Node level: degrees of the projection, Δ = 2D + 1.
        """
        q = GraphQuery(Kind.DEGREE_HISTOGRAM, value_name="nodes", key_name="degree")
        return self.run(q, epsilon=epsilon, rho=rho, level=level, analyst=analyst)

    def nodes_with_degree_at_least(
        self,
        d: int,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        level: float = 0.95,
        analyst: str | None = None,
    ) -> Answer:
        """Nodes with degree ``≥ d`` (edge level Δ = 2; node level, projected, Δ = D + 1)."""
        q = GraphQuery(Kind.DEGREE_AT_LEAST, threshold=d, value_name="nodes")
        return self.run(q, epsilon=epsilon, rho=rho, level=level, analyst=analyst)

    def triangle_count(
        self,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        level: float = 0.95,
        analyst: str | None = None,
    ) -> Answer:
        """Triangle count. Edge level: of the mutual top-D truncation, Δ = max(2(D − 1), 1).

        Node level: the linear-program Lipschitz extension of :mod:`deniable.graph.lipschitz`
        (exact when every node lies in at most D(D − 1)/2 triangles), Δ = D(D − 1)/2 + 1.
        """
        q = GraphQuery(Kind.TRIANGLES, value_name="triangles")
        return self.run(q, epsilon=epsilon, rho=rho, level=level, analyst=analyst)

    def edge_count_by(
        self,
        attribute: str,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        level: float = 0.95,
        analyst: str | None = None,
    ) -> Answer:
        """Edge ends per value of a node attribute: each edge counts at both its ends.

        Every value of the attribute's domain is output (declared in ``add_graph``; at edge
        level, where node attributes are not protected, read from the node table if not
        declared). Edge level Δ = 2; node level (projected degrees) Δ = 2D.
        """
        q = GraphQuery(
            Kind.EDGE_ENDS_BY, attribute=attribute, value_name="edges", key_name=attribute
        )
        return self.run(q, epsilon=epsilon, rho=rho, level=level, analyst=analyst)

    # -- the release path ------------------------------------------------------------------

    def run(
        self,
        query: GraphQuery,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        delta: Budget = None,
        level: float = 0.95,
        analyst: str | None = None,
        text: str | None = None,
        cache_scope: str | None = None,
        idempotency_key: str | None = None,
    ) -> Answer:
        """Answer ``query``: charged ``epsilon`` (or ``rho``) unless replayed from the ledger.

        ``cache_scope`` keeps replays apart (e.g. the analyst's name: another analyst's
        identical question is charged again, with fresh noise); ``idempotency_key`` is
        recorded with the charge, and the ledger refuses a second charge with the same key
        (:class:`~deniable.ledger.DuplicateRequest`), as for table queries.

        Raises:
            InvalidParameter: malformed options (nothing was spent).
            BudgetExceeded: the cost does not fit what is left (nothing was spent).
            EngineError: the engine failed (nothing was spent).
            LedgerError: the ledger could not record the charge (nothing was released).

        Nothing computed from the private rows can raise between the engine and the charge:
        the node-level triangle program always yields a certified value (solved exactly
        where the solver's certificate is loose, :mod:`deniable.graph.lipschitz`), and node
        attributes are matched against their declared domain in the engine.
        """
        info = self.info
        if delta not in (None, 0):
            raise InvalidParameter("graph queries spend no δ: leave delta unset")
        if isinstance(level, bool) or not isinstance(level, float | int) or not 0 < level < 1:
            raise InvalidParameter("level must be strictly between 0 and 1, e.g. 0.95")
        who = self._analyst if analyst is None else analyst
        if not isinstance(who, str) or not who:
            raise InvalidParameter("analyst must be a non-empty string")
        delta_sens = sensitivity(query, info.unit, info.max_degree)
        cost, budget = self._cost(epsilon, rho)
        keys = self._domain(query)
        asked = text if text is not None else self._describe(query)
        key = self._cache_key(query, cost, float(level), cache_scope)
        stored = self._ledger.cached_answer(self._dataset, key)
        if stored is not None:
            return Answer.from_bytes(
                stored,
                loss=zero_like(cost),
                remaining=self._ledger.remaining(self._dataset),
                cached=True,
            )
        self._precheck(cost, who)
        exact = self._exact(query, self._secret(), keys)
        charge = self._ledger.charge(
            self._dataset,
            cost,
            analyst=who,
            query_key=key,
            query_text=asked,
            idempotency_key=idempotency_key,
            details={
                "graph": info.name,
                "query": query.kind.value,
                "unit": info.unit,
                "max_degree": info.max_degree,
                "sensitivity": delta_sens,
                "loss": loss_to_json(cost),
            },
        )
        # Only now, after the commit, is anything computed from the data made public.
        release = self._noise(exact.values, delta_sens, budget)
        answer = self._answer(query, exact.keys, release, cost, float(level), asked, charge.id)
        self._ledger.store_answer(charge.id, answer.to_bytes())
        return answer

    def _exact(self, query: GraphQuery, secret: int, keys: Sequence[object] | None = None) -> Exact:
        """The exact (bounded) statistic for the order secret ``secret``: internal only.

        No noise and no charge: the release path and the privacy tests call it. Private like
        ``Session._exact``: analysts hold this object (:meth:`Session.graph`), and every
        public method of it charges and noises.
        """
        info = self.info
        caps = self._engine.capabilities
        ends, d = self._ends, info.max_degree
        kind = query.kind
        if info.unit == "node":
            return self._node_level(query, secret, keys)
        if kind is Kind.EDGE_COUNT:
            return Exact([None], self._scalar(sqlgen.edge_count(caps, ends)))
        if kind is Kind.DEGREE_AT_LEAST:
            assert query.threshold is not None
            tree = sqlgen.nodes_with_degree_at_least(caps, ends, query.threshold)
            return Exact([None], self._scalar(tree))
        if kind is Kind.TRIANGLES:
            tree = sqlgen.triangles_mutual_top_d(caps, ends, d, secret)
            return Exact([None], self._scalar(tree))
        if kind is Kind.DEGREE_HISTOGRAM:
            table = self._run(sqlgen.clamped_degree_histogram(caps, ends, d))
            return _by_key(table, list(range(1, d + 1)))
        assert query.attribute is not None and self._nodes is not None and keys is not None
        assert self._node_key is not None
        # matched against the domain in the engine, as at node level: Python gets indices
        attribute = sqlgen.node_column(query.attribute, dict(self._nodes.columns)[query.attribute])
        tree = sqlgen.edge_ends_by_group(
            caps, ends, self._nodes.name, self._node_key, attribute, keys
        )
        table = self._run(tree)
        index = np.asarray(table.column(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        count = np.asarray(table.column(1).to_numpy(zero_copy_only=False), dtype=np.int64)
        out = np.zeros(len(keys), dtype=np.int64)
        hit = (index >= 0) & (index < len(keys))
        np.add.at(out, index[hit], count[hit])
        return Exact(list(keys), out)

    def _node_level(self, query: GraphQuery, secret: int, keys: Sequence[object] | None) -> Exact:
        info = self.info
        caps = self._engine.capabilities
        d = info.max_degree
        if query.kind is Kind.TRIANGLES:  # no projection: deniable.graph.lipschitz
            cap = lipschitz.triangle_cap(d)
            table = self._run(sqlgen.triangle_structure(caps, self._ends, cap))
            rows = zip(*(table.column(i).to_pylist() for i in range(4)), strict=True)
            value = lipschitz.statistic((((h1, h2, h3), n) for h1, h2, h3, n in rows), cap)
            return Exact([None], np.array([value], dtype=np.int64))
        table = self._run(sqlgen.ordered_edges(caps, self._ends, secret))
        u_raw = table.column(0).to_numpy(zero_copy_only=False)
        w_raw = table.column(1).to_numpy(zero_copy_only=False)
        u, w, lookup = _dense_ids(u_raw, w_raw)
        kept = edge_addition_projection(u, w, d)
        n = int(max(u.max(), w.max())) + 1 if u.size else 0
        deg = np.bincount(u[kept], minlength=n) + np.bincount(w[kept], minlength=n)
        kind = query.kind
        if kind is Kind.EDGE_COUNT:
            return Exact([None], np.array([int(kept.sum())], dtype=np.int64))
        if kind is Kind.DEGREE_AT_LEAST:
            assert query.threshold is not None
            return Exact([None], np.array([int((deg >= query.threshold).sum())], dtype=np.int64))
        if kind is Kind.DEGREE_HISTOGRAM:
            hist = np.bincount(deg, minlength=d + 1)[1 : d + 1]
            return Exact(list(range(1, d + 1)), hist.astype(np.int64))
        assert kind is Kind.EDGE_ENDS_BY and keys is not None and self._nodes is not None
        assert self._node_key is not None and query.attribute is not None
        # the attribute is matched against the declared domain in the engine: Python gets
        # each node's index in it (or NULL), never a private value it would have to convert
        attribute = sqlgen.node_column(query.attribute, dict(self._nodes.columns)[query.attribute])
        if sqlgen.numbered(self._ends):
            tree = sqlgen.numbered_attributes(
                caps, self._ends, self._nodes.name, self._node_key, attribute, keys
            )
        else:
            tree = sqlgen.attribute_groups(
                caps, self._nodes.name, self._node_key, attribute, keys, self._ends.mode
            )
        attrs = self._run(tree)
        where = lookup(attrs.column(0).to_numpy(zero_copy_only=False))
        groups = np.asarray(
            pc.fill_null(attrs.column(1), -1).to_numpy(zero_copy_only=False), dtype=np.int64
        )
        hit = (where >= 0) & (groups >= 0) & (groups < len(keys))
        out = np.zeros(len(keys), dtype=np.int64)
        np.add.at(out, groups[hit], deg[where[hit]])
        return Exact(list(keys), out)

    # -- helpers ---------------------------------------------------------------------------

    def _run(self, tree: exp.Expression) -> pa.Table:
        sql = sqlgen.render(tree, self._engine.capabilities)
        return self._engine.run(self._edges, sql)

    def _scalar(self, tree: exp.Expression) -> I64:
        table = self._run(tree)
        value = table.column(0)[0].as_py()
        return np.array([int(value or 0)], dtype=np.int64)

    def _secret(self) -> int:
        return int(resolve(self._source).words(1)[0]) >> 1

    def _cost(
        self, epsilon: float | Fraction | None, rho: float | Fraction | None
    ) -> tuple[PrivacyLoss, Fraction]:
        kind = self._kind
        if kind is Rho:
            if epsilon is not None or rho is None:
                raise InvalidParameter("this dataset's budget is ρ-zCDP: give rho=…, not epsilon")
            r = positive_fraction(rho, "rho")
            return Rho(rho=r), r
        if rho is not None or epsilon is None:
            raise InvalidParameter("this dataset's budget is in ε: give epsilon=…, not rho")
        e = positive_fraction(epsilon, "epsilon")
        if kind is EpsilonDelta:
            return EpsilonDelta(epsilon=e, delta=0), e
        return Epsilon(epsilon=e), e

    def _precheck(self, cost: PrivacyLoss, analyst: str) -> None:
        """Refuse early (before the engine runs) what the ledger's charge would refuse.

        The ledger's own dry run: the dataset's accountant (basic or zCDP) and the analyst's
        allowance decide, exactly as in :meth:`Ledger.charge`, which re-checks atomically.
        """
        if not self._ledger.can_charge(self._dataset, cost, analyst=analyst):
            left = self._ledger.remaining(self._dataset, analyst=analyst)
            raise BudgetExceeded(
                f"this query costs {show_loss(cost)} but only {show_loss(left)} is left of "
                f"the budget of dataset {self._dataset!r}; nothing was spent",
                requested=cost,
                remaining=left,
            )

    def _noise(self, values: I64, delta_sens: int, budget: Fraction) -> Release:
        if self._kind is Rho:
            # L2 sensitivity bounded by the L1 sensitivity (module docstring of queries.py)
            return discrete_gaussian(
                values, sensitivity=delta_sens, rho=budget, source=self._source
            )
        return geometric(values, sensitivity=delta_sens, epsilon=budget, source=self._source)

    def _domain(self, query: GraphQuery) -> list[object] | None:
        info = self.info
        if query.kind is not Kind.EDGE_ENDS_BY:
            return None
        attr = query.attribute
        if self._nodes is None or info.node_key is None:
            raise InvalidParameter(
                f"graph {info.name!r} has no node table: register it with nodes=… and "
                "node_key=… to count edges by a node attribute"
            )
        if not isinstance(attr, str) or attr not in info.node_columns or attr == info.node_key:
            raise InvalidParameter(
                f"{attr!r} is not an attribute of graph {info.name!r}'s nodes "
                f"(attributes: {[c for c in info.node_columns if c != info.node_key]})"
            )
        assert self._nodes is not None
        _scalar_attribute(attr, dict(self._nodes.columns)[attr])
        if attr in info.domains:
            return list(info.domains[attr])
        if info.unit == "node":
            raise InvalidParameter(
                f"at node level the node attributes are private: declare the values of "
                f"{attr!r} in add_graph(domains={{{attr!r}: [...]}})"
            )
        # edge level: node attributes are not protected; their values are public keys
        table = self._run(sqlgen.distinct_values(self._nodes.name, attr))
        values = []
        for scalar in table.column(0):
            try:
                values.append(scalar.as_py())
            except (OverflowError, ValueError):
                continue  # a value Python cannot hold (DATE 'infinity'): in no group
        if len(values) > MAX_DOMAIN:
            raise InvalidParameter(
                f"{attr!r} has more than {MAX_DOMAIN} values: declare a smaller domain"
            )
        return [v for v in values if v is not None]

    def replay_key(
        self,
        query: GraphQuery,
        *,
        epsilon: Budget = None,
        rho: Budget = None,
        level: float = 0.95,
        cache_scope: str | None = None,
    ) -> str:
        """The ledger key :meth:`run` stores and replays this question under (no data read).

        Raises:
            InvalidParameter: malformed options.
        """
        cost, _ = self._cost(epsilon, rho)
        return self._cache_key(query, cost, float(level), cache_scope)

    def _cache_key(
        self, query: GraphQuery, cost: PrivacyLoss, level: float, scope: str | None = None
    ) -> str:
        info = self.info
        body = {
            "graph": info.name,
            "version": info.version,
            "unit": info.unit,
            "max_degree": info.max_degree,
            "domains": {k: [repr(v) for v in vs] for k, vs in info.domains.items()},
            "query": [query.kind.value, query.threshold, query.attribute],
            "names": [query.value_name, query.key_name],
            "loss": loss_to_json(cost),
            "level": level,
        }
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return f"graph/{digest}" if scope is None else f"{scope}/graph/{digest}"

    def _describe(self, query: GraphQuery) -> str:
        name = self.info.name
        if query.kind is Kind.DEGREE_AT_LEAST:
            return f"{name}.nodes_with_degree_at_least({query.threshold})"
        if query.kind is Kind.EDGE_ENDS_BY:
            return f"{name}.edge_count_by({query.attribute!r})"
        return f"{name}.{query.kind.value}()"

    def _answer(
        self,
        query: GraphQuery,
        keys: list[object],
        release: Release,
        cost: PrivacyLoss,
        level: float,
        asked: str,
        charge_id: int,
    ) -> Answer:
        info = self.info
        low, high = release.interval(level)
        data: dict[str, object] = {}
        if query.key_name is not None:
            data[query.key_name] = keys
        v = query.value_name
        data[v] = np.asarray(release.value, dtype=np.int64)
        data[f"{v}_low"] = low
        data[f"{v}_high"] = high
        frame = pd.DataFrame(data, index=pd.RangeIndex(len(keys)))
        sens = sensitivity(query, info.unit, info.max_degree)
        meta = AnswerMetadata(
            query=asked,
            loss=cost,
            cost=cost,
            remaining=self._ledger.remaining(self._dataset),
            level=level,
            bounds={},
            max_groups=1,
            max_rows=1 if info.unit == "edge" else info.max_degree,
            privacy_unit=unit_text(info.unit, info.source_col, info.target_col),
            mechanisms={v: f"{release.mechanism}, L1 sensitivity {sens}"},
            notes={},
            partition_selection=(
                None
                if query.key_name is None
                else "public keys: every key is output, empty ones included"
            ),
            charge_id=charge_id,
            row_policies=policies(
                query, info.unit, info.max_degree, info.source_col, info.target_col
            ),
        )
        return Answer(frame, meta)


def _dense_ids(
    u_raw: npt.NDArray[Any], w_raw: npt.NDArray[Any]
) -> tuple[I64, I64, Callable[[npt.NDArray[Any]], I64]]:
    """Node ids as integers ``0..n−1`` (order-preserving), and the map of other ids to them.

    The ids are the engine's node identities (:func:`sqlgen.node_id`: 64-bit integers,
    doubles without NaN, or bytes), which compare in Python as in the engine. Integer ids in a
    range not much wider than the number of edge ends are shifted by their minimum (no sort);
    other ids are factorised (sorted). The map gives −1 for ids that are not an end of any
    edge.
    """
    m = len(u_raw)
    if m and u_raw.dtype.kind in "iu" and w_raw.dtype.kind in "iu":
        lo = int(min(u_raw.min(), w_raw.min()))
        hi = int(max(u_raw.max(), w_raw.max()))
        if hi - lo < 4 * m + 1024:
            n = hi - lo + 1

            def shifted(ids: npt.NDArray[Any]) -> I64:
                arr = np.asarray(ids)
                if arr.dtype.kind not in "iu":
                    return np.full(arr.size, -1, dtype=np.int64)
                x = arr.astype(np.int64) - lo
                return np.where((x >= 0) & (x < n), x, -1).astype(np.int64)

            return (u_raw.astype(np.int64) - lo, w_raw.astype(np.int64) - lo, shifted)
    # No sentinel code (a NaN, which node identities never hold, would be one node): every
    # edge end gets an id ≥ 0 and nothing here can fail on the private edge list.
    codes, uniques = pd.factorize(np.concatenate([u_raw, w_raw]), sort=True, use_na_sentinel=False)
    index = pd.Index(uniques)

    def factorised(ids: npt.NDArray[Any]) -> I64:
        return np.asarray(index.get_indexer(ids), dtype=np.int64)

    return codes[:m].astype(np.int64), codes[m:].astype(np.int64), factorised


def _checked_ids(
    engine: Engine,
    edges: TableBinding,
    source_col: str,
    target_col: str,
    key: Column | None,
) -> sqlgen.IdMode:
    """The id mode of a graph's columns, refusing ids the engine cannot compare safely.

    Raises:
        InvalidParameter: text ids on an engine without NFC normalisation (Spark); id
            columns that mix integers and reals, or DECIMAL ids (:func:`sqlgen.check_id_columns`).
    """
    ends = sqlgen.Ends.of(edges.name, dict(edges.columns), source_col, target_col, key)
    sqlgen.check_id_columns(ends.source, ends.target, *([] if key is None else [key]))
    try:
        for column in (ends.source, ends.target, *([] if key is None else [key])):
            sqlgen.node_id(engine.capabilities, column, ends.mode)
    except UnsafeQuery as e:
        raise InvalidParameter(str(e)) from None
    return ends.mode


def _by_key(table: pa.Table, keys: list[object]) -> Exact:
    """Per-key exact counts in the order of ``keys`` (missing keys are 0, others dropped)."""
    slot = {dict_key(k): i for i, k in enumerate(keys)}
    out = np.zeros(len(keys), dtype=np.int64)
    for k, n in zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True):
        if dict_key(k) in slot:
            out[slot[dict_key(k)]] = int(n)
    return Exact(keys, out)


_SCALARS = (str, int, float, bool, datetime.date, datetime.time, decimal.Decimal)
"""Python types a declared attribute value may have."""

_NON_SCALAR = ("STRUCT", "MAP", "UNION", "LIST", "ARRAY", "JSON")


def _scalar_attribute(name: str, sql_type: str) -> None:
    """Refuse a node attribute whose values are not scalars (lists, structs, maps).

    Raises:
        InvalidParameter: a non-scalar attribute type.
    """
    t = sql_type.strip().upper()
    if "[" in t or t.startswith(_NON_SCALAR):
        raise InvalidParameter(
            f"node attribute {name!r} has type {sql_type}: only scalar attributes (text, "
            "numbers, dates, booleans) can group edge counts"
        )


def register(
    name: str,
    *,
    engine: Engine,
    edges: TableBinding,
    nodes: TableBinding | None,
    source_col: str,
    target_col: str,
    unit: object,
    max_degree: object,
    node_key: str | None,
    nodes_name: str | None,
    domains: Mapping[str, Sequence[object]] | None,
    ledger: Ledger,
    dataset: str,
    analyst: str,
    budget_kind: type[PrivacyLoss],
    source: RandomSource | None,
) -> Graph:
    """Check a graph's declaration against its tables' schemas and open its :class:`Graph`.

    Reads the schemas and, with a node table, checks that ``node_key`` is unique and never
    NULL (a curator's check; nothing is released).

    Raises:
        InvalidParameter: unknown columns, a bad unit or max_degree, a node table without
            node_key (or the reverse), a node key that is not unique.
    """
    u = check_unit(unit)
    d = check_max_degree(max_degree)
    columns = [c for c, _ in edges.columns]
    for label, col in (("source_col", source_col), ("target_col", target_col)):
        if not isinstance(col, str) or col not in columns:
            raise InvalidParameter(f"{label} {col!r} is not a column of the edge table {columns}")
    if source_col == target_col:
        raise InvalidParameter("source_col and target_col must be two different columns")
    node_columns: tuple[str, ...] = ()
    if (nodes is None) != (node_key is None):
        raise InvalidParameter("give both nodes=… and node_key=…, or neither")
    if nodes is None:
        _checked_ids(engine, edges, source_col, target_col, None)
    else:
        node_columns = tuple(c for c, _ in nodes.columns)
        if node_key not in node_columns:
            raise InvalidParameter(f"node_key {node_key!r} is not a column of the node table")
        if not engine.joinable(edges, nodes):
            raise InvalidParameter(
                "the edge and node tables live in different databases of the engine: "
                "register both from files or DataFrames, or both from the same connection"
            )
        assert node_key is not None
        key = sqlgen.node_column(node_key, dict(nodes.columns)[node_key])
        mode = _checked_ids(engine, edges, source_col, target_col, key)
        caps = engine.capabilities
        tree = sqlgen.key_profile(caps, nodes.name, key, mode)
        profile = engine.run(nodes, sqlgen.render(tree, caps))
        rows, distinct, non_null = (int(profile.column(i)[0].as_py()) for i in range(3))
        if not rows == distinct == non_null:
            raise InvalidParameter(
                f"node_key {node_key!r} must be unique and never NULL in the node table"
            )
    declared: dict[str, tuple[object, ...]] = {}
    for attr, values in (domains or {}).items():
        if attr not in node_columns or attr == node_key:
            raise InvalidParameter(f"domains names {attr!r}, which is not a node attribute")
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise InvalidParameter(
                f"the domain of {attr!r} must be a list of values, e.g. ['a', 'b']"
            )
        vals = tuple(values)
        if not all(v is None or isinstance(v, _SCALARS) for v in vals):
            raise InvalidParameter(
                f"the domain of {attr!r} must list scalar values (text, numbers, booleans, dates)"
            )
        if not vals or len(vals) > MAX_DOMAIN or len({dict_key(v) for v in vals}) != len(vals):
            raise InvalidParameter(
                f"the domain of {attr!r} must hold 1 to {MAX_DOMAIN} distinct values"
            )
        declared[attr] = vals
    version = edges.version + ("" if nodes is None else "/" + nodes.version)
    info = GraphInfo(
        name=name,
        source_col=source_col,
        target_col=target_col,
        unit=u,
        max_degree=d,
        node_key=node_key,
        nodes_name=None if nodes is None else (nodes_name or "nodes"),
        node_columns=node_columns,
        domains=MappingProxyType(declared),
        version=version,
    )
    return Graph(
        info,
        engine=engine,
        edges=edges,
        nodes=nodes,
        ledger=ledger,
        dataset=dataset,
        analyst=analyst,
        budget_kind=budget_kind,
        source=source,
    )

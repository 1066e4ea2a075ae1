"""The service core shared by the HTTP API and the command line.

A :class:`Service` opens one :class:`~deniable.ledger.Ledger` and one
:class:`~deniable.curator.session.Session` per configured dataset, and answers on behalf
of authenticated principals (a name and a role, ``"curator"`` or ``"analyst"``):

* every query goes through ``Session.execute`` — the one release path: compile (no data),
  charge in the ledger, then noise — charged to the principal's name, so per-analyst
  allowances (slices of the dataset's one cap) apply;
* replays of an identical query are free; whether another analyst's paid answer is
  replayed is ``server.share_replays`` (default False: a free replay would reveal that
  someone else asked the same question);
* an Idempotency-Key makes a retried request return the same answer, charged once: the
  ledger refuses a second charge with the same (dataset, analyst, key) and the stored
  answer of the first is returned; the curator's tuning and synthetic releases keep their
  whole response (compressed) under the key the same way (:meth:`Service.keyed_release`,
  a key scoped to its route: :func:`ledger_key`);
* analysts see only their own releases, numbered 1, 2, 3, … per dataset (their own release
  numbers, in answers' ``charge_id`` and in their history): the ledger's global charge ids
  count everyone's releases, so they are for curators only, as is the full ledger and the
  management of analysts, allowances and reservations;
* an analyst's ``remaining`` is their own slice: the least of what is left of their
  allowance and of what the dataset can still give them (its cap less everything spent
  and every other analyst's unspent reservation), and a refusal says only that figure
  (never the dataset's spent total or others' reservations; see docs/accounting.md);
* graph queries (``SELECT COUNT(*) FROM g``, ``… FROM degrees(g) …``, ``… FROM
  triangles(g)``, … over a graph declared in ``[[datasets.NAME.graphs]]``, see
  :mod:`deniable.graph.sql`) take the same path: charged to the principal's name against
  the dataset's one cap and its allowance, replayed under the same ``share_replays`` rule,
  and answered under the dataset's lock; their Idempotency-Key is recorded with the charge,
  as for tables;
* a dry run (:meth:`Service.accuracy`) compiles a query and reports the half-widths its
  answer would have, and the least loss meeting targets: no data read, no engine run,
  nothing charged or written;
* curators may measure contributions with DP (:meth:`Service.tune`, charged to their name
  like any release) and run the NON-PRIVATE exact utility analysis
  (:meth:`Service.utility_analysis`, never charged, never stored, refused to analysts).

The service itself releases nothing beyond what the release path charges: metadata holds
only what the curator declared (schema, bounds, public keys) and the budget, never counts
of rows or any other value computed from the data.

Not shared across ``fork``: create one per process (``deniable.server.run`` does, in each
worker, after the worker started).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, Protocol

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho, exact
from deniable.curator.session import Session
from deniable.curator.tune import TuneReport, UtilityAnalysis
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DuplicateRequest,
    InternalError,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
    UnknownDataset,
)
from deniable.graph import Graph, GraphInfo
from deniable.graph.sql import graph_of
from deniable.graph.sql import parse as parse_graph_sql
from deniable.ledger import Charge, Ledger
from deniable.ledger.analysts import AnalystInfo, Principal
from deniable.noise.source import RandomSource
from deniable.query.accuracy import AccuracyReport
from deniable.query.accuracy import accuracy as query_accuracy
from deniable.query.answer import Answer
from deniable.query.builder import Query
from deniable.query.catalog import ROW, TableInfo
from deniable.query.execute import replay, replay_key
from deniable.query.program import QueryProgram
from deniable.server.config import ConfigError, DatasetConfig, ServiceConfig
from deniable.server.errors import (
    Forbidden,
    IdempotencyConflict,
    RequestInProgress,
    UnknownResource,
)
from deniable.synth.discretize import BinSpec, Quantiles, SelectKeys
from deniable.synth.release import Synthetic

Role = Literal["curator", "analyst"]

MAX_IDEMPOTENCY_KEY = 200
"""Longest Idempotency-Key accepted (characters)."""

KEY_REUSED = (
    "this Idempotency-Key was already used for another request (or other parameters); "
    "use a new key for a new request"
)
"""The refusal of a key reused for a different request (every keyed route says this)."""

KeyedKind = Literal["tune", "synth"]
"""The curator's charging releases that keep their response under an Idempotency-Key."""

RESPONSE_FORMAT = b"deniable-response/1"
"""First line of a keyed curator release's stored response (see :func:`pack_response`)."""


def check_idempotency_key(key: str | None) -> None:
    """Refuse an Idempotency-Key the service does not accept (None is no key).

    Raises:
        InvalidParameter: not 1 to :data:`MAX_IDEMPOTENCY_KEY` printable characters.
    """
    if key is not None and (
        not isinstance(key, str)
        or not key
        or len(key) > MAX_IDEMPOTENCY_KEY
        or not key.isprintable()
    ):
        raise InvalidParameter(
            f"the Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters"
        )


def ledger_key(kind: KeyedKind, idempotency_key: str) -> str:
    """The key a curator release's charge carries in the ledger: ``kind``, U+001F, the key.

    A key is scoped to its route, as a retry is sent to the route it was sent to: the same
    key on a query and on a tuning request names two requests, each charged once. A client's
    key is printable (:func:`check_idempotency_key`) and U+001F is not, so no client key
    (a query's, recorded as sent) can equal one of these.
    """
    return f"{kind}\x1f{idempotency_key}"


def request_key(kind: KeyedKind, request: str, idempotency_key: str) -> str:
    """The ``query_key`` of a keyed curator release: its kind and a digest of the request.

    The digest covers the request (``request``, its canonical JSON) and the Idempotency-Key,
    so a retry of the same request under the same key has the same ``query_key`` (a reused
    key with another body does not: :data:`KEY_REUSED`), while two requests under different
    keys never share one: such a release is never replayed from the answer cache.
    """
    digest = hashlib.sha256(
        idempotency_key.encode("utf-8") + b"\x00" + request.encode("utf-8")
    ).hexdigest()
    return f"{kind}/keyed/{digest}"


def pack_response(kind: KeyedKind, body: bytes, record: bytes | None) -> bytes:
    """The stored form of a keyed curator release's response (JSON ``body``).

    One line :data:`RESPONSE_FORMAT`, one line of JSON (``kind``, ``encoding`` and, for a
    synthetic release, the release's own ``record`` — what :mod:`deniable.synth.release`
    stores beside an unkeyed charge), then the body compressed with zlib: a synthetic
    table of 200,000 rows is megabytes of JSON (2.7 MB for three columns, stored in
    0.53 MB). Level 1: 5.1 times smaller in 13 ms there; level 6 gains a quarter more for
    18 times the time (0.24 s, added to the response's latency).
    """
    header: dict[str, object] = {"kind": kind, "encoding": "zlib"}
    if record is not None:
        header["record"] = json.loads(record)
    return b"\n".join(
        (
            RESPONSE_FORMAT,
            json.dumps(header, sort_keys=True).encode(),
            zlib.compress(body, 1),
        )
    )


def unpack_response(payload: bytes) -> bytes:
    """The JSON body of a response packed by :func:`pack_response`.

    Raises:
        LedgerError: the payload is not a packed response (the release failed after its
            charge and only its own record was stored: :meth:`ServiceLedger.keep_record`).
    """
    first, _, rest = payload.partition(b"\n")
    header, _, data = rest.partition(b"\n")
    try:
        if first != RESPONSE_FORMAT or json.loads(header).get("encoding") != "zlib":
            raise ValueError("not a packed response")
        return zlib.decompress(data)
    except (ValueError, zlib.error) as e:
        raise LedgerError(
            "the request with this Idempotency-Key was charged but its response was not "
            "stored (it failed after its charge, which stands): send it with a new key"
        ) from e


@dataclass
class _Pending:
    """One keyed curator release in progress on one thread (see :class:`ServiceLedger`)."""

    idempotency_key: str
    query_key: str
    charge_id: int | None = None
    record: bytes | None = None


class ServiceLedger(Ledger):
    """The service's ledger: a :class:`~deniable.ledger.Ledger` that can key curator releases.

    The curator's releases (``Session.tune``, ``Session.synthesize``) charge the ledger
    themselves and take no Idempotency-Key. Inside :meth:`keyed` (one thread, the
    request's), the FIRST charge such a release makes carries the request's key and
    ``query_key`` (:func:`request_key`): the ledger then refuses a second charge with the
    same (dataset, analyst, key) — :class:`~deniable.errors.DuplicateRequest`, nothing
    written — exactly as for a keyed query. A later charge of the same release (tuning's
    value histograms) is the same request's, and no retry reaches it: it is recorded as
    given. An answer the release stores for its keyed charge (a synthetic release's record)
    is held and stored by the service with the response (:func:`pack_response`), since a
    charge has one stored answer. Every other call is the ledger's own.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        anchor: str | os.PathLike[str] | None = None,
        read_only: bool = False,
    ) -> None:
        super().__init__(path, timeout=timeout, anchor=anchor, read_only=read_only)
        self._pending = threading.local()

    @contextmanager
    def keyed(self, idempotency_key: str, query_key: str) -> Iterator[_Pending]:
        """Key the first charge made on this thread until the block ends."""
        pending = _Pending(idempotency_key, query_key)
        self._pending.state = pending
        try:
            yield pending
        finally:
            self._pending.state = None

    def charge(
        self,
        dataset: str,
        loss: PrivacyLoss,
        *,
        analyst: str,
        query_key: str,
        query_text: str,
        details: Mapping[str, object] | None = None,
        idempotency_key: str | None = None,
    ) -> Charge:
        """:meth:`Ledger.charge`; inside :meth:`keyed`, the first charge carries the key."""
        pending: _Pending | None = getattr(self._pending, "state", None)
        if pending is None or pending.charge_id is not None or idempotency_key is not None:
            return super().charge(
                dataset,
                loss,
                analyst=analyst,
                query_key=query_key,
                query_text=query_text,
                details=details,
                idempotency_key=idempotency_key,
            )
        charge = super().charge(
            dataset,
            loss,
            analyst=analyst,
            query_key=pending.query_key,
            query_text=query_text,
            details=details,
            idempotency_key=pending.idempotency_key,
        )
        pending.charge_id = charge.id
        return charge

    def keep_record(self, pending: _Pending) -> None:
        """Store the answer held for ``pending``'s charge as it was given (no response).

        For a keyed release that failed after its charge: its own record (a synthetic
        release's measurements) stays with the charge, as for an unkeyed release.
        """
        if pending.charge_id is not None and pending.record is not None:
            super().store_answer(pending.charge_id, pending.record)

    def store_answer(self, charge_id: int, payload: bytes | bytearray | memoryview) -> None:
        """:meth:`Ledger.store_answer`; the keyed charge's answer is held for the response."""
        pending: _Pending | None = getattr(self._pending, "state", None)
        if pending is not None and pending.charge_id is not None and charge_id == pending.charge_id:
            pending.record = bytes(payload)
            return
        super().store_answer(charge_id, payload)


class Caller(Protocol):
    """Who is asking: anything with a ``name`` and a ``role`` (the ledger's Principal)."""

    @property
    def name(self) -> str:
        """The analyst's name (charges are recorded under it)."""
        ...

    @property
    def role(self) -> str:
        """``"curator"`` or ``"analyst"``."""
        ...


@dataclass(frozen=True)
class TableMetadata:
    """Public metadata of one table: what the curator declared, nothing from the data.

    Attributes:
        name: the name used in ``FROM`` / ``JOIN``.
        public: a public lookup table (joinable, never queried alone).
        columns: ``(name, engine type)`` pairs.
        privacy_unit: the column identifying a person, or None (row-level privacy).
        bounds: declared clamping ranges by column.
        public_keys: declared domains of group-key columns.
        max_groups: groups one person may contribute to per query.
        max_rows: rows one person may contribute to one group.
        unique_keys: unique key column sets of a public table.
    """

    name: str
    public: bool
    columns: tuple[tuple[str, str], ...]
    privacy_unit: str | None
    bounds: Mapping[str, tuple[float, float]]
    public_keys: Mapping[str, tuple[object, ...]]
    max_groups: int
    max_rows: int
    unique_keys: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class GraphMetadata:
    """Public metadata of one graph: what the curator declared, nothing from the data.

    Attributes:
        name: the name used in ``FROM g``, ``degrees(g)``, ``triangles(g)``.
        unit: the privacy unit, ``"edge"`` or ``"node"``.
        max_degree: the declared degree bound ``D`` (public).
        source_col: the edge table's column of one end.
        target_col: the edge table's column of the other end.
        node_key: the node table's id column, or None without a node table.
        nodes_name: the node table's name in SQL joins, or None without one.
        node_attributes: the node table's other columns (attributes).
        domains: declared values of node attributes.
    """

    name: str
    unit: str
    max_degree: int
    source_col: str
    target_col: str
    node_key: str | None
    nodes_name: str | None
    node_attributes: tuple[str, ...]
    domains: Mapping[str, tuple[object, ...]]


@dataclass(frozen=True)
class BudgetView:
    """A dataset's budget as one caller sees it.

    Attributes:
        dataset: the dataset.
        cap: the dataset's one total cap.
        spent: what has been spent by everyone (curators) or by the analyst (analysts).
        remaining: what the caller may still spend: the least of what is left of the cap
            and of the caller's allowance.
        allowance: the caller's slice of the cap, or None when it has none.
        reserved: the caller's reserved slice (held back from every other analyst), or
            None when it has none.
    """

    dataset: str
    cap: PrivacyLoss
    spent: PrivacyLoss
    remaining: PrivacyLoss
    allowance: PrivacyLoss | None
    reserved: PrivacyLoss | None = None


@dataclass(frozen=True)
class DatasetMetadata:
    """Public metadata of a dataset and the caller's budget on it.

    Attributes:
        name: the dataset.
        table: the private table's name, or None for a graph-only dataset.
        tables: the private table first, then its public lookup tables.
        budget: the caller's view of the budget.
        graphs: the dataset's graphs.
    """

    name: str
    table: str | None
    tables: tuple[TableMetadata, ...]
    budget: BudgetView
    graphs: tuple[GraphMetadata, ...] = ()


@dataclass(frozen=True)
class AccuracyResult:
    """A dry run's result (:meth:`Service.accuracy`): nothing read, nothing charged.

    Attributes:
        query: the query as written (SQL).
        report: the expected half-width (or rank error) of every aggregate output.
        loss: the loss the widths are for (the one asked, else the least found).
        least: the least loss meeting every target, when targets were given.
        target: the targets asked (half-widths by output name).
        remaining: what the caller may still spend.
        fits: whether ``loss`` fits what the caller may still spend.
    """

    query: str
    report: AccuracyReport
    loss: PrivacyLoss
    least: PrivacyLoss | None
    target: Mapping[str, float]
    remaining: PrivacyLoss
    fits: bool


@dataclass(frozen=True)
class TuneResult:
    """What :meth:`Service.tune` measured (charged) and proposes (free).

    Attributes:
        table: the table's registered name.
        report: the released histograms and the ranked proposals.
        applied: whether the best proposal became the table's bounds in this process.
        remaining: what the curator may still spend after the charge.
    """

    table: str
    report: TuneReport
    applied: bool
    remaining: PrivacyLoss


@dataclass(frozen=True)
class SynthResult:
    """What :meth:`Service.synthesize` released (charged once).

    Attributes:
        table: the table's registered name.
        synthetic: the synthetic table and its measurements.
        remaining: what the curator may still spend after the charge.
    """

    table: str
    synthetic: Synthetic
    remaining: PrivacyLoss


class Service:
    """One ledger and one session per dataset, answering for authenticated principals.

    Args:
        config: the validated configuration (:func:`~deniable.server.config.load_config`).
        source: randomness for every release (default: the OS CSPRNG, drawn in this
            process; a seeded source is for tests only).

    Raises:
        ConfigError: a dataset's budget differs from the cap the ledger recorded, or a
            table or graph cannot be registered as declared.
        LedgerError: the ledger cannot be opened.

    A tampered ledger (:class:`~deniable.errors.LedgerTampered`) does not stop the service
    from starting: every query (and the dataset metadata, which needs the session the
    ledger refused to register) then fails with it until a curator acts
    (``deniable ledger verify``), while budgets, histories and the full ledger stay
    readable.
    """

    def __init__(self, config: ServiceConfig, *, source: RandomSource | None = None) -> None:
        self._config = config
        self._ledger = ServiceLedger(config.ledger, anchor=config.anchor)
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._tampered: LedgerTampered | None = None
        try:
            for name in config.datasets:
                session = self._open(name, source)
                if session is not None:
                    self._sessions[name] = session
                    self._locks[name] = threading.Lock()
            if self._tampered is None:
                for analyst, slices in config.allowances.items():
                    reserved = config.reserved.get(analyst, frozenset())
                    for ds_name, loss in slices.items():
                        try:
                            self._ledger.set_allowance(
                                ds_name, analyst, loss, reserve=ds_name in reserved
                            )
                        except InvalidParameter as e:
                            raise ConfigError(f"analysts.{analyst}: {e}") from e
        except BaseException:
            self.close()
            raise

    def _open(self, name: str, source: RandomSource | None) -> Session | None:
        ds = self._config.datasets[name]
        try:
            session = Session(
                budget=ds.budget,
                ledger=self._ledger,
                dataset=name,
                analyst="(service)",
                source=source,
                accountant=ds.accountant,
            )
        except LedgerTampered as e:
            self._tampered = e
            return None
        except CapConflict as e:
            recorded = self._ledger.cap(name)
            raise ConfigError(
                f"datasets.{name}.budget is {ds.budget} but the ledger recorded {recorded} "
                f"for {name!r}; write the recorded cap in the configuration (a cap is changed "
                "only by a curator, explicitly)"
            ) from e
        try:
            if ds.has_table:
                session.add_table(
                    ds.table,
                    str(ds.source),
                    table=ds.source_table,
                    privacy_unit=ROW if ds.privacy_unit is None else ds.privacy_unit,
                    bounds=dict(ds.bounds) or None,
                    max_groups=ds.max_groups,
                    max_rows=ds.max_rows,
                    public_keys=dict(ds.public_keys) or None,
                )
            for pt in ds.public_tables:
                session.add_public_table(pt.name, str(pt.source), unique_key=pt.unique_key)
            self._add_graphs(session, ds)
        except InvalidParameter as e:
            session.close()
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"datasets.{name}: {e}") from e
        except BaseException:
            session.close()
            raise
        return session

    @staticmethod
    def _add_graphs(session: Session, ds: DatasetConfig) -> None:
        """Register the dataset's graphs (schemas read, node keys checked; nothing released).

        Raises:
            ConfigError: a graph cannot be registered as declared (names the graph's key).
        """
        for i, g in enumerate(ds.graphs):
            # a PostgreSQL dataset reads its graphs' tables in place, from its database
            url = str(ds.source) if ds.engine == "postgresql" else None
            try:
                session.add_graph(
                    g.name,
                    str(g.source) if url is None else url,
                    source_col=g.source_col,
                    target_col=g.target_col,
                    unit=g.unit,
                    max_degree=g.max_degree,
                    nodes=None if g.nodes is None else str(g.nodes) if url is None else url,
                    node_key=g.node_key,
                    nodes_name=g.nodes_name,
                    domains=dict(g.domains) or None,
                    table=None if url is None else str(g.source),
                    nodes_table=None if url is None or g.nodes is None else str(g.nodes),
                )
            except InvalidParameter as e:
                raise ConfigError(
                    f"datasets.{ds.name}.graphs[{i}] (graph {g.name!r}): {e}; fix the "
                    "declaration or the graph's files"
                ) from e

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def config(self) -> ServiceConfig:
        """The configuration the service was built from."""
        return self._config

    @property
    def ledger(self) -> Ledger:
        """The service's ledger (one connection, shared by its sessions)."""
        return self._ledger

    def close(self) -> None:
        """Close the sessions (their engines) and the ledger."""
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        self._ledger.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- identity -------------------------------------------------------------------------

    def authenticate(self, token: str) -> Principal | None:
        """The principal holding ``token``, or None (unknown or revoked); constant time."""
        return self._ledger.authenticate(token)

    # -- public metadata ------------------------------------------------------------------

    def datasets(self) -> tuple[str, ...]:
        """The configured datasets' names."""
        return tuple(self._config.datasets)

    def metadata(self, dataset: str, principal: Caller | None = None) -> DatasetMetadata:
        """The dataset's declared schema and policy, and the caller's budget (no loss).

        Raises:
            UnknownDataset: no such dataset.
            LedgerTampered: the ledger failed verification at start-up.
        """
        session = self._session(dataset)
        ds = self._config.datasets[dataset]
        tables = [session.tables[ds.table]] if ds.has_table else []
        tables += [t for t in session.tables.values() if t.public]
        return DatasetMetadata(
            name=dataset,
            table=ds.table if ds.has_table else None,
            tables=tuple(_table_metadata(t) for t in tables),
            budget=self.budget(dataset, analyst=_analyst_of(principal)),
            graphs=tuple(_graph_metadata(session.graph(g.name).info) for g in ds.graphs),
        )

    def budget(self, dataset: str, analyst: str | None = None) -> BudgetView:
        """The dataset's cap and what is spent and left (for ``analyst`` if given).

        Raises:
            UnknownDataset: no such dataset.
        """
        self._known(dataset)
        cap = self._ledger.cap(dataset)
        if analyst is None:
            return BudgetView(
                dataset=dataset,
                cap=cap,
                spent=self._ledger.spent(dataset),
                remaining=self._ledger.remaining(dataset),
                allowance=None,
            )
        return BudgetView(
            dataset=dataset,
            cap=cap,
            spent=self._ledger.spent(dataset, analyst=analyst),
            remaining=self._ledger.remaining(dataset, analyst=analyst),
            allowance=self._ledger.allowance(dataset, analyst),
            reserved=self._ledger.reservation(dataset, analyst),
        )

    # -- querying -------------------------------------------------------------------------

    def compile(
        self,
        dataset: str,
        query: str | Query,
        *,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        rho: float | Fraction | None = None,
        level: float = 0.95,
    ) -> QueryProgram:
        """Compile ``query`` for ``dataset``: no data read, nothing charged.

        Raises:
            UnknownDataset: no such dataset.
            SQLError, UnsafeQuery, InvalidParameter: as ``Session.sql``; a graph query
                (which has no compiled program: it is answered by :meth:`query`) raises
                InvalidParameter once its text is checked (SQLError or UnsafeQuery if it
                is not one of the graph forms).
        """
        session = self._session(dataset)
        found = self._graph_query(dataset, session, query)
        if found is not None:
            graph, text = found
            parse_graph_sql(text, graph)
            raise InvalidParameter(
                f"{graph.info.name!r} is a graph: graph queries have no compiled program; "
                "send them to the query endpoint (POST /v1/datasets/{dataset}/query)"
            )
        return session.compile(query, epsilon=epsilon, delta=delta, rho=rho, level=level)

    def query(
        self,
        principal: Caller,
        dataset: str,
        query: str | Query,
        *,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        rho: float | Fraction | None = None,
        level: float = 0.95,
        idempotency_key: str | None = None,
        nonnegative: bool = False,
    ) -> Answer:
        """Answer ``query`` on ``dataset`` for ``principal``, charging its name.

        Privacy loss: the compiled program's loss (``epsilon``; ``(epsilon, delta)``;
        ``rho``), charged to the dataset's cap and the principal's allowance before anything
        is released — or nothing for a replay of an identical query (the principal's own, or
        anyone's with ``share_replays``) and for a retry with an Idempotency-Key already
        charged, which returns the first answer (``loss`` is then the first request's
        charge: it is the same request, charged once).

        The answer's ``remaining`` is what the principal may still spend (the least of what
        is left of the cap and of its allowance) at the time of the answer. ``nonnegative``
        clips the counts of a table query at 0 (free post-processing,
        :meth:`~deniable.query.answer.Answer.clipped_at_zero`).

        A query over one of the dataset's graphs (text, or a builder query naming the graph,
        see :mod:`deniable.graph.sql`) is answered by the graph's release path under the
        dataset's lock: charged ``epsilon`` (or ``rho``; graph queries spend no δ) to the
        principal's name, allowance included, or nothing for a replay under the same
        ``share_replays`` rule as tables; its ``idempotency_key`` is recorded with the
        charge, so a retry pays once, as for tables.

        Raises:
            UnknownDataset: no such dataset.
            SQLError, UnsafeQuery, InvalidParameter: the query is refused (nothing spent).
            BudgetExceeded: it does not fit what is left (nothing spent).
            IdempotencyConflict: the key was used before for another query.
            RequestInProgress: the first request with this key is still running (or died
                between its charge and its answer; its charge stands).
            LedgerTampered, LedgerError: the ledger refuses or failed (nothing released).
        """
        check_idempotency_key(idempotency_key)
        session = self._session(dataset)
        found = self._graph_query(dataset, session, query)
        if found is not None:
            if nonnegative:
                raise InvalidParameter("nonnegative applies to table queries, not to graphs")
            graph, text = found
            return self._as_seen_by(
                principal,
                dataset,
                self._answer_graph(
                    principal,
                    dataset,
                    graph,
                    text,
                    epsilon=epsilon,
                    delta=delta,
                    rho=rho,
                    level=level,
                    idempotency_key=idempotency_key,
                ),
            )
        program = session.compile(query, epsilon=epsilon, delta=delta, rho=rho, level=level)
        answer = self._table_answer(principal, dataset, session, program, idempotency_key)
        if nonnegative:
            answer = answer.clipped_at_zero(program.plan.count_outputs())
        return self._as_seen_by(principal, dataset, answer)

    def _as_seen_by(self, principal: Caller, dataset: str, answer: Answer) -> Answer:
        """``answer`` with the charge named as ``principal`` may see it (post-processing).

        Curators see the ledger's charge id. An analyst sees their own release number
        (1, 2, … on this dataset): the global id would tell how many releases others made
        in between. A replay of another analyst's answer (``share_replays``) names no
        charge at all.
        """
        charge_id = answer.metadata.charge_id
        if principal.role == "curator" or charge_id is None:
            return answer
        number = self._ledger.release_number(dataset, principal.name, charge_id)
        return answer.with_metadata(charge_id=number)

    def _table_answer(
        self,
        principal: Caller,
        dataset: str,
        session: Session,
        program: QueryProgram,
        idempotency_key: str | None,
    ) -> Answer:
        """The answer to a compiled table query (see :meth:`query`): replayed or charged."""
        share = self._config.server.share_replays
        scope = None if share else principal.name
        query_key = replay_key(program, scope)
        if idempotency_key is not None:
            earlier = self._keyed_charge(dataset, principal.name, idempotency_key)
            if earlier is not None:
                return self._replay(earlier, query_key, dataset, principal.name)
        # A replay releases nothing new: served from the ledger without the dataset's lock.
        replayed = replay(program, self._ledger, dataset=dataset, cache_scope=scope)
        if replayed is not None:
            return replayed.with_metadata(
                remaining=self._ledger.remaining(dataset, analyst=principal.name)
            )
        return self._charged(
            lambda: session.execute(
                program,
                analyst=principal.name,
                share_replays=share,
                idempotency_key=idempotency_key,
            ),
            query_key,
            dataset,
            principal.name,
            idempotency_key,
        )

    def _graph_query(
        self, dataset: str, session: Session, query: str | Query
    ) -> tuple[Graph, str] | None:
        """The graph ``query`` reads and its SQL text, or None (a table query). No loss."""
        declared = self._config.datasets[dataset].graphs
        if not declared:
            return None
        text = query.to_sql() if isinstance(query, Query) else query
        graph = graph_of(text, {g.name: session.graph(g.name) for g in declared})
        return None if graph is None else (graph, text)

    def _answer_graph(
        self,
        principal: Caller,
        dataset: str,
        graph: Graph,
        text: str,
        *,
        epsilon: float | Fraction | None,
        delta: float | Fraction | None,
        rho: float | Fraction | None,
        level: float,
        idempotency_key: str | None,
    ) -> Answer:
        """Answer a graph query for ``principal`` (see :meth:`query`).

        Privacy loss: ``epsilon`` or ``rho`` for the graph's unit, charged to the principal's
        name by the graph's release path, or nothing for a replay. Without
        ``share_replays`` the answer is stored and replayed under the principal's scope, so
        another analyst's identical question is charged again and gets fresh noise, as for
        tables.
        """
        scope = None if self._config.server.share_replays else principal.name
        parsed = parse_graph_sql(text, graph)
        query_key = graph.replay_key(
            parsed, epsilon=epsilon, rho=rho, level=level, cache_scope=scope
        )
        if idempotency_key is not None:
            earlier = self._keyed_charge(dataset, principal.name, idempotency_key)
            if earlier is not None:
                return self._replay(earlier, query_key, dataset, principal.name)
        return self._charged(
            lambda: graph.run(
                parsed,
                epsilon=epsilon,
                rho=rho,
                delta=delta,
                level=level,
                analyst=principal.name,
                text=text,
                cache_scope=scope,
                idempotency_key=idempotency_key,
            ),
            query_key,
            dataset,
            principal.name,
            idempotency_key,
        )

    def _charged(
        self,
        release: Callable[[], Answer],
        query_key: str,
        dataset: str,
        analyst: str,
        idempotency_key: str | None,
    ) -> Answer:
        """Run one release path (it charges ``analyst``) under the dataset's lock.

        A keyed request that another request with the same key beat to the ledger — its
        charge refused as a duplicate, or for the budget that first charge spent — gets the
        first answer (:meth:`_duplicate`, :meth:`_keyed_after_refusal`). The answer's
        ``remaining`` is what ``analyst`` may still spend.
        """
        try:
            with self._locks[dataset]:
                answer = release()
        except DuplicateRequest as e:
            return self._duplicate(e, query_key, dataset, analyst, idempotency_key)
        except BudgetExceeded as refused:
            return self._keyed_after_refusal(
                self._own_refusal(refused, dataset, analyst),
                query_key,
                dataset,
                analyst,
                idempotency_key,
            )
        return answer.with_metadata(remaining=self._ledger.remaining(dataset, analyst=analyst))

    def _own_refusal(self, refused: BudgetExceeded, dataset: str, analyst: str) -> BudgetExceeded:
        """``refused`` restated as ``analyst``'s own refusal (the ledger's analyst view).

        A release path may refuse early from the dataset's whole budget (its message then
        names the dataset's remaining, a figure that falls with other analysts' spending);
        the caller is told only what *they* may still spend (:meth:`Ledger.check_charge`),
        the same figure their budget shows.
        """
        requested = refused.requested
        if not isinstance(requested, Epsilon | EpsilonDelta | Rho):
            left = self._ledger.remaining(dataset, analyst=analyst)
            return BudgetExceeded(
                f"this request does not fit what analyst {analyst!r} may still spend on "
                f"dataset {dataset!r} ({left}); nothing was spent",
                requested=None,
                remaining=left,
            )
        try:
            self._ledger.check_charge(dataset, requested, analyst=analyst)
        except BudgetExceeded as own:
            return own
        left = self._ledger.remaining(dataset, analyst=analyst)
        return BudgetExceeded(
            f"{requested} did not fit what analyst {analyst!r} could spend on dataset "
            f"{dataset!r} when it was asked (now {left}); nothing was spent",
            requested=requested,
            remaining=left,
        )

    def _duplicate(
        self,
        error: DuplicateRequest,
        query_key: str,
        dataset: str,
        analyst: str,
        idempotency_key: str | None,
    ) -> Answer:
        """The first answer, when the ledger refused our charge as a keyed duplicate.

        Another request with the same key was charged between our look-up and our charge
        (another thread or worker); the ledger refused ours and wrote nothing.
        """
        assert idempotency_key is not None  # the ledger refuses only keyed duplicates
        charge = self._keyed_charge(dataset, analyst, idempotency_key)
        if charge is None or charge.id != error.charge_id:
            raise LedgerError(
                "the ledger reported a duplicate request whose charge it cannot find"
            ) from None
        return self._replay(charge, query_key, dataset, analyst)

    def _keyed_after_refusal(
        self,
        refused: BudgetExceeded,
        query_key: str,
        dataset: str,
        analyst: str,
        idempotency_key: str | None,
    ) -> Answer:
        """The first answer of a keyed request whose retry the budget refused, or re-raise.

        Another worker may have charged the same key between our look-up and our charge,
        spending what was left: the retry is then the same request, paid for, not a new one.

        Raises:
            BudgetExceeded: ``refused``, when no charge holds the key.
        """
        if idempotency_key is not None:
            charge = self._keyed_charge(dataset, analyst, idempotency_key)
            if charge is not None:
                return self._replay(charge, query_key, dataset, analyst)
        raise refused

    def _keyed_charge(self, dataset: str, analyst: str, key: str) -> Charge | None:
        """The analyst's charge made with Idempotency-Key ``key`` (an indexed look-up)."""
        found = self._ledger.history(dataset, analyst=analyst, idempotency_key=key)
        return found[0] if found else None

    def _replay(self, charge: Charge, query_key: str, dataset: str, analyst: str) -> Answer:
        """The stored answer of an earlier charge with the same Idempotency-Key."""
        payload = self._stored(charge, query_key)
        return Answer.from_bytes(
            payload,
            loss=charge.loss,
            remaining=self._ledger.remaining(dataset, analyst=analyst),
            cached=False,
        )

    def _stored(self, charge: Charge, query_key: str) -> bytes:
        """The stored payload of an earlier keyed charge, once it is stored.

        Raises:
            IdempotencyConflict: the charge was made for another request (``query_key``).
            RequestInProgress: nothing stored within ``server.idempotency_wait`` seconds.
        """
        if charge.query_key != query_key:
            raise IdempotencyConflict(KEY_REUSED)
        deadline = time.monotonic() + self._config.server.idempotency_wait
        delay = 0.01
        while True:
            payload = self._ledger.answer_for(charge.id)
            if payload is not None:
                break
            if time.monotonic() >= deadline:
                raise RequestInProgress(
                    "a request with this Idempotency-Key was charged and its answer is not "
                    "stored yet; retry later with the same key (if it never appears, the "
                    "server stopped before answering: the charge stands, use a new key)"
                )
            time.sleep(delay)
            delay = min(2 * delay, 0.2)
        return payload

    # -- before spending: accuracy, tuning, utility ---------------------------------------

    def accuracy(
        self,
        principal: Caller,
        dataset: str,
        query: str | Query,
        *,
        epsilon: float | Fraction | None = None,
        delta: float | Fraction | None = None,
        rho: float | Fraction | None = None,
        level: float = 0.95,
        rows: int | None = None,
        target: Mapping[str, float] | None = None,
    ) -> AccuracyResult:
        """The interval half-width each output would get, and the least loss for ``target``.

        Privacy loss: none. The query is compiled (no data read) and each aggregate's own
        interval rule is applied to the plan's noise (:mod:`deniable.query.accuracy`); the
        ledger is only read (the caller's remaining budget), never written; no engine runs
        and no lock is taken. ``rows`` is an assumed size per group (for AVG, VARIANCE,
        STDDEV), never one read from the data.

        With ``target`` (half-widths by output name) the least loss meeting every target is
        searched (``Session.budget_for``); the widths are then reported at the loss asked
        for, or, when none was given, at the least loss found.

        Raises:
            UnknownDataset: no such dataset.
            SQLError, UnsafeQuery, InvalidParameter: the query or the options are refused,
                an unknown output in ``target``, an output with no width known in advance
                in ``target``, or a target no budget meets.
            LedgerTampered: the ledger failed verification at start-up.
        """
        session = self._session(dataset)
        if self._graph_query(dataset, session, query) is not None:
            raise InvalidParameter(
                "accuracy before spending is computed for table queries; a graph query's "
                "interval is stated with its answer"
            )
        text = query.to_sql() if isinstance(query, Query) else query
        least: PrivacyLoss | None = None
        if target is not None:
            try:
                least = session.budget_for(text, dict(target), rows=rows, delta=delta, level=level)
            except (OverflowError, ZeroDivisionError) as e:
                raise InvalidParameter(
                    "no budget meets these targets: ask for wider half-widths"
                ) from e
            except InvalidParameter as e:
                if "must be at most" not in str(e):
                    raise
                raise InvalidParameter(
                    "no budget meets these targets (they would need more than the largest "
                    "loss a query may spend): ask for wider half-widths"
                ) from e
            if epsilon is None and rho is None:
                if isinstance(least, Rho):
                    rho = least.rho
                else:
                    epsilon = least.epsilon
        program = session.compile(text, epsilon=epsilon, delta=delta, rho=rho, level=level)
        report = query_accuracy(program.plan, rows=rows)
        loss = program.loss
        try:
            fits = self._ledger.can_charge(dataset, loss, analyst=principal.name)
        except InvalidParameter:  # a loss of a kind this dataset's accountant cannot spend
            fits = False
        return AccuracyResult(
            query=program.text,
            report=report,
            loss=loss,
            least=least,
            target=dict(target or {}),
            remaining=self._ledger.remaining(dataset, analyst=principal.name),
            fits=fits,
        )

    def tune(
        self,
        principal: Caller,
        dataset: str,
        table: str,
        *,
        epsilon: float | Fraction,
        group_by: Sequence[str] = (),
        workload_epsilon: float | Fraction = 1,
        groups: int = 1,
        apply: bool = False,
        clamps: Mapping[str, Sequence[float]] | None = None,
        clamp_workload: Literal["sum", "avg"] = "sum",
    ) -> TuneResult:
        """Measure how much people contribute (DP) and propose contribution bounds (curators).

        With ``clamps`` (numeric columns and a public search range each), half of
        ``epsilon`` measures the columns' values instead (a second charge) and a clamping
        range is proposed for each, the least expected error of ``clamp_workload``
        (:mod:`deniable.curator.clamps`).

        Privacy loss: ``epsilon`` (pure ε-DP: four contribution histograms at ``ε/4``
        each, :mod:`deniable.curator.tune`), charged to the dataset's one cap under the
        curator's name (and its allowance, if it has one) like any release: the charge
        commits before any noise is drawn or anything computed from the data leaves, and
        a refusal (budget) comes before the engine runs. A measurement is never replayed.
        The proposals are post-processing of the released histograms: free. Runs under the
        dataset's lock.

        With ``apply`` the best proposal becomes the table's ``max_groups``/``max_rows`` in
        this service process (every later query here is bounded by it) until it restarts;
        other worker processes keep the configured bounds, so write the proposal in the
        configuration to keep it.

        Raises:
            Forbidden: the principal is not a curator.
            UnknownDataset: no such dataset.
            InvalidParameter: an unknown table or column, a row-level table (nothing to
                tune), ε not positive.
            BudgetExceeded: ``epsilon`` does not fit what is left (nothing spent).
            LedgerTampered, LedgerError: the ledger refuses or failed (nothing released).
        """
        _require_curator(principal)
        session = self._session(dataset)
        info = _private_table(session, table)
        if info.policy.privacy_unit is None:
            raise InvalidParameter(
                f'table {info.name!r} protects single rows (privacy_unit = "row"): each '
                "person adds one row, so there are no contribution bounds to tune"
            )
        columns = [info.column(g).name for g in group_by]
        eps = exact(epsilon, "epsilon")
        if eps <= 0:
            raise InvalidParameter("epsilon must be > 0 (the privacy loss of the measurement)")
        loss = Epsilon(epsilon=eps)
        # Before the engine runs (the charge re-checks): the ledger's own refusal, which
        # counts the curator's allowance and other analysts' reservations.
        self._ledger.check_charge(dataset, loss, analyst=principal.name)
        with self._locks[dataset]:
            report = session.tune(
                info.name,
                epsilon=eps,
                group_by=columns,
                workload_epsilon=workload_epsilon,
                groups=groups,
                apply=apply,
                analyst=principal.name,
                clamps=clamps,
                clamp_workload=clamp_workload,
            )
        return TuneResult(
            table=info.name,
            report=report,
            applied=apply,
            remaining=self._ledger.remaining(dataset, analyst=principal.name),
        )

    def synthesize(
        self,
        principal: Caller,
        dataset: str,
        table: str,
        *,
        rows: int,
        columns: Sequence[str] | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        rho: float | None = None,
        method: Literal["mst", "aim"] = "mst",
        bins: int = 16,
        measured: Mapping[str, Quantiles | SelectKeys] | None = None,
    ) -> SynthResult:
        """Release a DP synthetic table of ``table`` (curators), charged once.

        Privacy loss: the release's ``(ε, δ)`` or ``ρ`` (:mod:`deniable.synth.release`:
        every marginal measured in the engine under the table's bounds, one charge for the
        whole release, committed before any noise is drawn), under the curator's name like
        any release. ``measured`` names columns whose bins (``Quantiles``) or keys
        (``SelectKeys``) are measured within the same release and charge
        (:mod:`deniable.synth.learn`); the others get ``bins`` equal-width bins. Refusals
        (budget, missing bounds or keys, too many cells) come before the engine runs. Runs
        under the dataset's lock. Curators only: the release's time
        depends on the data (AIM's rounds), which tells a curator nothing they do not hold.

        Raises:
            Forbidden: the principal is not a curator.
            UnknownDataset: no such dataset.
            InvalidParameter, UnsafeQuery: a bad request (nothing spent).
            BudgetExceeded: the release does not fit what is left (nothing spent).
        """
        _require_curator(principal)
        session = self._session(dataset)
        info = _private_table(session, table)
        spec: int | dict[str, BinSpec] = bins
        if measured:
            names = (
                [c.name for c in info.columns if c.name != info.policy.privacy_unit]
                if columns is None
                else [info.column(c).name for c in columns]
            )
            spec = dict.fromkeys(names, bins)
            for name, how in measured.items():
                spec[info.column(name).name] = how
        with self._locks[dataset]:
            synthetic = session.synthesize(
                info.name,
                columns=columns,
                epsilon=epsilon,
                delta=delta,
                rho=rho,
                method=method,
                rows=rows,
                bins=spec,
                analyst=principal.name,
            )
        return SynthResult(
            table=info.name,
            synthetic=synthetic,
            remaining=self._ledger.remaining(dataset, analyst=principal.name),
        )

    def keyed_release(
        self,
        principal: Caller,
        dataset: str,
        *,
        kind: KeyedKind,
        request: str,
        idempotency_key: str | None,
        release: Callable[[], bytes],
    ) -> bytes:
        """Run a charging curator release once per Idempotency-Key; its response (JSON).

        ``release`` runs :meth:`tune` or :meth:`synthesize` for ``principal`` on
        ``dataset`` and returns the response's JSON; ``request`` is the request's canonical
        JSON. Without a key, ``release`` simply runs. With one, as for a keyed query
        (:meth:`query`): the release's first charge carries the key, scoped to ``kind``
        (:func:`ledger_key`; :class:`ServiceLedger`), so the ledger charges a (dataset,
        analyst, key) once, and
        the response is stored with that charge (:func:`pack_response`, compressed) before
        it is returned; a retry with the same key and request gets the stored response.

        Privacy loss: the release's own the first time; nothing for a retry, which returns
        the first response (the same request, charged once: its ``charge`` and
        ``charge_id`` are the first's).

        Raises:
            Forbidden: the principal is not a curator (before the key is looked at).
            InvalidParameter: a malformed key; or the release's own refusals.
            IdempotencyConflict: the key was used before for another request (refused
                where the release would charge: a request refused for its meaning or its
                budget is refused as such first).
            RequestInProgress: the first request with this key is still running (or died
                between its charge and its response; its charge stands).
            BudgetExceeded: the release does not fit (nothing spent) and no charge holds
                the key.
        """
        _require_curator(principal)  # both releases are the curator's: 403 before any key
        if idempotency_key is None:
            return release()
        check_idempotency_key(idempotency_key)
        self._known(dataset)
        query_key = request_key(kind, request, idempotency_key)
        key = ledger_key(kind, idempotency_key)
        earlier = self._keyed_charge(dataset, principal.name, key)
        if earlier is not None and earlier.query_key == query_key:
            return unpack_response(self._stored(earlier, query_key))
        # No charge holds the key yet, or one made for another request. The release runs
        # either way, so that a request refused for its meaning is refused as such (400; a
        # query is compiled before its key is looked at); a key held by another request is
        # refused when the release reaches its charge, which the ledger refuses as a
        # duplicate (nothing spent, nothing released).
        try:
            with self._ledger.keyed(key, query_key) as pending:
                try:
                    body = release()
                except BaseException:
                    # the release's own record stays with its charge; the first failure
                    # is the one reported, not one of this clean-up
                    with suppress(LedgerError):
                        self._ledger.keep_record(pending)
                    raise
        except DuplicateRequest as e:
            # Held by another request (IdempotencyConflict), or this one was charged by
            # another thread or worker between our look-up and our charge: its response.
            earlier = self._keyed_charge(dataset, principal.name, key)
            if earlier is None or earlier.id != e.charge_id:
                raise LedgerError(
                    "the ledger reported a duplicate request whose charge it cannot find"
                ) from None
            return unpack_response(self._stored(earlier, query_key))
        except BudgetExceeded:
            # Refused before the charge, perhaps for the budget that this same request,
            # charged meanwhile by another worker, spent: then that charge's response.
            earlier = self._keyed_charge(dataset, principal.name, key)
            if earlier is None or earlier.query_key != query_key:
                raise
            return unpack_response(self._stored(earlier, query_key))
        if pending.charge_id is None:
            raise InternalError("a charging release returned without charging")
        self._ledger.store_answer(pending.charge_id, pack_response(kind, body, pending.record))
        return body

    def utility_analysis(
        self, principal: Caller, dataset: str, table: str, *, group_by: Sequence[str] = ()
    ) -> UtilityAnalysis:
        """NON-PRIVATE: the exact share of rows each candidate policy keeps (curators only).

        Privacy loss: none is accounted, because none is promised — the result is computed
        from the rows exactly, without noise. It is for the curator, who holds the data:
        never charged, never written to the ledger, never stored or replayed as an answer,
        refused to analysts. Runs under the dataset's lock (the engine is shared).

        Raises:
            Forbidden: the principal is not a curator.
            UnknownDataset: no such dataset.
            InvalidParameter: an unknown table or column, a row-level table.
        """
        _require_curator(principal)
        session = self._session(dataset)
        info = _private_table(session, table)
        with self._locks[dataset]:
            return session.utility_analysis(info.name, group_by=list(group_by))

    # -- history --------------------------------------------------------------------------

    def history(self, principal: Caller, dataset: str) -> list[Charge]:
        """The principal's own releases on ``dataset``, in commit order (no loss).

        Each charge's :attr:`~deniable.ledger.Charge.number` is the principal's own release
        number (1, 2, …): what an analyst is shown as the release's id (curators see the
        ledger's global id).
        """
        self._known(dataset)
        return self._ledger.history(dataset, analyst=principal.name)

    def ledger_view(self, principal: Caller, dataset: str) -> list[Charge]:
        """Every release on ``dataset`` by everyone (curators only).

        Raises:
            Forbidden: the principal is not a curator.
        """
        _require_curator(principal)
        self._known(dataset)
        return self._ledger.history(dataset)

    # -- management (curators) ------------------------------------------------------------

    def set_allowance(
        self,
        principal: Caller,
        dataset: str,
        analyst: str,
        loss: PrivacyLoss,
        *,
        reserve: bool = False,
    ) -> BudgetView:
        """Give ``analyst`` a slice of ``dataset``'s cap (never extra budget).

        With ``reserve`` the slice is also reserved: what ``analyst`` has not spent of it is
        held back from every other analyst (:meth:`Ledger.set_allowance`); without it, a
        reservation they held is released. No privacy loss.

        Raises:
            Forbidden: the principal is not a curator.
            UnknownResource: no active analyst of that name (a slice for a name nobody holds
                would wait for whoever is given the name next).
            InvalidParameter: the slice is of another kind than the cap or does not fit it,
                or the reservation exceeds what is unspent and unreserved (nothing changed).
        """
        _require_curator(principal)
        self._known(dataset)
        if not any(a.name == analyst and a.revoked_at is None for a in self._ledger.analysts()):
            raise UnknownResource(f"no active analyst named {analyst!r}: add them first")
        self._ledger.set_allowance(dataset, analyst, loss, reserve=reserve)
        return self.budget(dataset, analyst=analyst)

    def allowances(self, principal: Caller, dataset: str) -> dict[str, BudgetView]:
        """Every registered analyst's budget view on ``dataset`` (curators only)."""
        _require_curator(principal)
        self._known(dataset)
        return {a.name: self.budget(dataset, analyst=a.name) for a in self._ledger.analysts()}

    def add_analyst(self, principal: Caller, name: str, *, role: Role) -> str:
        """Create an analyst or curator and return its token (shown once; stored hashed)."""
        _require_curator(principal)
        return self._ledger.add_analyst(name, role=role)

    def revoke_analyst(self, principal: Caller, name: str) -> None:
        """Revoke ``name``'s token (its charges stay)."""
        _require_curator(principal)
        if not any(a.name == name for a in self._ledger.analysts()):
            raise UnknownResource(f"no analyst named {name!r}")
        self._ledger.revoke_analyst(name)

    def rotate_analyst(self, principal: Caller, name: str) -> str:
        """Give ``name`` a new token and return it (shown once; stored hashed).

        The previous token stops working at once; the analyst keeps its history, allowances
        and stored answers (the same person: a lost or leaked token, or a revoked analyst
        reinstated). No privacy loss.

        Raises:
            Forbidden: the principal is not a curator.
            UnknownResource: no analyst by that name.
        """
        _require_curator(principal)
        if not any(a.name == name for a in self._ledger.analysts()):
            raise UnknownResource(f"no analyst named {name!r}")
        return self._ledger.rotate_token(name)

    def analysts(self, principal: Caller) -> list[AnalystInfo]:
        """The registered analysts (never their token digests)."""
        _require_curator(principal)
        return self._ledger.analysts()

    # -- internals ------------------------------------------------------------------------

    def _known(self, dataset: str) -> None:
        if dataset not in self._config.datasets:
            raise UnknownDataset(f"no dataset named {dataset!r}; GET /v1/datasets lists them")

    def _session(self, dataset: str) -> Session:
        self._known(dataset)
        session = self._sessions.get(dataset)
        if session is None:
            if self._tampered is not None:
                raise self._tampered
            raise LedgerError(f"dataset {dataset!r} could not be opened")
        return session


def _analyst_of(principal: Caller | None) -> str | None:
    return None if principal is None or principal.role == "curator" else principal.name


def _private_table(session: Session, table: str) -> TableInfo:
    """The session's private table named ``table`` (case-blind).

    Raises:
        InvalidParameter: no private table by that name (names the declared ones).
    """
    for name, info in session.tables.items():
        if name.lower() == str(table).lower() and not info.public:
            return info
    private = [n for n, i in session.tables.items() if not i.public]
    raise InvalidParameter(f"no private table named {table!r}; private tables: {private}")


def _require_curator(principal: Caller) -> None:
    if principal.role != "curator":
        raise Forbidden("only a curator may do this")


def _graph_metadata(info: GraphInfo) -> GraphMetadata:
    return GraphMetadata(
        name=info.name,
        unit=info.unit,
        max_degree=info.max_degree,
        source_col=info.source_col,
        target_col=info.target_col,
        node_key=info.node_key,
        nodes_name=info.nodes_name,
        node_attributes=tuple(c for c in info.node_columns if c != info.node_key),
        domains=dict(info.domains),
    )


def _table_metadata(t: TableInfo) -> TableMetadata:
    p = t.policy
    return TableMetadata(
        name=t.name,
        public=t.public,
        columns=tuple((c.name, c.sql_type) for c in t.columns),
        privacy_unit=p.privacy_unit,
        bounds={k: b.as_floats() for k, b in p.bounds.items()},
        public_keys=dict(p.public_keys),
        max_groups=p.max_groups,
        max_rows=p.max_rows,
        unique_keys=t.unique_keys,
    )

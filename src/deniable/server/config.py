"""The service's configuration file (TOML): datasets, their budgets, the ledger, the server.

One file names everything the curator decides before any analyst asks a question::

    ledger = "ledger.db"                  # relative paths are relative to this file

    [server]
    share_replays = false                 # see ServerSettings.share_replays
    rate_limit = { per_second = 5, burst = 20 }
    failed_auth = { per_second = 1, burst = 20 }   # per client address
    max_request_bytes = 65536
    cors_origins = []                     # closed by default

    [datasets.students]
    source = "students.csv"
    table = "students"
    privacy_unit = "student_id"
    bounds = { grade = [0, 100] }
    max_groups = 1
    max_rows = 1
    public_keys = { school = ["north", "south"] }
    budget = { epsilon = 1.0 }            # or { epsilon = 1, delta = 1e-6 } or { rho = 0.5 }
    engine = "duckdb"
    # accountant = "zcdp"                 # (ε, δ) budgets only: spend it as ρ-zCDP
    response_time = { deadline = 1.0 }    # the default; or "off", or derived (server.timing)

    [datasets.events]                     # a table read in place in PostgreSQL
    engine = "postgresql"
    source = "postgresql://deniable_reader@db.internal:5432/shop"   # password: ~/.pgpass
    table = "analytics.events"            # analysts write FROM events
    privacy_unit = "user_id"               # or "row": each row is its own unit
    max_groups = 5                        # required with a unit column
    max_rows = 10
    budget = { epsilon = 1.0 }

    [[datasets.students.public_tables]]
    name = "schools"
    source = "schools.csv"
    unique_key = "school"

    [[datasets.students.graphs]]          # a graph sharing the students' budget
    name = "friends"                      # FROM friends, degrees(friends), triangles(friends)
    source = "friends.csv"                # the edge table: one row per edge
    source_col = "a"
    target_col = "b"
    unit = "node"                         # or "edge": one edge protected
    max_degree = 20                       # public degree bound D (never from the data)
    nodes = "people.csv"                  # optional node table, with node_key
    node_key = "id"
    domains = { city = ["x", "y", "z"] }  # public values of node attributes

    [datasets.social]                     # a graph-only dataset: no private table
    budget = { epsilon = 1.0 }
    [[datasets.social.graphs]]
    name = "follows"
    source = "follows.parquet"
    source_col = "src"
    target_col = "dst"
    unit = "edge"
    max_degree = 50

    [analysts.ann]
    allowance = { students = { epsilon = 0.5 } }
    reserve = ["students"]                # optional: reserve these allowances (held back
                                          # from every other analyst)

A dataset holds one private table (``source``), graphs (``[[datasets.NAME.graphs]]``,
see :class:`GraphConfig` and :mod:`deniable.graph`), or both; every answer on any of them is
charged to the dataset's one budget. A graph-only dataset leaves out ``source`` and every
key describing the private table (``table``, ``privacy_unit``, ``bounds``, ``max_groups``,
``max_rows``, ``public_keys``, ``public_tables``). Graphs are read from CSV or Parquet files
into DuckDB; in a dataset with ``engine = "postgresql"`` a graph's ``source`` and ``nodes``
name tables of the dataset's database (``"schema.table"``), read in place, and a graph-only
PostgreSQL dataset gives ``source`` (the URL) without ``table``.

Reading the file has no privacy loss and opens nothing (no ledger, no engine, no
randomness): :func:`load_config` only parses and validates. Every mistake raises
:class:`ConfigError` naming the key and what to write instead.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from deniable.accounting.filter import accountant_spec, check_accountant, parse_accountant
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import InvalidParameter
from deniable.server.timing import DEFAULT_RESPONSE_TIME, ResponseTime, parse_response_time

Engine = Literal["duckdb", "postgresql"]
ENGINES: tuple[str, ...] = ("duckdb", "postgresql")

DEFAULT_RATE_PER_SECOND = 10.0
DEFAULT_BURST = 50
DEFAULT_FAILED_AUTH_PER_SECOND = 1.0
DEFAULT_FAILED_AUTH_BURST = 20
DEFAULT_MAX_REQUEST_BYTES = 64 * 1024


class ConfigError(InvalidParameter):
    """The configuration file is missing, malformed, or names something invalid.

    The message names the key (``datasets.students.budget``) and what to write.
    """


@dataclass(frozen=True)
class PublicTableConfig:
    """A public lookup table joined by a dataset's private table.

    Attributes:
        name: the name analysts use in ``JOIN``.
        source: absolute path of its CSV/Parquet file.
        unique_key: its unique key column(s), or None to let deniable find them.
    """

    name: str
    source: Path
    unique_key: tuple[str, ...] | None = None


GraphUnit = Literal["edge", "node"]


@dataclass(frozen=True)
class GraphConfig:
    """A graph of a dataset, registered with ``Session.add_graph`` (:mod:`deniable.graph`).

    Attributes:
        name: the name analysts use in ``FROM g``, ``degrees(g)``, ``triangles(g)``.
        source: absolute path of the edge table's CSV/Parquet file (one row per edge), or
            in a PostgreSQL dataset the edge table in its database (``"schema.table"``).
        source_col: the edge table's column of one end of each edge.
        target_col: the column of the other end (the graph is undirected).
        unit: the privacy unit: ``"edge"`` (one edge) or ``"node"`` (a node and all its
            edges).
        max_degree: the public degree bound ``D`` answers truncate to (never from the data).
        nodes: absolute path of the node table's CSV/Parquet file (PostgreSQL: a table of
            the database), or None.
        node_key: the node table's id column (unique, never NULL); given with ``nodes``.
        nodes_name: the node table's name in SQL joins (None: ``"nodes"``).
        domains: declared public values of node attributes (needed at node level to count
            edges by an attribute).
    """

    name: str
    source: Path | str
    source_col: str
    target_col: str
    unit: GraphUnit
    max_degree: int
    nodes: Path | str | None = None
    node_key: str | None = None
    nodes_name: str | None = None
    domains: Mapping[str, tuple[object, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetConfig:
    """One dataset: a private table and/or graphs, their policy, and one total budget.

    Attributes:
        name: the dataset's name in the ledger and in URLs.
        source: absolute path of the private table's CSV/Parquet file, or (engine
            ``"postgresql"``) the database's URL ``postgresql://role@host:port/database``,
            or None for a graph-only dataset (no private table; :attr:`graphs` is not empty).
        table: the name analysts use in ``FROM`` (default: the dataset's name); for
            PostgreSQL the last part of :attr:`source_table`; unused without a private
            table (:attr:`has_table`).
        privacy_unit: the column identifying a person, or None for row-level privacy
            (stated in the file as ``privacy_unit = "row"``; required with a private table:
            there is no default) or for a graph-only dataset.
        bounds: declared clamping ranges of numeric columns (public choices).
        max_groups: groups one person may contribute to per query (required with a unit
            column; None with row-level privacy, where it is 1).
        max_rows: rows one person may contribute to one group (required with a unit
            column; None with row-level privacy, where it is 1).
        public_keys: declared domains of group-key columns (public).
        public_tables: lookup tables the private table may join.
        budget: the dataset's one total cap, shared by every analyst.
        engine: the engine running the queries: ``"duckdb"`` (files) or ``"postgresql"``
            (the table is read in place; see :mod:`deniable.engines.postgres`).
        source_table: PostgreSQL only: the table in the database (``"events"`` or
            ``"schema.events"``), given as ``table`` in the file; pass it to
            :meth:`~deniable.curator.session.Session.add_table` as ``table=``.
        accountant: how the ledger spends the budget: ``"basic"`` (losses add), ``"zcdp"``
            or ``"zcdp:delta_share=p/q"`` (an ``(ε, δ)`` budget spent as ρ-zCDP, see
            :mod:`deniable.accounting.renyi`), or None (not given: the ledger's record, basic
            for a new dataset); pass it to the Session as ``accountant=``.
        graphs: the dataset's graphs, charged to the same budget.
        response_time: when query responses leave (``response_time`` in the file; see
            :mod:`deniable.server.timing`): on by default, every response at a deadline
            fixed in advance from public facts; ``"off"`` sends them when ready.
    """

    name: str
    source: Path | str | None
    table: str
    budget: PrivacyLoss
    privacy_unit: str | None = None
    bounds: Mapping[str, tuple[Fraction, Fraction]] = field(default_factory=dict)
    max_groups: int | None = None
    max_rows: int | None = None
    public_keys: Mapping[str, tuple[object, ...]] = field(default_factory=dict)
    public_tables: tuple[PublicTableConfig, ...] = ()
    engine: Engine = "duckdb"
    source_table: str | None = None
    accountant: str | None = None
    graphs: tuple[GraphConfig, ...] = ()
    response_time: ResponseTime = DEFAULT_RESPONSE_TIME

    @property
    def has_table(self) -> bool:
        """Whether the dataset has a private table (False: a graph-only dataset)."""
        if self.engine == "postgresql":
            return self.source_table is not None
        return self.source is not None


@dataclass(frozen=True)
class RateLimit:
    """A per-analyst token bucket: ``burst`` requests at once, refilled at ``per_second``.

    The bucket lives in each worker process (it is not shared between uvicorn workers), so
    with ``w`` workers an analyst may reach up to ``w`` times the rate. It protects the
    service from floods; the privacy budget, not the rate limit, bounds what is learned.
    """

    per_second: float = DEFAULT_RATE_PER_SECOND
    burst: int = DEFAULT_BURST


@dataclass(frozen=True)
class ServerSettings:
    """Settings of the HTTP service.

    Attributes:
        share_replays: whether an identical query already paid for by *another* analyst is
            replayed for free. Default False: a free replay (charge 0, ``cached: true``)
            would tell the asker that someone else asked exactly this question, which is
            information about other analysts. With False each analyst's replays are their
            own (an identical query from another analyst is charged again); with True the
            budget is spent more slowly at the price of that disclosure.
        rate_limit: the per-analyst token bucket (per worker process).
        failed_auth: the per-client-address token bucket of failed authentications (per
            worker process): an address that spends it gets 429 before any token it sends
            is looked at, which slows token guessing. Default 20 at once, then 1 a second.
        max_request_bytes: largest request body accepted (larger ones get 413).
        cors_origins: origins allowed to call the API from a browser; empty (the default)
            sends no CORS headers at all, so browsers refuse cross-origin calls.
        idempotency_wait: seconds a retried request waits for the first one (same
            Idempotency-Key) to finish before answering 409 ``in_progress``.
        worker_healthcheck: seconds the supervisor waits for a worker process to answer
            its health ping before killing and replacing it (an integer, 1 to 60). A worker
            stopped (SIGSTOP) or hung while it holds the ledger's write lock stalls every
            other worker's charges until then; uvicorn's default is 5.
    """

    share_replays: bool = False
    rate_limit: RateLimit = field(default_factory=RateLimit)
    failed_auth: RateLimit = field(
        default_factory=lambda: RateLimit(
            per_second=DEFAULT_FAILED_AUTH_PER_SECOND, burst=DEFAULT_FAILED_AUTH_BURST
        )
    )
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    cors_origins: tuple[str, ...] = ()
    idempotency_wait: float = 5.0
    worker_healthcheck: int = 2


@dataclass(frozen=True)
class ServiceConfig:
    """The whole service: datasets, ledger, allowances and server settings.

    Attributes:
        path: the configuration file (None when built in code).
        ledger: absolute path of the ledger database, or a ``postgresql://`` URL (a ledger
            shared by several service hosts; its anchor is then best named explicitly).
        anchor: absolute path of the ledger's anchor file, or None for ``<ledger>.anchor``.
            Keep it on another disk or directory than the ledger (a curator-only one) so
            that deleting or restoring the ledger's directory cannot take the anchor along.
        datasets: the datasets by name.
        allowances: per analyst, per dataset, a slice of the dataset's cap (never extra
            budget: analysts who collude still add up under the one cap).
        reserved: per analyst, the datasets whose allowance is also reserved (what the
            analyst has not spent of it is held back from every other analyst).
        server: HTTP settings.
    """

    ledger: Path | str
    datasets: Mapping[str, DatasetConfig]
    allowances: Mapping[str, Mapping[str, PrivacyLoss]] = field(default_factory=dict)
    reserved: Mapping[str, frozenset[str]] = field(default_factory=dict)
    server: ServerSettings = field(default_factory=ServerSettings)
    path: Path | None = None
    anchor: Path | None = None


def load_config(path: str | os.PathLike[str]) -> ServiceConfig:
    r"""Read and validate a service configuration file (TOML).

    Relative paths in the file (``ledger``, ``source``) are relative to the file's directory.
    Nothing is opened but the file itself; no privacy loss.

    Raises:
        ConfigError: the file is missing or not TOML, a key is unknown or missing, or a
            value is malformed; the message names the key and what to write.

    Examples:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "t.csv").write_text("x\n1\n")
        >>> _ = (d / "c.toml").write_text(
        ...     'ledger = "l.db"\n[datasets.t]\nsource = "t.csv"\nprivacy_unit = "row"\n'
        ...     'budget = {epsilon = 1}\n')
        >>> cfg = load_config(d / "c.toml")
        >>> cfg.datasets["t"].budget
        Epsilon(epsilon=1)
    """
    file = Path(path)
    try:
        with file.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {str(file)!r} does not exist") from None
    except OSError as e:
        raise ConfigError(f"cannot read configuration file {str(file)!r}: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{str(file)!r} is not valid TOML: {e}") from e
    return parse_config(data, base=file.resolve().parent, path=file.resolve())


def parse_config(
    data: Mapping[str, object], *, base: Path, path: Path | None = None
) -> ServiceConfig:
    """Validate an already-parsed configuration (see :func:`load_config`).

    Args:
        data: the TOML document as a mapping.
        base: the directory relative paths are resolved against.
        path: the file it came from, for messages and :attr:`ServiceConfig.path`.

    Raises:
        ConfigError: as :func:`load_config`.
    """
    _keys(data, "the top level", {"ledger", "anchor", "server", "datasets", "analysts"})
    if "ledger" not in data:
        raise ConfigError('key "ledger" is missing: write ledger = "ledger.db" (path of the file)')
    raw_ledger = data["ledger"]
    ledger: Path | str = (
        raw_ledger  # a PostgreSQL ledger shared by several hosts (deniable.ledger.postgres)
        if isinstance(raw_ledger, str) and raw_ledger.startswith(("postgresql://", "postgres://"))
        else _path(raw_ledger, "ledger", base, must_exist=False)
    )
    anchor = _path(data["anchor"], "anchor", base, must_exist=False) if "anchor" in data else None
    if anchor is not None and anchor == ledger:
        raise ConfigError('"anchor" must be another file than "ledger" (e.g. "ledger.anchor")')
    raw_datasets = _table(data.get("datasets"), "datasets", required=True)
    if not raw_datasets:
        raise ConfigError('"datasets" is empty: add a [datasets.<name>] table')
    datasets = {
        name: _dataset(name, _table(value, f"datasets.{name}", required=True), base)
        for name, value in raw_datasets.items()
    }
    allowances: dict[str, Mapping[str, PrivacyLoss]] = {}
    reserved: dict[str, frozenset[str]] = {}
    for analyst, value in _table(data.get("analysts"), "analysts").items():
        where = f"analysts.{analyst}"
        _name(analyst, where)
        entry = _table(value, where, required=True)
        _keys(entry, where, {"allowance", "reserve"})
        slices: dict[str, PrivacyLoss] = {}
        for ds, loss in _table(entry.get("allowance"), f"{where}.allowance").items():
            key = f"{where}.allowance.{ds}"
            if ds not in datasets:
                raise ConfigError(
                    f"{key}: no dataset named {ds!r}; known datasets: {', '.join(datasets)}"
                )
            slice_ = _loss(loss, key)
            cap = datasets[ds].budget
            if type(slice_) is not type(cap) or not slice_ <= cap:  # type: ignore[operator]
                raise ConfigError(
                    f"{key}: an allowance is a slice of the dataset's cap ({cap}) and must be "
                    f"of the same kind and fit inside it; {slice_} does not"
                )
            zcdp = datasets[ds].accountant not in (None, "basic")
            if zcdp and not (isinstance(slice_, EpsilonDelta) and slice_.delta > 0):
                raise ConfigError(
                    f"{key}: dataset {ds!r} is spent with the zCDP accountant, so an allowance "
                    "needs δ > 0 too, e.g. { epsilon = 0.5, delta = 1e-7 }"
                )
            slices[ds] = slice_
        allowances[analyst] = MappingProxyType(slices)
        reserve = entry.get("reserve", [])
        if not isinstance(reserve, list) or not all(isinstance(d, str) for d in reserve):
            raise ConfigError(
                f'{where}.reserve must be a list of dataset names, e.g. reserve = ["students"]'
            )
        for ds in reserve:
            if ds not in slices:
                raise ConfigError(
                    f"{where}.reserve: {ds!r} has no allowance for {analyst!r}; a reservation "
                    f"is an allowance held back for them: write {where}.allowance.{ds} first"
                )
        if reserve:
            reserved[analyst] = frozenset(reserve)
    server = _server(_table(data.get("server"), "server"))
    return ServiceConfig(
        ledger=ledger,
        datasets=MappingProxyType(datasets),
        allowances=MappingProxyType(allowances),
        reserved=MappingProxyType(reserved),
        server=server,
        path=path,
        anchor=anchor,
    )


# -- sections ----------------------------------------------------------------------------------


ROW_UNIT = "row"
"""``privacy_unit = "row"``: row-level privacy, each row its own unit (:data:`deniable.ROW`)."""


def _privacy_unit(raw: Mapping[str, object], where: str) -> str | None:
    """The private table's stated privacy unit: a column, or None for ``"row"``.

    Raises:
        ConfigError: the unit is not stated, or a unit column comes without ``max_groups``
            and ``max_rows`` (nothing that changes what a query computes is left implicit).
    """
    if "privacy_unit" not in raw:
        raise ConfigError(
            f'{where}.privacy_unit is missing: write privacy_unit = "patient_id" (the column '
            "that identifies a person: all of a person's rows are protected together) or "
            'privacy_unit = "row" (each row is its own unit: only right when no person has '
            "two rows); there is no default, because the choice decides whom answers protect"
        )
    unit = raw["privacy_unit"]
    _name(unit, f"{where}.privacy_unit")
    assert isinstance(unit, str)
    if unit == ROW_UNIT:
        extra = [k for k in ("max_groups", "max_rows") if raw.get(k, 1) != 1]
        if extra:
            raise ConfigError(
                f'{where}.{extra[0]}: with privacy_unit = "row" each row is its own unit and '
                f"contributes one row to one group; remove {extra[0]} or name the column that "
                "identifies a person"
            )
        return None
    missing = [k for k in ("max_groups", "max_rows") if k not in raw]
    if missing:
        raise ConfigError(
            f"{where}: privacy_unit = {unit!r} needs {' and '.join(missing)}: the most groups "
            "one person may contribute to per query and the most rows one person may "
            "contribute to one group (e.g. max_groups = 1 and max_rows = 1 when each person "
            "has one row); they are public choices, never read from the data"
        )
    return unit


_TABLE_KEYS = (
    "table",
    "privacy_unit",
    "bounds",
    "max_groups",
    "max_rows",
    "public_keys",
    "public_tables",
)
"""Keys describing the private table: refused in a graph-only dataset."""

_DATASET_KEYS = {
    "source",
    *_TABLE_KEYS,
    "budget",
    "engine",
    "accountant",
    "graphs",
    "response_time",
}


def _dataset(name: str, raw: Mapping[str, object], base: Path) -> DatasetConfig:
    where = f"datasets.{name}"
    _name(name, where)
    _keys(raw, where, _DATASET_KEYS)
    raw_graphs = raw.get("graphs", [])
    if not isinstance(raw_graphs, list):
        raise ConfigError(
            f"{where}.graphs must be an array of tables: write [[{where}.graphs]] with name, "
            "source, source_col, target_col, unit and max_degree"
        )
    if "source" not in raw and not raw_graphs:
        raise ConfigError(
            f'{where}.source is missing: write source = "data.csv" (CSV or Parquet), or '
            f"declare only graphs with [[{where}.graphs]]"
        )
    if "budget" not in raw:
        raise ConfigError(
            f"{where}.budget is missing: write budget = {{ epsilon = 1.0 }} (or epsilon and "
            "delta, or rho): the dataset's total privacy budget, shared by all analysts"
        )
    engine = raw.get("engine", "duckdb")
    if engine not in ENGINES:
        raise ConfigError(
            f'{where}.engine: {engine!r} is not supported; write engine = "duckdb" or '
            'engine = "postgresql"'
        )
    graph_only_pg = engine == "postgresql" and "table" not in raw and bool(raw_graphs)
    if "source" not in raw or graph_only_pg:
        given = [k for k in _TABLE_KEYS if k in raw]
        if given:
            raise ConfigError(
                f"{where}.{given[0]} describes the private table, but the dataset has no "
                f'source: add source = "data.csv" or remove {given[0]} (a graph-only '
                "dataset declares only budget, accountant and graphs)"
            )
    table = raw.get("table", name)
    _name(table, f"{where}.table")
    assert isinstance(table, str)
    source_table: str | None = None
    source: Path | str | None
    if "source" not in raw:
        source = None
    elif graph_only_pg:  # the database's URL, for the graphs' tables only
        source = _postgres_url(raw, where)
    elif engine == "postgresql":
        source, source_table, table = _postgres_source(raw, where, name)
    else:
        source = _path(raw["source"], f"{where}.source", base, must_exist=True)
    unit = raw.get("privacy_unit")
    if source is not None and not graph_only_pg:
        unit = _privacy_unit(raw, where)
    bounds: dict[str, tuple[Fraction, Fraction]] = {}
    for col, pair in _table(raw.get("bounds"), f"{where}.bounds").items():
        key = f"{where}.bounds.{col}"
        if not isinstance(pair, list) or len(pair) != 2:
            raise ConfigError(f"{key} must be a pair [lower, upper], e.g. {col} = [0, 100]")
        lo, hi = (_number(v, key) for v in pair)
        if not lo < hi:
            raise ConfigError(f"{key}: lower must be below upper, e.g. {col} = [0, 100]")
        bounds[col] = (lo, hi)
    keys: dict[str, tuple[object, ...]] = {}
    for col, values in _table(raw.get("public_keys"), f"{where}.public_keys").items():
        if not isinstance(values, list) or not values:
            raise ConfigError(
                f'{where}.public_keys.{col} must be a non-empty list of values, e.g. ["a", "b"]'
            )
        keys[col] = tuple(values)
    public: list[PublicTableConfig] = []
    raw_public = raw.get("public_tables", [])
    if not isinstance(raw_public, list):
        raise ConfigError(
            f"{where}.public_tables must be an array of tables: write "
            f"[[{where}.public_tables]] with name and source"
        )
    for i, entry in enumerate(raw_public):
        key = f"{where}.public_tables[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{key} must be a table with name and source")
        _keys(entry, key, {"name", "source", "unique_key"})
        if "name" not in entry or "source" not in entry:
            raise ConfigError(f'{key} needs name = "..." and source = "file.csv"')
        if engine == "postgresql":
            raise ConfigError(
                f"{key}: public tables of a PostgreSQL dataset are not supported in the "
                "configuration file yet (a file's table cannot be joined with a table that "
                "stays in PostgreSQL); remove it, or keep the lookup table in PostgreSQL and "
                "register it with Session.add_public_table(name, url, table=...)"
            )
        _name(entry["name"], f"{key}.name")
        unique = entry.get("unique_key")
        if isinstance(unique, str):
            unique_key: tuple[str, ...] | None = (unique,)
        elif isinstance(unique, list) and unique and all(isinstance(u, str) for u in unique):
            unique_key = tuple(unique)
        elif unique is None:
            unique_key = None
        else:
            raise ConfigError(f"{key}.unique_key must be a column name or a list of them")
        public.append(
            PublicTableConfig(
                name=entry["name"],
                source=_path(entry["source"], f"{key}.source", base, must_exist=True),
                unique_key=unique_key,
            )
        )
    if engine == "postgresql" and raw_graphs and "source" not in raw:
        raise ConfigError(
            f"{where}.source is missing: a PostgreSQL dataset reads its graphs in place; write "
            'source = "postgresql://role@host:5432/database"'
        )
    graphs = _graphs(raw_graphs, where, base, in_place=engine == "postgresql")
    taken = {p.name.lower(): f"public table {p.name!r}" for p in public}
    if source is not None:
        taken[table.lower()] = f"the private table {table!r}"
    for i, g in enumerate(graphs):
        clash = taken.get(g.name.lower())
        if clash is not None:
            raise ConfigError(
                f"{where}.graphs[{i}].name: {g.name!r} is already the name of {clash}; "
                "give every table and graph of a dataset its own name (case-insensitive)"
            )
        taken[g.name.lower()] = f"graph {g.name!r}"
    budget = _loss(raw["budget"], f"{where}.budget")
    try:
        response_time = parse_response_time(raw.get("response_time"), f"{where}.response_time")
    except InvalidParameter as e:
        raise ConfigError(str(e)) from None
    return DatasetConfig(
        name=name,
        source=source,
        table=table,
        budget=budget,
        privacy_unit=unit if isinstance(unit, str) else None,
        bounds=MappingProxyType(bounds),
        max_groups=_count(raw.get("max_groups"), f"{where}.max_groups"),
        max_rows=_count(raw.get("max_rows"), f"{where}.max_rows"),
        public_keys=MappingProxyType(keys),
        public_tables=tuple(public),
        engine="postgresql" if engine == "postgresql" else "duckdb",
        source_table=source_table,
        accountant=_accountant(raw.get("accountant"), budget, f"{where}.accountant"),
        graphs=graphs,
        response_time=response_time,
    )


_GRAPH_KEYS = {
    "name",
    "source",
    "source_col",
    "target_col",
    "unit",
    "max_degree",
    "nodes",
    "node_key",
    "nodes_name",
    "domains",
}


def _graphs(
    raw: list[object], where: str, base: Path, *, in_place: bool = False
) -> tuple[GraphConfig, ...]:
    """The ``[[datasets.NAME.graphs]]`` entries, validated.

    ``source`` and ``nodes`` are files (which must exist), or with ``in_place`` (a
    PostgreSQL dataset) tables of the dataset's database, read in place.
    """

    def located(value: object, key: str) -> Path | str:
        if in_place:
            return _in_place_table(value, key)
        return _path(value, key, base, must_exist=True)

    out: list[GraphConfig] = []
    for i, entry in enumerate(raw):
        key = f"{where}.graphs[{i}]"
        if not isinstance(entry, dict):
            raise ConfigError(
                f"{key} must be a table: write [[{where}.graphs]] with name, source, "
                "source_col, target_col, unit and max_degree"
            )
        _keys(entry, key, _GRAPH_KEYS)
        for required, example in (
            ("name", 'name = "friends" (the name used in FROM)'),
            ("source", 'source = "edges.csv" (the edge table, CSV or Parquet)'),
            ("source_col", 'source_col = "a" (the column of one end of each edge)'),
            ("target_col", 'target_col = "b" (the column of the other end)'),
            (
                "unit",
                'unit = "edge" (one edge is protected) or unit = "node" (a node and all its edges)',
            ),
            (
                "max_degree",
                (
                    "max_degree = 20 (the public degree bound answers truncate to; never "
                    "derived from the data)"
                ),
            ),
        ):
            if required not in entry:
                raise ConfigError(f"{key}.{required} is missing: write {example}")
        _name(entry["name"], f"{key}.name")
        for col in ("source_col", "target_col"):
            _name(entry[col], f"{key}.{col}")
        if entry["source_col"] == entry["target_col"]:
            raise ConfigError(
                f"{key}: source_col and target_col must be two different columns (the two "
                "ends of each edge)"
            )
        unit = entry["unit"]
        if unit not in ("edge", "node"):
            raise ConfigError(
                f'{key}.unit: write unit = "edge" (one edge is protected) or unit = "node" '
                "(a node and all its edges)"
            )
        degree = entry["max_degree"]
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise ConfigError(
                f"{key}.max_degree must be a positive integer, e.g. max_degree = 20 (a public "
                "choice, never derived from the data)"
            )
        if ("nodes" in entry) != ("node_key" in entry):
            raise ConfigError(
                f'{key}: give both nodes = "nodes.csv" and node_key = "id" (the node table '
                "and its unique id column), or neither"
            )
        nodes: Path | str | None = None
        node_key: str | None = None
        if "nodes" in entry:
            nodes = located(entry["nodes"], f"{key}.nodes")
            _name(entry["node_key"], f"{key}.node_key")
            node_key = entry["node_key"]
        nodes_name = entry.get("nodes_name")
        if nodes_name is not None:
            if nodes is None:
                raise ConfigError(
                    f'{key}.nodes_name names the node table: add nodes = "nodes.csv" and '
                    'node_key = "id", or remove nodes_name'
                )
            _name(nodes_name, f"{key}.nodes_name")
        domains: dict[str, tuple[object, ...]] = {}
        raw_domains = _table(entry.get("domains"), f"{key}.domains")
        if raw_domains and nodes is None:
            raise ConfigError(
                f'{key}.domains declares node attributes: add nodes = "nodes.csv" and '
                'node_key = "id", or remove domains'
            )
        for attr, values in raw_domains.items():
            where_attr = f"{key}.domains.{attr}"
            if (
                not isinstance(values, list)
                or not values
                or not all(
                    isinstance(v, str | int | float) and not isinstance(v, bool) for v in values
                )
            ):
                raise ConfigError(
                    f'{where_attr} must be a non-empty list of values, e.g. {attr} = ["x", "y"]'
                )
            if len(set(values)) != len(values):
                raise ConfigError(f"{where_attr} lists a value twice; list each value once")
            if attr == node_key:
                raise ConfigError(
                    f"{where_attr}: {attr!r} is the node key, not an attribute; domains declare "
                    "the values of other node columns"
                )
            domains[attr] = tuple(values)
        names = {g.name.lower() for g in out}
        if entry["name"].lower() in names:
            raise ConfigError(
                f"{key}.name: two graphs are named {entry['name']!r}; give each its own name"
            )
        out.append(
            GraphConfig(
                name=entry["name"],
                source=located(entry["source"], f"{key}.source"),
                source_col=entry["source_col"],
                target_col=entry["target_col"],
                unit="node" if unit == "node" else "edge",
                max_degree=degree,
                nodes=nodes,
                node_key=node_key,
                nodes_name=nodes_name,
                domains=MappingProxyType(domains),
            )
        )
    return tuple(out)


def _accountant(value: object, budget: PrivacyLoss, key: str) -> str | None:
    """The canonical accountant spec, checked against the budget (None when not given)."""
    if value is None:
        return None
    try:
        choice = parse_accountant(value)
        check_accountant(budget, choice)
    except InvalidParameter as e:
        raise ConfigError(
            f'{key}: {e}; write accountant = "basic" or accountant = "zcdp" (with an '
            "(ε, δ) budget such as budget = { epsilon = 1, delta = 1e-6 })"
        ) from None
    return accountant_spec(choice)


def _postgres_url(raw: Mapping[str, object], where: str) -> str:
    """The ``source`` URL of a PostgreSQL dataset."""
    url = raw["source"]
    if not isinstance(url, str) or not url.lower().startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f'{where}.source must be a PostgreSQL URL with engine = "postgresql": write '
            'source = "postgresql://role@host:5432/database" (keep the password in ~/.pgpass)'
        )
    return url


def _in_place_table(value: object, key: str) -> str:
    """A table of the dataset's PostgreSQL database: ``"table"`` or ``"schema.table"``."""
    parts = value.split(".") if isinstance(value, str) else []
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise ConfigError(
            f'{key} must name a table of the dataset\'s database: "table" or "schema.table"'
        )
    assert isinstance(value, str)
    return value


def _postgres_source(raw: Mapping[str, object], where: str, name: str) -> tuple[str, str, str]:
    """``(url, table in the database, name analysts use)`` of a PostgreSQL dataset."""
    url = _postgres_url(raw, where)
    if "table" not in raw:
        raise ConfigError(
            f'{where}.table is missing: write table = "events" (or "schema.events"), the '
            "table read in place"
        )
    source_table = raw["table"]
    assert isinstance(source_table, str)
    parts = source_table.split(".")
    if len(parts) > 2 or not all(parts):
        raise ConfigError(f'{where}.table must be "table" or "schema.table"')
    del name
    return url, source_table, parts[-1]


def _bucket(raw: object, key: str, what: str, per_second: float, burst: int) -> RateLimit:
    """A ``{ per_second = …, burst = … }`` token bucket of ``[server]`` (missing keys: defaults)."""
    where = f"server.{key}"
    table = _table(raw, where)
    _keys(table, where, {"per_second", "burst"})
    rate = table.get("per_second", per_second)
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or rate <= 0
    ):
        raise ConfigError(
            f"{where}.per_second must be a positive number of requests per second "
            f"({what}), e.g. per_second = {per_second:g}"
        )
    size = table.get("burst", burst)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError(f"{where}.burst must be a positive integer, e.g. burst = {burst}")
    return RateLimit(per_second=float(rate), burst=size)


def _server(raw: Mapping[str, object]) -> ServerSettings:
    _keys(
        raw,
        "server",
        {
            "share_replays",
            "rate_limit",
            "failed_auth",
            "max_request_bytes",
            "cors_origins",
            "idempotency_wait",
            "worker_healthcheck",
        },
    )
    share = raw.get("share_replays", False)
    if not isinstance(share, bool):
        raise ConfigError("server.share_replays must be true or false (default false)")
    rate_limit = _bucket(
        raw.get("rate_limit"), "rate_limit", "per analyst", DEFAULT_RATE_PER_SECOND, DEFAULT_BURST
    )
    failed_auth = _bucket(
        raw.get("failed_auth"),
        "failed_auth",
        "failed authentications per client address",
        DEFAULT_FAILED_AUTH_PER_SECOND,
        DEFAULT_FAILED_AUTH_BURST,
    )
    size = raw.get("max_request_bytes", DEFAULT_MAX_REQUEST_BYTES)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1024:
        raise ConfigError(
            "server.max_request_bytes must be an integer of at least 1024, e.g. 65536"
        )
    origins = raw.get("cors_origins", [])
    if not isinstance(origins, list) or not all(
        isinstance(o, str) and o and o != "*" for o in origins
    ):
        raise ConfigError(
            'server.cors_origins must be a list of origins, e.g. ["https://console.example"]; '
            '"*" is refused (bearer tokens must not be usable from any web page)'
        )
    wait = raw.get("idempotency_wait", 5.0)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= 60:
        raise ConfigError("server.idempotency_wait must be a number of seconds in [0, 60]")
    health = raw.get("worker_healthcheck", 2)
    if isinstance(health, bool) or not isinstance(health, int) or not 1 <= health <= 60:
        raise ConfigError("server.worker_healthcheck must be a whole number of seconds in [1, 60]")
    return ServerSettings(
        share_replays=share,
        rate_limit=rate_limit,
        failed_auth=failed_auth,
        max_request_bytes=size,
        cors_origins=tuple(origins),
        idempotency_wait=float(wait),
        worker_healthcheck=health,
    )


# -- values ------------------------------------------------------------------------------------


def _keys(raw: Mapping[str, object], where: str, allowed: set[str]) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in {where}; allowed keys: {', '.join(sorted(allowed))}"
        )


def _table(value: object, where: str, *, required: bool = False) -> Mapping[str, object]:
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a table (write [{where}] or {where} = {{ ... }})")
    return value


def _name(value: object, where: str) -> None:
    if not isinstance(value, str) or not value or len(value) > 200:
        raise ConfigError(f"{where} must be a non-empty name of at most 200 characters")


def _path(value: object, where: str, base: Path, *, must_exist: bool) -> Path:
    if not isinstance(value, str) or not value:
        raise ConfigError(f'{where} must be a file path, e.g. {where.split(".")[-1]} = "data.csv"')
    p = Path(value).expanduser()
    p = p if p.is_absolute() else base / p
    if must_exist and not p.is_file():
        raise ConfigError(
            f"{where}: file {str(p)!r} does not exist (relative paths are relative to the "
            "configuration file's directory)"
        )
    if not must_exist and not p.parent.is_dir():
        raise ConfigError(f"{where}: directory {str(p.parent)!r} does not exist; create it first")
    return p


def _number(value: object, where: str) -> Fraction:
    """An exact number: TOML integers, floats read as the decimal they print as, "a/b"."""
    if isinstance(value, bool):
        raise ConfigError(f"{where} must be a number, not a boolean")
    try:
        if isinstance(value, int):
            return Fraction(value)
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ConfigError(f"{where} must be finite")
            return Fraction(repr(value))
        if isinstance(value, str):
            return Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        pass
    raise ConfigError(f'{where} must be a number such as 0.5 or a fraction such as "1/3"')


def _count(value: object, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where} must be a positive integer, e.g. {where.split('.')[-1]} = 1")
    return value


def _loss(value: object, where: str) -> PrivacyLoss:
    example = "{ epsilon = 1.0 }, { epsilon = 1.0, delta = 1e-6 } or { rho = 0.5 }"
    if not isinstance(value, dict) or not value:
        raise ConfigError(
            f"{where} must be a privacy loss: write {where.split('.')[-1]} = {example}"
        )
    keys = set(value)
    parts = {k: _number(v, f"{where}.{k}") for k, v in value.items() if k in keys}
    try:
        if keys == {"epsilon"}:
            return Epsilon(epsilon=parts["epsilon"])
        if keys == {"epsilon", "delta"}:
            return EpsilonDelta(epsilon=parts["epsilon"], delta=parts["delta"])
        if keys == {"rho"}:
            return Rho(rho=parts["rho"])
    except InvalidParameter as e:
        raise ConfigError(f"{where}: {e}") from e
    raise ConfigError(f"{where} has keys {sorted(keys)}; write {example}")

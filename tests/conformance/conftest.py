"""Engines under the conformance suite, and what a new engine must provide to join it.

The suite in ``test_engine_conformance.py`` runs, for every engine listed in :data:`ENGINES`,
the noise-free oracle tests of the query path: the exact bounded aggregates that
:func:`deniable.query.testing.exact_aggregates` reads from the engine (what the noise is
added to) are compared with a reference computed in Python (never in the engine under
test), and the refusals, determinism and bounding invariants are checked. Listed: DuckDB,
:class:`PortableDuckDB` (DuckDB declaring the capabilities missing from PostgreSQL or Spark,
so that the fallback spellings run on the embedded engine too), PostgreSQL (a real server
started by ``tests/conformance/_postgres.py``) and Spark (a local session started by
``tests/conformance/_spark.py``; its parametrisation is marked ``slow``).

To plug an engine in, add one :class:`EngineSpec` to :data:`ENGINES`:

* ``name``: the test id (``"postgres"``, ``"spark"``).
* ``load``: a zero-argument callable run when the engine's tests start. It returns a
  *factory*, ``factory(tmp_dir: Path) -> Engine``, that builds a fresh, empty engine adapter
  (:class:`deniable.engines.base.Engine`: ``capabilities`` and ``bind``/``check``/``run``/
  ``sample``/``close``) whose scratch files, if any, live under ``tmp_dir`` (a fresh
  directory per call: a Spark warehouse, a PostgreSQL schema's dump, …). ``load`` starts
  what the engine needs (a server, a session) and installs what is missing (Debian's
  ``postgresql``, a JRE): a skip is not a pass. The suite closes every engine it made
  (:meth:`Engine.close`); the factory must not hand out an engine shared with other tests.
* ``marks``: pytest marks for all of the engine's tests (``slow`` keeps a slow engine's
  full run out of the default suite).

Test data reaches the engine through the public path only:
``Session(budget=..., ledger=..., engine=factory(tmp_dir)).add_table(name, frame, ...)``,
which calls ``engine.bind(name, frame)``. ``frame`` is a pandas DataFrame whose columns are
all Arrow-backed (``pd.ArrowDtype``: ``int64``, ``double``, ``string``), so that NaN and
NULL stay apart; the engine's ``bind`` must therefore accept such a frame (or the factory's
engine must load it, e.g. ``CREATE TABLE`` + ``COPY`` into a scratch schema) and must keep:

* NULL and NaN as distinct values of DOUBLE columns (``-0.0`` may stay ``-0.0``),
* ``int64`` columns as an integer SQL type, ``double`` as a floating type, ``string`` as
  text (the catalog classifies the reported type names with
  :func:`deniable.query.catalog.kind_of`),
* text byte for byte (no Unicode normalisation on load: the NFC cases depend on it).

The engine's ``check`` must raise :class:`deniable.errors.SQLError` for a statement that
does not type-check against the table (e.g. text compared with a number), and its ``run``
must be deterministic (no ``random()``, no order-dependent aggregates): the same statement
on the same data gives the same result.

Cross-engine comparisons (:func:`engine_pair`) run on every pair of listed engines; with
one engine listed they skip, stating why.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest
from _postgres import load_postgres
from _spark import load_spark

from deniable.engines.base import DUCKDB_CAPABILITIES, Capabilities, Engine
from deniable.engines.duckdb import DuckDBEngine

EngineFactory = Callable[[Path], Engine]
"""Builds a fresh engine adapter given a scratch directory of its own."""


@dataclass(frozen=True)
class EngineSpec:
    """One engine of the conformance suite.

    Attributes:
        name: the test id.
        load: returns the engine's factory (starting the engine's server or session, and
            installing what it needs, when missing: never a skip).
        marks: pytest marks of every test on this engine (``slow`` for Spark: 0.2–1.6 s a
            query even on tiny data, so its full conformance run is in ``make test-slow``;
            its golden, engine, uniformity and privacy tests stay in the default suite).
    """

    name: str
    load: Callable[[], EngineFactory]
    marks: tuple[pytest.MarkDecorator, ...] = ()


def _duckdb() -> EngineFactory:
    def factory(tmp_dir: Path) -> Engine:
        # An in-memory DuckDB; two threads keep the suite's timing close to CI's two cores.
        del tmp_dir
        return DuckDBEngine(threads=2)

    return factory


class PortableDuckDB(DuckDBEngine):
    """DuckDB declaring only what every planned engine has (a test double, not an engine).

    No TRY (as PostgreSQL: arithmetic in WHERE is refused), no NFC (as Spark: text privacy
    units are refused), no SEMI JOIN nor IS NOT DISTINCT FROM (``EXISTS`` and ``OR … IS
    NULL`` are spelled instead), DECIMAL(38, 0) sums (as Spark). It runs the capability
    fallbacks and the refusals naming an engine's limitation today, and, with the same
    keyed hash as DuckDB, the cross-engine comparison on the heavy data too.
    """

    capabilities: ClassVar[Capabilities] = dataclasses.replace(
        DUCKDB_CAPABILITIES,
        try_expression=False,
        try_arithmetic=False,
        semi_join=False,
        null_safe_equal=False,
        unicode_nfc=None,
        wide_sum=False,
        wide_packing=False,
    )


def _portable_duckdb() -> EngineFactory:
    def factory(tmp_dir: Path) -> Engine:
        del tmp_dir
        return PortableDuckDB(threads=2)

    return factory


ENGINES: tuple[EngineSpec, ...] = (
    EngineSpec("duckdb", _duckdb),
    EngineSpec("duckdb-portable", _portable_duckdb),
    EngineSpec("postgres", load_postgres),
    EngineSpec("spark", load_spark, marks=(pytest.mark.slow,)),
)
"""Every engine the suite runs on (one parametrisation each)."""


class EngineMaker:
    """A loaded engine factory that remembers and closes the engines it made."""

    def __init__(self, name: str, factory: EngineFactory, tmp: pytest.TempPathFactory) -> None:
        self.name = name
        self._factory = factory
        self._tmp = tmp
        self._made: list[Engine] = []

    def __call__(self) -> Engine:
        """A fresh engine with its own scratch directory."""
        engine = self._factory(self._tmp.mktemp(f"engine-{self.name}"))
        self._made.append(engine)
        return engine

    def close(self) -> None:
        """Close every engine made (sessions never close an engine they were given)."""
        for engine in self._made:
            engine.close()
        self._made.clear()


@pytest.fixture(
    scope="module", params=[pytest.param(spec.name, marks=spec.marks) for spec in ENGINES]
)
def engine_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineMaker]:
    """A maker of fresh engines, once per engine of :data:`ENGINES` (skips if unavailable)."""
    spec = next(s for s in ENGINES if s.name == request.param)
    maker = EngineMaker(spec.name, spec.load(), tmp_path_factory)
    yield maker
    maker.close()


def _pairs() -> list[object]:
    marks = {spec.name: spec.marks for spec in ENGINES}
    pairs = list(itertools.combinations([spec.name for spec in ENGINES], 2))
    if not pairs:
        return [pytest.param(None, id="single-engine")]
    return [pytest.param(p, marks=marks[p[0]] + marks[p[1]], id="-vs-".join(p)) for p in pairs]


@pytest.fixture(scope="module", params=_pairs())
def engine_pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EngineMaker, EngineMaker]]:
    """Two engine makers to compare; skips while only one engine is listed."""
    pair = request.param
    if pair is None:
        pytest.skip(
            "cross-engine comparison needs two engines; only "
            f"{ENGINES[0].name!r} is listed in tests/conformance/conftest.py ENGINES"
        )
    specs = [next(s for s in ENGINES if s.name == n) for n in pair]
    makers = [EngineMaker(s.name, s.load(), tmp_path_factory) for s in specs]
    yield makers[0], makers[1]
    for m in makers:
        m.close()

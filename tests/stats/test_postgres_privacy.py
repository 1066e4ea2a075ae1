"""Empirical privacy and uniform bounding of the PostgreSQL engine (a real server, started here).

The DuckDB tests' approach, with the exact bounded aggregates computed by PostgreSQL:

* **COUNT and SUM** (``test_query_privacy.py``'s method): ``D`` and ``D'`` of
  ``_query_neighbours`` (``D'`` adds an intruder with 20 rows of 10⁹ in each of five
  categories; ``max_groups = 2``, ``max_rows = 3``) are loaded with COPY; PostgreSQL computes
  the exact answers (same secrets); the plan's own noise (``additive_release``) is sampled
  ``N`` times and reduced to the log-likelihood-ratio statistic; ``estimate_epsilon`` gives a
  lower confidence bound at ``alpha = 1e-7`` that must not exceed the charged ε = 1 (false
  failure below 1e-7 per estimate, 2e-7 for the two queries). Negative controls through the
  same check, required to be refuted: half the noise, and contribution bounding switched off
  (the plan's SQL run in PostgreSQL with ``max_groups = 5, max_rows = 20``).
* **GROUP BY a private key**: a "loner" holds rows in five keys nobody else has; with
  ``max_groups = 2`` PostgreSQL's bounding must keep at most two of them (one unit each), and
  over ``N_PIPELINE`` whole releases (``release``, the release path's function) the event "some
  key of the loner is released" must stay within its rate δ: the count must not exceed
  ``binom.ppf(1 − 1e-7, N_PIPELINE, δ)`` (false failure below 1e-7). Negative control: the same
  plan's SQL with ``max_groups = 5`` (five lonely keys, each released at rate δ/2: the event's
  rate is 1 − (1 − δ/2)⁵ ≈ 2.26δ, some 10 standard deviations above the threshold) is rejected.
* **Uniform partition choice** (``test_bounding_uniform.py``'s χ² check on PostgreSQL's keyed
  hash, ``hashtextextended``): ``U`` units each touch all ``K = 50`` categories once and keep
  ``m = 5``; ``Σ (n_k − U·m/K)² / (U·a)`` is χ² with K − 1 degrees of freedom and must stay
  below its ``1 − 1e-7`` quantile. Negative control: an order that ignores the unit (every
  unit keeps the same five categories) must exceed it.
"""

from __future__ import annotations

import dataclasses
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from _query_neighbours import (
    CATS,
    MAX_GROUPS,
    MAX_ROWS,
    UNBOUNDED_GROUPS,
    UNBOUNDED_ROWS,
    domain_vector,
    neighbour_data,
)
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer, shared_server, stop_shared_server

pytest.importorskip("psycopg")

from _uniform_support import chi2_uniform_subsets

from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.audit import estimate_epsilon
from deniable.curator.session import Session
from deniable.engines.postgres import PostgresEngine
from deniable.noise.testing import SeededRandom
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates, additive_release, release
from deniable.query.rewrite import compile as compile_module
from deniable.query.rewrite.compile import Secrets
from deniable.query.testing import exact_aggregates, exact_for_plan

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000
N_PIPELINE = 2_000
EPS = 1.0
DELTA = 0.1
COUNTS = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
SUMS = "SELECT k, SUM(x) AS s FROM t GROUP BY k"
U, K, M = 20_000, 50, 5

F64 = npt.NDArray[np.float64]


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """The test server (stopped at the end of the module)."""
    yield shared_server()
    stop_shared_server()


def _pg_session(server: PostgresServer, tmp: Path, budget: Any) -> tuple[Session, PostgresEngine]:
    engine = PostgresEngine(server.dsn())
    return Session(budget=budget, ledger=tmp / "l.db", engine=engine), engine


# --- COUNT and SUM ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Neighbours:
    plan: DPPlan
    d: ExactAggregates
    d2: ExactAggregates
    d2_unbounded: ExactAggregates
    ref: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]


@pytest.fixture(scope="module", params=[COUNTS, SUMS], ids=["count", "sum"])
def neighbours(
    request: pytest.FixtureRequest,
    server: PostgresServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Neighbours:
    answers = []
    unbounded: ExactAggregates | None = None
    for with_intruder in (False, True):
        s, engine = _pg_session(server, tmp_path_factory.mktemp("n"), Epsilon(epsilon=10))
        try:
            s.add_table(
                "t",
                neighbour_data(with_intruder),
                privacy_unit="uid",
                bounds={"x": (0, 100)},
                max_groups=MAX_GROUPS,
                max_rows=MAX_ROWS,
                public_keys={"k": CATS},
            )
            plan, _, exact = exact_aggregates(s, request.param, not_private=True, epsilon=EPS)
            answers.append((plan, exact))
            if with_intruder:
                loose = dataclasses.replace(
                    plan, max_groups=UNBOUNDED_GROUPS, max_rows=UNBOUNDED_ROWS
                )
                _, unbounded = exact_for_plan(s, loose, not_private=True)
        finally:
            s.close()
            engine.close()
    (plan, d), (_, d2) = answers
    assert unbounded is not None
    ref = [(domain_vector(plan, d, m), domain_vector(plan, d2, m)) for m in plan.measures]
    return Neighbours(plan, d, d2, unbounded, ref)


def _samples(n: Neighbours, exact: ExactAggregates, seed: int, *, noise_factor: int = 1) -> F64:
    """N releases reduced to the log-likelihood-ratio statistic against the reference."""
    t = np.zeros(N)
    for j, (m, (c, c2)) in enumerate(zip(n.plan.measures, n.ref, strict=True)):
        x = np.tile(domain_vector(n.plan, exact, m), N)
        noisy = dataclasses.replace(m, budget=m.budget * noise_factor)
        value = additive_release(noisy, x, SeededRandom(100 * seed + j)).value
        y = np.asarray(value, dtype=np.float64).reshape(N, -1)
        w = float(m.budget / m.sensitivity)
        t += w * (np.abs(y - c) - np.abs(y - c2)).sum(axis=1)
    return t


def test_the_intruder_moves_the_answer_by_the_full_sensitivity(neighbours: Neighbours) -> None:
    (m,) = neighbours.plan.measures
    c, c2 = (np.asarray(v, dtype=np.int64) for v in neighbours.ref[0])
    shift = np.abs(c2 - c).sum()
    assert m.sensitivity - 2 <= shift <= m.sensitivity  # the bounds hold and bite
    assert (np.abs(c2 - c) > 0).sum() == MAX_GROUPS


def test_empirical_epsilon_within_the_charged_loss(neighbours: Neighbours) -> None:
    n = neighbours
    est = estimate_epsilon(_samples(n, n.d, 1), _samples(n, n.d2, 2), alpha=ALPHA)
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS  # the test has power


def test_control_half_the_noise_is_refuted(neighbours: Neighbours) -> None:
    n = neighbours
    est = estimate_epsilon(
        _samples(n, n.d, 3, noise_factor=2), _samples(n, n.d2, 4, noise_factor=2), alpha=ALPHA
    )
    assert est.refutes(EPS), est


def test_control_without_contribution_bounds_is_refuted(neighbours: Neighbours) -> None:
    n = neighbours
    est = estimate_epsilon(_samples(n, n.d, 5), _samples(n, n.d2_unbounded, 6), alpha=ALPHA)
    assert est.refutes(EPS), est


# --- GROUP BY a private key -------------------------------------------------------------------

LONELY = [f"lonely{i}" for i in range(5)]
PRIVATE = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"


@pytest.fixture(scope="module")
def private_keys(
    server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DPPlan, ExactAggregates, ExactAggregates]]:
    rows = [(f"u{u}", k) for u in range(600) for k in ("big", "bigger")]
    rows += [("loner", k) for k in LONELY for _ in range(3)]
    budget = EpsilonDelta(epsilon=10, delta=0.5)
    s, engine = _pg_session(server, tmp_path_factory.mktemp("p"), budget)
    s.add_table(
        "t", pd.DataFrame(rows, columns=["uid", "k"]), privacy_unit="uid", max_groups=2, max_rows=1
    )
    plan, _, exact = exact_aggregates(s, PRIVATE, not_private=True, epsilon=EPS, delta=DELTA)
    _, loose = exact_for_plan(s, dataclasses.replace(plan, max_groups=5), not_private=True)
    yield plan, exact, loose
    s.close()
    engine.close()


def _lonely_releases(plan: DPPlan, exact: ExactAggregates, seed: int) -> int:
    hits = 0
    for i in range(N_PIPELINE):
        out = release(plan, exact, source=SeededRandom(seed + i))
        assert ("big",) in out.keys and ("bigger",) in out.keys
        hits += any((k,) in out.keys for k in LONELY)
    return hits


def test_private_keys_of_one_person_are_released_at_rate_delta(
    private_keys: tuple[DPPlan, ExactAggregates, ExactAggregates],
) -> None:
    plan, exact, _ = private_keys
    lonely = [exact.units[exact.keys.index((k,))] for k in LONELY if (k,) in exact.keys]
    assert 1 <= len(lonely) <= 2 and all(u == 1 for u in lonely)  # bounded in PostgreSQL
    assert _lonely_releases(plan, exact, 10_000) <= stats.binom.ppf(1 - ALPHA, N_PIPELINE, DELTA)


def test_control_private_keys_without_bounding_is_rejected(
    private_keys: tuple[DPPlan, ExactAggregates, ExactAggregates],
) -> None:
    plan, _, loose = private_keys
    assert sum((k,) in loose.keys for k in LONELY) == 5
    assert _lonely_releases(plan, loose, 20_000) > stats.binom.ppf(1 - ALPHA, N_PIPELINE, DELTA)


# --- uniform partition choice ------------------------------------------------------------------


@pytest.fixture(scope="module")
def partitions(
    server: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session]:
    import psycopg

    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute("DROP TABLE IF EXISTS public.uniform")
        admin.execute(
            "CREATE TABLE public.uniform AS SELECT u::bigint AS uid, k::bigint AS k "
            f"FROM generate_series(0, {U - 1}) u, generate_series(0, {K - 1}) k"
        )
        admin.execute("ANALYZE public.uniform")
    s, engine = _pg_session(server, tmp_path_factory.mktemp("u"), Epsilon(epsilon=100))
    s.add_table(
        "t",
        server.dsn(),
        table="public.uniform",
        privacy_unit="uid",
        public_keys={"k": list(range(K))},
        max_groups=M,
        max_rows=1,
        version="uniform",
    )
    yield s
    s.close()
    engine.close()


def _kept_per_category(session: Session) -> list[int]:
    fresh = Secrets(rows=secrets.randbits(63), partitions=secrets.randbits(63))
    plan, _, exact = exact_aggregates(
        session,
        "SELECT k, COUNT(*) AS n FROM t GROUP BY k",
        not_private=True,
        epsilon=1,
        secrets=fresh,
    )
    (rows,) = [m.id for m in plan.measures if m.kind == "rows"]
    by_key = dict(zip((k for (k,) in exact.keys), exact.measures[rows].tolist(), strict=True))
    return [int(by_key.get(k, 0)) for k in range(K)]


def test_each_unit_keeps_a_uniform_subset_of_its_partitions(partitions: Session) -> None:
    statistic = chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
    assert statistic < stats.chi2.isf(ALPHA, K - 1), statistic


def test_control_order_ignoring_the_unit_is_rejected(
    partitions: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    def category_only(self: object, key: int, args: list[str]) -> str:
        return f"hashtextextended(CAST({args[-1]} AS TEXT), {key})"

    monkeypatch.setattr(compile_module._Sql, "keyed_hash", category_only)
    statistic = chi2_uniform_subsets(_kept_per_category(partitions), U, K, M)
    assert statistic > stats.chi2.isf(ALPHA, K - 1), statistic

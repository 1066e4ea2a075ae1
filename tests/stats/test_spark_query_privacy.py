"""Empirical privacy of whole SQL answers whose bounded aggregates Spark computed.

The same neighbours as ``test_query_privacy.py`` (``_query_neighbours.neighbour_data``: ``D``
has 120 users in five public categories, ``D'`` adds an intruder with 20 rows of extreme
value in each category, far beyond ``max_groups = 2``, ``max_rows = 3``), with the user
names mapped to integers (Spark has no NFC, so text privacy units are refused there). Spark
runs the generated statement on both (test-only hook, same secrets, no noise); the noise is
then drawn from the plan's own mechanisms (``release.additive_release``) many times, and each
release is reduced to the log-likelihood-ratio statistic ``T = Σ ε_i·(|y − c| − |y − c'|)/Δ_i``
(a post-processing: ε-DP bounds every event on it). :func:`deniable.audit.estimate_epsilon`
gives a lower confidence bound at ``alpha = 1e-7``; the test fails when it exceeds the
charged ε. Two queries: COUNT and SUM, grouped by the public category.

Private-key GROUP BY: ``SELECT k, COUNT(*) … GROUP BY k`` without declared keys releases keys
through partition selection at ``(ε/m, δ/m)`` per partition. On Spark's exact numbers of
units per key: a key held by one unit is released at most at rate ``δ/m`` (binomial check at
``1 − 1e-7`` over the whole release stage), and for neighbours where one unit joins two
keys (2 → 3 and 3 → 4 units) the events "kept"/"dropped" of each key show at most ``ε/m``
at ``δ/m``, the pair at most ``ε`` at ``δ`` (three estimates at 1e-7).

False failures: 2 + 1 + 3 honest checks at 1e-7 each: below 1e-6 for the module. Negative
controls, refuted by the same checks: half the noise; contribution bounding switched off for
``D'`` (the same plan's SQL run on Spark with the intruder's real 5 partitions and 20 rows);
selection run at ``(ε, δ)`` per partition (forgetting ``max_groups``).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from fractions import Fraction
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

import deniable.query.partition as partition
from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss
from deniable.audit import Event, estimate_epsilon
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates, additive_release, release
from deniable.query.testing import exact_aggregates, exact_for_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))
from _spark import local_spark

pytestmark = pytest.mark.stats

N = 200_000
EPS = 1.0
ALPHA = 1e-7
COUNT = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
SUM = "SELECT k, SUM(x) AS s FROM t GROUP BY k"
INTRUDER = 1_000_000


def _engine() -> Any:
    from deniable.engines.spark import SparkEngine

    return SparkEngine(local_spark())


def _integer_units(frame: pd.DataFrame) -> pd.DataFrame:
    """``u12`` → 12, the intruder → 10⁶: the same neighbouring relation, integer units."""
    uid = frame["uid"].map(lambda u: INTRUDER if u == "intruder" else int(u[1:]))
    return frame.assign(uid=uid.astype("int64"))


@dataclasses.dataclass(frozen=True)
class Neighbours:
    plan: DPPlan
    d: ExactAggregates
    d2: ExactAggregates
    d2_unbounded: ExactAggregates


def _exact_neighbours(tmp: Path, budget: PrivacyLoss, query: str, **options: Any) -> Neighbours:
    """As ``_query_neighbours.exact_neighbours``, with the aggregates computed by Spark."""
    answers = []
    unbounded = None
    for with_intruder in (False, True):
        s = Session(budget=budget, ledger=tmp / f"ledger-{with_intruder}.db", engine=_engine())
        s.add_table(
            "t",
            _integer_units(neighbour_data(with_intruder)),
            privacy_unit="uid",
            bounds={"x": (0, 100)},
            max_groups=MAX_GROUPS,
            max_rows=MAX_ROWS,
            public_keys={"k": CATS},
        )
        plan, _, exact = exact_aggregates(s, query, not_private=True, **options)
        answers.append((plan, exact))
        if with_intruder:
            loose = dataclasses.replace(plan, max_groups=UNBOUNDED_GROUPS, max_rows=UNBOUNDED_ROWS)
            _, unbounded = exact_for_plan(s, loose, not_private=True)
        s.close()
    (plan, d), (plan2, d2) = answers
    assert plan2.measures == plan.measures and unbounded is not None
    return Neighbours(plan, d, d2, unbounded)


def _samples(
    plan: DPPlan, exact: ExactAggregates, ref: list[Any], seed: int, *, noise_factor: int = 1
) -> npt.NDArray[np.float64]:
    """N releases reduced to the log-likelihood-ratio statistic against the reference."""
    t = np.zeros(N)
    for j, (m, (c, c2)) in enumerate(zip(plan.measures, ref, strict=True)):
        x = np.tile(domain_vector(plan, exact, m), N)
        noisy = dataclasses.replace(m, budget=m.budget * noise_factor)
        y = additive_release(noisy, x, SeededRandom(100 * seed + j)).value.reshape(N, -1)
        w = float(m.budget / m.sensitivity)
        t += w * (np.abs(y - c) - np.abs(y - c2)).sum(axis=1)
    return t


@pytest.fixture(scope="module", params=[COUNT, SUM], ids=["count", "sum"])
def answers(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Neighbours, list[Any]]:
    n = _exact_neighbours(
        tmp_path_factory.mktemp("d"), Epsilon(epsilon=10), request.param, epsilon=EPS
    )
    ref = [(domain_vector(n.plan, n.d, m), domain_vector(n.plan, n.d2, m)) for m in n.plan.measures]
    return n, ref


def test_the_intruder_moves_the_answer_by_up_to_the_sensitivity(
    answers: tuple[Neighbours, list[Any]],
) -> None:
    n, ref = answers
    (m,) = n.plan.measures
    shift = np.abs(ref[0][1] - ref[0][0])
    assert (shift > 0).sum() == MAX_GROUPS  # the intruder kept exactly two partitions
    assert m.sensitivity - 2 <= shift.sum() <= m.sensitivity
    assert n.plan.loss == Epsilon(epsilon=EPS)


def test_empirical_epsilon_within_the_charged_loss(answers: tuple[Neighbours, list[Any]]) -> None:
    n, ref = answers
    est = estimate_epsilon(
        _samples(n.plan, n.d, ref, 1), _samples(n.plan, n.d2, ref, 2), alpha=ALPHA
    )
    assert est.passes(EPS), est
    assert est.lower > 0.5 * EPS, est  # the test has power


def test_control_half_the_noise_is_refuted(answers: tuple[Neighbours, list[Any]]) -> None:
    n, ref = answers
    est = estimate_epsilon(
        _samples(n.plan, n.d, ref, 3, noise_factor=2),
        _samples(n.plan, n.d2, ref, 4, noise_factor=2),
        alpha=ALPHA,
    )
    assert est.refutes(EPS), est


def test_control_without_contribution_bounds_is_refuted(
    answers: tuple[Neighbours, list[Any]],
) -> None:
    n, ref = answers
    est = estimate_epsilon(
        _samples(n.plan, n.d, ref, 5), _samples(n.plan, n.d2_unbounded, ref, 6), alpha=ALPHA
    )
    assert est.refutes(EPS), est


# --- private keys: partition selection on Spark's exact units per key -------------------------

SEL_EPS, SEL_DELTA, SEL_M = 2, 0.02, 2
N_SEL = 400_000
N_PIPELINE = 2_000
CHANGED = ("two", "three")  # keys the neighbour joins: 2 → 3 and 3 → 4 units


def _key_rows(with_neighbour: bool) -> pd.DataFrame:
    rows = [(u, k) for u in range(300) for k in ("big", "bigger")]
    rows.append((1000, "lonely"))
    rows += [(2000 + u, "two") for u in range(2)]
    rows += [(3000 + u, "three") for u in range(3)]
    if with_neighbour:
        rows += [(INTRUDER, k) for k in CHANGED for _ in range(3)]
    return pd.DataFrame(rows, columns=["uid", "k"]).astype({"uid": "int64"})


@pytest.fixture(scope="module")
def selection(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[list[tuple[DPPlan, ExactAggregates]]]:
    out = []
    for with_neighbour in (False, True):
        s = Session(
            budget=EpsilonDelta(epsilon=10, delta=0.5),
            ledger=tmp_path_factory.mktemp("keys") / "l.db",
            engine=_engine(),
        )
        s.add_table(
            "t", _key_rows(with_neighbour), privacy_unit="uid", max_groups=SEL_M, max_rows=1
        )
        plan, _, exact = exact_aggregates(
            s, COUNT, not_private=True, epsilon=SEL_EPS, delta=SEL_DELTA
        )
        out.append((plan, exact))
        s.close()
    yield out


def _units(exact: ExactAggregates, key: str) -> int:
    return int(exact.units[exact.keys.index((key,))])


def test_spark_counts_the_units_of_each_private_key(
    selection: list[tuple[DPPlan, ExactAggregates]],
) -> None:
    (plan, exact), (_, exact2) = selection
    sel = plan.selection
    assert sel is not None and sel.max_groups == SEL_M
    assert [_units(exact, k) for k in CHANGED] == [2, 3]
    assert [_units(exact2, k) for k in CHANGED] == [3, 4]
    assert _units(exact, "lonely") == 1 and _units(exact, "big") == 300


def _limit(n: int) -> float:
    return float(stats.binom.ppf(1 - ALPHA, n, SEL_DELTA / SEL_M))


def test_single_unit_key_released_at_most_at_rate_delta_over_m(
    selection: list[tuple[DPPlan, ExactAggregates]],
) -> None:
    (plan, exact), _ = selection
    lonely = 0
    for i in range(N_PIPELINE):
        noisy = release(plan, exact, source=SeededRandom(30_000 + i))
        lonely += ("lonely",) in noisy.keys
    assert lonely <= _limit(N_PIPELINE)


def _kept(exact: ExactAggregates, max_groups: int, seed: int) -> npt.NDArray[np.bool_]:
    units = np.tile(np.array([_units(exact, k) for k in CHANGED], dtype=np.int64), N_SEL)
    kept = partition.select(
        units,
        epsilon=Fraction(SEL_EPS),
        delta=Fraction(SEL_DELTA),
        max_groups=max_groups,
        source=SeededRandom(seed),
    )
    return np.asarray(kept, dtype=bool).reshape(N_SEL, len(CHANGED))


KEPT = [Event("kept", lambda x: x == 1), Event("dropped", lambda x: x == 0)]


def _estimates(
    selection: list[tuple[DPPlan, ExactAggregates]], max_groups: int, seed: int
) -> tuple[list[Any], Any]:
    (_, d), (_, d2) = selection
    a, b = _kept(d, max_groups, seed), _kept(d2, max_groups, seed + 1)
    singles = [
        estimate_epsilon(a[:, j], b[:, j], alpha=ALPHA, delta=SEL_DELTA / SEL_M, events=KEPT)
        for j in range(len(CHANGED))
    ]
    pair = estimate_epsilon(
        2 * a[:, 0] + a[:, 1], 2 * b[:, 0] + b[:, 1], alpha=ALPHA, delta=SEL_DELTA
    )
    return singles, pair


def test_private_key_neighbours_keep_the_eps_delta_promise(
    selection: list[tuple[DPPlan, ExactAggregates]],
) -> None:
    singles, pair = _estimates(selection, SEL_M, 10)
    for est in singles:
        assert est.passes(SEL_EPS / SEL_M), est
        assert est.lower > 0.8 * SEL_EPS / SEL_M, est
    assert pair.passes(SEL_EPS), pair


def test_control_selection_forgetting_max_groups_is_refuted(
    selection: list[tuple[DPPlan, ExactAggregates]],
) -> None:
    singles, pair = _estimates(selection, 1, 20)
    assert all(est.refutes(SEL_EPS / SEL_M) for est in singles), singles
    assert pair.refutes(SEL_EPS), pair

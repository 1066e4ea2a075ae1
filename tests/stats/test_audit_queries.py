"""The whole-query auditor catches planted privacy bugs and passes every shipped query type.

Each case plans a query on two neighbouring datasets ``D`` and ``D'`` (``D'`` adds one
intruder who contributes far beyond the bounds; the datasets of ``_query_neighbours`` and of
``test_query_new_paths_privacy``), computes the exact bounded aggregates once per dataset
(test-only hook), and hands :func:`deniable.audit.audit_query` two samplers built by
:func:`deniable.cli.audit.plan_sampler` — the release stage's own mechanism calls, all the
query's released numbers jointly (noisy measures, selection mask, quantile choices).

Thresholds. Every audit runs at ``α = 1e-7``: an honest query is failed (lower bound above
the charged ε) with probability at most 1e-7 per audit, whatever its output law (the
auditor's Clopper–Pearson/Bonferroni guarantee, events chosen on a held-out split). This
module runs at most 9 honest audits by default (14 with the slow ones): false-failure
probability below 1.4e-6 overall, below 1e-7 per test.

Planted bugs (the negative controls; each must be refuted, lower bound > ε = 1):

* half the noise — every measure given twice its budget;
* sensitivity off by one group — the engine bounds each unit to ``max_groups + 1 = 3``
  partitions while the noise is calibrated for 2 (true loss 1.5);
* a budget split that double-counts — COUNT and SUM each given the whole ε (true loss 2);
* bounding switched off — the plan's SQL run with ``max_groups = 5, max_rows = 20`` on ``D'``.

Measured (100 000 trials; 400 000 for the smaller one-group effect): honest COUNT+SUM lower
bound 0.77 (it has power: asserted > 0.5); controls 1.74 (half noise), 1.27 (one group more),
1.75 (double-counted split), 8.3 (bounding off). Every shipped query type passes: see each test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from _query_neighbours import (
    CATS,
    MAX_GROUPS,
    MAX_ROWS,
    UNBOUNDED_GROUPS,
    UNBOUNDED_ROWS,
    neighbour_data,
)
from test_query_new_paths_privacy import _public_register, _rowexpr_register

from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.audit import QueryAudit, audit_query
from deniable.cli.audit import candidate_keys, output_names, plan_sampler
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.measures import Measure
from deniable.query.plan import DPPlan
from deniable.query.release import ExactAggregates
from deniable.query.testing import exact_aggregates, exact_for_plan

pytestmark = pytest.mark.stats

ALPHA = 1e-7
EPS = 1.0
N = 100_000
BUDGET = Epsilon(epsilon=10)
Register = Callable[[Session, bool], None]
Alter = Callable[[DPPlan], DPPlan]


def _table(public: bool) -> Register:
    def register(s: Session, intruder: bool) -> None:
        s.add_table(
            "t",
            neighbour_data(intruder),
            privacy_unit="uid",
            bounds={"x": (0, 100)},
            max_groups=MAX_GROUPS,
            max_rows=MAX_ROWS,
            public_keys={"k": CATS} if public else None,
        )

    return register


@dataclasses.dataclass(frozen=True)
class Case:
    """A plan and the exact aggregates of ``D`` and ``D'`` under each variant of its plan."""

    plan: DPPlan
    exact: Mapping[str, tuple[ExactAggregates, ExactAggregates]]

    def audit(
        self,
        seed: int,
        *,
        variant: str = "honest",
        measures: tuple[Measure, ...] | None = None,
        trials: int = N,
    ) -> QueryAudit:
        d, d2 = self.exact[variant]
        keys = candidate_keys(self.plan, d, d2)
        delta = float(self.plan.loss.delta) if isinstance(self.plan.loss, EpsilonDelta) else 0.0
        return audit_query(
            plan_sampler(self.plan, d, keys, measures=measures, source=SeededRandom(2 * seed)),
            plan_sampler(self.plan, d2, keys, measures=measures, source=SeededRandom(2 * seed + 1)),
            trials=trials,
            claimed=float(self.plan.loss.epsilon),  # type: ignore[union-attr]
            alpha=ALPHA,
            delta=delta,
            names=output_names(self.plan, keys),
        )


def _case(
    tmp: Path,
    register: Register,
    query: str,
    *,
    alter: Mapping[str, tuple[Alter, bool]] | None = None,
    budget: Epsilon | EpsilonDelta = BUDGET,
    **options: Any,
) -> Case:
    """Run ``query`` (and each altered plan: on ``D'`` only, or on both) on ``D`` and ``D'``."""
    plans: list[DPPlan] = []
    found: dict[str, list[ExactAggregates]] = {"honest": []}
    for name in alter or {}:
        found[name] = []
    for with_intruder in (False, True):
        with Session(budget=budget, ledger=tmp / f"l-{with_intruder}.db") as s:
            register(s, with_intruder)
            plan, _, exact = exact_aggregates(s, query, not_private=True, **options)
            plans.append(plan)
            found["honest"].append(exact)
            for name, (fn, both) in (alter or {}).items():
                if with_intruder or both:
                    found[name].append(exact_for_plan(s, fn(plan), not_private=True)[1])
                else:
                    found[name].append(exact)
    assert plans[0].measures == plans[1].measures  # plans read no data
    return Case(plans[0], {k: (v[0], v[1]) for k, v in found.items()})


def _groups(m: int, r: int) -> Alter:
    return lambda plan: dataclasses.replace(plan, max_groups=m, max_rows=r)


def _passes(result: QueryAudit) -> None:
    assert result.passed, result.describe()


# ----------------------------------------------------------------------------- planted bugs

COUNT_SUM = "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k"


@pytest.fixture(scope="module")
def count_sum(tmp_path_factory: pytest.TempPathFactory) -> Case:
    return _case(
        tmp_path_factory.mktemp("cs"),
        _table(public=True),
        COUNT_SUM,
        alter={
            "one group more": (_groups(MAX_GROUPS + 1, MAX_ROWS), True),
            "bounding off": (_groups(UNBOUNDED_GROUPS, UNBOUNDED_ROWS), False),
        },
        epsilon=EPS,
    )


def test_honest_count_and_sum_pass_with_power(count_sum: Case) -> None:
    result = count_sum.audit(1)
    _passes(result)
    assert result.lower > 0.5 * EPS  # the audit has power (measured 0.77)


def test_planted_half_the_noise_is_caught(count_sum: Case) -> None:
    doubled = tuple(dataclasses.replace(m, budget=m.budget * 2) for m in count_sum.plan.measures)
    assert not count_sum.audit(2, measures=doubled).passed


def test_planted_max_groups_off_by_one_is_caught(count_sum: Case) -> None:
    # the engine lets a unit reach 3 partitions; the noise is calibrated for 2 (loss 1.5)
    # a smaller effect (1.5 against 1): more trials for power
    assert not count_sum.audit(3, variant="one group more", trials=4 * N).passed


def test_planted_double_counted_budget_split_is_caught(count_sum: Case) -> None:
    plan = count_sum.plan
    assert len(plan.aggregates) == 2 and sum(a.budget for a in plan.aggregates) == EPS
    # each aggregate's measures given the whole ε instead of its share
    share = {mid: a.budget for a in plan.aggregates for mid in a.measures}
    whole = tuple(
        dataclasses.replace(m, budget=m.budget * plan.loss.epsilon / share[m.id])  # type: ignore[union-attr]
        for m in plan.measures
    )
    assert all(m.budget == EPS for m in whole)
    assert not count_sum.audit(4, measures=whole).passed


def test_planted_bounding_switched_off_is_caught(count_sum: Case) -> None:
    assert not count_sum.audit(5, variant="bounding off").passed


# ----------------------------------------------------------------------------- shipped types


@pytest.mark.parametrize(
    "query",
    [
        "SELECT k, COUNT(DISTINCT uid) AS u FROM t GROUP BY k",
        "SELECT k, AVG(x) AS a FROM t GROUP BY k",
        "SELECT k, VARIANCE(x) AS v, STDDEV(x) AS sd FROM t GROUP BY k",
    ],
    ids=["count_distinct_unit", "avg", "variance_stddev"],
)
def test_shipped_aggregates_pass(tmp_path: Path, query: str) -> None:
    _passes(_case(tmp_path, _table(public=True), query, epsilon=EPS).audit(10))


@pytest.mark.parametrize(
    "query",
    ["SELECT MEDIAN(x) AS m FROM t", "SELECT MIN(x) AS lo, MAX(x) AS hi FROM t"],
    ids=["median", "min_max"],
)
def test_quantiles_pass(tmp_path: Path, query: str) -> None:
    case = _case(tmp_path, _table(public=True), query, epsilon=EPS, quantile_grid=20)
    _passes(case.audit(11, trials=6_000))


@pytest.mark.slow
@pytest.mark.parametrize(
    "query",
    [
        "SELECT k, MEDIAN(x) AS m FROM t GROUP BY k",
        "SELECT k, PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY x) AS p FROM t GROUP BY k",
        "SELECT k, MIN(x) AS lo, MAX(x) AS hi FROM t GROUP BY k",
    ],
    ids=["median_grouped", "quantile_grouped", "min_max_grouped"],
)
def test_grouped_quantiles_pass(tmp_path: Path, query: str) -> None:
    case = _case(tmp_path, _table(public=True), query, epsilon=EPS, quantile_grid=50)
    _passes(case.audit(12, trials=20_000))


def test_private_key_group_by_passes(tmp_path: Path) -> None:
    case = _case(
        tmp_path,
        _table(public=False),
        "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k",
        budget=EpsilonDelta(epsilon=10, delta=1e-3),
        epsilon=EPS,
        delta=1e-6,
    )
    assert case.plan.selection is not None  # (ε, δ): partition selection is audited too
    _passes(case.audit(13))


def test_join_with_a_public_table_passes(tmp_path: Path) -> None:
    query = (
        "SELECT s.region, COUNT(*) AS n FROM t JOIN states s ON t.state = s.state GROUP BY s.region"
    )
    _passes(_case(tmp_path, _public_register, query, epsilon=EPS).audit(14))


def test_row_expression_passes(tmp_path: Path) -> None:
    query = "SELECT k, SUM(a * b) AS s FROM t GROUP BY k"
    _passes(_case(tmp_path, _rowexpr_register, query, epsilon=EPS).audit(15))

"""Empirical ρ of whole SQL answers under a zCDP budget, on two datasets that differ by one
maximal user.

The same neighbours as ``test_query_privacy.py``: ``D`` holds 120 users; ``D'`` adds an
intruder with 20 rows of extreme value (10⁹, clamped to the upper bound) in each of the five
categories — far more than ``max_groups = 2`` partitions and ``max_rows = 3`` rows. The
session has a ``Rho`` budget, so the plan gives every measure (count and sum per category)
discrete Gaussian noise with ``σ² = Δ₂²/(2ρ_j)``, ``Δ₂ = √m·Δ_p`` over the ``m`` partitions a
user may touch. The engine computes the exact bounded aggregates of both datasets (test-only
hook, same secrets); the noise is drawn from the plan's own mechanisms (``release._additive``),
many times at once.

Each release is reduced to the log-likelihood-ratio statistic of the two Gaussian laws,
``T = Σ_i (c'_i − c_i)·(y_i − (c_i + c'_i)/2)/σ_i²`` — a post-processing, so ρ-zCDP bounds the
Rényi divergences of every event on it. :func:`deniable.audit.estimate_rho` turns the samples
into a lower confidence bound on ρ from the events' binary Rényi divergences (exact
Clopper–Pearson bounds, Bonferroni over the tested events) at ``alpha = 1e-7``: an honest
pipeline exceeds the charged ρ with probability below 1e-7, whatever the noise's law.

Negative controls, fed to the same check and required to be refuted: (a) half the noise
(``σ/2``, i.e. 4ρ), and (b) contribution bounding switched off for ``D'`` (the SQL computed
with ``max_groups = 5, max_rows = 20`` while the noise is calibrated for 2 and 3).
Measured at ρ = ½: the intruder's shift gives μ²/2 = 0.49999986 (the worst case the noise is
calibrated for); lower bounds 0.32 for the honest pipeline, 1.28 and 0.88 for the controls.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from deniable.accounting.loss import Rho
from deniable.audit import estimate_rho
from deniable.curator.session import Session
from deniable.noise.testing import SeededRandom
from deniable.query.plan import DPPlan, Measure
from deniable.query.release import ExactAggregates, _additive
from deniable.query.testing import exact_aggregates

pytestmark = pytest.mark.stats

N = 200_000
RHO = Fraction(1, 2)
ALPHA = 1e-7
CATS = ["a", "b", "c", "d", "e"]
QUERY = "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k"


def _data(with_intruder: bool) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows = [
        (f"u{u}", CATS[int(rng.integers(0, 5))], float(rng.uniform(0, 100)))
        for u in range(120)
        for _ in range(int(rng.integers(1, 6)))
    ]
    if with_intruder:
        rows += [("intruder", k, 1e9) for k in CATS for _ in range(20)]
    return pd.DataFrame(rows, columns=["uid", "k", "x"])


def _exact(tmp: Path, df: pd.DataFrame, **caps: int) -> tuple[DPPlan, ExactAggregates]:
    s = Session(budget=Rho(rho=10), ledger=tmp / "ledger.db")
    s.add_table(
        "t",
        df,
        privacy_unit="uid",
        bounds={"x": (0, 100)},
        max_groups=2,
        max_rows=3,
        public_keys={"k": CATS},
    )
    plan, _, exact = exact_aggregates(s, QUERY, not_private=True, rho=RHO, **caps)
    s.close()
    return plan, exact


def _vector(plan: DPPlan, exact: ExactAggregates, m: Measure) -> npt.NDArray[np.int64]:
    index = {k: i for i, k in enumerate(exact.keys)}
    values = np.array(
        [exact.measures[m.id][index[k]] if k in index else 0 for k in plan.public_domain or []],
        dtype=np.int64,
    )
    return m.coarsen(values)


def _sigma2(m: Measure) -> float:
    return float(Fraction(m.sensitivity) ** 2 / (2 * m.budget))


def _samples(plan: DPPlan, exact: ExactAggregates, ref: list, seed: int, *, noise_factor: int = 1):
    """N releases reduced to the Gaussian log-likelihood-ratio statistic against ``ref``."""
    t = np.zeros(N)
    for j, (m, (c, c2)) in enumerate(zip(plan.measures, ref, strict=True)):
        x = np.tile(_vector(plan, exact, m), N)
        noisy = dataclasses.replace(m, budget=m.budget * noise_factor**2)
        y = _additive(noisy, x, SeededRandom(100 * seed + j)).value.reshape(N, -1)
        diff = (c2 - c).astype(np.float64)
        t += ((y - (c + c2) / 2.0) * diff).sum(axis=1) / _sigma2(m)
    return t


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    plan, d = _exact(tmp_path_factory.mktemp("d"), _data(False))
    _, d2 = _exact(tmp_path_factory.mktemp("d2"), _data(True))
    _, d2_unbounded = _exact(tmp_path_factory.mktemp("d3"), _data(True), max_groups=5, max_rows=20)
    ref = [(_vector(plan, d, m), _vector(plan, d2, m)) for m in plan.measures]
    return plan, d, d2, d2_unbounded, ref


def test_the_plan_is_gaussian_and_charges_rho(answers) -> None:  # type: ignore[no-untyped-def]
    plan, *_ = answers
    assert plan.loss == Rho(rho=RHO)
    assert {m.mechanism for m in plan.measures} == {"discrete_gaussian"}
    assert sum(m.budget for m in plan.measures) == RHO


def test_the_intruder_moves_the_answer_by_the_full_sensitivity(answers) -> None:  # type: ignore[no-untyped-def]
    plan, _, _, _, ref = answers
    # The intruder reaches max_groups = 2 partitions with max_rows = 3 rows each.
    count, total = plan.measures
    shift_n = ref[0][1] - ref[0][0]
    assert sorted(shift_n.tolist()) == [0, 0, 0, 3, 3]
    assert float(np.sqrt((shift_n.astype(float) ** 2).sum())) <= float(count.sensitivity)
    shift_s = (ref[1][1] - ref[1][0]).astype(float)
    # Each touched partition moves by (almost) 3·100 in sum units: the L2 shift is close to
    # the sensitivity the noise is calibrated for (√2·Δ_p, up to the row-rounding slack).
    assert (
        0.99 * float(total.sensitivity) <= np.sqrt((shift_s**2).sum()) <= float(total.sensitivity)
    )
    # So the Rényi divergence of the whole release is close to the charged ρ: μ²/2 ≈ ρ.
    mu2 = sum(
        float(((c2 - c).astype(float) ** 2).sum()) / _sigma2(m)
        for m, (c, c2) in zip(plan.measures, ref, strict=True)
    )
    assert 0.97 * float(RHO) <= mu2 / 2 <= float(RHO)


def test_empirical_rho_within_the_charged_loss(answers) -> None:  # type: ignore[no-untyped-def]
    plan, d, d2, _, ref = answers
    est = estimate_rho(_samples(plan, d, ref, 1), _samples(plan, d2, ref, 2), alpha=ALPHA)
    assert est.passes(float(RHO)), est
    assert est.lower > 0.25 * float(RHO)  # the test has power


def test_control_half_the_noise_is_refuted(answers) -> None:  # type: ignore[no-untyped-def]
    plan, d, d2, _, ref = answers
    est = estimate_rho(
        _samples(plan, d, ref, 3, noise_factor=2),
        _samples(plan, d2, ref, 4, noise_factor=2),
        alpha=ALPHA,
    )
    assert est.refutes(float(RHO)), est


def test_control_without_contribution_bounds_is_refuted(answers) -> None:  # type: ignore[no-untyped-def]
    plan, d, _, d2_unbounded, ref = answers
    est = estimate_rho(_samples(plan, d, ref, 5), _samples(plan, d2_unbounded, ref, 6), alpha=ALPHA)
    assert est.refutes(float(RHO)), est

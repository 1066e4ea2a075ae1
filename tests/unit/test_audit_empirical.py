"""The empirical privacy-loss estimator: its bounds, its validity, its power, its errors.

Synthetic samples come from numpy's seeded generator (tests only: these are inputs to the
estimator, not releases), so every test here is deterministic.
"""

from __future__ import annotations

import doctest
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import optimize, stats

import deniable.audit.empirical as empirical
from deniable.audit import (
    Event,
    audit_epsilon,
    audit_rho,
    binary_renyi,
    estimate_epsilon,
    estimate_rho,
    renyi_rho,
)
from deniable.errors import InvalidParameter
from deniable.local.intervals import clopper_pearson


def _two_sided_geometric(
    rng: np.random.Generator, n: int, eps: float, shift: int = 0
) -> npt.NDArray[np.int64]:
    """Discrete Laplace with scale 1/ε (difference of two geometrics), plus ``shift``."""
    p = -math.expm1(-eps)
    return (rng.geometric(p, n) - rng.geometric(p, n) + shift).astype(np.int64)


# ----------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize(
    ("k", "n"),
    [(0, 10), (1, 10), (10, 10), (3, 1_000_000), (300_000, 1_000_000), (999, 1000), (50, 200)],
)
@pytest.mark.parametrize("beta", [1e-3, 1e-9])
def test_one_sided_clopper_pearson_matches_scipy(k: int, n: int, beta: float) -> None:
    lo = empirical.clopper_pearson_lower(k, n, beta)
    hi = empirical.clopper_pearson_upper(k, n, beta)
    ref_lo = 0.0 if k == 0 else float(stats.beta.ppf(beta, k, n - k + 1))
    ref_hi = 1.0 if k == n else float(stats.beta.isf(beta, k + 1, n - k))
    # Conservative (never inside the exact bound by more than float noise) and close to it.
    assert lo <= ref_lo * (1 + 1e-6) + 1e-15
    assert hi >= ref_hi * (1 - 1e-6) - 1e-15
    assert lo == pytest.approx(ref_lo, rel=1e-4, abs=1e-10)
    assert hi == pytest.approx(ref_hi, rel=1e-4, abs=1e-10)


@pytest.mark.parametrize(
    ("p", "q", "order"), [(0.5, 0.25, 2.0), (0.01, 0.001, 6.0), (0.9, 0.2, 1.5), (1.0, 0.5, 3.0)]
)
def test_binary_renyi_matches_its_definition(p: float, q: float, order: float) -> None:
    direct = math.log(p**order * q ** (1 - order) + (1 - p) ** order * (1 - q) ** (1 - order))
    assert binary_renyi(p, q, order) == pytest.approx(direct / (order - 1), rel=1e-12)


@pytest.mark.parametrize(("p", "q"), [(0.5, 0.25), (0.01, 0.0012), (0.3, 0.29), (0.99, 0.5)])
def test_renyi_rho_is_the_sup_over_orders(p: float, q: float) -> None:
    def neg(order: float) -> float:
        return -binary_renyi(p, q, order) / order

    best = optimize.minimize_scalar(
        neg, bounds=(1.0001, 5000), method="bounded", options={"xatol": 1e-10}
    )
    kl = p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))  # the limit λ → 1
    sup = max(-best.fun, kl)
    # The grid sup is a valid (≤) lower bound and loses almost nothing.
    assert renyi_rho(p, q) <= sup * (1 + 1e-9)
    assert renyi_rho(p, q) == pytest.approx(sup, rel=1e-4)


def test_renyi_rho_edge_cases() -> None:
    assert renyi_rho(0.2, 0.3) == 0.0
    assert renyi_rho(0.2, 0.0) == math.inf
    with pytest.raises(InvalidParameter):
        renyi_rho(1.2, 0.3)
    with pytest.raises(InvalidParameter):
        binary_renyi(0.5, 0.4, 1.0)


def test_gaussian_rho_is_recovered_from_a_threshold_event() -> None:
    # For N(0, σ²) vs N(1, σ²), ρ = 1/(2σ²); one threshold event shows ~80% of it.
    sigma = 2.0
    t = -4.65
    p, q = stats.norm.cdf(t / sigma), stats.norm.cdf((t - 1) / sigma)
    assert 0.75 * 0.125 < renyi_rho(float(p), float(q)) <= 0.125


def test_cells_merge_rare_values_and_reach_both_tails() -> None:
    pooled = np.array([0] * 50 + [1] * 100 + [2] * 5 + [3] * 5 + [7] * 100 + [9] * 3, float)
    cells = empirical._cells(pooled, 40)
    assert cells.edges.tolist() == [0.0, 1.0]  # {…0}, {1}, {2, 3, 7, 9…}: the rest merges
    assert cells.counts(pooled).tolist() == [50, 100, 113]
    assert cells.name(0, 0) == "x ≤ 0"
    assert cells.name(1, 1) == "0 < x ≤ 1"
    assert cells.name(2, 2) == "x > 1"
    assert len(empirical._ranges(4)) == 4 + 3 + 3 - 2  # cells, prefixes, suffixes; no dupes


# ----------------------------------------------------------------------------- estimator


def test_bound_is_computed_from_exact_clopper_pearson_with_bonferroni() -> None:
    rng = np.random.default_rng(1)
    a = _two_sided_geometric(rng, 5000, 1.0)
    b = _two_sided_geometric(rng, 5000, 1.0, shift=1)
    ev = [Event("x ≤ 0", lambda x: x <= 0)]
    est = estimate_epsilon(a, b, alpha=1e-3, events=ev)
    assert [e.direction for e in est.events] == ["a/b", "b/a"]
    ca, cb = int((a <= 0).sum()), int((b <= 0).sum())
    beta = 1e-3 / 4  # 2 pairs × 2 one-sided bounds
    lo_a = clopper_pearson(ca, 5000, 1 - 2 * beta)[0]
    hi_b = clopper_pearson(cb, 5000, 1 - 2 * beta)[1]
    ab = next(e for e in est.events if e.direction == "a/b")
    assert (ab.count_a, ab.count_b) == (ca, cb)
    assert ab.lower == pytest.approx(math.log(lo_a / hi_b), rel=1e-9)
    assert ab.point == pytest.approx(math.log(ca / cb), rel=1e-12)
    assert est.lower == max(0.0, max(e.lower for e in est.events))


def test_delta_is_subtracted_from_the_numerator() -> None:
    rng = np.random.default_rng(2)
    a = _two_sided_geometric(rng, 20000, 1.0)
    b = _two_sided_geometric(rng, 20000, 1.0, shift=1)
    ev = [Event("x ≤ 0", lambda x: x <= 0)]
    plain = estimate_epsilon(a, b, events=ev)
    with_delta = estimate_epsilon(a, b, events=ev, delta=0.1)
    assert with_delta.lower < plain.lower
    assert with_delta.delta == 0.1


def test_selection_split_keeps_test_counts_independent() -> None:
    rng = np.random.default_rng(3)
    a = _two_sided_geometric(rng, 10000, 1.0)
    b = _two_sided_geometric(rng, 10000, 1.0, shift=1)
    est = estimate_epsilon(a, b, selection_fraction=0.25, max_events=5)
    assert 0 < len(est.events) <= 5
    assert {(e.n_a, e.n_b) for e in est.events} == {(7500, 7500)}
    # The counts are those of the test part only.
    for e in est.events:
        assert e.count_a <= 7500 and e.count_b <= 7500


def test_identical_distributions_show_nothing() -> None:
    rng = np.random.default_rng(4)
    est = estimate_epsilon(
        _two_sided_geometric(rng, 50_000, 0.5), _two_sided_geometric(rng, 50_000, 0.5)
    )
    assert est.lower == 0.0
    assert est.passes(0.0)
    est = estimate_rho(
        _two_sided_geometric(rng, 50_000, 0.5), _two_sided_geometric(rng, 50_000, 0.5)
    )
    assert est.lower == 0.0


def test_lower_bound_is_valid_over_many_repetitions() -> None:
    # Validity of the guarantee at a level we can observe: at alpha = 0.05, a pair whose
    # largest log-ratio is exactly ε₀ = 1 must be over-estimated in at most 5% of runs. With
    # 100 runs, P[Bin(100, 0.05) ≥ 16] < 1e-3 — and thanks to Bonferroni the real rate is
    # far lower (typically 0).
    rng = np.random.default_rng(5)
    over = 0
    for _ in range(100):
        est = estimate_epsilon(
            _two_sided_geometric(rng, 4000, 1.0),
            _two_sided_geometric(rng, 4000, 1.0, shift=1),
            alpha=0.05,
        )
        over += est.refutes(1.0)
    assert stats.binom.sf(15, 100, 0.05) < 1e-3
    assert over < 16, over


def test_rho_lower_bound_is_valid_over_many_repetitions() -> None:
    # Same for ρ: Gaussian noise σ = 2 on 0 vs 1 has ρ = 1/8 (rounded to integers it is the
    # post-processing of a 1/8-zCDP release, so its true ρ is at most 1/8).
    rng = np.random.default_rng(6)
    over = 0
    for _ in range(100):
        a = np.rint(rng.normal(0.0, 2.0, 4000))
        b = np.rint(rng.normal(1.0, 2.0, 4000))
        over += estimate_rho(a, b, alpha=0.05).refutes(0.125)
    assert over < 16, over  # P[Bin(100, 0.05) ≥ 16] < 1e-3


def test_negative_control_of_the_estimator() -> None:
    # A pair with log-ratio 2 is refuted at claim 1, at the test's own alpha (1e-7).
    rng = np.random.default_rng(7)
    est = estimate_epsilon(
        _two_sided_geometric(rng, 50_000, 2.0), _two_sided_geometric(rng, 50_000, 2.0, shift=1)
    )
    assert est.refutes(1.0), est.lower
    assert est.lower <= 2.0
    est = estimate_rho(np.rint(rng.normal(0, 1.0, 100_000)), np.rint(rng.normal(1, 1.0, 100_000)))
    assert est.refutes(0.125), est.lower  # true ρ ≤ 0.5


def test_real_valued_samples_are_binned() -> None:
    rng = np.random.default_rng(8)
    a = rng.laplace(0.0, 1.0, 40_000)
    b = rng.laplace(1.0, 1.0, 40_000)
    est = estimate_epsilon(a, b)
    assert 0.5 < est.lower <= 1.0
    assert est.events and all(e.event.count("x") == 1 for e in est.events)


def test_boolean_samples() -> None:
    rng = np.random.default_rng(9)
    a = rng.random(50_000) < 0.75
    b = rng.random(50_000) < 0.25
    est = estimate_epsilon(a, b)
    assert 0.8 < est.lower <= math.log(3)
    assert est.events[0].event in ("x ≤ 0", "x > 0")


def test_no_usable_event_gives_zero() -> None:
    est = estimate_epsilon(np.zeros(100), np.zeros(100))
    assert est.lower == 0.0 and est.events == ()


def test_audit_draws_from_the_samplers() -> None:
    rng = np.random.default_rng(10)
    seen: list[int] = []

    def sampler(shift: int) -> Any:
        def draw(n: int) -> npt.NDArray[np.int64]:
            seen.append(n)
            return _two_sided_geometric(rng, n, 1.0, shift)

        return draw

    est = audit_epsilon(sampler(0), sampler(1), n=20_000)
    assert seen == [20_000, 20_000]
    assert est.passes(1.0) and est.lower > 0.5
    assert audit_rho(sampler(0), sampler(1), n=20_000).lower > 0


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs",
    [
        {"alpha": 0},
        {"alpha": 0.5},
        {"alpha": float("nan")},
        {"delta": -0.1},
        {"delta": 1.0},
        {"min_count": 0},
        {"max_events": 0},
        {"selection_fraction": 0.0},
        {"selection_fraction": 1.0},
        {"max_cells": 1},
        {"events": []},
    ],
    ids=repr,
)
def test_bad_options_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidParameter):
        estimate_epsilon(np.arange(100), np.arange(100), **kwargs)


@pytest.mark.parametrize(
    "sample",
    [np.array(["a", "b"]), np.array([1.0, np.nan]), np.array([1.0, np.inf]), np.array([2**60, 0])],
    ids=repr,
)
def test_bad_samples_are_refused(sample: npt.NDArray[Any]) -> None:
    with pytest.raises(InvalidParameter):
        estimate_epsilon(sample, np.arange(2))


def test_too_small_samples_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        estimate_epsilon(np.arange(3), np.arange(3))


def test_bad_events_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        estimate_epsilon(np.arange(10), np.arange(10), events=[lambda x: x > 1])  # type: ignore[list-item]
    with pytest.raises(InvalidParameter):
        estimate_epsilon(
            np.arange(10), np.arange(10), events=[Event("bad", lambda x: np.ones(3, dtype=bool))]
        )
    with pytest.raises(InvalidParameter):
        estimate_epsilon(np.arange(10), np.arange(10), events=[Event("int", lambda x: x)])


def test_bad_samplers_are_refused() -> None:
    with pytest.raises(InvalidParameter):
        audit_epsilon(lambda n: np.zeros(n - 1), lambda n: np.zeros(n), n=100)
    with pytest.raises(InvalidParameter):
        audit_epsilon(lambda n: np.zeros(n), lambda n: np.zeros(n), n=1)


def test_module_examples_run() -> None:
    # The docstring examples (doctests are not collected by default): seeded except one
    # audit on the secure source, which fails only with probability 1e-7 (its alpha).
    result = doctest.testmod(empirical, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0

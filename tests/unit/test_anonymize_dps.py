"""d(k, β, ε) of Li–Qardaji–Su Theorem 3.9, its inverses and the guarantees built on it."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import binom

from deniable.anonymize import dps
from deniable.anonymize.dps import (
    amplified_epsilon,
    dps_delta,
    dps_search,
    epsilon_for,
    epsilon_safe_guarantee,
    log_dps_delta,
    min_epsilon,
    smallest_k,
    strongly_safe_guarantee,
)
from deniable.errors import InvalidParameter


def brute_force(k: int, beta: float, epsilon: float, n_max: int) -> tuple[float, int]:
    """max over 1 ≤ n < n_max of P[Bin(n, β) ≥ max(k, ⌊γn⌋ + 1)], straight from the text."""
    g = (math.exp(epsilon) - 1 + beta) / math.exp(epsilon)
    best, where = 0.0, 0
    for n in range(1, n_max):
        threshold = max(k, math.floor(g * n) + 1)
        value = float(binom.sf(threshold - 1, n, beta))
        if value > best:
            best, where = value, n
    return best, where


def paper_form(k: int, beta: float, epsilon: float, n_max: int) -> float:
    """The paper's own form: max over n ≥ n_m = ⌈k/γ − 1⌉ of Σ_{γn < j ≤ n} f(j; n, β)."""
    g = (math.exp(epsilon) - 1 + beta) / math.exp(epsilon)
    n_m = math.ceil(k / g - 1)
    return max(float(binom.sf(math.floor(g * n), n, beta)) for n in range(n_m, max(n_max, n_m + 1)))


GRID = [
    (2, 0.1, None),
    (2, 0.5, 0.75),
    (3, 0.5, 0.75),
    (5, 0.3, 1.0),  # maximum at n = 8, not at n_m = 6
    (13, 0.5, 2.0),  # maximum at n = 15, 4 times the value at n_m = 13
    (23, 0.7, 2.0),  # maximum at n = 25, 5.7 times the value at n_m = 23
    (7, 0.7, None),
    (8, 0.3, 1.0),
    (10, 0.1, 1.0),
    (10, 0.5, 1.0),
    (20, 0.2, 0.5),
    (25, 0.05, 0.3),
    (40, 0.25, 0.9),
]


def _eps(beta: float, eps: float | None) -> float:
    return min_epsilon(beta) if eps is None else eps


@pytest.mark.parametrize(("k", "beta", "eps"), GRID)
def test_equals_brute_force_sum(k: int, beta: float, eps: float | None) -> None:
    e = _eps(beta, eps)
    s = dps_search(k, beta=beta, epsilon=e)
    expected, where = brute_force(k, beta, e, n_max=max(600, 4 * s.n_star))
    assert s.delta == pytest.approx(expected, rel=1e-8)
    assert s.delta >= expected * (1 - 1e-12)  # an upper bound, never below
    assert s.n_star == where
    assert paper_form(k, beta, e, n_max=max(600, 4 * s.n_star)) == pytest.approx(
        expected, rel=1e-12
    )


def test_maximum_is_not_always_at_the_smallest_n() -> None:
    off = [
        (k, b, e)
        for k, b, e in [(5, 0.3, 1.0), (8, 0.3, 1.0), (9, 0.5, 0.75), (13, 0.5, 2.0)]
        if dps_search(k, beta=b, epsilon=e).n_star != dps_search(k, beta=b, epsilon=e).n_min
    ]
    assert len(off) == 4
    s = dps_search(23, beta=0.7, epsilon=2.0)
    assert (s.n_min, s.n_star) == (23, 25)
    # Stopping at n_m would underestimate δ more than five-fold.
    at_nmin = float(binom.sf(22, 23, 0.7))
    assert s.delta > 5 * at_nmin


def test_exact_rationals_on_a_tiny_case() -> None:
    # β = 1/2, ε = ln 3: γ = (3 − 1 + 1/2)/3 = 5/6 exactly. Thresholds from the exact γ,
    # binomial terms as Fractions; γn is an integer for n = 6, 12, …, where the float
    # implementation may count the boundary term (the safe side) — it must not matter here.
    k, gam = 3, Fraction(5, 6)
    best = Fraction(0)
    for n in range(1, 200):
        t = max(k, math.floor(gam * n) + 1)
        best = max(
            best, sum((Fraction(math.comb(n, j), 2**n) for j in range(t, n + 1)), Fraction(0))
        )
    got = dps_delta(k, beta=0.5, epsilon=math.log(3))
    assert best == Fraction(1, 8)
    assert float(best) <= got <= float(best) * (1 + 1e-9)


def test_monotone_in_k() -> None:
    for beta, eps in [(0.1, 1.0), (0.3, 0.5), (0.5, 1.0), (0.05, None), (0.8, 2.0)]:
        e = _eps(beta, eps)
        values = [log_dps_delta(k, beta=beta, epsilon=e) for k in range(2, 80)]
        assert all(b <= a for a, b in itertools.pairwise(values)), (beta, e)
        assert values[-1] < values[0]


def test_monotone_in_epsilon() -> None:
    for k in (2, 5, 10, 30):
        for beta in (0.05, 0.2, 0.5):
            lo = min_epsilon(beta)
            es = [lo + i * (3.0 - lo) / 60 for i in range(61)]
            values = [log_dps_delta(k, beta=beta, epsilon=e) for e in es]
            assert all(b <= a for a, b in itertools.pairwise(values)), (k, beta)


def test_smaller_with_smaller_beta_at_the_papers_scale() -> None:
    # The paper (Table 2, Figure 3) states δ shrinks as β shrinks; it holds when β halves.
    for k in range(2, 60):
        for eps in (0.5, 1.0, 2.0):
            betas = [b for b in (0.0125, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8) if min_epsilon(b) <= eps]
            values = [log_dps_delta(k, beta=b, epsilon=eps) for b in betas]
            assert all(a <= b for a, b in itertools.pairwise(values)), (k, eps)


def test_not_monotone_in_beta_at_fine_scale() -> None:
    # Discreteness: d(2, 0.3, 0.75) < d(2, 0.2, 0.75). Checked by brute force, so this is
    # the function, not a bug: a sampler must use exactly the β the guarantee names.
    a = dps_delta(2, beta=0.2, epsilon=0.75)
    b = dps_delta(2, beta=0.3, epsilon=0.75)
    assert b < a
    assert a == pytest.approx(brute_force(2, 0.2, 0.75, 400)[0], rel=1e-8)
    assert b == pytest.approx(brute_force(2, 0.3, 0.75, 400)[0], rel=1e-8)


def test_log_space_for_large_k_and_speed_bound() -> None:
    s = dps_search(10_000, beta=0.1, epsilon=1.0)
    assert -20_000 < s.log_delta < -10_000
    assert s.delta == 5e-324  # underflows: reported as the smallest positive double
    assert s.candidates < 100
    s2 = dps_search(10_000, beta=0.001, epsilon=min_epsilon(0.001))
    assert s2.log_delta < -1000 and s2.candidates < 200


def test_stopping_rule_matches_a_long_scan() -> None:
    # Near the domain's edge KL(γ‖β) is small and the maximum sits far beyond n_m.
    for k, beta in [(3, 0.05), (6, 0.02), (2, 0.3)]:
        e = min_epsilon(beta)
        s = dps_search(k, beta=beta, epsilon=e)
        expected, _ = brute_force(k, beta, e, n_max=max(3000, 10 * s.n_star))
        assert s.delta == pytest.approx(expected, rel=1e-8)


def test_tail_sum_is_exact_against_scipy() -> None:
    for n, t, beta in [(10, 5, 0.3), (1000, 400, 0.2), (50_000, 20_000, 0.3), (7, 7, 0.9)]:
        got = dps._log_binom_tail(n, t, beta)
        want = float(logsumexp(binom.logpmf(np.arange(t, n + 1), n, beta)))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert got >= want - 1e-12


def test_smallest_k() -> None:
    for beta, eps, delta in [(0.1, 1.0, 1e-6), (0.3, 0.7, 1e-4), (0.05, 0.2, 1e-9)]:
        k = smallest_k(beta=beta, epsilon=eps, delta=delta)
        assert dps_delta(k, beta=beta, epsilon=eps) <= delta
        if k > 2:
            assert dps_delta(k - 1, beta=beta, epsilon=eps) > delta


def test_epsilon_for() -> None:
    for k, beta, delta in [(10, 0.1, 1e-6), (5, 0.3, 3e-3), (50, 0.2, 1e-12)]:
        e = epsilon_for(k, beta=beta, delta=delta)
        assert e >= min_epsilon(beta)
        assert dps_delta(k, beta=beta, epsilon=e) <= delta
        if e > min_epsilon(beta):
            assert dps_delta(k, beta=beta, epsilon=e * (1 - 1e-6)) > delta
    assert epsilon_for(20, beta=0.1, delta=0.5) == min_epsilon(0.1)


def test_epsilon_for_refuses_delta_below_beta_to_the_k() -> None:
    with pytest.raises(InvalidParameter, match="β\\^k"):
        epsilon_for(5, beta=0.3, delta=1e-6)
    assert dps_delta(5, beta=0.3, epsilon=30.0) == pytest.approx(0.3**5, rel=1e-9)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 1, "beta": 0.1, "epsilon": 1.0}, "k must be ≥ 2"),
        ({"k": 10, "beta": 0.0, "epsilon": 1.0}, "in \\(0, 1\\)"),
        ({"k": 10, "beta": 1.0, "epsilon": 1.0}, "in \\(0, 1\\)"),
        ({"k": 10, "beta": 0.5, "epsilon": 0.5}, "−ln\\(1 − β\\)"),
        ({"k": 10, "beta": 0.1, "epsilon": float("nan")}, "finite"),
        ({"k": True, "beta": 0.1, "epsilon": 1.0}, "integer"),
    ],
)
def test_refuses_outside_the_theorems_domain(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InvalidParameter, match=match):
        dps_delta(**kwargs)  # type: ignore[arg-type]


def test_domain_edge_is_allowed() -> None:
    assert 0 < dps_delta(10, beta=0.5, epsilon=min_epsilon(0.5)) < 1


def test_guarantees() -> None:
    g = strongly_safe_guarantee(10, beta=0.1, epsilon=1.0)
    assert g.delta == dps_delta(10, beta=0.1, epsilon=1.0)
    assert g.epsilon_selection == 0 and g.loss().epsilon == Fraction(1)
    h = strongly_safe_guarantee(10, beta=0.1, delta=1e-6)
    assert h.delta <= 1e-6 and h.epsilon == epsilon_for(10, beta=0.1, delta=1e-6)
    e1 = amplified_epsilon(1.0, 0.1)
    assert e1 == pytest.approx(math.log(1 + 0.1 * (math.e - 1)), rel=1e-11)
    assert e1 >= math.log1p(0.1 * math.expm1(1.0))
    s = epsilon_safe_guarantee(10, beta=0.1, selection_epsilon=e1, epsilon=1.0)
    assert s.epsilon == pytest.approx(1.0 + e1) and s.delta == g.delta
    assert "3.11" in s.theorem and "3.9" in g.theorem
    with pytest.raises(InvalidParameter, match="exactly one"):
        strongly_safe_guarantee(10, beta=0.1)
    with pytest.raises(InvalidParameter, match="exactly one"):
        strongly_safe_guarantee(10, beta=0.1, epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidParameter):
        epsilon_safe_guarantee(10, beta=0.1, selection_epsilon=-1.0, epsilon=1.0)

"""Membership inference on a histogram: unsafe systems fall; deniable stays under the ε bound.

Threshold: the 2000 trials are independent, each a success with probability at most
e^ε/(1 + e^ε) if deniable's release is ε-DP; :func:`holds` rejects only if the one-sided
Clopper–Pearson lower bound at 1e-7 exceeds it, so it fails by chance with probability
≤ 1e-7. Negative control: the same test on a release at 2ε claimed as ε (success
e²/(1 + e²) ≈ 0.881; the CP lower bound at 2000 trials is then ≈ 0.84 > 0.731) must reject.
"""

from __future__ import annotations

from deniable.attacks.membership import holds, run_membership


def test_unsafe_systems_fall_and_deniable_holds() -> None:
    report = run_membership(trials=2000, seed=None)
    exact, averaged, deniable = report.runs
    assert exact.success_rate == 1.0
    assert averaged.success_rate > 0.9  # 25 answers at b = 1 averaged (seeded: deterministic)
    assert deniable.stopped_by == "budget" and deniable.epsilon_spent == 1.0
    assert sum(s.cached for s in deniable.steps) == 24
    assert holds(deniable)


def test_negative_control_double_epsilon_is_caught() -> None:
    report = run_membership(trials=2000, seed=None, cheat=2.0)
    assert not holds(report.runs[-1])


def test_a_rate_above_the_bound_by_sampling_noise_says_so() -> None:
    """74.9% beside "no attacker can exceed 73.1%" read as a leak (issue 23)."""
    from dataclasses import replace

    from deniable.attacks.membership import MembershipReport, MembershipRun

    run = MembershipRun("deniable", True, 2000, 1498, 0.749, (0.729, 0.768), 1.0, 0.731, "budget")
    text = MembershipReport(0.5, 2000, 20, (run,)).text()
    assert "73.1%" in text and "sampling noise" in text and "72.9%–76.8%" in text
    leak = replace(run, successes=1700, success_rate=0.85, interval=(0.83, 0.87))
    assert "does not hold" in MembershipReport(0.5, 2000, 20, (leak,)).text()
    below = replace(run, successes=1300, success_rate=0.65, interval=(0.63, 0.67))
    assert "sampling noise" not in MembershipReport(0.5, 2000, 20, (below,)).text()

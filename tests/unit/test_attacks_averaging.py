"""The averaging attack breaks the unsafe fresh-noise system and is stopped by deniable.

Thresholds. Unsafe fresh noise at scale b = 2, 1000 answers: each answer's log-likelihood
ratio for the truth is ±1/b = ±0.5, with mean (1 − α)/((1 + α)b) = 0.1225 (α = e^(−1/2)), so
by Hoeffding the total is below 122.5 − 89.8 = 32.7 with probability ≤ e^(−2·89.8²/1000)
< 1e-7; the posterior on the truth is then ≥ 1 − e^(−32.7) > 1 − 1e-12, the threshold. (The
data and unsafe noise are seeded anyway, so this run is deterministic.) Deniable: the
attacker's exact Bayesian posterior lies within the bounds at the charged ε with probability
1 (each answer's likelihood ratio is at most e^ε), so that check cannot fail by chance.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from deniable.attacks.averaging import AveragingReport, AveragingRun, run_averaging


@pytest.fixture(scope="module", params=[0, 1])
def report(request: pytest.FixtureRequest) -> AveragingReport:
    return run_averaging(target_secret=request.param, budget=1, epsilon=Fraction(1, 10))


def _run(report: AveragingReport, name: str) -> AveragingRun:
    return next(r for r in report.runs if name in r.system)


def test_the_unsafe_systems_fall(report: AveragingReport) -> None:
    truth = report.truth
    for name in ("exact", "fresh noise"):
        run = _run(report, name)
        on_truth = run.posterior if truth == 1 else 1 - run.posterior
        assert on_truth > 1 - 1e-12, name
    # sticky noise: a repeat gives the same answer, so 1000 repeats teach what 1 did
    sticky = _run(report, "sticky")
    assert len({s.answer for s in sticky.steps}) == 1
    assert sticky.steps[0].posterior == sticky.posterior


def test_deniable_holds(report: AveragingReport) -> None:
    run = _run(report, "deniable")
    # the cache: 19 repeats after the first answer are free replays of the same value
    repeats = run.steps[:20]
    assert [s.cached for s in repeats] == [False] + [True] * 19
    assert {s.answer for s in repeats} == {repeats[0].answer}
    assert all(s.cost == 0 for s in repeats[1:])
    # the budget: 10 charged answers of ε = 0.1, then a refusal
    assert run.charged == 10 and run.stopped_by == "budget"
    assert run.steps[-1].stopped == "budget"
    assert run.epsilon_spent == pytest.approx(1.0)
    assert run.bound is not None
    low, high = run.bound
    assert (low, high) == pytest.approx((0.2689414, 0.7310586))
    for step in run.steps:
        assert step.posterior is not None
        assert low - 1e-12 <= step.posterior <= high + 1e-12


def test_negative_control_the_bound_check_rejects_the_unsafe_run(report: AveragingReport) -> None:
    bound = _run(report, "deniable").bound
    assert bound is not None
    low, high = bound
    fresh = _run(report, "fresh noise")
    assert not low <= fresh.posterior <= high


def test_text_names_where_deniable_stopped(report: AveragingReport) -> None:
    text = report.text()
    assert "budget refused" in text and "cache" in text and "FELL" in text

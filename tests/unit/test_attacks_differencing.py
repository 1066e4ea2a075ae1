"""The differencing attack breaks exact answers and sticky noise (by rewrites); deniable holds.

Thresholds: the unsafe runs are deterministic (seeded data and sticky noise); their
posteriors on the truth are within 1e-9 of certainty while the threshold is 0.999. Deniable's
posterior lies in the bounds at the charged ε with probability 1: every answer's likelihood
ratio for the bit is at most e^ε whatever the others' count, and mixing over that count
keeps the bound.
"""

from __future__ import annotations

import pytest

from deniable.attacks.differencing import DifferencingReport, DifferencingRun, run_differencing


@pytest.fixture(scope="module")
def report() -> DifferencingReport:
    return run_differencing(rewrites=400, repeats=30)


def _on_truth(report: DifferencingReport, run: DifferencingRun) -> float:
    return run.posterior if report.truth == 1 else 1 - run.posterior


def test_exact_answers_and_sticky_rewrites_fall(report: DifferencingReport) -> None:
    exact, repeated, rewritten, _ = report.runs
    assert "exact" in exact.system and _on_truth(report, exact) == 1.0
    assert "repeated" in repeated.system and _on_truth(report, repeated) < 0.9
    assert "rewrites" in rewritten.system and _on_truth(report, rewritten) > 0.999


def test_deniable_holds(report: DifferencingReport) -> None:
    run = report.runs[-1]
    assert run.safe and run.stopped_by == "budget" and run.charged == 10
    assert run.cached == 2 * 30 - 2  # repeats of the pair are replayed free
    assert run.bound is not None
    low, high = run.bound
    assert all(low - 1e-12 <= (s.posterior or -1) <= high + 1e-12 for s in run.steps)
    # negative control: the same check rejects the sticky system under rewrites
    assert not low <= report.runs[2].posterior <= high

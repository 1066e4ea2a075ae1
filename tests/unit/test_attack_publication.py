"""The publication attack: a de-identified table leaks; the two deniable releases are bounded."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from deniable.attacks import ATTACKS, plot, render, to_json
from deniable.attacks.publication import run_publication
from deniable.errors import InvalidParameter


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    return run_publication(trials=6, size=400, seed=3)


def test_the_de_identified_table_gives_the_target_away(report) -> None:  # type: ignore[no-untyped-def]
    raw_membership, raw_linkage = report.membership[0], report.linkage[0]
    assert not raw_membership.safe and raw_membership.success_rate == 1.0
    assert raw_linkage.named_present == raw_linkage.present > 0
    assert raw_linkage.named_absent == 0


def test_both_deniable_releases_carry_the_same_guarantee(report) -> None:  # type: ignore[no-untyped-def]
    assert [r.system for r in report.membership[1:]] == [
        "deniable: safe k-anonymization",
        "deniable: synthetic data (MST)",
    ]
    bound = (math.exp(report.epsilon) + report.delta) / (1 + math.exp(report.epsilon))
    for run in report.membership[1:]:
        assert run.safe and run.epsilon_spent == report.epsilon
        assert run.bound == pytest.approx(bound)
    assert 0 < report.delta < 0.01


def test_the_report_renders_plots_and_serialises(report, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = render(report)
    assert "Membership:" in text and "Linkage (the rare diagnosis named):" in text
    assert "no attacker can exceed" in text
    assert plot(report, tmp_path / "p.png").stat().st_size > 0
    assert to_json(report)["attack"] == "publication"
    assert ATTACKS["publication"] is run_publication


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(InvalidParameter, match="trials"):
        run_publication(trials=1)

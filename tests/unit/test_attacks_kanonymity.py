"""The k-anonymity leak: Mondrian reveals the rich person's presence and worth; safe k-anon does not.

Deterministic: Mondrian is deterministic on seeded data; deniable's safe anonymizer
suppresses every recoded tuple seen fewer than k times, and the rich person's net-worth band
holds nobody else, so whatever the sample, no published band exceeds 10 million.
"""

from __future__ import annotations

from deniable.attacks.kanonymity import run_kanonymity


def test_mondrian_falls_and_safe_k_anonymity_holds() -> None:
    report = run_kanonymity(runs=3)
    with_rich, without = report.runs[:2]
    assert with_rich.says_present and with_rich.revealed_value == report.rich_worth
    assert not without.says_present  # the attacker's rule is right both ways: a real leak
    for run in report.runs[2:]:
        assert run.safe and run.rich_in_data
        assert not run.says_present and run.revealed_value is None
        assert run.rows_published > 0  # the release is not empty: suppression, not silence
    assert 0 < report.epsilon < 3 and report.delta <= 1e-6
    assert "Mondrian" in report.text()


def test_identical_runs_are_reported_once_with_their_count() -> None:
    """Five identical lines for deniable's five runs before (issue 23)."""
    text = run_kanonymity(runs=3).text()
    deniable = [line for line in text.splitlines() if line.startswith("* deniable")]
    assert len(deniable) == 1 and "in all 3 runs" in deniable[0]

"""``make demo`` runs end to end: every section answers, the cache replays, the budget refuses."""

from __future__ import annotations

import pytest

from deniable import demo


def test_the_demo_answers_every_question_and_ends_over_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    demo.main()
    out = capsys.readouterr().out
    for section in (
        "A count",
        "A median",
        "Private keys",
        "A graph at node level",
        "served from the ledger's cache",
        "Refused: a query that would release rows",
        "Over budget: refused before anything is spent",
        "Publishing the table itself: k-anonymized vs synthetic",
        "safe k-anonymization (k = 15",
        "synthetic data (MST)",
    ):
        assert section in out
    assert "node-level triangles (Lipschitz extension" in " ".join(out.split())
    assert "BudgetExceeded" in out and "UnsafeQuery" in out
    # 0.1 + 0.2 + 0.5 + 0.3 + 0.6 + 0.5 + 0.2 (graph) + 1 (k-anonymized) + 0.5 (synthetic)
    assert "spent ε = 3.9" in out
    assert "anonymize 'students'" in out and "synthetic data (mst)" in out  # both charged

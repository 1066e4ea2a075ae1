"""Review findings on the zCDP accountant's coverage (deniable.ledger, deniable.accounting.renyi).

The zCDP filter's theorems cover charges that are each a privacy guarantee of their release
given the past. The charges of queries on one Bernoulli sample are not: they are increments
``amplify(L₁ + … + Lₙ) − amplify(L₁ + … + Lₙ₋₁)`` of one amplified total, a guarantee only
added up (docs/accounting.md). A session refuses sampled tables when it opens on a zCDP
dataset, but a session opened while the dataset was still basic kept answering on its sample
after a curator switched the accountant to zCDP (allowed while nothing is charged): the
ledger then composed the increments as zCDP. The ledger, the only source of truth, now
refuses a sampled-table charge under the zCDP accountant, before writing anything.
"""

from __future__ import annotations

import warnings
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest

from deniable import ROW
from deniable.accounting import EpsilonDelta
from deniable.curator.session import Session
from deniable.errors import PrivacyWarning, UnsafeQuery
from deniable.ledger import Ledger
from deniable.noise.testing import SeededRandom

CAP = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))
FRAME = pd.DataFrame({"x": range(200)})


def _sampled_session(path: Path) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(budget=CAP, ledger=path, dataset="d", source=SeededRandom(2))
    s.add_table("t", FRAME, sample_rate=Fraction(1, 10), privacy_unit=ROW)
    return s


def test_sampled_charges_are_refused_once_the_dataset_spends_as_zcdp(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    s = _sampled_session(path)  # the dataset is basic: the sampled table is accepted
    try:
        with Ledger(path) as curator:  # nothing charged yet: the accountant may change
            curator.register("d", CAP, accountant="zcdp", allow_change=True)
        with pytest.raises(UnsafeQuery, match="sample"):
            s.sql("SELECT COUNT(*) AS n FROM t", epsilon=Fraction(1, 10))
        with Ledger(path) as curator:
            assert curator.history("d") == []  # nothing was charged
    finally:
        s.close()


def test_sampled_charges_are_admitted_under_the_basic_accountant(tmp_path: Path) -> None:
    # negative control: the same session and query without the switch is answered
    path = tmp_path / "ledger.db"
    s = _sampled_session(path)
    try:
        answer = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=Fraction(1, 10))
        assert answer.metadata.charge_id is not None
        with Ledger(path) as curator:
            [charge] = curator.history("d")
            assert "sampling" in charge.details
    finally:
        s.close()


def test_a_charge_without_sampling_is_admitted_under_zcdp(tmp_path: Path) -> None:
    # negative control for the ledger's rule itself: only sampled charges are refused
    with Ledger(tmp_path / "ledger.db") as led:
        led.register("d", CAP, accountant="zcdp")
        led.charge(
            "d",
            EpsilonDelta(epsilon=Fraction(1, 10), delta=0),
            analyst="a",
            query_key="k",
            query_text="",
            details={"measures": []},
        )
        with pytest.raises(UnsafeQuery, match="sample"):
            led.charge(
                "d",
                EpsilonDelta(epsilon=Fraction(1, 10), delta=0),
                analyst="a",
                query_key="k2",
                query_text="",
                details={"sampling": {"rate": "1/10"}},
            )
        assert len(led.history("d")) == 1

"""The client rebuilds the local Answer (and the other types) from the API's JSON exactly."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from deniable import ROW
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.client.decode import (
    accuracy_from_json,
    answer_from_json,
    budget_from_json,
    loss_from_json,
)
from deniable.curator.session import Session
from deniable.errors import InternalError
from deniable.query.answer import Answer
from deniable.server.models import LossOut, QueryResponse


def _wire(answer: Answer) -> dict[str, object]:
    """The answer as the server sends it: QueryResponse, through JSON text."""
    body: dict[str, object] = json.loads(QueryResponse.of("d", answer).model_dump_json())
    return body


@pytest.fixture
def session(tmp_path: Path) -> Session:
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path / "l.db")
    frame = pd.DataFrame(
        {"k": ["a", "b", "c"] * 40, "x": np.arange(120) % 9, "y": np.arange(120) / 7}
    )
    s.add_table("t", frame, privacy_unit=ROW, public_keys={"k": ["a", "b", "c"]},
                bounds={"x": (0, 10), "y": (0, 20)})  # fmt: skip
    return s


QUERIES = [
    "SELECT k, COUNT(*) AS n, AVG(x) AS m, MEDIAN(y) AS med FROM t GROUP BY k",
    "SELECT COUNT(*) AS n, SUM(y) AS s FROM t",
    "SELECT k, SUM(x) AS s FROM t GROUP BY k ORDER BY s DESC LIMIT 2",
    "SELECT k, COUNT(*) / 2 AS half FROM t GROUP BY k HAVING COUNT(*) > 1",
]


@pytest.mark.parametrize("query", QUERIES)
def test_answer_round_trips_through_the_wire(session: Session, query: str) -> None:
    local = session.sql(query, epsilon=0.5)
    remote = answer_from_json(_wire(local))
    assert isinstance(remote, Answer)
    pd.testing.assert_frame_equal(remote.to_pandas(), local.to_pandas())
    assert remote.metadata == local.metadata
    assert remote.row_policy == local.row_policy
    assert remote.summary() == local.summary()
    assert remote._repr_html_() == local._repr_html_()
    assert remote.to_polars().equals(local.to_polars())


def test_a_replay_keeps_its_first_cost(session: Session) -> None:
    session.sql(QUERIES[1], epsilon=0.5)
    replay = session.sql(QUERIES[1], epsilon=0.5)
    assert replay.cached and replay.loss == Epsilon(epsilon=0)
    remote = answer_from_json(_wire(replay), cost=Epsilon(epsilon=Fraction(1, 2)))
    assert remote.cached and remote.loss == Epsilon(epsilon=0)
    assert remote.metadata.cost == Epsilon(epsilon=Fraction(1, 2))


def test_a_missing_value_of_an_integer_column_is_nan() -> None:
    body = _wire_template()
    body["values"] = {"n": [3, None]}
    body["intervals"] = {"n": {"low": [1.0, None], "high": [5.0, None]}}
    frame = answer_from_json(body).to_pandas()
    assert frame["n"].dtype == np.float64 and np.isnan(frame["n"][1])
    assert list(frame.columns) == ["n", "n_low", "n_high"]


def test_a_malformed_answer_is_an_internal_error() -> None:
    body = _wire_template()
    del body["charge"]
    with pytest.raises(InternalError):
        answer_from_json(body)


def _wire_template() -> dict[str, object]:
    zero = json.loads(LossOut.of(Epsilon(epsilon=0)).model_dump_json())
    return {
        "dataset": "d", "query": "q", "columns": ["n"], "values": {"n": [1, 2]},
        "intervals": {}, "level": 0.95, "charge": zero, "charge_id": None, "cached": False,
        "remaining": zero, "mechanisms": {"n": "m"}, "notes": {}, "bounds": {},
        "privacy_unit": None, "max_groups": 1, "max_rows": 1, "partition_selection": None,
        "row_policies": [], "row_policy": "", "interval_coverage": "",
    }  # fmt: skip


@pytest.mark.parametrize(
    "loss",
    [
        Epsilon(epsilon=Fraction(1, 3)),
        EpsilonDelta(epsilon=Fraction(1, 10), delta=Fraction(1, 10**9)),
        Rho(rho=Fraction(2, 7)),
    ],
)
def test_losses_are_exact(loss: Epsilon | EpsilonDelta | Rho) -> None:
    # The float 1/3 is not exact; the "exact" field is, and it is what the client reads.
    assert loss_from_json(json.loads(LossOut.of(loss).model_dump_json())) == loss


def test_an_unknown_loss_is_an_internal_error() -> None:
    with pytest.raises(InternalError):
        loss_from_json({"type": "renyi", "exact": {}})


def test_budget_and_accuracy_bodies() -> None:
    eps = json.loads(LossOut.of(Epsilon(epsilon=Fraction(3, 4))).model_dump_json())
    budget = budget_from_json(
        {"dataset": "d", "cap": eps, "spent": eps, "remaining": eps, "allowance": None}
    )
    assert budget.cap == Epsilon(epsilon=Fraction(3, 4)) and budget.allowance is None
    assert "remaining ε = 0.75" in str(budget)
    report = accuracy_from_json(
        {
            "dataset": "d", "query": "q", "level": 0.9, "loss": eps, "least_loss": eps,
            "assumed_rows": None, "remaining": eps, "fits": True, "charged": False,
            "interval_coverage": "noise",
            "outputs": [{"name": "N", "half_width": 4.5, "rank_error": None,
                         "depends_on": None, "target": 5.0, "meets_target": True}],
        }
    )  # fmt: skip
    assert report.width("n") == 4.5  # the local AccuracyReport's lookup, case-blind
    assert report.least_loss == Epsilon(epsilon=Fraction(3, 4)) and report.targets == {"N": 5.0}
    assert "N: ± 4.5 at 90%" in str(report)

"""Counts are unbiased by default; ``nonnegative=True`` clips them at 0 (issue 21 §3).

The clipping is post-processing of the released answer: no charge, and a replay of the same
query can be asked either way. Its intervals still hold the bounded count (a count is never
negative), and its values are biased upward near 0, which the answer says in its notes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _service_fixture import copy_example
from click.testing import CliRunner
from fastapi.testclient import TestClient

from deniable import ROW, Session
from deniable.accounting.loss import Epsilon
from deniable.cli.main import main
from deniable.errors import InvalidParameter
from deniable.ledger import Principal
from deniable.query.answer import NONNEGATIVE_NOTE
from deniable.server.app import create_app
from deniable.server.config import load_config
from deniable.server.service import Service

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "service"
QUERY = "SELECT k, COUNT(*) AS n, COUNT(x) AS d, SUM(x) AS s FROM t GROUP BY k"
KEYS = [f"k{i}" for i in range(40)]  # 39 of the 40 keys are empty: their counts are noise


def _session(tmp_path: Path) -> Session:
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "l.db")
    frame = pd.DataFrame({"k": ["k0"] * 5, "x": [1.0, 2.0, 3.0, 4.0, 5.0]})
    s.add_table("t", frame, privacy_unit=ROW, bounds={"x": (-10, 10)}, public_keys={"k": KEYS})
    return s


def test_counts_are_unbiased_by_default_and_clipped_on_request(tmp_path: Path) -> None:
    s = _session(tmp_path)
    raw = s.sql(QUERY, epsilon=0.3)
    # 39 empty keys at scale 10 (count's third of ε = 0.3): P(none negative) = (1/2+)^39 < 1e-11
    assert (raw["n"] < 0).any() and (raw["n_low"] < 0).any()
    clipped = s.sql(QUERY, epsilon=0.3, nonnegative=True)
    assert clipped.cached and clipped.loss == Epsilon(epsilon=0)  # post-processing: free
    for c in ("n", "n_low", "n_high", "d", "d_low", "d_high"):
        assert (clipped[c] >= 0).all()
        assert (clipped[c] == np.maximum(raw[c], 0)).all()
    assert (clipped["s"] == raw["s"]).all()  # a sum is not a count: left as released
    assert clipped.metadata.notes["n"].endswith(NONNEGATIVE_NOTE)
    assert "s" not in clipped.metadata.notes
    assert s.budget.spent == Epsilon(epsilon=0.3)
    s.close()


def test_a_post_processed_count_is_not_clipped(tmp_path: Path) -> None:
    s = _session(tmp_path)
    a = s.sql("SELECT k, COUNT(*) - 100 AS shifted FROM t GROUP BY k", epsilon=1, nonnegative=True)
    assert (a["shifted"] < 0).all()  # an expression of a count may be negative
    s.close()


def test_graphs_refuse_it(tmp_path: Path) -> None:
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "g.db")
    s.add_graph("g", pd.DataFrame({"a": [1, 2], "b": [2, 3]}), source_col="a", target_col="b",
                unit="edge", max_degree=3)  # fmt: skip
    with pytest.raises(InvalidParameter, match="nonnegative"):
        s.sql("SELECT COUNT(*) AS n FROM edges(g)", epsilon=1, nonnegative=True)
    s.close()


def test_the_cli_and_the_api_offer_it(tmp_path: Path) -> None:
    data = tmp_path / "t.csv"
    data.write_text("k,x\n" + "k0,1\n" * 5)
    args = ["query", "SELECT k, COUNT(*) AS n FROM t GROUP BY k", "--data", str(data),
            "--unit", "row", "--keys", "k=" + ",".join(KEYS), "--epsilon", "0.1",
            "--ledger", str(tmp_path / "cli.db"), "--budget", "1", "--json"]  # fmt: skip
    raw = json.loads(CliRunner().invoke(main, args).stdout)
    clipped = json.loads(CliRunner().invoke(main, [*args, "--nonnegative"]).stdout)
    n = raw["columns"].index("n")
    assert any(row[n] < 0 for row in raw["rows"])  # 39 empty keys: P(none negative) < 1e-11
    assert clipped["cached"] and all(row[n] >= 0 for row in clipped["rows"])
    assert [max(row[n], 0) for row in raw["rows"]] == [row[n] for row in clipped["rows"]]

    copy_example(tmp_path)
    tokens = {"t-ann": Principal(name="ann", role="analyst")}
    sql = "SELECT school, COUNT(*) AS n FROM students GROUP BY school"
    with Service(load_config(tmp_path / "example.toml")) as service:
        app = create_app(service, authenticate=tokens.get)
        with TestClient(app, raise_server_exceptions=False) as client:
            path, who = "/v1/datasets/students/query", {"Authorization": "Bearer t-ann"}
            body = {"sql": sql, "epsilon": 0.01, "nonnegative": True}
            out = client.post(path, json=body, headers=who).json()
            assert min(out["values"]["n"]) >= 0 and min(out["intervals"]["n"]["low"]) >= 0
            assert out["notes"]["n"].endswith(NONNEGATIVE_NOTE)
            strict = client.post(path, json={**body, "nonnegative": 1}, headers=who)
            assert strict.status_code == 422  # a number is not a boolean

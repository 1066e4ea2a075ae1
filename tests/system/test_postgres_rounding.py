"""PostgreSQL rounds ties to even: a centred sum must still stay within its sensitivity.

The server is started here (initdb + pg_ctl, as in ``test_postgres_engine.py``). The table has
no privacy unit, so one row is a unit's whole contribution to a sum, and its value on the
fixed-point grid must lie within ``[row_low, row_high]`` after centring — the range the
sensitivity is computed from (bounds rounded half away from zero). The lower bound is chosen
with a half-unit remainder on the grid (``lower·2^-e = 2k + ½``), where PostgreSQL's
``round(double precision)`` gives ``2k``, one unit *below* ``a = 2k + 1``: without the clamp
after rounding, rows at the lower bound would each leave the sensitivity by one grid unit.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from deniable import ROW

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import (
    PostgresServer,
    create_reader,
    load_table,
    shared_server,
    stop_shared_server,
)

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import EpsilonDelta  # noqa: E402
from deniable.curator.session import Session  # noqa: E402
from deniable.query.measures import SumMeasure  # noqa: E402
from deniable.query.rewrite.compile import Secrets  # noqa: E402
from deniable.query.testing import exact_aggregates  # noqa: E402

ROWS = 5
GRID_EXPONENT = -12  # the grid the plan below chooses for these bounds and ε (asserted)
LOWER = 2.5 + 2.0 ** (GRID_EXPONENT - 1)  # 2.5·2^12 + ½ = 10240.5 units: a tie, even below
UPPER = 1e6 + 2.5


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    """The test server holding ``r.ties``: every row at the lower bound."""
    s = shared_server()
    load_table(s.dsn(), "ties", pa.table({"v": pa.array([LOWER] * ROWS, pa.float64())}), schema="r")
    create_reader(s.dsn(), "ties_reader", [("r", "ties")])
    yield s
    stop_shared_server()


def test_the_server_rounds_half_to_even(server: PostgresServer) -> None:
    """The premise: PostgreSQL's round(double precision) maps 10240.5 to 10240 (not 10241)."""
    with psycopg.connect(server.dsn(), autocommit=True) as con, con.cursor() as cur:
        cur.execute("SELECT round(CAST(%s AS double precision) * 4096.0)::bigint", (LOWER,))
        row = cur.fetchone()
    assert row is not None and row[0] == 10240


def test_centred_sum_stays_within_its_sensitivity(server: PostgresServer, tmp_path: Path) -> None:
    with Session(budget=EpsilonDelta(epsilon=10, delta=1e-6), ledger=tmp_path / "l.db") as s:
        s.add_table(
            "ties",
            server.dsn("ties_reader"),
            table="r.ties",
            bounds={"v": (LOWER, UPPER)},
            privacy_unit=ROW,
        )
        plan, _, exact = exact_aggregates(
            s, "SELECT AVG(v) AS a FROM ties", not_private=True, secrets=Secrets(3, 4), epsilon=1
        )
        m = next(x for x in map(plan.measure, plan.aggregates[0].measures) if x.kind == "sum")
        assert isinstance(m, SumMeasure)
        assert m.exponent == GRID_EXPONENT and m.row_low + m.centre == 10241
        assert plan.max_rows == 1  # no privacy unit: each row is a whole contribution
        total = int(exact.measures[m.id][0])
        # Each row contributes a − centre = row_low exactly; half-to-even without the clamp
        # gives row_low − 1, beyond the sensitivity r·max(|row_low|, |row_high|).
        assert total == ROWS * m.row_low
        assert abs(total) <= ROWS * m.partition_sensitivity

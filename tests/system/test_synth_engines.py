"""The marginal statement means the same on DuckDB and PostgreSQL (and renders for Spark).

One table (people with several rows, NULLs, NaN, values outside the bounds, text outside the
keys) is loaded into DuckDB and into a PostgreSQL server started here (initdb + pg_ctl, as
``test_postgres_parity.py`` does). With ``max_rows`` above everyone's rows, every 1-, 2- and
3-way marginal computed by each engine equals a direct pandas computation of the documented
binning; with ``max_rows = 2`` (the engines' hashes differ, so the rows kept differ) every
marginal on both engines holds exactly ``Σ min(n, 2)`` rows. A synthetic release then runs
end to end on the PostgreSQL table, with one charge.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "conformance"))

from _postgres import PostgresServer, create_reader, load_table, shared_server

psycopg = pytest.importorskip("psycopg")

from deniable.accounting.loss import EpsilonDelta  # noqa: E402
from deniable.curator.session import Session  # noqa: E402
from deniable.engines.base import SPARK_CAPABILITIES  # noqa: E402
from deniable.query.rewrite.compile import render  # noqa: E402
from deniable.synth.discretize import discretize  # noqa: E402
from deniable.synth.measure import exact_marginals, marginal_statement  # noqa: E402

BOUNDS = {"a": (0, 1), "age": (0, 99), "income": (0.0, 100.0)}
KEYS = {"c": ["x", "y", "z"]}
COLUMNS = ["a", "c", "age", "income"]


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(42)
    n = 4000
    income = rng.normal(50, 40, n)
    income[rng.random(n) < 0.03] = np.nan
    frame = pd.DataFrame(
        {
            "pid": rng.integers(0, 500, n),
            "a": rng.integers(0, 2, n),
            "c": rng.choice(["x", "y", "z", "w"], n).astype(object),
            "age": rng.integers(-10, 120, n),
            "income": income,
        }
    )
    frame.loc[rng.random(n) < 0.02, "c"] = None
    return frame


def _arrow(frame: pd.DataFrame) -> pa.Table:
    # NaN incomes become NULL in PostgreSQL's copy (and stay NaN in DuckDB's): both must land
    # in the NULL cell.
    return pa.Table.from_pandas(frame, preserve_index=False)


def _python_cells(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    age = np.clip(frame["age"].to_numpy(), 0, 99) // 7  # 100 integers in 16 bins: width 7
    income = frame["income"].to_numpy()
    binned = np.minimum(np.floor(np.clip(income, 0, 100) / (100 / 16)), 15)
    income_cell = np.where(np.isnan(income), 16, binned).astype(np.int64)
    c = frame["c"].map({"x": 0, "y": 1, "z": 2}).fillna(3).astype(np.int64).to_numpy()
    return {"a": frame["a"].to_numpy(), "c": c, "age": age, "income": income_cell}


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    s = shared_server()
    load_table(s.dsn(), "people", _arrow(_frame()), schema="synth")
    create_reader(s.dsn(), "synth_reader", [("synth", "people")])
    yield s


def _sessions(server: PostgresServer, tmp: Path, max_rows: int) -> tuple[Session, Session]:
    made = []
    for name, source, table in (
        ("duck", _frame(), None),
        ("pg", server.dsn("synth_reader"), "synth.people"),
    ):
        s = Session(budget=EpsilonDelta(epsilon=10, delta=1e-5), ledger=tmp / f"{name}.db")
        s.add_table(
            "t",
            source,
            table=table,
            privacy_unit="pid",
            max_groups=1,
            max_rows=max_rows,
            bounds=BOUNDS,
            public_keys=KEYS,
        )
        made.append(s)
    return made[0], made[1]


def _marginals(s: Session) -> dict[tuple[str, ...], np.ndarray]:
    info = s.tables["t"]
    disc = discretize(info, COLUMNS, bins=16)
    cliques = [c for k in (1, 2, 3) for c in itertools.combinations(disc.names, k)]
    return exact_marginals(
        s._engines["t"],
        s._bindings["t"],
        disc,
        cliques,
        unit=info.column("pid"),
        max_rows=info.policy.max_rows,
        key=2**62 + 12345,
    )


def test_exact_marginals_agree_with_pandas_on_both_engines(
    server: PostgresServer, tmp_path: Path
) -> None:
    duck, pg = _sessions(server, tmp_path, max_rows=10_000)
    with duck, pg:
        on_duck, on_pg = _marginals(duck), _marginals(pg)
    frame = _frame()
    cells = _python_cells(frame)
    sizes = {"a": 3, "c": 4, "age": 16, "income": 17}
    for clique, value in on_duck.items():
        flat = np.zeros(len(frame), dtype=np.int64)
        for name in clique:
            flat = flat * sizes[name] + cells[name]
        expected = np.bincount(flat, minlength=math.prod(sizes[n] for n in clique))
        np.testing.assert_array_equal(value, expected, err_msg=f"DuckDB {clique}")
        np.testing.assert_array_equal(on_pg[clique], expected, err_msg=f"PostgreSQL {clique}")


def test_bounded_marginals_keep_min_rows_per_person_on_both_engines(
    server: PostgresServer, tmp_path: Path
) -> None:
    duck, pg = _sessions(server, tmp_path, max_rows=2)
    with duck, pg:
        on_duck, on_pg = _marginals(duck), _marginals(pg)
    kept = int(np.minimum(_frame().groupby("pid").size(), 2).sum())
    for clique in on_duck:
        assert int(on_duck[clique].sum()) == kept == int(on_pg[clique].sum()), clique


def test_a_release_runs_on_postgresql(server: PostgresServer, tmp_path: Path) -> None:
    _, pg = _sessions(server, tmp_path, max_rows=2)
    with pg:
        syn = pg.synthesize("t", columns=COLUMNS, epsilon=2, delta=1e-6, method="mst")
        assert len(pg.budget.history) == 1 and syn.to_pandas().shape[1] == len(COLUMNS)


def test_the_statement_renders_for_spark() -> None:
    from deniable.query.catalog import Column, ColumnKind, TableInfo, make_policy

    cols = (
        Column("pid", "BIGINT", ColumnKind.INTEGER),
        Column("a", "BIGINT", ColumnKind.INTEGER),
        Column("c", "STRING", ColumnKind.TEXT),
        Column("income", "DOUBLE", ColumnKind.REAL),
    )
    policy = make_policy(
        "t",
        cols,
        privacy_unit="pid",
        max_groups=1,
        max_rows=2,
        bounds={"a": (0, 1), "income": (0, 100)},
        public_keys=KEYS,
    )
    disc = discretize(TableInfo("t", cols, policy, "v"), ["a", "c", "income"])
    sql = render(
        marginal_statement(
            SPARK_CAPABILITIES,
            "t",
            disc,
            [("a",), ("a", "c"), ("a", "c", "income")],
            unit=cols[0],
            max_rows=2,
            key=7,
        ),
        "spark",
    )
    assert "GROUPING SETS" in sql and "xxhash64" in sql and "ROW_NUMBER()" in sql.upper()


def test_measured_domain_statistics_agree_with_pandas_on_both_engines(
    server: PostgresServer, tmp_path: Path
) -> None:
    """The DP domain's inputs (:mod:`deniable.synth.learn`): the grid histogram of a
    ``Quantiles`` column and the persons of each key of a ``SelectKeys`` column mean the same
    on DuckDB and PostgreSQL as in pandas; a release measuring both runs on PostgreSQL."""
    from deniable.synth import Quantiles, SelectKeys
    from deniable.synth.learn import exact_domain

    spec: Any = {"income": Quantiles(4, within=(0, 100), grid=64), "c": SelectKeys(3)}
    duck, pg = _sessions(server, tmp_path, max_rows=10_000)
    frame = _frame()
    income = frame["income"].dropna().to_numpy()
    with duck, pg:
        for s in (duck, pg):
            info = s.tables["t"]
            disc = discretize(info, ["income", "c"], spec)
            got = exact_domain(s._engines["t"], s._bindings["t"], disc,
                               unit=info.column("pid"), max_rows=10_000, key=77)  # fmt: skip
            ends = [float(e) for e in got.grids["income"].edges]
            expected = np.bincount(np.searchsorted(ends, np.clip(income, 0, 100), side="right"),
                                   minlength=64)  # fmt: skip
            np.testing.assert_array_equal(got.histograms["income"], expected)
            units = dict(zip(got.keys["c"].to_pylist(), got.units["c"].tolist(), strict=True))
            assert units == frame.dropna(subset=["c"]).groupby("c")["pid"].nunique().to_dict()
        syn = pg.synthesize("t", columns=["a", "c", "income"], epsilon=4, delta=1e-6,
                            method="mst", bins=spec)  # fmt: skip
        assert len(pg.budget.history) == 1 and [e.kind for e in syn.events][:2] == [
            "keys",
            "bins",
        ]


def test_the_measured_domain_statements_render_for_spark() -> None:
    import sqlglot

    from deniable.query.catalog import Column, ColumnKind
    from deniable.synth.discretize import Binning, Discretization
    from deniable.synth.learn import units_statement

    unit = Column("pid", "BIGINT", ColumnKind.INTEGER)
    text = Column("c", "STRING", ColumnKind.TEXT)
    real = Column("income", "DOUBLE", ColumnKind.REAL)
    sql = render(units_statement(SPARK_CAPABILITIES, "t", text, unit=unit, max_rows=2, key=7),
                 "spark")  # fmt: skip
    assert "xxhash64" in sql and "DISTINCT" in sql.upper()
    edges = Binning(
        real, 5, Fraction(0), Fraction(100), edges=(Fraction(1), Fraction(5), Fraction(9))
    )
    sql = render(marginal_statement(SPARK_CAPABILITIES, "t", Discretization((edges,)),
                                    [("income",)], unit=unit, max_rows=2, key=7), "spark")  # fmt: skip
    assert "ISNAN" in sql.upper()
    sqlglot.parse_one(sql, read="spark")

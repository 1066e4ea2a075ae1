"""Synthetic data releases (deniable.synth.release, measure, mst, aim) end to end on DuckDB.

* the engine's exact marginals equal a direct pandas computation (persons with several rows;
  with ``max_rows`` above everyone's rows, and below: each person then keeps ``min(n, r)``);
* one charge per release, its details and stored record; the events compose (zCDP sum, and
  converted to (ε, δ)) to at most the charge, under the basic and the zCDP accountant;
* refusals happen before the engine runs, cost nothing and do not depend on the data;
* a seeded source makes a release reproducible;
* utility: MST recovers the 2-way marginal of a strong dependency (``b = a xor noise``)
  within the measurement's stated error (and an independence model, the negative control,
  does not).
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from deniable import ROW
from deniable.accounting.composition import compose
from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.accounting.renyi import ZCDPAccountant, zcdp_epsilon
from deniable.curator.session import Session
from deniable.engines.base import TableBinding
from deniable.engines.duckdb import DuckDBEngine
from deniable.errors import BudgetExceeded, InvalidParameter, PrivacyWarning, UnsafeQuery
from deniable.noise.testing import SeededRandom
from deniable.synth.discretize import discretize
from deniable.synth.measure import SCORE_BITS, exact_marginals, l1_score
from deniable.synth.model import estimate
from deniable.synth.release import marginal_of, total_variation, utility_report

BOUNDS = {"a": (0, 1), "b": (0, 1), "age": (0, 99), "income": (0, 100)}
KEYS = {"c": ["x", "y", "z"]}


class CountingEngine(DuckDBEngine):
    """DuckDB that counts the statements it checks and runs."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0
        self.checks = 0

    def check(self, binding: TableBinding, sql: str) -> None:
        self.checks += 1
        super().check(binding, sql)

    def run(self, binding: TableBinding, sql: str) -> pa.Table:
        self.runs += 1
        return super().run(binding, sql)


def _people(n: int, seed: int, persons: int | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, n)
    b = a ^ (rng.random(n) < 0.1)
    return pd.DataFrame(
        {
            "pid": rng.integers(0, persons or max(1, n // 3), n),
            "a": a,
            "b": b.astype(np.int64),
            "c": rng.choice(["x", "y", "z", "w"], n),  # "w" is not a key: the other cell
            "age": rng.integers(-5, 110, n),  # clamped into [0, 99]
            "income": rng.normal(50, 30, n),
        }
    )


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(
            budget=EpsilonDelta(epsilon=20, delta=Fraction(1, 10**4)),
            ledger=tmp_path / "ledger.db",
            source=SeededRandom(11),
        )
    yield s
    s.close()


def _register(s: Session, frame: pd.DataFrame, *, max_rows: int = 2, row: bool = False) -> None:
    if row:
        s.add_table(
            "t", frame.drop(columns="pid"), privacy_unit=ROW, bounds=BOUNDS, public_keys=KEYS
        )
    else:
        s.add_table(
            "t",
            frame,
            privacy_unit="pid",
            max_groups=1,
            max_rows=max_rows,
            bounds=BOUNDS,
            public_keys=KEYS,
        )


def _reference(
    frame: pd.DataFrame,
    disc_cells: dict[str, np.ndarray],
    clique: tuple[str, ...],
    sizes: dict[str, int],
) -> np.ndarray:
    flat = np.zeros(len(frame), dtype=np.int64)
    for name in clique:
        flat = flat * sizes[name] + disc_cells[name]
    return np.bincount(flat, minlength=math.prod(sizes[n] for n in clique))


def _cells_in_python(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    age = np.clip(frame["age"].to_numpy(), 0, 99) // 7  # 100 integers, width 7 → 15 bins
    income = np.clip(frame["income"].to_numpy(), 0, 100)
    income_bin = np.minimum(np.floor(income / (100 / 16)), 15).astype(np.int64)
    c = frame["c"].map({"x": 0, "y": 1, "z": 2}).fillna(3).astype(np.int64).to_numpy()
    return {
        "a": frame["a"].to_numpy(),
        "b": frame["b"].to_numpy(),
        "c": c,
        "age": age,
        "income": income_bin,
    }


@pytest.mark.parametrize("layout", ["row", "person"])
def test_exact_marginals_equal_pandas(session: Session, layout: str) -> None:
    frame = _people(3000, seed=1, persons=400)
    # max_rows above everyone's rows: the bounding keeps every row
    _register(session, frame, max_rows=10_000, row=layout == "row")
    info = session.tables["t"]
    disc = discretize(info, ["a", "b", "c", "age", "income"], bins=16)
    cliques = [c for k in (1, 2, 3) for c in itertools.combinations(disc.names, k)]
    exact = exact_marginals(
        session._engines["t"],
        session._bindings["t"],
        disc,
        cliques,
        unit=None if layout == "row" else info.column("pid"),
        max_rows=info.policy.max_rows,
        key=12345,
    )
    sizes = dict(zip(disc.names, disc.domain.sizes, strict=True))
    cells = _cells_in_python(frame)
    for clique in cliques:
        np.testing.assert_array_equal(exact[clique], _reference(frame, cells, clique, sizes))


def test_bounding_keeps_min_rows_of_each_person(session: Session) -> None:
    frame = _people(3000, seed=2, persons=300)  # about 10 rows a person
    _register(session, frame, max_rows=3)
    info = session.tables["t"]
    disc = discretize(info, ["a", "c"], bins=16)
    exact = exact_marginals(
        session._engines["t"],
        session._bindings["t"],
        disc,
        [("a",), ("c",), ("a", "c")],
        unit=info.column("pid"),
        max_rows=3,
        key=99,
    )
    kept = int(np.minimum(frame.groupby("pid").size(), 3).sum())
    assert all(int(v.sum()) == kept for v in exact.values())
    np.testing.assert_array_equal(exact[("a", "c")].reshape(3, 4).sum(axis=1), exact[("a",)])


def _neighbours(tmp_path: Path) -> tuple[dict, dict]:  # type: ignore[type-arg]
    frame = _people(2000, seed=3, persons=300)
    intruder = pd.DataFrame(
        {"pid": 10**6, "a": 1, "b": 0, "c": "y", "age": 50, "income": 77.0}, index=range(9)
    )
    out = []
    for k, data in enumerate((frame, pd.concat([frame, intruder], ignore_index=True))):
        with Session(budget=EpsilonDelta(epsilon=1, delta=1e-6), ledger=tmp_path / f"{k}.db") as s:
            _register(s, data, max_rows=4)
            info = s.tables["t"]
            disc = discretize(info, ["a", "b", "c", "age", "income"], bins=16)
            cliques = [c for n in (1, 2, 3) for c in itertools.combinations(disc.names, n)]
            out.append(
                exact_marginals(
                    s._engines["t"],
                    s._bindings["t"],
                    disc,
                    cliques,
                    unit=info.column("pid"),
                    max_rows=4,
                    key=7,
                )
            )
    return out[0], out[1]


def test_sensitivity_at_the_mechanism_input_is_max_rows(tmp_path: Path) -> None:
    """One person with 9 rows moves every marginal by exactly r = 4 (L1 and L2 ≤ 4)."""
    d, d2 = _neighbours(tmp_path)
    rng = np.random.default_rng(0)
    for clique, x in d.items():
        diff = d2[clique] - x
        assert np.abs(diff).sum() == 4 and np.sqrt((diff**2).sum()) <= 4
        # the selection scores (L1 to any fixed estimate) move by at most r·2^SCORE_BITS
        est = rng.normal(x.astype(float), 30)
        assert abs(l1_score(d2[clique], est) - l1_score(x, est)) <= 4 << SCORE_BITS


@pytest.mark.parametrize("method", ["mst", "aim"])
def test_one_charge_whose_events_compose_to_it(session: Session, method: str) -> None:
    _register(session, _people(4000, seed=4))
    before = len(session.budget.history)
    columns = ["a", "b", "c", "age", "income"] if method == "mst" else ["a", "b", "c", "age"]
    syn = session.synthesize(
        "t", columns=columns, epsilon=1, delta=Fraction(1, 10**6), method=method, bins=8
    )
    history = session.budget.history
    assert len(history) == before + 1
    charge = history[-1]
    assert charge.id == syn.charge_id and charge.loss == EpsilonDelta(epsilon=1, delta=1e-6)
    assert syn.loss == charge.loss
    plan = charge.details["synth"]
    assert plan["method"] == method and plan["columns"] == columns
    assert plan["sensitivity"] == 2
    # zCDP composition of the events is within the ρ the charge converts from ...
    total = compose([Rho(rho=e.rho) for e in syn.events])
    assert total <= Rho(rho=syn.rho)
    assert zcdp_epsilon(total.rho, Fraction(1, 10**6)) <= 1  # ... and (ε, δ) is the charge
    # ... and the plan spends it (MST exactly to the 2^-53 rounding of the selection ε)
    assert total.rho >= syn.rho * (1 - Fraction(1, 10**6))
    marginals = [e for e in syn.events if e.kind == "marginal"]
    assert {e.clique for e in marginals} >= {(n,) for n in plan["columns"]}
    for e in marginals:
        assert e.sigma == pytest.approx(2 / math.sqrt(2 * float(e.rho)))  # σ = r/√(2ρ)
    first = plan["plan"]["one_way_sigma" if method == "mst" else "first_sigma"]
    assert marginals[0].sigma == pytest.approx(first)  # the plan recorded at the charge
    record = json.loads(session._ledger.answer_for(charge.id) or b"{}")
    assert [ev["clique"] for ev in record["events"]] == [list(e.clique) for e in syn.events]
    assert len(syn) == record["rows"] and syn.to_pandas().shape == (len(syn), len(columns))


def test_zcdp_accountant_charges_rho(tmp_path: Path) -> None:
    with Session(
        budget=EpsilonDelta(epsilon=4, delta=1e-6),
        ledger=tmp_path / "z.db",
        accountant=ZCDPAccountant(),
    ) as s:
        _register(s, _people(2000, seed=5))
        syn = s.synthesize("t", rho=Fraction(1, 10), method="mst", bins=8)
        assert s.budget.history[-1].loss == Rho(rho=Fraction(1, 10)) == syn.loss
        assert compose([Rho(rho=e.rho) for e in syn.events]) <= syn.loss
        asked = s.synthesize("t", epsilon=1, delta=1e-7, method="mst", bins=8)
        assert isinstance(asked.loss, Rho) and zcdp_epsilon(asked.loss.rho, 1e-7) <= 1


def test_rho_budget_and_row_level_table(tmp_path: Path) -> None:
    with Session(budget=Rho(rho=1), ledger=tmp_path / "r.db") as s:
        _register(s, _people(2000, seed=6), row=True)
        syn = s.synthesize("t", rho=Fraction(1, 4), method="mst", columns=["a", "c"])
        assert syn.loss == Rho(rho=Fraction(1, 4))
        assert s.budget.history[-1].details["synth"]["sensitivity"] == 1
        with pytest.raises(InvalidParameter, match="rho= only"):
            s.synthesize("t", epsilon=1, delta=1e-6, method="mst")


def _refusal(tmp_path: Path, frame: pd.DataFrame, name: str, **kwargs: object) -> str:
    engine = CountingEngine()
    with Session(
        budget=kwargs.pop("budget", EpsilonDelta(epsilon=1, delta=1e-6)),  # type: ignore[arg-type]
        ledger=tmp_path / f"{name}.db",
        engine=engine,
    ) as s:
        s.add_table(
            "t",
            frame.assign(note="n"),
            privacy_unit="pid",
            max_groups=1,
            max_rows=2,
            bounds={"a": (0, 1), "age": (0, 10**6), "income": (0, 100)},
            public_keys=KEYS,
        )
        with pytest.raises((InvalidParameter, UnsafeQuery, BudgetExceeded)) as caught:
            s.synthesize("t", **kwargs)  # type: ignore[arg-type]
        assert engine.runs == 0, "the refusal came after the engine ran"
        assert s.budget.history == [], "a refusal was charged"
        return f"{type(caught.value).__name__}: {caught.value}"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"columns": ["a", "b"], "epsilon": 1, "delta": 1e-6}, "no declared bounds"),
        ({"columns": ["a", "note"], "epsilon": 1, "delta": 1e-6}, "no declared domain"),
        (
            {"columns": ["a", "age", "income"], "bins": 1000, "epsilon": 1, "delta": 1e-6},
            "too many cells",
        ),
        (
            {
                "columns": ["a", "age", "income", "c"],
                "bins": 1000,
                "epsilon": 1,
                "delta": 1e-6,
                "method": "aim",
            },
            "too many cells",
        ),
        ({"columns": ["a", "c"], "epsilon": 2, "delta": 1e-6}, "nothing was spent"),
        ({"columns": ["a", "c"], "epsilon": 1}, "delta"),
        ({"columns": ["a", "c"], "epsilon": 1, "delta": 1e-6, "method": "gan"}, "method"),
        ({"columns": ["a", "c"], "epsilon": 1, "delta": 1e-6, "rows": 0}, "rows"),
        ({"columns": ["a", "c"], "epsilon": 1, "budget": Epsilon(epsilon=5)}, "pure ε"),
    ],
)
def test_refusals_before_the_engine_and_not_data_dependent(
    tmp_path: Path, kwargs: dict[str, object], words: str
) -> None:
    small, large = _people(50, seed=7), _people(5000, seed=8)
    first = _refusal(tmp_path, small, "d", **dict(kwargs))
    second = _refusal(tmp_path, large, "d2", **dict(kwargs))
    assert words in first
    assert first == second  # the same refusal, word for word, whatever the data


@pytest.mark.parametrize("method", ["mst", "aim"])
def test_a_seeded_source_makes_a_release_reproducible(tmp_path: Path, method: str) -> None:
    frames = []
    for k in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            s = Session(
                budget=EpsilonDelta(epsilon=5, delta=1e-5),
                ledger=tmp_path / f"{k}.db",
                source=SeededRandom(2024),
            )
        with s:
            _register(s, _people(3000, seed=9))
            frames.append(
                s.synthesize(
                    "t",
                    columns=["a", "b", "c", "age"],
                    epsilon=1,
                    delta=1e-6,
                    method=method,
                    bins=8,
                )
            )
    pd.testing.assert_frame_equal(frames[0].to_pandas(), frames[1].to_pandas())
    assert [e.clique for e in frames[0].events] == [e.clique for e in frames[1].events]


@pytest.mark.parametrize("method", ["mst", "aim"])
def test_a_strong_dependency_is_recovered_within_the_noise(tmp_path: Path, method: str) -> None:
    """b = a xor Bernoulli(0.1): the (a, b) marginal is far from independent (TV 0.4).

    MST must select the pair (its score beats every other pair's by ~8,000 counts, so at the
    selection's ε the chance of missing it is below e^-100), AIM a clique holding both; the
    synthetic rows must reproduce the pair's 4 cells within 6 standard deviations of that
    measurement's noise on them (σ·√k when the clique's k cells sum into one of the pair's)
    plus 6 binomial standard deviations of sampling n rows. The sources are seeded, so the
    outcome is fixed; with fresh randomness each bound would fail with probability below
    1e-8. The negative control, rows sampled from the 1-way measurements alone
    (independence), misses by ~0.2·n.
    """
    n = 20_000
    frame = _people(n, seed=10, persons=n)  # one row a person: max_rows 1 bounds nothing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        s = Session(
            budget=EpsilonDelta(epsilon=5, delta=1e-5),
            ledger=tmp_path / "u.db",
            source=SeededRandom(5),
        )
    with s:
        s.add_table(
            "t",
            frame.drop_duplicates("pid"),
            privacy_unit="pid",
            max_groups=1,
            max_rows=1,
            bounds=BOUNDS,
            public_keys=KEYS,
        )
        truth = frame.drop_duplicates("pid")
        columns = ["a", "b", "c", "age", "income"] if method == "mst" else ["a", "b", "c", "age"]
        syn = s.synthesize("t", columns=columns, epsilon=2, delta=1e-6, method=method, bins=8)
        if method == "mst":
            assert ("a", "b") in [e.clique for e in syn.events if e.kind == "selection"]
        sigma = min(
            e.sigma * math.sqrt(syn.domain.size(e.clique) / 9)
            for e in syn.events
            if e.sigma and {"a", "b"} <= set(e.clique)
        )
        real = np.bincount(truth["a"] * 3 + truth["b"], minlength=9).reshape(3, 3)[:2, :2]
        m = len(truth)

        def within(rows: np.ndarray) -> bool:
            got = marginal_of(rows, syn.domain, ("a", "b")).reshape(3, 3)[:2, :2]
            scaled = got * m / max(len(rows), 1)
            bound = 6 * sigma + 6 * math.sqrt(m / 4) + abs(len(rows) - m)
            return bool(np.all(np.abs(scaled - real) <= bound))

        assert within(syn.cells)
        ones = [x for x in syn.measurements if len(x.clique) == 1]
        independent = estimate(syn.domain, ones).sample(m, source=SeededRandom(1))
        assert not within(independent)  # negative control
        report = utility_report(s, "t", syn)
        assert report.non_private
        two = report.errors.set_index("clique")["tv"]
        assert two["a, b"] < 0.05
        assert (
            total_variation(
                marginal_of(independent, syn.domain, ("a", "b")),
                marginal_of(syn.cells, syn.domain, ("a", "b")),
            )
            > 0.3
        )


def test_synthetic_columns_keep_their_types(session: Session) -> None:
    _register(session, _people(2000, seed=12))
    syn = session.synthesize("t", epsilon=2, delta=1e-6, method="mst", bins=8, rows=500)
    frame = syn.to_pandas()
    assert len(frame) == 500
    assert str(frame["age"].dtype) == "Int64" and frame["income"].dtype == np.float64
    assert set(frame["c"].dropna()) <= {"x", "y", "z"}
    assert frame["age"].dropna().between(0, 99).all()
    assert syn.to_polars().shape == (500, 5) and syn.to_arrow().num_rows == 500
    assert set(syn.noise_scales()["kind"]) == {"marginal", "selection"}

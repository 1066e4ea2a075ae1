"""Synthetic releases with a measured domain (deniable.synth.learn): DP quantile bins and keys
selected by DP partition selection, inside the release's one charge.

* the public grids and the edge binning (every value, NaN, ±inf, NULL, beyond the range, in
  the cell Python's bisection gives it, in DuckDB);
* the mechanisms' inputs: the engine's grid histogram and persons per key equal a pandas
  computation; one person with many rows moves the histogram by exactly ``r`` and at most
  ``r`` keys by one person each (the sensitivities the noise and the selection are
  calibrated for); the mechanisms are called with the planned parameters;
* the charge equals the composed measurements, under the basic and the zCDP accountant;
* refusals are public and cost nothing;
* accuracy: quantile bins near the true quantiles (a stated bound, false failure < 1e-7),
  frequent keys kept and single-person keys dropped, each with a negative control.
"""

from __future__ import annotations

import bisect
import math
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import duckdb
import numpy as np
import pandas as pd
import pytest

import deniable.synth.learn as learn
from deniable.accounting.loss import EpsilonDelta, Rho
from deniable.accounting.renyi import ZCDPAccountant, zcdp_epsilon, zcdp_rho_cap
from deniable.curator.session import Session
from deniable.engines.duckdb import DuckDBEngine
from deniable.errors import InvalidParameter, PrivacyWarning, UnsafeQuery
from deniable.noise.testing import SeededRandom
from deniable.query import partition
from deniable.query.catalog import Column, ColumnKind
from deniable.synth import Quantiles, SelectKeys
from deniable.synth.discretize import Binning, discretize

R = 3


def _session(tmp_path: Path, name: str, **kwargs: Any) -> Session:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        return Session(
            budget=kwargs.pop("budget", EpsilonDelta(epsilon=20, delta=1e-4)),
            ledger=tmp_path / f"{name}.db",
            source=SeededRandom(kwargs.pop("seed", 0)),
            **kwargs,
        )


def _people(n: int = 3000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "pid": rng.integers(0, n // 2, n),
            "income": rng.lognormal(10, 1, n),
            "years": rng.integers(0, 60, n),
            "city": rng.choice(["a", "b", "c", "d"], n),
        }
    )


def _add(s: Session, frame: pd.DataFrame, *, max_rows: int = R) -> None:
    s.add_table("t", frame, privacy_unit="pid", max_groups=1, max_rows=max_rows,
                bounds={"years": (0, 59)})  # fmt: skip


# -- grids and edge binnings -----------------------------------------------------------------


@pytest.mark.parametrize("scale", ["linear", "log"])
@pytest.mark.parametrize("kind", [ColumnKind.REAL, ColumnKind.INTEGER])
def test_grids_are_increasing_inside_the_range(scale: str, kind: ColumnKind) -> None:
    col = Column("x", "DOUBLE" if kind is ColumnKind.REAL else "BIGINT", kind)
    spec = Quantiles(4, within=(0, 10**6), grid=64, scale=scale)
    grid = learn.grid_binning(Binning(col, 5, Fraction(0), Fraction(10**6), learn=spec))
    edges = list(grid.edges)
    assert edges == sorted(set(edges)) and edges[0] > 0 and edges[-1] < 10**6
    assert grid.cells == len(edges) + 2
    if kind is ColumnKind.INTEGER:
        assert all(e.denominator == 1 for e in edges)
    if scale == "linear":
        assert len(edges) == 63 and edges[0] == Fraction(10**6, 64)
    else:  # geometric: the first cell is about 2^-20 of the range, the last about half
        assert edges[0] < 10**6 * 2.0**-19 and edges[-1] < 10**6 * 0.99
        assert edges[-1] - edges[-2] > 100 * (edges[1] - edges[0])


def _cells_in_duckdb(binning: Binning, values: list[object], sql_type: str) -> list[int]:
    engine = DuckDBEngine()
    expr = binning.expression(engine.capabilities).sql(dialect="duckdb")
    con = duckdb.connect()
    con.execute(f"CREATE TABLE v (i INTEGER, x {sql_type})")
    con.executemany("INSERT INTO v VALUES (?, ?)", list(enumerate(values)))
    rows = con.execute(f"SELECT i, {expr} FROM v AS __t ORDER BY i").fetchall()
    return [int(c) for _, c in rows]


def test_edge_binning_puts_every_value_in_its_cell() -> None:
    col = Column("x", "DOUBLE", ColumnKind.REAL)
    edges = (Fraction(1), Fraction(5, 2), Fraction(7), Fraction(100))
    b = Binning(col, 6, Fraction(0), Fraction(1000), edges=edges)
    values: list[object] = [
        -1e308, -math.inf, -1.0, 0.0, -0.0, 0.5, 1.0, 2.4999, 2.5, 6.9, 7.0, 99.9, 100.0,
        999.0, 1000.0, 5e9, math.inf, math.nan, None,
    ]  # fmt: skip
    expected = [
        5 if v is None or (isinstance(v, float) and math.isnan(v))
        else bisect.bisect_right([float(e) for e in edges], float(v))  # type: ignore[arg-type]
        for v in values
    ]  # fmt: skip
    assert _cells_in_duckdb(b, values, "DOUBLE") == expected
    # Integers: bins [0, 3], [4, 9], [10, 10], [11, 20] and NULL.
    icol = Column("x", "BIGINT", ColumnKind.INTEGER)
    ib = Binning(
        icol, 5, Fraction(0), Fraction(20), edges=(Fraction(4), Fraction(10), Fraction(11))
    )
    ivalues: list[object] = [-(2**63), -1, 0, 3, 4, 9, 10, 11, 20, 21, 2**63 - 1, None]
    assert _cells_in_duckdb(ib, ivalues, "BIGINT") == [0, 0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4]
    assert [tuple(map(int, ib.bin_range(c))) for c in range(4)] == [
        (0, 3),
        (4, 9),
        (10, 10),
        (11, 20),
    ]
    drawn = ib.decode(np.array([0, 1, 2, 3, 4] * 200), SeededRandom(1)).to_pylist()
    for c, v in zip([0, 1, 2, 3, 4] * 200, drawn, strict=True):
        if c == 4:
            assert v is None
        else:
            low, high = ib.bin_range(c)
            assert low <= v <= high


def test_quantile_edges_without_noise_are_the_grid_quantiles() -> None:
    col = Column("x", "DOUBLE", ColumnKind.REAL)
    spec = Quantiles(4, within=(0, 100), grid=100)
    grid = learn.grid_binning(Binning(col, 5, Fraction(0), Fraction(100), learn=spec))
    counts = np.zeros(100, dtype=np.int64)
    counts[[10, 30, 50, 70]] = 25  # a quarter of the rows in each of four grid cells
    assert learn.quantile_edges(counts, grid, 4) == tuple(map(Fraction, (11, 31, 51)))
    assert learn.quantile_edges(-counts, grid, 4) == tuple(
        map(Fraction, (25, 50, 75))
    )  # nothing: equal steps
    assert learn.quantile_edges(counts, grid, 1) == ()


# -- the mechanisms' inputs -------------------------------------------------------------------


def test_histogram_and_units_equal_pandas_and_move_by_at_most_r(tmp_path: Path) -> None:
    frame = _people()
    intruder = pd.DataFrame(
        {"pid": 10**6, "income": 5e4, "years": 7, "city": [f"new{i}" for i in range(9)]}
    )
    got = []
    for extra in (False, True):
        s = _session(tmp_path, f"in{extra}")
        _add(s, pd.concat([frame, intruder]) if extra else frame, max_rows=50)
        info = s.tables["t"]
        bins: Any = {"income": Quantiles(4, within=(0, 2e5), grid=64), "city": SelectKeys(10)}
        disc = discretize(info, ["income", "city"], bins)
        engine, binding = s._engines["t"], s._bindings["t"]
        got.append(
            learn.exact_domain(
                engine, binding, disc, unit=info.column("pid"), max_rows=50, key=12345
            )
        )
        if not extra:  # max_rows above everyone's rows: nothing is cut
            grid = got[0].grids["income"]
            ends = [float(e) for e in grid.edges]
            cells = np.searchsorted(ends, np.clip(frame["income"], 0, 2e5), side="right")
            assert np.array_equal(got[0].histograms["income"], np.bincount(cells, minlength=64))
            units = dict(zip(got[0].keys["city"].to_pylist(), got[0].units["city"], strict=True))
            assert units == frame.groupby("city")["pid"].nunique().to_dict()
    # With max_rows = R the intruder's nine rows count R times: the histogram moves by R.
    moved = []
    for extra in (False, True):
        s = _session(tmp_path, f"r{extra}")
        _add(s, pd.concat([frame, intruder]) if extra else frame)
        info = s.tables["t"]
        disc = discretize(info, ["income", "city"], {"income": Quantiles(4, within=(0, 2e5)),
                                                     "city": SelectKeys(10)})  # fmt: skip
        ex = learn.exact_domain(s._engines["t"], s._bindings["t"], disc,
                                unit=info.column("pid"), max_rows=R, key=99)  # fmt: skip
        moved.append(ex)
    diff = moved[1].histograms["income"] - moved[0].histograms["income"]
    assert int(np.abs(diff).sum()) == R and int(np.count_nonzero(diff)) == 1
    new = [k for k in moved[1].keys["city"].to_pylist() if k.startswith("new")]
    assert len(new) == R  # at most max_rows keys: the selection's max_groups
    assert sorted(moved[0].units["city"]) == sorted(
        u for k, u in zip(moved[1].keys["city"].to_pylist(), moved[1].units["city"], strict=True)
        if not k.startswith("new")
    )  # fmt: skip


def test_mechanisms_are_called_with_the_planned_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: dict[str, Any] = {}
    real_dg, real_select = learn.discrete_gaussian, partition.select  # type: ignore[attr-defined]

    def spy_dg(values: Any, **kw: Any) -> Any:
        calls.setdefault("dg", []).append(kw)
        return real_dg(values, **kw)

    def spy_select(units: Any, **kw: Any) -> Any:
        calls.setdefault("select", []).append(kw)
        return real_select(units, **kw)

    monkeypatch.setattr(learn, "discrete_gaussian", spy_dg)
    monkeypatch.setattr(partition, "select", spy_select)
    s = _session(tmp_path, "spy")
    _add(s, _people())
    out = s.synthesize("t", columns=["income", "city", "years"], epsilon=2, delta=1e-6,
                       method="mst", bins=cast(Any, {"income": Quantiles(5, within=(0, 1e6), scale="log"),
                                           "city": SelectKeys(), "years": 6}))  # fmt: skip
    rho = zcdp_rho_cap(Fraction(2), Fraction(1, 2 * 10**6))
    each = rho / 10 / 2
    assert [c["rho"] for c in calls["dg"]] == [each] and calls["dg"][0]["sensitivity"] == R
    (sel,) = calls["select"]
    assert sel["max_groups"] == R and sel["delta"] == Fraction(1, 2 * 10**6)
    assert sel["epsilon"] ** 2 / 2 <= each < sel["epsilon"] ** 2 / 2 * (1 + 1e-12)
    kinds = [e.kind for e in out.events]
    assert kinds[:2] == ["bins", "keys"] and out.events[0].sigma == pytest.approx(
        R / math.sqrt(2 * float(each))
    )
    assert out.discretization.binning("city").keys == ("a", "b", "c", "d")
    assert 2 <= out.discretization.binning("income").cells <= 6


# -- the charge -------------------------------------------------------------------------------


@pytest.mark.parametrize("accountant", ["basic", "zcdp"])
@pytest.mark.parametrize("select", [False, True])
def test_the_charge_equals_the_composed_measurements(
    tmp_path: Path, accountant: str, select: bool
) -> None:
    s = _session(tmp_path, f"c{accountant}{select}",
                 accountant=ZCDPAccountant(delta_share=Fraction(1, 2)) if accountant == "zcdp"
                 else "basic")  # fmt: skip
    _add(s, _people())
    bins: dict[str, Any] = {"income": Quantiles(4, within=(0, 1e6)), "years": Quantiles(3)}
    if select:
        bins["city"] = SelectKeys()
    eps, dlt = Fraction(3, 2), Fraction(1, 10**6)
    out = s.synthesize("t", columns=["income", "years", "city"] if select else
                       ["income", "years"], epsilon=eps, delta=dlt, method="mst",
                       bins=bins)  # fmt: skip
    (charge,) = s.budget.history
    rho_events = sum((e.rho for e in out.events), Fraction(0))
    delta_events = sum((e.delta or Fraction(0) for e in out.events), Fraction(0))
    assert rho_events <= out.rho and float(rho_events) == pytest.approx(float(out.rho), rel=1e-9)
    if select:
        # δ_sel-approximately ρ-zCDP → (ε(ρ, δ − δ_sel), δ): exactly the (ε, δ) charged,
        # under both accountants (the zCDP one counts it as (ε²/2, δ)).
        assert charge.loss == EpsilonDelta(epsilon=eps, delta=dlt) == out.loss
        assert delta_events == dlt / 2
        assert zcdp_epsilon(rho_events, dlt - delta_events) <= eps
        assert out.rho == zcdp_rho_cap(eps, dlt / 2)
    elif accountant == "zcdp":
        assert charge.loss == Rho(rho=out.rho) and delta_events == 0
        assert out.rho == zcdp_rho_cap(eps, dlt)
    else:
        assert charge.loss == EpsilonDelta(epsilon=eps, delta=dlt) and delta_events == 0
        assert zcdp_epsilon(rho_events, dlt) <= eps
    domain_rho = sum((e.rho for e in out.events if e.kind in ("bins", "keys")), Fraction(0))
    assert domain_rho <= out.rho / 10 and float(domain_rho) == pytest.approx(
        float(out.rho / 10), rel=1e-12
    )


# -- refusals ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bins", "budget", "kwargs", "error", "words"),
    [
        ({}, None, {}, UnsafeQuery, "Quantiles(n, within=(lo, hi))"),
        ({"income": Quantiles(4)}, None, {}, UnsafeQuery, "search range"),
        ({"income": 8}, None, {}, UnsafeQuery, "no declared bounds"),
        (
            {"income": Quantiles(4, within=(0, 1)), "city": SelectKeys()},
            Rho(rho=1),
            {"rho": 0.5},
            InvalidParameter,
            "δ > 0",
        ),
        (
            {"income": Quantiles(4, within=(0, 1)), "city": SelectKeys()},
            None,
            {"rho": 0.5},
            InvalidParameter,
            "delta=",
        ),
        ({"income": SelectKeys()}, None, {}, InvalidParameter, "text or integer"),
        (
            {"income": Quantiles(3, within=(0, 1)), "city": Quantiles(3, within=(0, 1))},
            None,
            {},
            InvalidParameter,
            "numeric column",
        ),
        ({"nope": 3}, None, {}, InvalidParameter, "not a column"),
    ],
)
def test_refusals_are_public_and_free(
    tmp_path: Path, bins: dict[str, Any], budget: Any, kwargs: dict[str, Any],
    error: type[Exception], words: str,
) -> None:  # fmt: skip
    s = _session(tmp_path, "ref", **({"budget": budget} if budget else {}))
    _add(s, _people())
    args = kwargs or {"epsilon": 1, "delta": 1e-6}
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        s.synthesize("t", columns=["income", "city"], bins=cast(Any, {"city": SelectKeys(), **bins}),
                     method="mst", **args)  # fmt: skip
    assert s.budget.history == []


def test_more_keys_than_max_keys_keeps_a_random_subset(tmp_path: Path) -> None:
    frame = _people(4000)
    frame["city"] = np.arange(len(frame)) % 8
    s = _session(tmp_path, "sub")
    s.add_table("t", frame, privacy_unit="pid", max_groups=1, max_rows=R)
    out = s.synthesize("t", columns=["city"], epsilon=10, delta=1e-6, method="mst",
                       bins=cast(Any, {"city": SelectKeys(3)}))  # fmt: skip
    keys = out.discretization.binning("city").keys
    assert len(keys) == 3 and set(keys) <= set(range(8)) and list(keys) == sorted(cast(Any, keys))
    assert out.to_pandas()["city"].dtype == pd.Int64Dtype()


# -- accuracy ---------------------------------------------------------------------------------

N_ACC = 20_000
EPS_ACC = Fraction(8)
DELTA_ACC = Fraction(4, 10**9)
Z = 6.5
"""Every sum ``S`` of ``i`` independent discrete Gaussians of parameter σ² is σ²i-subgaussian
(Canonne, Kamath & Steinke 2020, Prop. 10 / Cor. 9), so ``P(|S| > Z·√i·σ) ≤ 2e^(−Z²/2) =
1.4e-9``; over the 255 prefix sums and the total, at most 3.6e-7. With the key check (2e-7,
below) the test fails for a correct release with probability below 1e-6."""


def _accuracy_release(tmp_path: Path) -> tuple[Any, pd.DataFrame]:
    rng = np.random.default_rng(11)
    common = [f"c{i}" for i in range(5)]
    rare = [f"r{i}" for i in range(100)]
    frame = pd.DataFrame(
        {
            "pid": np.arange(N_ACC),
            "income": rng.lognormal(10, 1, N_ACC),
            "city": np.r_[rng.choice(common, N_ACC - 100), rare],  # each rare key: one person
        }
    )
    s = _session(tmp_path, "acc", seed=4)
    s.add_table("t", frame, privacy_unit="pid", max_groups=1, max_rows=1)
    out = s.synthesize("t", columns=["income", "city"], epsilon=EPS_ACC, delta=DELTA_ACC,
                       method="mst", bins=cast(Any, {"income": Quantiles(8, within=(0, 1e7),
                                                               scale="log"),
                                           "city": SelectKeys()}))  # fmt: skip
    return out, frame


def _ranks_within(edges: list[float], values: np.ndarray, n: int, tol: float) -> bool:
    ranks = [float(np.mean(values < e)) for e in edges]
    return len(edges) == n - 1 and all(
        abs(r - j / n) <= tol for j, r in zip(range(1, n), ranks, strict=True)
    )


def test_quantile_bins_are_near_the_true_quantiles_and_keys_are_selected(
    tmp_path: Path,
) -> None:
    out, frame = _accuracy_release(tmp_path)
    income = out.discretization.binning("income")
    event = next(e for e in out.events if e.kind == "bins")
    assert event.sigma is not None
    # Each prefix sum of the noisy grid is off by at most Z·√256·σ, the total by Z·√256·σ:
    # the edge's rank is within one grid cell's mass (at most the largest cell's share, 4%
    # on this log grid) plus 2·Z·16·σ/N of j/n.
    grid = learn.grid_binning(discretize(out_table_info(tmp_path, frame), ["income"],
                                         {"income": Quantiles(8, within=(0, 1e7),
                                                              scale="log")}).binnings[0])  # fmt: skip
    ends = [float(e) for e in grid.edges]
    cells = np.bincount(np.searchsorted(ends, frame["income"], side="right"), minlength=256)
    tol = cells.max() / N_ACC + 2 * Z * 16 * event.sigma / N_ACC
    assert tol < 0.07
    edges = [float(e) for e in income.edges]
    assert _ranks_within(edges, frame["income"].to_numpy(), 8, tol), (edges, tol)
    # Negative control: equal-width bins over the same range miss the quantiles.
    control = [1e7 * j / 8 for j in range(1, 8)]
    assert not _ranks_within(control, frame["income"].to_numpy(), 8, tol)
    # Keys: the five common keys have > 3,000 persons each, kept with probability 1 (π(n) = 1
    # from certain_from on); each of the 100 one-person keys is kept with probability
    # ≤ δ_c = 2e-9, so any is kept with probability ≤ 2e-7.
    keys = set(out.discretization.binning("city").keys)
    plan_eps = next(e for e in out.events if e.kind == "keys").epsilon
    assert plan_eps is not None
    table = partition.keep_probabilities(plan_eps, DELTA_ACC / 2)
    assert table.certain_from < 3000
    assert _kept_common_dropped_rare(keys)
    # Negative control: keeping every observed key (no selection) fails the same check.
    assert not _kept_common_dropped_rare(set(frame["city"]))


def _kept_common_dropped_rare(keys: set[str]) -> bool:
    return {f"c{i}" for i in range(5)} <= keys and not any(k.startswith("r") for k in keys)


def out_table_info(tmp_path: Path, frame: pd.DataFrame) -> Any:
    s = _session(tmp_path, "info")
    s.add_table("t", frame, privacy_unit="pid", max_groups=1, max_rows=1)
    return s.tables["t"]


def test_an_engine_failure_after_the_charge_keeps_it_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import deniable.synth.release as release
    from deniable.errors import EngineError

    real = release.exact_marginals  # type: ignore[attr-defined]

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise EngineError("out of memory")

    s = _session(tmp_path, "fail")
    _add(s, _people())
    monkeypatch.setattr(release, "exact_marginals", fails)
    with pytest.raises(EngineError):
        s.synthesize("t", columns=["income", "years"], epsilon=1, delta=1e-6, method="mst",
                     bins=cast(Any, {"income": Quantiles(4, within=(0, 1e6))}))  # fmt: skip
    (charge,) = s.budget.history  # the domain was measured: the charge stays
    stored = s._ledger.answer_for(charge.id)
    assert stored is not None and json.loads(stored)["failed_after_charge"] == "marginals"
    # Without a measured domain the marginals come before the charge: nothing is spent.
    with pytest.raises(EngineError):
        s.synthesize("t", columns=["years"], epsilon=1, delta=1e-6, method="mst")
    assert len(s.budget.history) == 1
    monkeypatch.setattr(release, "exact_marginals", real)


def test_marginals_counted_in_several_statements_equal_one_statement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many candidates (AIM on 40 columns) are counted in chunks of grouping sets; every chunk
    bounds each person under the same key, so the marginals are those of one statement."""
    import itertools

    import deniable.synth.measure as measure

    s = _session(tmp_path, "chunks")
    _add(s, _people())
    info = s.tables["t"]
    disc = discretize(info, ["years", "city"], cast(Any, {"city": SelectKeys(4)}))
    disc = disc.replace({"city": Binning(info.column("city"), 4, keys=("a", "b", "c"))})
    cliques = [c for k in (1, 2) for c in itertools.combinations(disc.names, k)]
    args: Any = {"unit": info.column("pid"), "max_rows": 1, "key": 4242}
    whole = measure.exact_marginals(s._engines["t"], s._bindings["t"], disc, cliques, **args)
    monkeypatch.setattr(measure, "MAX_SETS_PER_STATEMENT", 1)
    parts = measure.exact_marginals(s._engines["t"], s._bindings["t"], disc, cliques, **args)
    assert whole.keys() == parts.keys()
    for c in whole:
        np.testing.assert_array_equal(whole[c], parts[c])

"""Clamping ranges chosen by expected error (issue 21 §2): grid, statement, choice, flow."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from click.testing import CliRunner

from deniable import ROW
from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.cli.main import main as cli
from deniable.curator import clamps as clamps_module
from deniable.curator.clamps import choose_clamps, exact_value_counts, value_edges
from deniable.curator.session import Session
from deniable.errors import BudgetExceeded, InvalidParameter, UtilityWarning
from deniable.noise.testing import SeededRandom

F64 = npt.NDArray[np.float64]


def _bins(values: F64, edges: tuple[float, ...]) -> npt.NDArray[np.int64]:
    """The reference binning: bin i holds edges[i] ≤ v < edges[i+1], ends open."""
    inner = np.asarray(edges[1:-1])
    idx = np.searchsorted(inner, values, side="right")
    return np.bincount(idx, minlength=len(edges) - 1).astype(np.int64)


def test_value_edges_are_a_public_grid_over_the_range() -> None:
    for low, high in [(0.0, 1e6), (-50.0, 200.0), (10.0, 20.0), (-9.0, -1.0)]:
        e = value_edges(low, high)
        assert e[0] == low and e[-1] == high
        assert all(a < b for a, b in itertools.pairwise(e))
        origin = 0.0 if low <= 0 <= high else (low if low > 0 else high)
        assert origin in e
    # quarter octaves towards the origin: the top bin of (0, 1e6) is [1e6·2^-1/4, 1e6)
    assert value_edges(0.0, 1e6)[-2] == pytest.approx(1e6 * 2 ** (-1 / 4))
    for bad in [(1.0, 1.0), (2.0, 1.0), (0.0, math.inf), (math.nan, 1.0)]:
        with pytest.raises(InvalidParameter, match="low < high"):
            value_edges(*bad)


def _people(seed: int, people: int = 300) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = rng.integers(1, 9, people)
    uid = np.repeat(np.arange(people), n)
    v = np.round(rng.lognormal(4, 1.5, uid.size) * rng.choice([-1, 1], uid.size, p=[0.2, 0.8]), 2)
    return pd.DataFrame({"uid": uid, "v": v})


def _session(tmp_path: Path, frame: pd.DataFrame, name: str = "c") -> Session:
    tmp_path.mkdir(parents=True, exist_ok=True)
    s = Session(budget=Epsilon(epsilon=100), ledger=tmp_path / f"{name}.db")
    s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1)
    return s


def test_statement_counts_every_row_like_the_reference(tmp_path: Path) -> None:
    """With room for every row, the engine's counts are the reference binning (DuckDB)."""
    frame = _people(1)
    frame.loc[3, "v"] = None  # a NULL value counts nowhere
    frame.loc[5, "v"] = 5e9  # beyond the range: the top bin
    frame.loc[7, "v"] = -5e9  # below it: the bottom bin
    s = _session(tmp_path, frame)
    edges = value_edges(-1e4, 1e6)
    got = exact_value_counts(
        s._engines["t"], s._bindings["t"], s._tables["t"].column("uid"), "v", edges, rows=100, key=7
    )
    want = _bins(frame["v"].dropna().to_numpy(), edges)
    np.testing.assert_array_equal(got, want)


def test_statement_keeps_at_most_k_rows_a_person(tmp_path: Path) -> None:
    frame = _people(2)
    s = _session(tmp_path, frame)
    edges = value_edges(-1e4, 1e6)
    args = (s._engines["t"], s._bindings["t"], s._tables["t"].column("uid"), "v", edges)
    per_person = frame.groupby("uid").size().to_numpy()
    for k in (1, 3):
        seen = set()
        for key in range(3):
            got = exact_value_counts(*args, rows=k, key=key)
            assert got.sum() == np.minimum(per_person, k).sum()
            seen.add(tuple(got))
        assert len(seen) > 1  # the key changes which rows are kept


def test_one_person_moves_a_histogram_by_at_most_k(tmp_path: Path) -> None:
    """The sensitivity: D vs D plus one person with many extreme, NaN and NULL values."""
    base = _people(3)
    extreme = [1e300, -1e300, math.inf, -math.inf, math.nan, None, 0.0, -0.0, 1e6, 3.5] * 30
    extra = pd.DataFrame({"uid": 10_000, "v": extreme})
    s1 = _session(tmp_path, base, "a")
    s2 = _session(tmp_path, pd.concat([base, extra], ignore_index=True), "b")
    edges = value_edges(-1e4, 1e6)
    for k in (1, 25):
        for key in range(3):
            d1 = exact_value_counts(
                s1._engines["t"], s1._bindings["t"], s1._tables["t"].column("uid"), "v", edges,
                rows=k, key=key,
            )  # fmt: skip
            d2 = exact_value_counts(
                s2._engines["t"], s2._bindings["t"], s2._tables["t"].column("uid"), "v", edges,
                rows=k, key=key,
            )  # fmt: skip
            diff = d2 - d1
            assert (diff >= 0).all() and 0 < int(diff.sum()) <= k


def _exact_error(v: F64, g: npt.NDArray[np.int64], low: float, high: float, eps: float) -> float:
    """The true RMSE per group of SUM(v) clamped to [low, high] at ε (one row a person)."""
    out = 0.0
    groups = np.unique(g)
    for k in groups:
        x = v[g == k]
        bias = float((np.clip(x, low, high) - x).sum())
        out += bias**2 + 2 * (max(abs(low), abs(high)) / eps) ** 2
    return math.sqrt(out / len(groups))


def _one_row_each(seed: int, people: int = 20_000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 4, people)
    return pd.DataFrame({"uid": np.arange(people), "g": g, "v": rng.lognormal(5 + 0.3 * g, 1.0)})


def test_the_choice_is_near_the_best_range_in_hindsight(tmp_path: Path) -> None:
    """Accuracy: with a well-measured histogram the chosen SUM range is within 1.2× of the
    best range on the grid (exact errors); the previous 5%/95% quantile proposal is not."""
    frame = _one_row_each(4)
    s = Session(budget=Epsilon(epsilon=1000), ledger=tmp_path / "acc.db", source=SeededRandom(4))
    s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1)
    report = s.tune("t", epsilon=200, group_by=["g"], groups=4, clamps={"v": (0, 1e6)})
    low, high = report.clamps["v"]
    v, g = frame["v"].to_numpy(), frame["g"].to_numpy()
    edges = np.asarray(value_edges(0.0, 1e6))
    median = float(np.median(v))
    best = min(
        _exact_error(v, g, float(lo), float(hi), 1.0)
        for lo in edges[edges <= median][::2]
        for hi in edges[edges >= median]
    )
    chosen = _exact_error(v, g, low, high, 1.0)
    assert chosen <= 1.2 * best, (chosen, best, low, high)
    q_lo, q_hi = np.quantile(v, [0.05, 0.95])
    assert _exact_error(v, g, q_lo, q_hi, 1.0) > 1.5 * chosen


def _histogram(
    values: F64, low: float, high: float, epsilon: float
) -> clamps_module.ValueHistogram:
    edges = value_edges(low, high)
    exact = _bins(values, edges)
    release = clamps_module.release_value_counts(exact, 1, Fraction(epsilon), SeededRandom(1))
    return clamps_module.ValueHistogram(
        "v", (low, high), edges, np.asarray(release.value, dtype=np.int64), release, 1
    )


def test_the_ends_of_the_range_do_not_cancel() -> None:
    """With almost no noise to pay for, the chosen range holds the data: clamping both ends so
    that raised and lowered values cancel in the total is no answer (a control for the sign)."""
    values = np.random.default_rng(5).uniform(20, 80, 10_000)
    h = _histogram(values, 0.0, 150.0, 50.0)
    workloads: tuple[clamps_module.Workload, ...] = ("sum", "avg")
    for workload in workloads:
        best = choose_clamps(h, workload=workload, epsilon=1e6, max_groups=1, max_rows=1)[0]
        assert best.low <= 20 and best.high >= 80, best
        assert best.bias < 1e-9 * (1 if workload == "avg" else 1e4)


def test_more_noise_means_a_tighter_range() -> None:
    values = np.random.default_rng(6).lognormal(5, 1.0, 20_000)
    h = _histogram(values, 0.0, 1e6, 10.0)
    highs = [
        choose_clamps(h, workload="sum", epsilon=e, max_groups=1, max_rows=1)[0].high
        for e in (0.01, 1.0, 100.0)
    ]
    assert highs[0] < highs[1] < highs[2]
    # and more rows a person (more noise a row) also tightens it
    wide = choose_clamps(h, workload="sum", epsilon=1, max_groups=1, max_rows=1)[0].high
    tight = choose_clamps(h, workload="sum", epsilon=1, max_groups=4, max_rows=8)[0].high
    assert tight < wide


def test_noise_alone_in_far_bins_does_not_widen_the_range() -> None:
    """Values in [10, 20] of a (0, 1e9) search range: the far bins hold only noise and the
    proposal stays at the data (over 20 releases)."""
    values = np.random.default_rng(7).uniform(10, 20, 5_000)
    edges = value_edges(0.0, 1e9)
    exact = _bins(values, edges)
    for seed in range(20):
        release = clamps_module.release_value_counts(exact, 1, Fraction(1, 2), SeededRandom(seed))
        h = clamps_module.ValueHistogram(
            "v", (0.0, 1e9), edges, np.asarray(release.value, dtype=np.int64), release, 1
        )
        best = choose_clamps(h, workload="avg", epsilon=1, max_groups=1, max_rows=1)[0]
        assert best.high < 40, (seed, best)


def test_a_histogram_that_shows_nothing_proposes_the_search_range_and_warns() -> None:
    """30 values at ε = 0.05: no bin stands out of the noise (in all 20 releases). Without
    the rule the narrowest range looked free of bias and won (the control: it is not the
    search range)."""
    values = np.random.default_rng(8).lognormal(5, 1.0, 30)
    edges = value_edges(0.0, 1e6)
    exact = _bins(values, edges)
    for seed in range(20):
        release = clamps_module.release_value_counts(exact, 1, Fraction(1, 20), SeededRandom(seed))
        h = clamps_module.ValueHistogram(
            "v", (0.0, 1e6), edges, np.asarray(release.value, dtype=np.int64), release, 1
        )
        assert not np.any(h.modelled() > 0), seed  # nothing detected: the case under test
        with pytest.warns(UtilityWarning, match="no bin above its noise"):
            ranked = choose_clamps(h, workload="sum", epsilon=1, max_groups=1, max_rows=1)
        assert (ranked[0].low, ranked[0].high) == (0.0, 1e6)
        by_error = min(ranked, key=lambda c: (c.error, c.high - c.low))
        assert by_error.high - by_error.low < 1e6  # the control: the model alone picks a sliver


def test_choose_clamps_refuses_bad_parameters() -> None:
    h = _histogram(np.arange(100.0), 0.0, 200.0, 1.0)
    with pytest.raises(InvalidParameter, match='"sum" or "avg"'):
        choose_clamps(h, workload="median", epsilon=1, max_groups=1, max_rows=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="epsilon"):
        choose_clamps(h, workload="sum", epsilon=0, max_groups=1, max_rows=1)
    with pytest.raises(InvalidParameter, match="max_rows"):
        choose_clamps(h, workload="sum", epsilon=1, max_groups=1, max_rows=0)


def test_tune_with_clamps_charges_then_reports_and_applies(tmp_path: Path) -> None:
    frame = _one_row_each(8, people=4000)
    s = Session(budget=EpsilonDelta(epsilon=10, delta=0), ledger=tmp_path / "f.db")
    s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1)
    report = s.tune(
        "t", epsilon=2, group_by=["g"], groups=4, clamps={"v": (0, 1e6)},
        clamp_workload="avg", apply=True,
    )  # fmt: skip
    assert s.budget.spent == EpsilonDelta(epsilon=2, delta=0)  # two charges, ε/2 each
    charges = s._ledger.history(s._dataset)
    assert len(charges) == 2 and {c.loss for c in charges} == {Epsilon(epsilon=1)}
    low, high = report.clamps["v"]
    assert report.clamp_workload == "avg"
    assert report.clamp_choices["v"][0].low == low
    bounds = s.tables["t"].policy.bounds["v"]
    assert (float(bounds.lower), float(bounds.upper)) == pytest.approx((low, high))
    table = report.clamp_table("v")
    assert table["chosen"].sum() == 1 and list(table.columns)[:2] == ["low", "high"]
    fig = report.plot_clamps("v")
    assert "best: v in" in fig.axes[0].get_title()
    with pytest.raises(InvalidParameter, match="no clamps were tuned for 'g'"):
        report.clamp_table("g")


def test_tune_refuses_bad_clamps_before_spending(tmp_path: Path) -> None:
    frame = _one_row_each(9, people=500)
    frame["name"] = "x"
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "r.db")
    s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1)
    with pytest.raises(InvalidParameter, match="low < high"):
        s.tune("t", epsilon=0.5, clamps={"v": (10, 1)})
    with pytest.raises(InvalidParameter, match="not numeric"):
        s.tune("t", epsilon=0.5, clamps={"name": (0, 1)})
    with pytest.raises(InvalidParameter, match='"sum" or "avg"'):
        s.tune("t", epsilon=0.5, clamps={"v": (0, 1)}, clamp_workload="max")  # type: ignore[arg-type]
    with pytest.raises(BudgetExceeded, match="nothing was spent"):
        s.tune("t", epsilon=2, clamps={"v": (0, 1)})
    assert s.budget.spent == Epsilon(epsilon=0)


def test_tune_checks_the_whole_budget_before_the_engine_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refusal depends on the ledger only: the engine is never asked."""
    frame = _one_row_each(10, people=500)
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "b.db")
    s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1)

    def boom(*_: object, **__: object) -> None:
        raise AssertionError("the engine ran before the refusal")

    monkeypatch.setattr(clamps_module, "exact_value_counts", boom)
    monkeypatch.setattr("deniable.curator.tune.exact_histograms", boom)
    with pytest.raises(BudgetExceeded):
        s.tune("t", epsilon=1.5, clamps={"v": (0, 10)})


def test_cli_tune_proposes_clamps(tmp_path: Path) -> None:
    frame = _one_row_each(11, people=3000)
    data = tmp_path / "bills.csv"
    frame.to_csv(data, index=False)
    ledger = tmp_path / "l.db"
    args = ["tune", "--data", str(data), "--unit", "uid", "--group-by", "g", "--groups", "4",
            "--epsilon", "1", "--ledger", str(ledger), "--budget", "5"]  # fmt: skip
    run = CliRunner().invoke(cli, [*args, "--clamp", "v=0:1000000", "--json"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.output)
    assert out["charged"] == {"epsilon": "1"}
    proposal = out["clamps"]["v"]
    assert proposal["workload"] == "sum" and proposal["low"] < proposal["high"]
    assert any(row["chosen"] for row in proposal["trade_off"])
    text = CliRunner().invoke(cli, [*args, "--clamp", "v=0:1000000", "--clamp-workload", "avg"])
    assert text.exit_code == 0, text.output
    assert "clamping range for v:" in text.output and "AVG(v)" in text.output
    assert "--bounds v=" in text.output
    bad = CliRunner().invoke(cli, [*args, "--clamp", "v=0-10"])
    assert bad.exit_code == 2 and "--clamp" in bad.output and "COLUMN=LOWER:UPPER" in bad.output


def test_values_on_the_edges_fall_in_the_reference_bins(tmp_path: Path) -> None:
    """Every edge and the double just below it: the engine's CASE tree agrees with the
    reference binning exactly (edges are compared as doubles, not rounded text)."""
    edges = value_edges(-10.0, 1000.0)
    probes = np.array([*edges, *np.nextafter(np.array(edges), -np.inf), -1e9, 1e9])
    frame = pd.DataFrame({"uid": np.arange(probes.size), "v": probes})
    s = _session(tmp_path, frame)
    got = exact_value_counts(
        s._engines["t"], s._bindings["t"], s._tables["t"].column("uid"), "v", edges, rows=1, key=3
    )
    np.testing.assert_array_equal(got, _bins(probes, edges))


def test_the_exact_clamp_analysis_matches_the_data(tmp_path: Path) -> None:
    """NON-PRIVATE: shares clamped at grid edges are exact; ranges hold what they say."""
    frame = _one_row_each(12, people=5000)
    s = _session(tmp_path, frame)
    analysis = s.clamp_analysis("t", "v", (0, 1e6))
    v = frame["v"].to_numpy()
    assert analysis.non_private and analysis.values == v.size
    edges = analysis.edges
    for lo, hi in [(edges[0], edges[-1]), (edges[100], edges[115]), (edges[90], edges[120])]:
        want = float(((v < lo) | (v >= hi)).mean())
        assert analysis.clamped_share(lo, hi) == pytest.approx(want)
    for share, lo, hi in analysis.ranges():
        assert float(((v < lo) | (v >= hi)).mean()) <= share + 1e-12
    frame["name"] = "x"
    named = _session(tmp_path / "n", frame)
    with pytest.raises(InvalidParameter, match="not numeric"):
        named.clamp_analysis("t", "name", (0, 1))
    rows = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "rows.db")
    rows.add_table("t", frame[["v"]], privacy_unit=ROW)
    assert rows.clamp_analysis("t", "v", (0, 1e6)).values == v.size  # no unit: every row


def test_cli_non_private_clamp_analysis(tmp_path: Path) -> None:
    frame = _one_row_each(13, people=2000)
    data = tmp_path / "bills.csv"
    frame.to_csv(data, index=False)
    args = ["tune", "--data", str(data), "--unit", "uid", "--non-private", "--clamp", "v=0:1000000"]
    run = CliRunner().invoke(cli, [*args, "--json"])
    assert run.exit_code == 0, run.output
    out = json.loads(run.output)
    assert out["non_private"] is True
    assert [r["share_clamped"] for r in out["clamps"]["v"]] == list(clamps_module.SHARES)
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0 and "NON-PRIVATE: the narrowest clamping range of v" in text.output


def test_fit_tail_recovers_a_heavy_tail_a_curved_tail_and_a_cliff() -> None:
    """The fitted curve's mass 8+ bins past the shoulder is within 25% of the truth for a
    power-law tail (Pareto, index 1.5: r = 0.77 a bin) and a log-quadratic one (lognormal),
    from counts noised at ε = 1/4 (sd 5.7 a bin, above most of these bins' counts); a tail
    that ends at once (bounded values) gets less than one row past its shoulder."""
    j = np.arange(80)
    tails = {
        "power law": np.round(300 * 0.77**j),
        "log-quadratic": np.round(300 * np.exp(-0.25 * j - 0.02 * j * j)),
    }
    for seed in range(3):
        for name, true in tails.items():
            noisy = _noisy(true.astype(np.int64), seed)
            got = float(clamps_module.fit_tail(noisy)[8:].sum())
            assert got == pytest.approx(float(true[8:].sum()), rel=0.25), (name, seed, got)
        cliff = _noisy(np.where(j < 1, 300, 0).astype(np.int64), seed)
        assert float(clamps_module.fit_tail(cliff)[1:].sum()) < 1.0


def _noisy(exact: npt.NDArray[np.int64], seed: int) -> npt.NDArray[np.int64]:
    release = clamps_module.release_value_counts(exact, 1, Fraction(1, 4), SeededRandom(seed))
    return np.asarray(release.value, dtype=np.int64)


def _sum_errors(
    v: F64, g: npt.NDArray[np.int64], lows: F64, highs: F64, eps: float
) -> npt.NDArray[np.float64]:
    """Exact RMSE per group of SUM(v) clamped to each (lows[i], highs[i]), by prefix sums."""
    out = np.zeros(lows.size)
    groups = np.unique(g)
    for k in groups:
        x = np.sort(v[g == k])
        cum = np.concatenate([[0.0], np.cumsum(x)])
        below = np.searchsorted(x, lows)  # values raised to the low end
        above = np.searchsorted(x, highs)  # values from here on are lowered to the high end
        raised = lows * below - cum[below]
        lowered = (cum[-1] - cum[above]) - highs * (x.size - above)
        out += (raised - lowered) ** 2 + 2 * (np.maximum(np.abs(lows), np.abs(highs)) / eps) ** 2
    return np.sqrt(out / groups.size)


def _heavy(name: str, seed: int, people: int = 20_000) -> tuple[F64, npt.NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 8, people)
    if name == "pareto":
        return 100 * (rng.pareto(1.5, people) + 1) * (1 + g / 4), g
    return rng.lognormal(6 + 0.2 * g, 1.2), g


@pytest.mark.parametrize("name", ["pareto", "lognormal"])
def test_heavy_tails_are_clamped_near_the_best_range_in_hindsight(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21's goal on heavy-tailed values (20,000 rows, 8 groups, histogram at ε = 1/4,
    SUM at ε = 1): the chosen range's exact error is within 1.5× of the best range on the grid
    (mean over three noise draws). Control: without the modelled tails (the support alone, as
    before), the last rows that no bin shows are clamped away and the same bound fails."""
    v, g = _heavy(name, 14)
    search = (0.0, 1e7)
    edges = np.asarray(value_edges(*search))
    lows, highs = (m.ravel() for m in np.meshgrid(edges[edges <= np.median(v)][::4], edges))
    keep = lows < highs
    best = float(_sum_errors(v, g, lows[keep], highs[keep], 1.0).min())

    def ratio() -> float:
        got = []
        for seed in range(3):
            release = clamps_module.release_value_counts(
                _bins(v, tuple(edges)), 1, Fraction(1, 4), SeededRandom(seed)
            )
            h = clamps_module.ValueHistogram(
                "v", search, tuple(edges), np.asarray(release.value, dtype=np.int64), release, 1
            )
            c = choose_clamps(h, workload="sum", epsilon=1, max_groups=1, max_rows=1, groups=8)
            got.append(_sum_errors(v, g, np.array([c[0].low]), np.array([c[0].high]), 1.0)[0])
        return float(np.mean(got)) / best

    assert ratio() <= 1.5
    monkeypatch.setattr(
        clamps_module.ValueHistogram, "modelled", clamps_module.ValueHistogram.denoised
    )
    assert ratio() > 1.5


def test_modelled_tails_fill_only_past_the_support() -> None:
    """The model keeps the detected bins and adds rows only past them: on Pareto values
    (index 1.5, 20,000 rows, ε = 1/4) over half of the rows past the support, which no bin
    shows (three data sets together); on bounded values (uniform ages) under one row; a
    histogram with no bin above TAIL_SHOULDER times the noise's half-width (200 rows) is read
    as before."""
    added = past = 0.0
    for seed in (15, 16, 17):
        rng = np.random.default_rng(seed)
        v = 100 * (rng.pareto(1.5, 20_000) + 1)
        heavy = _histogram(v, 0.0, 1e7, 0.25)
        bounded = _histogram(rng.uniform(20, 80, 20_000), 0.0, 150.0, 0.25)
        for h in (heavy, bounded):
            before, after = h.denoised(), h.modelled()
            held = np.flatnonzero(before > 0)
            inside = slice(int(held.min()), int(held.max()) + 1)
            np.testing.assert_array_equal(after[inside], before[inside])
            assert (after >= before).all()
        assert bounded.modelled().sum() - bounded.denoised().sum() < 1
        last = int(np.flatnonzero(heavy.denoised() > 0).max())
        past += float(_bins(v, heavy.edges)[last + 1 :].sum())
        added += float(heavy.modelled().sum() - heavy.denoised().sum())
    assert 0.5 * past < added < 1.5 * past, (added, past)
    few = _histogram(np.random.default_rng(18).uniform(20, 80, 200), 0.0, 150.0, 0.25)
    np.testing.assert_array_equal(few.modelled(), few.denoised())

"""Safe k-anonymization on DuckDB: suppression, determinism, refusals, scores, report."""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from fractions import Fraction

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from deniable.anonymize import (
    RecodingSpec,
    UnknownColumn,
    anonymize_sample,
    candidate_scores,
    dps_search,
    epsilon_safe,
    min_epsilon,
    recoding_from_dict,
    strongly_safe,
)
from deniable.anonymize.dps import amplified_epsilon
from deniable.anonymize.recoding import Hierarchy, Recoding
from deniable.anonymize.report import CLASS_SIZE, utility_report
from deniable.engines.duckdb import DuckDBRunner
from deniable.errors import InvalidParameter
from deniable.noise import source as source_module
from deniable.noise.source import SecureRandom
from deniable.noise.testing import SeededRandom

SPEC = {
    "columns": {
        "age": {"type": "interval", "lower": 0, "upper": 100, "widths": [10, 50], "level": 1},
        "zip": {"type": "prefix", "length": 3, "keep": [1], "level": 1},
        "sex": {"type": "identity", "level": 0},
    }
}


CON = duckdb.connect()  # shared: opening a DuckDB connection costs ~0.1 s


def spec() -> RecodingSpec:
    return recoding_from_dict(SPEC)


def make_table(
    con: duckdb.DuckDBPyConnection, rows: list[tuple[int, str, str]], name: str = "t"
) -> None:
    con.execute(
        f"CREATE OR REPLACE TABLE {name} (age INTEGER, zip VARCHAR, sex VARCHAR, secret DOUBLE)"
    )
    if rows:
        con.executemany(f"INSERT INTO {name} VALUES (?, ?, ?, 0.5)", [list(r) for r in rows])


def reference(rows: list[tuple[int, str, str]], k: int) -> Counter[tuple[str, str, str]]:
    """Python oracle of the fixed recoding of SPEC followed by suppression below k."""
    counts = Counter((f"[{a // 10 * 10}, {a // 10 * 10 + 10})", z[0] + "**", s) for a, z, s in rows)
    return Counter({key: n for key, n in counts.items() if n >= k})


row_strategy = st.tuples(
    st.integers(0, 99), st.sampled_from(["101", "105", "207", "299"]), st.sampled_from(["F", "M"])
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(row_strategy, max_size=120), k=st.integers(2, 6))
def test_anonymize_sample_matches_oracle_and_never_outputs_small_classes(
    rows: list[tuple[int, str, str]], k: int
) -> None:
    con = CON
    make_table(con, rows, "hyp1")
    classes = anonymize_sample(DuckDBRunner(con), "hyp1", spec().fixed(), k=k)
    got = {
        tuple(r[:3]): r[3]
        for r in con.execute(f"SELECT age, zip, sex, {CLASS_SIZE} FROM {classes}").fetchall()
    }
    assert all(n >= k for n in got.values())
    assert got == dict(reference(rows, k))


@settings(max_examples=15, deadline=None)
@given(
    rows=st.lists(row_strategy, min_size=1, max_size=200),
    k=st.integers(2, 5),
    seed=st.integers(0, 10**6),
)
def test_strongly_safe_never_publishes_a_class_below_k(
    rows: list[tuple[int, str, str]], k: int, seed: int
) -> None:
    con = CON
    make_table(con, rows, "hyp2")
    a = strongly_safe(
        DuckDBRunner(con), "hyp2", spec(), k=k, beta=0.5, epsilon=1.0, source=SeededRandom(seed)
    )
    published = a.to_arrow().to_pylist()
    counts = Counter((r["age"], r["zip"], r["sex"]) for r in published)
    assert all(n >= k for n in counts.values())
    # Everything published is a recoding of some input row, at most as often as it occurs.
    possible = Counter(
        (f"[{x // 10 * 10}, {x // 10 * 10 + 10})", z[0] + "**", s) for x, z, s in rows
    )
    assert all(n <= possible[key] for key, n in counts.items())
    assert a.report.published_rows == len(published)


def test_deterministic_given_the_sample() -> None:
    rng = np.random.default_rng(1)  # test data only
    rows = [
        (int(rng.integers(0, 100)), str(rng.choice(["101", "207"])), str(rng.choice(["F", "M"])))
        for _ in range(500)
    ]
    con = duckdb.connect()
    make_table(con, rows, "s1")
    make_table(con, list(reversed(rows)), "s2")
    fixed = spec().fixed()
    outs = []
    for name in ("s1", "s1", "s2"):
        c = anonymize_sample(DuckDBRunner(con), name, fixed, k=4)
        cols = ", ".join(f'"{n}"' for n in fixed.names)
        outs.append(con.execute(f"SELECT {cols}, {CLASS_SIZE} FROM {c} ORDER BY ALL").fetchall())
    assert outs[0] == outs[1] == outs[2]
    assert outs[0]


def test_same_seed_same_release_and_published_table_is_sorted() -> None:
    rows = [(a % 100, ["101", "207"][a % 2], "F") for a in range(400)]
    results = []
    for _ in range(2):
        con = duckdb.connect()
        make_table(con, rows)
        results.append(
            strongly_safe(
                DuckDBRunner(con), "t", spec(), k=3, beta=0.5, epsilon=1.0, source=SeededRandom(7)
            )
        )
    a, b = (r.to_arrow() for r in results)
    assert a.equals(b)
    keys = list(zip(*(a.column(n).to_pylist() for n in ("age", "zip", "sex")), strict=True))
    assert keys == sorted(keys)
    assert a.column_names == ["age", "zip", "sex"]
    assert results[0].dropped_columns == ("secret",)


def test_release_path_uses_the_csprng_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    class Counting(SecureRandom):
        calls = 0

        def words(self, n: int) -> np.ndarray:
            Counting.calls += 1
            return super().words(n)

    monkeypatch.setattr(source_module, "_DEFAULT", Counting())
    con = duckdb.connect()
    make_table(con, [(30, "101", "F")] * 50)
    a = strongly_safe(DuckDBRunner(con), "t", spec(), k=2, beta=0.5, epsilon=1.0)
    assert Counting.calls >= 1
    assert a.report.published_rows > 0


def _temp_tables(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute("SELECT COUNT(*) FROM duckdb_tables() WHERE temporary").fetchall()[0][0])


class Exhausted:
    """A source that fails if anything draws from it."""

    secure = False

    def words(self, n: int) -> np.ndarray:
        raise AssertionError("nothing may be sampled")


def test_refuses_unknown_columns_before_sampling() -> None:
    con = duckdb.connect()
    make_table(con, [(30, "101", "F")] * 5)
    bad = recoding_from_dict(
        {"columns": {**SPEC["columns"], "income": {"type": "identity", "level": 0}}}
    )
    with pytest.raises(UnknownColumn, match="income"):
        strongly_safe(DuckDBRunner(con), "t", bad, k=2, beta=0.5, epsilon=1.0, source=Exhausted())
    assert _temp_tables(con) == 0


def test_uncovered_values_are_published_as_the_top_level_never_refused() -> None:
    """A value outside a hierarchy's domain (or of the wrong type) cannot make the release
    fail — that would tell, for free, whether such a row exists. D and D′ (D plus one person
    aged 130, outside [0, 100), and one with a 4-digit zip) both release; the extra rows are
    recoded to '*' at every generalised level."""
    base = [(30, "101", "F")] * 6
    for extra in ([], [(130, "101", "F")], [(30, "1011", "F")]):
        con = duckdb.connect()
        make_table(con, base + extra)
        runner = DuckDBRunner(con)
        fixed = strongly_safe(
            runner, "t", spec(), k=2, beta=0.999, epsilon=8.0, source=SeededRandom(1)
        )
        chosen = epsilon_safe(
            runner, "t", spec(), k=2, beta=0.999, selection_epsilon=1.0, epsilon=8.0,
            source=SeededRandom(1),
        )  # fmt: skip
        assert fixed.report.published_rows >= 1 and chosen.report.published_rows >= 1
    recoded = CON.execute(
        f"SELECT {spec().fixed().select_sql()} FROM (VALUES (130, '1011', 'F'), "
        "(NULL, NULL, NULL), (30, '101', 'M')) v(age, zip, sex)"
    ).fetchall()
    assert recoded == [("*", "*", "F"), (None, None, None), ("[30, 40)", "1**", "M")]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"k": 1, "beta": 0.5, "epsilon": 1.0}, "k must be ≥ 2"),
        ({"k": 5, "beta": 0.0, "epsilon": 1.0}, "in \\(0, 1\\)"),
        ({"k": 5, "beta": 1.5, "epsilon": 1.0}, "in \\(0, 1\\)"),
        ({"k": 5, "beta": 0.5, "epsilon": 0.6}, "−ln\\(1 − β\\)"),
    ],
)
def test_refuses_bad_parameters_before_touching_data(kwargs: dict[str, float], match: str) -> None:
    con = duckdb.connect()  # no table at all: parameters are checked first
    with pytest.raises(InvalidParameter, match=match):
        strongly_safe(DuckDBRunner(con), "missing", spec(), source=Exhausted(), **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match=match):
        epsilon_safe(
            DuckDBRunner(con),
            "missing",
            spec(),
            selection_epsilon=1.0,
            source=Exhausted(),
            **kwargs,  # type: ignore[arg-type]
        )


def test_refuses_missing_table_and_reserved_names() -> None:
    con = duckdb.connect()
    with pytest.raises(InvalidParameter, match="no table"):
        strongly_safe(DuckDBRunner(con), "missing", spec(), k=2, beta=0.5, epsilon=1.0)
    con.execute('CREATE TABLE t ("__deniable_x" VARCHAR)')
    bad = recoding_from_dict({"columns": {"__deniable_x": {"type": "identity", "level": 0}}})
    with pytest.raises(InvalidParameter, match="reserved"):
        strongly_safe(DuckDBRunner(con), "t", bad, k=2, beta=0.5, epsilon=1.0)


def test_utility_report_on_a_known_sample() -> None:
    con = duckdb.connect()
    rows = (
        [(31, "101", "F")] * 6 + [(35, "105", "F")] * 2 + [(70, "207", "M")] * 3 + [(5, "299", "M")]
    )
    make_table(con, rows)
    fixed = spec().fixed()
    classes = anonymize_sample(DuckDBRunner(con), "t", fixed, k=3)
    r = utility_report(DuckDBRunner(con), classes, fixed, k=3, sample_rows=len(rows))
    # Classes: ([30,40), 1**, F) × 8 and ([70,80), 2**, M) × 3; (5, 299, M) suppressed.
    assert (r.published_rows, r.classes, r.min_class, r.max_class) == (11, 2, 3, 8)
    assert r.median_class == 5.5
    assert r.class_sizes == ((3, 6, 1), (6, 12, 1))
    assert (r.sample_rows, r.suppressed_rows) == (12, 1)
    assert r.suppressed_fraction == pytest.approx(1 / 12)
    loss = {c.name: c for c in r.columns}
    assert loss["age"].loss_metric == pytest.approx(0.1)
    assert loss["zip"].loss_metric == pytest.approx(99 / 999)
    assert loss["sex"].loss_metric == 0 and loss["sex"].height == 0
    assert loss["age"].height == pytest.approx(1 / 3)
    assert any("curator-only" in line for line in r.lines())


def scores_oracle(rows: list[tuple[int, str, str]], cand: Recoding, k: int) -> Fraction:
    """kept(g)·u(g) computed row by row: each value recoded on its own, counted in Python."""
    memo: dict[tuple[str, int, object], str] = {}

    def rec(h: Hierarchy, col: str, level: int, value: object) -> str:
        key = (col, level, value)
        if key not in memo:
            expr = h.sql("v", level)
            memo[key] = str(
                CON.execute(f"SELECT {expr} FROM (SELECT ? AS v)", [value]).fetchall()[0][0]
            )
        return memo[key]

    keys = Counter(
        tuple(rec(c.hierarchy, c.name, c.level, v) for c, v in zip(cand.columns, r, strict=True))
        for r in rows
    )
    kept = sum(n for n in keys.values() if n >= k)
    return Fraction(kept) * cand.utility_weight()


def test_candidate_scores_match_an_oracle() -> None:
    rows = [(31, "101", "F")] * 4 + [(35, "105", "M")] * 2 + [(77, "207", "M")] * 3
    s = recoding_from_dict(
        {
            "columns": {
                "age": {"type": "interval", "lower": 0, "upper": 100, "widths": [10, 50]},
                "zip": {"type": "prefix", "length": 3, "keep": [1]},
                "sex": {"type": "identity"},
            }
        }
    )
    cands = s.candidates()
    assert len(cands) == 4 * 3 * 2
    make_table(CON, rows, "oracle")
    scores, delta = candidate_scores(DuckDBRunner(CON), "oracle", cands, k=3)
    assert delta == 3  # k · max u, and the all-raw candidate has u = 1
    assert scores == [scores_oracle(rows, c, 3) for c in cands]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(row_strategy, max_size=40), extra=row_strategy, k=st.integers(2, 5))
def test_score_sensitivity_bound_holds(
    rows: list[tuple[int, str, str]], extra: tuple[int, str, str], k: int
) -> None:
    """Adding one row moves every candidate's score by at most Δ = k·max u (unbounded DP)."""
    s = recoding_from_dict(
        {
            "columns": {
                "age": {"type": "interval", "lower": 0, "upper": 100, "widths": [10, 50]},
                "zip": {"type": "prefix", "length": 3, "keep": [1]},
                "sex": {"type": "identity", "candidates": [0]},
            }
        }
    )
    cands = s.candidates()
    con = CON
    make_table(con, rows, "d")
    make_table(con, [*rows, extra], "d2")
    a, delta = candidate_scores(DuckDBRunner(con), "d", cands, k=k)
    b, _ = candidate_scores(DuckDBRunner(con), "d2", cands, k=k)
    assert max(abs(x - y) for x, y in zip(a, b, strict=True)) <= delta


def test_epsilon_safe_end_to_end() -> None:
    con = duckdb.connect()
    rng = np.random.default_rng(3)  # test data only
    rows = [
        (int(rng.integers(20, 60)), str(rng.choice(["101", "105"])), str(rng.choice(["F", "M"])))
        for _ in range(3000)
    ]
    make_table(con, rows)
    s = recoding_from_dict(
        {
            "columns": {
                "age": {"type": "interval", "lower": 0, "upper": 100, "widths": [10, 50]},
                "zip": {"type": "prefix", "length": 3, "keep": [1]},
                "sex": {"type": "identity"},
            }
        }
    )
    a = epsilon_safe(
        DuckDBRunner(con),
        "t",
        s,
        k=10,
        beta=0.2,
        selection_epsilon=2.0,
        delta=1e-6,
        source=SeededRandom(11),
    )
    assert a.selection is not None and a.selection.candidates == 24
    assert a.guarantee.theorem.startswith("Theorem 3.11")
    eps1 = amplified_epsilon(2.0, 0.2)
    assert a.selection.epsilon_input == eps1
    assert a.guarantee.epsilon == pytest.approx(eps1 + a.guarantee.epsilon_anonymization)
    assert a.guarantee.delta <= 1e-6
    counts = a.class_counts().column("count").to_pylist()
    assert counts and min(counts) >= 10
    # Raw age is too fine for k = 10 at β = 0.2, and '*' everywhere scores 0: the choice is
    # one of the useful middle levels with overwhelming probability at ε = 2 on these scores.
    assert a.selection.chosen["age"] != "*"
    other = a.guarantee_at(epsilon=2.0)
    assert other.epsilon == pytest.approx(eps1 + 2.0) and other.delta <= a.guarantee.delta


def test_guarantee_curve_of_a_strongly_safe_release() -> None:
    con = duckdb.connect()
    make_table(con, [(30, "101", "F")] * 20)
    a = strongly_safe(
        DuckDBRunner(con), "t", spec(), k=5, beta=0.3, epsilon=1.0, source=SeededRandom(0)
    )
    g = a.guarantee_at(delta=5e-3)
    assert g.delta <= 5e-3 and g.epsilon_selection == 0


# ------------------------------------------------------------------ the theorem, exactly


@functools.lru_cache(maxsize=8)
def _outputs_by_count(k: int, c_max: int) -> list[tuple[tuple[str, int], ...]]:
    """The published multiset for a sample holding c copies of the target's class, c = 0..c_max,
    computed by the real anonymize_sample (one DuckDB run per c)."""
    out = []
    fixed = recoding_from_dict({"columns": {"x": {"type": "identity", "level": 0}}}).fixed()
    for c in range(c_max + 1):
        CON.execute(f"CREATE OR REPLACE TABLE counts_s AS SELECT 'a' AS x FROM range({c})")
        t = anonymize_sample(DuckDBRunner(CON), "counts_s", fixed, k=k)
        out.append(tuple(sorted(CON.execute(f"SELECT x, {CLASS_SIZE} FROM {t}").fetchall())))
        CON.execute(f"DROP TABLE {t}")
    return out


def _bad_mass(
    outputs: list[tuple[tuple[str, int], ...]], n: int, beta: float, eps: float
) -> tuple[float, float]:
    """For D = n−1 copies of the target's class and D' = D + the target: the mass under D'
    of outputs whose likelihood ratio D'/D exceeds e^ε, and under D of those whose D/D'
    ratio exceeds e^ε (the release's own output law, via the sample-count → output map)."""
    law_d: dict[object, float] = {}
    law_d2: dict[object, float] = {}
    pmf2 = binom.pmf(np.arange(n + 1), n, beta)
    pmf = binom.pmf(np.arange(n), n - 1, beta)
    for c in range(n + 1):
        law_d2[outputs[c]] = law_d2.get(outputs[c], 0.0) + float(pmf2[c])
        if c <= n - 1:
            law_d[outputs[c]] = law_d.get(outputs[c], 0.0) + float(pmf[c])
    up = sum(p for o, p in law_d2.items() if p > math.exp(eps) * law_d.get(o, 0.0) * (1 + 1e-12))
    down = sum(p for o, p in law_d.items() if p > math.exp(eps) * law_d2.get(o, 0.0) * (1 + 1e-12))
    return up, down


@pytest.mark.parametrize(("k", "beta", "eps"), [(5, 0.3, 1.0), (13, 0.5, 2.0), (4, 0.2, None)])
def test_the_release_violates_the_ratio_with_probability_d(
    k: int, beta: float, eps: float | None
) -> None:
    e = min_epsilon(beta) if eps is None else eps
    s = dps_search(k, beta=beta, epsilon=e)
    n_max = 3 * s.n_star + 10
    outputs = _outputs_by_count(k, n_max)
    masses = {n: _bad_mass(outputs, n, beta, e) for n in range(1, n_max + 1)}
    assert all(down == 0.0 for _, down in masses.values())  # ε ≥ −ln(1−β) covers removal
    assert max(up for up, _ in masses.values()) == pytest.approx(s.delta, rel=1e-8)
    assert masses[s.n_star][0] == pytest.approx(s.delta, rel=1e-8)


def test_below_the_domain_the_suppressed_output_breaks_the_ratio() -> None:
    # Negative control for ε ≥ −ln(1 − β): just below it, "nothing published" has a D/D'
    # ratio above e^ε for large enough classes (it tends to 1/(1 − β)); at the domain's edge
    # it never does (the test above).
    k, beta = 3, 0.5
    e = min_epsilon(beta) * 0.95
    outputs = _outputs_by_count(k, 80)
    downs = [_bad_mass(outputs, n, beta, e)[1] for n in range(1, 81)]
    assert max(downs) > 0
    assert all(_bad_mass(outputs, n, beta, min_epsilon(beta))[1] == 0 for n in range(1, 81))


def test_unsafe_threshold_would_change_the_guarantee() -> None:
    # Negative control: a release that kept classes of size ≥ k − 1 has more bad mass than d.
    k, beta, e = 5, 0.3, 1.0
    s = dps_search(k, beta=beta, epsilon=e)
    outputs = _outputs_by_count(k - 1, 3 * s.n_star)
    worst = max(_bad_mass(outputs, n, beta, e)[0] for n in range(1, 3 * s.n_star))
    assert worst > 1.5 * s.delta


def test_candidates_product_is_capped() -> None:
    cols = {f"c{i}": {"type": "prefix", "length": 6, "keep": [5, 4, 3, 2, 1]} for i in range(5)}
    big = recoding_from_dict({"columns": cols})
    assert big.candidate_count() == 7**5
    con = duckdb.connect()
    con.execute("CREATE TABLE t (" + ", ".join(f"c{i} VARCHAR" for i in range(5)) + ")")
    with pytest.raises(InvalidParameter, match="4096"):
        epsilon_safe(DuckDBRunner(con), "t", big, k=2, beta=0.5, selection_epsilon=1.0, epsilon=1.0)


def test_itertools_product_order_is_the_candidate_order() -> None:
    s = recoding_from_dict({"columns": {"a": {"type": "identity"}, "b": {"type": "identity"}}})
    assert [tuple(c.level for c in r.columns) for r in s.candidates()] == list(
        itertools.product([0, 1], [0, 1])
    )

"""Issue 20: the accounting text and four small soundness items.

1. (ε, δ)-DP ⇒ δ-approximately ε²/2-zCDP holds in the *mixture* sense (Kairouz–Oh–Viswanath's
   decomposition into (ε, δ) randomized response + Bun–Steinke's bound for pure-ε pairs), and
   is false when the "events" are read as sets of outputs (the counterexample of the docs).
2. The ledger refuses to raise the cap of a charged zCDP dataset (lowering is allowed).
3. δ > 0 charges on a sampled table are charged the amplified increment of Li–Qardaji–Su
   Theorem 1: ``βδᵢ`` for δ, ``ln(1+β(e^(S+εᵢ)−1)) − ln(1+β(e^S−1))`` for ε.
4. A sum's per-row value is clamped to its grid bounds *after* rounding, so that an engine
   rounding ties to even (PostgreSQL) cannot leave the sensitivity by one grid unit.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy.optimize import linprog
from sqlglot import exp

from deniable import ROW
from deniable.accounting.amplification import amplified_epsilon_upper
from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.curator.session import Session
from deniable.engines.base import DUCKDB_CAPABILITIES, POSTGRES_CAPABILITIES, SPARK_CAPABILITIES
from deniable.errors import CapConflict, InvalidParameter, PrivacyWarning
from deniable.ledger.sqlite import Ledger
from deniable.noise.testing import SeededRandom
from deniable.query.measures import SumMeasure
from deniable.query.rewrite.compile import row_expression
from deniable.sampling.account import SampleAccount

# -- 1. (ε, δ)-DP as approximate zCDP ---------------------------------------------------------


def _renyi(p: np.ndarray, q: np.ndarray, alpha: float) -> float:
    """D_α(p‖q) for finite distributions (q > 0 where p > 0)."""
    keep = p > 0
    return float(math.log(np.sum(p[keep] ** alpha * q[keep] ** (1 - alpha))) / (alpha - 1))


def _indistinguishable(p: np.ndarray, q: np.ndarray, eps: float, delta: float) -> bool:
    """Whether P(S) ≤ e^ε Q(S) + δ and Q(S) ≤ e^ε P(S) + δ for every set of outputs S."""
    u = math.exp(eps)
    return all(
        a[list(s)].sum() <= u * b[list(s)].sum() + delta + 1e-15
        for r in range(1, len(p) + 1)
        for s in itertools.combinations(range(len(p)), r)
        for a, b in ((p, q), (q, p))
    )


def test_output_event_reading_is_false() -> None:
    """P = (0.6, 0.4), Q = (0.5, 0.5) is (0.001, 0.1)-DP, but no output event rescues zCDP."""
    p, q = np.array([0.6, 0.4]), np.array([0.5, 0.5])
    eps, delta = 0.001, 0.1
    assert _indistinguishable(p, q, eps, delta)
    assert not _indistinguishable(p, q, eps, 0.099)  # δ = 0.1 is needed: the example is tight
    # Every set of outputs with probability ≥ 1 − δ under P (or Q) is the whole space, so
    # conditioning on such an event leaves P and Q as they are ...
    for r in range(1, 3):
        for s in itertools.combinations(range(2), r):
            if p[list(s)].sum() >= 1 - delta or q[list(s)].sum() >= 1 - delta:
                assert len(s) == 2
    # ... and their divergence is far above what δ-approximate ε²/2-zCDP would allow.
    d2 = _renyi(p, q, 2.0)
    assert d2 == pytest.approx(math.log(1.04), rel=1e-12)
    assert 0.039 < d2 < 0.0393
    assert d2 > 2 * eps**2 / 2 * 1000


def _rr_laws(eps: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """The (ε, δ) randomized-response pair on {names 0, leans 0, leans 1, names 1}."""
    u = math.exp(eps)
    a, b = (1 - delta) * u / (1 + u), (1 - delta) / (1 + u)
    return np.array([delta, a, b, 0.0]), np.array([0.0, b, a, delta])


def _tight_delta(p: np.ndarray, q: np.ndarray, eps: float) -> float:
    u = math.exp(eps)
    return float(max(np.maximum(p - u * q, 0).sum(), np.maximum(q - u * p, 0).sum()))


def _kov_post_processing(
    p: np.ndarray, q: np.ndarray, eps: float, delta: float
) -> np.ndarray | None:
    """A stochastic T (4 × k) with RR₀·T = p and RR₁·T = q (linear programming), or None."""
    r0, r1 = _rr_laws(eps, delta)
    k = len(p)
    a_eq, b_eq = [], []
    for law, target in ((r0, p), (r1, q)):
        for j in range(k):
            row = np.zeros(4 * k)
            row[[i * k + j for i in range(4)]] = law
            a_eq.append(row)
            b_eq.append(target[j])
    for i in range(4):
        row = np.zeros(4 * k)
        row[i * k : (i + 1) * k] = 1
        a_eq.append(row)
        b_eq.append(1.0)
    res = linprog(np.zeros(4 * k), A_eq=np.array(a_eq), b_eq=np.array(b_eq), bounds=(0, 1))
    return np.asarray(res.x).reshape(4, k) if res.status == 0 else None


def _pairs() -> list[tuple[np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(20)  # test data only, not a release path
    pairs = [(np.array([0.6, 0.4]), np.array([0.5, 0.5]), 0.001)]
    for eps in (0.1, 0.5, 1.0):
        p = rng.dirichlet(np.ones(4))
        q = rng.dirichlet(np.ones(4))
        pairs.append((p, q, eps))
    return pairs


@pytest.mark.parametrize("p,q,eps", _pairs())
def test_mixture_decomposition_gives_approximate_zcdp(
    p: np.ndarray, q: np.ndarray, eps: float
) -> None:
    """KOV: (P, Q) = T(RR_{ε,δ}); the common-weight good parts are ε²/2-zCDP as a pair."""
    delta = _tight_delta(p, q, eps)
    assert _indistinguishable(p, q, eps, delta + 1e-12)
    t = _kov_post_processing(p, q, eps, delta)
    assert t is not None, "no post-processing of (ε, δ) randomized response found"
    r0, r1 = _rr_laws(eps, delta)
    good0 = r0 * np.array([0, 1, 1, 0]) / (1 - delta)
    good1 = r1 * np.array([0, 1, 1, 0]) / (1 - delta)
    p_good, q_good = good0 @ t, good1 @ t
    e_bad, e_bad2 = t[0], t[3]
    # M(x) = (1 − δ)P′ + δE and M(x′) = (1 − δ)Q′ + δE′, one common weight.
    np.testing.assert_allclose((1 - delta) * p_good + delta * e_bad, p, atol=1e-9)
    np.testing.assert_allclose((1 - delta) * q_good + delta * e_bad2, q, atol=1e-9)
    # The good parts are ε-indistinguishable pointwise (post-processing of ε-RR) ...
    both = (p_good > 1e-12) | (q_good > 1e-12)
    ratio = p_good[both] / q_good[both]
    assert np.all(ratio <= math.exp(eps) * (1 + 1e-7))
    assert np.all(ratio >= math.exp(-eps) * (1 - 1e-7))
    # ... hence, as a pair, within αε²/2 at every order (Bun–Steinke's pure-ε bound).
    for alpha in (1.01, 1.5, 2.0, 4.0, 16.0, 64.0):
        for a, b in ((p_good, q_good), (q_good, p_good)):
            assert _renyi(a, b, alpha) <= alpha * eps**2 / 2 + 1e-9
    # Negative control: with a smaller mixture weight than the pair's δ there is no such
    # decomposition (the LP that found one above is then infeasible).
    assert _kov_post_processing(p, q, eps, 0.9 * delta) is None


def test_docstrings_cite_the_right_argument() -> None:
    """The proof text names the decomposition and no longer rests on Dwork–Roth 3.17."""
    import deniable.accounting.renyi as renyi

    doc = renyi.__doc__ or ""
    assert "Kairouz–Oh–Viswanath" in doc and "mixture" in doc
    assert "does *not* give this" in doc  # Lemma 3.17 is named only to say it is not it
    assert "Theorem 4.3 and Remark 4.4" in doc and "Theorem 1" in doc
    text = (Path(__file__).resolve().parents[2] / "docs" / "accounting.md").read_text("utf-8")
    assert "with Dwork & Roth, Lemma 3.17" not in text
    assert "Kairouz, Oh & Viswanath" in text


# -- 2. a zCDP cap cannot be raised after its first charge ------------------------------------

CAP = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))


def _charge(ledger: Ledger) -> None:
    ledger.charge(
        "d",
        EpsilonDelta(epsilon=Fraction(1, 10), delta=0),
        analyst="a",
        query_key="q",
        query_text="SELECT COUNT(*) FROM t",
    )


def _charged_zcdp(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "l.db")
    ledger.register("d", CAP, accountant="zcdp")
    _charge(ledger)
    return ledger


@pytest.mark.parametrize(
    "raised",
    [
        EpsilonDelta(epsilon=2, delta=Fraction(1, 10**6)),
        EpsilonDelta(epsilon=1, delta=Fraction(1, 10**5)),
        EpsilonDelta(epsilon=2, delta=Fraction(1, 10**7)),  # ε up, δ down: not a lowering
    ],
)
def test_raising_a_charged_zcdp_cap_is_refused(tmp_path: Path, raised: EpsilonDelta) -> None:
    with _charged_zcdp(tmp_path) as ledger:
        events = ledger.curator_events("d")
        before = ledger.budget_filter("d")
        with pytest.raises(InvalidParameter, match="cannot be raised") as info:
            ledger.register("d", raised, allow_change=True)
        assert "fixed before the first charge" in str(info.value)
        assert not isinstance(info.value, CapConflict)
        # nothing written
        assert ledger.cap("d") == CAP
        assert ledger.curator_events("d") == events
        assert ledger.budget_filter("d").rho_max == before.rho_max  # type: ignore[union-attr]
        assert ledger.verify().ok


def test_lowering_a_charged_zcdp_cap_is_allowed(tmp_path: Path) -> None:
    with _charged_zcdp(tmp_path) as ledger:
        old_rho = ledger.budget_filter("d").rho_max  # type: ignore[union-attr]
        lower = EpsilonDelta(epsilon=Fraction(1, 2), delta=Fraction(1, 10**7))
        ledger.register("d", lower, allow_change=True)
        assert ledger.cap("d") == lower
        assert ledger.budget_filter("d").rho_max < old_rho  # type: ignore[union-attr]
        assert ledger.curator_events("d")[-1].action == "change_cap"


def test_raising_before_the_first_charge_is_allowed(tmp_path: Path) -> None:
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.register("d", CAP, accountant="zcdp")
        higher = EpsilonDelta(epsilon=2, delta=Fraction(1, 10**6))
        ledger.register("d", higher, allow_change=True)
        assert ledger.cap("d") == higher


def test_basic_accountant_cap_changes_are_unchanged(tmp_path: Path) -> None:
    """The refusal is the zCDP filter's: the basic accountant's losses just add."""
    with Ledger(tmp_path / "l.db") as ledger:
        ledger.register("d", CAP)
        _charge(ledger)
        higher = EpsilonDelta(epsilon=2, delta=Fraction(1, 10**6))
        ledger.register("d", higher, allow_change=True)
        assert ledger.cap("d") == higher


def test_a_session_never_changes_a_cap(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    with Session(budget=CAP, ledger=path, accountant="zcdp") as s:
        s.add_table("t", pd.DataFrame({"v": [1, 2, 3]}), privacy_unit=ROW)
        s.sql("SELECT COUNT(*) AS n FROM t", rho=Fraction(1, 1000))
    with pytest.raises(CapConflict):
        Session(budget=EpsilonDelta(epsilon=2, delta=Fraction(1, 10**6)), ledger=path)


# -- 3. δ > 0 charges on a sampled table: the amplified increment -----------------------------


def _amplified(eps: float, beta: float) -> float:
    return math.log1p(beta * math.expm1(eps))


def test_sample_account_charges_the_amplified_increment_with_delta() -> None:
    beta = Fraction(1, 8)
    acc = SampleAccount(rate=beta)
    losses: list[Epsilon | EpsilonDelta] = [
        EpsilonDelta(epsilon=Fraction(1, 2), delta=Fraction(1, 10**6)),
        EpsilonDelta(epsilon=Fraction(3, 10), delta=Fraction(3, 10**7)),
        Epsilon(epsilon=Fraction(1, 4)),
    ]
    on_sample = Fraction(0)
    total_delta = Fraction(0)
    for loss in losses:
        eps = loss.epsilon
        delta = loss.delta if isinstance(loss, EpsilonDelta) else Fraction(0)
        with acc.pending(loss) as cost:
            # δ: exactly β·δᵢ (Li–Qardaji–Su Theorem 1: δ' = βδ is linear in δ)
            assert cost.delta == beta * delta
            # ε: exactly the increment of the certified amplified total ...
            assert cost.epsilon == amplified_epsilon_upper(
                on_sample + eps, beta
            ) - amplified_epsilon_upper(on_sample, beta)
            # ... which is the formula's increment, up to the upward rounding of each total
            formula = _amplified(float(on_sample + eps), float(beta)) - _amplified(
                float(on_sample), float(beta)
            )
            assert float(cost.epsilon) == pytest.approx(formula, rel=1e-12, abs=1e-15)
            # negative control: the unamplified charge is far larger
            assert cost.epsilon < eps and (delta == 0 or cost.delta < delta)
        on_sample += eps
        total_delta += delta
    assert acc.spent.delta == beta * total_delta
    assert float(acc.spent.epsilon) == pytest.approx(_amplified(float(on_sample), 1 / 8), rel=1e-12)


def test_partition_selection_on_a_sampled_table_is_charged_the_amplified_increment(
    tmp_path: Path,
) -> None:
    beta = Fraction(1, 4)
    frame = pd.DataFrame({"uid": range(400), "name": [f"n{i % 5}" for i in range(400)]})
    with (
        pytest.warns(PrivacyWarning),
        Session(
            budget=EpsilonDelta(epsilon=10, delta=Fraction(1, 1000)),
            ledger=tmp_path / "l.db",
            source=SeededRandom(3),
        ) as s,
    ):
        s.add_table("t", frame, privacy_unit="uid", max_groups=1, max_rows=1, sample_rate=beta)
        sql = "SELECT name, COUNT(*) AS n FROM t GROUP BY name"
        plan = s.plan(sql, epsilon=1, delta=Fraction(1, 10**6))
        assert isinstance(plan.loss, EpsilonDelta) and plan.loss.delta > 0
        s.sql(sql, epsilon=1, delta=Fraction(1, 10**6))
        s.sql(sql.replace("COUNT(*) AS n", "COUNT(*) AS m"), epsilon=1, delta=Fraction(1, 10**6))
    with Ledger(tmp_path / "l.db") as ledger:
        charges = ledger.history("default")
        assert len(charges) == 2
        first, second = (c.loss for c in charges)
        assert isinstance(first, EpsilonDelta) and isinstance(second, EpsilonDelta)
        assert first.delta == second.delta == beta * plan.loss.delta
        e1 = plan.loss.epsilon
        assert first.epsilon == amplified_epsilon_upper(e1, beta)
        assert second.epsilon == amplified_epsilon_upper(2 * e1, beta) - first.epsilon
        assert float(first.epsilon + second.epsilon) == pytest.approx(
            _amplified(2 * float(e1), 0.25), rel=1e-12
        )


# -- 4. per-row sum values are clamped after rounding ------------------------------------------

GRID = -12
LOWER = 2.5 + 2.0 ** (GRID - 1)  # 10240.5 grid units: a tie whose even neighbour is 10240


def _tie_measure(tmp_path: Path) -> SumMeasure:
    with Session(budget=EpsilonDelta(epsilon=10, delta=1e-6), ledger=tmp_path / "l.db") as s:
        s.add_table(
            "t", pd.DataFrame({"v": [LOWER]}), bounds={"v": (LOWER, 1e6 + 2.5)}, privacy_unit=ROW
        )
        plan = s.plan("SELECT AVG(v) AS a FROM t", epsilon=1)
        m = next(x for x in map(plan.measure, plan.aggregates[0].measures) if x.kind == "sum")
    assert isinstance(m, SumMeasure) and m.exponent == GRID
    assert m.row_low + m.centre == 10241  # the bound rounded half away from zero
    return m


def _evaluate(tree: exp.Expression, value: float, *, ties_to_even: bool) -> int:
    """The per-row value computed by DuckDB; ``ties_to_even`` makes ROUND behave as PostgreSQL's."""
    tree = tree.copy()
    if ties_to_even:
        tree = tree.transform(
            lambda n: (
                exp.Anonymous(this="round_even", expressions=[n.this, exp.Literal.number(0)])
                if isinstance(n, exp.Round)
                else n
            )
        )
    sql = f"SELECT {tree.sql('duckdb')} FROM (SELECT CAST(? AS DOUBLE) AS v) AS __t"
    row = duckdb.connect().execute(sql, [value]).fetchone()
    assert row is not None
    return int(row[0])


def test_sum_values_are_clamped_after_rounding(tmp_path: Path) -> None:
    m = _tie_measure(tmp_path)
    a, b = m.row_low + m.centre, m.row_high + m.centre
    tree = row_expression(m, POSTGRES_CAPABILITIES)
    assert tree is not None
    # With PostgreSQL's tie rule the row at the lower bound still gives a, not a − 1.
    assert _evaluate(tree, LOWER, ties_to_even=True) == a
    assert _evaluate(tree, -1e300, ties_to_even=True) == a
    assert _evaluate(tree, 1e300, ties_to_even=True) == b
    # Negative control: the rounding alone (the expression before this fix) leaves [a, b].
    inner = next(n for n in tree.find_all(exp.Cast) if isinstance(n.this, exp.Round))
    assert _evaluate(inner, LOWER, ties_to_even=True) == a - 1
    # NULL and NaN stay NULL.
    sql = f"SELECT {tree.sql('duckdb')} FROM (SELECT CAST('NaN' AS DOUBLE) AS v) AS __t"
    assert duckdb.connect().execute(sql).fetchone() == (None,)


@pytest.mark.parametrize("caps", [DUCKDB_CAPABILITIES, SPARK_CAPABILITIES])
def test_clamp_after_rounding_changes_nothing_where_ties_round_away(
    tmp_path: Path, caps: object
) -> None:
    """DuckDB and Spark round half away from zero, as the bounds are: the clamp is a no-op."""
    m = _tie_measure(tmp_path)
    tree = row_expression(m, caps)  # type: ignore[arg-type]
    assert tree is not None
    inner = next(n for n in tree.find_all(exp.Cast) if isinstance(n.this, exp.Round))
    values = [LOWER, LOWER + 2.0**GRID, 12.3456, 999_999.875, 1e6 + 2.5]
    values += [LOWER + k * 2.0 ** (GRID - 1) for k in range(1, 9)]
    for v in values:
        assert _evaluate(tree, v, ties_to_even=False) == _evaluate(inner, v, ties_to_even=False)

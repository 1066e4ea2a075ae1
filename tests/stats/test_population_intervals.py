"""Population-scale answers on a Bernoulli sample: interval coverage and accuracy.

One table holds ``G = 2000`` public groups of 20–80 people each (people: 1 or 2 rows, in one
group; values ``x ∈ {0, …, 10}``), queried with ``max_groups = 1, max_rows = 2`` and bounds
``[0, 10]``, so contribution bounding drops nothing and the population totals are the plain
per-group ``COUNT(*)``, ``SUM(x)`` and number of people. The table is registered with
``sample_rate = 1/5``: every person is kept by their own secret coin. Groups share no
person and each gets its own noise, so one query gives ``G`` *independent* draws of
(estimate, interval) — each against its own known truth — and a coverage count over groups is
a Binomial(G, p) with ``p ≥ level`` for a valid interval.

Checks, each rejecting at 1e-7 under its null hypothesis (``_mechanisms_support``): exact
binomial tests that coverage ≥ 0.9 (``coverage_too_low``), and median-of-means tests that the
standardised error ``(T̂ − T)/σ`` has mean 0 (``σ² = (1−β)/β·Σ y_u² + Var(noise)/β²``, known
from the data and the plan; false rejection ≤ 5.6e-8). No test makes more than four honest
checks: false failure < 4e-7 < 1e-6 per test.

Two regimes: ε = 20 (sampling error dominates) and ε = 0.1 (noise dominates). Negative
controls, fed the same checks and required to fail: the noise-only interval (what the
answer would say without the sampling term) in the first regime, the sampling-only interval
(Bernstein without the noise term) in the second, and the unscaled sample values in the
accuracy test. Measured margins are in the comments.

The release path is called through :func:`deniable.query.execute.execute` (the session's
``population=`` option forwards to it).
"""

from __future__ import annotations

import functools
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from _mechanisms_support import coverage_too_low, laplace_moments, mom_check

from deniable.accounting.loss import Epsilon
from deniable.curator.session import Session
from deniable.mechanisms.release import laplace_half_width
from deniable.query.answer import Answer
from deniable.query.program import QueryProgram
from deniable.sampling.population import total_interval

pytestmark = pytest.mark.stats

G = 2000
BETA = Fraction(1, 5)
LEVEL = 0.9
QUERY = (
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, COUNT(DISTINCT uid) AS u, "
    "SUM(x) / COUNT(*) AS r FROM t GROUP BY g"
)
SPLIT = {"n": 1, "s": 1, "u": 1}
F64 = npt.NDArray[np.float64]


@functools.lru_cache(maxsize=1)
def population() -> pd.DataFrame:
    """The whole table (test data, fixed seed): one row per (person, row)."""
    rng = np.random.default_rng(20261127)
    sizes = rng.integers(20, 81, G)
    person = np.arange(int(sizes.sum()))
    group = np.repeat(np.arange(G), sizes)
    rows_each = rng.integers(1, 3, person.size)
    uid = np.repeat(person, rows_each)
    return pd.DataFrame(
        {
            "uid": [f"p{i}" for i in uid],
            "g": np.repeat(group, rows_each),
            "x": rng.integers(0, 11, uid.size),
        }
    )


@functools.lru_cache(maxsize=1)
def truth() -> pd.DataFrame:
    """Per group: the population totals and the sums of squared per-person contributions."""
    df = population()
    per = df.groupby(["g", "uid"]).agg(n=("x", "size"), s=("x", "sum")).reset_index()
    out = per.groupby("g").agg(
        n=("n", "sum"),
        s=("s", "sum"),
        u=("uid", "size"),
        n2=("n", lambda v: float((v.astype(float) ** 2).sum())),
        s2=("s", lambda v: float((v.astype(float) ** 2).sum())),
    )
    return out.sort_index()


def _ask(s: Session, program: QueryProgram, *, population: bool) -> Answer:
    return s.execute(program, population=population)


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Answer, QueryProgram]]:
    path: Path = tmp_path_factory.mktemp("population") / "ledger.db"
    s = Session(budget=Epsilon(epsilon=1000), ledger=path)
    s.add_table(
        "t",
        population(),
        privacy_unit="uid",
        bounds={"x": (0, 10)},
        max_groups=1,
        max_rows=2,
        public_keys={"g": list(range(G))},
        sample_rate=BETA,
    )
    out = {}
    for regime, eps in (("sampling", 20), ("noise", Fraction(1, 10))):
        program = s.compile(QUERY, epsilon=eps, split=SPLIT, level=LEVEL)
        answer = _ask(s, program, population=True)
        assert answer.metadata.population and "(population)" in answer.metadata.notes
        out[regime] = (answer, program)
    s.close()
    return out


def _frame(answer: Answer) -> pd.DataFrame:
    return answer.frame.sort_values("g").reset_index(drop=True)


def _hits(low: npt.ArrayLike, high: npt.ArrayLike, target: npt.ArrayLike) -> int:
    lo, hi, t = (np.asarray(v, dtype=np.float64) for v in (low, high, target))
    return int(((lo <= t) & (t <= hi)).sum())


def _noise(program: QueryProgram, name: str) -> tuple[float, float]:
    """``(half-width at LEVEL, variance)`` of the noise on aggregate ``name``, value units."""
    agg = next(a for a in program.plan.aggregates if a.name == name)
    meas = program.plan.measure(agg.measures[0])
    t = Fraction(meas.sensitivity) / meas.budget
    g = float(meas.granularity)
    return laplace_half_width(t, LEVEL) * g, laplace_moments(float(t))[0] * g * g


def _bound(program: QueryProgram, name: str) -> float:
    agg = next(a for a in program.plan.aggregates if a.name == name)
    meas = program.plan.measure(agg.measures[0])
    return float(meas.partition_sensitivity * meas.row_granularity)


# ----------------------------------------------------------------------------- coverage


def test_intervals_cover_when_sampling_error_dominates(answers) -> None:  # type: ignore[no-untyped-def]
    answer, program = answers["sampling"]
    f, tr = _frame(answer), truth()
    ratio = tr["s"] / tr["n"]
    for col, target in (("n", tr["n"]), ("s", tr["s"]), ("u", tr["u"]), ("r", ratio)):
        hits = _hits(f[f"{col}_low"], f[f"{col}_high"], target)
        # Measured coverage 0.9995 (n), 1.0 (s), 0.999 (u), 1.0 (r): Bernstein with the
        # worst-case Σy² = R·T is conservative (ε = 0.1: 0.977, 0.983, 0.967, 1.0).
        assert not coverage_too_low(hits, G, LEVEL), (col, hits)
    # Negative control: the noise-only interval around the population estimate, value ±
    # (noise half-width)/β — what the answer would report if the sampling term were
    # dropped. Measured coverage 0.016 (count) and 0.23 (sum), against 0.9.
    for col in ("n", "s"):
        half, _ = _noise(program, col)
        est = f[col].to_numpy(dtype=np.float64)
        hits = _hits(est - half / float(BETA), est + half / float(BETA), tr[col])
        assert coverage_too_low(hits, G, LEVEL), (col, hits)


def test_intervals_cover_when_noise_dominates(answers) -> None:  # type: ignore[no-untyped-def]
    answer, program = answers["noise"]
    f, tr = _frame(answer), truth()
    for col in ("n", "s"):
        hits = _hits(f[f"{col}_low"], f[f"{col}_high"], tr[col])
        assert not coverage_too_low(hits, G, LEVEL), (col, hits)
    # Negative control: the sampling-only interval (Bernstein around the noisy sample
    # total, no noise term). Measured coverage 0.35 (count) and 0.58 (sum), against 0.9.
    for col in ("n", "s"):
        sample = f[col].to_numpy(dtype=np.float64) * float(BETA)
        lo, hi = total_interval(
            sample, sample, rate=BETA, bound=_bound(program, col), alpha=1 - LEVEL
        )
        hits = _hits(lo, hi, tr[col])
        assert coverage_too_low(hits, G, LEVEL), (col, hits)


# ----------------------------------------------------------------------------- accuracy


def _z(values: F64, program: QueryProgram, col: str, sq: str, target: pd.Series) -> F64:
    beta = float(BETA)
    _, noise_var = _noise(program, col)
    var = (1 - beta) / beta * truth()[sq].to_numpy() + noise_var / beta**2
    return np.asarray((values - target.to_numpy()) / np.sqrt(var), dtype=np.float64)


def test_estimates_are_unbiased_for_the_population_totals(answers) -> None:  # type: ignore[no-untyped-def]
    # Horvitz–Thompson: (T̂ − T)/σ has mean 0 and variance 1 (counts clamped at 0 add a
    # negligible bias: a group of ≥ 20 people has no sampled row w.p. ≤ 0.8^20 ≈ 0.012).
    answer, program = answers["sampling"]
    f, tr = _frame(answer), truth()
    for col, sq in (("n", "n2"), ("s", "s2")):
        z = _z(f[col].to_numpy(dtype=np.float64), program, col, sq, tr[col])
        check = mom_check(z, 0.0, 1.0)
        # Measured: 0.018 (n) and 0.045 (s) sd from 0, bound ±0.38; the z's variance is
        # 1.01 and 1.00, so σ is right too.
        assert not check.rejected, (col, str(check))
        # Control: the sample's own values (no 1/β), as without population=True: measured
        # −2.65 sd (count) and −2.35 sd (sum), far outside the ±0.38 bound.
        unscaled = f[col].to_numpy(dtype=np.float64) * float(BETA)
        check = mom_check(_z(unscaled, program, col, sq, tr[col]), 0.0, 1.0)
        assert check.rejected, (col, str(check))

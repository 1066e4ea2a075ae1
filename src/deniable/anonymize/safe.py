"""Safe k-anonymization in the engine: strongly safe (Theorem 3.9) and ε-safe (Theorem 3.11).

The pipeline, one line per intermediate shape::

    input table/view (N rows, any columns)
      → coverage check over all N rows (refuse before anything is sampled or published)
      → Bernoulli(β) sample, recoded columns only (TEMP table, never released)
      → GROUP BY the recoded tuple, HAVING COUNT(*) ≥ k      (classes table: tuple, size)
      → published table: each class repeated size times, sorted  (the release)

Everything runs as SQL generated from the recoding, so rows never travel into Python and
10⁷ rows take seconds. The step after sampling (:func:`anonymize_sample`) is a deterministic
function of the sample. Only the recoded columns are published; other input columns are
dropped. The privacy unit is one input row (add/remove); a person with several rows is
protected by group privacy only.

**ε-safe.** The recoding is chosen among the candidate levels by the exponential mechanism,
run on a *separate, independent* Bernoulli(β) sample that is then discarded; the published
sample is drawn afresh. Theorem 3.11's proof writes ``P[output] = Σ_g P[choose g]·P[g(S) =
output]``, which holds exactly when the choice is independent of the published sample ``S``
(with the same sample the choice would tilt the distribution of the class counts the
binomial argument relies on). The exponential mechanism with ``ε₁`` on a β-sample is
``ln(1 + β(e^ε₁ − 1))``-DP for the input table (LQS Theorem 1), and that amplified value is
the ``ε₁`` of Theorem 3.11: the release is ``(ε₁' + ε₂, d(k, β, ε₂))``-DP.

Utility score of a candidate recoding ``g`` (on the selection sample)::

    score(g) = kept(g) · u(g),   u(g) = 1 − mean over columns of level_loss(level)

``kept(g)`` counts rows in classes of size ≥ k and ``u(g) ∈ [0, 1]`` is the information a
kept row retains (domain-averaged Loss Metric, fixed by the hierarchy, not the data).
Sensitivity: adding or removing one row changes one class's size by one; that changes
``kept`` by 1 (class stays ≥ k), by k (class crosses k: k rows gain or lose their place), or
not at all, so ``|Δscore| ≤ k·u(g) ≤ k·max_g u(g) =: Δ``, the sensitivity used.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa

from deniable.anonymize.dps import (
    DPSGuarantee,
    _check_k,
    amplified_epsilon,
    epsilon_safe_guarantee,
    strongly_safe_guarantee,
)
from deniable.anonymize.recoding import (
    Recoding,
    RecodingError,
    RecodingSpec,
    UnknownColumn,
)
from deniable.anonymize.report import CLASS_SIZE, UtilityReport, utility_report
from deniable.errors import InvalidParameter
from deniable.mechanisms.exponential import exponential
from deniable.noise.source import RandomSource
from deniable.sampling.positional import bernoulli_sample, fresh_name
from deniable.sqlnames import quote_identifier, quote_literal
from deniable.sqlrunner import SQLRunner, one_row, require_runner

Progress = Callable[[str, float], None]
"""Called with a step's description and the fraction of the work done, in [0, 1]."""

MAX_CANDIDATES = 4096


@dataclass(frozen=True, slots=True)
class Selection:
    """How an ε-safe release chose its recoding (everything here is public).

    Attributes:
        candidates: how many recodings were candidates.
        chosen: the chosen recoding's levels, column → level name.
        epsilon: the exponential mechanism's ε on the selection sample.
        epsilon_input: its loss for the input table after amplification by sampling.
        sensitivity: the score's sensitivity used (``k · max u``).
    """

    candidates: int
    chosen: dict[str, str]
    epsilon: float
    epsilon_input: float
    sensitivity: float


@dataclass(frozen=True, eq=False)
class Anonymization:
    """A safe k-anonymization: the published table (in the engine), its guarantee and report.

    The published table lives in ``runner``'s session as a TEMP table of classes;
    :meth:`published_sql` expands it to one row per published tuple, sorted (a function of
    the multiset only).

    Attributes:
        runner: the engine holding the result.
        classes_table: TEMP table, one row per published class (recoded columns + size).
        recoding: the recoding used.
        guarantee: the ``(β, ε, δ)``-DPS guarantee of the release.
        report: the utility report (with curator-only figures marked).
        dropped_columns: input columns not published.
        selection: how the recoding was chosen (ε-safe only).
        sample_id: an opaque identity (128 random bits, hex; nothing of the data) of the
            Bernoulli sample the release consumed — the sample itself is dropped at once.
            Give it to :meth:`deniable.ledger.Ledger.record_sample_release` to charge the
            release and record that the sample answers nothing else (LQS §2.6).
    """

    runner: SQLRunner
    classes_table: str
    recoding: Recoding
    guarantee: DPSGuarantee
    report: UtilityReport
    dropped_columns: tuple[str, ...]
    selection: Selection | None = None
    sample_id: str = field(default_factory=lambda: secrets.token_hex(16))

    def published_sql(self) -> str:
        """SQL of the published table: each class's tuple repeated size times, sorted."""
        cols = ", ".join(quote_identifier(n) for n in self.recoding.names)
        t = self.classes_table
        return f"SELECT {cols} FROM {t}, range({t}.{CLASS_SIZE}) ORDER BY {cols}"

    def to_arrow(self) -> pa.Table:
        """The published table as Arrow."""
        return self.runner.arrow(self.published_sql())

    def to_parquet(self, path: str | Path) -> None:
        """Write the published table to a Parquet file."""
        self.runner.execute(
            f"COPY ({self.published_sql()}) TO {quote_literal(str(path))} (FORMAT parquet)"
        )

    def guarantee_at(
        self, *, epsilon: float | None = None, delta: float | None = None
    ) -> DPSGuarantee:
        """Another point of the same release's guarantee curve.

        The theorems hold for every ``ε₂ ≥ −ln(1 − β)`` at once, each with its own δ, so one
        release has a whole curve of ``(ε, δ)`` guarantees; give ``epsilon`` (the
        anonymization part ``ε₂``) or ``delta``. Spends nothing.
        """
        g = self.guarantee
        if self.selection is None:
            return strongly_safe_guarantee(g.k, beta=g.beta, epsilon=epsilon, delta=delta)
        return epsilon_safe_guarantee(
            g.k,
            beta=g.beta,
            selection_epsilon=g.epsilon_selection,
            epsilon=epsilon,
            delta=delta,
        )

    def class_counts(self) -> pa.Table:
        """The published table in compressed form: each distinct tuple with its count."""
        cols = ", ".join(quote_identifier(n) for n in self.recoding.names)
        return self.runner.arrow(
            f"SELECT {cols}, {CLASS_SIZE} AS count FROM {self.classes_table} ORDER BY {cols}"
        )


def strongly_safe(
    runner: SQLRunner,
    table: str,
    recoding: Recoding | RecodingSpec,
    *,
    k: int,
    beta: float,
    epsilon: float | None = None,
    delta: float | None = None,
    source: RandomSource | None = None,
    progress: Progress | None = None,
) -> Anonymization:
    """Sample, recode with a fixed recoding, suppress classes below k, publish (Thm 3.9).

    Args:
        runner: the engine in which ``table`` is a table or view (DuckDB SQL), e.g.
            :class:`deniable.engines.duckdb.DuckDBRunner` around your connection.
        table: the input's name.
        recoding: the fixed recoding (a spec's ``level`` per column); it must have been
            chosen without looking at this data, or the guarantee does not hold.
        k: suppression threshold, ≥ 2.
        beta: sampling rate in (0, 1).
        epsilon: the guarantee's ε (δ derived), or
        delta: the target δ (ε derived); exactly one of them.
        source: randomness (default: the OS CSPRNG).
        progress: optional progress callback.

    Returns:
        The :class:`Anonymization`. Its release is ``(ε, d(k, β, ε))``-DP for adding or
        removing one input row (Li–Qardaji–Su Theorem 3.9), for this one release.

    Raises:
        InvalidParameter: k < 2, β ∉ (0, 1), ε < −ln(1 − β), or a bad δ — before the data
            is touched.
        UnknownColumn: the recoding names a column the table lacks.
    """
    fixed = recoding.fixed() if isinstance(recoding, RecodingSpec) else recoding
    guarantee = strongly_safe_guarantee(k, beta=beta, epsilon=epsilon, delta=delta)
    tell = progress or _silent
    runner = require_runner(runner)
    source_name, dropped = _check_input(runner, table, fixed.names)
    tell("sampling", 0.2)
    sample = bernoulli_sample(runner, source_name, _raw_cols(fixed.names), beta, source=source)
    try:
        sample_rows = _count(runner, sample)
        tell("recoding and suppressing classes below k", 0.5)
        classes = anonymize_sample(runner, sample, fixed, k=k)
    finally:
        runner.execute(f"DROP TABLE IF EXISTS {sample}")  # the sample serves one release only
    tell("computing the utility report", 0.9)
    report = utility_report(runner, classes, fixed, k=k, sample_rows=sample_rows)
    tell("done", 1.0)
    return Anonymization(runner, classes, fixed, guarantee, report, dropped)


def epsilon_safe(
    runner: SQLRunner,
    table: str,
    spec: RecodingSpec,
    *,
    k: int,
    beta: float,
    selection_epsilon: float,
    epsilon: float | None = None,
    delta: float | None = None,
    source: RandomSource | None = None,
    progress: Progress | None = None,
) -> Anonymization:
    """Choose the recoding with the exponential mechanism, then proceed as strongly safe.

    Args:
        runner: the engine in which ``table`` is a table or view (DuckDB SQL).
        table: the input's name.
        spec: hierarchies and each column's candidate levels.
        k: suppression threshold, ≥ 2.
        beta: sampling rate in (0, 1), used for both (independent) samples.
        selection_epsilon: ε of the exponential mechanism on the selection sample.
        epsilon: ``ε₂``, the anonymization part of the guarantee (δ derived), or
        delta: the target δ (``ε₂`` derived); exactly one of them.
        source: randomness (default: the OS CSPRNG).
        progress: optional progress callback.

    Returns:
        The :class:`Anonymization`; its release is ``(ε₁' + ε₂, d(k, β, ε₂))``-DP for adding
        or removing one input row, with ``ε₁' = ln(1 + β(e^selection_epsilon − 1))``
        (Li–Qardaji–Su Theorem 3.11 with Theorem 1), for this one release.

    Raises:
        InvalidParameter, UnknownColumn: as :func:`strongly_safe`, and when
            there are more than 4096 candidate recodings.
    """
    k = _check_k(k)
    if isinstance(selection_epsilon, bool) or not (
        isinstance(selection_epsilon, float | int) and 0 < selection_epsilon < math.inf
    ):
        raise InvalidParameter("selection_epsilon must be a number > 0")
    eps1_input = amplified_epsilon(float(selection_epsilon), beta)
    guarantee = epsilon_safe_guarantee(
        k, beta=beta, selection_epsilon=eps1_input, epsilon=epsilon, delta=delta
    )
    count = spec.candidate_count()
    if count > MAX_CANDIDATES:
        raise InvalidParameter(
            f"{count} candidate recodings (the product of the columns' candidate "
            f"levels) exceed {MAX_CANDIDATES}: restrict 'candidates' in the recoding"
        )
    candidates = spec.candidates()
    tell = progress or _silent
    runner = require_runner(runner)
    source_name, dropped = _check_input(runner, table, spec.names)
    tell("sampling for the selection", 0.1)
    raw = _raw_cols(spec.names)
    selection_sample = bernoulli_sample(runner, source_name, raw, beta, source=source)
    try:
        index, sensitivity = select_recoding(
            runner,
            selection_sample,
            candidates,
            k=k,
            epsilon=selection_epsilon,
            source=source,
            progress=lambda f: tell("scoring candidate recodings", 0.15 + 0.35 * f),
        )
    finally:
        runner.execute(f"DROP TABLE IF EXISTS {selection_sample}")  # used for this choice only
    chosen = candidates[index]
    selection = Selection(
        candidates=len(candidates),
        chosen=chosen.levels(),
        epsilon=float(selection_epsilon),
        epsilon_input=eps1_input,
        sensitivity=float(sensitivity),
    )
    tell("sampling the data to publish", 0.55)
    sample = bernoulli_sample(runner, source_name, raw, beta, source=source)
    try:
        sample_rows = _count(runner, sample)
        tell("recoding and suppressing classes below k", 0.7)
        classes = anonymize_sample(runner, sample, chosen, k=k)
    finally:
        runner.execute(f"DROP TABLE IF EXISTS {sample}")
    tell("computing the utility report", 0.9)
    report = utility_report(runner, classes, chosen, k=k, sample_rows=sample_rows)
    tell("done", 1.0)
    return Anonymization(runner, classes, chosen, guarantee, report, dropped, selection)


def anonymize_sample(runner: SQLRunner, sample: str, recoding: Recoding, *, k: int) -> str:
    """Recode every row of ``sample`` and keep the classes seen at least ``k`` times.

    Deterministic: the result (a TEMP table of classes with their sizes) depends only on the
    multiset of rows in ``sample``. This step alone is not private; privacy comes from the
    random sample it is given (see :func:`strongly_safe`).

    Returns:
        The name of the new TEMP classes table (recoded columns + :data:`CLASS_SIZE`).
    """
    k = _check_k(k)
    runner = require_runner(runner)
    out = fresh_name("classes")
    runner.execute(
        f"CREATE TEMP TABLE {out} AS SELECT {recoding.select_sql()}, COUNT(*) AS {CLASS_SIZE} "
        f"FROM {sample} GROUP BY ALL HAVING COUNT(*) >= {k}"
    )
    return out


def select_recoding(
    runner: SQLRunner,
    sample: str,
    candidates: list[Recoding],
    *,
    k: int,
    epsilon: float,
    source: RandomSource | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[int, Fraction]:
    """Choose a candidate with the exponential mechanism on its score; ε-DP for ``sample``.

    Scores are :func:`candidate_scores` (sensitivity ``k·max u``). The loss is ``epsilon``
    for adding or removing a row of ``sample``; when ``sample`` is a fresh β-sample of the
    input, ``ln(1 + β(e^ε − 1))`` for the input (:func:`amplified_epsilon`).

    Returns:
        The chosen candidate's index and the sensitivity used.
    """
    scores, sensitivity = candidate_scores(runner, sample, candidates, k=k, progress=progress)
    release = exponential(
        np.array(scores, dtype=object), sensitivity=sensitivity, epsilon=epsilon, source=source
    )
    return int(release.value), sensitivity


def candidate_scores(
    runner: SQLRunner,
    sample: str,
    candidates: list[Recoding],
    *,
    k: int,
    progress: Callable[[float], None] | None = None,
) -> tuple[list[Fraction], Fraction]:
    """Exact utility scores ``kept(g)·u(g)`` of each candidate on ``sample``, and Δ.

    The sample is grouped once by every candidate level of every column (each level is a
    function of the raw value, so this is the finest partition); each candidate's classes
    are unions of these groups, found by one GROUP BY of that small table per candidate
    (columns at ``'*'`` are constant and left out of the key). Scores are private: they
    feed the exponential mechanism and are never released.
    """
    k = _check_k(k)
    runner = require_runner(runner)
    if not candidates:
        raise InvalidParameter("there must be at least one candidate recoding")
    names = candidates[0].names
    if any(c.names != names for c in candidates):
        raise InvalidParameter("every candidate recoding must publish the same columns")
    hierarchy = {c.name: c.hierarchy for c in candidates[0].columns}
    alias = {
        (col.name, col.level): quote_identifier(f"__c{j}_l{col.level}")
        for cand in candidates
        for j, col in enumerate(cand.columns)
        if col.level != col.hierarchy.top
    }
    select = ", ".join(f"{hierarchy[n].sql(n, lv)} AS {a}" for (n, lv), a in alias.items())
    fine = fresh_name("fine")
    runner.execute(
        f"CREATE TEMP TABLE {fine} AS SELECT {select + ', ' if select else ''}"
        f"COUNT(*) AS {CLASS_SIZE} FROM {sample} GROUP BY ALL"
    )
    scores: list[Fraction] = []
    try:
        for i, cand in enumerate(candidates):
            keys = [alias[(c.name, c.level)] for c in cand.columns if (c.name, c.level) in alias]
            group = f"GROUP BY {', '.join(keys)}" if keys else ""
            row = one_row(
                runner,
                f"SELECT COALESCE(SUM(s), 0) FROM (SELECT SUM({CLASS_SIZE}) AS s FROM {fine} "
                f"{group}) WHERE s >= {k}",
            )
            scores.append(Fraction(int(row[0])) * cand.utility_weight())
            if progress is not None:
                progress((i + 1) / len(candidates))
    finally:
        runner.execute(f"DROP TABLE IF EXISTS {fine}")
    top = max(c.utility_weight() for c in candidates)
    sensitivity = k * top if top > 0 else Fraction(k)
    return scores, sensitivity


# --------------------------------------------------------------------------- internals


def _silent(step: str, done: float) -> None:
    del step, done


def _raw_cols(names: tuple[str, ...]) -> str:
    return ", ".join(quote_identifier(n) for n in names)


def _count(runner: SQLRunner, table: str) -> int:
    return int(one_row(runner, f"SELECT COUNT(*) FROM {table}")[0])


def _check_input(
    runner: SQLRunner, table: str, names: tuple[str, ...]
) -> tuple[str, tuple[str, ...]]:
    """Return the quoted input name and the columns that will not be published."""
    if not isinstance(table, str) or not table:
        raise InvalidParameter("table must be the name of a DuckDB table or view")
    quoted = quote_identifier(table)
    columns = runner.columns(quoted)
    if columns is None:
        raise InvalidParameter(f"no table or view named {table!r} in this engine session")
    have = [name for name, _ in columns]
    bad = [n for n in names if n.startswith("__deniable")]
    if bad:
        raise RecodingError(f"column names starting with '__deniable' are reserved: {bad}")
    unknown = [n for n in names if n not in have]
    if unknown:
        raise UnknownColumn(f"the recoding names unknown columns {unknown}; the table has {have}")
    return quoted, tuple(n for n in have if n not in names)

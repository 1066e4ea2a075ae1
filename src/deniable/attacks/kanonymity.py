"""The leak of clustering-based k-anonymity (Li–Qardaji–Su §3.1), and why safe k-anonymity holds.

A town's table records age and net worth; it is public knowledge that only one person in
town is worth more than 10 million. The attacker reads an anonymised release and concludes:
"if some generalised net-worth range goes above 10 million, the rich person is in the data,
and their worth is that range's upper end".

* The unsafe Mondrian anonymizer (:func:`~deniable.attacks.naive.unsafe_mondrian`) builds
  clusters of at least ``k`` people and publishes each cluster's ``[min, max]``: the rich
  person's cluster shows ``[…, 35,000,000]`` — presence and exact value revealed, although
  the table is k-anonymous. Without the rich person, no range goes above 10 million.
* Deniable's safe anonymizer (:func:`deniable.anonymize.strongly_safe`) samples rows with
  probability β, recodes them with bands fixed before seeing the data, and suppresses every
  recoded tuple seen fewer than ``k`` times. The rich person's band holds nobody else, so it
  is suppressed in every run: the release looks the same with or without them, and the
  release carries an ``(ε, δ)``-DP guarantee (Theorem 3.9).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import duckdb
import pandas as pd
import pyarrow as pa

from deniable.anonymize import Interval, RecodedColumn, Recoding, strongly_safe
from deniable.attacks.data import town
from deniable.attacks.naive import unsafe_mondrian
from deniable.engines.duckdb import DuckDBRunner
from deniable.errors import InvalidParameter
from deniable.explain.posterior import posterior_bounds

THRESHOLD = 10_000_000
"""Public knowledge: only one person in town is worth more than this."""


@dataclass(frozen=True)
class KAnonymityRun:
    """What the attacker concluded from one anonymised release.

    Attributes:
        system: which anonymizer.
        safe: whether it is deniable's.
        rich_in_data: whether the rich person was in the input (ground truth).
        says_present: whether the attacker concluded the rich person is in the data.
        revealed_value: the net worth the attacker read off (None: nothing revealed).
        rows_published: rows in the release.
        evidence: the published range or band the conclusion rests on (None: none).
    """

    system: str
    safe: bool
    rich_in_data: bool
    says_present: bool
    revealed_value: float | None
    rows_published: int
    evidence: str | None = None


@dataclass(frozen=True)
class KAnonymityReport:
    """The k-anonymity leak, on the unsafe Mondrian anonymizer and on deniable's.

    Attributes:
        n: people in town (with the rich person).
        k: the anonymity threshold.
        rich_worth: the rich person's net worth.
        beta: deniable's sampling rate.
        guarantee: deniable's release guarantee, as text.
        epsilon: the guarantee's ε.
        delta: the guarantee's δ.
        posterior: the posterior bounds (prior 1/2) that the guarantee implies, failing with
            probability at most about δ.
        runs: Mondrian with and without the rich person, then deniable's runs.
        attack: the attack's name.
    """

    n: int
    k: int
    rich_worth: int
    beta: float
    guarantee: str
    epsilon: float
    delta: float
    posterior: tuple[float, float]
    runs: tuple[KAnonymityRun, ...]
    attack: str = field(default="k-anonymity")

    def text(self) -> str:
        """A readable account of the attack."""
        from deniable.attacks.report import render

        return render(self)


def recoding(*, band: int = 5_000_000) -> Recoding:
    """Deniable's data-independent recoding: 20-year age bands, ``band``-wide worth bands."""
    return Recoding(
        (
            RecodedColumn("age", Interval(lower=0, upper=120, widths=(20,)), 1),
            RecodedColumn("net_worth", Interval(lower=0, upper=100_000_000, widths=(band,)), 1),
        )
    )


def _read_mondrian(frame: pd.DataFrame) -> tuple[bool, float | None, str | None]:
    high = frame["net_worth_high"]
    over = frame[high > THRESHOLD]
    if over.empty:
        return False, None, None
    row = over.iloc[0]
    return (
        True,
        float(row["net_worth_high"]),
        f"[{row['net_worth_low']:,.0f}, {row['net_worth_high']:,.0f}]",
    )


_BAND = re.compile(r"\[(\d+(?:\.\d+)?), (\d+(?:\.\d+)?)\)")


def _read_bands(table: pa.Table) -> tuple[bool, float | None, str | None]:
    for label in table.column("net_worth").to_pylist():
        m = _BAND.fullmatch(str(label))
        if m and float(m.group(2)) > THRESHOLD:
            return True, (float(m.group(1)) + float(m.group(2))) / 2, str(label)
    return False, None, None


def run_kanonymity(
    *,
    n: int = 1000,
    k: int = 10,
    beta: float = 0.2,
    delta: float = 1e-6,
    runs: int = 5,
    rich_worth: int = 35_000_000,
    seed: int = 0,
) -> KAnonymityReport:
    """Run the k-anonymity leak on the unsafe Mondrian anonymizer and on deniable's.

    Args:
        n: people in town.
        k: the anonymity threshold (deniable needs ``k ≥ 2``).
        beta: deniable's sampling rate.
        delta: the δ of deniable's guarantee (its ε is derived).
        runs: independent deniable releases with the rich person (fresh CSPRNG samples).
        rich_worth: the rich person's net worth (> 10 million, < 100 million).
        seed: seed of the synthetic town.

    Returns:
        The :class:`KAnonymityReport`. Each deniable release is ``(ε, δ)``-DP on its own.
    """
    if not THRESHOLD < rich_worth < 100_000_000:
        raise InvalidParameter("rich_worth must be between 10 and 100 million")
    if runs < 1:
        raise InvalidParameter("runs must be ≥ 1")
    out = []
    for rich in (True, False):
        people = town(n, seed=seed, rich=rich, rich_worth=rich_worth)
        release = unsafe_mondrian(people, ["age", "net_worth"], k=k)
        says, value, evidence = _read_mondrian(release.frame)
        out.append(
            KAnonymityRun(
                f"unsafe: Mondrian clustering, k = {k}",
                False,
                rich,
                says,
                value,
                len(release.frame),
                evidence,
            )
        )
    people = town(n, seed=seed, rich=True, rich_worth=rich_worth)
    con = duckdb.connect()
    try:
        runner = DuckDBRunner(con)
        runner.register("town", pa.Table.from_pandas(people[["age", "net_worth"]]))
        guarantee = None
        for _ in range(runs):
            anon = strongly_safe(runner, "town", recoding(), k=k, beta=beta, delta=delta)
            guarantee = anon.guarantee
            published = anon.to_arrow()
            says, value, evidence = _read_bands(published)
            out.append(
                KAnonymityRun(
                    f"deniable: safe k-anonymization (β = {beta:g}, k = {k})",
                    True,
                    True,
                    says,
                    value,
                    published.num_rows,
                    evidence,
                )
            )
    finally:
        con.close()
    assert guarantee is not None
    return KAnonymityReport(
        n=n,
        k=k,
        rich_worth=rich_worth,
        beta=beta,
        guarantee=guarantee.describe(),
        epsilon=guarantee.epsilon,
        delta=guarantee.delta,
        posterior=posterior_bounds(0.5, guarantee.epsilon),
        runs=tuple(out),
    )

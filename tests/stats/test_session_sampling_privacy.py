"""Empirical ε of SQL answers on a sampled table against the amplified loss the session charges.

The worst case of Li–Qardaji–Su Theorem 1 is a dataset where the one person who differs is
alone: ``D`` has nobody, ``D'`` has one person, and a count with ε₀-DP noise on the β-sample
has likelihood ratio exactly ``1 − β + βe^ε₀`` at its extremes, so ``ln(1 + β(e^ε₀ − 1))`` is
tight there. Many independent copies of that experiment run in *one* query: the table holds
``K`` people, each alone in their own public group ``g`` (``max_groups = 1``), and ``K`` more
public groups are empty. Each person is kept by their own secret coin and each group gets its
own noise, so the ``K`` occupied groups' noisy counts are independent draws of ``M(D')`` and
the ``K`` empty groups' of ``M(D)`` — by parallel composition the whole answer costs what one
group costs, which is what the session charges.

:func:`deniable.audit.estimate_epsilon` turns the two samples into a lower confidence bound
at ``alpha = 1e-7`` (exact Clopper–Pearson bounds, Bonferroni over the tested events): a
correct pipeline exceeds the charged ε with probability below 1e-7. Measured (K = 20,000,
ε₀ = 2, β = ¼, charged 0.9545): lower bound 0.77, point estimate 0.955.

Negative controls, fed to the same check and required to be refuted at the same charge:
(a) the query runs on the whole table instead of the sample (measured lower bound 1.86), and
(b) the sample is drawn at β = 0.6 while the charge assumes ¼ (true ε = 1.67).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from deniable.accounting.amplification import amplify_bernoulli
from deniable.accounting.loss import Epsilon
from deniable.audit import estimate_epsilon
from deniable.curator.session import Session

pytestmark = pytest.mark.stats

K = 20_000
EPS0 = Fraction(2)
BETA = Fraction(1, 4)
ALPHA = 1e-7
CHARGED = float(amplify_bernoulli(Epsilon(epsilon=EPS0), BETA).epsilon)


def _run(tmp_path: Path, sample_rate: Fraction | None) -> tuple[npt.NDArray[np.int64], ...]:
    """Noisy counts of the occupied groups (``M(D')``) and of the empty ones (``M(D)``)."""
    people = pd.DataFrame({"uid": [f"p{i}" for i in range(K)], "g": np.arange(K)})
    s = Session(budget=Epsilon(epsilon=10), ledger=tmp_path / "ledger.db")
    s.add_table(
        "t",
        people,
        privacy_unit="uid",
        max_groups=1,
        public_keys={"g": list(range(2 * K))},
        sample_rate=sample_rate,
        max_rows=1,
    )
    answer = s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=EPS0)
    if sample_rate == BETA:
        assert answer.loss == Epsilon(epsilon=Fraction(CHARGED))
    s.close()
    frame = answer.frame.sort_values("g")
    counts = frame["n"].to_numpy(dtype=np.int64)
    return counts[:K], counts[K:]


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> tuple[npt.NDArray[np.int64], ...]:
    return _run(tmp_path_factory.mktemp("honest"), BETA)


def test_charged_loss_is_the_amplified_loss() -> None:
    assert abs(CHARGED - np.log1p(0.25 * np.expm1(2.0))) < 1e-6


def test_the_person_is_in_about_a_quarter_of_the_samples(honest) -> None:  # type: ignore[no-untyped-def]
    with_person, empty = honest
    # Non-vacuous: the occupied groups differ from the empty ones by the sampled person.
    # P[n ≥ 1] is 0.119 without and 0.25·0.881 + 0.75·0.119 = 0.309 with the person
    # (discrete Laplace at ε₀ = 2, counts post-processed to ≥ 0); at K = 20,000 each share is
    # within ±0.03 of its value except with probability 2e^(−36) < 1e-15 (Hoeffding).
    share_with = float(np.mean(with_person >= 1))
    share_empty = float(np.mean(empty >= 1))
    assert abs(share_empty - 0.1192) < 0.03
    assert abs(share_with - 0.3095) < 0.03


def test_empirical_epsilon_within_the_amplified_charge(honest) -> None:  # type: ignore[no-untyped-def]
    with_person, empty = honest
    est = estimate_epsilon(with_person, empty, alpha=ALPHA)
    assert est.passes(CHARGED), est


def test_control_query_on_the_whole_table_is_refuted(tmp_path: Path) -> None:
    with_person, empty = _run(tmp_path, None)
    est = estimate_epsilon(with_person, empty, alpha=ALPHA)
    assert not est.passes(CHARGED), est


def test_control_sample_larger_than_accounted_is_refuted(tmp_path: Path) -> None:
    with_person, empty = _run(tmp_path, Fraction(3, 5))
    est = estimate_epsilon(with_person, empty, alpha=ALPHA)
    assert not est.passes(CHARGED), est

"""Empirical privacy of the contribution histograms (issue 21 §2), with a negative control.

``D`` and ``D′ = D`` plus one person with 900 rows over 3 groups: the engine's exact
histograms differ by one in one bin of each (checked). The three released histograms are
``ε``-DP together; the statistic ``s`` = the sum of the three bins the person lands in is a
post-processing of them, so ``s`` is ``ε``-DP too, and :func:`deniable.audit.estimate_epsilon`
(alpha = 1e-7: a correct release is refuted with probability below 1e-7 < 1e-6) must not
find more. The control releases each histogram at ``ε`` instead of ``ε/3`` (three times too
little noise, a true loss of ``3ε`` on ``s``) and must be refuted; measured while writing it:
lower bound ≈ 2.0 against the claimed 1 (the honest release: ≈ 0.61).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import numpy.typing as npt
import pytest

from deniable.accounting.loss import Epsilon
from deniable.audit import estimate_epsilon
from deniable.curator.session import Session
from deniable.curator.tune import BINS, KINDS, exact_histograms, release_histograms

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000
EPSILON = Fraction(1)
BASE = "SELECT i % 50 AS uid, 'g' || (i % 4) AS k FROM range(400) r(i)"


def _exact(tmp_path: Path, extra: bool) -> npt.NDArray[np.int64]:
    con = duckdb.connect()
    sql = BASE + (" UNION ALL SELECT 999, 'g' || (i % 3) FROM range(900) r(i)" if extra else "")
    con.execute(f"CREATE TABLE t AS {sql}")
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / f"{extra}.db")
    s.add_table("t", con, privacy_unit="uid", max_groups=1, max_rows=1)
    return exact_histograms(s._engines["t"], s._bindings["t"], s._tables["t"].column("uid"), ["k"])


def _sample(
    exact: npt.NDArray[np.int64], where: list[int], epsilon: Fraction
) -> npt.NDArray[np.int64]:
    """``N`` releases of ``s`` (the three bins ``where``), by the release path itself."""
    tiled = np.tile(exact, (1, N))  # N copies of each histogram, one call per kind
    releases = release_histograms(tiled, epsilon)
    values = np.stack([np.asarray(releases[k].value).reshape(N, BINS) for k in KINDS])
    return np.asarray(sum(values[k, :, b] for k, b in enumerate(where)), dtype=np.int64)


@pytest.fixture(scope="module")
def neighbours(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    tmp = tmp_path_factory.mktemp("tune-privacy")
    d, d2 = _exact(tmp, False), _exact(tmp, True)
    diff = d2 - d
    assert np.abs(diff).sum(axis=1).tolist() == [1, 1, 1]  # one bin per histogram
    where = [int(np.flatnonzero(diff[k])[0]) for k in range(len(KINDS))]
    return d, d2, where


def test_released_histograms_show_no_more_than_epsilon(
    neighbours: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    d, d2, where = neighbours
    est = estimate_epsilon(_sample(d, where, EPSILON), _sample(d2, where, EPSILON), alpha=ALPHA)
    assert est.lower <= float(EPSILON), f"lower={est.lower:.4f}"


def test_control_a_third_of_the_noise_is_refuted(
    neighbours: tuple[np.ndarray, np.ndarray, list[int]],
) -> None:
    d, d2, where = neighbours
    est = estimate_epsilon(
        _sample(d, where, 3 * EPSILON), _sample(d2, where, 3 * EPSILON), alpha=ALPHA
    )
    assert est.lower > float(EPSILON), f"lower={est.lower:.4f}"

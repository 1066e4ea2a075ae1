"""Empirical privacy of the contribution histograms (issue 21 §2), with a negative control.

``D`` and ``D′ = D`` plus one person with 900 rows over 3 groups: the engine's exact
histograms differ by one in one bin of each (checked). The four released histograms are
``ε``-DP together; the statistic ``s`` = the sum of the four bins the person lands in is a
post-processing of them, so ``s`` is ``ε``-DP too, and :func:`deniable.audit.estimate_epsilon`
(alpha = 1e-7: a correct release is refuted with probability below 1e-7 < 1e-6) must not
find more. The control releases each histogram at ``ε`` instead of ``ε/4`` (four times too
little noise, a true loss of ``4ε`` on ``s``) and must be refuted; measured while writing it:
lower bound ≈ 2.5 against the claimed 1 (the honest release: ≈ 0.52). Only the bins
the person lands in are released (``N`` times each, by :func:`release_histograms` itself):
the other bins are independent of ``s``.
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
from deniable.curator.tune import KINDS, exact_histograms, release_histograms

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000
EPSILON = Fraction(1)
BASE = "SELECT i % 50 AS uid, 'g' || (i % 4) AS k FROM range(400) r(i)"


def _exact(tmp_path: Path, extra: bool) -> dict[str, npt.NDArray[np.int64]]:
    con = duckdb.connect()
    sql = BASE + (" UNION ALL SELECT 999, 'g' || (i % 3) FROM range(900) r(i)" if extra else "")
    con.execute(f"CREATE TABLE t AS {sql}")
    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / f"{extra}.db")
    s.add_table("t", con, privacy_unit="uid", max_groups=1, max_rows=1)
    return exact_histograms(s._engines["t"], s._bindings["t"], s._tables["t"].column("uid"), ["k"])


def _sample(
    exact: dict[str, npt.NDArray[np.int64]], where: dict[str, int], epsilon: Fraction
) -> npt.NDArray[np.int64]:
    """``N`` releases of ``s`` (the four bins ``where``), by the release path itself."""
    tiled = {k: np.full(N, exact[k][where[k]], dtype=np.int64) for k in KINDS}
    releases = release_histograms(tiled, epsilon)
    return np.asarray(sum(np.asarray(releases[k].value) for k in KINDS), dtype=np.int64)


@pytest.fixture(scope="module")
def neighbours(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, int]]:
    tmp = tmp_path_factory.mktemp("tune-privacy")
    d, d2 = _exact(tmp, False), _exact(tmp, True)
    diff = {k: d2[k] - d[k] for k in KINDS}
    assert [int(np.abs(diff[k]).sum()) for k in KINDS] == [1, 1, 1, 1]  # one bin per histogram
    where = {k: int(np.flatnonzero(diff[k])[0]) for k in KINDS}
    return d, d2, where


def test_released_histograms_show_no_more_than_epsilon(
    neighbours: tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, int]],
) -> None:
    d, d2, where = neighbours
    est = estimate_epsilon(_sample(d, where, EPSILON), _sample(d2, where, EPSILON), alpha=ALPHA)
    assert est.lower <= float(EPSILON), f"lower={est.lower:.4f}"


def test_control_a_quarter_of_the_noise_is_refuted(
    neighbours: tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, int]],
) -> None:
    d, d2, where = neighbours
    est = estimate_epsilon(
        _sample(d, where, 4 * EPSILON), _sample(d2, where, 4 * EPSILON), alpha=ALPHA
    )
    assert est.lower > float(EPSILON), f"lower={est.lower:.4f}"

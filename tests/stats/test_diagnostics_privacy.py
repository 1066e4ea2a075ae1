"""Empirical privacy of the bounding diagnostics (issue 21 §2), with a negative control.

``D`` and ``D′ = D`` plus one person with 40 rows of an out-of-bounds value in four
groups: every count of the diagnostics moves by one (checked in
``tests/unit/test_diagnostics.py``). The ``k = 4`` counts are released together at L1
sensitivity ``k`` and ``ε``; the statistic ``s`` = their sum moves by 4 and is a
post-processing of them, so it is ``ε``-DP, and :func:`deniable.audit.estimate_epsilon`
(alpha = 1e-7: a correct release is refuted with probability below 1e-7 < 1e-6) must not
find more. The control calibrates to sensitivity 1 instead of ``k`` (a quarter of the
noise, a true loss of ``4ε`` on ``s``) and must be refuted; measured while writing it: lower
bound ≈ 2.55 against the claimed 1 (the honest release: ≈ 0.54).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from deniable.audit import estimate_epsilon
from deniable.mechanisms import geometric
from deniable.query.diagnostics import release_counts

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000
EPSILON = Fraction(1)
K = 4
D = np.array([60, 12, 30, 9], dtype=np.int64)  # people, and the three rules' cuts
D2 = D + 1  # one more person, cut by every rule


def _sample(exact: npt.NDArray[np.int64], sensitivity: int) -> npt.NDArray[np.int64]:
    """``N`` releases of the diagnostics' four counts, summed (the statistic ``s``)."""
    tiled = np.tile(exact, (N, 1))
    if sensitivity == K:  # the release path itself
        value = release_counts(tiled, EPSILON).value
    else:  # the control: calibrated to a sensitivity that is too small
        value = geometric(tiled.ravel(), sensitivity=sensitivity, epsilon=EPSILON).value
    return np.asarray(value, dtype=np.int64).reshape(N, K).sum(axis=1)


def test_diagnostics_show_no_more_than_epsilon() -> None:
    est = estimate_epsilon(_sample(D, K), _sample(D2, K), alpha=ALPHA)
    assert est.lower <= float(EPSILON), f"lower={est.lower:.4f}"


def test_control_sensitivity_one_is_refuted() -> None:
    est = estimate_epsilon(_sample(D, 1), _sample(D2, 1), alpha=ALPHA)
    assert est.lower > float(EPSILON), f"lower={est.lower:.4f}"

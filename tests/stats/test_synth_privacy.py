"""The noise law and the empirical privacy of a synthetic release's measurements.

Noise law: a marginal measured by :meth:`deniable.synth.measure.ReleaseLog.measure` (the one
path MST and AIM measure through) at ρ, with ``r = max_rows = 3``, must carry exactly the
discrete Gaussian of ``σ² = r²/(2ρ)``: the residuals (released − exact) of 200,000 cells are
tested with a chi-square goodness of fit against the exact pmf, rejected at the 1e-7 quantile
(``_noise_stats``: bins of expected count ≥ 200, so the approximation holds there): a correct
release fails with probability below 1e-7. Negative control: the same release with half the
σ is rejected (its power, from the non-central chi-square, is asserted above 1 − 1e-6).

Empirical privacy: ``D`` (people with several rows each) and ``D′ = D`` plus one person with
nine rows in one cell of every marginal; the table's ``max_rows = 4``, so the engine's exact
marginals of the two differ by exactly 4 in that cell (checked) — the sensitivity the
release is calibrated for. The cell's released value (post-processing of the whole marginal,
so at most as revealing) is drawn 200,000 times on each side by the release function, and
:func:`deniable.audit.estimate_rho` (exact Clopper–Pearson bounds, Bonferroni, α = 1e-7)
gives a lower confidence bound on the ρ it shows: above the claimed ρ = ½ with probability
below 1e-7 for a correct release. Negative control: the noise calibrated for sensitivity 1
instead of ``r`` (σ² = 1/(2ρ): a true ρ of 8 on this pair) must be refuted. Measured while
writing it: lower bound 0.32 for the release (claimed 0.5), 4.6 for the control.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from _noise_stats import chi2_gof, control_power, discrete_gaussian_pmf

from deniable.accounting.loss import EpsilonDelta
from deniable.audit import estimate_rho
from deniable.curator.session import Session
from deniable.errors import PrivacyWarning
from deniable.noise.testing import SeededRandom
from deniable.synth.discretize import discretize
from deniable.synth.domain import Domain
from deniable.synth.measure import ReleaseLog, exact_marginals, measure_marginal

pytestmark = pytest.mark.stats

ALPHA = 1e-7
CELLS = 200_000
N = 200_000
R = 3
RHO = Fraction(1, 2)


def _log(exact: npt.NDArray[np.int64]) -> ReleaseLog:
    return ReleaseLog({("x",): exact}, Domain(("x",), (exact.size,)), R, RHO)


def test_a_measured_marginal_carries_the_stated_discrete_gaussian() -> None:
    exact = np.random.default_rng(0).integers(0, 1000, CELLS)
    log = _log(exact)
    m = log.measure(("x",), rho=RHO)
    sigma2 = R * R / (2 * float(RHO))
    assert m.sd == pytest.approx(np.sqrt(sigma2))
    result = chi2_gof(m.values.astype(np.int64) - exact, discrete_gaussian_pmf(sigma2))
    assert not result.rejected, str(result)


def test_control_half_sigma_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.synth.measure as measure

    def half(
        exact: npt.NDArray[np.int64], *, max_rows: int, sigma2: Fraction, source: object = None
    ) -> tuple[npt.NDArray[np.int64], Fraction]:
        noisy, rho = measure_marginal(exact, max_rows=max_rows, sigma2=sigma2 / 4)
        return noisy, rho / 4  # a broken release that claims the loss of the stated σ

    monkeypatch.setattr(measure, "measure_marginal", half)
    exact = np.random.default_rng(1).integers(0, 1000, CELLS)
    m = _log(exact).measure(("x",), rho=RHO)
    sigma2 = R * R / (2 * float(RHO))
    result = chi2_gof(m.values.astype(np.int64) - exact, discrete_gaussian_pmf(sigma2))
    assert result.rejected, str(result)
    assert control_power(result, discrete_gaussian_pmf(sigma2 / 4)) > 1 - 1e-6


def _people(extra: bool) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 3000
    frame = pd.DataFrame(
        {
            "pid": rng.integers(0, 500, n),
            "a": rng.integers(0, 2, n),
            "c": rng.choice(["x", "y", "z"], n),
            "age": rng.integers(0, 100, n),
        }
    )
    if extra:
        intruder = pd.DataFrame({"pid": 10**6, "a": 1, "c": "z", "age": 33}, index=range(9))
        frame = pd.concat([frame, intruder], ignore_index=True)
    return frame


@pytest.fixture(scope="module")
def neighbours(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[int, int]]:
    """The exact value of the intruder's cell of the (a, c, age) marginal on D and D′."""
    tmp = tmp_path_factory.mktemp("synth-privacy")
    values: list[dict[tuple[str, ...], npt.NDArray[np.int64]]] = []
    for extra in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            s = Session(budget=EpsilonDelta(epsilon=1, delta=1e-6), ledger=tmp / f"{extra}.db")
        with s:
            s.add_table(
                "t",
                _people(extra),
                privacy_unit="pid",
                max_groups=1,
                max_rows=4,
                bounds={"a": (0, 1), "age": (0, 99)},
                public_keys={"c": ["x", "y", "z"]},
            )
            info = s.tables["t"]
            disc = discretize(info, ["a", "c", "age"], bins=10)
            cliques = [c for k in (1, 2, 3) for c in itertools.combinations(disc.names, k)]
            values.append(
                exact_marginals(
                    s._engines["t"],
                    s._bindings["t"],
                    disc,
                    cliques,
                    unit=info.column("pid"),
                    max_rows=4,
                    key=int(SeededRandom(3).words(1)[0]) >> 1,
                )
            )
    d, d2 = values
    for clique in d:
        diff = d2[clique] - d[clique]
        assert int(np.abs(diff).sum()) == 4 and int(np.count_nonzero(diff)) == 1
    full = ("a", "c", "age")
    cell = int(np.flatnonzero(d2[full] - d[full])[0])
    yield int(d[full][cell]), int(d2[full][cell])


def _releases(value: int, sensitivity: int) -> npt.NDArray[np.int64]:
    sigma2 = Fraction(sensitivity * sensitivity) / (2 * RHO)
    noisy, _ = measure_marginal(np.full(N, value, dtype=np.int64), max_rows=4, sigma2=sigma2)
    return noisy


def test_one_measurement_shows_no_more_than_its_rho(neighbours: tuple[int, int]) -> None:
    on_d, on_d2 = neighbours
    assert on_d2 - on_d == 4
    est = estimate_rho(_releases(on_d, 4), _releases(on_d2, 4), alpha=ALPHA)
    assert est.passes(float(RHO)), f"lower={est.lower:.4f}"


def test_control_sensitivity_one_instead_of_max_rows_is_refuted(
    neighbours: tuple[int, int],
) -> None:
    on_d, on_d2 = neighbours
    est = estimate_rho(_releases(on_d, 1), _releases(on_d2, 1), alpha=ALPHA)
    assert not est.passes(float(RHO)), f"lower={est.lower:.4f}"

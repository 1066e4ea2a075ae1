"""Noise law and empirical privacy of a synthetic release's domain measurements
(deniable.synth.learn).

Noise law: the quantile histogram's residuals (released − exact) over 200,000 grid cells at
``r = 3``, ρ = ½ must follow the discrete Gaussian of ``σ² = r²/(2ρ)`` exactly: a chi-square
goodness of fit against the exact pmf, rejected at the 1e-7 quantile (``_noise_stats``).
Negative control: the same release with half the σ is rejected (its power, from the
non-central chi-square, asserted above 1 − 1e-6).

Quantile histogram: ``D`` (people with several rows) and ``D′ = D`` plus one person with nine
rows of one value; with ``max_rows = 4`` the engine's exact grid histograms of the two differ
by exactly 4 in one cell (checked: the sensitivity the noise is calibrated for). That cell's
released count (the edges are post-processing of the whole histogram, so at most as
revealing) is drawn 200,000 times on each side by :func:`deniable.synth.learn.noisy_histogram`
at the claimed ρ = ½, and :func:`deniable.audit.estimate_rho` (exact Clopper–Pearson bounds,
Bonferroni, α = 1e-7) gives a lower confidence bound on the ρ shown: above the claim with
probability below 1e-7 for a correct release. Negative control: the noise calibrated for one
row per person (``max_rows = 1``, a true ρ of 8 here) must be refuted.

Partition selection: one person's ``r = 2`` kept rows add a person to two keys at once
(checked in ``tests/unit/test_synth_learn.py``: at most ``r`` keys). The joint keep/drop of
the two keys (four outcomes) is drawn 200,000 times with each key at ``n`` persons (``D``)
and ``n + 1`` (``D′``) by :func:`deniable.synth.learn.select_keys` with the release's
parameters, and :func:`deniable.audit.estimate_epsilon` at the claimed δ gives a lower
confidence bound on ε (α = 1e-7). ``n`` is the first count whose keep probability reaches
0.05 under the tested parameters (public arithmetic): still in the rule's growth phase, where
``π(n + 1) = e^(ε/r)·π(n) + δ/r`` is tight. Negative
control: the selection run with ``max_groups = 1`` (one key per person: the wrong
sensitivity) while the person touches two keys, a true ε of about twice the claim, must be
refuted at its own ``n``. Measured while writing it: lower bounds 0.32 (histogram, claim 0.5)
and 1.87 (selection, claim 2) for the releases; 4.6 and 3.8 for the controls.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from _noise_stats import chi2_gof, control_power, discrete_gaussian_pmf

import deniable.synth.learn as learn
from deniable.accounting.loss import EpsilonDelta, Rho
from deniable.audit import estimate_epsilon, estimate_rho
from deniable.curator.session import Session
from deniable.errors import PrivacyWarning
from deniable.query import partition
from deniable.synth import Quantiles, SelectKeys
from deniable.synth.discretize import discretize
from deniable.synth.learn import DomainPlan, exact_domain, noisy_histogram, select_keys

pytestmark = pytest.mark.stats

ALPHA = 1e-7
N = 200_000
RHO = Fraction(1, 2)
EPS = Fraction(2)
DELTA = Fraction(1, 10**6)


def test_the_quantile_histogram_carries_the_stated_discrete_gaussian() -> None:
    exact = np.random.default_rng(0).integers(0, 1000, N)
    noisy = noisy_histogram(exact, max_rows=3, rho=RHO)
    result = chi2_gof(noisy - exact, discrete_gaussian_pmf(9 / (2 * float(RHO))))
    assert not result.rejected, str(result)


def test_control_half_sigma_histogram_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    real = learn.discrete_gaussian  # type: ignore[attr-defined]

    def half(values: Any, *, sensitivity: int, rho: Fraction, source: Any = None) -> Any:
        out = real(values, sensitivity=sensitivity, rho=rho * 4, source=source)
        return dataclasses.replace(out, loss=Rho(rho=rho))  # claims the stated ρ

    monkeypatch.setattr(learn, "discrete_gaussian", half)
    exact = np.random.default_rng(1).integers(0, 1000, N)
    noisy = noisy_histogram(exact, max_rows=3, rho=RHO)  # claims ρ = ½, draws σ/2
    sigma2 = 9 / (2 * float(RHO))
    result = chi2_gof(noisy - exact, discrete_gaussian_pmf(sigma2))
    assert result.rejected, str(result)
    assert control_power(result, discrete_gaussian_pmf(sigma2 / 4)) > 1 - 1e-6


def _people(extra: bool) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    n = 3000
    frame = pd.DataFrame({"pid": rng.integers(0, 500, n), "v": rng.uniform(0, 100, n),
                          "k": rng.choice(["x", "y", "z"], n)})  # fmt: skip
    if extra:
        intruder = pd.DataFrame({"pid": 10**6, "v": 33.3, "k": "x"}, index=range(9))
        frame = pd.concat([frame, intruder], ignore_index=True)
    return frame


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, int]]:
    """The exact count of the intruder's grid cell on D and D′."""
    tmp: Path = tmp_path_factory.mktemp("synth-learn-privacy")
    hists = []
    for extra in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PrivacyWarning)
            s = Session(budget=EpsilonDelta(epsilon=1, delta=1e-6), ledger=tmp / f"{extra}.db")
        with s:
            s.add_table("t", _people(extra), privacy_unit="pid", max_groups=1, max_rows=4)
            info = s.tables["t"]
            disc = discretize(info, ["v", "k"], {"v": Quantiles(4, within=(0, 100)),
                                                 "k": SelectKeys()})  # fmt: skip
            ex = exact_domain(s._engines["t"], s._bindings["t"], disc,
                              unit=info.column("pid"), max_rows=4, key=777)  # fmt: skip
            hists.append(ex.histograms["v"])
    diff = hists[1] - hists[0]
    assert int(np.abs(diff).sum()) == 4 and int(np.count_nonzero(diff)) == 1
    i = int(np.flatnonzero(diff)[0])
    yield int(hists[0][i]), int(hists[1][i])


def _counts(value: int, max_rows: int) -> npt.NDArray[np.int64]:
    return noisy_histogram(np.full(N, value, dtype=np.int64), max_rows=max_rows, rho=RHO)


def test_the_quantile_histogram_shows_no_more_than_its_rho(cell: tuple[int, int]) -> None:
    on_d, on_d2 = cell
    est = estimate_rho(_counts(on_d, 4), _counts(on_d2, 4), alpha=ALPHA)
    assert est.passes(float(RHO)), f"lower={est.lower:.4f}"


def test_control_histogram_noise_for_one_row_per_person_is_refuted(
    cell: tuple[int, int],
) -> None:
    on_d, on_d2 = cell
    est = estimate_rho(_counts(on_d, 1), _counts(on_d2, 1), alpha=ALPHA)
    assert not est.passes(float(RHO)), f"lower={est.lower:.4f}"


def _plan(max_groups: int) -> DomainPlan:
    return DomainPlan((), ("k",), EPS**2 / 2, EPS, DELTA, max_groups)


def _joint(units: int, plan: DomainPlan) -> npt.NDArray[np.int64]:
    mask = select_keys(np.full(2 * N, units, dtype=np.int64), plan).reshape(N, 2)
    return (2 * mask[:, 0] + mask[:, 1]).astype(np.int64)


def _informative_n(plan: DomainPlan) -> int:
    table = partition.keep_probabilities(EPS / plan.max_rows, DELTA / plan.max_rows)
    return next(n for n in range(1, 10**6) if table.probability(n) >= Fraction(1, 20))


def _selection_estimate(plan: DomainPlan) -> float:
    n = _informative_n(plan)
    est = estimate_epsilon(_joint(n, plan), _joint(n + 1, plan), alpha=ALPHA,
                           delta=float(DELTA))  # fmt: skip
    return est.lower


def test_key_selection_shows_no_more_than_its_epsilon() -> None:
    lower = _selection_estimate(_plan(2))  # r = 2: the person touches two keys
    assert lower <= float(EPS), f"lower={lower:.4f}"


def test_control_selection_with_one_key_per_person_is_refuted() -> None:
    plan = _plan(1)  # broken: calibrated for one key while the person touches two
    lower = _selection_estimate(plan)
    assert lower > float(EPS), f"lower={lower:.4f}"

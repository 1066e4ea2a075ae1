"""Publishing a table: membership inference and linkage on three releases of the same data.

Each of ``T`` independent trials is a clinic's table of ``size`` patients (age, ZIP code,
diagnosis) plus — in a random half of the trials — the target: the only patient aged 93, from
ZIP 99999, with a rare diagnosis. The attacker knows the target's age and ZIP (public
quasi-identifiers) and reads one published table of the trial; it guesses whether the target
is in the data (membership, prior 1/2) and, when it finds a row that matches the target's
quasi-identifiers, reads off the diagnosis (linkage).

* **Unsafe: the table "de-identified"** (names dropped, every row published): the target's
  row is the only one aged 93 in ZIP 99999 — membership and diagnosis exact.
* **Deniable: safe k-anonymization** (:meth:`Session.anonymize`, Li–Qardaji–Su Theorem 3.9:
  a β-sample, ages recoded to bands of 20 fixed in advance, classes below ``k`` suppressed):
  an ``(ε, δ)``-DP release.
* **Deniable: synthetic data** (:meth:`Session.synthesize`, MST) at the same ``(ε, δ)``:
  noisy marginals, rows drawn from a model fitted to them.

Against each, the attacker says "present" iff the release holds a row matching the target's
quasi-identifiers (its age band or bin and its ZIP), and links the diagnosis most common among
such rows. For an ``(ε, δ)``-DP release no attacker can be right about membership more often
than ``(e^ε + δ)/(1 + e^ε)`` at prior 1/2 (``TPR ≤ e^ε·FPR + δ`` at the symmetric point), and
the rare diagnosis is named for a present target at most ``e^ε`` times as often, plus ``δ``,
as for an absent one — the comparison this report prints.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

from deniable.accounting.loss import EpsilonDelta
from deniable.anonymize import strongly_safe_guarantee
from deniable.attacks.membership import MembershipRun
from deniable.curator import Session
from deniable.errors import InvalidParameter
from deniable.noise import bernoulli
from deniable.noise.testing import SeededRandom
from deniable.stats import clopper_pearson

COMMON = ("asthma", "flu", "migraine")
RARE = "rare disease"
ZIPS = ("02138", "02139", "47906")
TARGET_AGE = 93
TARGET_ZIP = "99999"

RECODING = {
    "columns": {
        "age": {"type": "interval", "lower": 0, "upper": 120, "widths": [20], "level": 1},
        "zip": {"type": "identity", "level": 0},
        "diagnosis": {"type": "identity", "level": 0},
    }
}
"""The k-anonymized release's recoding: fixed in advance (ages in bands of 20)."""


@dataclass(frozen=True)
class LinkageRun:
    """How often the attacker named the target's rare diagnosis from one system's releases.

    Attributes:
        system: which system.
        present: trials with the target in the data.
        named_present: of those, how often the attacker named the rare diagnosis.
        absent: trials without the target.
        named_absent: of those, how often it named it all the same.
        interval_present: exact 95% interval of the rate when present.
        interval_absent: exact 95% interval of the rate when absent.
    """

    system: str
    present: int
    named_present: int
    absent: int
    named_absent: int
    interval_present: tuple[float, float]
    interval_absent: tuple[float, float]


@dataclass(frozen=True)
class PublicationReport:
    """Membership and linkage against a de-identified, a k-anonymized and a synthetic table.

    Attributes:
        trials: independent trials (clinics).
        size: patients per trial besides the target.
        epsilon: the ε both deniable releases are charged.
        delta: the δ both are charged (the k-anonymized release's, from Theorem 3.9).
        k: the suppression threshold.
        beta: the k-anonymized release's sampling rate.
        bound: the largest membership success any attacker has at ``(ε, δ)``, prior 1/2.
        membership: one run per system (unsafe first).
        linkage: one run per system, in the same order.
        attack: the attack's name.
    """

    trials: int
    size: int
    epsilon: float
    delta: float
    k: int
    beta: float
    bound: float
    membership: tuple[MembershipRun, ...]
    linkage: tuple[LinkageRun, ...]
    attack: str = field(default="publication")

    def text(self) -> str:
        """A readable account of the attack."""
        from deniable.attacks.report import render

        return render(self)


def clinic(size: int, present: bool, rng: np.random.Generator) -> pd.DataFrame:
    """One trial's table (synthetic test data; the target last when present)."""
    frame = pd.DataFrame(
        {
            "patient": np.arange(size),
            "age": rng.integers(20, 80, size),
            "zip": rng.choice(list(ZIPS), size),
            "diagnosis": rng.choice(list(COMMON), size),
        }
    )
    if present:
        target = {"patient": size, "age": TARGET_AGE, "zip": TARGET_ZIP, "diagnosis": RARE}
        frame = pd.concat([frame, pd.DataFrame([target])], ignore_index=True)
    return frame


def _read(rows: pd.DataFrame, matches: npt.NDArray[np.bool_]) -> tuple[bool, bool]:
    """The attacker's guesses: present iff a row matches, RARE named iff most common there."""
    if not matches.any():
        return False, False
    named = rows.loc[matches, "diagnosis"].astype(str).value_counts().idxmax()
    return True, named == RARE


def _raw_match(rows: pd.DataFrame) -> npt.NDArray[np.bool_]:
    return ((rows["age"] == TARGET_AGE) & (rows["zip"] == TARGET_ZIP)).fillna(False).to_numpy(bool)


def _band_match(rows: pd.DataFrame) -> npt.NDArray[np.bool_]:
    band = (rows["age"].astype(str) == "[80, 100)") & (rows["zip"] == TARGET_ZIP)
    return band.fillna(False).to_numpy(bool)


def _synthetic_match(rows: pd.DataFrame) -> npt.NDArray[np.bool_]:
    age = pd.to_numeric(rows["age"], errors="coerce")
    near = (age >= 90) & (age < 100) & (rows["zip"] == TARGET_ZIP)
    return near.fillna(False).to_numpy(bool)


def run_publication(
    *,
    trials: int = 40,
    size: int = 1500,
    epsilon: float = 1.0,
    k: int = 10,
    beta: float = 0.3,
    seed: int | None = 0,
) -> PublicationReport:
    """Run membership inference and linkage on the three releases of ``trials`` clinics.

    Args:
        trials: independent trials (the target present in a random half, by a fair coin).
        size: patients per trial besides the target.
        epsilon: the ε of both deniable releases (the k-anonymized release's δ follows
            from Theorem 3.9; the synthetic table is charged the same ``(ε, δ)``).
        k: the suppression threshold of the k-anonymized release.
        beta: its sampling rate.
        seed: seed of the synthetic clinics and of the coins (None: fresh); the releases'
            own noise always comes from the CSPRNG.

    Returns:
        The :class:`PublicationReport`. Each deniable release is ``(ε, δ)``-DP on its own
        (a throwaway ledger charges them).
    """
    if trials < 2 or size < 10:
        raise InvalidParameter("trials must be ≥ 2 and size ≥ 10")
    guarantee = strongly_safe_guarantee(k, beta=beta, epsilon=epsilon)
    delta = guarantee.delta
    if not 0 < delta < 1:
        raise InvalidParameter(f"k = {k}, β = {beta:g}, ε = {epsilon:g} give no useful δ")
    rng = np.random.default_rng(seed)  # test-only: the clinics' data, never a release
    coins = SeededRandom(seed) if seed is not None else None
    present = bernoulli(Fraction(1, 2), trials, source=coins).astype(bool)
    guesses = {name: np.zeros(trials, dtype=bool) for name in _SYSTEMS}
    named = {name: np.zeros(trials, dtype=bool) for name in _SYSTEMS}
    with tempfile.TemporaryDirectory(prefix="deniable-attack-") as tmp:
        budget = EpsilonDelta(epsilon=Fraction(2 * trials * 4), delta=Fraction(1, 2))
        with Session(budget=budget, ledger=Path(tmp) / "ledger.db") as session:
            for t in range(trials):
                frame = clinic(size, bool(present[t]), rng)
                name = f"clinic{t}"
                session.add_table(
                    name,
                    frame,
                    privacy_unit="patient",
                    max_groups=1,
                    max_rows=1,
                    bounds={"age": (0, 100)},
                    public_keys={"zip": [*ZIPS, TARGET_ZIP], "diagnosis": [*COMMON, RARE]},
                )
                deidentified = frame.drop(columns=["patient"])
                guesses["raw"][t], named["raw"][t] = _read(deidentified, _raw_match(deidentified))
                kanon = session.anonymize(name, RECODING, k=k, beta=beta, epsilon=epsilon)
                published = kanon.to_arrow().to_pandas()
                guesses["kanon"][t], named["kanon"][t] = _read(published, _band_match(published))
                synthetic = session.synthesize(
                    name,
                    columns=["age", "zip", "diagnosis"],
                    epsilon=epsilon,
                    delta=delta,
                    method="mst",
                    bins=10,
                ).to_pandas()
                guesses["synthetic"][t], named["synthetic"][t] = _read(
                    synthetic, _synthetic_match(synthetic)
                )
    bound = (math.exp(epsilon) + delta) / (1 + math.exp(epsilon))
    membership = tuple(
        _membership(_SYSTEMS[s], s != "raw", guesses[s], present, epsilon, bound) for s in _SYSTEMS
    )
    linkage = tuple(_linkage(_SYSTEMS[s], named[s], present) for s in _SYSTEMS)
    return PublicationReport(trials, size, epsilon, delta, k, beta, bound, membership, linkage)


_SYSTEMS = {
    "raw": "unsafe: the table de-identified (names dropped)",
    "kanon": "deniable: safe k-anonymization",
    "synthetic": "deniable: synthetic data (MST)",
}


def _membership(
    system: str,
    safe: bool,
    guesses: npt.NDArray[np.bool_],
    present: npt.NDArray[np.bool_],
    epsilon: float,
    bound: float,
) -> MembershipRun:
    right = int(np.sum(guesses == present))
    return MembershipRun(
        system,
        safe,
        len(present),
        right,
        right / len(present),
        clopper_pearson(right, len(present), 0.95),
        epsilon_spent=epsilon if safe else None,
        bound=bound if safe else None,
    )


def _linkage(
    system: str, named: npt.NDArray[np.bool_], present: npt.NDArray[np.bool_]
) -> LinkageRun:
    p, a = int(present.sum()), int((~present).sum())
    np_, na = int(named[present].sum()), int(named[~present].sum())
    return LinkageRun(
        system,
        p,
        np_,
        a,
        na,
        clopper_pearson(np_, p, 0.95) if p else (0.0, 1.0),
        clopper_pearson(na, a, 0.95) if a else (0.0, 1.0),
    )

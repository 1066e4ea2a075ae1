"""Data sets of the synthetic-data comparison (``benchmarks/synth_compare.py``), already discrete.

Both systems are given the same table of small integer codes and the same public domain
(``cardinalities``: column ``c`` takes values ``0 … k_c − 1``), so that they measure, model and
sample over identical domains. The bins and category lists below are public choices written
here, never derived from the data.

* :func:`census_like`: a census-like person table (one row per person), 10 columns with
  realistic dependencies (age → marital status, education, household size; region → race;
  education → occupation → hours per week; education, occupation, hours, age and sex →
  income bracket), fabricated with a seeded numpy generator.
* :func:`events_workload`: the repository's benchmark workload table,
  ``deniable.datasets.events(n, seed=0)`` (the table of ``benchmarks/compare.py`` and the
  ``uniform`` workload of ``benchmarks/query.py``), its ``category`` (the 50 public categories)
  and ``value`` cut into 16 equal-width bins over the public range [0, 200] (values outside are
  clamped into the first or last bin, as ``deniable`` clamps to declared bounds); ``user_id``
  is dropped (SmartNoise's synthesizers protect rows, so both systems are run at row level).

All randomness here is synthetic-data generation for benchmarks, never a release path.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from deniable.datasets import events

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

AGE_BINS = ("16-19", "20-24", "25-34", "35-44", "45-54", "55-64", "65-74", "75+")
SEXES = ("F", "M")
RACES = ("white", "black", "asian", "native", "pacific", "other")
EDUCATION = (
    "none",
    "primary",
    "some high school",
    "high school",
    "some college",
    "associate",
    "bachelor",
    "graduate",
)
MARITAL = ("never married", "married", "divorced", "separated", "widowed")
HOURS_BINS = ("0", "1-19", "20-34", "35-40", "41-49", "50+")
INCOME_BINS = (
    "<10k",
    "10-20k",
    "20-30k",
    "30-45k",
    "45-60k",
    "60-80k",
    "80-120k",
    "120k+",
)
REGIONS = (
    "New England",
    "Middle Atlantic",
    "East North Central",
    "West North Central",
    "South Atlantic",
    "East South Central",
    "West South Central",
    "Mountain",
    "Pacific",
)
OCCUPATIONS = (
    "not working",
    "management",
    "professional",
    "technician",
    "sales",
    "office support",
    "service",
    "farming",
    "construction",
    "production",
    "transport",
    "armed forces",
)
HOUSEHOLD_SIZES = ("1", "2", "3", "4", "5", "6+")

CENSUS_COLUMNS: dict[str, tuple[str, ...]] = {
    "age": AGE_BINS,
    "sex": SEXES,
    "race": RACES,
    "education": EDUCATION,
    "marital": MARITAL,
    "hours": HOURS_BINS,
    "income": INCOME_BINS,
    "region": REGIONS,
    "occupation": OCCUPATIONS,
    "household": HOUSEHOLD_SIZES,
}
"""The census-like table's columns and their public categories (code ``i`` is the i-th)."""

EVENT_CATEGORIES = 50
VALUE_RANGE = (0.0, 200.0)
VALUE_BINS = 16


@dataclass(frozen=True)
class DataSet:
    """A discrete table and its public domain.

    Attributes:
        name: a short name for the results table.
        frame: one int64 column of codes per attribute.
        cardinalities: the public number of codes of each column (``0 … k − 1``).
        description: how it was made (for the results file).
    """

    name: str
    frame: pd.DataFrame
    cardinalities: dict[str, int]
    description: str

    def columns(self, d: int | None = None) -> DataSet:
        """The same data set restricted to its first ``d`` columns (all when ``None``)."""
        names = list(self.cardinalities)[:d]
        if len(names) == len(self.cardinalities):
            return self
        return DataSet(
            self.name,
            self.frame[names],
            {n: self.cardinalities[n] for n in names},
            f"{self.description}; its first {len(names)} columns ({', '.join(names)})",
        )


def _pick(rng: np.random.Generator, probs: F64) -> I64:
    """One categorical draw per row from a row-wise probability matrix (rows sum to 1)."""
    cum = np.cumsum(probs, axis=1)
    cum[:, -1] = 1.0
    u = np.asarray(rng.random(probs.shape[0]), dtype=np.float64)[:, None]
    return np.asarray((u > cum).sum(axis=1), dtype=np.int64)


def _softmax(logits: F64) -> F64:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    out: F64 = e / e.sum(axis=1, keepdims=True)
    return out


def census_like(n: int, *, seed: int = 24) -> DataSet:
    """A census-like person table of ``n`` rows, 10 discrete columns (codes), deterministic.

    Dependencies: region → race; age → education, marital status, household size;
    education (and age, sex) → occupation; occupation (and sex, age) → hours per week;
    education, occupation, hours, age and sex → income bracket.

    Examples:
        >>> d = census_like(1000, seed=1)
        >>> d.frame.shape, d.cardinalities["income"]
        ((1000, 10), 8)
        >>> bool((d.frame.max() < pd.Series(d.cardinalities)).all())
        True
    """
    if n < 1:
        raise ValueError("n must be positive")
    rng = np.random.default_rng(seed)
    age_p = np.array([0.07, 0.09, 0.18, 0.16, 0.16, 0.15, 0.11, 0.08])
    age = rng.choice(len(AGE_BINS), size=n, p=age_p).astype(np.int64)
    sex = (rng.random(n) < 0.49).astype(np.int64)
    region_p = np.array([0.05, 0.13, 0.14, 0.06, 0.20, 0.06, 0.12, 0.08, 0.16])
    region = rng.choice(len(REGIONS), size=n, p=region_p).astype(np.int64)
    # race by region: more black in the South, more asian/pacific in the Pacific, native West
    race_base = np.array([0.70, 0.12, 0.06, 0.01, 0.005, 0.105])
    race_logits = np.tile(np.log(race_base), (len(REGIONS), 1))
    race_logits[4:7, 1] += 0.9  # South: black
    race_logits[8, 2] += 1.2  # Pacific: asian
    race_logits[8, 4] += 1.5  # Pacific: pacific islander
    race_logits[7, 3] += 1.3  # Mountain: native
    race_logits[0, 0] += 0.5  # New England: white
    race = _pick(rng, _softmax(race_logits[region]))
    # education by age (the young are still studying; the old have less schooling) and race
    edu_base = np.log(np.array([0.01, 0.03, 0.08, 0.27, 0.19, 0.09, 0.20, 0.13]))
    edu_logits = np.tile(edu_base, (n, 1))
    young = age <= 1
    edu_logits[young, 6:] -= 2.5
    edu_logits[age == 0, 4:] -= 1.5
    old = age >= 6
    edu_logits[old, :3] += 1.0
    edu_logits[old, 6:] -= 0.6
    edu_logits[race == 2, 6:] += 0.7
    education = _pick(rng, _softmax(edu_logits))
    # marital status by age
    marital_by_age = np.array(
        [
            [0.97, 0.02, 0.005, 0.005, 0.0],
            [0.80, 0.17, 0.02, 0.01, 0.0],
            [0.45, 0.45, 0.06, 0.03, 0.01],
            [0.22, 0.60, 0.12, 0.04, 0.02],
            [0.14, 0.62, 0.16, 0.04, 0.04],
            [0.09, 0.63, 0.16, 0.03, 0.09],
            [0.06, 0.58, 0.13, 0.02, 0.21],
            [0.05, 0.40, 0.09, 0.01, 0.45],
        ]
    )
    marital = _pick(rng, marital_by_age[age])
    # household size by marital status and age
    hh_logits = np.tile(np.log(np.array([0.28, 0.34, 0.15, 0.13, 0.06, 0.04])), (n, 1))
    married = marital == 1
    hh_logits[married, 0] -= 3.0
    hh_logits[married & (age >= 2) & (age <= 4), 2:] += 0.8
    single = (marital == 0) | (marital == 4)
    hh_logits[single & (age >= 3), 0] += 1.2
    hh_logits[age <= 1, 2:] += 0.4
    household = _pick(rng, _softmax(hh_logits))
    # occupation by education (and age: the young and the old often do not work; sex)
    occ_logits = np.zeros((n, len(OCCUPATIONS)))
    occ_logits[:] = np.log(
        np.array([0.30, 0.08, 0.12, 0.05, 0.09, 0.09, 0.10, 0.01, 0.04, 0.05, 0.06, 0.01])
    )
    high_edu = education >= 6
    low_edu = education <= 2
    occ_logits[high_edu, 1:3] += 1.6
    occ_logits[high_edu, 6:11] -= 1.2
    occ_logits[low_edu, 1:4] -= 2.0
    occ_logits[low_edu, 6:11] += 0.9
    occ_logits[low_edu, 0] += 0.6
    occ_logits[(age == 0) | (age >= 6), 0] += 1.8
    occ_logits[age == 7, 0] += 1.5
    occ_logits[sex == 1, 8] += 1.5  # construction
    occ_logits[sex == 1, 10] += 0.8  # transport
    occ_logits[sex == 0, 5] += 0.7  # office support
    occ_logits[sex == 0, 6] += 0.4  # service
    occupation = _pick(rng, _softmax(occ_logits))
    # hours per week by occupation (and sex, age)
    hours_by_occ = np.array(
        [
            [0.92, 0.05, 0.02, 0.01, 0.0, 0.0],  # not working
            [0.0, 0.02, 0.05, 0.38, 0.25, 0.30],  # management
            [0.0, 0.05, 0.10, 0.50, 0.20, 0.15],  # professional
            [0.0, 0.04, 0.10, 0.62, 0.16, 0.08],  # technician
            [0.0, 0.15, 0.25, 0.40, 0.12, 0.08],  # sales
            [0.0, 0.08, 0.20, 0.60, 0.09, 0.03],  # office support
            [0.0, 0.20, 0.32, 0.35, 0.08, 0.05],  # service
            [0.0, 0.05, 0.10, 0.25, 0.20, 0.40],  # farming
            [0.0, 0.03, 0.08, 0.55, 0.22, 0.12],  # construction
            [0.0, 0.02, 0.06, 0.62, 0.22, 0.08],  # production
            [0.0, 0.04, 0.10, 0.40, 0.24, 0.22],  # transport
            [0.0, 0.0, 0.02, 0.40, 0.30, 0.28],  # armed forces
        ]
    )
    hours_p = hours_by_occ[occupation].copy()
    part_time = (sex == 0) | (age == 0) | (age >= 6)
    hours_p[part_time, 1:3] *= 1.6
    hours_p /= hours_p.sum(axis=1, keepdims=True)
    hours = _pick(rng, hours_p)
    # income bracket: an ordinal latent from education, occupation, hours, age, sex
    occ_pay = np.array([-1.6, 1.3, 1.1, 0.5, 0.1, -0.1, -0.6, -0.7, 0.2, 0.0, 0.0, 0.3])
    hours_pay = np.array([-1.2, -1.0, -0.5, 0.0, 0.3, 0.5])
    age_pay = np.array([-1.2, -0.7, -0.1, 0.3, 0.45, 0.35, -0.3, -0.5])
    latent = (
        0.32 * education
        + occ_pay[occupation]
        + hours_pay[hours]
        + age_pay[age]
        + 0.25 * sex
        - 0.15 * (race == 1)
        + 0.15 * (region == 8)
        + 0.1 * (region == 1)
        + rng.logistic(0.0, 0.6, n)
    )
    cuts = np.array([-0.3, 0.3, 0.8, 1.4, 2.0, 2.6, 3.4])
    income = np.searchsorted(cuts, latent).astype(np.int64)
    frame = pd.DataFrame(
        {
            "age": age,
            "sex": sex,
            "race": race,
            "education": education,
            "marital": marital,
            "hours": hours,
            "income": income,
            "region": region,
            "occupation": occupation,
            "household": household,
        }
    )
    return DataSet(
        "census-like",
        frame,
        {name: len(cats) for name, cats in CENSUS_COLUMNS.items()},
        f"census_like(n, seed={seed}): 10 columns, {n:,} persons, one row each",
    )


def events_workload(n: int, *, seed: int = 0) -> DataSet:
    """The benchmark ``events`` table, ``category`` and binned ``value`` (codes).

    Examples:
        >>> d = events_workload(1000)
        >>> d.cardinalities
        {'category': 50, 'value': 16}
    """
    table = events(n, seed=seed)
    category = table.column("category").to_numpy().astype(np.int64)
    value = table.column("value").to_numpy()
    low, high = VALUE_RANGE
    width = (high - low) / VALUE_BINS
    clamped = np.clip(value, low, high)
    value_bin = np.minimum(np.floor((clamped - low) / width), VALUE_BINS - 1).astype(np.int64)
    frame = pd.DataFrame({"category": category, "value": value_bin})
    return DataSet(
        "events",
        frame,
        {"category": EVENT_CATEGORIES, "value": VALUE_BINS},
        (
            f"deniable.datasets.events(n, seed={seed}): category (50 public keys) and value in "
            f"{VALUE_BINS} equal-width bins over [{low:g}, {high:g}] (clamped), {n:,} rows"
        ),
    )


DATASETS = {"census": census_like, "events": events_workload}

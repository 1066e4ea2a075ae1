"""The lecture's students: birth date, gender, favourite editor, scholarship ≤ £6000.

``students(n)`` has one row per student (so row-level and person-level privacy coincide);
``marks(...)`` has several rows per student (a mark per module taken), to show contribution
bounds. The lecture's facts are built in: the editors Notepad, Sublime, Atom, Vim and Emacs,
scholarships between £0 and £6000 (the maximum annual scholarship), students born 1990–2000.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from deniable.errors import InvalidParameter

EDITORS = ("Notepad", "Sublime", "Atom", "Vim", "Emacs")
GENDERS = ("female", "male", "non-binary")
DEPARTMENTS = ("Computing", "Mathematics", "Physics")
MODULES = (
    "Privacy Engineering",
    "Machine Learning",
    "Databases",
    "Compilers",
    "Security",
    "Statistics",
)
MAX_SCHOLARSHIP = 6000


def students(n: int = 2000, *, seed: int = 0) -> pd.DataFrame:
    """Generate ``n`` students.

    Columns: ``student_id`` (text ``"s00042"``), ``birth_date`` (date, 1990–2000),
    ``birth_year`` (int), ``gender``, ``editor`` (favourite text editor), ``department``,
    ``scholarship`` (float, £0–£6000; about 40% have none).

    Examples:
        >>> df = students(10, seed=1)
        >>> sorted(df.columns)[:3], bool(df.scholarship.max() <= 6000)
        (['birth_date', 'birth_year', 'department'], True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameter("n must be a positive integer")
    rng = np.random.default_rng(seed)  # test-only: synthetic data generation, never a release path
    start = dt.date(1990, 1, 1).toordinal()
    end = dt.date(2000, 12, 31).toordinal()
    births = [dt.date.fromordinal(int(d)) for d in rng.integers(start, end + 1, n)]
    gender = rng.choice(GENDERS, size=n, p=[0.42, 0.55, 0.03])
    editor = rng.choice(EDITORS, size=n, p=[0.08, 0.22, 0.15, 0.35, 0.20])
    department = rng.choice(list(DEPARTMENTS), size=n, p=[0.5, 0.3, 0.2])
    has = rng.random(n) < 0.6
    amount = np.clip(np.round(rng.gamma(4.0, 700.0, n), -1), 500, MAX_SCHOLARSHIP)
    scholarship = np.where(has, amount, 0.0)
    return pd.DataFrame(
        {
            "student_id": [f"s{i:05d}" for i in range(n)],
            "birth_date": pd.to_datetime(pd.Series(births)).dt.date,
            "birth_year": [b.year for b in births],
            "gender": gender,
            "editor": editor,
            "department": department,
            "scholarship": scholarship,
        }
    )


def marks(people: pd.DataFrame, *, seed: int = 0) -> pd.DataFrame:
    """One row per (student, module taken, attempt): ``student_id``, ``module``, ``mark``.

    Students take 1–6 modules and sometimes resit (several rows for one module), so one
    person has many rows: the case contribution bounds are for.

    Examples:
        >>> m = marks(students(5, seed=2), seed=2)
        >>> bool(m.mark.between(0, 100).all())
        True
    """
    rng = np.random.default_rng(seed)  # test-only: synthetic data generation, never a release path
    ids, mods, scores = [], [], []
    for sid in people["student_id"]:
        k = int(rng.integers(1, len(MODULES) + 1))
        ability = rng.normal(62, 10)
        for module in rng.choice(MODULES, size=k, replace=False):
            for _ in range(1 + int(rng.random() < 0.15)):
                ids.append(sid)
                mods.append(str(module))
                scores.append(int(np.clip(round(rng.normal(ability, 9)), 0, 100)))
    return pd.DataFrame({"student_id": ids, "module": mods, "mark": scores})


def study_partners(people: pd.DataFrame, *, seed: int = 0) -> pd.DataFrame:
    """Who studies with whom: one row per pair of students (``a``, ``b``, text ids).

    Students mostly pair within their department, in small study groups of five whose
    members all work together (many triangles), plus a few popular tutors-to-be who pair
    with dozens of others (nodes far above a small degree bound).

    Examples:
        >>> pairs = study_partners(students(50, seed=1), seed=1)
        >>> sorted(pairs.columns), bool((pairs.a != pairs.b).all())
        (['a', 'b'], True)
    """
    rng = np.random.default_rng(seed)  # test-only: synthetic data generation, never a release path
    rows: list[tuple[str, str]] = []
    for _, members in people.groupby("department").student_id:
        ids = list(rng.permutation(members.to_numpy()))
        for start in range(0, len(ids) - 4, 5):  # study groups of five: ten pairs each
            group = ids[start : start + 5]
            rows += [(x, y) for i, x in enumerate(group) for y in group[i + 1 :]]
    everyone = people.student_id.to_numpy()
    for tutor in rng.choice(everyone, size=max(1, len(everyone) // 200), replace=False):
        for other in rng.choice(everyone, size=min(40, len(everyone) - 1), replace=False):
            if other != tutor:
                rows.append((str(tutor), str(other)))
    return pd.DataFrame(rows, columns=["a", "b"])

"""A census-style survey panel: ``person`` rows per survey year, ``jobs``, public ``states``.

``census(n)`` fabricates ``n`` persons surveyed in 1–4 consecutive years between 2015 and
2024: one row per (person, survey year), so a person has several rows and the privacy unit is
``person_id`` (user-level privacy needs contribution bounds: at most 4 rows per person, at most
one per year). Between their rows a person ages, may change income, hours, job and
occupation, and about 5% move to a new household in the same county. ``jobs(people)`` adds a
second private table (0–3 jobs per working-age person), joinable on ``person_id``. ``states()``
is a public lookup table (the 50 states' codes, names, census regions and 2020 populations,
rounded to thousands) for joins with a public table.

Everything is fabricated by seeded numpy generators (no real person is in it): it exists to
exercise and measure deniable's SQL path; its randomness is not a release path.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd

from deniable.errors import InvalidParameter

# (code, name, census region, 2020 census population rounded to thousands)
STATES: tuple[tuple[str, str, str, int], ...] = (
    ("AL", "Alabama", "South", 5_024_000),
    ("AK", "Alaska", "West", 733_000),
    ("AZ", "Arizona", "West", 7_152_000),
    ("AR", "Arkansas", "South", 3_012_000),
    ("CA", "California", "West", 39_538_000),
    ("CO", "Colorado", "West", 5_774_000),
    ("CT", "Connecticut", "Northeast", 3_606_000),
    ("DE", "Delaware", "South", 990_000),
    ("FL", "Florida", "South", 21_538_000),
    ("GA", "Georgia", "South", 10_712_000),
    ("HI", "Hawaii", "West", 1_455_000),
    ("ID", "Idaho", "West", 1_839_000),
    ("IL", "Illinois", "Midwest", 12_812_000),
    ("IN", "Indiana", "Midwest", 6_786_000),
    ("IA", "Iowa", "Midwest", 3_190_000),
    ("KS", "Kansas", "Midwest", 2_938_000),
    ("KY", "Kentucky", "South", 4_506_000),
    ("LA", "Louisiana", "South", 4_658_000),
    ("ME", "Maine", "Northeast", 1_362_000),
    ("MD", "Maryland", "South", 6_177_000),
    ("MA", "Massachusetts", "Northeast", 7_030_000),
    ("MI", "Michigan", "Midwest", 10_077_000),
    ("MN", "Minnesota", "Midwest", 5_706_000),
    ("MS", "Mississippi", "South", 2_961_000),
    ("MO", "Missouri", "Midwest", 6_155_000),
    ("MT", "Montana", "West", 1_084_000),
    ("NE", "Nebraska", "Midwest", 1_962_000),
    ("NV", "Nevada", "West", 3_105_000),
    ("NH", "New Hampshire", "Northeast", 1_378_000),
    ("NJ", "New Jersey", "Northeast", 9_289_000),
    ("NM", "New Mexico", "West", 2_118_000),
    ("NY", "New York", "Northeast", 20_201_000),
    ("NC", "North Carolina", "South", 10_439_000),
    ("ND", "North Dakota", "Midwest", 779_000),
    ("OH", "Ohio", "Midwest", 11_799_000),
    ("OK", "Oklahoma", "South", 3_959_000),
    ("OR", "Oregon", "West", 4_237_000),
    ("PA", "Pennsylvania", "Northeast", 13_003_000),
    ("RI", "Rhode Island", "Northeast", 1_097_000),
    ("SC", "South Carolina", "South", 5_118_000),
    ("SD", "South Dakota", "Midwest", 887_000),
    ("TN", "Tennessee", "South", 6_911_000),
    ("TX", "Texas", "South", 29_146_000),
    ("UT", "Utah", "West", 3_272_000),
    ("VT", "Vermont", "Northeast", 643_000),
    ("VA", "Virginia", "South", 8_631_000),
    ("WA", "Washington", "West", 7_705_000),
    ("WV", "West Virginia", "South", 1_794_000),
    ("WI", "Wisconsin", "Midwest", 5_894_000),
    ("WY", "Wyoming", "West", 577_000),
)
STATE_CODES = tuple(s[0] for s in STATES)
REGIONS = ("Northeast", "Midwest", "South", "West")
SEXES = ("F", "M")
# 1 White, 2 Black, 3 Asian, 4 American Indian/Alaska Native, 5 Pacific Islander, 6 other/multiple
RACES = (1, 2, 3, 4, 5, 6)
MARITAL_STATUSES = ("married", "never_married", "divorced", "widowed", "separated")
YEARS = tuple(range(2015, 2025))
MAX_ROWS_PER_PERSON = 4
OCCUPATIONS = (
    "retail salesperson",
    "cashier",
    "registered nurse",
    "office clerk",
    "customer service representative",
    "laborer",
    "truck driver",
    "janitor",
    "cook",
    "waiter",
    "software developer",
    "accountant",
    "teacher assistant",
    "elementary school teacher",
    "secondary school teacher",
    "general manager",
    "nursing assistant",
    "home health aide",
    "secretary",
    "maintenance worker",
    "stock clerk",
    "construction laborer",
    "electrician",
    "carpenter",
    "plumber",
    "mechanic",
    "police officer",
    "firefighter",
    "lawyer",
    "physician",
    "pharmacist",
    "dentist",
    "civil engineer",
    "mechanical engineer",
    "data scientist",
    "financial analyst",
    "marketing specialist",
    "sales manager",
    "hairdresser",
    "childcare worker",
    "security guard",
    "farmer",
    "bus driver",
    "receptionist",
    "bookkeeper",
    "designer",
    "writer",
    "musician",
    "chef",
    "bartender",
    "pilot",
    "architect",
    "librarian",
    "social worker",
    "psychologist",
    "professor",
    "real estate agent",
    "insurance agent",
    "web developer",
    "machinist",
)
EMPLOYERS = (
    "Acme Corp",
    "Globex",
    "Initech",
    "Umbrella",
    "Stark Industries",
    "Wayne Enterprises",
    "Hooli",
    "Vandelay Industries",
    "Soylent",
    "Tyrell",
    "Cyberdyne",
    "Wonka",
    "Gringotts",
    "Oceanic",
    "Monarch",
    "Dunder Mifflin",
    "Pied Piper",
    "Prestige Worldwide",
    "Massive Dynamic",
    "Aperture",
    "State Government",
    "County Schools",
    "City Hospital",
    "Self-employed",
)

_HOUSEHOLD_SIZES = np.array([1, 2, 3, 4, 5, 6])
_HOUSEHOLD_P = np.array([0.28, 0.34, 0.15, 0.13, 0.06, 0.04])
_ROWS_P = np.array([0.4, 0.3, 0.2, 0.1])  # survey years per person: 1, 2, 3, 4


def states() -> pd.DataFrame:
    """The public lookup table: one row per state (no private data).

    Columns: ``state`` (two-letter code, the join key of ``census``), ``name``, ``region``
    (census region), ``population`` (2020 census, rounded to thousands).

    Examples:
        >>> s = states()
        >>> len(s), sorted(s.region.unique())
        (50, ['Midwest', 'Northeast', 'South', 'West'])
    """
    return pd.DataFrame(
        {
            "state": [s[0] for s in STATES],
            "name": [s[1] for s in STATES],
            "region": [s[2] for s in STATES],
            "population": np.array([s[3] for s in STATES], dtype=np.int64),
        }
    )


def census(n: int, *, seed: int) -> pd.DataFrame:
    """Generate the survey panel of ``n`` persons (about ``2n`` rows).

    One row per (person, survey year); each person is surveyed in 1–4 consecutive years
    (probabilities 0.4, 0.3, 0.2, 0.1) within 2015–2024 and only while aged 0–100, so
    ``person_id`` (the privacy unit) has at most :data:`MAX_ROWS_PER_PERSON` rows and at most
    one per year. Deterministic given ``seed``.

    Columns:
        ``person_id`` (int64), ``household_id`` (int64; members of a household share state
        and county; ~5% of later rows move to a new household), ``year`` (int, 2015–2024),
        ``age`` (int, 0–100, the age on 1 July of ``year``), ``sex`` (``"F"``/``"M"``),
        ``race`` (int code 1–6, see :data:`RACES`), ``marital_status`` (text, one of
        :data:`MARITAL_STATUSES`; ``"never_married"`` under 15), ``education`` (ordinal int
        1–16, e.g. 9 high school, 13 bachelor's, 14 master's, 16 doctorate), ``income``
        (float dollars, heavy-tailed with a few values in the millions and ~1% negative;
        NULL under 16 and for ~7% non-response), ``hours_per_week`` (int 0–99; 0 when not
        employed), ``employed`` (bool; False under 16), ``occupation`` (text, 60 values,
        NULL when not employed), ``state`` (two-letter code, population-weighted),
        ``county`` (int, odd FIPS-like code within the state), ``birth_date`` (date).

    Raises:
        InvalidParameter: ``n`` is not a positive integer.

    Examples:
        >>> df = census(50, seed=1)
        >>> bool(df.groupby("person_id").size().max() <= 4), bool(df.age.between(0, 100).all())
        (True, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidParameter("n must be a positive integer")
    rng = np.random.default_rng(seed)  # test-only: synthetic data generation, never a release path

    # Households first: members share a state and county.
    sizes = rng.choice(_HOUSEHOLD_SIZES, size=n, p=_HOUSEHOLD_P)
    household_of = np.repeat(np.arange(n), sizes)[:n]
    n_households = int(household_of[-1]) + 1
    pop = np.array([s[3] for s in STATES], dtype=float)
    hh_state = rng.choice(len(STATES), size=n_households, p=pop / pop.sum())
    # Counties per state grow with population; small codes are more populous (Zipf-like).
    n_counties = np.maximum(3, np.round(pop / 400_000)).astype(np.int64)[hh_state]
    rank = np.minimum(rng.zipf(1.6, n_households), n_counties)
    hh_county = 2 * (rank - 1) + 1
    state = np.array(STATE_CODES)[hh_state[household_of]]
    county = hh_county[household_of]
    household = 100_000 + household_of

    # Persons: birth dates spread like a population pyramid (more young than old).
    birth_year = 2020 - np.minimum(rng.gamma(2.2, 17.0, n).astype(np.int64), 105)
    day = rng.integers(0, 365, n)
    births = np.array(
        [
            dt.date(int(y), 1, 1) + dt.timedelta(days=int(d))
            for y, d in zip(birth_year, day, strict=True)
        ]
    )
    after_july = np.array([(b.month, b.day) > (7, 1) for b in births])
    sex = rng.choice(SEXES, size=n, p=[0.51, 0.49])
    race = rng.choice(RACES, size=n, p=[0.60, 0.13, 0.07, 0.02, 0.01, 0.17])
    ability = rng.normal(0.0, 1.0, n)

    # Survey years: consecutive, within 2015–2024, while aged 0–100.
    first = np.maximum(2015, birth_year + 1)
    last = np.minimum(2024, birth_year + 100)
    span = np.maximum(last - first + 1, 1)
    k = np.minimum(rng.choice(np.arange(1, MAX_ROWS_PER_PERSON + 1), size=n, p=_ROWS_P), span)
    start = first + (rng.random(n) * (span - k + 1)).astype(np.int64)
    person = np.repeat(np.arange(n), k)
    offset = np.arange(person.size) - np.repeat(np.cumsum(k) - k, k)
    year = start[person] + offset
    rows = person.size

    age = np.clip(year - birth_year[person] - after_july[person].astype(np.int64), 0, 100)
    adult_edu = np.clip(np.round(11.5 + 2.2 * ability + rng.normal(0, 0.7, n)), 1, 16)
    education = np.minimum(adult_edu[person], np.maximum(1, age - 4)).astype(np.int64)

    p_married = np.clip((age - 18) / 30, 0, 0.6)
    u = rng.random(rows)
    marital = np.where(
        age < 15,
        "never_married",
        np.where(
            u < p_married,
            "married",
            np.where(
                u < p_married + 0.08,
                "divorced",
                np.where(
                    u < p_married + 0.10,
                    "separated",
                    np.where(
                        (age > 60) & (u < p_married + 0.10 + (age - 60) / 100),
                        "widowed",
                        "never_married",
                    ),
                ),
            ),
        ),
    )

    working_age = (age >= 16) & (age <= 80)
    p_work = np.where(age < 22, 0.45, np.where(age < 62, 0.78, 0.25))
    employed = working_age & (rng.random(rows) < p_work)
    hours = np.where(employed, np.clip(np.round(rng.normal(39, 10, rows)), 1, 99), 0)
    w = 1.0 / np.arange(1, len(OCCUPATIONS) + 1) ** 0.9
    occ = np.array(OCCUPATIONS, dtype=object)[
        rng.choice(len(OCCUPATIONS), size=rows, p=w / w.sum())
    ]
    occ[~employed] = None  # no occupation without a job

    log_income = 10.4 + 0.18 * (education - 9) + 0.3 * ability[person] + rng.normal(0, 0.6, rows)
    income = np.exp(log_income) * np.where(employed, 1.0, 0.35)
    tail = rng.random(rows) < 0.02
    income[tail] *= rng.pareto(1.2, int(tail.sum())) * 5 + 3  # a few very large incomes
    loss = rng.random(rows) < 0.01
    income[loss] = -np.round(rng.gamma(2.0, 5_000.0, int(loss.sum())))
    income = np.round(income, 2)
    missing = (age < 16) | (rng.random(rows) < 0.07)
    income_col = pd.array(np.where(missing, np.nan, income), dtype="Float64")  # NaN -> NULL

    # ~5% of later survey rows move to a new household in the same county.
    moved = (offset > 0) & (rng.random(rows) < 0.05)
    household_col = household[person].copy()
    household_col[moved] = 100_000 + n_households + np.arange(int(moved.sum()))

    return pd.DataFrame(
        {
            "person_id": person.astype(np.int64),
            "household_id": household_col.astype(np.int64),
            "year": year.astype(np.int64),
            "age": age.astype(np.int64),
            "sex": sex[person],
            "race": race[person].astype(np.int64),
            "marital_status": marital,
            "education": education,
            "income": income_col,
            "hours_per_week": hours.astype(np.int64),
            "employed": employed.astype(bool),
            "occupation": pd.array(occ, dtype="string"),
            "state": state[person],
            "county": county[person].astype(np.int64),
            "birth_date": births[person],
        }
    )


def jobs(people: pd.DataFrame, *, seed: int) -> pd.DataFrame:
    """A second private table: one row per (person, job held), joinable on ``person_id``.

    Persons aged 16–80 in any survey row hold 0–3 jobs (probabilities 0.3, 0.45, 0.2, 0.05).
    Columns: ``person_id`` (int64, the privacy unit), ``employer`` (text, see
    :data:`EMPLOYERS`), ``salary`` (float dollars, log-normal with a few above 300 000),
    ``start_year`` (int, 1990–2024), ``full_time`` (bool). Deterministic given ``seed``.

    Examples:
        >>> j = jobs(census(100, seed=1), seed=1)
        >>> bool(j.groupby("person_id").size().max() <= 3)
        True
    """
    rng = np.random.default_rng(seed)  # test-only: synthetic data generation, never a release path
    ages = people.groupby("person_id")["age"].agg(["min", "max"])
    eligible = ages.index[((ages["max"] >= 16) & (ages["min"] <= 80)).to_numpy()]
    counts = rng.choice(4, size=len(eligible), p=[0.3, 0.45, 0.2, 0.05])
    pid = np.repeat(eligible.to_numpy(dtype=np.int64), counts)
    m = pid.size
    w = 1.0 / np.arange(1, len(EMPLOYERS) + 1) ** 0.8
    employer = np.array(EMPLOYERS)[rng.choice(len(EMPLOYERS), size=m, p=w / w.sum())]
    salary = np.round(np.exp(rng.normal(10.8, 0.55, m)), 2)
    big = rng.random(m) < 0.01
    salary[big] *= 8
    return pd.DataFrame(
        {
            "person_id": pid,
            "employer": employer,
            "salary": salary,
            "start_year": rng.integers(1990, 2025, m).astype(np.int64),
            "full_time": rng.random(m) < 0.8,
        }
    )

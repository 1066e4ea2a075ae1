"""Whatever a user types as a privacy parameter, deniable raises only its own typed errors.

Huge integers (up to 10^500, beyond floats), Fractions with huge numerators or denominators,
floats including NaN, infinities, -0.0 and subnormals, numpy scalars, Decimals, strings, None
and bools are fed to the loss classes, to the query-side check and to ``Session.sql``'s
``epsilon``/``delta``/``rho``/``level`` options; the only exceptions allowed are subclasses of
:class:`deniable.errors.DeniableError` (never OverflowError, ZeroDivisionError, TypeError or a
decimal error).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deniable import ROW
from deniable.accounting.loss import (
    MAX_PARAMETER,
    MIN_PARAMETER,
    Epsilon,
    EpsilonDelta,
    PrivacyLoss,
    Rho,
    parameter,
    show,
)
from deniable.curator.session import Session
from deniable.errors import DeniableError, InvalidParameter, SQLError
from deniable.query.answer import loss_from_json, loss_to_json, show_loss
from deniable.query.plan import requested_loss

FAST = settings(max_examples=300, deadline=None, derandomize=True, database=None)
SESSION = settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

HUGE = 10**500
SPECIAL = [
    10**400,
    -(10**400),
    Fraction(10**400, 3),
    Fraction(1, 10**400),
    Fraction(10**600 + 1, 10**300),
    2**64,
    2**64 + 1,
    Fraction(1, 2**64),
    Fraction(1, 2**64 + 1),
    math.nan,
    math.inf,
    -math.inf,
    -0.0,
    5e-324,
    1e-320,
    1.7976931348623157e308,
    np.float64(1e308),
    np.float64("nan"),
    np.float32(0.5),
    np.int64(3),
    np.uint64(2**64 - 1),
    np.bool_(True),
    Decimal("0.5"),
    Decimal("1e400"),
    Decimal("NaN"),
    Decimal("sNaN"),
    Decimal("-Infinity"),
    "0.5",
    "",
    None,
    True,
    complex(1, 0),
    [1],
]

odd_numbers = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(min_value=-HUGE, max_value=HUGE),
    st.builds(
        Fraction,
        st.integers(min_value=-HUGE, max_value=HUGE),
        st.integers(min_value=1, max_value=HUGE),
    ),
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.floats(min_value=1e-25, max_value=1e25),  # mostly valid: reaches the release path
    st.builds(np.float64, st.floats()),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.int64, st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    st.decimals(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.none(),
    st.booleans(),
)


def exercise(loss: PrivacyLoss) -> None:
    """Everything a user might do with a loss value: print, add, compare, store."""
    repr(loss)
    show_loss(loss)
    assert loss_from_json(loss_to_json(loss)) == loss
    assert loss <= loss  # type: ignore[operator]
    loss + loss  # type: ignore[operator]  # may refuse a vacuous delta: typed


@FAST
@given(odd_numbers)
def test_loss_classes_raise_only_typed_errors(value: object) -> None:
    builders = [
        lambda: Epsilon(epsilon=value),  # type: ignore[arg-type]
        lambda: Rho(rho=value),  # type: ignore[arg-type]
        lambda: EpsilonDelta(epsilon=value, delta=0),  # type: ignore[arg-type]
        lambda: EpsilonDelta(epsilon=1, delta=value),  # type: ignore[arg-type]
    ]
    for build in builders:
        with contextlib.suppress(DeniableError):
            exercise(build())


@FAST
@given(odd_numbers, st.sampled_from(["epsilon", "delta", "rho", "split weight"]))
def test_parameter_refuses_with_invalid_parameter_only(value: object, name: str) -> None:
    try:
        got = parameter(value, name)
    except InvalidParameter as e:
        assert name.split()[0] in str(e)  # the message names what to fix
        return
    if name == "delta":
        assert 0 <= got < 1
    else:
        assert MIN_PARAMETER <= got <= MAX_PARAMETER


def test_parameter_says_what_to_pass() -> None:
    with pytest.raises(InvalidParameter, match=r"epsilon must be at most 2\^64.*epsilon=1"):
        parameter(10**400, "epsilon")
    with pytest.raises(InvalidParameter, match=r"rho must be at least 2\^-64.*rho=0\.1"):
        parameter(1e-320, "rho")
    with pytest.raises(InvalidParameter, match=r"epsilon must be > 0"):
        parameter(-1, "epsilon")
    with pytest.raises(InvalidParameter, match=r"delta must be ≥ 0 and < 1"):
        parameter(1, "delta")
    with pytest.raises(InvalidParameter, match=r"must be finite"):
        parameter(Decimal("NaN"), "epsilon")
    assert parameter(Decimal("0.1"), "epsilon") == Fraction(1, 10)
    assert parameter(np.float32(0.5), "epsilon") == Fraction(1, 2)
    assert parameter(0, "delta") == 0


def test_show_never_overflows_nor_needs_str_of_huge_ints() -> None:
    assert show(Fraction(10**5000)) == "1e+5000"  # str() of this int is refused by Python
    assert show(Fraction(-7, 10**5000)) == "-7e-5000"
    assert show(Fraction(10**400 + 1, 3)) == "3.33333e+399"
    assert show(Fraction(1, 3)) == "0.333333"


# -- Session.sql -----------------------------------------------------------------------------

QUERIES = [
    "SELECT COUNT(*) AS n FROM t",
    "SELECT SUM(x) AS s, AVG(x) AS a FROM t",
    "SELECT g, COUNT(*) AS n, VARIANCE(x) AS v FROM t GROUP BY g",
    "SELECT MEDIAN(x) AS m FROM t",
]
PRIVATE_KEYS = "SELECT h, COUNT(*) AS n FROM t GROUP BY h"
CAPS: list[PrivacyLoss] = [
    # Caps far beyond any request (exact losses hold them): queries are never out of budget.
    Epsilon(epsilon=10**400),
    EpsilonDelta(epsilon=10**400, delta=Fraction(999, 1000)),
    Rho(rho=10**400),
]


def _plan_refuses_out_of_range_amounts() -> bool:
    """Whether query/plan.py's ``_number`` delegates to ``loss.parameter`` (see the report)."""
    try:
        requested_loss(Epsilon, epsilon=10**400, delta=None, rho=None)
    except InvalidParameter:
        return True
    return False


NEEDS_PLAN = pytest.mark.xfail(
    not _plan_refuses_out_of_range_amounts(),
    reason="query/plan.py's _number must call deniable.accounting.loss.parameter",
    strict=False,
)


@NEEDS_PLAN
@FAST
@given(odd_numbers, st.sampled_from([Epsilon, EpsilonDelta, Rho]))
def test_requested_loss_raises_only_typed_errors(value: object, kind: type) -> None:
    options: dict[str, object] = {"epsilon": None, "delta": None, "rho": None}
    options["rho" if kind is Rho else "epsilon"] = value
    with contextlib.suppress(DeniableError):
        requested_loss(kind, **options)  # type: ignore[arg-type]
    if kind is not Rho:
        # A pure-ε budget must refuse a delta without comparing it first (Decimal sNaN).
        with contextlib.suppress(DeniableError):
            requested_loss(kind, epsilon=1, delta=value, rho=None)


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Session]]:
    root: Path = tmp_path_factory.mktemp("typed")
    frame = pd.DataFrame(
        {"x": [1, 2, 3, 4, 5, 6], "g": ["a", "b", "a", "b", "a", "b"], "h": list("uvuvuv")}
    )
    out: dict[str, Session] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cap in CAPS:
            s = Session(budget=cap, ledger=root / f"{type(cap).__name__}.db")
            s.add_table(
                "t", frame, bounds={"x": (0, 10)}, public_keys={"g": ["a", "b"]}, privacy_unit=ROW
            )
            out[type(cap).__name__] = s
    yield out
    for s in out.values():
        s.close()


def _ask(session: Session, kind: str, query: str, option: str, value: object) -> None:
    options: dict[str, object] = {"rho": 1} if kind == "Rho" else {"epsilon": 1}
    if kind == "EpsilonDelta" and query == PRIVATE_KEYS:
        options["delta"] = 1e-6
    options[option] = value
    try:
        answer = session.sql(query, **options)  # type: ignore[arg-type]
    except DeniableError as e:
        event(f"refused: {type(e).__name__}")
        return
    event("answered")
    repr(answer)
    answer._repr_html_()
    repr(session.budget)


PLAUSIBLE = {
    # Values near the valid ranges, so that half of the examples reach the release path.
    "amount": st.one_of(
        st.floats(min_value=1e-21, max_value=1e21),
        st.builds(Fraction, st.integers(1, 10**30), st.integers(1, 10**30)),
        st.sampled_from([2**64, Fraction(1, 2**64), np.int64(2), np.float32(0.25)]),
    ),
    "delta": st.one_of(
        st.floats(min_value=0, max_value=1, exclude_max=True), st.sampled_from([0, 1e-300])
    ),
    "level": st.one_of(
        st.floats(min_value=0, max_value=1, exclude_min=True, exclude_max=True),
        st.sampled_from([1e-300, 1 - 2**-53, np.float64(0.9), Fraction(9, 10)]),
    ),
}


@NEEDS_PLAN
@SESSION
@given(
    data=st.data(),
    kind=st.sampled_from(["Epsilon", "EpsilonDelta", "Rho"]),
    query=st.sampled_from([*QUERIES, PRIVATE_KEYS]),
    option=st.sampled_from(["amount", "delta", "level"]),
)
def test_session_sql_raises_only_typed_errors(
    sessions: dict[str, Session], data: st.DataObject, kind: str, query: str, option: str
) -> None:
    value = data.draw(st.one_of(odd_numbers, PLAUSIBLE[option]), label="value")
    if option == "amount":
        option = "rho" if kind == "Rho" else "epsilon"
    _ask(sessions[kind], kind, query, option, value)


@NEEDS_PLAN
@pytest.mark.parametrize("query", QUERIES, ids=["count", "sum", "variance", "median"])
@pytest.mark.parametrize(
    ("kind", "option", "value"),
    [
        ("Epsilon", "epsilon", 10**400),
        ("Epsilon", "epsilon", 1e-320),
        ("EpsilonDelta", "epsilon", Fraction(10**400, 3)),
        ("Rho", "rho", 10**400),
        ("Rho", "rho", 1e-320),
        ("Rho", "rho", Fraction(1, 10**400)),
    ],
    ids=["eps-1e400", "eps-1e-320", "eps-fraction", "rho-1e400", "rho-1e-320", "rho-fraction"],
)
def test_out_of_range_amounts_are_invalid_parameters(
    sessions: dict[str, Session], query: str, kind: str, option: str, value: object
) -> None:
    with pytest.raises(InvalidParameter, match=rf"{option} must be at (most|least)") as caught:
        sessions[kind].sql(query, **{option: value})  # type: ignore[arg-type]
    assert caught.value.__cause__ is None


def test_huge_caps_print_and_serve(tmp_path: Path) -> None:
    # A cap beyond floats used to overflow when printed (BudgetStatus, BudgetExceeded).
    frame = pd.DataFrame({"x": [1, 2, 3]})
    with Session(budget=Rho(rho=10**400), ledger=tmp_path / "l.db") as s:
        s.add_table("t", frame, bounds={"x": (0, 10)}, privacy_unit=ROW)
        s.sql("SELECT COUNT(*) AS n FROM t", rho=1)
        assert "1e+400" in repr(s.budget)
    with Session(budget=Epsilon(epsilon=Fraction(1, 10**400)), ledger=tmp_path / "m.db") as s:
        s.add_table("t", frame, bounds={"x": (0, 10)}, privacy_unit=ROW)
        with pytest.raises(DeniableError):  # over budget, printed without underflowing to 0
            s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
        assert "1e-400" in repr(s.budget)


@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) FROM t WHERE " + "(" * 3000 + "x > 1" + ")" * 3000,
        "SELECT COUNT(*) FROM t WHERE " + "NOT " * 1000 + "x > 1",
        "SELECT COUNT(*) FROM t WHERE x > " + " + ".join(["1"] * 4500),
        "SELECT SUM(" + " + ".join(["x"] * 4000) + ") FROM t",
        "SELECT " + " + ".join(["COUNT(*)"] * 1500) + " AS n FROM t",
        "SELECT SUM(" + "CASE WHEN x > 1 THEN " * 190 + "1" + " END" * 190 + ") FROM t",
    ],
    ids=["parens", "not", "where-chain", "sum-chain", "post-chain", "case"],
)
def test_deeply_nested_sql_is_an_sql_error(query: str, tmp_path: Path) -> None:
    """Deep trees are refused at parse time with SQLError, before any stage recurses."""
    from deniable.curator.session import Session

    s = Session(budget=Epsilon(epsilon=1), ledger=tmp_path / "l.db")
    s.add_table(
        "t",
        pd.DataFrame({"u": [1, 2], "x": [1.0, 2.0]}),
        privacy_unit="u",
        bounds={"x": (0, 5)},
        max_groups=1,
        max_rows=1,
    )
    with pytest.raises(SQLError, match="nest"):
        s.sql(query, epsilon=0.5)
    assert s.budget.history == []
    s.close()

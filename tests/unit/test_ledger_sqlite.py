"""Unit tests of the SQLite budget ledger (one process; see tests/system for crashes/races)."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.errors import BudgetExceeded, InvalidParameter, LedgerError
from deniable.ledger import SCHEMA_VERSION, CapConflict, Charge, Ledger, UnknownDataset

F = Fraction


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger(path: Path) -> Iterator[Ledger]:
    with Ledger(path) as led:
        yield led


def charge(
    led: Ledger,
    loss: PrivacyLoss,
    *,
    dataset: str = "d",
    key: str = "k",
    analyst: str = "ann",
    details: Mapping[str, object] | None = None,
) -> Charge:
    return led.charge(
        dataset, loss, analyst=analyst, query_key=key, query_text=f"SELECT {key}", details=details
    )


# -- schema and storage --------------------------------------------------------------------


def test_schema_is_versioned_and_the_file_is_in_wal_mode(ledger: Ledger, path: Path) -> None:
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    # synchronous is per connection: the ledger's own connection must be FULL (2).
    assert ledger._conn is not None
    assert ledger._conn.execute("PRAGMA synchronous").fetchone() == (2,)
    raw.close()


def test_reopening_keeps_everything(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        c = charge(led, Epsilon(epsilon=F(1, 3)))
    with Ledger(path) as led:
        assert led.cap("d") == Epsilon(epsilon=1)
        assert led.history("d") == [c]
        assert led.spent("d") == Epsilon(epsilon=F(1, 3))


def test_losses_are_stored_as_exact_text_with_their_type(ledger: Ledger, path: Path) -> None:
    ledger.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
    charge(ledger, EpsilonDelta(epsilon=F(1, 3), delta=F(1, 3 * 10**7)))
    raw = sqlite3.connect(path)
    row = raw.execute(
        "SELECT loss_type, epsilon, delta, rho, typeof(epsilon), typeof(delta) FROM charges"
    ).fetchone()
    assert row == ("epsilon_delta", "1/3", "1/30000000", None, "text", "text")
    assert raw.execute("SELECT loss_type, epsilon, delta FROM datasets").fetchone() == (
        "epsilon_delta",
        "1/1",
        "1/1000000",
    )
    raw.close()


def test_awkward_fractions_add_up_exactly(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    for i in range(3):
        charge(ledger, Epsilon(epsilon=F(1, 3)), key=f"k{i}")
    assert ledger.spent("d").epsilon == 1  # type: ignore[union-attr]
    assert ledger.remaining("d") == Epsilon(epsilon=0)
    with pytest.raises(BudgetExceeded):
        charge(ledger, Epsilon(epsilon=F(1, 10**30)))


def test_float_epsilons_are_read_as_the_decimals_they_print_as(path: Path) -> None:
    # 0.1 is read as exactly 1/10 (not the double just above it), and the ledger never rounds:
    # ten charges of 0.1 exactly exhaust a cap of 1, even though the float sum of ten 0.1s is
    # 0.9999999999999999, and an eleventh is refused.
    with Ledger(path) as ledger:
        ledger.register("d", Epsilon(epsilon=1))
        for i in range(10):
            charge(ledger, Epsilon(epsilon=0.1), key=f"k{i}")
        assert ledger.spent("d").epsilon == 1  # type: ignore[union-attr]
        assert ledger.remaining("d") == Epsilon(epsilon=0)
        with pytest.raises(BudgetExceeded):
            charge(ledger, Epsilon(epsilon=0.1), key="k10")
    # The exact total survives storage: after reopening not even the smallest float fits.
    with Ledger(path) as ledger:
        assert ledger.spent("d").epsilon == 10 * F(1, 10)  # type: ignore[union-attr]
        with pytest.raises(BudgetExceeded):
            charge(ledger, Epsilon(epsilon=5e-324), key="k11")


def test_rho_budgets(ledger: Ledger) -> None:
    ledger.register("d", Rho(rho=F(1, 2)))
    charge(ledger, Rho(rho=F(1, 8)))
    assert ledger.remaining("d") == Rho(rho=F(3, 8))
    with pytest.raises(BudgetExceeded) as info:
        charge(ledger, Rho(rho=F(1, 2)))
    assert info.value.remaining == Rho(rho=F(3, 8))


def test_not_a_ledger_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an sqlite database" * 100)
    with pytest.raises(LedgerError) as info:
        Ledger(junk)
    assert isinstance(info.value.__cause__, sqlite3.Error)

    other = tmp_path / "other.db"
    raw = sqlite3.connect(other)
    raw.execute("CREATE TABLE people (name TEXT)")
    raw.commit()
    raw.close()
    with pytest.raises(LedgerError, match="not a ledger"):
        Ledger(other)


def test_unknown_schema_version_is_refused(path: Path) -> None:
    Ledger(path).close()
    raw = sqlite3.connect(path)
    raw.execute("DROP TRIGGER meta_append_only_update")  # meta is append-only too
    raw.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    raw.commit()
    raw.close()
    with pytest.raises(LedgerError, match="version 99"):
        Ledger(path)


def test_unopenable_path_is_a_ledger_error_with_its_cause(tmp_path: Path) -> None:
    with pytest.raises(LedgerError) as info:
        Ledger(tmp_path / "missing-dir" / "ledger.db")
    assert isinstance(info.value.__cause__, sqlite3.Error)


def test_a_non_durable_in_memory_ledger_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LedgerError, match="WAL"):
        Ledger(":memory:")
    assert list(tmp_path.iterdir()) == []  # no ':memory:.anchor' left in the working directory


def test_closed_ledger_refuses_work(path: Path) -> None:
    led = Ledger(path)
    led.register("d", Epsilon(epsilon=1))
    led.close()
    with pytest.raises(LedgerError, match="closed"):
        led.spent("d")


def test_lock_timeout_is_a_ledger_error_and_records_nothing(ledger: Ledger, path: Path) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with Ledger(path, timeout=0.2) as impatient, pytest.raises(LedgerError) as info:
            charge(impatient, Epsilon(epsilon=F(1, 2)))
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert ledger.history("d") == []


def test_charges_are_append_only_in_the_database_itself(ledger: Ledger, path: Path) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    charge(ledger, Epsilon(epsilon=F(1, 2)))
    raw = sqlite3.connect(path)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("DELETE FROM charges")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE charges SET epsilon = '0/1'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        raw.execute("UPDATE charges SET status = 'charged' WHERE 0")  # no row: allowed
        raw.execute("UPDATE charges SET status = 'answered'")
        raw.execute("UPDATE charges SET status = 'charged'")  # answered → charged: refused
    raw.rollback()
    raw.close()
    assert ledger.spent("d") == Epsilon(epsilon=F(1, 2))


# -- registration --------------------------------------------------------------------------


def test_register_same_cap_is_a_noop_and_different_cap_is_refused(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    ledger.register("d", Epsilon(epsilon=F(2, 2)))
    assert [e.action for e in ledger.curator_events("d")] == ["register"]
    with pytest.raises(CapConflict, match="allow_change"):
        ledger.register("d", Epsilon(epsilon=2))
    with pytest.raises(CapConflict):
        ledger.register("d", EpsilonDelta(epsilon=1, delta=0))
    assert ledger.cap("d") == Epsilon(epsilon=1)


def test_explicit_cap_change_is_recorded(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    charge(ledger, Epsilon(epsilon=F(1, 2)))
    ledger.register("d", Epsilon(epsilon=2), allow_change=True)
    assert ledger.cap("d") == Epsilon(epsilon=2)
    assert ledger.remaining("d") == Epsilon(epsilon=F(3, 2))
    events = ledger.curator_events("d")
    assert [(e.action, e.loss, e.previous) for e in events] == [
        ("register", Epsilon(epsilon=1), None),
        ("change_cap", Epsilon(epsilon=2), Epsilon(epsilon=1)),
    ]


def test_cap_change_cannot_unspend_or_change_type_after_charges(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    charge(ledger, Epsilon(epsilon=F(1, 2)))
    with pytest.raises(InvalidParameter, match="already spent"):
        ledger.register("d", Epsilon(epsilon=F(1, 4)), allow_change=True)
    with pytest.raises(InvalidParameter, match="cannot become"):
        ledger.register("d", Rho(rho=1), allow_change=True)
    ledger.register("d", Epsilon(epsilon=F(1, 2)), allow_change=True)  # down to spent: fine
    assert ledger.remaining("d") == Epsilon(epsilon=0)


def test_type_change_allowed_before_any_charge(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    ledger.register("d", Rho(rho=F(1, 2)), allow_change=True)
    assert ledger.spent("d") == Rho(rho=0)


def test_unknown_dataset(ledger: Ledger) -> None:
    with pytest.raises(UnknownDataset, match="register"):
        charge(ledger, Epsilon(epsilon=1), dataset="nope")
    with pytest.raises(UnknownDataset):
        ledger.remaining("nope")
    with pytest.raises(UnknownDataset):
        ledger.set_allowance("nope", "ann", Epsilon(epsilon=1))


@pytest.mark.parametrize(
    "call",
    [
        lambda led: led.register("", Epsilon(epsilon=1)),
        lambda led: led.register("d", 1.0),
        lambda led: led.charge("d", 0.5, analyst="a", query_key="k", query_text="q"),
        lambda led: led.charge("d", Epsilon(epsilon=1), analyst="", query_key="k", query_text="q"),
        lambda led: led.charge("d", Epsilon(epsilon=1), analyst="a", query_key="", query_text="q"),
    ],
)
def test_malformed_arguments_are_invalid_parameters(
    ledger: Ledger, call: Callable[[Ledger], object]
) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    with pytest.raises(InvalidParameter):
        call(ledger)
    assert ledger.history("d") == []


# -- charging ------------------------------------------------------------------------------


def test_refused_charge_costs_nothing_and_says_what_is_left(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    charge(ledger, Epsilon(epsilon=F(3, 4)), key="first")
    before = ledger.history("d")
    with pytest.raises(BudgetExceeded) as info:
        charge(ledger, Epsilon(epsilon=F(1, 2)), key="second")
    assert info.value.remaining == Epsilon(epsilon=F(1, 4))
    assert info.value.requested == Epsilon(epsilon=F(1, 2))
    assert ledger.history("d") == before
    assert ledger.spent("d") == Epsilon(epsilon=F(3, 4))
    charge(ledger, Epsilon(epsilon=F(1, 4)), key="third")  # what is left still fits exactly
    assert ledger.remaining("d") == Epsilon(epsilon=0)


def test_failing_charge_with_bad_details_costs_nothing(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    bads: list[Any] = [{"x": object()}, {"x": float("nan")}, {1: "non-string key"}]
    for bad in bads:
        with pytest.raises(InvalidParameter):
            charge(ledger, Epsilon(epsilon=F(1, 2)), details=bad)
    assert ledger.history("d") == []
    assert ledger.spent("d") == Epsilon(epsilon=0)


def test_epsilon_delta_caps_are_compared_component_wise(ledger: Ledger) -> None:
    ledger.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
    charge(ledger, EpsilonDelta(epsilon=F(1, 10), delta=F(1, 10**6)), key="a")
    # ε would fit (9/10 left) but δ is exhausted: refused.
    with pytest.raises(BudgetExceeded) as info:
        charge(ledger, EpsilonDelta(epsilon=F(1, 10), delta=F(1, 10**9)), key="b")
    assert info.value.remaining == EpsilonDelta(epsilon=F(9, 10), delta=0)
    # δ = 0 still fits.
    charge(ledger, EpsilonDelta(epsilon=F(9, 10), delta=0), key="c")
    # now ε is exhausted, δ is exhausted too
    assert ledger.remaining("d") == EpsilonDelta(epsilon=0, delta=0)


def test_history_is_in_commit_order_with_everything_recorded(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    ledger.register("other", Epsilon(epsilon=1))
    made = [
        charge(ledger, Epsilon(epsilon=F(1, 7)), key="q1", details={"mechanism": "geometric"}),
        charge(ledger, Epsilon(epsilon=F(1, 7)), key="q2", analyst="bob"),
        charge(ledger, Epsilon(epsilon=F(2, 7)), key="q3", details={"bounds": [0, 6000]}),
    ]
    charge(ledger, Epsilon(epsilon=F(1, 2)), dataset="other", key="elsewhere")
    hist = ledger.history("d")
    assert hist == made
    assert [c.query_key for c in hist] == ["q1", "q2", "q3"]
    assert [c.id for c in hist] == sorted(c.id for c in hist)
    assert hist[0].details == {"mechanism": "geometric"}
    assert hist[2].details == {"bounds": [0, 6000]}
    assert hist[1].analyst == "bob"
    assert hist[0].query_text == "SELECT q1"
    assert all(c.status == "charged" for c in hist)
    assert all(c.time.tzinfo is not None for c in hist)
    assert [c.time for c in hist] == sorted(c.time for c in hist)
    assert ledger.spent("d") == Epsilon(epsilon=F(4, 7))
    assert ledger.spent("d", analyst="bob") == Epsilon(epsilon=F(1, 7))
    assert ledger.spent("other") == Epsilon(epsilon=F(1, 2))


def test_charge_is_frozen(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    c = charge(ledger, Epsilon(epsilon=F(1, 2)), details={"a": 1})
    assert isinstance(c, Charge)
    with pytest.raises(AttributeError):
        c.status = "answered"  # type: ignore[misc]
    with pytest.raises(TypeError):
        c.details["a"] = 2  # type: ignore[index]
    assert hash(c) == hash(c)


def test_threads_sharing_one_ledger_cannot_overspend(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    results: list[str] = []

    def work(i: int) -> None:
        for j in range(10):
            try:
                charge(ledger, Epsilon(epsilon=F(1, 10)), key=f"{i}-{j}")
                results.append("ok")
            except BudgetExceeded:
                results.append("refused")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("ok") == 10
    assert ledger.spent("d") == Epsilon(epsilon=1)


# -- allowances ----------------------------------------------------------------------------


def test_allowance_must_be_a_slice_of_the_cap(ledger: Ledger) -> None:
    ledger.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
    with pytest.raises(InvalidParameter, match="slice"):
        ledger.set_allowance("d", "ann", EpsilonDelta(epsilon=F(1, 2), delta=F(1, 10**5)))
    with pytest.raises(InvalidParameter, match="slice"):
        ledger.set_allowance("d", "ann", Epsilon(epsilon=F(1, 2)))
    ledger.set_allowance("d", "ann", EpsilonDelta(epsilon=F(1, 2), delta=F(1, 10**7)))
    assert ledger.allowance("d", "ann") == EpsilonDelta(epsilon=F(1, 2), delta=F(1, 10**7))
    assert ledger.allowance("d", "bob") is None


def test_a_charge_must_fit_the_analyst_slice_and_the_global_cap(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    ledger.set_allowance("d", "ann", Epsilon(epsilon=F(6, 10)))
    charge(ledger, Epsilon(epsilon=F(1, 2)), analyst="ann", key="a1")
    # ann's slice has 1/10 left although the dataset has 1/2 left
    with pytest.raises(BudgetExceeded, match="ann") as info:
        charge(ledger, Epsilon(epsilon=F(2, 10)), analyst="ann", key="a2")
    assert info.value.remaining == Epsilon(epsilon=F(1, 10))
    assert ledger.remaining("d", analyst="ann") == Epsilon(epsilon=F(1, 10))
    # bob has no slice: the global cap only
    charge(ledger, Epsilon(epsilon=F(45, 100)), analyst="bob", key="b1")
    # now the global cap (1/20 left) binds ann more tightly than her slice (1/10 left)
    assert ledger.remaining("d", analyst="ann") == Epsilon(epsilon=F(1, 20))
    with pytest.raises(BudgetExceeded) as info:
        charge(ledger, Epsilon(epsilon=F(1, 10)), analyst="ann", key="a3")
    assert info.value.remaining == Epsilon(epsilon=F(1, 20))
    assert ledger.spent("d") == Epsilon(epsilon=F(95, 100))
    assert ledger.spent("d", analyst="ann") == Epsilon(epsilon=F(1, 2))
    assert [e.action for e in ledger.curator_events("d")] == ["register", "set_allowance"]


def test_allowances_are_component_wise_for_epsilon_delta(ledger: Ledger) -> None:
    ledger.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**5)))
    ledger.set_allowance("d", "ann", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
    charge(ledger, EpsilonDelta(epsilon=F(1, 10), delta=F(1, 10**6)), analyst="ann", key="a")
    with pytest.raises(BudgetExceeded) as info:
        charge(ledger, EpsilonDelta(epsilon=F(1, 10), delta=F(1, 10**9)), analyst="ann", key="b")
    assert info.value.remaining == EpsilonDelta(epsilon=F(9, 10), delta=0)
    charge(ledger, EpsilonDelta(epsilon=F(1, 10), delta=F(1, 10**9)), analyst="bob", key="c")


# -- answer cache --------------------------------------------------------------------------


def test_cache_hit_returns_identical_bytes_at_no_cost(ledger: Ledger, path: Path) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    payload = bytes(range(256)) * 3 + b"\x00tail"
    c = charge(ledger, Epsilon(epsilon=F(1, 2)), key="same")
    assert ledger.cached_answer("d", "same") is None  # charged but not yet answered
    ledger.store_answer(c.id, payload)
    spent = ledger.spent("d")
    assert ledger.cached_answer("d", "same") == payload
    assert ledger.spent("d") == spent
    assert ledger.cached_answer("d", "other-key") is None
    assert ledger.cached_answer("other-dataset", "same") is None
    assert ledger.history("d")[0].status == "answered"
    with Ledger(path) as again:
        assert again.cached_answer("d", "same") == payload


def test_store_answer_is_idempotent_but_immutable(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    c = charge(ledger, Epsilon(epsilon=F(1, 2)))
    ledger.store_answer(c.id, b"answer")
    ledger.store_answer(c.id, bytearray(b"answer"))
    with pytest.raises(LedgerError, match="different"):
        ledger.store_answer(c.id, b"another answer")
    assert ledger.cached_answer("d", "k") == b"answer"
    with pytest.raises(InvalidParameter, match="no charge"):
        ledger.store_answer(c.id + 1000, b"x")
    with pytest.raises(InvalidParameter):
        ledger.store_answer(c.id, "text")  # type: ignore[arg-type]


def test_latest_answer_wins_for_a_recharged_key(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    first = charge(ledger, Epsilon(epsilon=F(1, 4)), key="q")
    ledger.store_answer(first.id, b"first")
    second = charge(ledger, Epsilon(epsilon=F(1, 4)), key="q")
    ledger.store_answer(second.id, b"second")
    assert ledger.cached_answer("d", "q") == b"second"


def test_unanswered_charge_still_counts_and_a_repeat_pays_again(ledger: Ledger) -> None:
    # The crash window: charged, answer never stored. The charge stays; a repeat pays again.
    ledger.register("d", Epsilon(epsilon=1))
    charge(ledger, Epsilon(epsilon=F(1, 2)), key="q")
    assert ledger.cached_answer("d", "q") is None
    charge(ledger, Epsilon(epsilon=F(1, 2)), key="q")
    assert ledger.spent("d") == Epsilon(epsilon=1)


# -- loss kinds ----------------------------------------------------------------------------


def test_charges_count_in_the_caps_kind_but_are_recorded_as_given(ledger: Ledger) -> None:
    ledger.register("z", Rho(rho=F(1, 2)))
    charge(ledger, Epsilon(epsilon=F(1, 2)), dataset="z", key="pure")  # ε²/2 = 1/8
    charge(ledger, Rho(rho=F(1, 4)), dataset="z", key="rho")
    assert [c.loss for c in ledger.history("z")] == [Epsilon(epsilon=F(1, 2)), Rho(rho=F(1, 4))]
    assert ledger.spent("z") == Rho(rho=F(3, 8))
    with pytest.raises(BudgetExceeded):
        charge(ledger, Epsilon(epsilon=F(3, 5)), dataset="z", key="too-much")  # 9/50 > 1/8

    ledger.register("ed", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
    charge(ledger, Epsilon(epsilon=F(1, 3)), dataset="ed")
    charge(ledger, EpsilonDelta(epsilon=F(1, 3), delta=F(1, 10**7)), dataset="ed")
    assert ledger.spent("ed") == EpsilonDelta(epsilon=F(2, 3), delta=F(1, 10**7))


def test_a_loss_the_cap_cannot_express_is_refused_and_costs_nothing(ledger: Ledger) -> None:
    ledger.register("d", Epsilon(epsilon=1))
    with pytest.raises(InvalidParameter):
        charge(ledger, Rho(rho=F(1, 100)))
    with pytest.raises(InvalidParameter):
        charge(ledger, EpsilonDelta(epsilon=F(1, 100), delta=F(1, 10**9)))
    assert ledger.history("d") == []


def test_exact_totals_match_a_direct_fraction_sum(ledger: Ledger) -> None:
    # The total is computed by grouping and integer bucketing; compare with plain Fractions
    # on values with many distinct denominators, repeats, and floats.
    rng = random.Random(1234)  # input generation only; nothing here is a release
    values: list[Fraction] = []
    for _ in range(80):
        pick = rng.randrange(3)
        if pick == 0:
            values.append(F(1, rng.randrange(1, 40)))
        elif pick == 1:
            values.append(F(rng.random()))
        else:
            values.append(F(1, 10))
    ledger.register("d", EpsilonDelta(epsilon=10**6, delta=F(1, 2)))
    for i, v in enumerate(values):
        charge(ledger, EpsilonDelta(epsilon=v, delta=v / 10**6), key=f"k{i}", analyst=f"a{i % 3}")
    total = sum(values, F(0))
    assert ledger.spent("d") == EpsilonDelta(epsilon=total, delta=total / 10**6)
    third = sum(values[1::3], F(0))
    assert ledger.spent("d", analyst="a1") == EpsilonDelta(epsilon=third, delta=third / 10**6)


def test_opening_a_new_file_waits_for_a_concurrent_opener(path: Path) -> None:
    # Another connection holds the write lock of a brand-new file still in rollback mode (as
    # a racing opener does). Switching to WAL then fails as busy at once, without SQLite's
    # busy handler (waiting could deadlock), so Ledger must retry until the lock is free.
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("CREATE TABLE placeholder (x)")
    blocker.execute("DROP TABLE placeholder")
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, lambda: blocker.execute("ROLLBACK"))
    release.start()
    try:
        with Ledger(path, timeout=10) as led:
            led.register("d", Epsilon(epsilon=1))
            assert led.cap("d") == Epsilon(epsilon=1)
    finally:
        release.join()
        blocker.close()

"""The ledger's accountant choice: persisted with the dataset, chained, spent through its filter.

A dataset registered with an ``(ε, δ)`` cap and ``accountant="zcdp"`` admits ρ charges (and ε
and ``(ε, δ)`` charges) through :class:`deniable.accounting.renyi.ZCDPFilter`; the choice is
stored in the ``accountants`` table and in the hash chain, survives reopening, cannot change
after the first charge, and is checked by :meth:`Ledger.verify` like every other table.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from deniable import ROW
from deniable.accounting import EpsilonDelta, Rho, ZCDPAccountant, ZCDPFilter
from deniable.accounting.loss import Epsilon, PrivacyLoss
from deniable.accounting.renyi import zcdp_rho_cap
from deniable.errors import BudgetExceeded, InvalidParameter, LedgerTampered
from deniable.ledger import CapConflict, Ledger

CAP = EpsilonDelta(epsilon=1, delta=Fraction(1, 10**6))
PER = Rho(rho=Fraction(1, 2000))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger(path: Path) -> Iterator[Ledger]:
    with Ledger(path) as led:
        yield led


def _charge(led: Ledger, loss: PrivacyLoss, key: str, *, analyst: str = "ann") -> None:
    led.charge("d", loss, analyst=analyst, query_key=key, query_text=f"SELECT {key}")


def _fill(led: Ledger, loss: PrivacyLoss, *, analyst: str = "ann") -> int:
    n = 0
    while True:
        try:
            _charge(led, loss, f"k{n}-{analyst}", analyst=analyst)
        except BudgetExceeded:
            return n
        n += 1


def test_zcdp_admits_rho_charges_against_an_epsilon_delta_cap(ledger: Ledger) -> None:
    ledger.register("d", CAP, accountant="zcdp")
    assert ledger.accountant("d") == ZCDPAccountant()
    n = _fill(ledger, PER)
    rho_max = zcdp_rho_cap(1, Fraction(1, 2 * 10**6))  # default: half of δ for conversion
    assert n == int(rho_max / PER.rho) == 45
    snapshot = ledger.budget_filter("d")
    assert isinstance(snapshot, ZCDPFilter)
    assert snapshot.used.rho == n * PER.rho
    spent = ledger.spent("d")
    assert isinstance(spent, EpsilonDelta) and spent <= CAP
    assert ledger.verify().ok


def test_basic_is_the_default_and_refuses_rho(ledger: Ledger) -> None:
    ledger.register("d", CAP)
    assert ledger.accountant("d") == "basic"
    with pytest.raises(InvalidParameter):
        _charge(ledger, PER, "k")


def test_refused_charge_writes_nothing(ledger: Ledger, path: Path) -> None:
    ledger.register("d", CAP, accountant="zcdp")
    _charge(ledger, Rho(rho=Fraction(1, 100)), "a")
    seq = ledger.verify().seq
    with pytest.raises(BudgetExceeded) as info:
        _charge(ledger, Rho(rho=Fraction(1, 50)), "b")
    assert info.value.requested == Rho(rho=Fraction(1, 50))
    assert isinstance(info.value.remaining, Rho)
    assert ledger.verify().seq == seq
    assert len(ledger.history("d")) == 1
    assert not ledger.can_charge("d", Rho(rho=Fraction(1, 50)))
    assert ledger.can_charge("d", Rho(rho=Fraction(1, 1000)))


def test_choice_persists_across_reopening_and_sessions_keep_it(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", CAP, accountant="zcdp:delta_share=1/10")
        _charge(led, PER, "a")
    with Ledger(path) as led:
        assert led.verify().ok
        assert led.accountant("d") == ZCDPAccountant(delta_share=Fraction(1, 10))
        led.register("d", CAP)  # no accountant given: keeps the recorded one
        with pytest.raises(CapConflict):
            led.register("d", CAP, accountant="basic")
        with pytest.raises(InvalidParameter):  # charges exist: the accountant is fixed
            led.register("d", CAP, accountant="basic", allow_change=True)
        assert led.budget_filter("d").cap == CAP
        assert isinstance(led.remaining("d"), EpsilonDelta)


def test_accountant_may_change_before_the_first_charge(ledger: Ledger) -> None:
    ledger.register("d", CAP)
    ledger.register("d", CAP, accountant="zcdp", allow_change=True)
    assert ledger.accountant("d") == ZCDPAccountant()
    _charge(ledger, PER, "a")
    assert ledger.verify().ok


def test_accountant_needs_an_epsilon_delta_cap(ledger: Ledger) -> None:
    for cap in (Epsilon(epsilon=1), Rho(rho=1), EpsilonDelta(epsilon=1, delta=0)):
        with pytest.raises(InvalidParameter):
            ledger.register("x", cap, accountant="zcdp")
    with pytest.raises(InvalidParameter):
        ledger.register("x", CAP, accountant="renyi")


def test_lowering_the_cap_below_what_zcdp_spent_is_refused(ledger: Ledger) -> None:
    ledger.register("d", CAP, accountant="zcdp")
    for i in range(40):
        _charge(ledger, PER, f"k{i}")
    with pytest.raises(InvalidParameter):
        ledger.register(
            "d", EpsilonDelta(epsilon=Fraction(1, 2), delta=CAP.delta), allow_change=True
        )
    # raising a charged zCDP cap is refused too (issue 20: the filter needs it fixed)
    with pytest.raises(InvalidParameter, match="cannot be raised"):
        ledger.register("d", EpsilonDelta(epsilon=2, delta=CAP.delta), allow_change=True)
    assert ledger.cap("d") == CAP


def test_allowances_are_zcdp_slices(ledger: Ledger) -> None:
    ledger.register("d", CAP, accountant="zcdp")
    ledger.set_allowance("d", "bob", EpsilonDelta(epsilon=Fraction(1, 2), delta=CAP.delta))
    with pytest.raises(InvalidParameter):
        ledger.set_allowance("d", "eve", EpsilonDelta(epsilon=Fraction(1, 2), delta=0))
    bob = _fill(ledger, PER, analyst="bob")
    assert bob == int(zcdp_rho_cap(Fraction(1, 2), Fraction(1, 2 * 10**6)) / PER.rho)
    ann = _fill(ledger, PER, analyst="ann")
    assert bob + ann == 45  # the global cap still bounds everyone together
    assert ledger.verify().ok


def test_concurrent_charges_cannot_overspend(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", CAP, accountant="zcdp")
    counts: list[int] = []

    def work(i: int) -> None:
        with Ledger(path) as mine:
            counts.append(_fill(mine, PER, analyst=f"a{i}"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 45
    with Ledger(path) as led:
        assert led.verify().ok
        assert len(led.history("d")) == 45


def test_hand_edited_accountant_is_detected(path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", CAP, accountant="zcdp")
    raw = sqlite3.connect(path)
    raw.execute("DROP TRIGGER accountants_append_only_update")
    raw.execute("UPDATE accountants SET spec = 'zcdp:delta_share=0/1'")
    raw.commit()
    raw.close()
    with Ledger(path) as led:
        report = led.verify()
        assert not report.ok
        assert any("accountants" in p for p in report.problems)
        with pytest.raises(LedgerTampered):
            _charge(led, PER, "a")


def test_ledgers_without_the_new_tables_still_open_and_verify(path: Path) -> None:
    # A schema-2 ledger written before accountants existed: same file minus the new tables.
    with Ledger(path) as led:
        led.register("old", Epsilon(epsilon=1))
        led.charge("old", Epsilon(epsilon=0.5), analyst="a", query_key="k", query_text="q")
    raw = sqlite3.connect(path)
    for name in ("accountants", "sample_releases"):
        raw.execute(f"DROP TABLE {name}")
    raw.commit()
    raw.close()
    with Ledger(path) as led:
        assert led.verify().ok
        assert led.accountant("old") == "basic"
        assert led.remaining("old") == Epsilon(epsilon=0.5)
        led.register("d", CAP, accountant="zcdp")  # creates the tables on first use
        _charge(led, PER, "a")
        assert led.verify().ok
    with Ledger(path) as led:
        assert led.verify().ok


def test_rollback_is_acknowledged_without_giving_rho_back(path: Path, tmp_path: Path) -> None:
    with Ledger(path) as led:
        led.register("d", CAP, accountant="zcdp")
        for i in range(5):
            _charge(led, PER, f"k{i}")
        led.backup(tmp_path / "old.db")
        for i in range(5, 20):
            _charge(led, PER, f"k{i}")
    shutil.copy(tmp_path / "old.db", path)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with Ledger(path) as led:
        assert not led.verify().ok
        led.acknowledge(curator="cur", reason="restored a backup")
        assert led.verify().ok
        snapshot = led.budget_filter("d")
        assert isinstance(snapshot, ZCDPFilter)
        assert snapshot.used.rho == 20 * PER.rho  # the lost 15 charges are charged again
        assert _fill(led, PER) == 45 - 20


# -- end to end: a Session answers Gaussian (ρ) queries under an (ε, δ) cap -----------------


def test_session_answers_gaussian_queries_under_an_epsilon_delta_cap(path: Path) -> None:
    import pandas as pd

    from deniable.curator.session import Session
    from deniable.noise.testing import SeededRandom

    frame = pd.DataFrame({"x": range(1000)})
    per = Fraction(1, 400)  # σ = √200 ≈ 14 for a count
    with pytest.warns(Warning):
        session = Session(budget=CAP, ledger=path, accountant="zcdp", source=SeededRandom(7))
    with session:
        session.add_table("t", frame, bounds={"x": [0, 1000]}, privacy_unit=ROW)
        answered = 0
        with pytest.raises(BudgetExceeded):
            while True:
                answer = session.sql(f"SELECT COUNT(*) AS n FROM t WHERE x >= {answered}", rho=per)
                answered += 1
                n = float(answer.to_pandas()["n"][0])
                assert abs(n - (1000 - answered + 1)) < 14 * 8  # 8σ: P[miss] < 1e-15
        rho_max = zcdp_rho_cap(1, Fraction(1, 2 * 10**6))
        assert answered == int(rho_max / per) == 9
        history = session.budget.history
        assert len(history) == answered
        assert all(c.loss == Rho(rho=per) for c in history)
        status = session.budget
        assert isinstance(status.spent, EpsilonDelta) and status.spent <= CAP
        assert status.remaining_rho == Rho(rho=rho_max - answered * per)
        assert "zCDP: ρ = " in repr(status)
        # A pure-ε query still fits while ε²/2 ≤ the ρ left.
        left = session._ledger.budget_filter("default")
        assert isinstance(left, ZCDPFilter)
        eps = Fraction(1, 100)
        assert eps**2 / 2 <= left.remaining_rho.rho
        session.sql("SELECT COUNT(*) AS n FROM t", epsilon=eps)
        assert session.budget.history[-1].loss == EpsilonDelta(epsilon=eps, delta=0)
    with Ledger(path) as led:
        assert led.verify().ok
        assert led.accountant("default") == ZCDPAccountant()


def test_session_with_basic_accountant_refuses_rho_queries(path: Path) -> None:
    import pandas as pd

    from deniable.curator.session import Session

    with Session(budget=CAP, ledger=path) as session:
        session.add_table("t", pd.DataFrame({"x": range(10)}), privacy_unit=ROW)
        with pytest.raises(InvalidParameter):
            session.sql("SELECT COUNT(*) AS n FROM t", rho=0.001)
        assert session.budget.history == []


def test_rollback_past_the_zcdp_registration_keeps_everything_spent(
    path: Path, tmp_path: Path
) -> None:
    # The backup predates the dataset's zCDP registration ("d") and its accountant choice on an
    # already registered dataset ("e"); acknowledging restores both and charges what was lost.
    with Ledger(path) as led:
        led.register("e", CAP)
        led.backup(tmp_path / "old.db")
        led.register("e", CAP, accountant="zcdp:delta_share=1/4", allow_change=True)
        led.register("d", CAP, accountant="zcdp")
        for i in range(10):
            _charge(led, PER, f"k{i}")
            led.charge("e", PER, analyst="ann", query_key=f"k{i}", query_text="q")
        led.charge(
            "e", EpsilonDelta(epsilon=0, delta=1e-7), analyst="ann", query_key="s", query_text="q"
        )
    shutil.copy(tmp_path / "old.db", path)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with Ledger(path) as led:
        assert not led.verify().ok
        led.acknowledge(curator="cur", reason="restored a backup")
        assert led.verify().ok
        assert led.accountant("e") == ZCDPAccountant(delta_share=Fraction(1, 4))
        e = led.budget_filter("e")
        assert isinstance(e, ZCDPFilter)
        assert e.used.rho == 10 * PER.rho and e.used.delta == Fraction(1, 10**7)
        led.register("d", CAP, accountant="zcdp")  # the lost registration, made again
        assert _fill(led, PER) == 45 - 10
    with Ledger(path) as led:
        assert led.verify().ok


# -- the service configuration ---------------------------------------------------------------


def _config(tmp_path: Path, dataset_lines: str, extra: str = "") -> Path:
    (tmp_path / "t.csv").write_text("x\n1\n")
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'ledger = "l.db"\n[datasets.t]\nsource = "t.csv"\nprivacy_unit = "row"\n{dataset_lines}\n{extra}',
        encoding="utf-8",
    )
    return conf


def test_config_accepts_the_accountant_option(tmp_path: Path) -> None:
    from deniable.server.config import load_config

    conf = _config(tmp_path, 'budget = { epsilon = 1, delta = 1e-6 }\naccountant = "zcdp"')
    assert load_config(conf).datasets["t"].accountant == "zcdp"
    conf = _config(tmp_path, "budget = { epsilon = 1 }")
    assert load_config(conf).datasets["t"].accountant is None
    conf = _config(
        tmp_path, 'budget = { epsilon = 1, delta = 1e-6 }\naccountant = "zcdp:delta_share=0.25"'
    )
    assert load_config(conf).datasets["t"].accountant == "zcdp:delta_share=1/4"


@pytest.mark.parametrize(
    ("lines", "extra"),
    [
        ('budget = { epsilon = 1 }\naccountant = "zcdp"', ""),  # pure ε cap
        ('budget = { epsilon = 1, delta = 1e-6 }\naccountant = "renyi"', ""),
        ("budget = { epsilon = 1, delta = 1e-6 }\naccountant = 3", ""),
        (
            'budget = { epsilon = 1, delta = 1e-6 }\naccountant = "zcdp"',
            "[analysts.ann]\nallowance = { t = { epsilon = 0.5, delta = 0 } }\n",
        ),
    ],
)
def test_config_refuses_accountants_that_cannot_spend_the_budget(
    tmp_path: Path, lines: str, extra: str
) -> None:
    from deniable.server.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"accountant|zCDP"):
        load_config(_config(tmp_path, lines, extra))

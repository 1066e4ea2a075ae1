"""Issue 23: analysts see their own release numbers and their own slice; reserved slices.

Ledger level (SQLite): release numbers 1, 2, 3, … per analyst and dataset whatever others
do; an analyst's ``remaining`` and refusals state only what *they* may spend; a reserved
slice is subtracted from what every other analyst may spend, exactly (rationals), under the
basic (ε and (ε, δ)) and the zCDP accountant; a reservation larger than what is unspent
and unreserved is refused; reservations survive reopening and verification. The same rules
through the HTTP API, the client and the CLI are in ``tests/system/test_slices_server.py``;
concurrency on SQLite and PostgreSQL in ``tests/conformance/test_ledger_slices.py``.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta, PrivacyLoss, Rho
from deniable.accounting.renyi import ZCDPFilter, zcdp_rho_cap
from deniable.errors import BudgetExceeded, InvalidParameter
from deniable.ledger import Ledger

F = Fraction
TINY = F(1, 10**40)


@pytest.fixture
def led(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "ledger.db")
    yield ledger  # type: ignore[misc]
    ledger.close()


def spend(led: Ledger, loss: PrivacyLoss | Fraction, analyst: str, ds: str = "d", **kw: object):
    if isinstance(loss, Fraction):
        loss = Epsilon(epsilon=loss)
    return led.charge(
        ds,
        loss,
        analyst=analyst,
        query_key=f"{analyst}-{ds}-{len(led.history(ds))}",
        query_text="SELECT 1",
        **kw,  # type: ignore[arg-type]
    )


# -- release numbers --------------------------------------------------------------------------


def test_each_analyst_numbers_their_releases_whatever_others_do(led: Ledger) -> None:
    led.register("d", Epsilon(epsilon=10))
    led.register("e", Epsilon(epsilon=10))
    order = ["ann", "ann", "bob", "bob", "ann", "carl", "ann"]
    ids = {}
    for i, who in enumerate(order):
        c = spend(led, F(1, 100), who, idempotency_key=f"key{i}")
        ids.setdefault(who, []).append(c.id)
        spend(led, F(1, 100), who, ds="e")  # another dataset, interleaved: its own numbers
    ann = led.history("d", analyst="ann")
    assert [c.number for c in ann] == [1, 2, 3, 4]
    assert [c.id for c in ann] == ids["ann"] == [1, 3, 9, 13]  # the global ids reveal others
    assert [c.number for c in led.history("d", analyst="bob")] == [1, 2]
    assert [c.number for c in led.history("e", analyst="ann")] == [1, 2, 3, 4]
    # the curator's whole history: global ids, and each analyst's own number beside them
    whole = led.history("d")
    assert [(c.analyst, c.number) for c in whole] == [
        ("ann", 1),
        ("ann", 2),
        ("bob", 1),
        ("bob", 2),
        ("ann", 3),
        ("carl", 1),
        ("ann", 4),
    ]
    # one charge looked up by its key gets its number too (not 1 for being alone)
    (keyed,) = led.history("d", analyst="ann", idempotency_key="key4")
    assert keyed.number == 3
    # both directions between the analyst's number and the ledger's id
    assert [led.release_number("d", "ann", i) for i in ids["ann"]] == [1, 2, 3, 4]
    assert led.release_number("d", "ann", ids["bob"][0]) is None  # not hers: no number
    assert led.release_number("e", "ann", ids["ann"][0]) is None  # not on that dataset
    assert [led.charge_of_release("d", "ann", n) for n in (1, 2, 3, 4, 5, 0)] == [
        *ids["ann"],
        None,
        None,
    ]


# -- an analyst's own slice ---------------------------------------------------------------------


def test_an_analysts_remaining_and_refusal_state_only_their_own_slice(led: Ledger) -> None:
    led.register("d", Epsilon(epsilon=1))
    led.set_allowance("d", "ann", Epsilon(epsilon=F(1, 2)))
    spend(led, F(1, 10), "ann")
    spend(led, F(3, 10), "bob")  # bob has no allowance
    # her allowance binds: others' spending does not show
    assert led.remaining("d", analyst="ann") == Epsilon(epsilon=F(2, 5))
    with pytest.raises(BudgetExceeded) as info:
        spend(led, F(1, 2), "ann")
    assert info.value.remaining == Epsilon(epsilon=F(2, 5))
    assert "their allowance" in str(info.value) and "0.4" in str(info.value)
    spend(led, F(11, 20), "bob")  # now the shared budget binds: 1 − 0.95 = 0.05 is left
    assert led.remaining("d", analyst="ann") == Epsilon(epsilon=F(1, 20))
    with pytest.raises(BudgetExceeded) as info:
        spend(led, F(1, 10), "ann")
    message = str(info.value)
    assert info.value.remaining == Epsilon(epsilon=F(1, 20))
    assert "ε = 0.05" in message and "shared budget" in message
    # never the dataset's spent total, her allowance's own remainder, or the cap
    for leak in ("0.95", "0.85", "0.4", "cap"):
        assert leak not in message, leak
    # the dataset's own view (no analyst) is the cap less everything spent
    assert led.remaining("d") == Epsilon(epsilon=F(1, 20))
    with pytest.raises(BudgetExceeded) as info:
        led.check_charge("d", Epsilon(epsilon=F(1, 10)), analyst="ann")
    assert str(info.value) == message  # the dry run raises exactly what the charge raises


# -- reserved slices -------------------------------------------------------------------------


def test_a_reservation_holds_against_an_analyst_without_allowance(led: Ledger) -> None:
    """The issue's case: 0.34 for bob can no longer be cut to 0.038 by ann's spending."""
    led.register("d", Epsilon(epsilon=1))
    led.set_allowance("d", "bob", Epsilon(epsilon=F(34, 100)), reserve=True)
    assert led.reservation("d", "bob") == Epsilon(epsilon=F(34, 100))
    assert led.reservations("d") == {"bob": Epsilon(epsilon=F(34, 100))}
    spend(led, F(1, 2), "ann")
    assert led.remaining("d", analyst="bob") == Epsilon(epsilon=F(34, 100))
    assert led.remaining("d", analyst="ann") == Epsilon(epsilon=F(16, 100))
    with pytest.raises(BudgetExceeded) as info:  # one part in 10^40 too many
        spend(led, F(16, 100) + TINY, "ann")
    assert info.value.remaining == Epsilon(epsilon=F(16, 100))
    assert "bob" not in str(info.value) and "0.34" not in str(info.value)
    spend(led, F(16, 100), "ann")  # exactly what is unreserved
    assert led.remaining("d") == Epsilon(epsilon=F(34, 100))
    spend(led, F(1, 10), "bob")  # bob spends his reserve, all of it, exactly
    assert led.remaining("d", analyst="ann") == Epsilon(epsilon=0)
    assert led.remaining("d", analyst="bob") == Epsilon(epsilon=F(24, 100))
    spend(led, F(24, 100), "bob")
    assert led.spent("d") == Epsilon(epsilon=1)
    with pytest.raises(BudgetExceeded):
        spend(led, TINY, "bob")


def test_without_reserve_the_same_allowance_is_only_a_cap(led: Ledger) -> None:
    """Negative control: the same steps without --reserve let ann eat bob's slice."""
    led.register("d", Epsilon(epsilon=1))
    led.set_allowance("d", "bob", Epsilon(epsilon=F(34, 100)))
    spend(led, F(962, 1000), "ann")
    assert led.remaining("d", analyst="bob") == Epsilon(epsilon=F(38, 1000))
    assert led.reservation("d", "bob") is None


def test_a_reservation_larger_than_what_is_free_is_refused(led: Ledger) -> None:
    led.register("d", Epsilon(epsilon=1))
    spend(led, F(7, 10), "ann")
    with pytest.raises(InvalidParameter) as info:
        led.set_allowance("d", "bob", Epsilon(epsilon=F(3, 10) + TINY), reserve=True)
    message = str(info.value)
    assert "exceeds what is unspent and unreserved" in message and "ε = 0.3" in message
    assert led.reservation("d", "bob") is None and led.allowance("d", "bob") is None
    led.set_allowance("d", "bob", Epsilon(epsilon=F(3, 10)), reserve=True)  # exactly fits
    with pytest.raises(InvalidParameter, match="unspent and unreserved"):
        led.set_allowance("d", "carl", Epsilon(epsilon=TINY), reserve=True)
    # an analyst's own spending counts against their reservation, not twice
    spend(led, F(1, 10), "bob")
    led.set_allowance("d", "bob", Epsilon(epsilon=F(3, 10)), reserve=True)  # unchanged: fine
    # releasing it (an allowance without reserve) frees the rest for everyone
    led.set_allowance("d", "bob", Epsilon(epsilon=F(3, 10)))
    assert led.reservation("d", "bob") is None
    spend(led, F(2, 10), "ann")
    events = [(e.action, e.analyst, e.loss) for e in led.curator_events("d")][1:]
    assert events == [
        ("reserve", "bob", Epsilon(epsilon=F(3, 10))),
        ("set_allowance", "bob", Epsilon(epsilon=F(3, 10))),
        ("reserve", "bob", Epsilon(epsilon=0)),
    ]


def test_a_cap_cannot_be_lowered_beneath_the_reservations(led: Ledger) -> None:
    led.register("d", Epsilon(epsilon=1))
    led.set_allowance("d", "bob", Epsilon(epsilon=F(1, 2)), reserve=True)
    spend(led, F(1, 4), "ann")
    with pytest.raises(InvalidParameter, match="reservations"):
        led.register("d", Epsilon(epsilon=F(3, 4) - TINY), allow_change=True)
    led.register("d", Epsilon(epsilon=F(3, 4)), allow_change=True)
    assert led.remaining("d", analyst="ann") == Epsilon(epsilon=0)


def test_reservations_of_epsilon_delta_hold_per_component(led: Ledger) -> None:
    led.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
    led.set_allowance("d", "bob", EpsilonDelta(epsilon=F(1, 10), delta=F(7, 10**7)), reserve=True)
    # ε is plentiful, but bob holds 0.7·10⁻⁶ of δ: ann may spend 0.3·10⁻⁶ of it, exactly
    with pytest.raises(BudgetExceeded):
        spend(led, EpsilonDelta(epsilon=F(1, 10), delta=F(3, 10**7) + TINY), "ann")
    spend(led, EpsilonDelta(epsilon=F(1, 10), delta=F(3, 10**7)), "ann")
    assert led.remaining("d", analyst="ann") == EpsilonDelta(epsilon=F(8, 10), delta=0)
    spend(led, EpsilonDelta(epsilon=F(1, 10), delta=F(7, 10**7)), "bob")


def test_reservations_hold_under_the_zcdp_accountant_in_rho(led: Ledger) -> None:
    cap = EpsilonDelta(epsilon=1, delta=F(1, 10**6))
    led.register("d", cap, accountant="zcdp")
    slice_ = EpsilonDelta(epsilon=F(1, 2), delta=F(1, 10**6))
    led.set_allowance("d", "bob", slice_, reserve=True)
    whole, bobs = ZCDPFilter(cap), ZCDPFilter(slice_)
    assert bobs.rho_max == zcdp_rho_cap(F(1, 2), F(1, 2 * 10**6))
    free = whole.rho_max - bobs.rho_max  # what ann may spend in ρ, exactly
    with pytest.raises(BudgetExceeded):
        spend(led, Rho(rho=free + TINY), "ann")
    spend(led, Rho(rho=free), "ann")
    assert led.budget_filter("d").used.rho == free  # type: ignore[union-attr]
    spend(led, Rho(rho=bobs.rho_max), "bob")  # bob still gets the whole of his slice
    with pytest.raises(BudgetExceeded):
        spend(led, Rho(rho=TINY), "bob")
    # a second reservation must fit the δ pool as well as ρ
    led2_cap = EpsilonDelta(epsilon=1, delta=F(1, 10**6))
    led.register("z", led2_cap, accountant="zcdp")
    spend(led, EpsilonDelta(epsilon=0, delta=F(4, 10**7)), "ann", ds="z")  # δ pool: 5·10⁻⁷
    with pytest.raises(InvalidParameter, match="zCDP"):
        led.set_allowance(
            "z", "bob", EpsilonDelta(epsilon=F(1, 10), delta=F(4, 10**7)), reserve=True
        )  # its δ pool (2·10⁻⁷) exceeds the 10⁻⁷ left


def test_reservations_survive_reopening_and_verification(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
        led.set_allowance("d", "bob", Epsilon(epsilon=F(1, 3)), reserve=True)
        spend(led, F(1, 3), "ann")
    with Ledger(path) as led:
        assert not led.tampered and led.verify(full=True).ok
        assert led.reservation("d", "bob") == Epsilon(epsilon=F(1, 3))
        with pytest.raises(BudgetExceeded):
            spend(led, F(1, 3) + TINY, "ann")


def test_names_reserved_for_reservations_are_refused(led: Ledger) -> None:
    led.register("d", Epsilon(epsilon=1))
    with pytest.raises(InvalidParameter, match="reserved"):
        led.add_analyst("(reserved) bob", role="analyst")
    with pytest.raises(InvalidParameter, match="reserved"):
        led.set_allowance("d", "(reserved) bob", Epsilon(epsilon=1))
    with pytest.raises(InvalidParameter, match="reserved"):
        spend(led, F(1, 10), "(reserved) bob")
    assert led.history("d") == []


# -- the service's configuration -----------------------------------------------------------


def _config(folder: Path, analysts: str) -> Path:
    (folder / "data.csv").write_text("x\n1\n2\n")
    path = folder / "service.toml"
    path.write_text(
        'ledger = "ledger.db"\n[datasets.d]\nsource = "data.csv"\ntable = "t"\n'
        'privacy_unit = "row"\nbudget = { epsilon = 1 }\nresponse_time = "off"\n' + analysts
    )
    return path


def test_the_configuration_reserves_allowances_at_start(tmp_path: Path) -> None:
    from deniable.server.config import ConfigError, load_config
    from deniable.server.service import Service

    path = _config(
        tmp_path,
        '[analysts.ann]\nallowance = { d = { epsilon = 0.25 } }\nreserve = ["d"]\n'
        "[analysts.bob]\nallowance = { d = { epsilon = 0.5 } }\n",
    )
    config = load_config(path)
    assert config.reserved == {"ann": frozenset({"d"})}
    with Service(config) as service:
        assert service.ledger.reservation("d", "ann") == Epsilon(epsilon=F(1, 4))
        assert service.ledger.reservation("d", "bob") is None
        assert service.budget("d", analyst="ann").reserved == Epsilon(epsilon=F(1, 4))
    with pytest.raises(ConfigError, match="no allowance"):
        load_config(_config(tmp_path, '[analysts.ann]\nreserve = ["d"]\n'))
    with pytest.raises(ConfigError, match="list of dataset names"):
        load_config(_config(tmp_path, '[analysts.ann]\nreserve = "d"\n'))
    # more than what is unspent and unreserved: the service does not start
    with Ledger(tmp_path / "ledger.db") as led:
        spend(led, F(7, 10), "carl")  # 0.05 stays unspent and unreserved (ann holds 0.25)
    too_much = _config(
        tmp_path,
        '[analysts.bob]\nallowance = { d = { epsilon = 0.5 } }\nreserve = ["d"]\n',
    )
    with pytest.raises(ConfigError, match=r"analysts\.bob: .*unspent and unreserved"):
        Service(load_config(too_much))

"""Reserved slices and release numbers on every ledger backend: SQLite and PostgreSQL.

A reservation is subtracted from what every other analyst may spend under the same lock that
serialises admission, so analysts charging from several processes at once can never eat into
it: the reserved analyst gets all of it and the others exactly the rest, to the last
rational. Release numbers are per analyst and dataset on both backends. PostgreSQL runs on
the throwaway server of ``tests/conformance/_postgres.py`` (one fresh database per test).
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from _postgres import PostgresServer, shared_server, stop_shared_server

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.accounting.renyi import ZCDPFilter
from deniable.errors import BudgetExceeded, InvalidParameter
from deniable.ledger import Ledger

psycopg = pytest.importorskip("psycopg")

F = Fraction
TINY = F(1, 10**40)
_databases = itertools.count()


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PostgresServer]:
    yield shared_server()
    stop_shared_server()  # xdist workers may skip atexit: never leave a server behind


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    """A fresh ledger location on each backend, and its anchor file."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.db"), tmp_path / "ledger.db.anchor"
    server: PostgresServer = request.getfixturevalue("pg_server")
    name = f"slices_{next(_databases)}_{tmp_path.name[-12:].lower().replace('-', '_')}"
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return server.dsn(database=name), tmp_path / "pg.anchor"


def test_release_numbers_and_reservations_on_every_backend(location: tuple[str, Path]) -> None:
    where, anchor = location
    with Ledger(where, anchor=anchor) as led:
        led.register("d", EpsilonDelta(epsilon=1, delta=F(1, 10**6)))
        led.set_allowance(
            "d", "bob", EpsilonDelta(epsilon=F(1, 3), delta=F(1, 10**7)), reserve=True
        )
        for i, who in enumerate(["ann", "bob", "ann", "ann", "bob", "ann"]):
            led.charge(
                "d",
                EpsilonDelta(epsilon=F(1, 30), delta=0),
                analyst=who,
                query_key=f"k{i}",
                query_text="",
            )
        assert [c.number for c in led.history("d", analyst="ann")] == [1, 2, 3, 4]
        assert [c.id for c in led.history("d", analyst="ann")] == [1, 3, 4, 6]
        left = EpsilonDelta(epsilon=1 - F(1, 3) - F(4, 30), delta=F(9, 10**7))
        assert led.remaining("d", analyst="ann") == left
        with pytest.raises(BudgetExceeded):
            led.charge(
                "d",
                EpsilonDelta(epsilon=left.epsilon + TINY, delta=0),
                analyst="ann",
                query_key="over",
                query_text="",
            )
        led.set_allowance("d", "carl", left)  # a cap only: nothing to hold back
        with pytest.raises(InvalidParameter, match="unspent and unreserved"):
            led.set_allowance(
                "d", "carl", EpsilonDelta(epsilon=left.epsilon + TINY, delta=0), reserve=True
            )
    with Ledger(where, anchor=anchor) as led:  # reopened: verified, reservation kept
        assert not led.tampered
        assert led.reservations("d") == {"bob": EpsilonDelta(epsilon=F(1, 3), delta=F(1, 10**7))}


def test_zcdp_reservation_on_every_backend(location: tuple[str, Path]) -> None:
    where, anchor = location
    cap = EpsilonDelta(epsilon=1, delta=F(1, 10**6))
    slice_ = EpsilonDelta(epsilon=F(1, 4), delta=F(1, 10**6))
    with Ledger(where, anchor=anchor) as led:
        led.register("d", cap, accountant="zcdp")
        led.set_allowance("d", "bob", slice_, reserve=True)
        free = ZCDPFilter(cap).rho_max - ZCDPFilter(slice_).rho_max
        with pytest.raises(BudgetExceeded):
            led.charge("d", Rho(rho=free + TINY), analyst="ann", query_key="a", query_text="")
        led.charge("d", Rho(rho=free), analyst="ann", query_key="b", query_text="")
        bobs = ZCDPFilter(slice_).rho_max
        led.charge("d", Rho(rho=bobs), analyst="bob", query_key="c", query_text="")


# -- concurrency -------------------------------------------------------------------------------

WORKER = textwrap.dedent(
    """
    import sys
    from fractions import Fraction
    from deniable.accounting.loss import Epsilon
    from deniable.errors import BudgetExceeded
    from deniable.ledger import Ledger
    location, anchor, who, tries = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    admitted = 0
    with Ledger(location, anchor=anchor) as led:
        for i in range(tries):
            try:
                led.charge("d", Epsilon(epsilon=Fraction(1, 7)), analyst=who,
                           query_key=f"{who}-{i}", query_text="")
                admitted += 1
            except BudgetExceeded:
                pass
    print(admitted)
    """
)


def test_a_reservation_holds_against_processes_spending_at_once(
    location: tuple[str, Path],
) -> None:
    """Bob reserved 5/7 of a cap of 2; three processes of others race him for the rest.

    Others may spend 2 − 5/7 = 9/7 together, bob his 5/7: exactly 9 and 5 charges of 1/7,
    however the processes interleave (the reservation is checked under the same lock as
    admission). Without the reservation others take it all (the negative control,
    ``tests/unit/test_analyst_slices.py::test_without_reserve_the_same_allowance_is_only_a_cap``).
    """
    where, anchor = location
    with Ledger(where, anchor=anchor) as led:
        led.register("d", Epsilon(epsilon=2))
        led.set_allowance("d", "bob", Epsilon(epsilon=F(5, 7)), reserve=True)
    workers = [("bob", 8)] + [(f"p{k}", 6) for k in range(3)]  # bob starts with the others
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, where, str(anchor), who, str(tries)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for who, tries in workers
    ]
    admitted = {}
    for (who, _), p in zip(workers, procs, strict=True):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        admitted[who] = int(out)
    assert admitted["bob"] == 5  # all of his reservation, exactly
    assert sum(n for who, n in admitted.items() if who != "bob") == 9  # exactly the rest
    with Ledger(where, anchor=anchor) as led:
        assert not led.tampered
        assert led.spent("d") == Epsilon(epsilon=2)
        assert led.spent("d", analyst="bob") == Epsilon(epsilon=F(5, 7))
        for who in ("bob", "p0"):
            assert led.remaining("d", analyst=who) == Epsilon(epsilon=0)
        assert [c.number for c in led.history("d", analyst="bob")] == [1, 2, 3, 4, 5]

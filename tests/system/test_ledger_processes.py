"""The ledger across real processes: kill -9, restarts and concurrent charging.

Every child is a fresh ``python -c`` process using its own connection to the same file; no
part of SQLite is mocked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import TypedDict

import pytest

from deniable.accounting.loss import Epsilon, EpsilonDelta
from deniable.errors import BudgetExceeded
from deniable.ledger import Ledger

F = Fraction
TIMEOUT = 60  # seconds; a hung child fails the test instead of hanging the suite

# Loss values travel to children as "type:num/den[,num/den]" strings.
PRELUDE = textwrap.dedent(
    """
    import json, sys, time
    from fractions import Fraction
    from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
    from deniable.errors import BudgetExceeded
    from deniable.ledger import Ledger

    def loss(text):
        kind, _, values = text.partition(":")
        v = [Fraction(x) for x in values.split(",")]
        if kind == "eps":
            return Epsilon(epsilon=v[0])
        if kind == "epsdelta":
            return EpsilonDelta(epsilon=v[0], delta=v[1])
        return Rho(rho=v[0])

    def say(line):
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()
    """
)


def spawn(body: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    if not line:
        child.kill()
        _, err = child.communicate(timeout=TIMEOUT)
        pytest.fail(f"child ended without a line; stderr:\n{err}")
    return line


def kill9(child: subprocess.Popen[str]) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=TIMEOUT)
    assert child.returncode == -signal.SIGKILL
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            stream.close()


# -- durability ----------------------------------------------------------------------------

CHARGE_THEN_SLEEP = """
    ledger = Ledger(sys.argv[1])
    c = ledger.charge("d", loss(sys.argv[2]), analyst="ann", query_key=sys.argv[3],
                      query_text="SELECT COUNT(*) FROM d")
    say(f"charged {c.id}")
    time.sleep(600)
"""


def test_a_returned_charge_survives_kill_9_and_restart(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))

    child = spawn(CHARGE_THEN_SLEEP, str(path), "eps:1/3", "q1")
    line = read_line(child)
    kill9(child)
    assert line.startswith("charged ")
    charge_id = int(line.split()[1])

    with Ledger(path) as led:
        [c] = led.history("d")
        assert c.id == charge_id
        assert c.loss == Epsilon(epsilon=F(1, 3))
        assert c.status == "charged"
        # Restart does not reset the budget: only 2/3 is left, so 3/4 is refused.
        assert led.remaining("d") == Epsilon(epsilon=F(2, 3))
        with pytest.raises(BudgetExceeded):
            led.charge("d", Epsilon(epsilon=F(3, 4)), analyst="ann", query_key="q2", query_text="")

    # A second child killed the same way adds to, not replaces, the first.
    child = spawn(CHARGE_THEN_SLEEP, str(path), "eps:2/3", "q3")
    read_line(child)
    kill9(child)
    with Ledger(path) as led:
        assert [c.query_key for c in led.history("d")] == ["q1", "q3"]
        assert led.remaining("d") == Epsilon(epsilon=0)


def test_killed_between_charge_and_store_keeps_the_charge_and_a_repeat_pays(
    tmp_path: Path,
) -> None:
    # The crash window of the answer cache: the charge is never lost; as no answer was
    # stored, the identical query is charged again (never answered for free).
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    child = spawn(CHARGE_THEN_SLEEP, str(path), "eps:1/4", "same-query")
    read_line(child)
    kill9(child)
    with Ledger(path) as led:
        assert led.cached_answer("d", "same-query") is None
        c = led.charge(
            "d",
            Epsilon(epsilon=F(1, 4)),
            analyst="ann",
            query_key="same-query",
            query_text="SELECT COUNT(*) FROM d",
        )
        led.store_answer(c.id, b"noisy answer")
        assert led.spent("d") == Epsilon(epsilon=F(1, 2))
        assert [h.status for h in led.history("d")] == ["charged", "answered"]
        assert led.cached_answer("d", "same-query") == b"noisy answer"


def test_killed_inside_an_uncommitted_transaction_leaves_nothing_and_no_lock(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    # The child writes a charge row inside BEGIN IMMEDIATE and dies before COMMIT, holding
    # the write lock.
    child = spawn(
        """
        import sqlite3
        conn = sqlite3.connect(sys.argv[1], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO charges (dataset, analyst, query_key, query_text, loss_type, epsilon, "
            "time, details, status) VALUES ('d', 'ann', 'k', '', 'epsilon', '1/1', "
            "'2000-01-01T00:00:00+00:00', '{}', 'charged')")
        say("inside")
        time.sleep(600)
        """,
        str(path),
    )
    assert read_line(child) == "inside"
    kill9(child)
    with Ledger(path, timeout=5) as led:
        assert led.history("d") == []
        led.charge("d", Epsilon(epsilon=1), analyst="ann", query_key="k", query_text="")
        assert led.remaining("d") == Epsilon(epsilon=0)


# -- concurrency ---------------------------------------------------------------------------

# Each child opens the (possibly not yet existing) ledger, registers the dataset, waits for
# "go", then tries `attempts` charges and reports how many were admitted and refused.
RACER = """
    path, cap, each, attempts, analyst = sys.argv[1:6]
    allowances = json.loads(sys.argv[6])
    say("ready")
    sys.stdin.readline()  # start together
    ledger = Ledger(path)
    ledger.register("d", loss(cap))
    for who, slice_ in allowances.items():
        ledger.set_allowance("d", who, loss(slice_))
    ok, refused = [], 0
    for i in range(int(attempts)):
        try:
            c = ledger.charge("d", loss(each), analyst=analyst, query_key=f"{analyst}-{i}",
                              query_text="SELECT COUNT(*) FROM d")
            ok.append(c.id)
        except BudgetExceeded:
            refused += 1
    say(json.dumps({"ok": ok, "refused": refused}))
"""


class Report(TypedDict):
    analyst: str
    ok: list[int]
    refused: int


def race(
    path: Path,
    *,
    cap: str,
    each: str,
    processes: int = 8,
    attempts: int = 20,
    analysts: list[str] | None = None,
    allowances: dict[str, str] | None = None,
) -> list[Report]:
    names = analysts or [f"analyst{i}" for i in range(processes)]
    children = [
        spawn(
            RACER,
            str(path),
            cap,
            each,
            str(attempts),
            names[i % len(names)],
            json.dumps(allowances or {}),
        )
        for i in range(processes)
    ]
    try:
        for child in children:
            assert read_line(child) == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        reports: list[Report] = []
        for i, child in enumerate(children):
            out, err = child.communicate(timeout=TIMEOUT)
            assert child.returncode == 0, err
            counts = json.loads(out.strip().splitlines()[-1])
            reports.append(
                Report(analyst=names[i % len(names)], ok=counts["ok"], refused=counts["refused"])
            )
        return reports
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


@pytest.mark.parametrize(
    ("cap", "each", "cap_loss", "fits"),
    [
        ("eps:1", "eps:1/10", Epsilon(epsilon=1), 10),
        ("eps:1", "eps:1/3", Epsilon(epsilon=1), 3),
        # ε alone would admit 7; δ admits only 3: component-wise comparison under contention.
        (
            "epsdelta:1,1/100000",
            "epsdelta:1/7,1/300000",
            EpsilonDelta(epsilon=1, delta=F(1, 100000)),
            3,
        ),
    ],
)
def test_concurrent_processes_cannot_overspend(
    tmp_path: Path, cap: str, each: str, cap_loss: Epsilon | EpsilonDelta, fits: int
) -> None:
    path = tmp_path / "ledger.db"  # created by the racing children themselves
    reports = race(path, cap=cap, each=each)
    admitted = sum(len(r["ok"]) for r in reports)
    refused = sum(r["refused"] for r in reports)
    assert admitted == fits
    assert refused == 8 * 20 - fits
    with Ledger(path) as led:
        history = led.history("d")
        assert len(history) == fits
        assert sorted(i for r in reports for i in r["ok"]) == [c.id for c in history]
        assert led.cap("d") == cap_loss
        if isinstance(cap_loss, Epsilon):
            assert led.spent("d") == Epsilon(epsilon=fits * F(each.split(":")[1]))
        assert [e.action for e in led.curator_events("d")] == ["register"]
    if each == "eps:1/10":
        with Ledger(path) as led:
            assert led.spent("d").epsilon == Fraction(1)  # type: ignore[union-attr]
            assert led.remaining("d") == Epsilon(epsilon=0)


def test_concurrent_analysts_stay_inside_their_slices(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    reports = race(
        path,
        cap="eps:1",
        each="eps:1/10",
        analysts=["ann", "bob"],
        allowances={"ann": "eps:3/10"},
    )
    by = {"ann": 0, "bob": 0}
    for r in reports:
        by[r["analyst"]] += len(r["ok"])
    assert by["ann"] <= 3
    assert by["ann"] + by["bob"] == 10
    with Ledger(path) as led:
        assert led.spent("d", analyst="ann") == Epsilon(epsilon=F(by["ann"], 10))
        assert led.spent("d") == Epsilon(epsilon=1)

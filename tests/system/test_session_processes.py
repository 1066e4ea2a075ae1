"""Sessions in several processes sharing one ledger: no overspending, a shared answer cache,
and a charge that survives ``kill -9`` between the charge and the answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from deniable.accounting.loss import Epsilon
from deniable.ledger import Ledger

PRELUDE = textwrap.dedent(
    """
    import json, sys
    import pandas as pd
    from deniable.accounting.loss import Epsilon
    from deniable.curator.session import Session
    from deniable.errors import BudgetExceeded
    ledger = sys.argv[1]
    df = pd.DataFrame({"uid": [f"u{i}" for i in range(300)], "x": [float(i % 50) for i in range(300)]})
    s = Session(budget=Epsilon(epsilon=1), ledger=ledger, dataset="shared", analyst=sys.argv[2])
    s.add_table("t", df, privacy_unit="uid", bounds={"x": (0, 50)}, max_groups=1, max_rows=1)
    """
)

SPENDER = PRELUDE + textwrap.dedent(
    """
    import os, time
    print("ready", flush=True)
    while not os.path.exists(sys.argv[3]):  # all spenders start charging together
        time.sleep(0.001)
    answers = 0
    for i in range(40):
        if answers == 4:  # so that at least three processes share the cap of 10
            break
        try:
            # distinct per process, so that no answer comes from the cache
            s.sql(f"SELECT COUNT(*) AS n FROM t WHERE x >= {i} AND {sys.argv[2]!r} = {sys.argv[2]!r}",
                  epsilon=0.1)
            answers += 1
        except BudgetExceeded:
            pass
    print(json.dumps({"answers": answers}))
    """
)

ASKER = PRELUDE + textwrap.dedent(
    """
    a = s.sql("SELECT SUM(x) AS total FROM t", epsilon=0.2)
    print(json.dumps({"total": a["total"].tolist(), "cached": a.cached}))
    """
)

HANGER = PRELUDE + textwrap.dedent(
    """
    import time
    import deniable.query.execute as session_module
    def hang(*args, **kwargs):
        print("charged", flush=True)
        time.sleep(600)
    session_module.release = hang
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.3)
    """
)


def _run(script: str, ledger: Path, analyst: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "src"))
    return subprocess.Popen(
        [sys.executable, "-c", script, str(ledger), analyst, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(p: subprocess.Popen[str]) -> dict[str, object]:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def test_concurrent_sessions_cannot_overspend(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    go = tmp_path / "go"
    procs = [_run(SPENDER, ledger, f"analyst{i}", str(go)) for i in range(4)]
    for p in procs:  # every process has its session before any of them charges
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    go.touch()
    answers = sum(int(_finish(p)["answers"]) for p in procs)  # type: ignore[call-overload]
    with Ledger(ledger) as book:
        history = book.history("shared")
        spent = book.spent("shared")
    assert answers == len(history) == 10  # every answer paid for, never more than the cap
    assert spent == Epsilon(epsilon=1)
    # each process stops after 4 answers, so 10 answers come from at least 3 of them
    assert len({c.analyst for c in history}) >= 3


def test_cache_is_shared_across_processes(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    first = _finish(_run(ASKER, ledger, "ann"))
    second = _finish(_run(ASKER, ledger, "bob"))
    assert first["cached"] is False and second["cached"] is True
    assert first["total"] == second["total"]
    with Ledger(ledger) as book:
        assert len(book.history("shared")) == 1


def test_charge_survives_kill_between_charge_and_answer(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    p = _run(HANGER, ledger, "ann")
    assert p.stdout is not None
    line = p.stdout.readline()  # printed only once release() runs, after the charge
    assert line.strip() == "charged"
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    time.sleep(0.1)
    with Ledger(ledger) as book:
        history = book.history("shared")
        assert [c.status for c in history] == ["charged"]  # paid, never answered
        assert book.remaining("shared") == Epsilon(epsilon=0.7)

"""The anchor and idempotency keys under real concurrent processes sharing one ledger."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

from deniable.accounting.loss import Epsilon
from deniable.ledger import Ledger

TIMEOUT = 120

CHILD = textwrap.dedent(
    """
    import json, sys
    from fractions import Fraction
    from deniable.accounting.loss import Epsilon
    from deniable.errors import BudgetExceeded, DuplicateRequest
    from deniable.ledger import Ledger
    path, name, n, key = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    print("ready", flush=True)
    sys.stdin.readline()
    ok, refused, dup = [], 0, []
    with Ledger(path) as led:
        for i in range(n):
            try:
                c = led.charge("d", Epsilon(epsilon=Fraction(1, 50)), analyst="ann",
                               query_key=f"{name}-{i}", query_text="SELECT 1",
                               idempotency_key=None if key == "-" else key)
                ok.append(c.id)
            except BudgetExceeded:
                refused += 1
            except DuplicateRequest as e:
                dup.append(e.charge_id)
    print(json.dumps({"ok": ok, "refused": refused, "dup": dup}), flush=True)
    """
)

WATCHER = textwrap.dedent(
    """
    import json, sys
    anchor = sys.argv[1]
    print("ready", flush=True)
    seen = []
    import select
    while True:
        try:
            with open(anchor) as f:
                seen.append(json.load(f)["seq"])
        except (FileNotFoundError, ValueError):
            seen.append(None)
        if select.select([sys.stdin], [], [], 0)[0]:
            break
    print(json.dumps(seen), flush=True)
    """
)


def start(code: str, *args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    return child


def test_concurrent_writers_keep_the_anchor_monotonic_and_exact(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    anchor = str(path) + ".anchor"
    watcher = start(WATCHER, anchor)
    children = [start(CHILD, str(path), f"p{i}", "20", "-") for i in range(4)]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = []
    for child in children:
        out, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    out, err = watcher.communicate("stop\n", timeout=TIMEOUT)
    seen = json.loads(out.strip().splitlines()[-1])
    seqs = [s for s in seen if s is not None]
    assert None not in seen  # the anchor is replaced atomically: never absent or partial
    assert seqs == sorted(seqs)  # never moves backwards
    assert sum(len(r["ok"]) for r in reports) == 50  # 50 × 1/50 fills the cap of 1
    with Ledger(path) as led:
        report = led.verify()
        assert report.ok and report.anchor_seq == report.seq
        data = json.loads(Path(anchor).read_text())
        assert data["spent"] == {"d": {"type": "epsilon", "epsilon": "1/1"}}
        assert led.spent("d") == Epsilon(epsilon=Fraction(1))


def test_two_processes_with_one_idempotency_key_charge_once(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with Ledger(path) as led:
        led.register("d", Epsilon(epsilon=1))
    children = [start(CHILD, str(path), f"p{i}", "5", "retry-7") for i in range(2)]
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    reports = []
    for child in children:
        out, err = child.communicate(timeout=TIMEOUT)
        assert child.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    ok = [i for r in reports for i in r["ok"]]
    dups = [i for r in reports for i in r["dup"]]
    assert len(ok) == 1 and len(dups) == 9 and set(dups) == set(ok)
    with Ledger(path) as led:
        assert led.spent("d") == Epsilon(epsilon=Fraction(1, 50))
        assert led.verify().ok

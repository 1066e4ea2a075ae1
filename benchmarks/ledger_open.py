"""Benchmark: opening a ledger with a long history, full replay against the anchored checkpoint.

Opening a ledger verifies it. Before checkpoints it replayed the whole hash chain and
compared every row (linear in the history); now it starts from the checkpoint the anchor
vouches for (:mod:`deniable.ledger.chain`). Both paths run on the same files in the same run:

* **full replay** ("before"): the same database opened with its anchor stripped of the
  checkpoint it vouches for — exactly the old open (the whole chain replayed, every table
  compared);
* **checkpointed** ("after"): the database opened with its anchor as written.

The floor is opening an empty ledger (one registered dataset) in the same run; every figure
is a ratio to it, and the speed-up is before/after. Ledgers of 5,000, 50,000 and 200,000
charges are built through the ledger's own write path (chain entries, checkpoints every
1,000 entries, anchor), in batches of 1,000 charges per transaction to keep building fast;
admission is skipped while building (it does not change what opening reads).

Run: ``.venv/bin/python benchmarks/ledger_open.py`` (``--sizes 5000,50000`` to choose).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from fractions import Fraction
from pathlib import Path

from deniable.accounting.loss import Epsilon
from deniable.ledger import Ledger
from deniable.ledger.budget import insert_charge
from deniable.ledger.records import encode_details, utc_now

OUT = Path(__file__).resolve().parent / "results" / "ledger_open.md"
SIZES = (5_000, 50_000, 200_000)
BATCH = 1_000
REPEATS = 5


def build(path: Path, n: int) -> None:
    """A ledger with ``n`` charges of ε = 1/10⁶ by four analysts, in batches of 1,000."""
    details = encode_details({"mechanism": "geometric"})
    loss = Epsilon(epsilon=Fraction(1, 10**6))
    with Ledger(path) as ledger:
        ledger.register("d", Epsilon(epsilon=10))
        done = 0
        while done < n:
            with ledger._write("trusted") as w:  # the ledger's own write path, batched
                for i in range(done, min(n, done + BATCH)):
                    insert_charge(
                        w,
                        dataset="d",
                        analyst=f"a{i % 4}",
                        query_key=f"k{i}",
                        query_text="SELECT COUNT(*) FROM t",
                        loss=loss,
                        now=utc_now(),
                        details_json=details,
                        idempotency_key=None,
                    )
                done = min(n, done + BATCH)


def open_time(path: Path, anchor: Path) -> float:
    """Median seconds to open (and so verify) the ledger, then close it."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        with Ledger(path, anchor=anchor) as ledger:
            assert not ledger.tampered, ledger.verify().problems
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def charge_times(path: Path, n: int = 200) -> tuple[float, float]:
    """p50 and p99 seconds of ``Ledger.charge`` (admission, chain entry, anchor) on ``path``."""
    times = []
    with Ledger(path) as ledger:
        for i in range(n):
            start = time.perf_counter()
            ledger.charge(
                "d",
                Epsilon(epsilon=Fraction(1, 10**6)),
                analyst=f"a{i % 4}",
                query_key=f"bench{i}",
                query_text="SELECT COUNT(*) FROM t",
            )
            times.append(time.perf_counter() - start)
    times.sort()
    return statistics.median(times), times[min(n - 1, round(0.99 * n))]


def admission_time(path: Path, n: int = 200) -> float:
    """Median seconds of ``Ledger.can_charge``: admission's read path, without any fsync."""
    times = []
    loss = Epsilon(epsilon=Fraction(1, 10**6))
    with Ledger(path) as ledger:
        for i in range(n):
            start = time.perf_counter()
            ledger.can_charge("d", loss, analyst=f"a{i % 4}")
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def without_checkpoint(anchor: Path, dest: Path) -> Path:
    """A copy of ``anchor`` that vouches for no checkpoint: opening then replays everything."""
    data = json.loads(anchor.read_text())
    data.pop("checkpoint", None)
    dest.write_text(json.dumps(data))
    return dest


def main() -> None:
    """Build the ledgers, time both opens, write the markdown section."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    sizes = [int(s) for s in parser.parse_args().sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        empty = Path(d) / "empty.db"
        build(empty, 0)
        floor = open_time(empty, Path(f"{empty}.anchor"))
        charge_floor, _ = charge_times(empty)
        admit_floor = admission_time(empty)
        for n in sizes:
            path = Path(d) / f"l{n}.db"
            build(path, n)
            anchor = Path(f"{path}.anchor")
            after = open_time(path, anchor)
            before = open_time(path, without_checkpoint(anchor, Path(d) / f"l{n}.plain"))
            p50, p99 = charge_times(path)
            admit = admission_time(path)
            rows.append((n, before, after, p50, p99, admit))
            print(f"{n:>8} charges: full replay {before * 1e3:8.1f} ms, checkpointed "
                  f"{after * 1e3:6.1f} ms, floor {floor * 1e3:.1f} ms; charge p50 "
                  f"{p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms")  # fmt: skip
    lines = [
        "## Ledger: opening a long history (checkpoints)",
        "",
        "Opening verifies the ledger. *Full replay* (the open before checkpoints) replays the",
        "whole hash chain and compares every row; *checkpointed* starts from the checkpoint the",
        f"anchor vouches for (checkpoints every 1,000 entries). Median of {REPEATS} opens each,",
        f"SQLite, as ratios to opening an empty ledger in the same run (floor: {floor * 1e3:.1f}",
        "ms).",
        "",
        "| charges | full replay / floor | checkpointed / floor | speed-up (full / checkpointed) |",
        "|---:|---:|---:|---:|",
    ]
    for n, before, after, *_ in rows:
        lines.append(
            f"| {n:,} | {before / floor:,.1f} | {after / floor:,.1f} | {before / after:,.0f}× |"
        )
    lines += [
        "",
        "Admission stays flat too: it adds the charges after the last checkpoint to the",
        "checkpoint's totals (one index range). *Admission* is `Ledger.can_charge` (the read",
        f"path of a charge, no write), floor {admit_floor * 1e3:.2f} ms on the empty ledger;",
        "*charge* is `Ledger.charge` (admission, chain entry, commit, anchor file), floor",
        f"{charge_floor * 1e3:.2f} ms, whose time is mostly",
        "the three fsyncs of a durable commit (database, anchor, its directory) and so varies",
        "with the disk's load more than with the ledger's size. 200 calls each, medians",
        "(and p99 of the charges), as ratios to the floors:",
        "",
        "| charges | admission / floor | charge p50 / floor | charge p99 / floor |",
        "|---:|---:|---:|---:|",
    ]
    for n, _, _, p50, p99, admit in rows:
        lines.append(
            f"| {n:,} | {admit / admit_floor:,.2f} | {p50 / charge_floor:,.2f} "
            f"| {p99 / charge_floor:,.2f} |"
        )
    lines += [
        "",
        "Reproduce: `.venv/bin/python benchmarks/ledger_open.py`.",
        "",
    ]
    OUT.write_text("\n".join(lines))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

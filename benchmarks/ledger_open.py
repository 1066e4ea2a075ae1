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
        for n in sizes:
            path = Path(d) / f"l{n}.db"
            build(path, n)
            anchor = Path(f"{path}.anchor")
            after = open_time(path, anchor)
            before = open_time(path, without_checkpoint(anchor, Path(d) / f"l{n}.plain"))
            rows.append((n, before, after))
            print(f"{n:>8} charges: full replay {before * 1e3:8.1f} ms, checkpointed "
                  f"{after * 1e3:6.1f} ms, floor {floor * 1e3:.1f} ms")  # fmt: skip
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
    for n, before, after in rows:
        lines.append(
            f"| {n:,} | {before / floor:,.1f} | {after / floor:,.1f} | {before / after:,.0f}× |"
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

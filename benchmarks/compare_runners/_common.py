"""Shared protocol of the comparison runners (standard library only: it runs in every env).

A runner is started as ``<env>/bin/python <runner>.py PARQUET``. It prints one JSON object per
line on stdout, flushed at once, so that ``benchmarks/compare.py`` can apply a per-run timeout:

* ``{"event": "load", "load_s": …, "backend": …}`` after reading the file into the
  library's in-memory form (the part excluded from the query time);
* ``{"event": "run", "setup_s": …, "query_s": …, "counts": [50 numbers], "sums": […],
  "means": […]}`` per repetition (the query alone, up to the released numbers in Python);
* ``{"event": "done", "peak_kib": …, "version": …, "count_scale": …}`` with the peak resident
  set size (``VmHWM``, load and queries together) summed over the runner's process tree, and
  the scale b of the Laplace noise on each count (for compare.py's noise check).

Repetitions: up to ``REPEAT`` (3; a second command-line argument overrides it) while a run
takes less than ``REPEAT_UNDER`` seconds (60); compare.py keeps the fastest.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

CATEGORIES = list(range(50))
EPSILON = 1.0
DELTA = 1e-6
LOW, HIGH = 0.0, 100.0
MAX_GROUPS = 5
MAX_ROWS = 10
REPEAT = 3
REPEAT_UNDER = 60.0


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _hwm(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def peak_kib() -> int:
    """Sum of the peak resident set sizes (VmHWM, KiB) of this process and its descendants.

    For Spark this adds the JVM (and its Python workers) to the driver; the peaks need not be
    simultaneous, so for a process tree the sum is an upper bound of the joint peak.
    """
    total, todo, seen = 0, [os.getpid()], set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += _hwm(pid)
        todo += _children(pid)
    return total


def _clean(xs: Sequence[Any]) -> list[float | None]:
    out: list[float | None] = []
    for x in xs:
        try:
            v = float(x)
        except (TypeError, ValueError):
            out.append(None)
            continue
        out.append(v if v == v else None)
    return out


def main(
    *,
    version: str,
    backend: str,
    load: Callable[[str], Any],
    prepare: Callable[[Any], Any],
    query: Callable[[Any], tuple[Sequence[Any], Sequence[Any], Sequence[Any]]],
    count_scale: float | Callable[[Any], float],
) -> None:
    """Load the Parquet file named on the command line, then time ``query`` (see module doc).

    ``load(path)`` reads the file into the library's in-memory form (timed as load);
    ``prepare(state)`` makes a fresh DP session/context/accountant with the query's budget
    for each repetition (timed apart, as setup); ``query(session)`` runs the DP query and
    returns three sequences indexed by category 0..49: noisy counts, sums and means (None
    where the library released nothing for a category). ``count_scale`` is the Laplace scale of
    the count noise (or a function of the loaded state computing it, called after the runs).
    """
    path = sys.argv[1]
    repeat = int(sys.argv[2]) if len(sys.argv) > 2 else REPEAT
    t0 = time.perf_counter()
    state = load(path)
    emit(event="load", load_s=time.perf_counter() - t0, backend=backend)
    for _ in range(repeat):
        t0 = time.perf_counter()
        session = prepare(state)
        t1 = time.perf_counter()
        counts, sums, means = query(session)
        took = time.perf_counter() - t1
        emit(
            event="run",
            setup_s=t1 - t0,
            query_s=took,
            counts=_clean(counts),
            sums=_clean(sums),
            means=_clean(means),
        )
        if took >= REPEAT_UNDER:
            break
    scale = count_scale(state) if callable(count_scale) else count_scale
    emit(event="done", peak_kib=peak_kib(), version=version, count_scale=scale)

"""How pytest-xdist hands the test modules to its workers (``make test``: ``-n … --dist loadfile``).

xdist's own ``loadfile`` order hands out the modules with the MOST TESTS first
(``--loadscope-reorder``), so the modules with one or two long tests (a server and its
clients, a PostgreSQL cluster, a JVM) were handed out last and the run ended with one
worker busy while the others had stopped (measured on 2 cores under load: one worker idle for
the last 538 s of a 1,998 s run; with this file the workers ended 33 s apart). With ``--dist loadfile`` this file
replaces that order (nothing else changes: which tests run, and that a module runs whole on
one worker, so its module-scoped fixtures are built once):

* **Longest first** (the LPT rule): every work unit is weighed by the seconds its tests took
  in the last run that ran them (pytest's cache, ``deniable/test-seconds``, one figure per
  test, written at the end of every run, so a ``-k`` run does not shrink a module's weight),
  and, for the tests not in the cache (a fresh checkout, new tests), by an estimate from
  where their module lives (:func:`estimate`).
* **One worker more than the cores** for ``-n auto`` (:func:`pytest_xdist_auto_num_workers`).
* **One JVM**: the modules that start the local Spark session (``tests/conformance/_spark.py``
  starts one per test process, ~10 s of CPU) form one unit, so one worker starts Spark once
  instead of every worker starting its own.

``--dist load``/``loadscope``/``worksteal`` and runs without xdist are left alone.
"""

from __future__ import annotations

import functools
import os
import re
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE_KEY = "deniable/test-seconds"
SPARK_UNIT = "spark (one JVM)"
_STARTS_SPARK = re.compile(r"^(?:from|import) (?:_spark|test_spark_\w+)\b", flags=re.M)

# A module not in the cache: seconds per test, and a floor for the modules that start
# processes (servers, engines, CLIs). Rough figures of a quiet 2-core run; the cache replaces
# them after one run.
_PER_TEST = {"system": 0.5, "stats": 0.2, "conformance": 0.05}
_FLOOR = {"system": 10.0, "stats": 2.0}


def module_of(nodeid: str) -> str:
    """The module part of a node id (``tests/unit/test_x.py::test_y[1]`` → the path)."""
    return nodeid.split("::", 1)[0]


@functools.cache
def starts_spark(module: str) -> bool:
    """Whether the module imports the suite's local Spark (directly or through another)."""
    try:
        return bool(_STARTS_SPARK.search((ROOT / module).read_text()))
    except OSError:
        return False


def estimate(module: str, tests: int) -> float:
    """Seconds a module not seen before is expected to take (see the module docstring)."""
    parts = Path(module).parts
    kind = parts[1] if len(parts) > 2 else ""
    return max(_FLOOR.get(kind, 0.0), tests * _PER_TEST.get(kind, 0.02))


def weight(nodeids: Iterable[str], seconds: Mapping[str, float]) -> float:
    """Expected seconds of a work unit: the cached figure of each test it holds, and for the
    others their module's :func:`estimate`, shared equally among the module's tests."""
    tests: defaultdict[str, list[str]] = defaultdict(list)
    for nodeid in nodeids:
        tests[module_of(nodeid)].append(nodeid)
    total = 0.0
    for module, ids in tests.items():
        unknown = [i for i in ids if i not in seconds]
        total += sum(seconds[i] for i in ids if i in seconds)
        total += estimate(module, len(ids)) * len(unknown) / len(ids)
    return total


def _scheduler_class() -> type[Any]:
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class LongestFirst(LoadFileScheduling):  # type: ignore[misc]
        """``loadfile`` with the Spark modules in one unit and the longest units first."""

        workqueue: OrderedDict[str, dict[str, bool]]
        config: pytest.Config

        def _split_scope(self, nodeid: str) -> str:
            module = module_of(nodeid)
            return SPARK_UNIT if starts_spark(module) else module

        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False  # xdist's queue in collection order…
            self._sorted = False

        def _assign_work_unit(self, node: Any) -> None:
            # …sorted here, once, before the first unit leaves.
            if not self._sorted:
                self._sorted = True
                cache = getattr(self.config, "cache", None)  # None: -p no:cacheprovider
                seconds: dict[str, float] = cache.get(CACHE_KEY, {}) if cache is not None else {}
                queue: OrderedDict[str, dict[str, bool]] = self.workqueue
                weights = {scope: weight(unit, seconds) for scope, unit in queue.items()}
                self.workqueue = OrderedDict(
                    (s, queue[s]) for s in sorted(queue, key=lambda s: -weights[s])
                )
            super()._assign_work_unit(node)

    return LongestFirst


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the usable cores.

    Much of the suite waits (response deadlines, server, PostgreSQL and JVM starts); the
    extra worker fills those waits. Measured on 2 cores at load 6-13: three workers ended a
    full run at 577 s, two at 965 s (``notes``: the suite-time helper's runs p2 and p3).
    """
    return len(os.sched_getaffinity(0)) + 1


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``: :class:`LongestFirst` (see the module docstring); else xdist's."""
    if config.getvalue("dist") != "loadfile":
        return None
    return _scheduler_class()(config, log)


_seconds: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add up each test's setup, call and teardown seconds (on the controller too)."""
    _seconds[report.nodeid] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remember each test's seconds for the next run's order (the controller's view)."""
    cache = getattr(session.config, "cache", None)  # None: -p no:cacheprovider
    if cache is None or hasattr(session.config, "workerinput") or not _seconds:
        return
    known: dict[str, float] = cache.get(CACHE_KEY, {})
    known.update({nodeid: round(s, 3) for nodeid, s in _seconds.items()})
    cache.set(CACHE_KEY, known)

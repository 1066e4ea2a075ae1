"""The worker supervisor's start-up grace: a slow start is not a hang; a hang still is."""

from __future__ import annotations

import threading
from multiprocessing import Pipe
from types import SimpleNamespace
from typing import Any

import pytest

from deniable.server import run


class FakeProcess:
    """A worker as the supervisor sees it: a pipe and an OS process that may be alive."""

    def __init__(self) -> None:
        self.parent_conn, self.child_conn = Pipe()
        self.process = SimpleNamespace(is_alive=lambda: True)
        self.killed = False
        self.responsive = False  # whether its pong thread runs (started and not stopped)
        self.pid = 4242
        self.exitcode = None

    def answer(self) -> None:
        """The worker's pong thread answers every ping waiting in the pipe."""
        while self.child_conn.poll(0):
            self.child_conn.recv()
            self.child_conn.send(True)

    def is_alive(self, timeout: float = 5) -> bool:
        """uvicorn's check: a ping answered in time (answered at once while responsive)."""
        return self.responsive

    def kill(self) -> None:
        self.killed = True

    def join(self) -> None:
        pass


def _supervisor(process: FakeProcess) -> Any:
    sup = object.__new__(run.PatientMultiprocess)  # no signal handlers in the test process
    sup.config = SimpleNamespace(timeout_worker_healthcheck=0.05)
    sup.sockets = []
    sup.processes = [process]
    sup.should_exit = threading.Event()
    sup._starting = {}
    sup._started(process)
    return sup


def test_a_silent_starting_worker_is_left_alone_within_the_grace() -> None:
    process = FakeProcess()
    sup = _supervisor(process)
    for _ in range(5):
        sup.keep_subprocess_alive()
    assert not process.killed and sup.processes == [process]


def test_after_its_first_answer_a_silent_worker_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    process = FakeProcess()
    sup = _supervisor(process)
    process.answer()
    process.responsive = True
    started: list[object] = []

    class Replacement(FakeProcess):
        def start(self) -> None:
            started.append(self)

    monkeypatch.setattr(run, "Process", lambda *_: Replacement())
    sup.keep_subprocess_alive()  # reads the first answer: supervised as usual from now on
    sup.keep_subprocess_alive()
    assert not process.killed
    process.responsive = False  # SIGSTOP
    sup.keep_subprocess_alive()  # silent: killed and replaced
    assert process.killed and len(started) == 1 and sup.processes == started


def test_a_worker_silent_past_the_grace_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    process = FakeProcess()
    sup = _supervisor(process)
    monkeypatch.setattr(run, "STARTUP_GRACE", 0.0)
    monkeypatch.setattr(
        run, "Process", lambda *_: type("P", (FakeProcess,), {"start": lambda self: None})()
    )
    sup.keep_subprocess_alive()
    assert process.killed

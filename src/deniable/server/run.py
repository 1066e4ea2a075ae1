"""Start the HTTP service under uvicorn.

Workers are separate processes started by uvicorn with the ``spawn`` method: each imports
deniable afresh and opens its own :class:`~deniable.server.service.Service` (ledger
connection, engine, and — on first use — its own OS-CSPRNG buffer) when its application
starts. The parent process only parses the configuration: nothing random, no ledger and no
engine exist before the workers start, so no two workers can share random state (a buffer
of CSPRNG bytes copied by ``fork`` would hand the same noise to two workers).

Workers share the budget through the ledger file (SQLite in WAL mode, one write lock), so
several workers can never overspend a cap together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import socket
import subprocess
import sys
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.supervisors.multiprocess import Multiprocess, Process

from deniable.errors import DeniableError, InvalidParameter
from deniable.server.app import create_app
from deniable.server.config import load_config

logger = logging.getLogger("uvicorn.error")

CONFIG_ENV = "DENIABLE_SERVER_CONFIG"
"""Environment variable through which :func:`serve` hands the configuration to workers."""


def app_from_env() -> FastAPI:
    """The application of the configuration named by ``$DENIABLE_SERVER_CONFIG``.

    uvicorn calls this factory in each worker process; the service opens at start-up.

    Raises:
        InvalidParameter: the variable is not set.
        ConfigError: the configuration is invalid.
    """
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise InvalidParameter(f"set {CONFIG_ENV} to the configuration file's path")
    return create_app(path)


class StartFailed(DeniableError):
    """The service could not open its datasets and ledger: nothing was started."""


def preflight(config_path: str | os.PathLike[str]) -> None:
    """Open the configured service once, in a child process, and close it; raise its failure.

    Every worker opens the service when it starts; a failure there (a ledger that cannot
    be opened or written, a cap that differs from the recorded one) used to kill the workers
    while the parent exited 0. It is found here instead, before any worker starts. The
    check runs in a child process, so that nothing opened in it (engines, randomness) is
    inherited by the workers.

    Raises:
        StartFailed: naming the failure's class and its message.
    """
    code = (
        "import sys\n"
        "from deniable.errors import DeniableError\n"
        "from deniable.server.config import load_config\n"
        "from deniable.server.service import Service\n"
        "try:\n"
        "    Service(load_config(sys.argv[1])).close()\n"
        "except (DeniableError, OSError) as e:\n"  # written never to quote data
        "    print(f'{type(e).__name__}: {e}', file=sys.stderr)\n"
        "    sys.exit(1)\n"
        "except Exception as e:\n"  # its text might quote data: its class only
        "    print(type(e).__name__, file=sys.stderr)\n"
        "    sys.exit(1)\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, str(config_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        lines = [line for line in child.stderr.strip().splitlines() if line.strip()]
        cause = lines[-1] if lines else f"exit status {child.returncode}"
        raise StartFailed(f"the service could not start, nothing is served: {cause}")


def serve(
    config_path: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Run the service until interrupted (blocks).

    Args:
        config_path: the TOML configuration (:func:`~deniable.server.config.load_config`).
        host: the interface to listen on (default loopback only).
        port: the TCP port.
        workers: worker processes (each answers requests; all share the ledger).
        log_level: uvicorn's log level.

    Raises:
        ConfigError: the configuration is invalid (checked before anything starts).
        InvalidParameter: a bad port or worker count.
        StartFailed: the service cannot open its datasets or ledger (:func:`preflight`).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidParameter("workers must be a positive integer")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidParameter("port must be an integer in [0, 65535]")
    path = Path(config_path).resolve()
    config = load_config(path)  # fail early, in the parent, with the key to fix (parsing)
    preflight(path)
    os.environ[CONFIG_ENV] = str(path)
    options = {
        "factory": True,
        "http": NoDelayH11,
        "host": host,
        "port": port,
        "workers": workers,
        "log_level": log_level,
        "timeout_graceful_shutdown": 10,
        # a stopped or hung worker is replaced after this many seconds without a health
        # answer (it may hold the ledger's write lock, stalling every other worker)
        "timeout_worker_healthcheck": config.server.worker_healthcheck,
    }
    if workers == 1:
        uvicorn.run("deniable.server.run:app_from_env", **options)  # type: ignore[arg-type]
        return
    settings = uvicorn.Config("deniable.server.run:app_from_env", **options)  # type: ignore[arg-type]
    PatientMultiprocess(settings, sockets=[settings.bind_socket()]).run()


STARTUP_GRACE = 120.0
"""Seconds a new worker may take to answer its first health check (a public constant).

A worker is a spawned interpreter that imports deniable and opens its service before it can
answer; on a loaded machine that takes longer than the steady-state health-check timeout
(``server.worker_healthcheck``, 2 s by default), and uvicorn's supervisor killed and
respawned every worker every few seconds, forever. Until its first answer a worker is only
required to be alive, for at most this long; from its first answer on, the short timeout
applies, so a stopped or hung worker is still replaced within seconds."""


class PatientMultiprocess(Multiprocess):
    """uvicorn's worker supervisor with a start-up grace period (:data:`STARTUP_GRACE`).

    Each new worker is sent one health ping when it starts; until its answer arrives the
    supervisor only checks that the process is alive (for at most the grace period). Then
    it is supervised exactly as uvicorn does: a worker that does not answer a ping within
    ``timeout_worker_healthcheck`` seconds is killed and replaced.
    """

    def __init__(self, config: uvicorn.Config, sockets: list[socket.socket]) -> None:
        super().__init__(config, sockets)
        self._starting: dict[int, float] = {}  # id(process) -> when it was sent its first ping

    def _started(self, process: Process) -> None:
        with contextlib.suppress(OSError):
            process.parent_conn.send(b"ping")
        self._starting[id(process)] = time.monotonic()

    def init_processes(self) -> None:
        """Start the workers, each with its first ping."""
        super().init_processes()
        for process in self.processes:
            self._started(process)

    def _still_starting(self, process: Process) -> bool:
        sent = self._starting.get(id(process))
        if sent is None:
            return False
        try:
            answered = process.parent_conn.poll(0)
            if answered:
                process.parent_conn.recv()
        except (OSError, EOFError, pickle.UnpicklingError):
            answered = False
        if answered or not process.process.is_alive():
            del self._starting[id(process)]
            return False
        if time.monotonic() - sent < STARTUP_GRACE:
            return True
        del self._starting[id(process)]  # out of grace: the ordinary check decides
        return False

    def keep_subprocess_alive(self) -> None:
        """Uvicorn's check, skipping a worker that is alive and within its start-up grace."""
        if self.should_exit.is_set():
            return
        for idx, process in enumerate(self.processes):
            if self._still_starting(process):
                continue
            if process.is_alive(timeout=self.config.timeout_worker_healthcheck):
                continue
            process.kill()
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                logger.error(f"Child process [{process.pid}] failed to start; stopping.")
                self.should_exit.set()
                return
            if self.should_exit.is_set():
                return
            logger.info(f"Child process [{process.pid}] died")
            replacement = Process(self.config, self.sockets)
            replacement.start()
            self.processes[idx] = replacement
            self._started(replacement)


class NoDelayH11(H11Protocol):
    """uvicorn's h11 protocol with ``TCP_NODELAY`` on every connection.

    With several workers uvicorn shares a listening socket made with protocol number 0, and
    asyncio then skips ``TCP_NODELAY`` on the connections it accepts (it checks the socket's
    protocol): a response written as headers then body waited for the client's delayed ACK,
    about 40 ms on every answer. Setting it here makes one worker and many answer alike.
    """

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Turn off Nagle's algorithm on the new connection, then serve it."""
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)


if __name__ == "__main__":  # pragma: no cover - python -m deniable.server.run CONFIG [PORT [W]]
    serve(
        sys.argv[1],
        port=int(sys.argv[2]) if len(sys.argv) > 2 else 8000,
        workers=int(sys.argv[3]) if len(sys.argv) > 3 else 1,
    )

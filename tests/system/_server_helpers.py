"""Start and stop real uvicorn servers of deniable for the system tests."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A running server: its process (a session leader) and base URL."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL the whole process group (the parent and every worker) at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL whatever is left."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


START_TIMEOUT = 300.0
"""How long a server may take to answer its first health check. Readiness is what the tests
wait on; this deadline only bounds a start that never comes (a loaded 2-core machine took
more than 30 s to import and open a service)."""


def start_server(
    config: Path, *, workers: int, log: Path, timeout: float = START_TIMEOUT
) -> Server:
    """Start ``deniable.server.run.serve`` in a new process group; wait until it answers.

    A port taken by another process between :func:`free_port` and the server's bind (tests
    run in parallel) is retried on a fresh port.
    """
    for _ in range(3):
        try:
            return _start_server(config, workers=workers, log=log, timeout=timeout)
        except _PortTaken:
            continue
    raise RuntimeError(f"server could not bind a free port:\n{log.read_text()[-3000:]}")


class _PortTaken(Exception):
    pass


def _start_server(config: Path, *, workers: int, log: Path, timeout: float) -> Server:
    port = free_port()
    start = log.stat().st_size if log.exists() else 0
    code = (
        "from deniable.server.run import serve; "
        f"serve({str(config)!r}, port={port}, workers={workers}, log_level='warning')"
    )
    out = log.open("ab")
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=ROOT,
    )
    server = Server(process, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = log.read_text()[start:]
            if "address already in use" in text.lower():
                raise _PortTaken
            raise RuntimeError(f"server exited early:\n{text[-3000:]}")
        try:
            if httpx.get(f"{server.url}/v1/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    else:
        server.stop()
        raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")
    if workers > 1:
        wait_for_workers(server, workers, deadline)
    return server


def worker_pids(server: Server) -> list[int]:
    """The server's worker processes (children of the uvicorn parent), from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == server.process.pid:  # ppid
            pids.append(int(entry.name))
    return pids


def listening(pid: int) -> bool:
    """Whether process ``pid`` holds a socket (workers hold the shared listening socket)."""
    try:
        return any(
            os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            for fd in os.listdir(f"/proc/{pid}/fd")
        )
    except OSError:
        return False


def wait_for_workers(server: Server, workers: int, deadline: float) -> None:
    """Wait until every worker has started its application (answers requests)."""
    # Each worker opens the service in its lifespan before accepting; give them all time
    # by probing with fresh connections until every worker pid has answered one.
    seen: set[int] = set()
    while time.monotonic() < deadline and len(seen) < workers:
        conns = [open_connection(server) for _ in range(4 * workers)]
        for conn in conns:
            conn.request("GET", "/v1/health")
            conn.getresponse().read()
            owner = connection_owner(server, conn.sock.getsockname()[1])
            if owner is not None:
                seen.add(owner)
        for conn in conns:
            conn.close()
        if len(seen) < workers:
            time.sleep(0.2)


def open_connection(server: Server) -> http.client.HTTPConnection:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.connect()
    return conn


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                out.add(int(target[8:-1]))
    except OSError:
        pass
    return out


def connection_owner(server: Server, client_port: int) -> int | None:
    """The worker pid holding the server side of the TCP connection from ``client_port``."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f)
            for line in f:
                parts = line.split()
                local, remote = parts[1], parts[2]
                if (
                    int(local.rsplit(":", 1)[1], 16) == server.port
                    and int(remote.rsplit(":", 1)[1], 16) == client_port
                ):
                    inode = int(parts[9])
    if inode is None:
        return None
    for pid in worker_pids(server):
        if inode in _socket_inodes(pid):
            return pid
    return None


@contextlib.contextmanager
def running(config: Path, *, workers: int, log: Path) -> Iterator[Server]:
    server = start_server(config, workers=workers, log=log)
    try:
        yield server
    finally:
        server.stop()


def write_config(
    folder: Path,
    *,
    cap: str,
    rows: str,
    public_keys: str = "",
    extra_server: str = "",
    response_time: str = '"off"',
) -> Path:
    """A one-dataset configuration over ``rows`` (CSV text) with a high rate limit.

    Responses leave when ready (``response_time = "off"``) unless a test asks for a policy
    (a TOML value, e.g. ``"{ deadline = 0.5 }"``): most tests are not about timing.
    """
    (folder / "data.csv").write_text(rows)
    text = f"""
ledger = "ledger.db"

[server]
rate_limit = {{ per_second = 100000, burst = 100000 }}
{extra_server}

[datasets.d]
source = "data.csv"
table = "t"
privacy_unit = "row"
budget = {cap}
response_time = {response_time}
{public_keys}
"""
    path = folder / "service.toml"
    path.write_text(text)
    return path

"""A throwaway PostgreSQL server for the tests: ``initdb`` + ``pg_ctl`` on a temporary directory.

:func:`shared_server` starts one server per test process (on a free port of 127.0.0.1, its
data directory and socket in a fresh temporary directory) the first time a test needs it, and
stops it and removes the directory when the process exits (``atexit``; the pytest fixtures of
the PostgreSQL tests also stop it at the end of the session). It never skips: when the server
binaries are missing (neither on ``PATH`` nor in ``/usr/lib/postgresql/<v>/bin``) it installs
Debian's ``postgresql`` package with ``apt-get``, and fails loudly if that fails.

``initdb`` refuses to run as root, so under root the server's commands run as the ``postgres``
OS user (created by the package; created here with ``useradd`` if missing). The cluster is
made with ``--no-locale -E UTF8`` (byte-wise text order, as DuckDB's) and trust
authentication on 127.0.0.1 only, and tuned for tests (no fsync).

Helpers load test data with ``COPY`` (:func:`load_table`) and create a read-only role granted
SELECT on one table (:func:`create_reader`), as a deployment should.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

SERVER_SETTINGS: Mapping[str, str] = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
    "max_connections": "50",
    "max_parallel_workers_per_gather": "2",
}
"""Settings of the test server (a benchmark passes its own)."""


def _binaries() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` (installed if missing)."""
    for attempt in range(2):
        candidates = sorted(
            glob.glob("/usr/lib/postgresql/*/bin"),
            key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
            reverse=True,
        )
        for directory in candidates:
            if all((Path(directory) / b).exists() for b in ("initdb", "pg_ctl", "postgres")):
                return Path(directory)
        on_path = shutil.which("initdb")
        if on_path and shutil.which("pg_ctl"):
            return Path(on_path).resolve().parent
        if attempt == 0:
            _install()
    raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found after installing")


def _install() -> None:
    """Install Debian's PostgreSQL server package (never skip the tests instead)."""
    if os.geteuid() != 0:
        raise RuntimeError(
            "PostgreSQL server binaries are missing and installing them needs root: "
            "apt-get install postgresql"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", "postgresql"],
        check=True,
        env=env,
        capture_output=True,
    )


def _server_user() -> pwd.struct_passwd | None:
    """The OS user running the server: ``postgres`` under root (initdb refuses root)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True)
        return pwd.getpwnam("postgres")


def free_port() -> int:
    """A TCP port of 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """One PostgreSQL cluster on a temporary directory and a free port (started on creation).

    Args:
        settings: server settings (``-c name=value``), default :data:`SERVER_SETTINGS`.
    """

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.bin = _binaries()
        self.user = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="deniable-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._stopped = False
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.root.chmod(0o700)
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
                "--no-instructions",
            ]
        )
        options = {**SERVER_SETTINGS, **(settings or {})}
        options["port"] = str(self.port)
        options["unix_socket_directories"] = str(self.root)
        flags = " ".join(f"-c {k}={v}" for k, v in options.items() if " " not in v)
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.root / "server.log"),
                "-o",
                flags,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )

    def _run(self, cmd: Sequence[str]) -> None:
        kwargs: dict[str, Any] = {}
        if self.user is not None:
            kwargs = {
                "user": self.user.pw_uid,
                "group": self.user.pw_gid,
                "extra_groups": [],
                "env": {**os.environ, "HOME": str(self.root), "USER": "postgres"},
                "cwd": str(self.root),
            }
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{Path(cmd[0]).name} failed ({done.returncode}): {done.stderr.strip()}\n{tail}"
            )

    def dsn(self, user: str = "postgres", database: str = "postgres") -> str:
        """A URL of the server for ``user`` (trust authentication: no password)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        """Stop the server and delete its directory (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(RuntimeError):
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)


_shared: PostgresServer | None = None
_lock = threading.Lock()


def shared_server() -> PostgresServer:
    """The test process's server, started on first use and stopped at exit."""
    global _shared
    with _lock:
        if _shared is None or _shared._stopped:
            _shared = PostgresServer()
            atexit.register(_shared.stop)
        return _shared


def stop_shared_server() -> None:
    """Stop the shared server now (end of the test session)."""
    with _lock:
        if _shared is not None:
            _shared.stop()


def _pg_type(t: pa.DataType) -> str:
    if pa.types.is_integer(t):
        return "BIGINT"
    if pa.types.is_floating(t):
        return "DOUBLE PRECISION"
    if pa.types.is_boolean(t):
        return "BOOLEAN"
    return "TEXT"


def load_table(dsn: str, name: str, data: pa.Table, *, schema: str = "public") -> None:
    """Create ``schema.name`` and load ``data`` with binary ``COPY`` (as its owner)."""
    import psycopg
    from psycopg import sql

    table = sql.Identifier(schema, name)
    cols = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.type)))
        for f in data.schema
    )
    types = [_pg_type(f.type).split()[0].lower().replace("double", "float8") for f in data.schema]
    with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        cur.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(table, cols))
        with cur.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(table)) as copy:
            copy.set_types(types)
            for batch in data.to_batches(max_chunksize=65536):
                for row in zip(*(c.to_pylist() for c in batch.columns), strict=True):
                    copy.write_row(row)
        cur.execute(sql.SQL("ANALYZE {}").format(table))


def create_reader(
    dsn: str, role: str, tables: Iterable[tuple[str, str]], *, temporary: bool = False
) -> None:
    """A login role granted SELECT on ``tables`` (``(schema, name)`` pairs) and nothing else.

    ``temporary`` also grants TEMPORARY on the database (samples and public tables need it).
    """
    import psycopg
    from psycopg import sql

    r = sql.Identifier(role)
    with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
        cur.execute("SELECT current_database()")
        row = cur.fetchone()
        assert row is not None
        db = sql.Identifier(str(row[0]))
        cur.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,))
        if cur.fetchone() is None:
            cur.execute(sql.SQL("CREATE ROLE {} LOGIN").format(r))
        # PUBLIC holds TEMPORARY on new databases by default: take it away, grant it back
        # to the role only when asked.
        cur.execute(sql.SQL("REVOKE TEMPORARY ON DATABASE {} FROM PUBLIC").format(db))
        grant = "GRANT" if temporary else "REVOKE"
        preposition = "TO" if temporary else "FROM"
        cur.execute(sql.SQL(f"{grant} TEMPORARY ON DATABASE {{}} {preposition} {{}}").format(db, r))
        for schema, name in tables:
            cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), r))
            cur.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(sql.Identifier(schema, name), r))


def load_postgres() -> Any:
    """The conformance suite's ``load`` for PostgreSQL (see conftest.py's docstring).

    Starts (or reuses) the shared server; skips only when psycopg is not installed (the
    ``postgres`` extra). Each engine is a new connection to it; the suite's frames are
    loaded with COPY into that connection's temporary tables.
    """
    import pytest

    pytest.importorskip("psycopg")
    from deniable.engines.postgres import PostgresEngine

    server = shared_server()

    def factory(tmp_dir: Path) -> PostgresEngine:
        del tmp_dir  # the engine's scratch tables are temporary tables of its connection
        return PostgresEngine(server.dsn())

    return factory

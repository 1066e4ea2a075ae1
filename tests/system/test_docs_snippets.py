"""Every fenced block of README.md and docs/*.md runs in the test suite, so the docs cannot drift.

The blocks are extracted from the files as they are now (issue 23, "The first hour"):

* **Python** (```` ```python ````): per file, in order, in one namespace, in a temporary
  working directory holding the files the text names (``tests/fixtures/docs/<doc>/`` and the
  service's example configuration). README.md's blocks are run by
  ``tests/unit/test_readme.py`` and, for the client block, by
  ``tests/system/test_client_notebook.py`` against a real server; the other files' blocks run
  here (``docs/client.md`` against a real ``deniable serve``, ``docs/spark.md`` on a local
  Spark). Where a block names something that cannot exist in a test (a cluster's master URL,
  a bucket, a server's public URL) it runs with a *substitution*: the text as written, the
  text as run and why, and the text as written must still be in the block. Names a block
  takes as given (a token the prose says you need, a data frame it says you have) are
  *givens*, listed with the same care.
* **Shell** (```` ``` ````, ``bash``, ``sh``, ``shell``, ``console``): every command line,
  through the real command line (the venv's ``deniable`` entry point), block by block in a
  temporary directory with a ``service.toml`` copied from
  ``tests/fixtures/service/example.toml`` and the files the commands name. A documented
  alternation (``deniable ledger history|verify --config …``) runs once per alternative;
  ``deniable serve`` is started on a free port, checked to come up and answer, and
  stopped. A command exits 0 unless its comment documents another code (``# exits 3``).
* **TOML** (```` ```toml ````): each block has its own check in :data:`TOML_CHECKS` (a
  configuration is loaded and, for a graph dataset, served and asked the queries the text
  shows).
* **Commands in the prose** (```` `deniable …` ```` spans): a complete one (options, no
  placeholder such as ``PATH`` or ``…``) runs like a block's command; a reference
  (``deniable ledger verify``, ``deniable analyst add NAME``) must name a real command and
  real options of the CLI.

Every command (blocks and prose, slow blocks included) is also parsed in-process by the CLI's
own parser in :func:`test_every_command_parses` (a fraction of a second), so a usage error is
caught by the default suite even where running the command is ``slow``.

:func:`test_every_block_is_run_or_skipped_with_a_reason` fails on a block that nothing here
(or the two tests above) runs and that neither :data:`SKIPPED_BLOCKS` nor
:data:`SKIPPED_COMMANDS` lists with a reason, so a new block cannot go silently unrun;
:func:`test_every_skip_and_substitution_is_used` fails on a stale entry. ``-m slow`` adds
:data:`SLOW_BLOCKS` and ``docs/spark.md`` (a JVM of its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import click
import httpx
import pytest
from _server_helpers import ROOT, START_TIMEOUT, Server, free_port, running

from deniable.cli.main import main
from deniable.ledger import Ledger

DOCS: tuple[Path, ...] = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SERVICE = ROOT / "tests" / "fixtures" / "service"
FIXTURES = ROOT / "tests" / "fixtures" / "docs"
SHELL = frozenset({"", "bash", "sh", "shell", "console"})
CLIENT = "import deniable.client"
"""README.md's Python blocks with this line run against a server in test_client_notebook.py."""

pytestmark = pytest.mark.timeout(900)  # servers wait on readiness (START_TIMEOUT)


# --------------------------------------------------------------------------- extraction


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: the file it is in, the line of its opening fence, its language."""

    doc: str
    line: int
    lang: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def first(self) -> str:
        """Its first non-blank line without a trailing comment (how the checks name a block)."""
        line = next((s for s in self.text.splitlines() if s.strip()), "")
        return " ".join(line.split(" #")[0].split())


FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", flags=re.S | re.M)


def blocks(doc: Path | None = None) -> list[Block]:
    """The fenced blocks of one documentation file (or of all of them), in order."""
    out = []
    for path in DOCS if doc is None else (doc,):
        text = path.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            lang = m.group(1).strip().lower()
            out.append(Block(path.relative_to(ROOT).as_posix(), line, lang, m.group(2)))
    return out


@dataclasses.dataclass(frozen=True)
class Command:
    """One command of a shell block, as written (continuations joined, comment kept)."""

    block: Block
    text: str
    argv: tuple[str, ...]
    expect: int

    @property
    def written(self) -> str:
        """The command without its comment, whitespace normalised (the skip lists' key)."""
        return shlex.join(self.argv)


ALTERNATION = re.compile(r"[A-Za-z][\w-]*(?:\|[A-Za-z][\w-]*)+")
EXIT = re.compile(r"#.*\bexits?\s+(?:with\s+)?(?:code\s+)?(\d+)\b")


PROMPT = re.compile(r"^[\w.-]*\$ ")
"""A prompt before a command (``$ ``, or ``hosta$ `` naming the host it runs on)."""


def _split(text: str) -> list[list[str]]:
    """The commands of one line as a shell splits them (``;`` separates, ``#`` comments)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";")
    lexer.whitespace_split = True
    out: list[list[str]] = [[]]
    for token in lexer:
        if token == ";":
            out.append([])
        else:
            out[-1].append(token)
    return [argv for argv in out if argv]


def commands(block: Block) -> list[Command]:
    """The commands of a shell block, one per alternative of a documented alternation.

    ``console`` blocks run only their prompted lines (the rest is output); elsewhere a
    prompt (``hosta$ ``) is dropped.
    """
    lines = block.text.splitlines()
    if block.lang == "console":
        lines = [s for s in lines if PROMPT.match(s)]
    lines = [PROMPT.sub("", s) for s in lines]
    logical: list[str] = []
    pending = ""
    for raw in lines:
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        logical.append(pending + raw)
        pending = ""
    if pending:
        logical.append(pending)
    out: list[Command] = []
    for text in logical:
        m = EXIT.search(text)
        expect = int(m.group(1)) if m else 0
        for argv in _split(text):
            variants: list[list[str]] = [[]]
            for token in argv:
                # An unquoted `a|b|c` is an alternation written for humans (a pipe would
                # need spaces around it to be one in these docs); quoted SQL never matches.
                bare = re.search(rf"(^|\s){re.escape(token)}(\s|$)", text)
                if ALTERNATION.fullmatch(token) and bare:
                    variants = [[*v, alt] for v in variants for alt in token.split("|")]
                else:
                    variants = [[*v, token] for v in variants]
            out.extend(Command(block, text.strip(), tuple(v), expect) for v in variants)
    return out


# --------------------------------------------------------------------------- what runs where

SKIPPED_COMMANDS: Mapping[tuple[str, str], str] = {
    ("README.md", "make demo"): (
        "installs .venv with pip from the network (minutes) and then runs "
        "`python -m deniable.demo`; that last step is tests/unit/test_demo.py (demo.main())"
    ),
    ("README.md", "make test"): "runs this very test suite (it would run itself)",
    ("README.md", "createdb -h db.internal deniable"): (
        "an administrator's command on the database host; the test makes a database of that "
        "name on its own PostgreSQL server instead (_postgres_configs)"
    ),
    ("README.md", "createuser -h db.internal deniable_svc"): (
        "an administrator's command on the database host; the test makes the role on its "
        "own PostgreSQL server instead (_postgres_configs)"
    ),
    ("README.md", "scp /var/lib/deniable/ledger.anchor hostb:/var/lib/deniable/"): (
        "copies the anchor to a second machine; the test's two hosts are processes of one "
        "machine that share the working directory, anchor included"
    ),
    ("docs/spark.md", "pip install 'deniable[spark]'"): (
        "installs from a package index (network); PySpark is in the dev extras this suite "
        "runs with, and the block below runs on it"
    ),
}
"""Commands that are kept in the docs but not run: (file, command as written) → why."""


@dataclasses.dataclass(frozen=True)
class Substitution:
    """Text of a Python block that cannot run in a test, what runs instead, and why.

    ``run`` may name ``{tmp}`` (the working directory) and ``{url}`` (the test server).
    """

    written: str
    run: str
    why: str


@dataclasses.dataclass(frozen=True)
class PythonDoc:
    """How one documentation file's Python blocks run (none of it changes what they say)."""

    substitutions: tuple[Substitution, ...] = ()
    givens: Callable[[Path], dict[str, object]] | None = None
    """Names the text takes as given (``token``, ``frame``), built in the working directory."""
    fixtures: tuple[str, ...] = ()
    """Directories under tests/fixtures/docs whose files are copied to the working directory."""
    server: bool = False
    """Start ``deniable serve`` on tests/fixtures/service/example.toml (with an analyst)."""
    spark: bool = False
    slow: bool = False
    charges: tuple[tuple[str, int], ...] = ()
    """(session variable, releases its budget must show afterwards): the calls were charged."""
    served_charges: int | None = None
    """With ``server``: the charges the server's ledger must hold for ``students`` after."""


def _a_frame(tmp: Path) -> dict[str, object]:
    import pandas as pd

    del tmp
    return {"frame": pd.DataFrame({"x": range(1000)})}  # "a pandas DataFrame you have"


def _people_frame(tmp: Path) -> dict[str, object]:
    import pandas as pd

    people = pd.read_csv(tmp / "people.csv")
    # edges.parquet: "any source add_table takes" — the fixture's edge list as Parquet
    pd.read_csv(tmp / "friends.csv").to_parquet(tmp / "edges.parquet")
    return {"people_frame": people}


def _spark_events(tmp: Path) -> dict[str, object]:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(23)  # test data only
    n = 3000
    events = pd.DataFrame(
        {
            "user_id": rng.integers(0, 400, n),
            "category": rng.integers(0, 50, n),
            "value": np.round(rng.uniform(0, 120, n), 2),
        }
    )
    (tmp / "events").mkdir()
    events.to_parquet(tmp / "events" / "part-0.parquet")
    return {}


PYTHON_DOCS: Mapping[str, PythonDoc] = {
    "docs/accounting.md": PythonDoc(givens=_a_frame, charges=(("s", 2),)),
    "docs/graphs.md": PythonDoc(givens=_people_frame, fixtures=("graphs",), charges=(("s", 10),)),
    "docs/client.md": PythonDoc(
        substitutions=(
            Substitution(
                '"https://dp.example.org"', '"{url}"', "the test's own server on loopback"
            ),
        ),
        server=True,  # and the given `token`: "you need the server's URL and a token"
        # `client.sql` and the builder's `.run` are charged; the retry example asks the
        # same question again (a free replay); accuracy and budget_for are free
        served_charges=2,
    ),
    "docs/spark.md": PythonDoc(
        substitutions=(
            Substitution(
                '.master("spark://spark-master:7077")',
                '.master("local[2]")',
                "no cluster in a test: the suite's local Spark (tests/conformance/_spark.py)",
            ),
            Substitution(
                '.config("spark.sql.shuffle.partitions", "400")',
                '.config("spark.sql.shuffle.partitions", "2")',
                "the block reuses the suite's shared 2-core session; 400 is for a cluster",
            ),
            Substitution(
                'ledger="/secure/ledger.db"',
                'ledger="ledger.db"',
                "a ledger in the test's working directory",
            ),
            Substitution(
                '"s3a://bucket/warehouse/events/"',
                '"{tmp}/events/"',
                "no bucket in a test: a local directory of Parquet files of the same columns",
            ),
        ),
        givens=_spark_events,
        spark=True,
        charges=(("session", 1),),
        # A JVM of its own (~10 s) and a 50-key query on it: 20-30 s on 2 cores, a third of
        # this file's budget; the Spark parity and engine tests cover the engine by default.
        slow=True,
    ),
}
"""docs/*.md files with Python blocks and how they run (a file not listed runs plainly)."""


# --------------------------------------------------------------------------- classification


SKIPPED_BLOCKS: Mapping[tuple[str, str], str] = {}
"""Whole blocks kept in the docs but not run (a remote host, a real PostgreSQL URL…):
(file, first line as :attr:`Block.first` gives it) → why. None today: every block runs."""


def runner(block: Block) -> str | None:
    """What runs ``block`` (a test's name, or 'skipped: why'); None: nothing does."""
    if (block.doc, block.first) in SKIPPED_BLOCKS:
        return "skipped: " + SKIPPED_BLOCKS[block.doc, block.first]
    if block.lang == "python":
        if block.doc == "README.md":
            if CLIENT in block.text:
                return "tests/system/test_client_notebook.py::test_the_readme_client_example_runs"
            return "tests/unit/test_readme.py::test_readme_examples_run"
        slow = PYTHON_DOCS.get(block.doc, PythonDoc()).slow
        return f"test_python_blocks_run[{block.doc}]" + (" (-m slow)" if slow else "")
    if block.lang in SHELL:
        cmds = commands(block)
        if cmds and all((block.doc, c.written) in SKIPPED_COMMANDS for c in cmds):
            why = (f"`{c.written}`: {SKIPPED_COMMANDS[block.doc, c.written]}" for c in cmds)
            return "skipped: " + "; ".join(why)
        slow = (block.doc, block.first) in SLOW_BLOCKS or _needs_postgres(block)
        name = f"test_shell_block_runs[{block.name}]" + (" (-m slow)" if slow else "")
        if _many_workers(block) and not slow:
            name = f"test_shell_block_runs[{block.name}-one-worker] (as written: -m slow)"
        return name if cmds else None
    check = TOML_CHECKS.get((block.doc, block.first)) if block.lang == "toml" else None
    return None if check is None else f"test_toml_block[{block.name}]"


# --------------------------------------------------------------------------- running commands


def _deniable() -> list[str]:
    """The venv's ``deniable`` entry point (``python -m deniable`` without one)."""
    script = Path(sys.executable).parent / "deniable"
    return [str(script)] if script.exists() else [sys.executable, "-m", "deniable"]


def _workdir(tmp: Path, doc: str) -> Path:
    """A working directory with service.toml and the files the docs name."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("students.csv", "schools.csv"):
        shutil.copy(SERVICE / name, tmp / name)
    shutil.copy(SERVICE / "example.toml", tmp / "service.toml")
    stem = Path(doc).stem
    if (FIXTURES / stem).is_dir():
        for f in (FIXTURES / stem).iterdir():
            shutil.copy(f, tmp / f.name)
    return tmp


@contextlib.contextmanager
def _serving(argv: tuple[str, ...], tmp: Path) -> Iterator[Server]:
    """Run a documented ``deniable serve`` (its --port replaced by a free one) until it
    answers (a short check that it comes up: one worker of several is enough); stop it on
    exit (SIGTERM to its process group, then SIGKILL). A port taken between the choice and
    the bind (tests run in parallel) is retried on a fresh port, as _server_helpers does.
    """
    for _ in range(3):
        server = _start(argv, tmp)
        if server is not None:
            break
    else:
        raise AssertionError(f"{shlex.join(argv)}: no free port in 3 tries")
    try:
        yield server
    finally:
        server.stop()


def _start(argv: tuple[str, ...], tmp: Path) -> Server | None:
    args = list(argv)
    port = free_port()
    if "--port" in args:
        args[args.index("--port") + 1] = str(port)
    else:
        args += ["--port", str(port)]
    log = tmp / "serve.log"
    start = log.stat().st_size if log.exists() else 0
    with log.open("ab") as out:
        process = subprocess.Popen(
            [*_deniable(), *args[1:]],
            cwd=tmp,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(process, port, log)
    deadline = time.monotonic() + START_TIMEOUT  # waits on readiness; this bounds a hang
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                text = log.read_text()[start:]
                if "address already in use" in text.lower():
                    return None
                raise AssertionError(f"{shlex.join(argv)} exited:\n{text[-3000:]}")
            try:
                if httpx.get(f"{server.url}/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError(f"{shlex.join(argv)} did not answer:\n{log.read_text()[-3000:]}")
    except BaseException:
        server.stop()
        raise
    return server


TOKEN = re.compile(r"\b(dnb_[A-Za-z0-9_-]{20,})")
"""A bearer token as `deniable analyst add` prints it."""


def _serve(cmd: Command, tmp: Path, state: dict[str, str]) -> str:
    """Start the documented ``deniable serve``; its API answers (with the token an earlier
    ``deniable analyst add`` of the block printed, when there was one); stop it.
    """
    with _serving(cmd.argv, tmp) as server:
        anonymous = httpx.get(f"{server.url}/v1/datasets", timeout=30)
        assert anonymous.status_code == 401, anonymous.text
        if "token" in state:
            auth = {"Authorization": f"Bearer {state['token']}"}
            datasets = httpx.get(f"{server.url}/v1/datasets", headers=auth, timeout=30)
            assert datasets.status_code == 200, datasets.text
    return server.log.read_text()


def _run(cmd: Command, tmp: Path, state: dict[str, str] | None = None) -> str:
    """Run one command of the docs in ``tmp``; assert its documented exit code; its output.

    ``state`` carries what a block's earlier commands printed (a token) to later ones.
    """
    state = {} if state is None else state
    if cmd.argv[0] != "deniable":
        raise AssertionError(
            f"{cmd.block.name}: no runner for {cmd.text!r}; run it here or add it to "
            "SKIPPED_COMMANDS with the reason"
        )
    if cmd.argv[1:2] == ("serve",):
        return _serve(cmd, tmp, state)
    result = subprocess.run(
        [*_deniable(), *cmd.argv[1:]], cwd=tmp, capture_output=True, text=True, timeout=240
    )
    output = result.stdout + result.stderr
    assert result.returncode == cmd.expect, (
        f"{cmd.block.name}: {shlex.join(cmd.argv)} exited {result.returncode} "
        f"(the docs say {cmd.expect}):\n{output[-3000:]}"
    )
    assert "Traceback" not in output, output[-3000:]
    if cmd.argv[1:3] == ("analyst", "add") and (m := TOKEN.search(result.stdout)):
        state["token"] = m.group(1)
    return output


POSTGRES_CONFIGS = frozenset({"owner.toml", "host.toml"})
"""Configurations README.md's PostgreSQL-ledger section names: a block whose commands use
them runs on a PostgreSQL server of its own (tests/conformance/_postgres.py), with
``-m slow`` (a server, then two hosts of four workers each: 30-40 s on 2 cores;
tests/system/test_ledger_postgres_hosts.py runs the same set-up by default, and
test_every_command_parses parses the block's commands by default)."""


def _needs_postgres(block: Block) -> bool:
    return any(a in POSTGRES_CONFIGS for c in commands(block) for a in c.argv)


def _postgres_block(doc: str) -> tuple[Block, dict[str, Any]]:
    """The doc's TOML block naming a ``postgresql://`` ledger, and its parsed keys."""
    (block,) = [b for b in blocks(ROOT / doc) if b.lang == "toml" and "postgresql://" in b.text]
    return block, tomllib.loads(block.text)


def _example_without_ledger() -> str:
    """tests/fixtures/service/example.toml without its ``ledger =`` line (a block gives it)."""
    text = (SERVICE / "example.toml").read_text()
    return re.sub(r"^ledger = .*\n", "", text, count=1, flags=re.M)


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    """The module's throwaway PostgreSQL server (started on first use, stopped at the end)."""
    sys.path.insert(0, str(ROOT / "tests" / "conformance"))
    try:
        pg = importlib.import_module("_postgres")
    finally:
        sys.path.remove(str(ROOT / "tests" / "conformance"))
    yield pg.shared_server()
    pg.stop_shared_server()


def _postgres_configs(server: Any, work: Path, doc: str) -> None:
    """owner.toml and host.toml as the docs describe them, on the test's PostgreSQL.

    The database and the service's role get the names of the docs' URL (what the skipped
    `createdb` and `createuser` lines do on a real database host); host.toml is the docs'
    TOML block with that URL pointed at the test server and the anchor in the working
    directory, then example.toml's datasets; owner.toml is the same with the owner's URL.
    """
    psycopg = pytest.importorskip("psycopg")
    block, written = _postgres_block(doc)
    url = urllib.parse.urlsplit(written["ledger"])
    role, database = url.username or "", url.path.lstrip("/")
    with psycopg.connect(server.dsn(), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{database}"')
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone():
            admin.execute(f'CREATE ROLE "{role}" LOGIN')
    anchor = str(work / "ledger.anchor")
    for name, user in (("host.toml", role), ("owner.toml", "postgres")):
        text = block.text.replace(written["ledger"], server.dsn(user=user, database=database))
        text = text.replace(written["anchor"], anchor)
        (work / name).write_text(text + "\n" + _example_without_ledger())


SLOW_BLOCKS: Mapping[tuple[str, str], str] = {
    ("README.md", "deniable attack averaging"): (
        "five attack simulations, 9-21 s on 2 cores; by default every command of the block is "
        "parsed by test_every_command_parses and tests/system/test_attack_cli.py runs two of "
        "the attacks as processes"
    ),
}
"""Shell blocks run only with -m slow: (file, first line) → why."""


ONE_WORKER = (
    "the default run starts a documented multi-worker `deniable serve` with one worker: its "
    "workers import in parallel (10-20 s to the first answer on 2 cores); -m slow runs the "
    "block as written, and tests/system/test_server_processes.py runs 4 workers by default"
)


def _many_workers(block: Block) -> bool:
    return any(
        c.argv[1:2] == ("serve",)
        and "--workers" in c.argv
        and c.argv[c.argv.index("--workers") + 1] != "1"
        for c in commands(block)
    )


def _shell_params() -> list[Any]:
    out = []
    for b in blocks():
        if b.lang not in SHELL:
            continue
        slow = (b.doc, b.first) in SLOW_BLOCKS or _needs_postgres(b)
        if _many_workers(b) and not slow:  # ONE_WORKER
            out.append(pytest.param(b, False, id=f"{b.name}-one-worker"))
            out.append(pytest.param(b, True, id=b.name, marks=[pytest.mark.slow]))
        else:
            out.append(pytest.param(b, True, id=b.name, marks=[pytest.mark.slow] if slow else []))
    return out


def _one_worker(cmd: Command) -> Command:
    """``cmd`` with ``--workers N`` of a ``serve`` made ``--workers 1`` (see ONE_WORKER)."""
    if cmd.argv[1:2] != ("serve",) or "--workers" not in cmd.argv:
        return cmd
    argv = list(cmd.argv)
    argv[argv.index("--workers") + 1] = "1"
    return dataclasses.replace(cmd, argv=tuple(argv))


@pytest.mark.parametrize(("block", "as_written"), _shell_params())
def test_shell_block_runs(
    block: Block, as_written: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every command of the block runs through the real CLI and exits as documented."""
    if (block.doc, block.first) in SKIPPED_BLOCKS:
        pytest.skip(SKIPPED_BLOCKS[block.doc, block.first])
    work = _workdir(tmp_path, block.doc)
    if _needs_postgres(block):
        _postgres_configs(request.getfixturevalue("postgres"), work, block.doc)
    state: dict[str, str] = {}
    ran = 0
    for cmd in commands(block):
        if (block.doc, cmd.written) in SKIPPED_COMMANDS:
            continue
        _run(cmd if as_written else _one_worker(cmd), work, state)
        ran += 1
        if cmd.argv[1:3] == ("analyst", "add"):
            assert "token" in state, "`deniable analyst add` printed no token"
    if ran == 0:
        pytest.skip(runner(block) or "no command")


def _parse(argv: tuple[str, ...]) -> None:
    """Parse ``argv`` with the CLI's own parser, running nothing (a usage error raises)."""
    command: click.Command = main
    name, args = "deniable", list(argv[1:])
    parent = None
    while isinstance(command, click.Group):
        ctx = click.Context(command, info_name=name, parent=parent)
        assert args, f"{shlex.join(argv)}: no subcommand"
        sub = command.get_command(ctx, args[0])
        assert sub is not None, f"{shlex.join(argv)}: no command {args[0]!r}"
        parent, command, name, args = ctx, sub, args[0], args[1:]
    with command.make_context(name, args, parent=parent):  # validates; invokes nothing
        pass


def test_every_command_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command of the docs (blocks and prose), slow blocks included, parses as written."""
    parsed = 0
    for b in blocks():
        if b.lang not in SHELL:
            continue
        work = _workdir(tmp_path / f"b{b.line}-{Path(b.doc).stem}", b.doc)
        monkeypatch.chdir(work)  # options that name existing files are checked
        for name in POSTGRES_CONFIGS:  # written by _postgres_configs where it runs
            (work / name).touch()
        for c in commands(b):
            if (b.doc, c.written) not in SKIPPED_COMMANDS:
                _parse(c.argv)
                parsed += 1
    for inline in inline_commands():
        if not inline.reference:
            work = _workdir(tmp_path / f"i{parsed}", inline.doc)
            for name in INLINE_FIXTURES.get(inline.doc, ()):
                shutil.copy(FIXTURES / name, work / Path(name).name)
            if inline.argv[1:2] == ("serve",):
                (work / "config.toml").touch()
            monkeypatch.chdir(work)
            _parse(inline.argv)
            parsed += 1
    assert parsed >= 20, parsed
    with pytest.raises(click.UsageError):  # the check can fail: README's old ledger line
        _parse(("deniable", "ledger", "backup", "--config", "service.toml"))


# --------------------------------------------------------------------------- inline commands


@dataclasses.dataclass(frozen=True)
class Inline:
    """A ``deniable …`` code span of the prose (outside fenced blocks)."""

    doc: str
    text: str
    argv: tuple[str, ...]

    @property
    def reference(self) -> bool:
        """Names a command without running it: no option, or a placeholder (PATH, NAME, …)."""
        placeholder = any(a in ("…", "...") or (a.isupper() and a.isalpha()) for a in self.argv)
        return placeholder or not any(a.startswith("--") for a in self.argv)


SPAN = re.compile(r"(?<!`)`(deniable [^`]+)`(?!`)")


def inline_commands(doc: Path | None = None) -> list[Inline]:
    """The ``deniable`` code spans of the prose of one file (or all), line breaks joined."""
    out = []
    for path in DOCS if doc is None else (doc,):
        prose = FENCE.sub("", path.read_text())
        for m in SPAN.finditer(prose):
            text = " ".join(m.group(1).split())
            out.append(Inline(path.relative_to(ROOT).as_posix(), text, tuple(shlex.split(text))))
    return out


INLINE_RUN_ELSEWHERE: Mapping[tuple[str, str], str] = {
    ("docs/graphs.md", "deniable serve --config config.toml"): (
        "serves the TOML block of graphs.md: test_toml_block runs it with that block"
    ),
}
INLINE_FIXTURES: Mapping[str, tuple[str, ...]] = {"README.md": ("graphs/friends.csv",)}
"""Fixture files an inline command names beyond its file's own directory."""


def _inline_params() -> list[Any]:
    return [
        pytest.param(c, id=f"{c.doc}:{c.text[:60]}")
        for c in inline_commands()
        if not c.reference and (c.doc, c.text) not in INLINE_RUN_ELSEWHERE
    ]


@pytest.mark.parametrize("inline", _inline_params())
def test_inline_command_runs(inline: Inline, tmp_path: Path) -> None:
    """A complete command written in the prose runs through the real CLI and exits 0."""
    work = _workdir(tmp_path, inline.doc)
    for name in INLINE_FIXTURES.get(inline.doc, ()):
        shutil.copy(FIXTURES / name, work / Path(name).name)
    block = Block(inline.doc, 0, "", inline.text)
    _run(Command(block, inline.text, inline.argv, 0), work)


def _check_reference(argv: tuple[str, ...]) -> None:
    """``argv`` names a command of the CLI, its options, and no more arguments than it takes
    (a placeholder such as ``PATH`` stands for one; ``…`` for anything)."""
    command: click.Command = main
    ctx = click.Context(main, info_name="deniable")
    rest = list(argv[1:])
    while isinstance(command, click.Group) and rest and rest[0] not in ("…", "..."):
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"`{shlex.join(argv)}`: no command {rest[0]!r}"
        ctx, command, rest = click.Context(sub, info_name=rest[0], parent=ctx), sub, rest[1:]
    if "…" in rest or "..." in rest:
        rest = [a for a in rest if a.startswith("--")]  # only its options can be checked
    options = {o: p for p in command.params if isinstance(p, click.Option) for o in p.opts}
    positional = []
    values = iter(rest)
    for a in values:
        if a.startswith("-"):
            option = options.get(a.split("=")[0])
            assert option is not None, f"`{shlex.join(argv)}`: {command.name} has no {a}"
            if "=" not in a and not option.is_flag and not option.count:
                next(values, None)  # its value
        else:
            positional.append(a)
    arguments = [p for p in command.params if isinstance(p, click.Argument)]
    if not any(p.nargs == -1 for p in arguments):
        most = sum(p.nargs for p in arguments)
        assert len(positional) <= most, f"`{shlex.join(argv)}`: {command.name} takes {most}"


def test_inline_references_name_real_commands() -> None:
    """Every ``deniable …`` the prose names is a command of the CLI, with its options and
    arguments (``deniable serve CONFIG`` would fail: serve takes ``--config``)."""
    for inline in inline_commands():
        _check_reference(inline.argv)
    with pytest.raises(AssertionError, match="takes 0"):
        _check_reference(("deniable", "serve", "CONFIG"))  # graphs.md before issue 23
    with pytest.raises(AssertionError, match="no command"):
        _check_reference(("deniable", "ledger", "restore"))


# --------------------------------------------------------------------------- running Python


def _substituted(block: Block, doc: PythonDoc, values: Mapping[str, str]) -> str:
    text = block.text
    for sub in doc.substitutions:
        if sub.written in text:
            text = text.replace(sub.written, sub.run.format(**values))
    return text


def _python_params() -> list[Any]:
    docs = sorted({b.doc for b in blocks() if b.lang == "python" and b.doc != "README.md"})
    out = []
    for d in docs:
        setup = PYTHON_DOCS.get(d, PythonDoc())
        out.append(pytest.param(d, id=d, marks=[pytest.mark.slow] if setup.slow else []))
    return out


@pytest.fixture
def spark_session() -> Iterator[None]:
    """The suite's one local Spark session (shared; the block's getOrCreate() returns it)."""
    sys.path.insert(0, str(ROOT / "tests" / "conformance"))
    try:  # the module other Spark tests import as `_spark`: one session per process
        importlib.import_module("_spark").local_spark()
    finally:
        sys.path.remove(str(ROOT / "tests" / "conformance"))
    yield


def _exec_blocks(
    doc: str, setup: PythonDoc, namespace: dict[str, object], values: dict[str, str]
) -> None:
    for block in blocks(ROOT / doc):
        if block.lang != "python" or (block.doc, block.first) in SKIPPED_BLOCKS:
            continue
        code = compile(_substituted(block, setup, values), block.name, "exec")
        exec(code, namespace)  # our own documentation, from this repository


@pytest.mark.parametrize("doc", _python_params())
def test_python_blocks_run(
    doc: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The file's Python blocks run in order, in one namespace, in a working directory."""
    from deniable.curator.session import Session

    setup = PYTHON_DOCS.get(doc, PythonDoc())
    work = _workdir(tmp_path, doc)
    for d in setup.fixtures:
        for f in (FIXTURES / d).iterdir():
            shutil.copy(f, work / f.name)
    monkeypatch.chdir(work)
    if setup.spark:
        request.getfixturevalue("spark_session")
    namespace: dict[str, object] = {"__name__": "docs"}
    if setup.givens is not None:
        namespace.update(setup.givens(work))
    values = {"tmp": str(work)}
    try:
        if setup.server:
            with Ledger(work / "ledger.db") as led:
                namespace["token"] = led.add_analyst("ann", role="analyst")  # "you need one"
            with running(work / "service.toml", workers=1, log=work / "server.log") as server:
                values["url"] = server.url
                _exec_blocks(doc, setup, namespace, values)
        else:
            _exec_blocks(doc, setup, namespace, values)
        for name, releases in setup.charges:
            session: Any = namespace[name]
            assert len(session.budget.history) == releases, session.budget
        if setup.served_charges is not None:
            with Ledger(work / "ledger.db") as led:
                history = led.history("students")
            assert len(history) == setup.served_charges, history
    finally:
        for value in namespace.values():
            if isinstance(value, Session):
                value.close()


# --------------------------------------------------------------------------- TOML blocks


def _check_response_time(block: Block, tmp: Path) -> None:
    """before-the-charge.md: each documented ``response_time`` form loads in example.toml.

    The block shows the default and, commented out, two alternatives; each is put in turn
    into tests/fixtures/service/example.toml's dataset and must load as a distinct policy.
    """
    from deniable.server.config import parse_config
    from deniable.server.timing import DEFAULT_RESPONSE_TIME

    del tmp
    lines = block.text.splitlines()
    forms = [s for s in lines if s.startswith("response_time")]
    forms += [s.lstrip("# ") for s in lines if s.startswith("# response_time")]
    assert len(forms) == 3, forms  # the default, the derived form, "off"
    base = tomllib.loads((SERVICE / "example.toml").read_text())
    policies = []
    for form in forms:
        fragment = tomllib.loads("\n".join([lines[0], form]))
        data: dict[str, Any] = {**base, "datasets": {**base["datasets"]}}
        data["datasets"]["students"] = {
            **base["datasets"]["students"],
            **fragment["datasets"]["students"],
        }
        policies.append(parse_config(data, base=SERVICE).datasets["students"].response_time)
    assert policies[0] == DEFAULT_RESPONSE_TIME, "the block calls its first form the default"
    assert len(set(policies)) == 3, policies
    assert not policies[2].enabled, '"off" turns the policy off'


def _check_graph_dataset(block: Block, tmp: Path) -> None:
    """graphs.md: the block, as config.toml, is served by the command the text names
    (``deniable serve --config config.toml``); the service lists the graph and answers the
    request the text shows and the node-table JOIN of the Python block.
    """
    doc = (ROOT / block.doc).read_text()
    (serve,) = [c for c in inline_commands(ROOT / block.doc) if c.argv[1:2] == ("serve",)]
    for name in ("friends.csv", "people.csv"):
        shutil.copy(FIXTURES / "graphs" / name, tmp / name)
    (tmp / "config.toml").write_text('ledger = "ledger.db"\n\n' + block.text)
    with Ledger(tmp / "ledger.db") as led:
        token = led.add_analyst("ann", role="analyst")
    # the request the prose shows: `POST /v1/datasets/social/query` with {"sql": …}
    m = re.search(r"`POST (/v1/datasets/\w+/query)` with `(\{.*?\})`", doc, flags=re.S)
    assert m, "graphs.md no longer shows the service's request"
    shown = json.loads(" ".join(m.group(2).split()))
    # and the node-table JOIN of the Python block (it needs `nodes_name` in the config)
    joins = re.findall(r'"(SELECT n\.city.*?)"\s*\n\s*"(GROUP BY n\.city)"', doc)
    assert joins, "graphs.md no longer shows the JOIN with the node table"
    bodies = [shown, {"sql": joins[0][0] + joins[0][1], "epsilon": 0.1}]
    with _serving(serve.argv, tmp) as server:
        info = httpx.get(
            f"{server.url}/v1/datasets/social",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert info.status_code == 200, info.text
        assert "friends" in info.text
        for body in bodies:
            r = httpx.post(
                f"{server.url}{m.group(1)}",
                json=body,
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
            )
            assert r.status_code == 200, (body, r.text)


def _check_postgres_ledger(block: Block, tmp: Path) -> None:
    """README.md's PostgreSQL ledger keys load as a service configuration: the URL as
    written (nothing connects at load time), the anchor moved to ``tmp`` (its directory
    must exist). The shell block after it runs them on a real server, ``slow``."""
    from deniable.server.config import parse_config

    written = tomllib.loads(block.text)
    data = {**tomllib.loads(_example_without_ledger()), **written}
    data["anchor"] = str(tmp / "ledger.anchor")
    config = parse_config(data, base=SERVICE)
    assert config.ledger == written["ledger"], config.ledger
    assert config.anchor == tmp / "ledger.anchor", config.anchor


TOML_CHECKS: Mapping[tuple[str, str], Callable[[Block, Path], None]] = {
    ("docs/before-the-charge.md", "[datasets.students]"): _check_response_time,
    ("docs/graphs.md", "[datasets.social]"): _check_graph_dataset,
    ("README.md", 'ledger = "postgresql://deniable_svc@db.internal:5432/deniable"'): (
        _check_postgres_ledger
    ),
}
"""TOML blocks and their checks: (file, first line) → check."""


@pytest.mark.parametrize(
    "block", [pytest.param(b, id=b.name) for b in blocks() if b.lang == "toml"]
)
def test_toml_block(block: Block, tmp_path: Path) -> None:
    check = TOML_CHECKS.get((block.doc, block.first))
    assert check is not None, f"{block.name}: no check for this TOML block (add one)"
    check(block, tmp_path)


# --------------------------------------------------------------------------- coverage


def test_every_block_is_run_or_skipped_with_a_reason() -> None:
    """No fenced block goes unrun without a reason written here."""
    found = blocks()
    assert len(found) >= 20, "the extraction found too few blocks: is the fence regex broken?"
    orphans = [f"{b.name} ({b.lang or 'plain'}): {b.first}" for b in found if runner(b) is None]
    assert not orphans, "blocks that nothing runs:\n" + "\n".join(orphans)
    assert runner(Block("x.md", 1, "yaml", "a: 1\n")) is None  # an unknown kind is an orphan
    # the README's Python blocks are run by the two tests runner() names: check that their
    # own selections are exactly the blocks attributed to them
    spec = importlib.util.spec_from_file_location(
        "_readme_test", ROOT / "tests" / "unit" / "test_readme.py"
    )
    assert spec is not None and spec.loader is not None
    readme_test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(readme_test)
    python = [b for b in found if b.doc == "README.md" and b.lang == "python"]
    assert readme_test._blocks() == [b.text for b in python if CLIENT not in b.text]
    assert len([b for b in python if CLIENT in b.text]) == 1  # test_client_notebook's `(block,)`
    for b in found:
        if b.lang in SHELL:
            for c in commands(b):
                assert c.argv[0] == "deniable" or (b.doc, c.written) in SKIPPED_COMMANDS, (
                    f"{b.name}: {c.text!r} is neither a deniable command nor skipped"
                )


def test_every_skip_and_substitution_is_used() -> None:
    """A skip or substitution whose text left the docs is stale: remove it."""
    written = {(b.doc, c.written) for b in blocks() if b.lang in SHELL for c in commands(b)}
    assert set(SKIPPED_COMMANDS) <= written, set(SKIPPED_COMMANDS) - written
    for doc, setup in PYTHON_DOCS.items():
        text = "".join(b.text for b in blocks(ROOT / doc) if b.lang == "python")
        for sub in setup.substitutions:
            assert sub.written in text, f"{doc}: {sub.written!r} is no longer in its blocks"
    firsts = {(b.doc, b.first) for b in blocks()}
    assert set(TOML_CHECKS) <= firsts, set(TOML_CHECKS) - firsts
    assert set(SLOW_BLOCKS) <= firsts, set(SLOW_BLOCKS) - firsts
    assert set(SKIPPED_BLOCKS) <= firsts, set(SKIPPED_BLOCKS) - firsts


def test_commands_are_extracted_as_written() -> None:
    """Continuations are joined, comments dropped, alternations expanded, exit codes read."""
    b = Block(
        "x.md",
        1,
        "",
        "deniable ledger history|verify --config s.toml   # both\n"
        'deniable query "SELECT a || b FROM t" \\\n'
        "    --epsilon 1   # exits 3 when the budget is spent\n",
    )
    got = [(c.argv, c.expect) for c in commands(b)]
    assert got == [
        (("deniable", "ledger", "history", "--config", "s.toml"), 0),
        (("deniable", "ledger", "verify", "--config", "s.toml"), 0),
        (("deniable", "query", "SELECT a || b FROM t", "--epsilon", "1"), 3),
    ]
    console = Block("x.md", 1, "console", "$ deniable budget\nsome output\n")
    assert [c.argv for c in commands(console)] == [("deniable", "budget")]
    hosts = Block("x.md", 1, "", "a; b c  # x; y\nhosta$ deniable serve\n")
    assert [c.argv for c in commands(hosts)] == [("a",), ("b", "c"), ("deniable", "serve")]


def test_report() -> None:
    """Counts of what runs where (printed with -s; asserts the counts add up)."""
    found = blocks()
    where = [runner(b) or "" for b in found]
    skipped = [w for w in where if w.startswith("skipped")]
    print(f"\n{len(found)} blocks; {len(found) - len(skipped)} run; {len(skipped)} skipped")
    for b, w in zip(found, where, strict=True):
        print(f"  {b.name:32} {b.lang or 'plain':7} {w}")
    assert all(where)

"""What every ``deniable`` command shares: exit codes, error reporting, ``--json``, progress.

Exit codes (the same for every command; also in ``deniable --help``):

=====  =====================================================================================
code   meaning
=====  =====================================================================================
0      success (``ledger verify``: the ledger is intact)
1      an error in the configuration, a parameter or an input file, or any other error
       (an :class:`~deniable.errors.InternalError` is reported as a bug in deniable)
2      the command line itself is wrong (click's usage errors: unknown option, missing
       argument)
3      the budget would be exceeded: nothing was spent and nothing released
4      the ledger is tampered (rolled back, replaced, edited) or cannot be read or written
5      the query was refused (unsafe, or SQL that does not parse or names unknown things):
       nothing was spent
=====  =====================================================================================

Errors print one line, ``error: <what happened and what to do>``, on standard error — never a
traceback, and never a data value: deniable's own messages are written not to contain any,
and the text of any other exception (which might quote a row) is not printed, only its type.
With ``--json`` the same error is also written to standard output as
``{"error": {"code": ..., "message": ..., "exit_code": ...}}``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import IntEnum
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click
from rich.console import Console
from rich.table import Table

from deniable.errors import (
    BudgetExceeded,
    DeniableError,
    InternalError,
    LedgerError,
    LedgerTampered,
    PrivacyWarning,
    SQLError,
    UnsafeQuery,
)

if TYPE_CHECKING:
    from deniable.accounting.loss import PrivacyLoss
    from deniable.ledger import Ledger
    from deniable.server.config import ServiceConfig

P = ParamSpec("P")
R = TypeVar("R")


class ExitCode(IntEnum):
    """The process exit codes of every ``deniable`` command (see the module docstring)."""

    OK = 0
    ERROR = 1
    USAGE = 2
    BUDGET_EXCEEDED = 3
    LEDGER = 4
    REFUSED = 5
    START_FAILED = 6


EXIT_CODES_HELP = """\b
Exit codes:
  0  success (ledger verify: the ledger is intact)
  1  configuration, parameter or input-file error (or any other error)
  2  command-line usage error (unknown option, missing argument)
  3  budget exceeded: nothing was spent or released
  4  ledger tampered, or the ledger cannot be read or written
  5  query refused (unsafe, or SQL that does not parse): nothing was spent
  6  serve: the service could not start (the cause is printed); nothing is served

\b
Every command takes --help; most take --json for scripts (errors included).
"""


class CommandFailed(Exception):
    """A failure the command itself detected, with its exit code and a stable error code."""

    def __init__(self, message: str, *, exit_code: ExitCode, code: str) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.code = code


CLI_REMEDIES: dict[str, str] = {
    "bounds": "pass --bounds {column}=LO:HI (a public range, never derived from the data; "
    "with --config the curator declares it)",
    "delta": "pass --delta (a δ > 0 for selecting the keys privately)",
    "public_keys": "pass --keys {column}=V1,V2,… (its public values; with --config the curator "
    "declares them)",
    "epsilon": "pass --epsilon",
    "rho": "pass --rho",
    "no_delta": "leave --delta out",
    "allow_change": "leave --budget out (the ledger keeps the cap it was first given)",
}
"""How the CLI words each :class:`~deniable.errors.Remedy` (its flags, not Python keywords)."""


def in_cli_terms(exc: DeniableError) -> str:
    """The error's message with its remedies worded as CLI flags (its own text without any).

    ``SUM(cost) needs clamping bounds: pass --bounds cost=LO:HI (…) (line 1, column 8)``.
    """
    if exc.problem is None or not exc.remedies:
        return str(exc)
    fixes = [CLI_REMEDIES[r.parameter].format(column=r.column) for r in exc.remedies]
    return f"{exc.problem}: {'; or '.join(fixes)}{exc.where}"


def classify(exc: BaseException) -> tuple[ExitCode, str, str]:
    """Map an exception to ``(exit code, stable error code, one-line message)``.

    The message is the exception's own text only for deniable's errors (written never to
    contain data values) and for file-system errors (a path and the system's reason);
    anything else is named by its type only.
    """
    if isinstance(exc, CommandFailed):
        return exc.exit_code, exc.code, exc.message
    if isinstance(exc, BudgetExceeded):
        return ExitCode.BUDGET_EXCEEDED, "budget_exceeded", str(exc)
    if isinstance(exc, LedgerError):
        code = "ledger_tampered" if isinstance(exc, LedgerTampered) else "ledger_error"
        return ExitCode.LEDGER, code, str(exc)
    if isinstance(exc, UnsafeQuery):
        code = "sql_error" if isinstance(exc, SQLError) else "unsafe_query"
        return ExitCode.REFUSED, code, in_cli_terms(exc)
    if isinstance(exc, InternalError):
        return ExitCode.ERROR, "internal_error", f"a bug in deniable: {exc} (nothing was released)"
    if isinstance(exc, DeniableError):
        from deniable.server.config import ConfigError

        code = "config_error" if isinstance(exc, ConfigError) else "invalid_parameter"
        return ExitCode.ERROR, code, in_cli_terms(exc)
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return ExitCode.ERROR, "io_error", f"{where}{exc.strerror or type(exc).__name__}"
    return (
        ExitCode.ERROR,
        "unexpected_error",
        (
            f"unexpected {type(exc).__name__} (its text is not shown: it might quote data); "
            "nothing more was released than what was printed before"
        ),
    )


def one_line(text: str) -> str:
    """``text`` on one line (newlines and runs of blanks become one space)."""
    return " ".join(text.split())


def report_error(exc: BaseException, *, as_json: bool) -> ExitCode:
    """Print ``exc`` as one line on standard error (and a JSON document with ``as_json``)."""
    exit_code, code, message = classify(exc)
    message = one_line(message)
    if as_json:
        doc = {"error": {"code": code, "message": message, "exit_code": int(exit_code)}}
        click.echo(json.dumps(doc))
    click.echo(f"error: {message}", err=True)
    return exit_code


def handles_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Run a command's body, turning errors into one line and the documented exit code.

    Warnings raised inside (a :class:`~deniable.errors.PrivacyWarning`, say) are printed as
    one ``warning:`` line each on standard error. Click's own exceptions (usage errors,
    ``--help``, aborts) pass through unchanged.
    """

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        as_json = bool(kwargs.get("as_json", False))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", PrivacyWarning)
            try:
                return func(*args, **kwargs)
            except (click.exceptions.Exit, click.Abort, click.ClickException):
                raise
            except Exception as exc:
                code = report_error(exc, as_json=as_json)
                raise click.exceptions.Exit(int(code)) from None
            finally:
                for w in caught:
                    click.echo(f"warning: {one_line(str(w.message))}", err=True)

    return wrapper


def json_option(func: Callable[P, R]) -> Callable[P, R]:
    """The ``--json`` flag (stored as ``as_json``)."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        default=False,
        help="Print a machine-readable JSON document instead of tables.",
    )(func)


def emit_json(doc: object) -> None:
    """Print ``doc`` as one JSON document on standard output (NaN becomes null)."""
    click.echo(json.dumps(_jsonable(doc), ensure_ascii=False))


def _jsonable(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Fraction):
        return str(value)
    return value


PIPED_WIDTH = 4096
"""Line width when standard output is not a terminal: wide enough that no table cell,
title or sentence is wrapped or truncated (a pipe or a file has no width to fit)."""


def console() -> Console:
    """A console on standard output for tables.

    On a terminal, tables fit its width. Anywhere else (a pipe, a file, a test runner) the
    output is plain text whose lines never wrap or truncate, whatever ``COLUMNS`` says, so
    what a script reads does not depend on a terminal's width.
    """
    con = Console(highlight=False, soft_wrap=False)
    if con.is_terminal:
        return con
    return Console(highlight=False, soft_wrap=False, width=PIPED_WIDTH)


def print_titled(out: Console, title: str, table: Table) -> None:
    """Print ``title`` on a line of its own (never wrapped to the table's width), then ``table``.

    A title that names a file path is longer than a narrow table; as a Rich table title it
    would be folded over several lines, so a reader (or a script) could not find it whole.
    """
    out.print(title, soft_wrap=True, markup=False)
    out.print(table)


def err_console() -> Console:
    """A console on standard error, for progress displays."""
    return Console(stderr=True, highlight=False)


@contextmanager
def progress(message: str) -> Iterator[None]:
    """A spinner on standard error while a step runs (invisible when stderr is not a terminal).

    Used around anything that may take more than a couple of seconds: reading a data file,
    running a query, opening a configuration's datasets.
    """
    con = err_console()
    if not con.is_terminal:
        yield
        return
    with con.status(message, spinner="dots"):
        yield


# -- values -----------------------------------------------------------------------------------


def _to_fraction(ctx: click.Context, param: click.Parameter, value: str | None) -> Fraction | None:
    """Read an option exactly: ``0.1`` is 1/10, ``1e-6`` is 10⁻⁶, ``1/3`` is a third."""
    if value is None:
        return None
    try:
        return Fraction(value.strip())
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"{value!r} is not a number", ctx=ctx, param=param) from None


def fraction_option(*decls: str, help: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """An option read as an exact fraction (None when absent)."""
    return click.option(
        *decls, type=str, default=None, callback=_to_fraction, metavar="NUMBER", help=help
    )


def make_loss(
    *, epsilon: Fraction | None, delta: Fraction | None, rho: Fraction | None, what: str
) -> PrivacyLoss:
    """The loss named by ``--epsilon``/``--delta``/``--rho`` (no default: one must be given).

    Raises:
        click.UsageError: none given, or ρ mixed with ε/δ, or δ without ε.
    """
    from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho

    if rho is not None:
        if epsilon is not None or delta is not None:
            raise click.UsageError(f"{what}: give either --rho, or --epsilon (and --delta)")
        return Rho(rho=rho)
    if epsilon is None:
        raise click.UsageError(f"{what}: give --epsilon (and --delta), or --rho")
    if delta is None:
        return Epsilon(epsilon=epsilon)
    return EpsilonDelta(epsilon=epsilon, delta=delta)


def loss_doc(loss: PrivacyLoss | None) -> dict[str, str] | None:
    """The exact JSON form of a loss (fractions as strings, e.g. ``"1/2"``), or None."""
    from deniable.query.answer import loss_to_json

    return None if loss is None else loss_to_json(loss)


def loss_text(loss: PrivacyLoss | None) -> str:
    """A loss for people: ``ε = 0.5``; ``—`` for none."""
    from deniable.query.answer import show_loss

    return "—" if loss is None else show_loss(loss)


def parse_bounds(
    items: Sequence[str], *, option: str = "--bounds"
) -> dict[str, tuple[Fraction, Fraction]]:
    """``col=lo:hi`` items as ranges (public choices, never read from the data).

    ``option`` names the flag in the message of a malformed item.
    """
    out: dict[str, tuple[Fraction, Fraction]] = {}
    for item in items:
        col, sep, rng = item.partition("=")
        lo, sep2, hi = rng.partition(":")
        try:
            if not (sep and sep2 and col.strip()):
                raise ValueError
            out[col.strip()] = (Fraction(lo.strip()), Fraction(hi.strip()))
        except (ValueError, ZeroDivisionError):
            raise click.BadParameter(
                f"{item!r}: write COLUMN=LOWER:UPPER, e.g. age=0:120", param_hint=option
            ) from None
    return out


def parse_keys(items: Sequence[str]) -> dict[str, list[object]]:
    """``col=v1,v2,…`` items as public key domains.

    Values are integers when all of a column's values are integers, else numbers when all are
    numbers, else text; quote a value (``"01"``) to keep it text.
    """
    out: dict[str, list[object]] = {}
    for item in items:
        col, sep, values = item.partition("=")
        if not (sep and col.strip() and values.strip()):
            raise click.BadParameter(
                f"{item!r}: write COLUMN=VALUE,VALUE,…, e.g. region=north,south",
                param_hint="--keys",
            )
        raw = [v.strip() for v in values.split(",")]
        out[col.strip()] = _typed_keys(raw)
    return out


def _typed_keys(raw: list[str]) -> list[object]:
    quoted = [len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"" for v in raw]
    if any(quoted):
        return [v[1:-1] if q else v for v, q in zip(raw, quoted, strict=True)]
    for kind in (int, float):
        try:
            return [kind(v) for v in raw]
        except ValueError:
            continue
    return list(raw)


# -- ledgers and configuration ---------------------------------------------------------------


if TYPE_CHECKING:  # click >= 8.2 makes ParamType generic; 8.1 (our floor) does not
    _ParamType = click.ParamType[Path | str, object]
else:
    _ParamType = click.ParamType


class LedgerLocation(_ParamType):
    """A ledger on the command line: a file, or a PostgreSQL URL.

    A file becomes a :class:`~pathlib.Path`; a ``postgresql://…`` URL stays a string (a Path
    would fold its ``//``).
    """

    name = "PATH|URL"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> Path | str:
        """The file's path, or the URL unchanged."""
        if isinstance(value, Path):
            return value
        text = str(value)
        if not text:
            self.fail("name a ledger file or a postgresql:// URL", param, ctx)
        return text if is_url(text) else Path(text)


LEDGER = LedgerLocation()
"""The type of every ``--ledger`` option."""


def config_options(func: Callable[P, R]) -> Callable[P, R]:
    """``--config FILE`` and ``--ledger PATH|URL`` (one of them names the ledger)."""
    func = click.option(
        "--ledger",
        "ledger_path",
        type=LEDGER,
        default=None,
        help="The ledger: a file, or a postgresql:// URL (instead of --config).",
    )(func)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        envvar="DENIABLE_CONFIG",
        help="The service configuration (TOML); its ledger is used. Env: DENIABLE_CONFIG.",
    )(func)


def is_url(location: Path | str) -> bool:
    """Whether ``location`` names a PostgreSQL ledger (a ``postgresql://`` URL), not a file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def ledger_location(
    config_path: Path | None, ledger_path: Path | str | None
) -> tuple[Path | str, Path | None]:
    """The ledger (a file, or a ``postgresql://`` URL as a string) and its anchor file.

    The ledger is named by ``--ledger``, or by the configuration given with ``--config``,
    which may also name the anchor (None: ``<ledger>.anchor`` for a file; for a URL, the
    PostgreSQL backend's default anchor file on this host). A URL is passed through
    unchanged (a :class:`~pathlib.Path` would fold its ``//``).

    Raises:
        click.UsageError: neither or both given.
        ConfigError: the configuration cannot be read.
    """
    if (config_path is None) == (ledger_path is None):
        raise click.UsageError("name the ledger with either --config FILE or --ledger PATH")
    if ledger_path is not None:
        return ledger_path, None  # a URL stays a string (LedgerLocation)
    assert config_path is not None
    config = load_config(config_path)
    location = config.ledger
    return (location if is_url(location) else Path(location)), config.anchor


def load_config(path: Path) -> ServiceConfig:
    """The service configuration at ``path`` (``deniable.server.config.load_config``)."""
    if not path.is_file():
        raise CommandFailed(
            f"no configuration file at {str(path)!r}",
            exit_code=ExitCode.ERROR,
            code="config_error",
        )
    from deniable.server.config import load_config as load

    return load(path)


def open_ledger(
    path: Path | str,
    *,
    anchor: Path | None = None,
    create: bool = False,
    read_only: bool = False,
) -> Ledger:
    """Open the ledger at ``path`` (a file or a ``postgresql://`` URL) with its anchor.

    The anchor defaults to ``<path>.anchor`` for a file and to the PostgreSQL backend's
    default for a URL. Unless ``create``, a missing ledger file is an error rather than a
    new empty file — except when its anchor exists: then the ledger was deleted, and opening
    it lets the ledger itself report the tampering. A URL is not checked here: the database
    answers for itself. ``read_only`` opens without writing anything (``ledger verify``,
    ``history``): a deleted ledger is then reported rather than recreated.
    """
    from deniable.ledger import Ledger

    if is_url(path):
        return Ledger(str(path), anchor=anchor, read_only=read_only)
    path = Path(path)
    anchor_file = Path(str(path) + ".anchor") if anchor is None else anchor
    if not create and not path.exists() and not anchor_file.exists():
        raise CommandFailed(
            f"no ledger at {str(path)!r} (a new one is created when a dataset is first served "
            "or an analyst is added)",
            exit_code=ExitCode.LEDGER,
            code="ledger_error",
        )
    if read_only and not path.exists():
        raise CommandFailed(
            f"the ledger {str(path)!r} is missing but its anchor {str(anchor_file)!r} exists: "
            "the ledger was deleted or moved. Put it back, or record the loss with `deniable "
            "ledger acknowledge` (which starts a new ledger and keeps everything spent as spent)",
            exit_code=ExitCode.LEDGER,
            code="ledger_tampered",
        )
    if create and not path.parent.exists():
        os.makedirs(path.parent, exist_ok=True)
    return Ledger(path, anchor=anchor_file, read_only=read_only)

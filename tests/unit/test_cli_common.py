"""The command line's shared parts: exit codes, one-line errors that never quote data, parsing."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
from deniable.cli.common import (
    CommandFailed,
    ExitCode,
    classify,
    handles_errors,
    json_option,
    make_loss,
    parse_bounds,
    parse_keys,
)
from deniable.cli.main import main
from deniable.errors import (
    BudgetExceeded,
    CapConflict,
    DeniableError,
    EngineError,
    InternalError,
    InvalidParameter,
    LedgerError,
    LedgerTampered,
    PrivacyWarning,
    SQLError,
    UnknownDataset,
    UnsafeQuery,
)
from deniable.server.config import ConfigError


@pytest.mark.parametrize(
    ("exc", "code", "name"),
    [
        (BudgetExceeded("over"), ExitCode.BUDGET_EXCEEDED, "budget_exceeded"),
        (LedgerError("locked"), ExitCode.LEDGER, "ledger_error"),
        (LedgerTampered("rolled back"), ExitCode.LEDGER, "ledger_tampered"),
        (UnsafeQuery("rows"), ExitCode.REFUSED, "unsafe_query"),
        (SQLError("parse", line=1, column=2), ExitCode.REFUSED, "sql_error"),
        (InvalidParameter("bad"), ExitCode.ERROR, "invalid_parameter"),
        (ConfigError("datasets.x.budget: write …"), ExitCode.ERROR, "config_error"),
        (UnknownDataset("who"), ExitCode.ERROR, "invalid_parameter"),
        (CapConflict("cap"), ExitCode.ERROR, "invalid_parameter"),
        (EngineError("oom"), ExitCode.ERROR, "invalid_parameter"),
        (InternalError("bug"), ExitCode.ERROR, "internal_error"),
        (FileNotFoundError(2, "No such file or directory", "x.csv"), ExitCode.ERROR, "io_error"),
        (CommandFailed("m", exit_code=ExitCode.LEDGER, code="c"), ExitCode.LEDGER, "c"),
        (RuntimeError("boom"), ExitCode.ERROR, "unexpected_error"),
    ],
)
def test_every_error_has_its_documented_exit_code(
    exc: BaseException, code: ExitCode, name: str
) -> None:
    got_code, got_name, message = classify(exc)
    assert (got_code, got_name) == (code, name)
    assert message


def test_exit_codes_are_documented_in_the_help() -> None:
    out = CliRunner().invoke(main, ["--help"]).output
    for code in ExitCode:
        assert f"  {int(code)}  " in out


def _cmd(raise_: BaseException | None = None, warn: str | None = None) -> click.Command:
    @click.command()
    @json_option
    @handles_errors
    def cmd(as_json: bool) -> None:
        import warnings

        if warn is not None:
            warnings.warn(warn, PrivacyWarning, stacklevel=1)
        if raise_ is not None:
            raise raise_
        click.echo("fine")

    return cmd


def test_a_foreign_exception_is_reported_by_type_only_never_its_text() -> None:
    # e.g. an engine error whose text quotes a row of the data
    result = CliRunner().invoke(_cmd(ValueError("could not convert 'Alice Smith, 1961'")), [])
    assert result.exit_code == 1
    assert "Alice" not in result.output
    assert "ValueError" in result.output
    assert "Traceback" not in result.output
    assert result.output.count("\n") == 1  # one line


def test_errors_are_one_line_and_json_on_request() -> None:
    exc = BudgetExceeded("this query costs ε = 1\nbut only ε = 0.5 is left")
    result = CliRunner().invoke(_cmd(exc), ["--json"])
    assert result.exit_code == 3
    doc = json.loads(result.stdout.strip())
    assert doc == {
        "error": {
            "code": "budget_exceeded",
            "message": "this query costs ε = 1 but only ε = 0.5 is left",
            "exit_code": 3,
        }
    }
    assert result.stderr == "error: this query costs ε = 1 but only ε = 0.5 is left\n"


def test_a_deniable_error_is_shown_with_its_message() -> None:
    result = CliRunner().invoke(_cmd(DeniableError("say what to change")), [])
    assert (result.exit_code, result.output) == (1, "error: say what to change\n")


def test_usage_errors_keep_clicks_exit_code_2() -> None:
    result = CliRunner().invoke(_cmd(click.UsageError("wrong")), [])
    assert result.exit_code == 2


def test_privacy_warnings_are_one_line_on_stderr() -> None:
    result = CliRunner().invoke(_cmd(warn="seeded source:\n tests only"), [])
    assert result.exit_code == 0
    assert result.stdout == "fine\n"
    assert result.stderr == "warning: seeded source: tests only\n"


def test_make_loss_has_no_default_and_refuses_mixtures() -> None:
    f = Fraction
    assert make_loss(epsilon=f(1, 2), delta=None, rho=None, what="q") == Epsilon(epsilon=f(1, 2))
    assert make_loss(epsilon=f(1), delta=f(1, 10**6), rho=None, what="q") == EpsilonDelta(
        epsilon=1, delta=f(1, 10**6)
    )
    assert make_loss(epsilon=None, delta=None, rho=f(1, 10), what="q") == Rho(rho=f(1, 10))
    for bad in ({}, {"rho": f(1), "epsilon": f(1)}, {"delta": f(1, 100)}):
        kwargs = {"epsilon": None, "delta": None, "rho": None, **bad}
        with pytest.raises(click.UsageError):
            make_loss(what="q", **kwargs)


def test_bounds_are_parsed_exactly() -> None:
    assert parse_bounds(["age=0:120", "x=-1.5:1e3"]) == {
        "age": (Fraction(0), Fraction(120)),
        "x": (Fraction(-3, 2), Fraction(1000)),
    }
    for bad in ("age", "age=0", "age=a:b", "=0:1"):
        with pytest.raises(click.BadParameter):
            parse_bounds([bad])


def test_keys_are_typed_by_their_values() -> None:
    assert parse_keys(["r=north,south", "k=1,2,3", "v=0.5,1", "c='01',\"02\""]) == {
        "r": ["north", "south"],
        "k": [1, 2, 3],
        "v": [0.5, 1.0],
        "c": ["01", "02"],
    }
    with pytest.raises(click.BadParameter):
        parse_keys(["r="])


def test_a_ledger_option_keeps_a_postgresql_url_whole() -> None:
    """``--ledger`` is a file or a URL: a Path would fold ``postgresql://`` into ``:/``
    (and `deniable anonymize --ledger URL` once opened a file named ``postgresql:/…``)."""
    from deniable.cli.common import LEDGER

    url = "postgresql://svc@127.0.0.1:5432/ledger"
    assert LEDGER.convert(url, None, None) == url
    assert LEDGER.convert("ledger.db", None, None) == Path("ledger.db")
    with pytest.raises(click.BadParameter):
        LEDGER.convert("", None, None)

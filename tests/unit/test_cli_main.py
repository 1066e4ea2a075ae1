"""The ``deniable`` group: every command and subcommand answers ``--help``; the listing is lazy."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from deniable.cli.main import SHORT_HELP, SUBCOMMANDS, main


def _paths() -> list[list[str]]:
    out: list[list[str]] = [[]]
    ctx = click.Context(main)
    for name in SUBCOMMANDS:
        cmd = main.get_command(ctx, name)
        assert cmd is not None
        out.append([name])
        if isinstance(cmd, click.Group):
            out += [[name, sub] for sub in cmd.list_commands(ctx)]
    return out


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "deniable")
def test_help_everywhere(path: list[str]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")


def test_groups_have_the_issue_s_subcommands() -> None:
    ctx = click.Context(main)
    analyst = main.get_command(ctx, "analyst")
    ledger = main.get_command(ctx, "ledger")
    assert isinstance(analyst, click.Group) and isinstance(ledger, click.Group)
    assert {"add", "list", "revoke", "allow"} <= set(analyst.list_commands(ctx))
    assert {"history", "verify", "backup"} <= set(ledger.list_commands(ctx))
    for name in ("demo", "query", "serve", "analyst", "budget", "ledger", "explain"):
        assert name in SUBCOMMANDS and name in SHORT_HELP


def test_unknown_command_is_a_usage_error() -> None:
    assert CliRunner().invoke(main, ["nope"]).exit_code == 2


def test_listing_commands_does_not_import_the_query_stack() -> None:
    code = (
        "import sys; from click.testing import CliRunner; from deniable.cli.main import main; "
        "r = CliRunner().invoke(main, ['--help']); assert r.exit_code == 0; "
        "print(sorted(m for m in ('duckdb', 'pandas', 'deniable.curator.session') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_explain_errors_are_one_line_and_json_works() -> None:
    bad = CliRunner().invoke(main, ["explain", "1", "--prior", "2"])
    assert bad.exit_code == 2 and bad.output.startswith("error: prior must be")
    assert bad.output.count("\n") == 1
    good = CliRunner().invoke(main, ["explain", "1", "--json"])
    assert good.exit_code == 0 and '"posterior_high": 0.731' in good.output

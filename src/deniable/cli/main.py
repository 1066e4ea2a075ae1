"""Entry point of the ``deniable`` command: one group, subcommands from sibling modules.

Each subcommand lives in its own module exposing a ``click.Command`` named ``command``;
a module that fails to import is reported when its command is used, not at start-up. The exit
codes shared by every command are documented in :mod:`deniable.cli.common` and in
``deniable --help``.
"""

from __future__ import annotations

import importlib

import click

from deniable.cli.common import EXIT_CODES_HELP

SUBCOMMANDS = {
    "accuracy": "deniable.cli.accuracy",
    "analyst": "deniable.cli.analyst",
    "attack": "deniable.cli.attack",
    "anonymize": "deniable.cli.anonymize",
    "audit": "deniable.cli.audit",
    "budget": "deniable.cli.budget",
    "demo": "deniable.cli.demo",
    "explain": "deniable.cli.explain",
    "ledger": "deniable.cli.ledger",
    "query": "deniable.cli.query",
    "serve": "deniable.cli.serve",
    "survey": "deniable.cli.survey",
    "synth": "deniable.cli.synth",
    "tune": "deniable.cli.tune",
}

SHORT_HELP = {
    "accuracy": "Expected intervals of a query, or the least ε for targets (free).",
    "analyst": "Add, list, revoke analysts and set their allowances.",
    "anonymize": "Safe k-anonymization with a DP guarantee.",
    "attack": "Run an attack of the lab against unsafe systems and deniable.",
    "audit": "Audit a whole query's delivered ε (curator-only diagnostic).",
    "budget": "Cap, spent and remaining budget per dataset and analyst.",
    "demo": "Run the guided demo on a synthetic dataset.",
    "explain": "Explain what an ε lets an attacker learn.",
    "ledger": "History, verification and backup of the privacy ledger.",
    "query": "Answer a SQL query with differential privacy.",
    "serve": "Run the HTTP query service.",
    "survey": "Simulate a local-DP survey.",
    "synth": "Release a DP synthetic table (MST or AIM), charged once.",
    "tune": "Propose contribution bounds from DP contribution histograms.",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = SUBCOMMANDS.get(cmd_name)
        if module_name is None:
            return None
        if _listing(ctx):
            # ``deniable --help`` lists commands without importing the query stack.
            return click.Command(cmd_name, short_help=SHORT_HELP.get(cmd_name))
        module = importlib.import_module(module_name)
        command: click.Command = module.command
        command.help = help_text(command.help)
        return command


def help_text(text: str | None) -> str | None:
    r"""A command's help as click reads it, from a raw docstring.

    Docstrings are raw strings, so a ``\b`` line (click's mark: keep the next paragraph's
    lines as they are) arrives as the two characters backslash and ``b``, and an example's
    line continuation ``\\`` as two backslashes; click would re-flow the examples into one
    paragraph and print both literally. Here they become click's mark and one backslash.
    """
    if text is None:
        return None
    lines = [
        line.replace("\\b", "\b") if line.strip() == "\\b" else line for line in text.splitlines()
    ]
    return "\n".join(line.replace("\\\\", "\\") for line in lines)


def _listing(ctx: click.Context) -> bool:
    """Whether click is only formatting the group's help (its command list)."""
    return bool(ctx.meta.get("deniable.listing"))


class _Group(_LazyGroup):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        ctx.meta["deniable.listing"] = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            ctx.meta["deniable.listing"] = False


@click.group(cls=_Group, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="deniable")
def main() -> None:
    """deniable: differential privacy you can query, account for and explain."""


if __name__ == "__main__":
    main()

"""Entry point of the ``deniable`` command: one group, subcommands from sibling modules.

Each subcommand lives in its own module exposing a ``click.Command`` named ``command``;
a module that fails to import is reported when its command is used, not at start-up.
"""

from __future__ import annotations

import importlib

import click

SUBCOMMANDS = {
    "demo": "deniable.cli.demo",
    "explain": "deniable.cli.explain",
    "survey": "deniable.cli.survey",
    "anonymize": "deniable.cli.anonymize",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = SUBCOMMANDS.get(cmd_name)
        if module_name is None:
            return None
        module = importlib.import_module(module_name)
        command: click.Command = module.command
        return command


@click.group(cls=_LazyGroup)
@click.version_option(package_name="deniable")
def main() -> None:
    """deniable: differential privacy you can query, account for and explain."""


if __name__ == "__main__":
    main()

"""``deniable attack NAME``: run one attack of the lab against unsafe systems and deniable.

Examples::

    deniable attack averaging
    deniable attack reconstruction --json
    deniable attack k-anonymity --plot leak.png

Each attack builds its own synthetic data and a throwaway deniable session (a temporary
ledger): nothing of yours is read or spent.
"""

from __future__ import annotations

from pathlib import Path

import click

from deniable.cli.common import emit_json, handles_errors, json_option, progress

NAMES = (
    "averaging",
    "differencing",
    "reconstruction",
    "k-anonymity",
    "membership",
    "publication",
)


@click.command(name="attack")
@click.argument("name", type=click.Choice(NAMES))
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw the attack's figure into this .png or .svg file.",
)
@json_option
@handles_errors
def command(name: str, plot_path: Path | None, as_json: bool) -> None:
    """Run the attack NAME on unsafe baselines and on deniable, and report what it learned."""
    from deniable.attacks import ATTACKS
    from deniable.attacks.report import plot, render, to_json
    from deniable.errors import InvalidParameter

    if plot_path is not None and plot_path.suffix.lower() not in (".png", ".svg"):
        raise InvalidParameter("--plot needs a file name ending in .png or .svg")
    with progress(f"running the {name} attack"):
        report = ATTACKS[name]()
    if plot_path is not None:
        plot(report, plot_path)
    if as_json:
        doc = to_json(report)
        if plot_path is not None:
            doc["plot"] = str(plot_path)
        emit_json(doc)
    else:
        click.echo(render(report))
        if plot_path is not None:
            click.echo(f"\nfigure written to {plot_path}")

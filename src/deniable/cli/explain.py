"""``deniable explain EPSILON``: what a privacy loss means, in plain language."""

from __future__ import annotations

import click


@click.command(name="explain")
@click.argument("epsilon", type=float)
@click.option(
    "--prior",
    type=float,
    default=0.5,
    show_default=True,
    help="The attacker's prior belief that the target is in the data.",
)
def command(epsilon: float, prior: float) -> None:
    """Explain what EPSILON lets an attacker learn."""
    from deniable.explain import explain_epsilon

    click.echo(explain_epsilon(epsilon, prior=prior))

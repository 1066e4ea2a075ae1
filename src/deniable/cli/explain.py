"""``deniable explain EPSILON``: what a privacy loss means, in plain language."""

from __future__ import annotations

import click

from deniable.cli.common import emit_json, handles_errors, json_option


@click.command(name="explain")
@click.argument("epsilon", type=float)
@click.option(
    "--prior",
    type=float,
    default=0.5,
    show_default=True,
    help="The attacker's prior belief that the target is in the data.",
)
@json_option
@handles_errors
def command(epsilon: float, prior: float, as_json: bool) -> None:
    """Explain what EPSILON lets an attacker learn."""
    from deniable.explain import explain_epsilon
    from deniable.explain.posterior import posterior_bounds

    text = explain_epsilon(epsilon, prior=prior)
    if as_json:
        low, high = posterior_bounds(prior, epsilon)
        emit_json(
            {
                "epsilon": epsilon,
                "prior": prior,
                "posterior_low": low,
                "posterior_high": high,
                "text": text,
            }
        )
    else:
        click.echo(text)

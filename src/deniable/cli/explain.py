"""``deniable explain``: what a privacy loss means, in plain language, numbers and a figure.

``deniable explain 1.1`` or ``deniable explain --epsilon 1.1 [--delta 1e-6] [--prior 0.5]
[--evidence 0.01] [--plot out.png] [--json]``. Nothing is read or spent. A bad value (a prior
outside [0, 1], a negative ε, δ ≥ 1, an image name that is not .png/.svg) is a command-line
error: one ``error:`` line and exit code 2.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import click

from deniable.cli.common import CommandFailed, ExitCode, emit_json, handles_errors, json_option


def _number(text: str | None, name: str) -> Fraction | None:
    """An option's value read exactly (``1.1`` is 11/10, ``1e-6``, ``1/3``), or None."""
    if text is None:
        return None
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise _usage(f"{name} must be a number, got {text.strip()[:40]!r}") from None


def _usage(message: str) -> CommandFailed:
    return CommandFailed(message, exit_code=ExitCode.USAGE, code="invalid_parameter")


@click.command(name="explain")
@click.argument("epsilon_arg", metavar="[EPSILON]", required=False, type=str)
@click.option("--epsilon", "epsilon_opt", type=str, metavar="NUMBER", help="ε to explain (≥ 0).")
@click.option(
    "--delta",
    type=str,
    metavar="NUMBER",
    default=None,
    help="δ of an (ε, δ) guarantee, in [0, 1) (default 0: pure ε-DP).",
)
@click.option(
    "--prior",
    type=str,
    metavar="NUMBER",
    default="0.5",
    show_default=True,
    help="The attacker's prior belief that the target is in the data, in [0, 1].",
)
@click.option(
    "--evidence",
    type=str,
    metavar="NUMBER",
    default="0.01",
    show_default=True,
    help="With δ > 0: the least probability of the evidence the bound covers, in (0, 1].",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also draw the posterior bounds against the prior to this .png or .svg file.",
)
@json_option
@handles_errors
def command(
    epsilon_arg: str | None,
    epsilon_opt: str | None,
    delta: str | None,
    prior: str,
    evidence: str,
    plot_path: Path | None,
    as_json: bool,
) -> None:
    """Explain what EPSILON (or --epsilon, with --delta) lets an attacker learn.

    Prints a sentence, the posterior bounds for the prior, and with --plot draws them for
    every prior. Nothing is read or spent.
    """
    from deniable.errors import InvalidParameter
    from deniable.explain.posterior import approx_posterior_bounds, effective_epsilon
    from deniable.explain.text import explain_loss

    if epsilon_arg is not None and epsilon_opt is not None and epsilon_arg != epsilon_opt:
        raise _usage("give ε once: either as EPSILON or as --epsilon")
    raw = epsilon_opt if epsilon_opt is not None else epsilon_arg
    if raw is None:
        raise _usage("give ε to explain, e.g. deniable explain --epsilon 1.1")
    eps = _number(raw, "epsilon")
    d = _number(delta, "delta") or Fraction(0)
    p = _number(prior, "prior")
    pi = _number(evidence, "evidence")
    assert eps is not None and p is not None and pi is not None
    try:
        text = explain_loss(eps, d, p, evidence=pi)
        low, high = approx_posterior_bounds(p, eps, d, evidence=pi)
        eff = effective_epsilon(eps, d, evidence=pi)
        if plot_path is not None:
            from deniable.explain.plots import FORMATS

            if plot_path.suffix.lower() not in FORMATS:
                raise InvalidParameter(
                    f"cannot tell the image format from {plot_path.name!r}: name the file "
                    ".png or .svg"
                )
    except InvalidParameter as exc:
        raise _usage(str(exc)) from None
    if plot_path is not None:
        from deniable.explain.plots import posterior_figure, save

        save(posterior_figure(eps, delta=d, evidence=pi, prior=p), plot_path)
    if as_json:
        doc: dict[str, object] = {
            "epsilon": float(eps),
            "delta": float(d),
            "prior": float(p),
            "posterior_low": low,
            "posterior_high": high,
            "text": text,
        }
        if d:
            doc["evidence"] = float(pi)
            doc["effective_epsilon"] = eff
        if plot_path is not None:
            doc["plot"] = str(plot_path)
        emit_json(doc)
        return
    click.echo(text)
    click.echo(f"prior {float(p):.6g}: posterior between {low:.6g} and {high:.6g}")
    if d:
        click.echo(
            f"for evidence with probability ≥ {float(pi):.6g}, (ε, δ) acts as pure "
            f"ε = ln(e^ε + δ/π) = {eff:.6g}"
        )
    if plot_path is not None:
        click.echo(f"figure written to {plot_path}")

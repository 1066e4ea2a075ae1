"""``deniable survey``: simulate a local-DP survey and print the estimate next to the truth.

Example: ``deniable survey --n 10000 --truth 0.3 --mechanism coin --q 0.5``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from deniable.errors import DeniableError
from deniable.local.bloom import BloomEncoder
from deniable.local.estimators import BinaryEstimate
from deniable.local.randomizers import (
    BinaryRandomizedResponse,
    CoinRandomizedResponse,
    KRandomizedResponse,
    LocalRandomizer,
    OptimizedUnaryEncoding,
)
from deniable.local.simulate import simulate_survey
from deniable.noise.source import RandomSource
from deniable.noise.testing import SeededRandom

MECHANISMS = ("rr", "coin", "krr", "oue", "rappor")


def _fraction(text: str, name: str) -> Fraction:
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise click.BadParameter(f"{text!r} is not a number", param_hint=name) from None


def _need(value: str | None, name: str, mechanism: str) -> Fraction:
    if value is None:
        raise click.UsageError(f"--mechanism {mechanism} needs {name}")
    return _fraction(value, name)


def _randomizer(
    mechanism: str, k: int, opts: dict[str, Any]
) -> tuple[LocalRandomizer[Any], tuple[Any, ...] | None]:
    """The randomiser and, for the open-domain Bloom encoder, the candidate labels."""
    if mechanism == "rr":
        return BinaryRandomizedResponse(p=_need(opts["p"], "--p", mechanism)), None
    if mechanism == "coin":
        return CoinRandomizedResponse(q=_need(opts["q"], "--q", mechanism)), None
    if mechanism in ("krr", "oue"):
        eps = _need(opts["epsilon"], "--epsilon", mechanism)
        cls = KRandomizedResponse if mechanism == "krr" else OptimizedUnaryEncoding
        return cls(k=k, epsilon=eps), None
    enc = BloomEncoder(
        num_bits=opts["bits"],
        num_hashes=opts["hashes"],
        num_cohorts=opts["cohorts"],
        f=_need(opts["f"], "--f", mechanism),
        p=_need(opts["p"], "--p", mechanism),
        q=_need(opts["q"], "--q", mechanism),
    )
    return enc, tuple(f"value-{i}" for i in range(k))


@click.command(name="survey")
@click.option("--n", "n", type=click.IntRange(min=1), required=True, help="Respondents.")
@click.option(
    "--truth",
    required=True,
    help="True fraction of 'yes' (e.g. 0.3), or one frequency per category: 0.5,0.3,0.2.",
)
@click.option(
    "--mechanism",
    type=click.Choice(MECHANISMS),
    required=True,
    help="rr, coin, krr (k-ary RR), oue (optimised unary), rappor (Bloom filter).",
)
@click.option("--p", "p", default=None, help="rr: truth probability; rappor: IRR p.")
@click.option("--q", "q", default=None, help="coin: truth probability; rappor: IRR q.")
@click.option("--epsilon", default=None, help="krr/oue: ε per respondent.")
@click.option("--f", "f", default=None, help="rappor: permanent randomisation rate f.")
@click.option(
    "--bits",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="rappor: Bloom filter size.",
)
@click.option(
    "--hashes",
    type=click.IntRange(1, 16),
    default=2,
    show_default=True,
    help="rappor: hash functions.",
)
@click.option(
    "--cohorts", type=click.IntRange(min=1), default=16, show_default=True, help="rappor: cohorts."
)
@click.option(
    "--level",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="Confidence level of the intervals.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Reproducible run from a seeded generator (simulation only, not private).",
)
def command(
    n: int, truth: str, mechanism: str, level: float, seed: int | None, **opts: Any
) -> None:
    """Simulate a local-DP survey: print each estimate, its interval and ε next to the truth."""
    parts = [_fraction(t, "--truth") for t in truth.split(",")]
    freqs: Fraction | list[Fraction] = parts[0] if len(parts) == 1 else parts
    k = 2 if len(parts) == 1 else len(parts)
    if mechanism in ("rr", "coin") and len(parts) != 1:
        raise click.UsageError("rr and coin take a single --truth fraction of 'yes'")
    source: RandomSource | None = None if seed is None else SeededRandom(seed)
    try:
        randomizer, candidates = _randomizer(mechanism, k, opts)
        if candidates is not None and isinstance(freqs, Fraction):
            freqs = [1 - freqs, freqs]
        result = simulate_survey(randomizer, freqs, n, domain=candidates, source=source)
    except DeniableError as exc:
        raise click.UsageError(str(exc)) from None

    est = result.estimate
    lo, hi = est.interval(level)
    exact = est.exact_interval(level) if isinstance(est, BinaryEstimate) else None
    pct = f"{100 * level:g}%"
    table = Table(
        title=f"{mechanism}: {n} respondents, ε = {float(result.loss.epsilon):.4f} each (local DP)"
    )
    table.add_column("category")
    table.add_column("truth", justify="right")
    table.add_column("estimate", justify="right")
    table.add_column(f"{pct} interval (normal approx.)", justify="right")
    if exact is not None:
        table.add_column(f"{pct} exact (Clopper–Pearson)", justify="right")
    for i, label in enumerate(result.labels):
        row = [
            str(label),
            f"{result.truth[i]:.4f}",
            f"{est.frequencies[i]:.4f}",
            f"[{lo[i]:.4f}, {hi[i]:.4f}]",
        ]
        if exact is not None:
            e_lo, e_hi = exact  # of the "yes" fraction; "no" is its mirror image
            if i == 0:
                e_lo, e_hi = 1 - e_hi, 1 - e_lo
            row.append(f"[{e_lo:.4f}, {e_hi:.4f}]")
        table.add_row(*row)
    console = Console()
    console.print(table)
    console.print(
        f"privacy: ε = {float(result.loss.epsilon):.6g} per respondent "
        f"({randomizer!r}); the estimate is post-processing and costs nothing more."
    )
    if seed is not None:
        console.print("[yellow]seeded run: reproducible, not private — simulation only.[/]")

"""``deniable anonymize DATA``: safe k-anonymization of a CSV/Parquet file into Parquet.

Examples::

    deniable anonymize data.csv --unit row --k 10 --beta 0.1 --recoding recoding.yaml \
        -o out.parquet
    deniable anonymize data.parquet --unit patient_id --k 10 --beta 0.1 --recoding r.yaml \
        -o out.parquet --select-epsilon 0.5 --delta 1e-6

``--unit`` is required: ``row`` protects each row (a person with several rows only by group
privacy), a column keeps one random row of each person, so the guarantee is per person.

Without ``--select-epsilon`` the recoding's fixed ``level`` per column is used (strongly
safe, Theorem 3.9); with it, the recoding is chosen among the candidate levels by the
exponential mechanism (ε-safe, Theorem 3.11). The guarantee holds for a whole curve of
``(ε, δ)`` at once; ``--epsilon`` or ``--delta`` picks the point to headline, otherwise a few
points are printed. Runs as ``python -m deniable.cli.anonymize`` too.

With ``--ledger PATH --dataset NAME`` the release is charged to that dataset's budget before
the output file is written (Li–Qardaji–Su §2.6,
:meth:`deniable.ledger.Ledger.record_sample_release`): the headline ``(ε, δ)`` is admitted
by the dataset's accountant, the release is recorded with its sample's opaque identity and
rate β, and that sample is consumed. A refused charge writes nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import click

from deniable.cli.common import LEDGER

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from deniable.anonymize import Anonymization

_LARGE_INPUT_BYTES = 20 * 1024 * 1024  # show a progress bar above this input size


@click.command(name="anonymize")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--unit",
    required=True,
    metavar="COLUMN|row",
    help="Required: the column identifying a person (one of each person's rows is kept, "
    "chosen at random, so the guarantee is per person), or 'row' (each row is its own unit: "
    "a person with several rows is protected only by group privacy).",
)
@click.option("--k", "k", type=int, required=True, help="Suppress tuples seen fewer than k times.")
@click.option("--beta", type=float, required=True, help="Sampling rate, in (0, 1).")
@click.option(
    "--recoding",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    required=True,
    help="YAML/JSON file of generalisation hierarchies (see deniable.anonymize.recoding).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Parquet file to write the published table to.",
)
@click.option("--epsilon", type=float, default=None, help="Report δ at this ε (ε₂ if ε-safe).")
@click.option("--delta", type=float, default=None, help="Report the ε that reaches this δ.")
@click.option(
    "--select-epsilon",
    type=float,
    default=None,
    help="ε-safe: choose the recoding with the exponential mechanism at this ε.",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Show a progress bar (default: on for inputs over 20 MiB on a terminal).",
)
@click.option(
    "--ledger",
    "ledger_path",
    type=LEDGER,
    default=None,
    help="Charge the release to a dataset of this ledger before writing (needs --dataset).",
)
@click.option("--dataset", default=None, help="The ledger's dataset whose budget pays.")
@click.option("--analyst", default="curator", show_default=True, help="Who releases (recorded).")
def command(
    data: Path,
    unit: str,
    k: int,
    beta: float,
    recoding: Path,
    output: Path,
    epsilon: float | None,
    delta: float | None,
    select_epsilon: float | None,
    progress: bool | None,
    ledger_path: Path | str | None,
    dataset: str | None,
    analyst: str,
) -> None:
    """Publish a safely k-anonymized sample of DATA and print its (ε, δ) guarantee."""
    import duckdb

    from deniable.anonymize import (
        epsilon_safe,
        load_recoding,
        min_epsilon,
        strongly_safe,
    )
    from deniable.engines.duckdb import DuckDBRunner
    from deniable.errors import DeniableError

    if epsilon is not None and delta is not None:
        raise click.UsageError("give --epsilon or --delta, not both")
    if (ledger_path is None) != (dataset is None):
        raise click.UsageError("give --ledger and --dataset together")
    if isinstance(ledger_path, Path) and not ledger_path.is_file():
        raise click.BadParameter(f"no ledger file at {str(ledger_path)!r}", param_hint="--ledger")
    try:
        spec = load_recoding(recoding)
        floor = min_epsilon(beta)
        con = duckdb.connect()
        con.execute(_input_view(_reader(data), None if unit == "row" else unit))
        runner = DuckDBRunner(con)
        show = progress if progress is not None else _is_large(data)
        if epsilon is None and delta is None:
            epsilon = floor  # headline the first point; the whole curve is printed below
            curve = True
        else:
            curve = False
        with _Bar(enabled=show) as bar:
            if select_epsilon is None:
                result = strongly_safe(
                    runner,
                    "input",
                    spec,
                    k=k,
                    beta=beta,
                    epsilon=epsilon,
                    delta=delta,
                    progress=bar.update,
                )
            else:
                result = epsilon_safe(
                    runner,
                    "input",
                    spec,
                    k=k,
                    beta=beta,
                    selection_epsilon=select_epsilon,
                    epsilon=epsilon,
                    delta=delta,
                    progress=bar.update,
                )
            charged = (
                None
                if ledger_path is None or dataset is None
                else _charge(ledger_path, dataset, analyst, result, k=k, beta=beta)
            )
            bar.update("writing Parquet", 1.0)
            result.to_parquet(output)
        lines = [f"wrote {result.report.published_rows} rows to {output}", "", "guarantee:"]
        lines.append("  " + result.guarantee.describe())
        lines.append(
            "  unit: each row is its own unit (a person with several rows is protected only "
            "by group privacy)"
            if unit == "row"
            else f"  unit: one person ({unit}): one of each {unit}'s rows was kept, chosen at "
            f"random, rows without a {unit} were left out; the guarantee is per {unit}"
        )
        if curve:
            lines.append("  the same release also satisfies (the curve of Theorem 3.9/3.11):")
            for e2 in sorted({floor, *(e for e in (0.5, 1.0, 2.0) if e > floor)}):
                g = result.guarantee_at(epsilon=e2)
                lines.append(f"    ε = {g.epsilon:.4g}: δ = {_fmt(g.log_delta)}")
        if result.selection is not None:
            s = result.selection
            lines.append(
                f"  recoding chosen among {s.candidates} candidates by the exponential mechanism "
                f"(ε = {s.epsilon:g} on a β-sample, {s.epsilon_input:.4g} for the input)"
            )
        lines.append(f"  recoding: {result.recoding.levels()}")
        if result.dropped_columns:
            lines.append(f"  not published (not in the recoding): {list(result.dropped_columns)}")
        if charged is not None:
            lines += ["", *charged]
        lines += ["", "utility:", *("  " + line for line in result.report.lines())]
        click.echo("\n".join(lines))
    except DeniableError as e:
        raise click.ClickException(str(e)) from None
    except duckdb.Error as e:
        raise click.ClickException(
            f"DuckDB could not read {data.name}: {type(e).__name__}"
        ) from None


def _charge(
    ledger_path: Path | str,
    dataset: str,
    analyst: str,
    result: Anonymization,
    *,
    k: int,
    beta: float,
) -> list[str]:
    """Charge the release's headline (ε, δ) to ``dataset`` and consume its sample.

    Runs before the output is written; a refusal raises (nothing written). Returns the lines
    to print.
    """
    from deniable.errors import DeniableError

    try:
        return _record(ledger_path, dataset, analyst, result, k=k, beta=beta)
    except DeniableError as e:
        raise click.ClickException(
            f"{e} (the release was not charged to dataset {dataset!r}; nothing was written)"
        ) from None


def _record(
    ledger_path: Path | str,
    dataset: str,
    analyst: str,
    result: Anonymization,
    *,
    k: int,
    beta: float,
) -> list[str]:
    from deniable.ledger import Ledger
    from deniable.query.answer import show_loss

    loss = result.guarantee.loss()
    with Ledger(ledger_path) as ledger:
        release = ledger.record_sample_release(
            dataset,
            loss,
            sample=result.sample_id,
            rate=beta,
            analyst=analyst,
            query_text=f"deniable anonymize --k {k} --beta {beta:g}",
            details={
                "kind": "safe k-anonymization",
                "k": k,
                "theorem": result.guarantee.theorem,
                "recoding": str(result.recoding.levels()),
            },
        )
        left = ledger.remaining(dataset)
    return [
        (
            f"charged to dataset {dataset!r} of {ledger_path}: {show_loss(release.charge.loss)} "
            f"(charge {release.charge.id}, sample {release.sample} consumed)"
        ),
        f"  remaining: {show_loss(left)}",
    ]


def _input_view(reader: str, unit: str | None) -> str:
    """``CREATE VIEW input``: the file's rows, or one random row per person with ``unit``.

    One row per person makes the row-level guarantee of safe k-anonymization a person-level
    one (:func:`deniable.curator.publish.one_row_per_person`). The view keeps the file's
    columns.
    """
    from sqlglot import exp, parse_one

    from deniable.curator.publish import one_row_per_person

    source = parse_one(f"SELECT * FROM {reader}", read="duckdb")
    assert isinstance(source, exp.Select)
    body = source if unit is None else one_row_per_person(source, unit)
    view = exp.Create(this=exp.to_table("input"), kind="VIEW", expression=body)
    return view.sql(dialect="duckdb")


def _reader(path: Path) -> str:
    """The DuckDB table function reading ``path``; CSV columns are read as text.

    Text keeps codes such as ZIP ``02139`` intact; hierarchies cast numbers and dates.
    """
    from deniable.sqlnames import quote_literal

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return f"read_parquet({quote_literal(str(path))})"
    return f"read_csv({quote_literal(str(path))}, all_varchar = true, header = true)"


def _is_large(path: Path) -> bool:
    import sys

    return path.stat().st_size > _LARGE_INPUT_BYTES and sys.stderr.isatty()


def _fmt(log_delta: float) -> str:
    if log_delta > math.log(1e-300):
        return f"{math.exp(log_delta):.3g}"
    return f"10^{log_delta / math.log(10):.1f}"


class _Bar:
    """A rich progress bar on stderr driven by the pipeline's progress callback."""

    def __init__(self, *, enabled: bool) -> None:
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )

    def __enter__(self) -> _Bar:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task("anonymizing", total=1.0)
        return self

    def update(self, step: str, done: float) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=step, completed=done)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


if __name__ == "__main__":
    command()

r"""``deniable accuracy SQL``: the intervals a query would get, before spending anything.

Compiles the query against a local file's schema and policy (``--data FILE`` with
``--unit``, ``--max-groups``, ``--max-rows``, ``--bounds``, ``--keys`` as for
``deniable query``) and prints each output's expected interval half-width at
``--epsilon``/``--delta``/``--rho`` (:mod:`deniable.query.accuracy`). With ``--target
OUTPUT=HALF_WIDTH`` (repeatable) it prints the least ε (or ρ) that meets every target
instead. Reads no row of the file (only its schema) and charges nothing: no ledger is
written.
"""

from __future__ import annotations

import tempfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import click

from deniable.cli.common import (
    console,
    emit_json,
    fraction_option,
    handles_errors,
    json_option,
    loss_doc,
    loss_text,
    parse_bounds,
    parse_keys,
)
from deniable.cli.query import ROW_UNIT, table_name_of, table_unit


def _targets(items: tuple[str, ...]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            width = float(value)
        except ValueError:
            width = float("nan")
        if not sep or not name or not width > 0:
            raise click.UsageError(
                f"--target {item!r}: write OUTPUT=HALF_WIDTH with a positive half-width, "
                "e.g. --target n=10"
            )
        out[name] = width
    return out


@click.command(name="accuracy")
@click.argument("sql")
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="The CSV or Parquet file the query is about (only its schema is read).",
)
@click.option("--table", default=None, help="The table's name in FROM (default: file stem).")
@click.option(
    "--unit",
    metavar="COLUMN|row",
    default=None,
    help="Required: the column identifying a person, or 'row' (as for deniable query).",
)
@click.option("--max-groups", type=click.IntRange(min=1), default=None, help="As for query.")
@click.option("--max-rows", type=click.IntRange(min=1), default=None, help="As for query.")
@click.option("--bounds", multiple=True, metavar="COL=LO:HI", help="As for query (repeatable).")
@click.option("--keys", multiple=True, metavar="COL=V1,V2,…", help="As for query (repeatable).")
@fraction_option("--epsilon", help="The ε the query would spend (not with --target).")
@fraction_option("--delta", help="The δ it would spend (private group keys).")
@fraction_option("--rho", help="The ρ it would spend (not with --target).")
@click.option(
    "--rows",
    type=click.IntRange(min=1),
    default=None,
    help="Assumed rows per group, for AVG/VARIANCE/STDDEV (their width depends on it).",
)
@click.option(
    "--target",
    multiple=True,
    metavar="OUTPUT=HALF_WIDTH",
    help="Find the least ε (ρ with --zcdp) meeting this half-width (repeatable).",
)
@click.option("--zcdp", is_flag=True, default=False, help="--target: find ρ instead of ε.")
@click.option("--level", type=float, default=0.95, show_default=True, help="Confidence level.")
@json_option
@handles_errors
def command(
    sql: str,
    data_path: Path,
    table: str | None,
    unit: str | None,
    max_groups: int | None,
    max_rows: int | None,
    bounds: tuple[str, ...],
    keys: tuple[str, ...],
    epsilon: Fraction | None,
    delta: Fraction | None,
    rho: Fraction | None,
    rows: int | None,
    target: tuple[str, ...],
    zcdp: bool,
    level: float,
    as_json: bool,
) -> None:
    r"""Expected interval half-widths of SQL's outputs, or the least ε for targets.

    Nothing is read but the file's schema and nothing is charged.

    \b
    Examples:
      deniable accuracy "SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept" \
          --data visits.csv --unit patient_id --max-groups 2 --max-rows 5 \
          --keys dept=a,b,c --epsilon 0.5
      deniable accuracy "SELECT dept, COUNT(*) AS n FROM visits GROUP BY dept" \
          --data visits.csv --unit patient_id --max-groups 2 --max-rows 5 \
          --keys dept=a,b,c --target n=10
    """
    from deniable.accounting.loss import Epsilon, Rho
    from deniable.curator.session import Session
    from deniable.query.catalog import ROW

    table_unit(unit, max_groups, max_rows)
    targets = _targets(target)
    if targets and (epsilon is not None or rho is not None):
        raise click.UsageError("--target finds ε (or ρ): leave --epsilon and --rho out")
    if not targets and epsilon is None and rho is None:
        raise click.UsageError("give the loss to evaluate (--epsilon or --rho), or --target")
    budget: Any = Rho(rho=1) if (zcdp or rho is not None) else Epsilon(epsilon=1)
    if delta is not None and not isinstance(budget, Rho):
        from deniable.accounting.loss import EpsilonDelta

        budget = EpsilonDelta(epsilon=1, delta=Fraction(1, 2))
    name = table or table_name_of(data_path)
    with (
        tempfile.TemporaryDirectory(prefix="deniable-") as tmp,
        Session(budget=budget, ledger=Path(tmp) / "scratch.db") as session,
    ):
        session.add_table(
            name,
            data_path,
            privacy_unit=ROW if unit == ROW_UNIT else unit,
            bounds=parse_bounds(bounds) or None,
            max_groups=max_groups,
            max_rows=max_rows,
            public_keys=parse_keys(keys) or None,
        )
        if targets:
            loss = session.budget_for(sql, targets, rows=rows, delta=delta, level=level)
            if as_json:
                emit_json({"targets": targets, "least_loss": loss_doc(loss)})
            else:
                console().print(f"least loss meeting every target: {loss_text(loss)}")
            return
        options: dict[str, Any] = {"delta": delta, "level": level}
        if rho is not None:
            options["rho"] = rho
        else:
            options["epsilon"] = epsilon
        report = session.accuracy(sql, rows=rows, **options)
    docs = [
        {
            "output": o.name,
            "half_width": o.half_width,
            "rank_error": o.rank_error,
            "depends_on": o.depends_on,
        }
        for o in report.outputs
    ]
    if as_json:
        emit_json({"level": report.level, "outputs": docs, "charged": None})
        return
    from rich.table import Table

    out = console()
    out.print(
        f"expected {report.level:.0%} intervals (noise only — covers the value after "
        "bounding); nothing was read or charged",
        soft_wrap=True,
    )
    t = Table()
    for column in ("output", "± half-width", "depends on"):
        t.add_column(column)
    for o in report.outputs:
        if o.half_width is not None:
            width = f"{o.half_width:,.4g}"
        elif o.rank_error is not None:
            width = f"rank ± {o.rank_error:,.1f} rows"
        else:
            width = "—"
        t.add_row(o.name, width, o.depends_on or "")
    out.print(t)

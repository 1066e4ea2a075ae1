r"""``deniable tune``: measure how much people contribute, and propose contribution bounds.

On a local file (``--data FILE --unit COLUMN``) with its ledger (``--ledger PATH``, total
budget ``--budget`` when the ledger is new): spends ``--epsilon`` (pure ε-DP) on four DP
contribution histograms and prints the candidate ``max_groups``/``max_rows`` ranked by the
expected error per group of a ``COUNT(*) … GROUP BY --group-by`` over ``--groups`` groups at
``--workload-epsilon`` (:mod:`deniable.curator.tune`). ``--clamp COL=LO:HI`` (repeatable)
also proposes a clamping range for each numeric column within that public search range,
the one with the least expected error for a ``SUM`` (or ``AVG``: ``--clamp-workload``) per
group (:mod:`deniable.curator.clamps`; half of ``--epsilon`` then measures the values).
``--plot FILE.png`` draws the trade-off.

``--non-private`` prints the curator's exact analysis instead (the share of rows each
candidate keeps): it reads the data exactly, adds no noise, charges nothing and is labelled
NON-PRIVATE; it is for the curator, who holds the data, never for an analyst.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from fractions import Fraction
from pathlib import Path
from typing import Any

import click

from deniable.cli.common import (
    CommandFailed,
    ExitCode,
    console,
    emit_json,
    fraction_option,
    handles_errors,
    json_option,
    loss_text,
    open_ledger,
    parse_bounds,
)
from deniable.cli.query import LOCAL_ANALYST, table_name_of


@click.command(name="tune")
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="The CSV or Parquet file to measure.",
)
@click.option("--table", default=None, help="The table's name (default: file stem).")
@click.option("--unit", required=True, metavar="COLUMN", help="The column identifying a person.")
@click.option("--group-by", "group_by", multiple=True, metavar="COLUMN", help="Grouping column.")
@fraction_option("--epsilon", help="ε to spend on the measurement (charged; not --non-private).")
@fraction_option("--workload-epsilon", help="ε the workload will be answered at (default 1).")
@click.option(
    "--groups",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Groups of the workload (e.g. the size of the --group-by domain).",
)
@click.option(
    "--clamp",
    "clamps",
    multiple=True,
    metavar="COL=LO:HI",
    help="Propose a clamping range for COL within this public search range (repeatable).",
)
@click.option(
    "--clamp-workload",
    type=click.Choice(["sum", "avg"]),
    default="sum",
    show_default=True,
    help="The aggregate the clamping ranges are chosen for.",
)
@click.option("--ledger", "ledger_path", type=click.Path(path_type=Path), default=None)
@click.option("--dataset", default=None, help="The ledger's name of the dataset (default: table).")
@fraction_option("--budget", help="The dataset's total ε, when the ledger is new.")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), default=None)
@click.option(
    "--non-private",
    is_flag=True,
    default=False,
    help="Curator only: the exact share of rows each policy keeps (no noise, not charged).",
)
@json_option
@handles_errors
def command(
    data_path: Path,
    table: str | None,
    unit: str,
    group_by: tuple[str, ...],
    epsilon: Fraction | None,
    workload_epsilon: Fraction | None,
    groups: int,
    clamps: tuple[str, ...],
    clamp_workload: str,
    ledger_path: Path | str | None,
    dataset: str | None,
    budget: Fraction | None,
    plot_path: Path | None,
    non_private: bool,
    as_json: bool,
) -> None:
    r"""Propose max_groups/max_rows from DP contribution histograms (charged --epsilon).

    \b
    Examples:
      deniable tune --data visits.csv --unit patient_id --group-by dept --groups 5 \
          --epsilon 0.3 --workload-epsilon 1 --ledger visits.ledger --budget 3
      deniable tune --data visits.csv --unit patient_id --group-by dept --groups 5 \
          --clamp cost=0:1000000 --clamp-workload avg --epsilon 0.5 --ledger visits.ledger
      deniable tune --data visits.csv --unit patient_id --group-by dept --non-private
    """
    from deniable.accounting.loss import Epsilon
    from deniable.curator.session import Session

    name = table or table_name_of(data_path)
    with ExitStack() as stack:
        if non_private:
            if epsilon is not None:
                raise click.UsageError("--non-private spends nothing: leave --epsilon out")
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="deniable-"))
            session = stack.enter_context(
                Session(budget=Epsilon(epsilon=1), ledger=Path(tmp) / "scratch.db")
            )
        else:
            if epsilon is None:
                raise click.UsageError("give --epsilon: the measurement is a charged DP release")
            if ledger_path is None:
                raise click.UsageError(
                    "give --ledger PATH: the measurement is charged to the dataset's ledger"
                )
            ledger = stack.enter_context(open_ledger(ledger_path, create=True))
            cap: Any = Epsilon(epsilon=budget) if budget is not None else _cap(ledger, dataset)
            session = stack.enter_context(
                Session(budget=cap, ledger=ledger, dataset=dataset or name, analyst=LOCAL_ANALYST)
            )
        # the bounds given here are placeholders: tuning is what chooses them
        session.add_table(name, data_path, privacy_unit=unit, max_groups=1, max_rows=1)
        if non_private:
            analyses = [
                session.clamp_analysis(name, column, (float(lo), float(hi)))
                for column, (lo, hi) in parse_bounds(clamps, option="--clamp").items()
            ]
            _print_utility(
                session.utility_analysis(name, group_by=list(group_by)), analyses, as_json
            )
            return
        assert epsilon is not None
        report = session.tune(
            name,
            epsilon=epsilon,
            group_by=list(group_by),
            workload_epsilon=workload_epsilon or 1,
            groups=groups,
            clamps=parse_bounds(clamps, option="--clamp") or None,
            clamp_workload="avg" if clamp_workload == "avg" else "sum",
        )
        remaining = session.budget.remaining
    frame = report.to_pandas()
    best = report.best
    if plot_path is not None:
        report.plot().savefig(plot_path, dpi=120, bbox_inches="tight")
    charged = epsilon  # the contribution histograms, and with --clamp the value histograms
    if as_json:
        emit_json(
            {
                "charged": {"epsilon": str(charged)},
                "best": {"max_groups": best.max_groups, "max_rows": best.max_rows},
                "candidates": frame.to_dict(orient="records"),
                "clamps": {
                    c: {
                        "low": lo,
                        "high": hi,
                        "workload": report.clamp_workload,
                        "trade_off": report.clamp_table(c).to_dict(orient="records"),
                    }
                    for c, (lo, hi) in report.clamps.items()
                },
                "remaining": loss_text(remaining),
            }
        )
        return
    out = console()
    out.print(
        f"measured with ε = {float(charged):g} (charged; remaining "
        f"{loss_text(remaining)}); proposal for COUNT(*) over {groups} group(s) at workload "
        f"ε = {float(report.workload_epsilon):g}: max_groups = {best.max_groups}, "
        f"max_rows = {best.max_rows}",
        soft_wrap=True,
    )
    out.print(frame.to_string(index=False), soft_wrap=True)
    for column, (low, high) in report.clamps.items():
        out.print(
            f"clamping range for {column}: [{low:.6g}, {high:.6g}] — the least expected error "
            f"of one {report.clamp_workload.upper()}({column}) per group at workload ε = "
            f"{float(report.workload_epsilon):g} (pass --bounds {column}={low:.6g}:{high:.6g})",
            soft_wrap=True,
        )
        out.print(report.clamp_table(column).to_string(index=False), soft_wrap=True)


def _cap(ledger: Any, dataset: str | None) -> Any:
    from deniable.errors import UnknownDataset

    try:
        return ledger.cap(dataset) if dataset else None
    except UnknownDataset:
        pass
    raise CommandFailed(
        "the ledger has no such dataset yet: give its total budget with --budget (and "
        "--dataset to name it)",
        exit_code=ExitCode.ERROR,
        code="invalid_parameter",
    )


def _print_utility(analysis: Any, clamps: list[Any], as_json: bool) -> None:
    cands = analysis.candidates
    shown = [c for c in cands if c <= 64]
    rows = [
        {"max_groups": m, "max_rows": r, "share of rows kept": round(analysis.share(m, r), 4)}
        for m in shown
        for r in shown
    ]
    ranges = {
        c.column: [{"share_clamped": s, "low": lo, "high": hi} for s, lo, hi in c.ranges()]
        for c in clamps
    }
    if as_json:
        emit_json(
            {"non_private": True, "rows": analysis.rows, "candidates": rows, "clamps": ranges}
        )
        return
    out = console()
    out.print(
        "NON-PRIVATE (exact, from the data, not charged; for the curator only): share of "
        f"the {analysis.rows:,} rows each policy keeps",
        soft_wrap=True,
    )
    from rich.table import Table

    table = Table()
    table.add_column("max_groups \\ max_rows")
    for r in shown:
        table.add_column(str(r))
    for m in shown:
        table.add_row(str(m), *(f"{analysis.share(m, r):.0%}" for r in shown))
    out.print(table)
    for c in clamps:
        out.print(
            f"NON-PRIVATE: the narrowest clamping range of {c.column} (on the tuning grid) that "
            f"clamps at most a given share of its {c.values:,} values",
            soft_wrap=True,
        )
        shares = Table()
        for header in ("share clamped ≤", "low", "high"):
            shares.add_column(header, justify="right")
        for s, lo, hi in c.ranges():
            shares.add_row(f"{s:.2%}", f"{lo:.6g}", f"{hi:.6g}")
        out.print(shares)

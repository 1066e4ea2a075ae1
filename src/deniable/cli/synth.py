r"""``deniable synth``: release a differentially private synthetic table (MST or AIM).

On a local file (``--data FILE --unit COLUMN|row``) with its ledger (``--ledger PATH``; the
dataset's total budget ``--budget``/``--budget-delta`` when the ledger is new): measures the
table's marginals in the engine, charged once (``--epsilon`` with ``--delta``, or ``--rho``),
and writes the synthetic rows to ``--out`` (``.csv`` or ``.parquet``):
:meth:`deniable.curator.session.Session.synthesize`. Numeric columns need ``--bounds``
(``--bins`` equal-width bins over them) or ``--quantiles COL=N:LO:HI`` (DP quantile bins over
a public search range, measured within the release), text columns ``--keys`` or
``--select-keys COL`` (DP partition selection within the release; needs ``--delta``).

``--utility`` also prints the curator's NON-PRIVATE report (the total variation of every 1-,
2- and 3-way marginal against the real table): exact, from the data, not charged; for the
curator only.
"""

from __future__ import annotations

from contextlib import ExitStack
from fractions import Fraction
from pathlib import Path
from typing import Any

import click

from deniable.cli.common import (
    LEDGER,
    CommandFailed,
    ExitCode,
    console,
    emit_json,
    fraction_option,
    handles_errors,
    json_option,
    loss_text,
    make_loss,
    open_ledger,
    parse_bounds,
    parse_keys,
    progress,
)
from deniable.cli.query import LOCAL_ANALYST, ROW_UNIT, loss_parts, table_name_of


@click.command(name="synth")
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, path_type=Path),
    required=True,
    help="The CSV or Parquet file to synthesise.",
)
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the synthetic rows (.csv or .parquet).",
)
@click.option("--table", default=None, help="The table's name (default: file stem).")
@click.option(
    "--unit",
    metavar="COLUMN|row",
    required=True,
    help="The column identifying a person (needs --max-rows), or 'row'.",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    help="--unit COLUMN, required: most rows of one person measured (the sensitivity).",
)
@click.option(
    "--columns",
    default=None,
    metavar="A,B,…",
    help="The synthetic table's columns (default: all but the unit).",
)
@click.option("--bounds", multiple=True, metavar="COL=LO:HI", help="Numeric column's range.")
@click.option("--keys", multiple=True, metavar="COL=V1,V2,…", help="A column's public values.")
@click.option(
    "--bins",
    type=click.IntRange(1, 1024),
    default=16,
    show_default=True,
    help="Equal-width bins of each numeric column.",
)
@click.option(
    "--quantiles",
    multiple=True,
    metavar="COL=N[:LO:HI][:log]",
    help="DP quantile bins of a numeric column: at most N bins, over LO:HI (default: its "
    "--bounds), on a log grid with ':log'. Measured within the release (ρ/10 of it).",
)
@click.option(
    "--select-keys",
    multiple=True,
    metavar="COL[=MAX]",
    help="Keys of a text or integer column by DP partition selection (at most MAX, default "
    "100); needs --delta. Measured within the release.",
)
@click.option(
    "--method",
    type=click.Choice(["aim", "mst"]),
    default="aim",
    show_default=True,
    help="AIM (adaptive, workload of 2- and 3-way marginals) or MST (spanning tree).",
)
@click.option(
    "--rows",
    type=click.IntRange(min=1),
    default=None,
    help="Rows to generate (default: the noisy number of rows measured).",
)
@fraction_option("--epsilon", help="ε of the release (with --delta).")
@fraction_option("--delta", help="δ of the release.")
@fraction_option("--rho", help="ρ of the release (ρ budgets, zCDP accountant).")
@click.option("--ledger", "ledger_path", type=LEDGER, required=True)
@click.option("--dataset", default=None, help="The ledger's name of the dataset (default: table).")
@fraction_option("--budget", help="The dataset's total ε (or ρ), when the ledger is new.")
@fraction_option("--budget-delta", help="The dataset's total δ, when the ledger is new.")
@click.option(
    "--utility",
    is_flag=True,
    default=False,
    help="Curator only: also print the NON-PRIVATE marginal errors against the real table.",
)
@json_option
@handles_errors
def command(
    data_path: Path,
    out_path: Path,
    table: str | None,
    unit: str,
    max_rows: int | None,
    columns: str | None,
    bounds: tuple[str, ...],
    keys: tuple[str, ...],
    bins: int,
    quantiles: tuple[str, ...],
    select_keys: tuple[str, ...],
    method: str,
    rows: int | None,
    epsilon: Fraction | None,
    delta: Fraction | None,
    rho: Fraction | None,
    ledger_path: Path | str,
    dataset: str | None,
    budget: Fraction | None,
    budget_delta: Fraction | None,
    utility: bool,
    as_json: bool,
) -> None:
    r"""Release a DP synthetic table (one charge of --epsilon/--delta or --rho).

    \b
    Examples:
      deniable synth --data people.csv --unit id --max-rows 1 --bounds age=0:100 \\
          --keys sex=F,M --epsilon 1 --delta 1e-6 --method mst --out synthetic.csv \\
          --ledger people.ledger --budget 3 --budget-delta 1e-5
    """
    from deniable.accounting.loss import EpsilonDelta, Rho
    from deniable.curator.session import Session
    from deniable.query.catalog import ROW
    from deniable.synth.release import utility_report

    suffix = out_path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise click.UsageError("--out must end in .csv or .parquet")
    if unit != ROW_UNIT and max_rows is None:
        raise click.UsageError(
            f"--unit {unit} needs --max-rows: the most rows of one person the release measures "
            "(the sensitivity of every marginal); a public choice, never read from the data"
        )
    if unit == ROW_UNIT and max_rows is not None:
        raise click.UsageError("--unit row: each row is a person; leave --max-rows out")
    loss = make_loss(epsilon=epsilon, delta=delta, rho=rho, what="the release's loss")
    name = table or table_name_of(data_path)
    with ExitStack() as stack:
        ledger = stack.enter_context(open_ledger(ledger_path, create=True))
        cap: Any
        if budget is not None:
            if isinstance(loss, Rho):
                cap = Rho(rho=budget)
            else:
                if budget_delta is None:
                    raise click.UsageError("--budget needs --budget-delta (Gaussian noise needs δ)")
                cap = EpsilonDelta(epsilon=budget, delta=budget_delta)
        else:
            cap = _cap(ledger, dataset or name)
        session = stack.enter_context(
            Session(budget=cap, ledger=ledger, dataset=dataset or name, analyst=LOCAL_ANALYST)
        )
        with progress(f"reading {data_path.name}"):
            person = unit != ROW_UNIT
            session.add_table(
                name,
                data_path,
                privacy_unit=unit if person else ROW,
                bounds=parse_bounds(bounds) or None,
                max_groups=1 if person else None,
                max_rows=max_rows,
                public_keys=parse_keys(keys) or None,
            )
        eps, dlt, r = loss_parts(loss)
        chosen = None if columns is None else [c.strip() for c in columns.split(",")]
        bin_spec: Any = bins
        if quantiles or select_keys:
            info = session.tables[name]
            names = chosen or [c.name for c in info.columns if c.name != info.policy.privacy_unit]
            bin_spec = dict.fromkeys(names, bins)
            bin_spec.update(_parse_measured(quantiles, select_keys))
        with progress(f"measuring and synthesising ({method})"):
            synthetic = session.synthesize(
                name,
                columns=chosen,
                epsilon=eps,
                delta=dlt,
                rho=r,
                method=method,
                rows=rows,
                bins=bin_spec,
            )
        report = utility_report(session, name, synthetic) if utility else None
        remaining = session.budget.remaining
    frame = synthetic.to_pandas()
    if suffix == ".csv":
        frame.to_csv(out_path, index=False)
    else:
        frame.to_parquet(out_path, index=False)
    scales = synthetic.noise_scales()
    if as_json:
        doc: dict[str, object] = {
            "rows": len(synthetic),
            "out": str(out_path),
            "method": method,
            "charged": loss_text(synthetic.loss),
            "charge_id": synthetic.charge_id,
            "remaining": loss_text(remaining),
            "measurements": scales.to_dict(orient="records"),
        }
        if report is not None:
            doc["utility_non_private"] = report.summary().to_dict(orient="records")
        emit_json(doc)
        return
    out = console()
    out.print(
        f"wrote {len(synthetic):,} synthetic rows ({method}) to {out_path}; charged "
        f"{loss_text(synthetic.loss)} once (charge {synthetic.charge_id}); remaining "
        f"{loss_text(remaining)}",
        soft_wrap=True,
    )
    out.print(scales.to_string(index=False), soft_wrap=True)
    if report is not None:
        out.print(
            "NON-PRIVATE (exact, from the data, not charged; for the curator only): total "
            "variation of the synthetic marginals against the real table",
            soft_wrap=True,
        )
        out.print(report.summary().to_string(index=False), soft_wrap=True)


def _parse_measured(quantiles: tuple[str, ...], select_keys: tuple[str, ...]) -> dict[str, Any]:
    """``--quantiles`` and ``--select-keys`` as ``Quantiles`` and ``SelectKeys`` per column."""
    from deniable.synth import Quantiles, SelectKeys

    out: dict[str, Any] = {}
    for item in quantiles:
        col, sep, rest = item.partition("=")
        parts = rest.split(":")
        scale = "linear"
        if parts and parts[-1].strip().lower() in ("log", "linear"):
            scale = parts.pop().strip().lower()
        try:
            if not sep or len(parts) not in (1, 3):
                raise ValueError
            n = int(parts[0])
            within = (Fraction(parts[1]), Fraction(parts[2])) if len(parts) == 3 else None
        except (ValueError, ZeroDivisionError):
            raise click.UsageError(
                f"--quantiles {item!r}: write COL=N, COL=N:LO:HI or COL=N:LO:HI:log"
            ) from None
        out[col.strip()] = Quantiles(n, within=within, scale=scale)
    for item in select_keys:
        col, sep, most = item.partition("=")
        try:
            out[col.strip()] = SelectKeys(int(most)) if sep else SelectKeys()
        except ValueError:
            raise click.UsageError(f"--select-keys {item!r}: write COL or COL=MAX") from None
    return out


def _cap(ledger: Any, dataset: str) -> Any:
    from deniable.errors import UnknownDataset

    try:
        return ledger.cap(dataset)
    except UnknownDataset:
        pass
    raise CommandFailed(
        "the ledger has no such dataset yet: give its total budget with --budget and "
        "--budget-delta (or --budget with --rho for a ρ budget), and --dataset to name it",
        exit_code=ExitCode.ERROR,
        code="invalid_parameter",
    )

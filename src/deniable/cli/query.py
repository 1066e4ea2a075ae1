"""``deniable query SQL``: answer one aggregate query with differential privacy.

Two sources:

* ``--data FILE`` (CSV or Parquet): a one-off :class:`~deniable.curator.session.Session` on
  the file, with the privacy unit, clamping bounds and public keys given on the command line.
  Its budget is kept in ``--ledger PATH`` when given (shared with every other query on the same
  ledger and dataset name); without a ledger nothing is recorded beyond this one query.
* ``--config FILE --dataset NAME``: a dataset of the service configuration, answered through
  :class:`deniable.server.service.Service` — the same path as the HTTP API, charged to the
  dataset's ledger (to ``--as ANALYST``'s allowance when given).

Privacy loss: the query is charged exactly the ``--epsilon``/``--delta``/``--rho`` given (or
nothing when the identical query was answered before and is replayed from the ledger).
"""

from __future__ import annotations

import math
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from deniable.cli.common import (
    CommandFailed,
    ExitCode,
    console,
    emit_json,
    fraction_option,
    handles_errors,
    json_option,
    load_config,
    loss_doc,
    make_loss,
    open_ledger,
    parse_bounds,
    parse_keys,
    progress,
)

if TYPE_CHECKING:
    from deniable.accounting.loss import PrivacyLoss
    from deniable.query.answer import Answer

LOCAL_ANALYST = "curator"
"""Who a ``--data`` query is recorded under when ``--as`` is not given."""


@click.command(name="query")
@click.argument("sql")
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="A local CSV or Parquet file to query (a one-off session).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The service configuration (TOML) whose --dataset to query.",
)
@click.option("--dataset", default=None, help="The dataset (config) or its ledger name (--data).")
@click.option("--as", "analyst", default=None, help="The analyst to charge (default: the curator).")
@click.option(
    "--table", default=None, help="--data: the table's name in FROM (default: file stem)."
)
@click.option(
    "--unit",
    metavar="COLUMN|row",
    default=None,
    help="--data, required: the column identifying a person (all their rows are protected "
    "together; needs --max-groups and --max-rows), or 'row' (each row is its own unit).",
)
@click.option(
    "--bounds",
    multiple=True,
    metavar="COL=LO:HI",
    help="--data: clamping range of a summed/averaged column (repeatable; public choice).",
)
@click.option(
    "--keys",
    multiple=True,
    metavar="COL=V1,V2,…",
    help="--data: the public domain of a group-by column (repeatable).",
)
@click.option(
    "--max-groups",
    type=click.IntRange(min=1),
    default=None,
    help="--data with --unit COLUMN, required: most groups one person contributes to.",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    help="--data with --unit COLUMN, required: most rows one person contributes to a group.",
)
@click.option(
    "--edges",
    metavar="SRC:DST",
    default=None,
    help="--data is a graph's edge table with these two end columns (undirected); FROM names "
    "the graph. --unit is then edge (default) or node; needs --max-degree.",
)
@click.option(
    "--max-degree",
    type=click.IntRange(min=1),
    default=None,
    help="--edges: the public degree bound D (node-level answers truncate to it).",
)
@click.option(
    "--sample-rate",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    help="--data: answer from a Bernoulli sample of the privacy units at this rate "
    "(charged the amplified loss).",
)
@click.option(
    "--population",
    is_flag=True,
    default=False,
    help="--sample-rate: report population-scale counts and sums (÷ rate, intervals that "
    "include the sampling error) instead of the sample's.",
)
@fraction_option("--epsilon", help="ε to spend on this query.")
@fraction_option("--delta", help="δ to spend (private group keys).")
@fraction_option("--rho", help="ρ to spend (zCDP budgets).")
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="--data: the ledger that keeps the budget (created if missing).",
)
@fraction_option(
    "--budget",
    help="--data: the dataset's total budget, same kind as the query's (ε or ρ); "
    "default: the ledger's cap, or this query's loss without a ledger.",
)
@fraction_option("--budget-delta", help="--data: the total budget's δ.")
@click.option(
    "--nonnegative",
    is_flag=True,
    default=False,
    help="Clip counts and their interval ends at 0 (free post-processing; biased upward "
    "near 0). Off by default: counts are unbiased and may be negative.",
)
@click.option(
    "--level",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="Confidence level of the intervals.",
)
@json_option
@handles_errors
def command(
    sql: str,
    data_path: Path | None,
    config_path: Path | None,
    dataset: str | None,
    analyst: str | None,
    table: str | None,
    unit: str | None,
    bounds: tuple[str, ...],
    keys: tuple[str, ...],
    max_groups: int | None,
    max_rows: int | None,
    edges: str | None,
    max_degree: int | None,
    sample_rate: float | None,
    population: bool,
    epsilon: Fraction | None,
    delta: Fraction | None,
    rho: Fraction | None,
    ledger_path: Path | str | None,
    budget: Fraction | None,
    budget_delta: Fraction | None,
    nonnegative: bool,
    level: float,
    as_json: bool,
) -> None:
    r"""Answer SQL with differential privacy; print values, intervals, charge and budget left.

    \b
    Examples:
      deniable query "SELECT COUNT(*) AS n FROM people" --data people.csv --unit row \\
          --epsilon 0.5
      deniable query "SELECT AVG(age) AS a FROM people" --data people.csv --unit id \\
          --max-groups 1 --max-rows 1 --bounds age=0:100 --epsilon 1 \\
          --ledger people.ledger --budget 3
      deniable query "SELECT COUNT(*) AS n FROM visits" --config service.toml \\
          --dataset visits --as ann --epsilon 0.1
      deniable query "SELECT degree, COUNT(*) AS n FROM degrees(friends) GROUP BY degree" \\
          --data friends.csv --edges a:b --unit node --max-degree 50 --epsilon 0.5
      deniable query "SELECT COUNT(*) AS n FROM people" --data people.csv --unit id \\
          --max-groups 1 --max-rows 1 --sample-rate 0.1 --population --epsilon 1
    """
    loss = make_loss(epsilon=epsilon, delta=delta, rho=rho, what="the query's loss")
    if (data_path is None) == (config_path is None):
        raise click.UsageError(
            "query either a local file (--data FILE) or a configuration's "
            "dataset (--config FILE --dataset NAME)"
        )
    if config_path is not None:
        local_only = {
            "--table": table,
            "--unit": unit,
            "--bounds": bounds or None,
            "--keys": keys or None,
            "--max-groups": max_groups,
            "--max-rows": max_rows,
            "--ledger": ledger_path,
            "--budget": budget,
            "--budget-delta": budget_delta,
            "--edges": edges,
            "--max-degree": max_degree,
            "--sample-rate": sample_rate,
            "--population": population or None,
        }
        given = [k for k, v in local_only.items() if v is not None]
        if given:
            raise click.UsageError(
                f"{', '.join(given)} apply to --data only: a configuration declares its "
                "datasets' policy, budget and ledger"
            )
        if dataset is None:
            raise click.UsageError("--config needs --dataset NAME")
        name, answer, ledger_shown = _query_config(
            config_path, dataset, sql, loss, analyst, level, nonnegative
        )
    else:
        assert data_path is not None
        graph = _graph_options(edges, unit, max_degree, bounds, keys, max_groups, max_rows)
        if graph is None:
            table_unit(unit, max_groups, max_rows)
        name = dataset or table_name_of(data_path)
        answer, ledger_shown = _query_file(
            data_path,
            sql,
            loss,
            dataset=name,
            analyst=analyst or LOCAL_ANALYST,
            table=table or table_name_of(data_path),
            unit=None if edges is not None else unit,
            bounds=parse_bounds(bounds),
            keys=parse_keys(keys),
            max_groups=max_groups,
            max_rows=max_rows,
            ledger_path=ledger_path,
            budget=budget,
            budget_delta=budget_delta,
            level=level,
            graph=graph,
            sample_rate=sample_rate,
            population=population,
            nonnegative=nonnegative,
        )
    if as_json:
        emit_json(answer_doc(answer, dataset=name, ledger=ledger_shown))
    else:
        _print_answer(answer, dataset=name, ledger=ledger_shown)


ROW_UNIT = "row"
"""``--unit row``: row-level privacy (:data:`deniable.ROW`)."""


def table_unit(unit: str | None, max_groups: int | None, max_rows: int | None) -> None:
    """Check that ``--unit`` is stated, with ``--max-groups``/``--max-rows`` for a column.

    Raises:
        click.UsageError: ``--unit`` missing, or a unit column without both bounds.
    """
    if unit is None:
        raise click.UsageError(
            "--data needs --unit: --unit COLUMN names the column that identifies a person "
            "(all of a person's rows are protected together), --unit row makes each row its "
            "own unit (only right when no person has two rows). There is no default: the "
            "choice decides whom the answer protects"
        )
    if unit != ROW_UNIT and (max_groups is None or max_rows is None):
        missing = " and ".join(
            o for o, v in (("--max-groups", max_groups), ("--max-rows", max_rows)) if v is None
        )
        raise click.UsageError(
            f"--unit {unit} needs {missing}: the most groups one person may contribute to per "
            "query and the most rows one person may contribute to one group (e.g. "
            "--max-groups 1 --max-rows 1 when each person has one row); they are public "
            "choices, never read from the data"
        )


def table_name_of(path: Path) -> str:
    """The SQL table name a data file is queried under: its stem, made a safe identifier."""
    stem = path.name.split(".")[0]
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
    if not cleaned or cleaned[0].isdigit():
        cleaned = "t_" + cleaned
    return cleaned


def _budget(
    loss: PrivacyLoss, budget: Fraction | None, budget_delta: Fraction | None
) -> PrivacyLoss | None:
    """The total budget given on the command line, of the query's kind, or None."""
    from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho

    if budget is None:
        if budget_delta is not None:
            raise click.UsageError("--budget-delta needs --budget (the total ε)")
        return None
    if isinstance(loss, Rho):
        if budget_delta is not None:
            raise click.UsageError("a ρ budget has no δ: drop --budget-delta")
        return Rho(rho=budget)
    if isinstance(loss, EpsilonDelta) or budget_delta is not None:
        return EpsilonDelta(epsilon=budget, delta=budget_delta or 0)
    return Epsilon(epsilon=budget)


@dataclass(frozen=True)
class GraphOptions:
    """How ``--data`` is read as a graph (``--edges``): its end columns, unit and bound."""

    source_col: str
    target_col: str
    unit: str
    max_degree: int


def _graph_options(
    edges: str | None,
    unit: str | None,
    max_degree: int | None,
    bounds: tuple[str, ...],
    keys: tuple[str, ...],
    max_groups: int | None,
    max_rows: int | None,
) -> GraphOptions | None:
    """The graph reading of ``--data``, or None for a table; usage errors name the option."""
    if edges is None:
        if max_degree is not None:
            raise click.UsageError("--max-degree applies to a graph: give --edges SRC:DST")
        return None
    ends = edges.split(":")
    if len(ends) != 2 or not all(ends):
        raise click.UsageError("--edges takes the two end columns as SRC:DST, e.g. a:b")
    table_only = {
        "--bounds": bounds or None,
        "--keys": keys or None,
        "--max-groups": max_groups,
        "--max-rows": max_rows,
    }
    given = [k for k, v in table_only.items() if v is not None]
    if given:
        raise click.UsageError(
            f"{', '.join(given)} apply to tables, not to a graph (--edges): its contributions "
            "are bounded by --max-degree"
        )
    if max_degree is None:
        raise click.UsageError("--edges needs --max-degree D (the public degree bound)")
    level = unit or "edge"
    if level not in ("edge", "node"):
        raise click.UsageError("with --edges, --unit is edge or node")
    return GraphOptions(ends[0], ends[1], level, max_degree)


def _query_file(
    data_path: Path,
    sql: str,
    loss: PrivacyLoss,
    *,
    dataset: str,
    analyst: str,
    table: str,
    unit: str | None,
    bounds: dict[str, tuple[Fraction, Fraction]],
    keys: dict[str, list[object]],
    max_groups: int | None,
    max_rows: int | None,
    ledger_path: Path | str | None,
    budget: Fraction | None,
    budget_delta: Fraction | None,
    level: float,
    graph: GraphOptions | None = None,
    sample_rate: float | None = None,
    population: bool = False,
    nonnegative: bool = False,
) -> tuple[Answer, str | None]:
    """Answer ``sql`` on a local file through a one-off Session; return it and the ledger."""
    from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho
    from deniable.curator.session import Session

    cap = _budget(loss, budget, budget_delta)
    with ExitStack() as stack:
        if ledger_path is None:
            click.echo(
                "warning: no --ledger: this query's spending is not recorded anywhere; "
                "pass --ledger PATH to account for every query on this data",
                err=True,
            )
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="deniable-"))
            ledger = stack.enter_context(open_ledger(Path(tmp) / "ledger.db", create=True))
        else:
            ledger = stack.enter_context(open_ledger(ledger_path, create=True))
        if cap is None:
            cap = _registered_cap(ledger, dataset)
        if cap is None:
            cap = loss
            if ledger_path is not None:
                raise CommandFailed(
                    f"the ledger has no dataset {dataset!r} yet: give its total budget with "
                    "--budget (and --budget-delta)",
                    exit_code=ExitCode.ERROR,
                    code="invalid_parameter",
                )
        assert isinstance(cap, Epsilon | EpsilonDelta | Rho)
        session = stack.enter_context(
            Session(budget=cap, ledger=ledger, dataset=dataset, analyst=analyst)
        )
        if population and sample_rate is None:
            raise click.UsageError("--population needs --sample-rate")
        with progress(f"reading {data_path.name}"):
            if graph is not None:
                if sample_rate is not None:
                    raise click.UsageError("--sample-rate applies to tables, not to --edges")
                session.add_graph(
                    table,
                    data_path,
                    source_col=graph.source_col,
                    target_col=graph.target_col,
                    unit=graph.unit,
                    max_degree=graph.max_degree,
                )
            else:
                from deniable.query.catalog import ROW

                session.add_table(
                    table,
                    data_path,
                    privacy_unit=ROW if unit == ROW_UNIT else unit,
                    bounds=bounds or None,
                    max_groups=max_groups,
                    max_rows=max_rows,
                    public_keys=keys or None,
                    sample_rate=sample_rate,
                )
        with progress("running the query"):
            eps, delta, rho = loss_parts(loss)
            answer = session.sql(
                sql,
                epsilon=eps,
                delta=delta,
                rho=rho,
                level=level,
                population=population,
                nonnegative=nonnegative,
            )
        return answer, None if ledger_path is None else str(ledger_path)
    raise AssertionError("unreachable")  # pragma: no cover


def _registered_cap(ledger: Any, dataset: str) -> PrivacyLoss | None:
    from deniable.errors import UnknownDataset

    try:
        cap: PrivacyLoss = ledger.cap(dataset)
    except UnknownDataset:
        return None
    return cap


def loss_parts(loss: PrivacyLoss) -> tuple[Fraction | None, Fraction | None, Fraction | None]:
    """``(epsilon, delta, rho)`` of a loss, None where it has no such component."""
    from deniable.accounting.loss import Epsilon, EpsilonDelta

    if isinstance(loss, Epsilon):
        return loss.epsilon, None, None
    if isinstance(loss, EpsilonDelta):
        return loss.epsilon, loss.delta, None
    return None, None, loss.rho


def _query_config(
    config_path: Path,
    dataset: str,
    sql: str,
    loss: PrivacyLoss,
    analyst: str | None,
    level: float,
    nonnegative: bool = False,
) -> tuple[str, Answer, str | None]:
    """Answer ``sql`` on a configuration's dataset through the service core."""
    from deniable.server.service import Service

    config = load_config(config_path)
    with progress("opening the configuration's datasets"):
        service = Service(config)
    try:
        principal = _principal(service, analyst)
        with progress("running the query"):
            eps, delta, rho = loss_parts(loss)
            answer = service.query(
                principal,
                dataset,
                sql,
                epsilon=eps,
                delta=delta,
                rho=rho,
                level=level,
                nonnegative=nonnegative,
            )
    finally:
        service.close()
    return dataset, answer, str(config.ledger)


def _principal(service: Any, analyst: str | None) -> Any:
    """Who the query is charged to: ``--as`` (a registered, non-revoked analyst) or the curator."""
    from deniable.ledger.analysts import Principal

    if analyst is None:
        return Principal(name=LOCAL_ANALYST, role="curator")
    known = {a.name: a for a in service.ledger.analysts()}
    info = known.get(analyst)
    if info is None or info.revoked_at is not None:
        raise CommandFailed(
            f"no active analyst named {analyst!r} in the ledger: add one with "
            "`deniable analyst add`",
            exit_code=ExitCode.ERROR,
            code="unknown_analyst",
        )
    return Principal(name=info.name, role=info.role)


# -- output -----------------------------------------------------------------------------------


def _py(value: object) -> object:
    """A cell as a JSON value (NaN and missing values as null)."""
    import numpy as np
    import pandas as pd

    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return str(value)


def answer_doc(answer: Answer, *, dataset: str, ledger: str | None) -> dict[str, object]:
    """The JSON document of an answer: values, intervals, charge and budget left."""
    from deniable.query.answer import interval_coverage, row_policy_line

    m = answer.metadata
    frame = answer.to_pandas()
    return {
        "dataset": dataset,
        "query": m.query,
        "columns": [str(c) for c in frame.columns],
        "rows": [[_py(v) for v in row] for row in frame.itertuples(index=False)],
        "level": m.level,
        "charged": loss_doc(m.loss),
        "cost": loss_doc(m.cost),
        "remaining": loss_doc(m.remaining),
        "cached": m.cached,
        "charge_id": m.charge_id,
        "mechanisms": dict(m.mechanisms),
        "notes": dict(m.notes),
        "bounds": {k: list(v) for k, v in m.bounds.items()},
        "privacy_unit": m.privacy_unit,
        "max_groups": m.max_groups,
        "max_rows": m.max_rows,
        "row_policies": list(m.row_policies),
        "row_policy": row_policy_line(m),
        "interval_coverage": interval_coverage(m),
        "ledger": ledger,
    }


def _print_answer(answer: Answer, *, dataset: str, ledger: str | None) -> None:
    out = console()
    out.print(answer)  # the table, "charged …; remaining …; 95% intervals: …", "rows: …"
    where = f"ledger {ledger}" if ledger is not None else "not recorded in any ledger"
    out.print(f"[dim]dataset {dataset}; {where}[/]")
    for column, note in answer.metadata.notes.items():
        out.print(f"[dim]{column}: {note}[/]")

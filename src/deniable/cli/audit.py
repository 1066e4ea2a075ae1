"""``deniable audit``: measure, from the outside, the ε a whole SQL query actually delivers.

The data owner's check that a query's claimed loss holds on *their* data: two neighbouring
datasets are built from the table by removing one privacy unit — the heaviest contributor
(most rows) and one chosen uniformly at random (from :mod:`deniable.noise`) — and the whole
query is released many times on each. :func:`deniable.audit.audit_query_pairs` turns the
releases into a lower confidence bound on the loss (all released numbers jointly, events
chosen on a held-out split, Clopper–Pearson with Bonferroni over events and pairs), and the
verdict is ``pass`` when the bound does not exceed the claimed ε (or ρ).

Fast path: the engine computes each dataset's exact bounded aggregates once (the test-only
hook :func:`deniable.query.testing.exact_aggregates`, no charge), and each trial draws only
the noise, through the release stage's own mechanism calls (:func:`plan_sampler`): the
noisy measures, the partition-selection mask and the exponential mechanism's choices are
exactly what :func:`deniable.query.release.release` draws; every released column is a
post-processing of them, so auditing them audits the whole answer.

Privacy: nothing is charged to any ledger, but the audit reads the raw data and its report
depends on how much one real person moves the answer: it is a curator-side diagnostic, not
a differentially private release. Do not hand its output to analysts.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import numpy.typing as npt

from deniable.cli.common import (
    CommandFailed,
    ExitCode,
    console,
    emit_json,
    fraction_option,
    handles_errors,
    json_option,
    load_config,
    make_loss,
    parse_bounds,
    parse_keys,
    progress,
)

if TYPE_CHECKING:
    import pandas as pd

    from deniable.accounting.loss import PrivacyLoss
    from deniable.audit import NeighbourPair, QueryAudit, QuerySampler
    from deniable.noise.source import RandomSource
    from deniable.query.measures import Measure
    from deniable.query.plan import DPPlan
    from deniable.query.release import ExactAggregates

Key = tuple[object, ...]
DEFAULT_TRIALS = 50_000


# ----------------------------------------------------------------------------- sampler


def candidate_keys(plan: DPPlan, *exacts: ExactAggregates) -> list[Key]:
    """The groups an answer can show: the public domain, or every key of any dataset."""
    from deniable.query.release import order_keys

    if plan.public_domain is not None:
        return list(plan.public_domain)
    seen: dict[Key, None] = {}
    for exact in exacts:
        for k in exact.decoded_keys():
            seen.setdefault(k, None)
    keys = list(seen)
    return [keys[i] for i in order_keys(keys)]


def output_names(plan: DPPlan, keys: Sequence[Key]) -> list[str]:
    """Names of the columns of :func:`plan_sampler`'s releases, in order."""
    shown = [",".join(str(v) for v in k) or "all" for k in keys]
    names: list[str] = []
    if plan.public_domain is None:
        names += [f"released[{k}]" for k in shown]
    for m in plan.measures:
        label = f"{m.kind}({m.column.name})" if m.column is not None else m.kind
        names += [f"{m.id} {label}[{k}]" for k in shown]
    return names


def plan_sampler(
    plan: DPPlan,
    exact: ExactAggregates,
    keys: Sequence[Key],
    *,
    measures: Sequence[Measure] | None = None,
    source: RandomSource | None = None,
) -> QuerySampler:
    """``sampler(n)``: ``n`` releases of ``plan`` on one dataset's exact aggregates.

    Columns (:func:`output_names`): for private keys, a 0/1 column per candidate key (kept by
    partition selection); then, per measure and key, the noisy measure in its grid units
    (additive measures) or the exponential mechanism's chosen candidate (quantiles), 0
    (resp. −1) when the key was not released. Every draw is the release stage's own
    (:func:`deniable.query.release.additive_release`, :func:`deniable.query.partition.select`,
    :func:`deniable.mechanisms.exponential` on
    :func:`deniable.query.release.quantile_scores`), with the plan's parameters — or with
    ``measures`` instead of ``plan.measures`` (same ids and order), for negative controls.

    Each call spends the plan's loss once per release on this data: a test harness.
    """
    from deniable.mechanisms import exponential
    from deniable.query import partition
    from deniable.query.measures import HistogramMeasure
    from deniable.query.release import additive_release, dense_histogram, quantile_scores

    noised = tuple(plan.measures if measures is None else measures)
    if [m.id for m in noised] != [m.id for m in plan.measures]:
        raise click.UsageError("measures must replace the plan's measures one for one")
    index = {k: i for i, k in enumerate(exact.decoded_keys())}
    rows = np.array([index.get(k, -1) for k in keys], dtype=np.int64)
    present = rows >= 0
    width = len(keys)
    units = np.where(present, exact.units[np.maximum(rows, 0)], 0) if width else rows

    def sampler(n: int) -> npt.NDArray[np.int64]:
        blocks: list[npt.NDArray[np.int64]] = []
        if plan.public_domain is None:
            sel = plan.selection
            assert sel is not None
            mask = partition.select(
                np.tile(units, n),
                epsilon=sel.epsilon,
                delta=sel.delta,
                max_groups=sel.max_groups,
                source=source,
            ).reshape(n, width)
            mask &= present
            blocks.append(mask.astype(np.int64))
        else:
            mask = np.ones((n, width), dtype=np.bool_)
        for m in noised:
            if isinstance(m, HistogramMeasure):
                per = exact.histograms.get(m.id)
                scores = [
                    quantile_scores(
                        dense_histogram(
                            per.cells(exact.keys[r]) if per is not None and r >= 0 else None,
                            m.grid,
                        ),
                        m.q,
                        m.target,
                    )
                    for r in rows.tolist()
                ]
                out = np.full((n, width), -1, dtype=np.int64)
                for t in range(n):
                    for j in np.flatnonzero(mask[t]).tolist():
                        rel = exponential(
                            scores[j], sensitivity=m.sensitivity, epsilon=m.budget, source=source
                        )
                        out[t, j] = int(rel.value)
                blocks.append(out)
                continue
            values = exact.measures[m.id]
            exact_row = np.array(
                [int(values[r]) if r >= 0 else 0 for r in rows.tolist()], dtype=np.int64
            )
            x = np.tile(m.coarsen(exact_row), n)
            noisy = np.asarray(additive_release(m, x, source).value, dtype=np.int64).reshape(
                n, width
            )
            blocks.append(np.where(mask, noisy, 0))
        return np.hstack(blocks) if blocks else np.zeros((n, 0), dtype=np.int64)

    return sampler


# ----------------------------------------------------------------------------- datasets


def _read(path: Path) -> pd.DataFrame:
    import pandas as pd

    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return pd.read_parquet(path)
    if suffix in (".csv", ".txt", ".gz"):
        return pd.read_csv(path)
    raise click.BadParameter(f"{path.name}: give a .csv or .parquet file", param_hint="--data")


def neighbour_units(
    frame: pd.DataFrame, unit: str, *, source: RandomSource | None = None
) -> list[tuple[str, object]]:
    """The units to remove: the heaviest contributor and one chosen uniformly at random.

    Returns ``(label, unit value)`` pairs; labels never show the unit's value.
    """
    from deniable.noise import uniform_int

    if unit not in frame.columns:
        raise click.BadParameter("no such column in the data", param_hint="--unit")
    sizes = frame.groupby(unit, dropna=False, sort=True).size()
    if sizes.size < 2:
        raise CommandFailed(
            "the data holds fewer than two privacy units: nothing to audit",
            exit_code=ExitCode.ERROR,
            code="invalid_parameter",
        )
    heaviest = sizes.index[int(np.argmax(sizes.to_numpy()))]
    pick = int(uniform_int(int(sizes.size), 1, source=source)[0])
    return [("heaviest unit removed", heaviest), ("random unit removed", sizes.index[pick])]


def _exact(
    frame: pd.DataFrame,
    sql: str,
    loss: PrivacyLoss,
    *,
    table: str,
    unit: str,
    bounds: dict[str, tuple[Fraction, Fraction]],
    keys: dict[str, list[object]],
    max_groups: int | None,
    max_rows: int | None,
    public_tables: Sequence[tuple[str, str, tuple[str, ...] | None]],
    tmp: Path,
    tag: str,
) -> tuple[DPPlan, ExactAggregates]:
    """Plan ``sql`` and compute its exact bounded aggregates on ``frame`` (nothing charged)."""
    from deniable.cli.query import loss_parts
    from deniable.curator.session import Session
    from deniable.query.testing import exact_aggregates

    with Session(budget=loss, ledger=tmp / f"audit-{tag}.db", dataset="audit") as s:
        s.add_table(
            table,
            frame,
            privacy_unit=unit,
            bounds=bounds or None,
            max_groups=max_groups,
            max_rows=max_rows,
            public_keys=keys or None,
        )
        for name, path, key in public_tables:
            s.add_public_table(name, path, unique_key=key)
        eps, delta, rho = loss_parts(loss)
        plan, _, exact = exact_aggregates(
            s, sql, not_private=True, epsilon=eps, delta=delta, rho=rho
        )
    return plan, exact


def audit_frame(
    frame: pd.DataFrame,
    sql: str,
    loss: PrivacyLoss,
    *,
    table: str,
    unit: str,
    trials: int = DEFAULT_TRIALS,
    alpha: float = 1e-7,
    bounds: dict[str, tuple[Fraction, Fraction]] | None = None,
    keys: dict[str, list[object]] | None = None,
    max_groups: int | None = None,
    max_rows: int | None = None,
    public_tables: Sequence[tuple[str, str, tuple[str, ...] | None]] = (),
    source: RandomSource | None = None,
) -> tuple[QueryAudit, DPPlan]:
    """Audit ``sql`` on ``frame`` against the frame without its heaviest / a random unit."""
    import tempfile

    from deniable.accounting.loss import EpsilonDelta, Rho
    from deniable.audit import NeighbourPair, audit_query_pairs

    spec: dict[str, Any] = {
        "table": table,
        "unit": unit,
        "bounds": bounds or {},
        "keys": keys or {},
        "max_groups": max_groups,
        "max_rows": max_rows,
        "public_tables": public_tables,
    }
    removed = neighbour_units(frame, unit, source=source)
    with tempfile.TemporaryDirectory(prefix="deniable-audit-") as tmpdir:
        tmp = Path(tmpdir)
        plan, full = _exact(frame, sql, loss, tmp=tmp, tag="full", **spec)
        smaller = []
        for i, (_, value) in enumerate(removed):
            part = frame[frame[unit] != value]
            plan2, exact2 = _exact(part, sql, loss, tmp=tmp, tag=f"n{i}", **spec)
            if plan2.measures != plan.measures:  # pragma: no cover - plans read no data
                raise CommandFailed(
                    "the plan depends on the data", exit_code=ExitCode.ERROR, code="internal"
                )
            smaller.append(exact2)
    keys_all = candidate_keys(plan, full, *smaller)
    names = output_names(plan, keys_all)
    pairs: list[NeighbourPair] = [
        NeighbourPair(
            label,
            plan_sampler(plan, full, keys_all, source=source),
            plan_sampler(plan, exact2, keys_all, source=source),
        )
        for (label, _), exact2 in zip(removed, smaller, strict=True)
    ]
    claimed: float
    delta = 0.0
    if isinstance(plan.loss, Rho):
        measure = "rho"
        claimed = float(plan.loss.rho)
    else:
        measure = "epsilon"
        claimed = float(plan.loss.epsilon)
        if isinstance(plan.loss, EpsilonDelta):
            delta = float(plan.loss.delta)
    result = audit_query_pairs(
        pairs,
        trials=trials,
        claimed=claimed,
        measure="rho" if measure == "rho" else "epsilon",
        alpha=alpha,
        delta=delta,
        names=names,
    )
    return result, plan


# ----------------------------------------------------------------------------- command


@click.command(name="audit")
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A local CSV or Parquet file holding the table.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A service configuration (TOML) whose --dataset to audit.",
)
@click.option("--dataset", default=None, help="--config: the dataset to audit.")
@click.option("--query", "sql", required=True, help="The SQL query to audit.")
@click.option(
    "--unit",
    default=None,
    help="--data, required: the privacy-unit column (one person); needs --max-groups and "
    "--max-rows.",
)
@click.option("--table", default=None, help="--data: the table's name in FROM (default: stem).")
@click.option("--bounds", multiple=True, metavar="COL=LO:HI", help="--data: clamping ranges.")
@click.option("--keys", multiple=True, metavar="COL=V1,V2,…", help="--data: public key domains.")
@click.option(
    "--max-groups",
    type=click.IntRange(min=1),
    default=None,
    help="--data, required: most groups one person contributes to.",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=None,
    help="--data, required: most rows one person contributes to one group.",
)
@fraction_option("--epsilon", help="The ε the query claims (and is planned with).")
@fraction_option("--delta", help="The δ (private group keys).")
@fraction_option("--rho", help="A zCDP ρ instead of ε.")
@click.option(
    "--trials",
    type=click.IntRange(min=100),
    default=DEFAULT_TRIALS,
    show_default=True,
    help="Releases drawn on each dataset.",
)
@click.option(
    "--alpha",
    type=click.FloatRange(0, 0.5, min_open=True, max_open=True),
    default=1e-7,
    show_default=True,
    help="Probability that an honest query is wrongly failed.",
)
@json_option
@handles_errors
def command(
    data_path: Path | None,
    config_path: Path | None,
    dataset: str | None,
    sql: str,
    unit: str | None,
    table: str | None,
    bounds: tuple[str, ...],
    keys: tuple[str, ...],
    max_groups: int | None,
    max_rows: int | None,
    epsilon: Fraction | None,
    delta: Fraction | None,
    rho: Fraction | None,
    trials: int,
    alpha: float,
    as_json: bool,
) -> None:
    r"""Audit a whole query: a lower confidence bound on the ε it delivers, and a verdict.

    Removes one privacy unit (the heaviest contributor, and a random one), releases the
    query TRIALS times on the full and on each smaller dataset, and bounds the privacy loss
    the releases show. Exit code 1 when the bound exceeds the claimed ε (the claim is
    refuted at confidence 1 − alpha). Nothing is charged; the report is for the curator only
    (it is computed from the raw data and is not differentially private).

    \b
    Examples:
      deniable audit --data visits.csv --unit uid --max-groups 3 --max-rows 2 \\
          --bounds x=0:100 \\
          --query "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM visits GROUP BY k" --epsilon 1
      deniable audit --config service.toml --dataset visits \\
          --query "SELECT COUNT(*) AS n FROM visits" --epsilon 0.5 --json
    """
    loss = make_loss(epsilon=epsilon, delta=delta, rho=rho, what="the claimed loss")
    if (data_path is None) == (config_path is None):
        raise click.UsageError(
            "audit either a local file (--data FILE --unit COL) or a configuration's "
            "dataset (--config FILE --dataset NAME)"
        )
    public: list[tuple[str, str, tuple[str, ...] | None]] = []
    if config_path is not None:
        if dataset is None:
            raise click.UsageError("--config needs --dataset NAME")
        given = [
            opt
            for opt, v in (
                ("--unit", unit),
                ("--table", table),
                ("--bounds", bounds or None),
                ("--keys", keys or None),
                ("--max-groups", max_groups),
                ("--max-rows", max_rows),
            )
            if v is not None
        ]
        if given:
            raise click.UsageError(f"{', '.join(given)} apply to --data only")
        config = load_config(config_path)
        if dataset not in config.datasets:
            raise click.UsageError(f"the configuration has no dataset {dataset!r}")
        ds = config.datasets[dataset]
        if ds.privacy_unit is None:
            raise click.UsageError(
                'the dataset is row-level (privacy_unit = "row"), or has no private table: the '
                "audit removes one person's rows, so it needs a privacy-unit column"
            )
        if not isinstance(ds.source, Path):
            raise click.UsageError(
                f"dataset {dataset!r} lives in PostgreSQL; the audit reads a CSV or Parquet "
                "file: export a copy and pass it with --data FILE --unit COL"
            )
        source_path, unit_col, table_name = ds.source, ds.privacy_unit, ds.table
        spec_bounds = dict(ds.bounds)
        spec_keys = {k: list(v) for k, v in ds.public_keys.items()}
        groups, rows_cap = ds.max_groups, ds.max_rows
        public = [(p.name, str(p.source), p.unique_key) for p in ds.public_tables]
    else:
        assert data_path is not None
        if unit is None or unit == "row":
            raise click.UsageError(
                "--data needs --unit COL (the column identifying a person: the audit removes "
                "one person's rows), with --max-groups and --max-rows"
            )
        from deniable.cli.query import table_name_of, table_unit

        table_unit(unit, max_groups, max_rows)

        source_path, unit_col, table_name = data_path, unit, table or table_name_of(data_path)
        spec_bounds, spec_keys = parse_bounds(bounds), parse_keys(keys)
        groups, rows_cap = max_groups, max_rows
    with progress(f"reading {source_path.name}"):
        frame = _read(source_path)
    with progress(f"auditing ({trials} releases per dataset)"):
        result, plan = audit_frame(
            frame,
            sql,
            loss,
            table=table_name,
            unit=unit_col,
            trials=trials,
            alpha=alpha,
            bounds=spec_bounds,
            keys=spec_keys,
            max_groups=groups,
            max_rows=rows_cap,
            public_tables=public,
        )
    doc = result.describe()
    doc["query"] = sql
    doc["max_groups"], doc["max_rows"] = plan.max_groups, plan.max_rows
    if as_json:
        emit_json(doc)
    else:
        _print(result)
    if not result.passed:
        raise click.exceptions.Exit(int(ExitCode.ERROR))


def _print(result: QueryAudit) -> None:
    out = console()
    sym = "ε" if result.measure == "epsilon" else "ρ"
    out.print(
        f"claimed {sym} = {result.claimed:g}; lower confidence bound on the delivered {sym}: "
        f"{result.lower:.4g} (confidence 1 − {result.loss.alpha:g}, "
        f"{result.trials} releases per dataset)"
    )
    for label, ev in result.pairs:
        best = f" — most revealing event: {ev.events[0].event}" if ev.events else ""
        out.print(f"  {label}: {ev.lower:.4g}{best}")
    if result.passed:
        out.print(f"verdict: PASS — no evidence that the query spends more than {sym} claimed")
    else:
        out.print(f"verdict: FAIL — the query leaks more than the claimed {sym}")

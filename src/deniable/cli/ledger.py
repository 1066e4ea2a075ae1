"""``deniable ledger history|samples|verify|backup|acknowledge|grant``: the curator's ledger.

The ledger is the durable record of every privacy charge. It is tamper-evident: each entry is
chained to the previous one by a hash, and its identity and latest head are kept in an anchor
file beside it, so deleting it, restoring an older copy or editing it is detected when it is
opened. ``verify`` explains what was found (reading only); ``acknowledge`` is the curator's
decision to carry on (the budget spent is never given back, even for rows edited by hand);
``backup`` makes a consistent copy while the service runs (copying the file itself can miss
what is still in its ``-wal`` file).
``samples`` lists the releases whose guarantee comes from sampling alone (safe
k-anonymization): each consumed its sample, which answers nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from deniable.cli.common import (
    CommandFailed,
    ExitCode,
    config_options,
    console,
    emit_json,
    handles_errors,
    is_url,
    json_option,
    ledger_location,
    loss_doc,
    loss_text,
    open_ledger,
    print_titled,
    progress,
)
from deniable.cli.datasets import dataset_names

if TYPE_CHECKING:
    from deniable.ledger import Ledger


@click.group(name="ledger")
def command() -> None:
    """History, verification, backup, acknowledgement (and PostgreSQL grants) of the ledger."""


@command.command(name="history")
@config_options
@click.option("--dataset", default=None, help="Only this dataset (default: all).")
@click.option("--analyst", default=None, help="Only this analyst's charges.")
@json_option
@handles_errors
def history(
    config_path: Path | None,
    ledger_path: Path | str | None,
    dataset: str | None,
    analyst: str | None,
    as_json: bool,
) -> None:
    """Every charge recorded in the ledger, in commit order.

    ``id`` is the ledger's global charge id (the curator's); with --json, ``number`` is the
    release number its analyst is shown (1, 2, … per analyst and dataset).
    """
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor, read_only=True) as ledger:
        shown = ledger.path  # a URL without its password
        names = [dataset] if dataset is not None else dataset_names(ledger, config_path)
        charges = [c for name in names for c in ledger.history(name, analyst=analyst)]
    charges.sort(key=lambda c: c.id)
    if as_json:
        emit_json(
            {
                "ledger": shown,
                "charges": [
                    {
                        "id": c.id,
                        "number": c.number,
                        "time": c.time.isoformat(),
                        "dataset": c.dataset,
                        "analyst": c.analyst,
                        "loss": loss_doc(c.loss),
                        "status": c.status,
                        "query": c.query_text,
                    }
                    for c in charges
                ],
            }
        )
        return
    count = f"{len(charges)} charge" + ("" if len(charges) == 1 else "s")
    title = f"ledger {shown}: {count}"
    table = Table()
    for name, justify in (
        ("id", "right"),
        ("time (UTC)", "left"),
        ("dataset", "left"),
        ("analyst", "left"),
        ("loss", "left"),
        ("status", "left"),
        ("query", "left"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in charges:
        table.add_row(
            str(c.id),
            c.time.strftime("%Y-%m-%d %H:%M:%S"),
            c.dataset,
            c.analyst,
            loss_text(c.loss),
            c.status,
            c.query_text,
        )
    print_titled(console(), title, table)


@command.command(name="samples")
@config_options
@click.option("--dataset", default=None, help="Only this dataset (default: all).")
@json_option
@handles_errors
def samples(
    config_path: Path | None,
    ledger_path: Path | str | None,
    dataset: str | None,
    as_json: bool,
) -> None:
    """Every sampling-based release (consumed sample, rate β, (ε, δ)) and each accountant."""
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor, read_only=True) as ledger:
        shown = ledger.path
        names = [dataset] if dataset is not None else dataset_names(ledger, config_path)
        releases = [r for name in names for r in ledger.sample_releases(name)]
        accountants = {name: ledger.accountant(name) for name in names}
    releases.sort(key=lambda r: r.charge.id)
    specs = {
        name: "basic" if a == "basic" else getattr(a, "spec", str(a))
        for name, a in accountants.items()
    }
    if as_json:
        emit_json(
            {
                "ledger": shown,
                "accountants": specs,
                "sample_releases": [
                    {
                        "charge": r.charge.id,
                        "time": r.time.isoformat(),
                        "dataset": r.dataset,
                        "sample": r.sample,
                        "rate": f"{r.rate.numerator}/{r.rate.denominator}",
                        "loss": loss_doc(r.charge.loss),
                        "analyst": r.charge.analyst,
                        "release": r.charge.query_text,
                    }
                    for r in releases
                ],
            }
        )
        return
    out = console()
    for name, spec in specs.items():
        out.print(f"dataset {name}: accountant {spec}", soft_wrap=True)
    count = f"{len(releases)} sampling-based release" + ("" if len(releases) == 1 else "s")
    title = f"ledger {shown}: {count}"
    table = Table()
    for column in ("charge", "time (UTC)", "dataset", "sample (consumed)", "β", "loss", "release"):
        table.add_column(column)
    for r in releases:
        table.add_row(
            str(r.charge.id),
            r.time.strftime("%Y-%m-%d %H:%M:%S"),
            r.dataset,
            r.sample,
            f"{float(r.rate):g}",
            loss_text(r.charge.loss),
            r.charge.query_text,
        )
    print_titled(out, title, table)


def _report_doc(report: Any, shown: str) -> dict[str, object]:
    return {
        "ledger": shown,
        "ok": report.ok,
        "problems": list(report.problems),
        "seq": report.seq,
        "head": report.head,
        "anchor_seq": report.anchor_seq,
        "ledger_id": report.ledger_id,
    }


ADVICE = (
    "Nothing is answered from this ledger until a curator acts. Inspect it with "
    "`deniable ledger history`; then either put back the ledger that matches the anchor, or "
    "record what happened with `deniable ledger acknowledge --curator NAME --reason TEXT`. "
    "Acknowledging never gives budget back: budget the anchor saw spent is charged again, "
    "caps and allowances edited by hand are written back, and a charge row edited or deleted "
    "by hand counts at the larger of its two amounts. If the chain itself was edited, "
    "acknowledge refuses: restore the last `deniable ledger backup` and acknowledge that."
)


def _print_report(report: Any, shown: str, *, what: str) -> None:
    out = console()
    if report.ok:
        anchored = "no anchor" if report.anchor_seq is None else f"anchored at {report.anchor_seq}"
        out.print(
            f"{what} {shown}: intact — {report.seq} entries, head {report.head[:16]}…, "
            f"{anchored}, identity {report.ledger_id}",
            soft_wrap=True,
        )
        return
    out.print(
        f"[bold red]{what} {shown}: TAMPERED[/] ({report.seq} entries in the database)",
        soft_wrap=True,
    )
    for problem in report.problems:
        out.print(f"  - {problem}", soft_wrap=True)
    out.print(ADVICE, soft_wrap=True)


@command.command(name="verify")
@config_options
@click.option(
    "--full",
    is_flag=True,
    default=False,
    help="Replay the whole chain from its first entry (default: from the last checkpoint).",
)
@json_option
@handles_errors
def verify(
    config_path: Path | None, ledger_path: Path | str | None, full: bool, as_json: bool
) -> None:
    """Check the ledger's hash chain and its anchor; exit 4 when it was tampered with.

    Reads only: the ledger and its anchor are opened read-only and never changed.

    Detects a deleted ledger, an older copy put back in its place, another ledger's file, and
    any edited or removed entry after the last checkpoint the anchor vouches for; with
    --full, any edited or removed entry or row of the whole history.
    """
    path, anchor = ledger_location(config_path, ledger_path)
    with (
        open_ledger(path, anchor=anchor, read_only=True) as ledger,
        progress("verifying the hash chain"),
    ):
        shown = ledger.path
        report = ledger.verify(full=full)
    if as_json:
        emit_json(_report_doc(report, shown))
    else:
        _print_report(report, shown, what="ledger")
    if not report.ok:
        raise click.exceptions.Exit(int(ExitCode.LEDGER))


@command.command(name="backup")
@click.argument("dest", type=click.Path(dir_okay=False, path_type=Path))
@config_options
@click.option("--force", is_flag=True, default=False, help="Replace DEST if it exists.")
@json_option
@handles_errors
def backup(
    dest: Path,
    config_path: Path | None,
    ledger_path: Path | str | None,
    force: bool,
    as_json: bool,
) -> None:
    """Copy the ledger consistently to DEST, even while the service is running.

    Uses SQLite's online backup of a verified ledger. Do not copy the ledger file itself:
    recent charges may still be in its `-wal` file, so the copy would show less spent than
    was. Restoring a backup over a ledger that has moved on since is detected as a rollback.
    """
    path, anchor = ledger_location(config_path, ledger_path)
    if dest.exists() and not force:
        raise CommandFailed(
            f"{str(dest)!r} exists: pass --force to replace it",
            exit_code=ExitCode.ERROR,
            code="invalid_parameter",
        )
    if not is_url(path) and dest.resolve() == Path(path).resolve():
        raise CommandFailed(
            "the backup must go to another file than the ledger",
            exit_code=ExitCode.ERROR,
            code="invalid_parameter",
        )
    with open_ledger(path, anchor=anchor) as ledger, progress(f"copying the ledger to {dest}"):
        shown = ledger.path
        report = ledger.backup(dest)
    if as_json:
        emit_json({**_report_doc(report, shown), "backup": str(dest)})
        return
    console().print(
        f"backed up ledger {shown} (verified) to {dest}: {report.seq} entries, head "
        f"{report.head[:16]}…, identity {report.ledger_id}. The copy has no anchor: opened as "
        "a ledger it reports itself as a fork until a curator acknowledges it, and restoring "
        "it over the ledger is reported as a rollback.",
        soft_wrap=True,
    )


@command.command(name="acknowledge")
@config_options
@click.option("--curator", required=True, help="Who takes the decision (recorded).")
@click.option("--reason", required=True, help="Why (recorded in the ledger).")
@json_option
@handles_errors
def acknowledge(
    config_path: Path | None,
    ledger_path: Path | str | None,
    curator: str,
    reason: str,
    as_json: bool,
) -> None:
    """Accept a tampered ledger's state so that it answers again.

    Records the decision in the ledger and re-anchors it. Budget is never given back: where
    the anchor shows more spent than the database, the difference is charged again (to
    "(lost by rollback)"), and datasets the database lost get the anchor's cap back; caps,
    allowances and revocations edited by hand are written back from the hash chain; charge
    rows edited or deleted by hand are accepted, each charged again for what it lost, so it
    counts at the larger of its two amounts. A ledger whose chain itself was edited is
    refused (exit 4): restore the last backup and acknowledge that.
    """
    path, anchor = ledger_location(config_path, ledger_path)
    ledger: Ledger
    with open_ledger(path, anchor=anchor) as ledger:
        shown = ledger.path
        ledger.acknowledge(curator=curator, reason=reason)
        report = ledger.verify()
    if as_json:
        emit_json(_report_doc(report, shown))
    else:
        _print_report(report, shown, what="ledger")
    if not report.ok:
        raise click.exceptions.Exit(int(ExitCode.LEDGER))


@command.command(name="grant")
@click.argument("role")
@config_options
@json_option
@handles_errors
def grant(
    config_path: Path | None, ledger_path: Path | str | None, role: str, as_json: bool
) -> None:
    """Give the PostgreSQL role ROLE exactly what a service host needs on the ledger.

    Run it once, as the owner of the ledger's tables (an administrator's URL in --ledger or
    --config), after the ledger was created: SELECT and INSERT on every table, UPDATE of only
    the columns the ledger updates, never DELETE or TRUNCATE, so a compromised host cannot
    rewrite what it recorded. The hosts then connect as ROLE.
    """
    path, _ = ledger_location(config_path, ledger_path)
    if not is_url(path):
        raise CommandFailed(
            'grant is for a PostgreSQL ledger (ledger = "postgresql://…"); an SQLite ledger '
            "is protected by its file's permissions",
            exit_code=ExitCode.ERROR,
            code="invalid_parameter",
        )
    from deniable.ledger.postgres import describe, grant_service_role

    grant_service_role(str(path), role)
    if as_json:
        emit_json({"ledger": describe(str(path)), "role": role, "granted": True})
        return
    console().print(
        f"granted {role!r} the service's rights on the ledger at {describe(str(path))}",
        soft_wrap=True,
    )

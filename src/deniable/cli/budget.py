"""``deniable budget``: each dataset's cap, spent and remaining budget, and the allowances.

Reads the ledger only (no data is opened, nothing is charged).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from deniable.cli.common import (
    config_options,
    console,
    emit_json,
    handles_errors,
    json_option,
    ledger_location,
    loss_doc,
    loss_text,
    open_ledger,
    print_titled,
)
from deniable.cli.datasets import dataset_names


@click.command(name="budget")
@config_options
@click.option("--dataset", default=None, help="Only this dataset (default: all).")
@json_option
@handles_errors
def command(
    config_path: Path | None, ledger_path: Path | str | None, dataset: str | None, as_json: bool
) -> None:
    """Cap, spent and remaining budget per dataset, and per analyst with an allowance.

    The dataset's ``remaining`` is its cap less everything spent; an analyst's is their own
    slice: the least of what is left of their allowance and of what the dataset can still
    give them (its cap less everything spent and every other analyst's unspent
    reservation). A reserved allowance is marked ``reserved``.
    """
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor, read_only=True) as ledger:
        shown = ledger.path  # a URL without its password
        names = [dataset] if dataset is not None else dataset_names(ledger, config_path)
        analysts = [a.name for a in ledger.analysts()]
        report = [_dataset_budget(ledger, name, analysts) for name in names]
    if as_json:
        emit_json(
            {
                "ledger": shown,
                "datasets": [
                    {
                        "dataset": d["dataset"],
                        "cap": loss_doc(d["cap"]),
                        "spent": loss_doc(d["spent"]),
                        "remaining": loss_doc(d["remaining"]),
                        "analysts": [
                            {
                                "analyst": a["analyst"],
                                "allowance": loss_doc(a["allowance"]),
                                "reserved": loss_doc(a["reserved"]),
                                "spent": loss_doc(a["spent"]),
                                "remaining": loss_doc(a["remaining"]),
                            }
                            for a in d["analysts"]
                        ],
                    }
                    for d in report
                ],
            }
        )
        return
    out = console()
    title = f"budget ({shown})"
    table = Table()
    for col in ("dataset", "analyst", "cap / allowance", "spent", "remaining"):
        table.add_column(col)
    for d in report:
        table.add_row(
            d["dataset"],
            "(everyone)",
            loss_text(d["cap"]),
            loss_text(d["spent"]),
            loss_text(d["remaining"]),
            style="bold",
        )
        for a in d["analysts"]:
            if a["allowance"] is None:
                slice_ = "no allowance (cap)"
            else:
                slice_ = loss_text(a["allowance"]) + (" reserved" if a["reserved"] else "")
            table.add_row(
                "",
                a["analyst"],
                slice_,
                loss_text(a["spent"]),
                loss_text(a["remaining"]),
            )
    print_titled(out, title, table)
    if not report:
        out.print("no dataset is registered in this ledger yet")


def _dataset_budget(ledger: Any, dataset: str, analysts: list[str]) -> dict[str, Any]:
    """One dataset's totals, and each analyst with an allowance or with charges."""
    from deniable.accounting.loss import Epsilon, EpsilonDelta, Rho

    def nonzero(loss: Any) -> bool:
        if isinstance(loss, Epsilon):
            return bool(loss.epsilon)
        if isinstance(loss, EpsilonDelta):
            return bool(loss.epsilon or loss.delta)
        assert isinstance(loss, Rho)
        return bool(loss.rho)

    charged = {c.analyst: None for c in ledger.history(dataset)}
    rows = []
    for name in dict.fromkeys([*analysts, *charged]):
        allowance = ledger.allowance(dataset, name)
        spent = ledger.spent(dataset, analyst=name)
        if allowance is None and not nonzero(spent):
            continue
        rows.append(
            {
                "analyst": name,
                "allowance": allowance,
                "reserved": ledger.reservation(dataset, name),
                "spent": spent,
                "remaining": ledger.remaining(dataset, analyst=name),
            }
        )
    return {
        "dataset": dataset,
        "cap": ledger.cap(dataset),
        "spent": ledger.spent(dataset),
        "remaining": ledger.remaining(dataset),
        "analysts": rows,
    }

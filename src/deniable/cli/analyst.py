"""``deniable analyst add|list|rotate|revoke|allow``: who may spend a dataset's budget, how much.

Analysts live in the ledger (they are part of who may spend). A new analyst's bearer token is
printed once: only its SHA-256 is stored, so it cannot be shown again — ``rotate`` gives the
same analyst a new one if it is lost. A name is an identity for ever (charges, allowances,
history and stored answers are kept under it): it is never given to anyone else, not even
after its holder was revoked. An allowance is a slice of a dataset's one global cap, never
extra budget: an analyst can spend at most the smaller of what is left of the slice and of
the cap. A *reserved* allowance (``allow --reserve``) is also held back from every other
analyst: what its holder has not spent of it cannot be spent by anyone else, so they can
always spend all of it.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, cast

import click
from rich.table import Table

from deniable.cli.common import (
    CommandFailed,
    ExitCode,
    config_options,
    console,
    emit_json,
    fraction_option,
    handles_errors,
    json_option,
    ledger_location,
    load_config,
    loss_doc,
    loss_text,
    make_loss,
    open_ledger,
    print_titled,
)

ROLES = ("analyst", "curator")
Role = Literal["curator", "analyst"]


@click.group(name="analyst")
def command() -> None:
    """Add, list, rotate and revoke analysts; set their allowances."""


@command.command(name="add")
@click.argument("name")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default="analyst",
    show_default=True,
    help="curator: may manage analysts and see the whole ledger over HTTP.",
)
@config_options
@json_option
@handles_errors
def add(
    name: str, role: str, config_path: Path | None, ledger_path: Path | str | None, as_json: bool
) -> None:
    """Add analyst NAME and print their bearer token (shown only this once)."""
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor, create=True) as ledger:
        token = ledger.add_analyst(name, role=cast(Role, role))
    if as_json:
        emit_json({"name": name, "role": role, "token": token})
        return
    out = console()
    out.print(f"added {role} {name!r}; their token:")
    out.print(token, highlight=False, soft_wrap=True)
    out.print(
        "[bold]Store it now: it will not be shown again[/] (only its hash is kept). "
        f"If it is lost: deniable analyst rotate {name}",
        soft_wrap=True,
    )


@command.command(name="list")
@config_options
@json_option
@handles_errors
def list_(config_path: Path | None, ledger_path: Path | str | None, as_json: bool) -> None:
    """List analysts: name, role, when added and when revoked (never their tokens)."""
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor, read_only=True) as ledger:
        shown = ledger.path  # a URL without its password
        analysts = ledger.analysts()
    if as_json:
        emit_json(
            {
                "analysts": [
                    {
                        "name": a.name,
                        "role": a.role,
                        "created": _time(a.created),
                        "revoked_at": _time(a.revoked_at),
                    }
                    for a in analysts
                ]
            }
        )
        return
    title = f"analysts of {shown}"
    table = Table()
    for col in ("name", "role", "added (UTC)", "revoked (UTC)"):
        table.add_column(col)
    for a in analysts:
        table.add_row(a.name, a.role, _time(a.created) or "", _time(a.revoked_at) or "—")
    print_titled(console(), title, table)


def _time(value: Any) -> str | None:
    if value is None:
        return None
    if hasattr(value, "isoformat"):
        return str(value.isoformat(timespec="seconds"))
    return str(value)


@command.command(name="rotate")
@click.argument("name")
@config_options
@json_option
@handles_errors
def rotate(
    name: str, config_path: Path | None, ledger_path: Path | str | None, as_json: bool
) -> None:
    """Give analyst NAME a new token (the old one stops working); print it once.

    For the same person only (a lost or leaked token, or reinstating a revoked analyst): they
    keep their history, allowances and stored answers. A new person gets a new name.
    """
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor) as ledger:
        token = ledger.rotate_token(name)
    if as_json:
        emit_json({"name": name, "token": token})
        return
    out = console()
    out.print(f"new token of {name!r} (the previous one no longer works):")
    out.print(token, highlight=False, soft_wrap=True)
    out.print("[bold]Store it now: it will not be shown again[/].", soft_wrap=True)


@command.command(name="revoke")
@click.argument("name")
@config_options
@json_option
@handles_errors
def revoke(
    name: str, config_path: Path | None, ledger_path: Path | str | None, as_json: bool
) -> None:
    """Revoke analyst NAME: their token stops working at once (their history stays)."""
    path, anchor = ledger_location(config_path, ledger_path)
    with open_ledger(path, anchor=anchor) as ledger:
        ledger.revoke_analyst(name)
    if as_json:
        emit_json({"name": name, "revoked": True})
    else:
        console().print(f"revoked {name!r}: their token no longer works")


@command.command(name="allow")
@click.argument("name")
@click.option("--dataset", required=True, help="The dataset whose budget is sliced.")
@fraction_option("--epsilon", help="The allowance's ε.")
@fraction_option("--delta", help="The allowance's δ.")
@fraction_option("--rho", help="The allowance's ρ (zCDP datasets).")
@click.option(
    "--reserve",
    is_flag=True,
    default=False,
    help="Also reserve the allowance: what NAME has not spent of it is held back from every "
    "other analyst. Refused when it exceeds what is unspent and unreserved.",
)
@config_options
@json_option
@handles_errors
def allow(
    name: str,
    dataset: str,
    epsilon: Fraction | None,
    delta: Fraction | None,
    rho: Fraction | None,
    reserve: bool,
    config_path: Path | None,
    ledger_path: Path | str | None,
    as_json: bool,
) -> None:
    """Give analyst NAME an allowance: a slice of DATASET's cap (never extra budget).

    The allowance replaces any earlier one and is recorded in the ledger. Its kind must be the
    dataset's (ε, ε and δ, or ρ). An allowance caps NAME's spending but reserves nothing:
    others may spend the dataset's budget first. With --reserve it is a reserved slice: what
    NAME has not spent of it is subtracted from what every other analyst may spend. Setting
    an allowance without --reserve releases a reservation NAME held.
    """
    loss = make_loss(epsilon=epsilon, delta=delta, rho=rho, what="the allowance")
    path, anchor = ledger_location(config_path, ledger_path)
    config = None if config_path is None else load_config(config_path)
    with open_ledger(path, anchor=anchor) as ledger:
        known = {a.name for a in ledger.analysts() if a.revoked_at is None}
        if name not in known:
            raise CommandFailed(
                f"no active analyst named {name!r}: add them first with `deniable analyst add`",
                exit_code=ExitCode.ERROR,
                code="unknown_analyst",
            )
        if config is not None and dataset in config.datasets:
            # What the service does when it starts: the configuration declares the cap.
            ds = config.datasets[dataset]
            ledger.register(dataset, ds.budget, accountant=ds.accountant)
        ledger.set_allowance(dataset, name, loss, reserve=reserve)
        cap = ledger.cap(dataset)
        left = ledger.remaining(dataset, analyst=name)
        reserved = ledger.reservation(dataset, name)
    overridden = config is not None and dataset in config.allowances.get(name, {})
    if overridden:
        click.echo(
            f"warning: the configuration also sets {name!r}'s allowance on {dataset!r}: the "
            "service resets it to the configuration's when it starts; edit the file too",
            err=True,
        )
    if as_json:
        emit_json(
            {
                "name": name,
                "dataset": dataset,
                "allowance": loss_doc(loss),
                "reserved": None if reserved is None else loss_doc(reserved),
                "cap": loss_doc(cap),
                "remaining": loss_doc(left),
            }
        )
        return
    held = "reserved for them" if reserved is not None else "not reserved"
    console().print(
        f"{name!r} may spend {loss_text(loss)} of {dataset!r} ({held}; cap {loss_text(cap)}); "
        f"available to them now: {loss_text(left)}"
    )

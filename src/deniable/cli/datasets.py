"""Which datasets a ledger command covers when ``--dataset`` is not given."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from deniable.cli.common import load_config

if TYPE_CHECKING:
    from deniable.server.config import ServiceConfig


def config_dataset_names(config: ServiceConfig) -> list[str]:
    """The dataset names a loaded configuration declares, in its order."""
    return list(config.datasets)


def dataset_names(ledger: Any, config_path: Path | None) -> list[str]:
    """The registered datasets: the configuration's (those the ledger knows), else the ledger's.

    Raises:
        click.UsageError: neither a configuration nor a ledger that can list its datasets.
    """
    listing = getattr(ledger, "datasets", None)
    registered = list(listing()) if callable(listing) else None
    if config_path is not None:
        names = config_dataset_names(load_config(config_path))
        if registered is not None:
            return [n for n in names if n in registered]
        return [n for n in names if _registered(ledger, n)]
    if registered is None:
        raise click.UsageError("name the dataset with --dataset (or pass --config)")
    return registered


def _registered(ledger: Any, name: str) -> bool:
    from deniable.errors import UnknownDataset

    try:
        ledger.cap(name)
    except UnknownDataset:
        return False
    return True

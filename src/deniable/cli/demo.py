"""``deniable demo``: the main job, the same as ``make demo``."""

from __future__ import annotations

import click


@click.command(name="demo")
def command() -> None:
    """Run the guided demo on a synthetic dataset."""
    from deniable.demo import main

    main()

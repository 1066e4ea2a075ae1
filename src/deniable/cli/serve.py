"""``deniable serve``: run the HTTP query service of a configuration."""

from __future__ import annotations

from pathlib import Path

import click

from deniable.cli.common import handles_errors


@click.command(name="serve")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    envvar="DENIABLE_CONFIG",
    help="The service configuration (TOML). Env: DENIABLE_CONFIG.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="TCP port."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes (they share the ledger; each has its own randomness).",
)
@handles_errors
def command(config_path: Path, host: str, port: int, workers: int) -> None:
    """Serve the configuration's datasets over HTTP (API and web console) until stopped.

    Listens on loopback by default; put it behind TLS before exposing it. Analysts
    authenticate with the tokens of `deniable analyst add`.
    """
    from deniable.cli.common import CommandFailed, ExitCode
    from deniable.server.run import StartFailed, serve

    # A bad configuration fails here (ConfigError, exit 1) before any process starts; a
    # service that cannot open its ledger or datasets fails with exit 6, naming the cause.
    try:
        serve(config_path, host=host, port=port, workers=workers)
    except StartFailed as e:
        raise CommandFailed(str(e), exit_code=ExitCode.START_FAILED, code="start_failed") from e

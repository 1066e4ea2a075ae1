"""``deniable serve`` hands its options to the service's ``serve``; bad configs exit 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from deniable.cli.main import main


def test_serve_passes_its_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import deniable.server.run as run

    calls: list[tuple[object, dict[str, object]]] = []
    monkeypatch.setattr(run, "serve", lambda path, **kw: calls.append((path, kw)))
    config = tmp_path / "s.toml"
    result = CliRunner().invoke(
        main, ["serve", "--config", str(config), "--port", "8123", "--workers", "4"]
    )
    assert result.exit_code == 0, result.output
    assert calls == [(config, {"host": "127.0.0.1", "port": 8123, "workers": 4})]


def test_serve_with_a_bad_configuration_exits_1_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "s.toml"
    config.write_text("ledger = 3\n")
    result = CliRunner().invoke(main, ["serve", "--config", str(config)])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and result.output.count("\n") == 1
    assert CliRunner().invoke(main, ["serve"]).exit_code == 2  # --config is required


def test_budget_json_error_names_the_config_key(tmp_path: Path) -> None:
    config = tmp_path / "s.toml"
    config.write_text("ledger = 3\n")
    result = CliRunner().invoke(main, ["budget", "--config", str(config), "--json"])
    assert result.exit_code == 1
    assert "ledger" in json.loads(result.stdout)["error"]["message"]


CONFIG = """
ledger = "ledger.db"
[datasets.d]
source = "d.csv"
privacy_unit = "row"
budget = {{ epsilon = {cap} }}
"""


def test_a_failed_start_exits_6_and_names_the_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed budget made every worker die while `serve` exited 0 (issue 23)."""
    import deniable.server.run as run
    from deniable.server.config import load_config
    from deniable.server.service import Service

    (tmp_path / "d.csv").write_text("x\n1\n2\n")
    config = tmp_path / "s.toml"
    config.write_text(CONFIG.format(cap=1))
    Service(load_config(config)).close()  # the ledger now records ε = 1 for d
    config.write_text(CONFIG.format(cap=2))
    started: list[object] = []
    monkeypatch.setattr("uvicorn.run", lambda *a, **k: started.append(a))
    for workers in ("1", "2"):
        result = CliRunner().invoke(main, ["serve", "--config", str(config), "--workers", workers])
        assert result.exit_code == 6, result.output
        assert "could not start" in result.output
        assert "budget is ε = 2 but the ledger recorded ε = 1" in result.output
    assert started == []  # no worker was started
    config.write_text(CONFIG.format(cap=1))
    assert CliRunner().invoke(main, ["serve", "--config", str(config)]).exit_code == 0
    assert len(started) == 1 and run.CONFIG_ENV

    # Several workers: the patient supervisor runs them (not uvicorn.run). Both it and
    # uvicorn's Config are replaced here: the real ones set signal handlers and logging in
    # this process.
    class Supervisor:
        def __init__(self, settings: object, sockets: list[object]) -> None:
            self.settings = settings

        def run(self) -> None:
            started.append(self)

    class Settings:
        def __init__(self, app: str, **options: object) -> None:
            self.app, self.options = app, options

        def bind_socket(self) -> None:
            return None

    monkeypatch.setattr(run, "PatientMultiprocess", Supervisor)
    monkeypatch.setattr("uvicorn.Config", Settings)
    args = ["serve", "--config", str(config), "--workers", "2", "--port", "0"]
    assert CliRunner().invoke(main, args).exit_code == 0
    assert len(started) == 2 and isinstance(started[1], Supervisor)
    settings = started[1].settings
    assert isinstance(settings, Settings) and settings.options["workers"] == 2

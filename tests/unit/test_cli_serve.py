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

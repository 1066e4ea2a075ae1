"""Schemathesis against a live server: no 5xx, and every response matches the OpenAPI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from _server_helpers import running

from deniable.ledger import Ledger

FIXTURES = Path(__file__).parent.parent / "fixtures" / "service"
ST = Path(sys.executable).with_name("st")


def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path: Path) -> None:
    for f in FIXTURES.iterdir():
        shutil.copy(f, tmp_path)
    config = tmp_path / "example.toml"
    text = config.read_text()
    text = text.replace("budget = { epsilon = 2.0 }", "budget = { epsilon = 100000 }")
    text = text.replace(
        "rate_limit = { per_second = 10, burst = 50 }",
        "rate_limit = { per_second = 100000, burst = 100000 }",
    )
    text = text.replace(
        "allowance = { students = { epsilon = 1.0 } }",
        "allowance = { students = { epsilon = 100 } }",
    )
    config.write_text(text)
    # The only dataset: fuzzing the name would only ever reach 404.
    (tmp_path / "schemathesis.toml").write_text('[parameters]\n"path.dataset" = "students"\n')
    with Ledger(tmp_path / "ledger.db") as led:
        token = led.add_analyst("cur", role="curator")
    with running(config, workers=1, log=tmp_path / "server.log") as server:
        result = subprocess.run(
            [
                str(ST),
                "run",
                f"{server.url}/openapi.json",
                "--header",
                f"Authorization: Bearer {token}",
                "--checks",
                ",".join(
                    (
                        "not_a_server_error",
                        "response_schema_conformance",
                        "status_code_conformance",
                        "content_type_conformance",
                    )
                ),
                "--max-examples",
                "10",
                "--max-time",
                "20",
                "--seed",
                "1",
                "--no-shrink",
                "--workers",
                "2",
                "--request-timeout",
                "20",
                # Never revoke the token the run itself uses.
                "--exclude-method",
                "DELETE",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    print(output[-2500:])

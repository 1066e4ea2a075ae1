"""``deniable attack`` as a user runs it: a real process, text, JSON and a figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deniable.cli.main", "attack", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_text_report_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "leak.png"
    done = _run("k-anonymity", "--plot", str(out))
    assert done.returncode == 0, done.stderr
    assert "Mondrian" in done.stdout and "35,000,000" in done.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_report() -> None:
    done = _run("averaging", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    deniable = doc["runs"][-1]
    assert doc["attack"] == "averaging" and deniable["stopped_by"] == "budget"
    low, high = deniable["bound"]
    assert low <= deniable["posterior"] <= high


@pytest.mark.parametrize("args", [["nope"], ["averaging", "--plot", "x.txt"]])
def test_bad_input_is_a_clear_error(args: list[str], tmp_path: Path) -> None:
    done = _run(*args)
    assert done.returncode in (1, 2)
    assert "Traceback" not in done.stderr

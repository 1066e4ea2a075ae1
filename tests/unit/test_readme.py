"""The Python examples in README.md run as written (in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


CLIENT = "import deniable.client"
"""Blocks that talk to a running server: run by tests/system/test_client_notebook.py."""


def _blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    return [b for b in blocks if CLIENT not in b]


def test_readme_has_python_examples() -> None:
    assert len(_blocks()) >= 4


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # the examples write their ledgers to the working directory
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, block in enumerate(_blocks()):
        exec(compile(block, f"README.md block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "remaining" in out  # the tour prints the answer and the budget

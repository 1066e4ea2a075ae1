"""The Python examples in README.md run as written (in order, in one namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert len(_blocks()) >= 4


def test_readme_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)  # the examples write their ledgers to the working directory
    namespace: dict[str, object] = {"__name__": "readme"}
    for i, block in enumerate(_blocks()):
        exec(compile(block, f"README.md block {i}", "exec"), namespace)
    out = capsys.readouterr().out
    assert "remaining" in out  # the tour prints the answer and the budget

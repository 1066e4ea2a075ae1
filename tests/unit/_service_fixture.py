"""The service fixture (tests/fixtures/service) copied for a test, its response time off.

``example.toml`` documents the response-time policy with the default it has in production
(every query answered at a 1 s deadline). Tests that are not about timing turn it off, so
that each of their queries does not wait a second.
"""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "service"
TIMED = "response_time = { deadline = 1.0 }"
UNTIMED = 'response_time = "off"'


def copy_example(folder: Path, *, timed: bool = False) -> Path:
    """Copy the fixture into ``folder``; return its ``example.toml`` (untimed by default)."""
    for f in FIXTURES.iterdir():
        if f.is_file():
            shutil.copy(f, folder)
    config = folder / "example.toml"
    text = config.read_text()
    assert TIMED in text, "example.toml no longer shows the response-time default"
    if not timed:
        config.write_text(text.replace(TIMED, UNTIMED))
    return config

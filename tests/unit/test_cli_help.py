"""``deniable CMD --help`` prints its examples line by line (issue 23: they were one paragraph
with literal ``\\b`` and ``\\\\``)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from deniable.cli.main import SUBCOMMANDS, main


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_help_shows_examples_as_written(name: str) -> None:
    result = CliRunner().invoke(main, [name, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    assert "\\b" not in text and "\\\\" not in text
    if "Examples:" in text:
        after = text.split("Examples:", 1)[1].splitlines()
        assert after[1].lstrip().startswith("deniable "), after[:3]

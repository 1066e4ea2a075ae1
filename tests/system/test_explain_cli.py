"""``deniable explain``: sentence, numbers, figure; one-line errors with exit code 2."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from deniable.cli.main import main
from deniable.explain.posterior import approx_posterior_bounds, posterior_bounds


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(main, ["explain", *args])
    return r.exit_code, r.stdout, r.stderr


def test_positional_and_option_agree() -> None:
    a, b = run("1.1"), run("--epsilon", "1.1")
    assert a == b and a[0] == 0
    assert "at most 75.1% sure" in a[1]
    low, high = posterior_bounds(0.5, 1.1)
    assert f"posterior between {low:.6g} and {high:.6g}" in a[1]


def test_json_numbers_with_delta() -> None:
    code, out, _ = run("--epsilon", "1.1", "--delta", "1e-6", "--prior", "0.1", "--json")
    doc = json.loads(out)
    low, high = approx_posterior_bounds(0.1, 1.1, 1e-6, evidence=0.01)
    assert code == 0 and doc["posterior_low"] == low and doc["posterior_high"] == high
    assert doc["delta"] == 1e-6 and doc["evidence"] == 0.01
    assert doc["effective_epsilon"] == pytest.approx(math.log(math.exp(1.1) + 1e-4))


def test_plot_is_written(tmp_path: Path) -> None:
    out = tmp_path / "fig.png"
    code, text, _ = run("--epsilon", "1.1", "--delta", "1e-3", "--plot", str(out))
    assert code == 0 and f"figure written to {out}" in text
    assert out.read_bytes().startswith(b"\x89PNG") and out.stat().st_size > 10_000
    svg = tmp_path / "fig.svg"
    code, text, _ = run("2", "--plot", str(svg), "--json")
    assert code == 0 and json.loads(text)["plot"] == str(svg) and "<svg" in svg.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["1", "--prior", "1.5"], "prior must be a probability in [0, 1]"),
        (["--epsilon", "-1"], "epsilon must be ≥ 0"),
        (["--epsilon", "1", "--delta", "1"], "delta must be in [0, 1)"),
        (["--epsilon", "1", "--delta", "-0.1"], "delta must be ≥ 0"),
        (["--epsilon", "one"], "epsilon must be a number"),
        (["1", "--evidence", "0"], "evidence must be a probability in (0, 1]"),
        (["1", "--plot", "x.jpg"], "name the file .png or .svg"),
        ([], "give ε to explain"),
        (["1", "--epsilon", "2"], "give ε once"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    code, out, err = run(*args)
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert "Traceback" not in out + err
    assert not (tmp_path / "x.jpg").exists()


def test_bad_input_with_json_also_reports_on_stdout() -> None:
    code, out, _ = run("1", "--prior", "1.5", "--json")
    assert code == 2 and json.loads(out)["error"]["exit_code"] == 2


def test_subprocess(tmp_path: Path) -> None:
    out = tmp_path / "p.svg"
    cmd = [sys.executable, "-m", "deniable", "explain", "--epsilon", "1.1", "--plot", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert "at most 75.1% sure" in r.stdout and out.stat().st_size > 10_000
    bad = subprocess.run([*cmd[:4], "1", "--prior", "1.5"], capture_output=True, text=True,
                         timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith("error: prior must be")

"""The ``deniable survey`` command."""

from __future__ import annotations

from click.testing import CliRunner

from deniable.cli.survey import command


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(command, list(args))
    return result.exit_code, result.output


def test_thesis_survey_prints_estimate_interval_and_epsilon() -> None:
    code, out = _run(
        "--n", "10000", "--truth", "0.3", "--mechanism", "coin", "--q", "0.5", "--seed", "1"
    )
    assert code == 0, out
    assert "0.3000" in out  # the truth column
    assert "ε = 1.0986" in out  # ln 3
    assert "Clopper" in out and "normal" in out
    assert "not private" in out  # a seeded run says so


def test_each_mechanism_runs() -> None:
    for args in (
        ["--mechanism", "rr", "--p", "3/4", "--truth", "0.2"],
        ["--mechanism", "krr", "--epsilon", "2", "--truth", "0.5,0.3,0.2"],
        ["--mechanism", "oue", "--epsilon", "1", "--truth", "0.5,0.5"],
        [
            "--mechanism",
            "rappor",
            "--f",
            "0.5",
            "--p",
            "0.5",
            "--q",
            "0.75",
            "--truth",
            "0.6,0.4",
            "--bits",
            "16",
            "--cohorts",
            "4",
        ],
    ):
        code, out = _run("--n", "2000", "--seed", "2", *args)
        assert code == 0, out
        assert "estimate" in out


def test_missing_or_bad_parameters_are_usage_errors() -> None:
    code, out = _run("--n", "100", "--truth", "0.3", "--mechanism", "coin")
    assert code == 2 and "--q" in out
    code, out = _run("--n", "100", "--truth", "0.3", "--mechanism", "rr", "--p", "0.4")
    assert code == 2 and "p must be in" in out
    code, out = _run("--n", "100", "--truth", "0.3,0.7", "--mechanism", "coin", "--q", "0.5")
    assert code == 2
    code, out = _run("--n", "100", "--truth", "abc", "--mechanism", "coin", "--q", "0.5")
    assert code == 2

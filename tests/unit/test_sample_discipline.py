"""Sample discipline (Li–Qardaji–Su §2.6): a sample consumed by a DPS release answers nothing else.

Rules tested, each with the case that must pass and the case that must be refused:

* the ledger records a sampling-based release (sample identity, rate β, (ε, δ)) as a charge
  against the dataset's budget, in the hash chain, and marks the sample consumed;
* a second release on a consumed sample, or one that does not fit the budget, is refused and
  writes nothing;
* a Session refuses — before any charge, replays included — every query on a sampled table
  whose sample was consumed, while its other tables keep answering;
* a session under the zCDP accountant refuses sampled tables (their charges only add);
* ``deniable anonymize --ledger --dataset`` charges its release before writing its output, and
  writes nothing when the budget refuses.
"""

from __future__ import annotations

import csv
import random
import sqlite3
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from deniable import ROW
from deniable.accounting import Epsilon, EpsilonDelta
from deniable.curator.session import Session
from deniable.errors import BudgetExceeded, InvalidParameter, LedgerTampered, UnsafeQuery
from deniable.ledger import Ledger, new_sample_id

CAP = EpsilonDelta(epsilon=2, delta=Fraction(1, 10**5))
RELEASE = EpsilonDelta(epsilon=Fraction(1, 2), delta=Fraction(1, 10**7))


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.db"


@pytest.fixture
def ledger(path: Path) -> Iterator[Ledger]:
    with Ledger(path) as led:
        led.register("d", CAP)
        yield led


def _release(led: Ledger, sample: str, loss: EpsilonDelta = RELEASE) -> None:
    led.record_sample_release(
        "d", loss, sample=sample, rate=0.1, analyst="cur", query_text="anonymize", details={"k": 5}
    )


# -- the ledger ---------------------------------------------------------------------------


def test_release_is_charged_recorded_and_consumes_its_sample(ledger: Ledger, path: Path) -> None:
    sample = new_sample_id()
    assert not ledger.sample_consumed("d", sample)
    _release(ledger, sample)
    assert ledger.sample_consumed("d", sample)
    assert not ledger.sample_consumed("d", new_sample_id())
    assert ledger.spent("d") == RELEASE
    [rel] = ledger.sample_releases("d")
    assert rel.sample == sample and rel.rate == Fraction(1, 10)
    assert rel.charge.loss == RELEASE and rel.charge.details["k"] == 5
    assert ledger.verify().ok
    with Ledger(path) as again:  # durable, and chained
        assert again.verify().ok
        assert again.sample_consumed("d", sample)


def test_a_consumed_sample_cannot_be_released_twice(ledger: Ledger) -> None:
    sample = new_sample_id()
    _release(ledger, sample)
    seq = ledger.verify().seq
    with pytest.raises(UnsafeQuery, match="consumed"):
        _release(ledger, sample)
    assert ledger.verify().seq == seq
    assert ledger.spent("d") == RELEASE


def test_a_release_over_budget_writes_nothing_and_consumes_nothing(ledger: Ledger) -> None:
    sample = new_sample_id()
    with pytest.raises(BudgetExceeded):
        _release(ledger, sample, EpsilonDelta(epsilon=3, delta=0))
    assert not ledger.sample_consumed("d", sample)
    assert ledger.history("d") == []
    assert ledger.sample_releases("d") == []


def test_sample_identities_are_opaque_tokens(ledger: Ledger) -> None:
    for bad in ("", "short", "has space in it", "x" * 129, "ünïcode-identity"):
        with pytest.raises(InvalidParameter):
            _release(ledger, bad)
    with pytest.raises(InvalidParameter):
        ledger.record_sample_release(
            "d", RELEASE, sample=new_sample_id(), rate=0, analyst="a", query_text="q"
        )


def test_deleting_a_release_record_is_detected(ledger: Ledger, path: Path) -> None:
    sample = new_sample_id()
    _release(ledger, sample)
    raw = sqlite3.connect(path)
    raw.execute("DROP TRIGGER sample_releases_append_only_delete")
    raw.execute("DELETE FROM sample_releases")
    raw.commit()
    raw.close()
    report = ledger.verify()
    assert not report.ok and any("sample_releases" in p for p in report.problems)
    with pytest.raises(LedgerTampered):
        _release(ledger, new_sample_id())


# -- the session --------------------------------------------------------------------------


def _session(path: Path, **kw: object) -> Session:
    with pytest.warns(Warning):  # seeded source: tests only
        from deniable.noise.testing import SeededRandom

        return Session(budget=CAP, ledger=path, dataset="d", source=SeededRandom(1), **kw)  # type: ignore[arg-type]


def test_session_refuses_queries_on_a_consumed_sample(path: Path) -> None:
    frame = pd.DataFrame({"x": range(500)})
    with _session(path) as s:
        s.add_table("sampled", frame, sample_rate=0.5, privacy_unit=ROW)
        s.add_table("whole", frame, privacy_unit=ROW)
        query = "SELECT COUNT(*) AS n FROM sampled"
        before = len(s.budget.history)
        with Ledger(path) as other:  # e.g. another process holding the same sample's identity
            other.record_sample_release(
                "d",
                RELEASE,
                sample=s.sample_id("sampled"),
                rate=0.5,
                analyst="cur",
                query_text="safe k-anonymization",
            )
        for q, eps in ((query, 0.1), (query, 0.1), ("SELECT COUNT(*) AS m FROM sampled", 0.2)):
            with pytest.raises(UnsafeQuery, match="consumed"):
                s.sql(q, epsilon=eps)
        assert len(s.budget.history) == before + 1  # only the release was charged
        s.sql("SELECT COUNT(*) AS n FROM whole", epsilon=0.1)  # other tables still answer
        with pytest.raises(InvalidParameter):
            s.sample_id("whole")


def test_a_sample_that_answered_queries_cannot_be_consumed(path: Path) -> None:
    """The other direction of §2.6: a sample that already answered a query may not serve a
    release whose guarantee comes from sampling alone (the query charges name the sample)."""
    frame = pd.DataFrame({"x": range(500)})
    with _session(path) as s:
        s.add_table("sampled", frame, sample_rate=0.5, privacy_unit=ROW)
        s.add_table("fresh", frame, sample_rate=0.5, privacy_unit=ROW)
        s.sql("SELECT COUNT(*) AS n FROM sampled", epsilon=0.1)
        before = len(s.budget.history)
        with Ledger(path) as other:
            with pytest.raises(UnsafeQuery, match="already answered queries"):
                _release(other, s.sample_id("sampled"))
            assert not other.sample_consumed("d", s.sample_id("sampled"))
            assert len(s.budget.history) == before  # nothing charged
            _release(other, s.sample_id("fresh"))  # negative control: an unused sample
        with pytest.raises(UnsafeQuery, match="consumed"):
            s.sql("SELECT COUNT(*) AS n FROM fresh", epsilon=0.1)
        s.sql("SELECT COUNT(*) AS m FROM sampled", epsilon=0.1)  # still its own queries


def test_session_without_consumption_keeps_answering_its_sample(path: Path) -> None:
    # Negative control of the refusal: the same session, a release on *another* sample.
    frame = pd.DataFrame({"x": range(500)})
    with _session(path) as s:
        s.add_table("sampled", frame, sample_rate=0.5, privacy_unit=ROW)
        with Ledger(path) as other:
            other.record_sample_release(
                "d", RELEASE, sample=new_sample_id(), rate=0.5, analyst="c", query_text="q"
            )
        s.sql("SELECT COUNT(*) AS n FROM sampled", epsilon=0.1)


def test_zcdp_sessions_refuse_sampled_tables(path: Path) -> None:
    with _session(path, accountant="zcdp") as s, pytest.raises(InvalidParameter, match="basic"):
        s.add_table("t", pd.DataFrame({"x": range(10)}), sample_rate=0.5, privacy_unit=ROW)


# -- the CLI ------------------------------------------------------------------------------

RECODING = """\
columns:
  age: {type: interval, lower: 0, upper: 120, widths: [10, 20], level: 2}
  zip: {type: prefix, length: 5, keep: [3, 1], level: 1}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    data, recoding = tmp_path / "data.csv", tmp_path / "recoding.yaml"
    rng = random.Random(0)  # test data only
    with data.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["age", "zip"])
        for _ in range(2000):
            w.writerow([rng.randint(0, 99), rng.choice(["02139", "02138", "47906", "10001"])])
    recoding.write_text(RECODING)
    return data, recoding


def _anonymize(files: tuple[Path, Path], out: Path, *extra: str) -> tuple[int, str]:
    from deniable.cli.main import main

    data, recoding = files
    result = CliRunner().invoke(
        main,
        ["anonymize", str(data), "--unit", "row", "--k", "10", "--beta", "0.2", "--recoding", str(recoding),
         "-o", str(out), "--epsilon", "1", "--no-progress", *extra],
    )  # fmt: skip
    return result.exit_code, result.output


def test_cli_charges_the_release_before_writing(
    files: tuple[Path, Path], tmp_path: Path, path: Path
) -> None:
    with Ledger(path) as led:
        led.register("people", EpsilonDelta(epsilon=3, delta=Fraction(1, 10**3)))
    out = tmp_path / "out.parquet"
    code, output = _anonymize(files, out, "--ledger", str(path), "--dataset", "people")
    assert code == 0, output
    assert out.exists() and "charged to dataset 'people'" in output
    with Ledger(path) as led:
        [rel] = led.sample_releases("people")
        assert rel.rate == Fraction(1, 5)
        assert isinstance(rel.charge.loss, EpsilonDelta) and rel.charge.loss.epsilon == 1
        assert led.sample_consumed("people", rel.sample)
        assert f"sample {rel.sample} consumed" in output
        assert led.verify().ok


def test_cli_writes_nothing_when_the_budget_refuses(
    files: tuple[Path, Path], tmp_path: Path, path: Path
) -> None:
    with Ledger(path) as led:
        led.register("people", EpsilonDelta(epsilon=Fraction(1, 2), delta=Fraction(1, 10**3)))
        led.register("pure", Epsilon(epsilon=5))  # δ = 0: no (ε, δ > 0) release can fit
    out = tmp_path / "out.parquet"
    for dataset in ("people", "pure"):
        code, output = _anonymize(files, out, "--ledger", str(path), "--dataset", dataset)
        assert code != 0 and "nothing was written" in output
        assert not out.exists()
    with Ledger(path) as led:
        for dataset in ("people", "pure"):
            assert led.history(dataset) == [] and led.sample_releases(dataset) == []


def test_cli_needs_ledger_and_dataset_together(files: tuple[Path, Path], tmp_path: Path) -> None:
    code, output = _anonymize(files, tmp_path / "o.parquet", "--dataset", "people")
    assert code != 0 and "--ledger and --dataset together" in output


def test_ledger_samples_command_lists_consumed_samples(path: Path) -> None:
    import json

    from deniable.cli.main import main

    with Ledger(path) as led:
        led.register("d", CAP)
        led.register("z", CAP, accountant="zcdp")
        sample = new_sample_id()
        _release(led, sample)
        assert led.datasets() == ["d", "z"]
    result = CliRunner().invoke(main, ["ledger", "samples", "--ledger", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["accountants"] == {"d": "basic", "z": "zcdp"}
    [rel] = doc["sample_releases"]
    assert rel["sample"] == sample and rel["rate"] == "1/10" and rel["dataset"] == "d"
    text = CliRunner().invoke(main, ["ledger", "samples", "--ledger", str(path)])
    assert text.exit_code == 0 and "1 sampling-based release" in text.output


def test_ledger_samples_text_does_not_depend_on_terminal_width(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long ledger path and an 80-column COLUMNS (a fresh CI machine) wrapped the sentence."""
    from deniable.cli.main import main

    deep = tmp_path.joinpath(*(["a-rather-long-directory-name"] * 6))
    deep.mkdir(parents=True)
    path = deep / "ledger.sqlite"
    with Ledger(path) as led:
        led.register("d", CAP)
        _release(led, new_sample_id())
    for columns in ("40", "80", "300"):
        monkeypatch.setenv("COLUMNS", columns)
        text = CliRunner().invoke(main, ["ledger", "samples", "--ledger", str(path)])
        assert text.exit_code == 0, text.output
        assert f"ledger {path}: 1 sampling-based release" in text.output
        assert "…" not in text.output


def test_each_anonymization_names_its_own_sample(files: tuple[Path, Path]) -> None:
    import duckdb

    from deniable.anonymize import load_recoding, strongly_safe
    from deniable.engines.duckdb import DuckDBRunner

    data, recoding = files
    con = duckdb.connect()
    con.execute(f"CREATE VIEW input AS SELECT * FROM read_csv('{data}', all_varchar = true)")
    spec = load_recoding(recoding)
    runs = [
        strongly_safe(DuckDBRunner(con), "input", spec, k=10, beta=0.2, epsilon=1.0)
        for _ in range(2)
    ]
    ids = {r.sample_id for r in runs}
    assert len(ids) == 2
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)

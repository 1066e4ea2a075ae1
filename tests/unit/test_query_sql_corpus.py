"""The SQL fixture corpora: tests/sql/<stage>/*.sql, each file its own test.

A file named ``*_fail.sql`` must pass every earlier stage and fail at its own stage with the
exception named by its ``-- expect:`` header (and message matching ``-- match:``); any other
file must pass its stage. ``-- options:`` holds the JSON keyword arguments of
``Session.plan``/``Session.sql``. Execute-stage failures must cost nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

import deniable.errors as errors
from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.datasets.students import EDITORS, GENDERS, MODULES, marks, students
from deniable.query.catalog.validate import validate
from deniable.query.parse import parse
from deniable.query.testing import exact_aggregates

CORPUS = Path(__file__).resolve().parents[1] / "sql"
STAGES = ("parse", "validate", "plan", "execute")


def _cases() -> list[pytest.param]:
    out = []
    for stage in STAGES:
        for path in sorted((CORPUS / stage).glob("*.sql")):
            out.append(pytest.param(stage, path, id=f"{stage}/{path.stem}"))
    return out


def _headers(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        m = re.match(r"--\s*(expect|match|options):\s*(.*)$", line.strip())
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Session:
    people = students(300, seed=3)
    s = Session(
        budget=EpsilonDelta(epsilon=100, delta=1e-3),
        ledger=tmp_path_factory.mktemp("corpus") / "ledger.db",
    )
    s.add_table(
        "students",
        people,
        privacy_unit="student_id",
        bounds={"scholarship": (0, 6000)},
        public_keys={"editor": list(EDITORS), "gender": list(GENDERS)},
        max_groups=1,
        max_rows=1,
    )
    s.add_table(
        "marks",
        marks(people, seed=3),
        privacy_unit="student_id",
        bounds={"mark": (0, 100)},
        max_groups=3,
        public_keys={"module": list(MODULES)},
        max_rows=1,
    )
    s.add_public_table(
        "editors_public",
        pd.DataFrame(
            {
                "editor": list(EDITORS),
                "family": ["modal" if e in ("vim", "emacs") else "gui" for e in EDITORS],
                "kind": ["editor"] * len(EDITORS),
            }
        ),
    )
    yield s
    s.close()


def _run(stage: str, text: str, options: dict[str, object], session: Session) -> None:
    parsed = parse(text)
    if stage == "parse":
        return
    validate(parsed, session.tables, bounds=options.get("bounds"))  # type: ignore[arg-type]
    if stage == "validate":
        return
    session.plan(text, **options)  # type: ignore[arg-type]
    if stage == "plan":
        return
    answer = session.sql(text, **options)  # type: ignore[arg-type]
    assert len(answer) >= 1


@pytest.mark.parametrize(("stage", "path"), _cases())
def test_corpus(stage: str, path: Path, session: Session) -> None:
    text = path.read_text()
    headers = _headers(text)
    options = json.loads(headers.get("options", '{"epsilon": 1}'))
    if stage in ("parse", "validate"):
        options = {"epsilon": 1, **options}
    if not path.stem.endswith("_fail"):
        assert "expect" not in headers
        _run(stage, text, options, session)
        return
    expected = getattr(errors, headers["expect"])
    earlier = STAGES[STAGES.index(stage) - 1] if stage != "parse" else None
    if earlier is not None:
        _run(earlier, text, options, session)  # must not fail before its own stage
    spent = session.budget.spent
    with pytest.raises(expected) as info:
        _run(stage, text, options, session)
    if "match" in headers:
        assert re.search(headers["match"], str(info.value)), str(info.value)
    assert session.budget.spent == spent  # a refused query costs nothing
    if stage != "execute" and "injection" not in path.stem:
        return
    # The data survives every injection attempt.
    _, _, exact = exact_aggregates(
        session, "SELECT COUNT(*) AS n FROM students", not_private=True, epsilon=1
    )
    assert exact.units.tolist() == [300]

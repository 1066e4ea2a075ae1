"""``make demo``: the main job, end to end, on the lecture's synthetic students.

A curator generates the students (birth date, gender, favourite editor, a scholarship of at
most £6000) and their module marks, registers both tables with a total budget of
``(ε = 5, δ = 4·10⁻⁶)`` in a durable ledger (a temporary file here), and an analyst asks a
handful of SQL questions: a count, a histogram, a bounded sum and mean, a median, a
per-module mean where one student has many rows, a histogram over private keys, and the
triangle count of the students' study-partner graph with node-level privacy. Every
answer comes with 95% intervals and the budget left; asking again is free; an unsafe query is
refused. Then the curator publishes the table itself, two ways, from the same budget: a safe
k-anonymized release (Li–Qardaji–Su) and a DP synthetic table (MST), side by side. The budget
finally refuses a query that would overspend it.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import pandas as pd
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from deniable.accounting.loss import EpsilonDelta
from deniable.curator.session import Session
from deniable.datasets.students import (
    DEPARTMENTS,
    EDITORS,
    GENDERS,
    MODULES,
    marks,
    students,
    study_partners,
)
from deniable.errors import BudgetExceeded, UnsafeQuery
from deniable.query.answer import show_loss


def _ask(console: Console, session: Session, title: str, query: str, **options: Any) -> None:
    console.rule(f"[bold]{title}")
    spend = ", ".join(f"{k} = {v}" for k, v in options.items())
    console.print(f"[dim]spending {spend}[/]")
    answer = session.sql(query, **options)
    console.print(answer)
    for name, how in answer.mechanisms.items():
        console.print(f"  [dim]{name}: {how}[/]")
    for name, note in answer.metadata.notes.items():
        console.print(f"  [dim]{name}: {note}[/]")
    if (answer.metadata.privacy_unit or "").startswith("node"):  # a graph: its bounding
        console.print(f"  [dim]{answer.metadata.row_policies[-1]}[/]")
    if answer.metadata.partition_selection:
        console.print(f"  [dim]{answer.metadata.partition_selection}[/]")


KANON_RECODING = {
    "columns": {
        "gender": {"type": "identity", "level": 0},
        "department": {"type": "identity", "level": 0},
        "birth_year": {
            "type": "interval", "lower": 1980, "upper": 2010, "widths": [5, 10], "level": 2,
        },
    }
}  # fmt: skip
"""The k-anonymized release's recoding: fixed before seeing the data (strongly safe)."""


def _publish(console: Console, session: Session, people: pd.DataFrame) -> None:
    """Publish the students table twice from the same budget and compare the two."""
    console.rule("[bold]Publishing the table itself: k-anonymized vs synthetic")
    kanon = session.anonymize("students", KANON_RECODING, k=15, beta=0.2, epsilon=1.0)
    console.print(
        f"safe k-anonymization (k = 15, β = 0.2, fixed recoding): "
        f"{kanon.report.published_rows} rows, charged {show_loss(kanon.guarantee.loss())} — "
        "one random row a student, birth years in decades, classes below 15 suppressed"
    )
    synthetic = session.synthesize(
        "students",
        columns=["gender", "department", "editor", "scholarship"],
        epsilon=0.5,
        delta=5e-7,
        method="mst",
    )
    fake = synthetic.to_pandas()
    console.print(
        f"synthetic data (MST): {len(fake):,} rows of every column, charged "
        f"{show_loss(synthetic.loss)} — {len(synthetic.cliques)} marginals measured with "
        "Gaussian noise, rows drawn from the model fitted to them"
    )
    console.print(fake.head(4).to_string(index=False))
    published = kanon.to_arrow().to_pandas()
    table = Table(title="share of students by department (curator's check, NON-PRIVATE truth)")
    for header in ("department", "true", "k-anonymized", "synthetic"):
        table.add_column(header, justify="right" if header != "department" else "left")
    for dept in DEPARTMENTS:
        shares = [
            (frame["department"] == dept).mean() if len(frame) else float("nan")
            for frame in (people, published, fake)
        ]
        table.add_row(dept, *(f"{x:.1%}" for x in shares))
    console.print(table)


def main() -> None:
    """Run the demo (about a second)."""
    console = Console()
    started = time.perf_counter()
    people = students(2000, seed=7)
    taken = marks(people, seed=7)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = os.path.join(tmp, "ledger.db")
        budget = EpsilonDelta(epsilon=5, delta=4e-6)
        console.print(
            Panel.fit(
                f"[bold]deniable[/] — {len(people)} synthetic students, {len(taken)} module "
                f"marks.\nTotal budget {show_loss(budget)}, kept in the ledger {ledger}",
                title="curator",
            )
        )
        with Session(budget=budget, ledger=ledger, dataset="students") as session:
            session.add_table(
                "students",
                people,
                privacy_unit="student_id",
                max_groups=1,
                max_rows=1,
                bounds={"scholarship": (0, 6000)},
                public_keys={
                    "editor": list(EDITORS),
                    "gender": list(GENDERS),
                    "department": list(DEPARTMENTS),
                },
            )
            session.add_table(
                "marks",
                taken,
                privacy_unit="student_id",
                bounds={"mark": (0, 100)},
                max_groups=3,
                max_rows=1,
                public_keys={"module": list(MODULES)},
            )
            _ask(
                console,
                session,
                "A count",
                "SELECT COUNT(*) AS students FROM students",
                epsilon=0.1,
            )
            _ask(
                console,
                session,
                "A histogram (public keys: empty editors would show too)",
                "SELECT editor, COUNT(*) AS n FROM students GROUP BY editor ORDER BY n DESC",
                epsilon=0.2,
            )
            _ask(
                console,
                session,
                "A bounded sum and mean (scholarships clamped to [£0, £6000])",
                "SELECT SUM(scholarship) AS total, AVG(scholarship) AS mean "
                "FROM students WHERE department = 'Computing'",
                epsilon=0.5,
            )
            _ask(
                console,
                session,
                "A median (exponential mechanism over a grid of £6)",
                "SELECT MEDIAN(scholarship) AS median FROM students WHERE scholarship > 0",
                epsilon=0.3,
            )
            _ask(
                console,
                session,
                "Many rows per student: each keeps ≤ 3 modules, 1 mark per module",
                "SELECT module, COUNT(DISTINCT student_id) AS students, AVG(mark) AS mean "
                "FROM marks GROUP BY module ORDER BY module",
                epsilon=0.6,
            )
            _ask(
                console,
                session,
                "Private keys: years are released only through DP partition selection",
                "SELECT birth_year, COUNT(*) AS n FROM students "
                "GROUP BY birth_year ORDER BY birth_year",
                epsilon=0.5,
                delta=1e-6,
            )
            session.add_graph(
                "study_partners",
                study_partners(people, seed=7),
                source_col="a",
                target_col="b",
                unit="node",  # a student and all their study pairs are protected
                max_degree=8,
            )
            _ask(
                console,
                session,
                "A graph at node level: triangles of study partners (a linear program "
                "caps each student's share)",
                "SELECT COUNT(*) AS triangles FROM triangles(study_partners)",
                epsilon=0.2,
            )
            _ask(
                console,
                session,
                "The same question again: served from the ledger's cache, at no cost",
                "SELECT COUNT(*) AS students FROM students",
                epsilon=0.1,
            )
            console.rule("[bold]Refused: a query that would release rows")
            try:
                session.sql("SELECT * FROM students", epsilon=0.1)
            except UnsafeQuery as e:
                console.print(f"[red]UnsafeQuery:[/] {e}")
            _publish(console, session, people)
            status = session.budget
            console.rule("[bold]The budget")
            table = Table(
                title=f"ledger history of dataset 'students' (cap {show_loss(status.cap)})"
            )
            table.add_column("#", justify="right")
            table.add_column("query")
            table.add_column("loss", justify="right")
            for charge in status.history:
                table.add_row(str(charge.id), charge.query_text, show_loss(charge.loss))
            console.print(table)
            console.print(
                f"spent {show_loss(status.spent)}; remaining [bold]{show_loss(status.remaining)}"
            )
            console.rule("[bold]Over budget: refused before anything is spent")
            query = "SELECT gender, AVG(scholarship) AS mean FROM students GROUP BY gender"
            console.print(f"[cyan]{query}[/]   [dim](epsilon = 2)[/]")
            try:
                session.sql(query, epsilon=2)
            except BudgetExceeded as e:
                console.print(f"[red]BudgetExceeded:[/] {e}")
            console.print(f"remaining still {show_loss(session.budget.remaining)}")
    console.print(f"[dim]demo finished in {time.perf_counter() - started:.1f} s[/]")


if __name__ == "__main__":
    main()

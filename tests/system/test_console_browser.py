"""The web console end to end: a real uvicorn server driven by a real headless Chromium.

An analyst signs in with a token, picks a dataset, reads its schema, runs queries until the
budget (room for exactly two) is gone, and sees each answer as a table and a chart with
error bars, the budget gauge dropping, the release history, and clear refusals (unsafe
query, budget exhausted) with the API's error codes. The screenshot of the result view is
saved under the test's tmp dir (its path is printed); with ``DENIABLE_CONSOLE_SCREENSHOT``
set to a path (e.g. ``docs/console.png``) it is copied there too.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from _browser import launch, new_page
from _server_helpers import running
from playwright.sync_api import Browser, Page, expect

from deniable.accounting.loss import Epsilon
from deniable.ledger import Ledger

# Generous: on a fresh machine the first test also installs Chromium with apt-get.
pytestmark = pytest.mark.timeout(600)

CONFIG = """
ledger = "ledger.db"

[server]
rate_limit = { per_second = 1000, burst = 1000 }

[datasets.grades]
source = "students.csv"
table = "students"
privacy_unit = "student_id"
max_groups = 1
max_rows = 1
bounds = { grade = [0, 100], age = [10, 25] }
public_keys = { school = ["north", "south", "east"] }
budget = { epsilon = 1 }

[datasets.visits]
source = "students.csv"
table = "visits"
privacy_unit = "row"
budget = { rho = 0.5 }
"""

GROUPED = "SELECT school, COUNT(*) AS n, AVG(grade) AS mean_grade FROM students GROUP BY school"


def write_service(folder: Path) -> Path:
    rows = ["student_id,school,grade,age"]
    rows += [
        f"{i},{('north', 'south', 'east')[i % 3]},{40 + (i * 37) % 61},{12 + i % 7}"
        for i in range(120)
    ]
    (folder / "students.csv").write_text("\n".join(rows) + "\n")
    path = folder / "service.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launch() as b:
        yield b


def run_query(page: Page, sql: str, epsilon: str) -> None:
    page.get_by_label("SQL", exact=True).fill(sql)
    page.get_by_role("spinbutton", name="ε to spend").fill(epsilon)
    page.get_by_role("button", name="Run query").click()
    expect(page.get_by_role("button", name="Run query")).to_be_enabled()
    expect(page.locator("#result")).not_to_have_attribute("aria-busy", "true")


def expect_gauge(page: Page, value: float) -> None:
    expect(page.locator("#budget [role=meter]")).to_have_attribute(
        "aria-valuenow", re.compile(rf"^{value:g}(\.0)?$")
    )


def test_console_query_until_the_budget_is_gone(tmp_path: Path, browser: Browser) -> None:
    config = write_service(tmp_path)
    with Ledger(tmp_path / "ledger.db") as led:
        tok = led.add_analyst("ann", role="analyst")
    problems: list[str] = []
    with (
        running(config, workers=1, log=tmp_path / "server.log") as server,
        new_page(browser, problems) as page,
    ):
        # The root redirects to the console, which is served with a strict CSP.
        response = page.goto(server.url + "/")
        assert response is not None and response.ok
        assert page.url == server.url + "/console/"
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp

        # A wrong token is refused with the API's code, and the form stays.
        page.get_by_label("API token").fill("dnb_not-a-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#login-error")).to_contain_text("unauthenticated")
        expect(page.locator("#app")).to_be_hidden()

        # Sign in; the token goes to sessionStorage, never into the URL.
        page.get_by_label("API token").fill(tok)
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#who-name")).to_have_text("ann")
        assert tok not in page.url
        assert page.evaluate("sessionStorage.getItem('deniable.token')") == tok
        assert page.evaluate("localStorage.length") == 0
        assert page.context.cookies() == []

        # Pick the dataset (there are two; the other has a ρ budget).
        datasets = page.locator("#datasets button.dataset")
        expect(datasets).to_have_count(2)
        page.get_by_role("button", name=re.compile(r"^visits")).click()
        expect(page.locator("#dataset-title")).to_have_text("Dataset visits")
        expect(page.locator("#epsilon-label")).to_have_text("ρ to spend")
        page.get_by_role("button", name=re.compile(r"^grades")).click()
        expect(page.locator("#dataset-title")).to_have_text("Dataset grades")
        expect(page.get_by_role("button", name=re.compile(r"^grades"))).to_have_attribute(
            "aria-pressed", "true"
        )
        expect(page.locator("#epsilon-label")).to_have_text("ε to spend")

        # Its declared schema, bounds and public keys (and nothing computed from the rows).
        schema = page.locator("#schema")
        expect(schema).to_contain_text("student_id")
        expect(schema).to_contain_text("privacy unit")
        expect(schema.locator("tr", has_text="grade")).to_contain_text("[0, 100]")
        expect(schema.locator("tr", has_text="school")).to_contain_text("north, south, east")
        expect_gauge(page, 1)
        expect(page.locator("#history")).to_contain_text("No releases yet")

        # Refusals cost nothing: an unsafe query, then a name that looks like markup, which
        # must come back as text (the CSP would block its handler anyway; here the point is
        # that no element is created from data).
        run_query(page, "SELECT grade FROM students", "0.5")
        refusal = page.locator("#refusal")
        expect(refusal).to_be_visible()
        expect(refusal).to_have_attribute("data-code", "unsafe_query")
        expect(refusal).to_contain_text("Unsafe query refused")
        expect(refusal.locator(".refusal-code")).to_have_text("unsafe_query")
        expect(refusal).to_contain_text("neither a GROUP BY key nor inside an aggregate")
        run_query(page, 'SELECT COUNT(*) AS n FROM "<img src=x id=injected>"', "0.5")
        expect(refusal).to_have_attribute("data-code", "sql_error")
        expect(refusal).to_contain_text("<img src=x id=injected>")
        assert page.locator("#injected, #refusal img").count() == 0
        expect_gauge(page, 1)

        # First query: a table with intervals, a chart with one error bar per group, the
        # gauge at half, one release in the history.
        run_query(page, GROUPED, "0.5")
        expect(refusal).to_be_hidden()
        table = page.locator("#result-table")
        expect(table).to_be_visible()
        expect(table.locator("tbody tr")).to_have_count(3)
        expect(table.locator("thead")).to_contain_text("n 95% interval")
        # what the intervals cover, and the row policies that applied (issue 21)
        expect(table.locator("caption")).to_contain_text(
            "noise only — covers the value after bounding"
        )
        expect(page.locator("#row-policy")).to_contain_text(
            "per student_id: at most 1 group, 1 row per group; mean_grade clamped to [0, 100]"
        )
        for school in ("north", "south", "east"):
            expect(table.locator("tbody")).to_contain_text(school)
        first_row = table.locator("tbody tr").first.locator("td")
        assert re.fullmatch(r"\[-?[\d,.]+, -?[\d,.]+\]", first_row.nth(2).inner_text())
        charts = page.locator("#charts figure.chart")
        expect(charts).to_have_count(2)  # n and mean_grade
        n_chart = charts.first
        expect(n_chart.locator("figcaption")).to_contain_text("n: noisy values with 95% intervals")
        expect(n_chart.locator("svg[role=img] g.errorbar line.whisker")).to_have_count(3)
        expect(n_chart.locator("svg g.errorbar circle.point")).to_have_count(3)
        expect(n_chart.locator("svg text.label")).to_have_text(["north", "south", "east"])
        # Each error bar spans its interval around the point: the whisker covers the circle.
        for i in range(3):
            bar = n_chart.locator("g.errorbar").nth(i)
            y1 = float(bar.locator("line.whisker").get_attribute("y1") or "nan")
            y2 = float(bar.locator("line.whisker").get_attribute("y2") or "nan")
            cy = float(bar.locator("circle.point").get_attribute("cy") or "nan")
            assert min(y1, y2) <= cy <= max(y1, y2)
        expect(page.locator("#answer .summary")).to_contain_text("charged ε = 0.5")
        expect_gauge(page, 0.5)
        expect(page.locator("#history-table tbody tr")).to_have_count(1)
        expect(page.locator("#history-table")).to_contain_text(GROUPED)

        shot = tmp_path / "console-result.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"console screenshot: {shot}")
        assert shot.stat().st_size > 10_000
        copy_to = os.environ.get("DENIABLE_CONSOLE_SCREENSHOT")
        if copy_to:
            shutil.copyfile(shot, copy_to)

        # Second query spends the rest: the gauge says exhausted.
        run_query(page, "SELECT COUNT(*) AS n FROM students", "0.5")
        expect(table.locator("tbody tr")).to_have_count(1)
        expect_gauge(page, 0)
        expect(page.locator("#budget")).to_contain_text("Budget exhausted")
        expect(page.locator("#history-table tbody tr")).to_have_count(2)

        # Third: refused, nothing charged, the answer of before is not shown as this one.
        run_query(page, "SELECT COUNT(*) AS n FROM students WHERE grade > 50", "0.5")
        expect(refusal).to_be_visible()
        expect(refusal).to_have_attribute("data-code", "budget_exceeded")
        expect(refusal).to_contain_text("Budget exhausted")
        expect(refusal.locator(".refusal-code")).to_have_text("budget_exceeded")
        expect(page.locator("#answer")).to_be_hidden()
        expect_gauge(page, 0)
        expect(page.locator("#history-table tbody tr")).to_have_count(2)

        # A reload keeps the session (sessionStorage); signing out forgets the token.
        page.reload()
        expect(page.locator("#who-name")).to_have_text("ann")
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_label("API token")).to_be_visible()
        assert page.evaluate("sessionStorage.getItem('deniable.token')") is None

    assert problems == []
    with Ledger(tmp_path / "ledger.db") as led:
        assert led.spent("grades") == Epsilon(epsilon=1)
        assert len(led.history("grades")) == 2


def test_console_ships_no_markup_injection_or_external_resources() -> None:
    """The console builds the DOM from text only and loads nothing from other origins."""
    static = Path(__file__).resolve().parents[2] / "src/deniable/server/console/static"
    sources = {p.name: p.read_text() for p in static.iterdir()}
    assert {"index.html", "console.js", "console.css"} <= set(sources)
    for name, text in sources.items():
        for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
            assert banned not in text, (name, banned)
        assert not re.search(r"(src|href)=\"(https?:)?//", text), name
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), name
        assert "https://" not in text, name
    # No inline script or style in the page (the CSP forbids them).
    html = sources["index.html"]
    assert re.findall(r"<script[^>]*>", html) == ['<script type="module" src="console.js">']
    assert "<style" not in html and not re.search(r"\s(style|on[a-z]+)=", html)


def test_console_routes_headers_and_openapi(tmp_path: Path) -> None:
    """/ redirects to /console/, served with the CSP; neither route is in the OpenAPI."""
    from fastapi.testclient import TestClient

    from deniable.server.app import create_app
    from deniable.server.console import CONTENT_SECURITY_POLICY

    with TestClient(create_app(write_service(tmp_path)), follow_redirects=False) as client:
        root = client.get("/")
        assert root.status_code == 307 and root.headers["location"] == "/console/"
        for path, kind in (
            ("/console/", "text/html"),
            ("/console/console.js", "javascript"),
            ("/console/console.css", "text/css"),
        ):
            r = client.get(path)
            assert r.status_code == 200 and kind in r.headers["content-type"], path
            assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["referrer-policy"] == "no-referrer"
        missing = client.get("/console/nothing.js")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert client.get("/console/../server/app.py").status_code == 404
        paths = client.get("/openapi.json").json()["paths"]
        assert paths and all(p.startswith("/v1/") for p in paths)
        # The API is untouched: unauthenticated calls are still refused.
        assert client.get("/v1/datasets").status_code == 401


GRAPH_CONFIG = """
ledger = "ledger.db"

[server]
rate_limit = { per_second = 1000, burst = 1000 }

[datasets.social]
budget = { epsilon = 1 }

[[datasets.social.graphs]]
name = "friends"
source = "friends.csv"
source_col = "a"
target_col = "b"
unit = "node"
max_degree = 4
"""


def test_console_answers_a_graph_only_dataset(tmp_path: Path, browser: Browser) -> None:
    rows = ["a,b"] + [f"{i},{j}" for i in range(12) for j in range(i + 1, 12) if (i + j) % 3]
    (tmp_path / "friends.csv").write_text("\n".join(rows) + "\n")
    config = tmp_path / "service.toml"
    config.write_text(GRAPH_CONFIG)
    with Ledger(tmp_path / "ledger.db") as led:
        tok = led.add_analyst("ann", role="analyst")
    problems: list[str] = []
    with (
        running(config, workers=1, log=tmp_path / "server.log") as server,
        new_page(browser, problems) as page,
    ):
        page.goto(server.url + "/console/")
        page.get_by_label("API token").fill(tok)
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#who-name")).to_have_text("ann")
        page.get_by_role("button", name=re.compile(r"^social")).click()
        expect(page.locator("#dataset-title")).to_have_text("Dataset social")
        # no private table: the summary names the graph, never "Private table null"
        summary = page.locator("#dataset-summary")
        expect(summary).to_contain_text("friends (node level, D = 4)")
        expect(summary).not_to_contain_text("null")
        expect(page.get_by_label("SQL", exact=True)).to_have_value(
            "SELECT COUNT(*) AS n FROM friends"
        )
        run_query(page, "SELECT COUNT(*) AS t FROM triangles(friends)", "0.5")
        table = page.locator("#result-table")
        expect(table.locator("tbody tr")).to_have_count(1)
        expect(page.locator("#answer .summary")).to_contain_text("charged ε = 0.5")
        expect_gauge(page, 0.5)
        expect(page.locator("#history-table tbody tr")).to_have_count(1)
    assert problems == []

"""Every HTTP route the README and docs name exists (issue 23: `POST /v1/query` was a 404)."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.routing import APIRoute

from deniable.server.app import create_app

ROOT = Path(__file__).resolve().parents[2]
MENTION = re.compile(r"(/v1/[A-Za-z0-9_{}\-/]*[A-Za-z0-9_}])")


def _route_patterns() -> list[re.Pattern[str]]:
    # the service opens when the application starts, never here: the config is only read
    app = create_app(ROOT / "tests" / "fixtures" / "service" / "example.toml")
    templates = [r.path for r in app.routes if isinstance(r, APIRoute)]
    assert "/v1/datasets/{dataset}/query" in templates
    return [re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", t) + "$") for t in templates]


def test_every_mentioned_route_exists() -> None:
    patterns = _route_patterns()
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = []
    for path in texts:
        for mention in MENTION.findall(path.read_text()):
            if not any(p.match(mention) for p in patterns):
                missing.append(f"{path.name}: {mention}")
    assert not missing, missing


def test_the_check_would_catch_a_wrong_route() -> None:
    patterns = _route_patterns()
    assert not any(p.match("/v1/query") for p in patterns)
    assert not any(p.match("/v1/history") for p in patterns)


def test_no_swagger_ui_from_a_cdn() -> None:
    """/docs loaded Swagger UI from a CDN (a pasted token exposed to it: issue 23)."""
    app = create_app(ROOT / "tests" / "fixtures" / "service" / "example.toml")
    paths = {r.path for r in app.routes}
    assert "/docs" not in paths and "/redoc" not in paths
    assert "/openapi.json" in paths

"""The web console: static HTML, CSS and JavaScript served by the HTTP service.

The console is a client of the public ``/v1`` API and nothing more: it runs in the
analyst's browser, sends the pasted token as ``Authorization: Bearer`` (kept in the tab's
``sessionStorage``, never in a URL or a cookie) and renders what the API returns. It adds
no route that reads data, so it releases nothing the API would not.

:func:`mount_console` serves ``static/`` at ``/console/`` (no build step, no CDN, no
network access besides the API) with a strict Content-Security-Policy, and redirects ``/``
there. Both routes stay out of the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).resolve().parent / "static"
"""The console's files (shipped as package data of ``deniable.server.console``)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""No inline script or style, no other origin: only the console's own files and the API."""

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-cache"),
)
"""Headers added to every response of ``/console``."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _SecuredFiles:
    """ASGI wrapper adding :data:`SECURITY_HEADERS` to the static files' responses."""

    def __init__(self, files: StaticFiles) -> None:
        self._files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in SECURITY_HEADERS}
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in names]
                message["headers"] = [*headers, *SECURITY_HEADERS]
            await send(message)

        await self._files(scope, receive, with_headers)


def mount_console(app: FastAPI) -> None:
    """Serve the console at ``/console/`` and redirect ``/`` to it (both outside OpenAPI).

    Args:
        app: the service's application; gains a mount and one ``GET /`` redirect.

    Privacy loss: none — static files only; every answer the console shows comes from the
    API, which charges it.
    """
    files = StaticFiles(directory=STATIC, html=True)
    app.mount("/console", _SecuredFiles(files), name="console")

    @app.get("/", include_in_schema=False)
    def console_redirect() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=307)

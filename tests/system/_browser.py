"""A real headless browser for the system tests: Playwright driving Debian's Chromium.

Playwright for Python (the pip wheel) brings its driver but no browser; browser downloads
are blocked, so ``playwright install`` is never run. The browser is the distribution's
``/usr/bin/chromium``, installed here with ``apt-get install -y chromium`` when it is
missing (as root, or through passwordless ``sudo``). The test never skips: without a
browser it fails, saying what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")

# An assertion waits for what the page must come to show (it passes as soon as it does);
# the deadline only bounds a page that never does. Playwright's default, 5 s, was shorter
# than a first triangle count under load (the worker imports SciPy then: 1-10 s at load 10).
expect.set_options(timeout=60_000)

CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-breakpad",
    "--disable-crash-reporter",
)
"""No sandbox (containers run as root), no GPU, no crash reporter, nothing that talks to the
network."""


def _apt(*args: str) -> subprocess.CompletedProcess[str]:
    command = ["apt-get", *args]
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            pytest.fail(f"{CHROMIUM} is missing; install it as root: apt-get install -y chromium")
        command = ["sudo", "-n", *command]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=500)


def ensure_chromium() -> Path:
    """Debian's Chromium, installed with apt-get if missing (``apt-get update`` if needed)."""
    if CHROMIUM.exists():
        return CHROMIUM
    done = _apt("install", "-y", "chromium")
    if done.returncode != 0:
        _apt("update")
        done = _apt("install", "-y", "chromium")
    if done.returncode != 0 or not CHROMIUM.exists():
        pytest.fail(
            f"could not install chromium (apt-get exit {done.returncode}):\n{done.stderr[-2000:]}"
        )
    return CHROMIUM


@contextmanager
def launch() -> Iterator[Browser]:
    """A headless Chromium under Playwright; closed on exit."""
    executable = ensure_chromium()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(executable),
            headless=True,
            args=list(CHROMIUM_ARGS),
            timeout=30_000,
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def new_page(browser: Browser, problems: list[str]) -> Iterator[Page]:
    """A fresh page (own context: empty storage) whose script errors go to ``problems``.

    Chromium logs every HTTP error response of ``fetch`` as a console error ("Failed to
    load resource"); those are the API's refusals the test provokes and are not problems.
    Content-Security-Policy violations and uncaught exceptions are.
    """
    context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    page = context.new_page()
    page.set_default_timeout(60_000)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and "Failed to load resource" not in message.text:
            problems.append(f"console: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    try:
        yield page
    finally:
        context.close()

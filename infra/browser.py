"""Debian's Chromium driven by Playwright, for the browser tests and ``make screenshot``.

Playwright's own browser download is not used: the machine's ``chromium`` package is (``make test`` installs
it with apt when it is missing). Importing this module starts nothing.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
MISSING = f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install chromium`; `make test` does it)"


def chromium() -> Path | None:
    """Where Chromium is, or None."""
    if CHROMIUM.exists():
        return CHROMIUM
    found = shutil.which("chromium")
    return Path(found) if found else None


@contextlib.contextmanager
def launched() -> Iterator[Browser]:
    """One headless Chromium for a ``with`` block, closed (with Playwright's driver) on the way out."""
    executable = chromium()
    if executable is None:
        raise FileNotFoundError(MISSING)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(executable), args=list(ARGS))
        try:
            yield browser
        finally:
            browser.close()

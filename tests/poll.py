"""Waiting for something another process does, without fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], *, timeout: float = 60.0, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; return it, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value {value!r}")
        time.sleep(0.05)

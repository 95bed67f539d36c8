"""Running the product's code in this process against a local stack (tests, the fault run, benchmarks)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from infra.stack import Stack
from shared import config, deps


@contextmanager
def product_environment(stack: Stack) -> Iterator[Stack]:
    """The stack's product environment set in this process, and the configuration and clients built for it; all of
    it put back afterwards (code that runs on after it must not read this stack's stopped emulator)."""
    saved = dict(os.environ)
    os.environ.update(stack.product_env())
    config.reset()
    deps.reset()
    try:
        yield stack
    finally:
        os.environ.clear()
        os.environ.update(saved)
        config.reset()
        deps.reset()

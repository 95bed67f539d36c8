"""The product's code run in the test process on the stack's emulators, its tasks going to a sink (so every session
runs here, once, where it is counted), with environment variables of the test's choosing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bench import cost
from bench.sink import Sink
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared import config
from tests.poll import wait_for


@contextmanager
def counted_rig(stack: Stack, monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[cost.Rig]:
    """Counted Firestore; tasks go to a sink; ``env`` set for the product code this process runs (on the product's
    default lease unless ``env`` sets one)."""
    FakeGemini(stack.url("fake_gemini")).reset()
    with Sink() as sink:
        monkeypatch.setenv("TASKS_TARGET_URL", sink.url)
        # The product's lease (the suite's stack shortens it), so a heartbeat counts as often as deployed.
        lease = config.Settings.session_lease_seconds
        for name, value in {lease.name: str(lease.default), **env}.items():
            monkeypatch.setenv(name, value)
        config.reset()
        rig = cost.Rig(stack)
        try:
            with rig.installed():
                yield rig
            # Close the sink only once the emulator has delivered every task, or it would retry them.
            wait_for(lambda: sink.count >= rig.created_tasks.created, timeout=60, what="the tasks to reach the sink")
        finally:
            monkeypatch.undo()
            config.reset()

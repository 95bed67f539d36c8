"""Fixtures several stack-tier modules share (a module's own fixture of the same name replaces one of these)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench import cost
from infra.stack import Stack
from tests.rigs import Outage, counted_rig, tasks_outage


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    """The product's code run here on the stack's emulators, counted, its tasks going to a sink."""
    with counted_rig(stack, monkeypatch) as rig:
        yield rig


@pytest.fixture
def outage(rig: cost.Rig) -> Iterator[Outage]:
    """Cloud Tasks that refuses every connection while ``down`` is set (``rig``'s emulator otherwise)."""
    with tasks_outage(blackhole=False) as down:
        yield down

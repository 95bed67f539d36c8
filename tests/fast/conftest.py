"""The fast tier's handler fixtures: the Firestore emulator and the fake Slack without any function process, and a
recorder in place of Cloud Tasks (each module that asks for them gets a stack of its own)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.product_env import product_environment
from infra.stack import Stack
from shared import deps
from tests.conftest import TEST_DIR


class RecordingTasks:
    """Stands in for the Cloud Tasks client: records every task the product creates."""

    def __init__(self) -> None:
        self.created: list[Any] = []

    def create_task(self, *, parent: str, task: Any, retry: Any = None, timeout: float | None = None) -> Any:
        self.created.append(task)
        return task


@pytest.fixture(scope="module")
def emulators() -> Iterator[Stack]:
    """The Firestore emulator and the fake Slack, without any function process."""
    where = TEST_DIR / "fast"  # this worker's folder under xdist
    unused = "http://127.0.0.1:9/agent_session"  # tasks go to a recorder here, never to this URL
    stack = Stack(with_functions=(), extra_env={"TASKS_TARGET_URL": unused}, stack_file=where / "stack.json").start()
    try:
        with product_environment(stack):
            yield stack
    finally:
        stack.stop()


@pytest.fixture
def tasks(emulators: Stack) -> Iterator[RecordingTasks]:
    recorder = RecordingTasks()
    with deps.override(tasks=recorder):
        yield recorder

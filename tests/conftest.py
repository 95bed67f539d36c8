"""Fixtures every test tier shares.

The local stack (Firestore emulator, Cloud Tasks emulator, fake Slack, Gemini
stub and every function under functions-framework) starts once per test
session and is stopped by pid at the end, also when a test fails or the run is
interrupted. Tests isolate their data with unique ids rather than sharing
documents, and the fakes are reset before each test that uses them.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from infra.fakegemini.control import FakeGemini
from infra.fakeslack.control import FakeSlack
from infra.stack import LOCAL, OPERATOR_ID, Stack
from shared import config
from tests.slack import SlackSender


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM or SIGHUP (a CI timeout, `timeout`) stops the run like Ctrl-C: teardown still stops the stack."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    # Small budgets keep the budget tests short; everything else runs with the product's defaults.
    # Its own stack file and logs, so a `make dev` stack of the same checkout is left alone.
    stack = Stack(
        extra_env={
            "SESSION_MAX_TURNS": "6",
            "SESSION_MAX_TOOL_CALLS": "10",
            "OPERATOR_CHANNEL": "C0OPERATORS",
            "OPERATOR_USER_IDS": f"{OPERATOR_ID},U0OPERATOR2",
        },
        stack_file=LOCAL / "test" / "stack.json",
    ).start()
    saved = dict(os.environ)
    os.environ.update(stack.product_env())
    config.reset()
    try:
        yield stack
    finally:
        stack.stop()
        os.environ.clear()
        os.environ.update(saved)
        config.reset()


@pytest.fixture
def fake_slack(stack: Stack) -> FakeSlack:
    client = FakeSlack(stack.url("fake_slack"))
    client.reset()
    return client


@pytest.fixture
def fake_gemini(stack: Stack) -> FakeGemini:
    client = FakeGemini(stack.url("fake_gemini"))
    client.reset()
    return client


@pytest.fixture
def script(fake_gemini: FakeGemini, uid: str) -> Callable[..., int]:
    """Queue Gemini stub replies that only this test's conversations (those that mention ``uid``) receive.

    A session left over from an earlier test can then never consume this test's replies.
    """

    def add(*items: dict[str, Any]) -> int:
        return fake_gemini.script(*(FakeGemini.matching(uid, item) for item in items))

    return add


@pytest.fixture
def slack(stack: Stack) -> SlackSender:
    """Sends signed requests to the functions as Slack would."""
    return SlackSender.for_stack(stack)


@pytest.fixture
def uid() -> str:
    """A short unique id for this test's channels, events and threads."""
    return uuid.uuid4().hex[:10].upper()

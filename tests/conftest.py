"""Fixtures every test tier shares. The tiers are folders: tests/fast (`make test-fast`), tests/stack,
tests/browser and tests/deploy.

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
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.product_env import product_environment
from infra.stack import LOCAL, OPERATOR_ID, Stack
from tests.agent_helpers import agent_with
from tests.slack import SlackSender

# Where the test stack keeps its stack file and logs; TEST_STACK_DIR lets two runs of one checkout coexist. Under
# pytest-xdist (`make test`) each worker has a stack of its own, in a folder of its own (gw0, gw1, ...).
TEST_DIR = Path(os.environ.get("TEST_STACK_DIR") or LOCAL / "test") / os.environ.get("PYTEST_XDIST_WORKER", "")


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM or SIGHUP (a CI timeout, `timeout`) stops the run like Ctrl-C: teardown still stops the stack."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    # Slack gives an app 3 s to answer; on a busy machine a cold function can take longer, and a delivery the fake
    # gives up on is a failed test, not a finding (the ingress's speed is `make bench`'s to measure). Every stack a
    # test starts inherits this.
    os.environ.setdefault("FAKESLACK_DELIVERY_SECONDS", "20")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` (``make test``) shares the suite out by this suite's units, the heaviest first."""
    if config.getvalue("dist") != "loadscope":
        return None
    from tests.scheduling import UnitScheduling

    return UnitScheduling(config, log)


# The stack's logs a failing test attaches to its report: what each service logged while the test ran.
REPORTED_LOGS = ("slack_events", "slack_interactivity", "agent_session", "sweep", "dispatch", "fake_slack")
REPORTED_LINES = 120


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[FAILED] = report.failed
    offsets: dict[str, int] | None = item.stash.get(_LOG_OFFSETS, None)
    if report.when == "call" and report.failed and offsets is not None:
        for name, offset in offsets.items():
            path = TEST_DIR / "logs" / f"{name}.log"
            with path.open("rb") as log:
                log.seek(offset)
                lines = log.read().decode(errors="replace").splitlines()
            if lines:
                report.sections.append(
                    (f"stack log {name} (last {REPORTED_LINES})", "\n".join(lines[-REPORTED_LINES:]))
                )
    return report


_LOG_OFFSETS = pytest.StashKey[dict[str, int]]()
FAILED = pytest.StashKey[bool]()  # whether a test's call failed, for fixtures that keep evidence (screenshots)


@pytest.fixture(autouse=True)
def _mark_stack_logs(request: pytest.FixtureRequest) -> None:
    """Remember where each stack log ended when a stack test began, so a failure can show what followed."""
    if "stack" not in request.fixturenames:
        return
    request.getfixturevalue("stack")  # started first, so its logs exist
    logs = TEST_DIR / "logs"
    request.node.stash[_LOG_OFFSETS] = {
        name: (logs / f"{name}.log").stat().st_size for name in REPORTED_LOGS if (logs / f"{name}.log").exists()
    }


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    # Small budgets keep the budget tests short; everything else runs with the product's defaults.
    # Its own stack file and logs, so a `make dev` stack of the same checkout is left alone.
    stack = Stack(
        extra_env={
            "SESSION_MAX_TURNS": "6",
            "SESSION_MAX_TOOL_CALLS": "10",
            # Hundreds of sessions from one test user: the rate limits are off here (tests/stack/test_quotas.py turns
            # them on for the ingress it runs in its own process).
            "USER_SESSIONS_PER_HOUR": "0",
            "CHANNEL_SESSIONS_PER_HOUR": "0",
            "USER_RUNNING_SESSIONS": "0",
            "CHANNEL_RUNNING_SESSIONS": "0",
            "USER_DAILY_TOKENS": "0",  # the suite's one test user spends millions (tests/stack/test_daily_budget.py)
            "WORKSPACE_DAILY_TOKENS": "0",
            # A tree's budget: the root's own 6 turns, then room for four children of 5 turns each.
            "CHILD_MAX_TURNS": "5",
            "TREE_MAX_TURNS": "26",
            "OPERATOR_CHANNEL": "C0OPERATORS",
            "OPERATOR_USER_IDS": f"{OPERATOR_ID},U0OPERATOR2",
            # The crash tests run restart_service at once; scale_service keeps its own tier (approve).
            "TOOL_TIERS": '{"restart_service": "safe"}',
            # The answer-path tests count chat.postMessage posts: answers are posted whole here, and
            # tests/stack/test_stream.py runs agent_session with the product's default (streamed answers).
            "SLACK_STREAM": "false",
            # A SIGKILLed worker's task retry takes its session over once the lease has gone a heartbeat (a quarter
            # of it) without a renewal: 5 s here instead of the product's 15 s, for the suite's few dozen kills. Still
            # twice tests/stack/test_heartbeat.py's short lease, which a loaded machine keeps renewed; the counted
            # rigs (tests/rigs.py) run with the product's default, so the Firestore counts are the deployed ones.
            "SESSION_LEASE_SECONDS": "20",
        },
        stack_file=TEST_DIR / "stack.json",
        # Tasks reach agent_session as deployed Cloud Tasks delivers them: in parallel, retried on non-2xx.
        parallel_tasks=True,
    ).start()
    try:
        with product_environment(stack):
            yield stack
    finally:
        stack.stop()


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


@pytest.fixture(scope="module")
def streaming(stack: Stack) -> Iterator[None]:
    """agent_session with answers streamed (the product's default; the suite's stack turns it off), for the tests of
    one module that ask for it: restarted once per module rather than twice per test."""
    with agent_with(stack, {"SLACK_STREAM": "true", "SLACK_STREAM_BUFFER_CHARS": "40"}):
        yield

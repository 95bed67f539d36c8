"""A Slack thread for the answer-path tests that run the product's Slack code in this process: the fake Slack
serving in-process, the product's Slack client pointed at it, and a thread a person started in C1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from slack_sdk import WebClient

from infra.fakes.slack import FakeSlackConfig, running
from infra.fakes.slack.client import FakeSlack
from shared import deps
from shared.slack.surface import ThreadSurface
from tests.agent_helpers import HUMAN

CHANNEL = "C1"
TOKEN = "xoxb-surface"


@contextmanager
def slack_thread() -> Iterator[tuple[ThreadSurface, FakeSlack]]:
    """The thread's surface (no answer stream yet: a test opens the one it needs) and the fake Slack."""
    with running(FakeSlackConfig(bot_token=TOKEN, signing_secret="s")) as server:
        fake = FakeSlack(server.url)
        root = fake.user_message(HUMAN, CHANNEL, "<@UBOT> hi")["ts"]
        with deps.override(slack=WebClient(token=TOKEN, base_url=f"{server.url}/api/")):
            yield ThreadSurface(CHANNEL, root, root), fake

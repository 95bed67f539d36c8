"""A post Slack made but answered too late (slack-sdk's read timeout) is looked for by its key, not posted again."""

from __future__ import annotations

import pytest

from infra.fakes.slack.client import FakeSlack
from shared.slack import client as slack

pytestmark = pytest.mark.stack


@pytest.fixture
def impatient(fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch) -> FakeSlack:
    """The product's Slack client waits 1 s for an answer (10 s in production)."""
    monkeypatch.setattr(slack.client(), "timeout", 1)
    return fake_slack


@pytest.mark.parametrize("threaded", [True, False])
def test_a_post_answered_too_late_is_made_once(impatient: FakeSlack, uid: str, threaded: bool) -> None:
    """Defect: slack-sdk's connection handler sent the timed-out chat.postMessage again: two posts."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}") if threaded else None
    impatient.slow("chat.postMessage", 3, match=f"late-{uid}")  # made at once, answered after the client gave up
    ts = slack.post(channel, root, f"late-{uid}", key=f"late-key-{uid}")
    made = [m for m in impatient.messages(channel) if m.get("text") == f"late-{uid}"]
    if threaded:
        made = [m for m in impatient.messages(channel, root) if m.get("text") == f"late-{uid}"]
    assert [m["ts"] for m in made] == [ts]


def test_a_post_cut_before_it_was_made_is_sent_again(impatient: FakeSlack, uid: str) -> None:
    """A refused call (a 503 here) cannot have posted: slack-sdk's handlers retry it, and it is made once."""
    channel = f"C{uid}"
    impatient.fail("chat.postMessage", status=503, match=f"refused-{uid}")
    ts = slack.post(channel, None, f"refused-{uid}", key=f"refused-key-{uid}")
    assert [m["ts"] for m in impatient.messages(channel) if m.get("text") == f"refused-{uid}"] == [ts]


@pytest.mark.parametrize("status", [502, 504])
def test_a_post_a_gateway_fails_after_slack_made_it_is_made_once(fake_slack: FakeSlack, uid: str, status: int) -> None:
    """Defect: slack-sdk's 5xx handler sent the chat.postMessage a gateway answered 502 or 504 again: two posts."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=status, match=f"gw-{uid}", applied=True)
    ts = slack.post(channel, root, f"gw-{uid}", key=f"gw-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"gw-{uid}"] == [ts]

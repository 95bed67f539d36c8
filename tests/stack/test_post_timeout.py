"""A post Slack may have made (answered too late, by Slack's 500 or a gateway's 502 or 504, or its connection cut
after it was sent) is looked for by its key, not posted again; one that never reached Slack is sent again."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest

from infra.fakes.slack.client import FakeSlack
from shared.slack import backpressure
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


@pytest.mark.parametrize("applied", [True, False])
def test_a_post_slack_answers_500_is_looked_for_before_it_is_sent_again(
    fake_slack: FakeSlack, uid: str, applied: bool
) -> None:
    """Defect: slack-sdk's 5xx handler sent again the chat.postMessage Slack answered 500 (its ``internal_error``:
    some aspect of the operation may have succeeded) after making it: two posts. It is looked for by its key, and
    sent again only if absent."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=500, error="internal_error", match=f"ie-{uid}", applied=applied)
    ts = slack.post(channel, root, f"ie-{uid}", key=f"ie-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"ie-{uid}"] == [ts]
    sent = [c for c in fake_slack.calls("chat.postMessage", channel=channel) if c["args"].get("text") == f"ie-{uid}"]
    assert len(sent) == (1 if applied else 2)  # found, or sent again once it was not there
    looked = len(fake_slack.calls("conversations.replies", channel=channel))
    assert looked == (1 if applied else len(slack.FIND_POST_AFTER))


@pytest.mark.parametrize("applied", [True, False])
@pytest.mark.parametrize("cut", ["reset", "close", "partial"])
def test_a_post_whose_connection_is_cut_after_it_was_sent_is_made_once(
    fake_slack: FakeSlack, uid: str, cut: str, applied: bool
) -> None:
    """Defect: slack-sdk's connection handler sent again the chat.postMessage whose connection was reset (or closed
    without an answer) after Slack made it: two posts; one whose answer was cut halfway (``IncompleteRead``) was
    raised out of the post, neither looked for nor sent again. It is looked for by its key, and sent again only if
    absent."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", cut=cut, match=f"cut-{uid}", applied=applied)
    ts = slack.post(channel, root, f"cut-{uid}", key=f"cut-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"cut-{uid}"] == [ts]
    looked = len(fake_slack.calls("conversations.replies", channel=channel))
    assert looked == (1 if applied else len(slack.FIND_POST_AFTER))  # found at once, or looked for each time


def test_a_post_slack_makes_after_a_gateway_gave_up_is_made_once(fake_slack: FakeSlack, uid: str) -> None:
    """Defect: the post a gateway answered 504 was looked for at once, while Slack was still making it: not found,
    it was sent again and made twice. It is looked for again over a few seconds before it is sent again."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=504, match=f"slow-{uid}", applied_after=1.5)
    failed = time.time()
    ts = slack.post(channel, root, f"slow-{uid}", key=f"slow-key-{uid}")

    def made() -> list[str]:  # once the call the gateway gave up on took effect (1.5 s after it failed)
        found = [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"slow-{uid}"]
        return found if any(float(t) >= failed + 1.5 for t in found) else []

    assert fake_slack.wait_for(made, what="the post made 1.5 s after its 504") == [ts]


def test_a_post_is_looked_for_only_while_the_session_has_time(fake_slack: FakeSlack, uid: str) -> None:
    """With 2 s left, the post a gateway answered 504 (and Slack never made) is looked for at once and after 1 s,
    not after 3 s: it is sent again within the session's budget, and made once."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=504, match=f"short-{uid}")
    with backpressure.within(2.0):
        ts = slack.post(channel, root, f"short-{uid}", key=f"short-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"short-{uid}"] == [ts]
    assert len(fake_slack.calls("conversations.replies", channel=channel)) == 2


def test_a_post_past_the_sessions_deadline_is_looked_for_once_and_sent_again_once(
    fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: only the sleeps between lookups were bounded by the session's time. With 1.5 s left, a post a gateway
    answered 504 (Slack never made it) was looked for at once, in a read Slack answered 2 s late, then looked for
    again (its wait had passed) before it was sent again, past the deadline. Now past it a post is looked for at
    once and sent again once, nothing more (a wall-time wrap-up's answer is posted past it: not lost)."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=504, match=f"over-{uid}")
    fake_slack.slow("conversations.replies", 2, match=channel)
    with backpressure.within(1.5):
        ts = slack.post(channel, root, f"over-{uid}", key=f"over-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"over-{uid}"] == [ts]
    sent = [c for c in fake_slack.calls("chat.postMessage", channel=channel) if c["args"].get("text") == f"over-{uid}"]
    assert len(sent) == 2
    assert len(fake_slack.calls("conversations.replies", channel=channel)) == 1


def test_a_wrap_ups_post_past_the_deadline_that_slack_made_is_found_not_sent_again(
    fake_slack: FakeSlack, uid: str
) -> None:
    """A wall-time wrap-up posts its answer with no time left (the reviewer of the deadline's bound): a post Slack
    made behind a 500 is still looked for at once, and found, not sent again nor failed."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=500, error="internal_error", match=f"wrap-{uid}", applied=True)
    with backpressure.within(0.0):
        ts = slack.post(channel, root, f"wrap-{uid}", key=f"wrap-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"wrap-{uid}"] == [ts]
    assert len(fake_slack.calls("conversations.replies", channel=channel)) == 1


def test_a_burst_of_500s_on_a_post_is_not_a_storm(fake_slack: FakeSlack, uid: str) -> None:
    """Two 500s in a row on one post (neither made) ended the session as a Slack storm once the first 500 was no
    longer retried by slack-sdk: it is sent up to ``POST_ROUNDS`` times, looked for before each, and made once."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=500, error="internal_error", match=f"burst-{uid}", times=2)
    with backpressure.within(60.0):
        ts = slack.post(channel, root, f"burst-{uid}", key=f"burst-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"burst-{uid}"] == [ts]
    sent = [c for c in fake_slack.calls("chat.postMessage", channel=channel) if c["args"].get("text") == f"burst-{uid}"]
    assert len(sent) == slack.POST_ROUNDS


def test_a_post_looked_for_in_a_long_thread_reads_one_page(
    fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the lookup read the whole thread, oldest first, a page at a time. It reads the replies since the
    post was sent: one page (the thread's opening message first, as Slack answers), and finds the post."""
    monkeypatch.setattr(slack, "SENT_MARGIN", 0.0)  # the fake and this client share one clock
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    for n in range(200):  # with the root, more than one page of 200
        slack.post(channel, root, f"earlier {n}", key=f"earlier-{uid}-{n}")
    fake_slack.fail("chat.postMessage", status=504, match=f"long-{uid}", applied=True)
    ts = slack.post(channel, root, f"long-{uid}", key=f"long-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"long-{uid}"] == [ts]
    (read,) = fake_slack.calls("conversations.replies", channel=channel)
    assert [m["ts"] for m in read["response"]["messages"]] == [root, ts]


def test_a_post_refused_at_connect_is_sent_again_by_slack_sdk(
    fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection refused never reached Slack: slack-sdk's handler tries it again at once, nothing is looked for,
    and it is made once."""
    channel = f"C{uid}"
    with socket.socket() as closed:  # bound, never listening: a connect to it is refused
        closed.bind(("127.0.0.1", 0))
        connect, refused = socket.create_connection, [closed.getsockname()]

        def first_refused(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
            return connect(refused.pop() if refused else address, *args, **kwargs)

        monkeypatch.setattr(socket, "create_connection", first_refused)
        ts = slack.post(channel, None, f"refused-{uid}", key=f"refused-key-{uid}")
    assert not refused  # the first connect was refused
    assert [m["ts"] for m in fake_slack.messages(channel) if m.get("text") == f"refused-{uid}"] == [ts]
    assert len(fake_slack.calls("chat.postMessage", channel=channel)) == 1
    assert fake_slack.calls("conversations.history", channel=channel) == []


def test_a_post_whose_lookup_slack_rate_limits_is_sent_again_not_lost(fake_slack: FakeSlack, uid: str) -> None:
    """conversations.replies allows an app outside the Marketplace one request a minute: the lookup of a post a
    gateway answered 504 (and Slack never made) is rate-limited for 60 s. Outside a session that 429 was raised out
    of the post, which was then neither found nor sent again: lost. Now the looking ends there and the post is sent
    again, once, without waiting out the minute."""
    channel = f"C{uid}"
    root = slack.post(channel, None, "the thread", key=f"root-{uid}")
    fake_slack.fail("chat.postMessage", status=504, match=f"limited-{uid}")
    fake_slack.fail("conversations.replies", status=429, error="ratelimited", retry_after=60)
    began = time.monotonic()
    ts = slack.post(channel, root, f"limited-{uid}", key=f"limited-key-{uid}")
    assert [m["ts"] for m in fake_slack.messages(channel, root) if m.get("text") == f"limited-{uid}"] == [ts]
    assert len(fake_slack.calls("conversations.replies", channel=channel)) == 1
    assert time.monotonic() - began < 30  # the minute was not waited out

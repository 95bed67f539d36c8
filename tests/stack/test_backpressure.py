"""Slack back-pressure (issue 19, item 2): every Web API call the product makes is retried on rate limits, server
errors and cut connections by slack-sdk's handlers; inside a session only while its wall budget lasts; a storm
that outlasts the budget ends the session failed, with a plain reason persisted and told where Slack lets it.

Every storm comes from the fake Slack's fault controls, over real HTTP, and the tests count the calls it received.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared import config, deps
from shared.slack import backpressure
from shared.slack import client as slack
from shared.slack.surface import Reaction
from shared.state.models import SessionStatus
from tests.agent_helpers import mention, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack


@pytest.fixture
def product_client(stack: local.Stack) -> Iterator[None]:
    """The product's own client (``shared.deps`` builds it) pointed at this stack's fake Slack."""
    config.reset()
    deps.reset()
    yield
    deps.reset()


def calls(fake: FakeSlack, method: str, channel: str) -> list[int]:
    """The HTTP statuses of ``method``'s calls in ``channel``, in order."""
    return [c["status"] for c in fake.calls(method) if c["args"].get("channel", c["args"].get("channel_id")) == channel]


def test_every_web_api_call_the_product_makes_is_retried(fake_slack: FakeSlack, product_client: None, uid: str) -> None:
    """Outside a session: a 429 (after its Retry-After) and a 502 on each method, then success: 3 calls each."""
    channel = f"C{uid}"
    root = fake_slack.user_message("U0HUMAN", channel, "a thread")["ts"]
    ts = slack.post(channel, root, "first", key="k0")
    actions: dict[str, Callable[[], Any]] = {
        "chat.postMessage": lambda: slack.post(channel, root, "second", key="k1"),
        "chat.update": lambda: slack.update(channel, ts, "first, edited"),
        "chat.postEphemeral": lambda: slack.ephemeral(channel, "U0HUMAN", "only you", thread_ts=root),
        "reactions.add": lambda: slack.react(channel, ts, "eyes"),
        "reactions.remove": lambda: slack.unreact(channel, ts, "eyes"),
        "assistant.threads.setStatus": lambda: slack.set_status(channel, root, "is thinking..."),
        "conversations.replies": lambda: slack.thread_messages(channel, root),
    }
    for method, action in actions.items():
        fake_slack.fail(method, status=429, retry_after=1, match=channel)
        fake_slack.fail(method, status=502, match=channel)
        started = time.monotonic()
        action()
        assert time.monotonic() - started >= 1.0, f"{method}: Retry-After not honoured"
        assert calls(fake_slack, method, channel)[-3:] == [429, 502, 200], method
    assert [m["text"] for m in fake_slack.bot_replies(channel, root)] == ["first, edited", "second"]
    assert fake_slack.reactions(channel, ts) == []


@pytest.mark.parametrize("failure", [500, "partial"])
def test_a_500_or_half_an_answer_on_a_call_that_is_neither_a_post_nor_a_streams_is_retried(
    fake_slack: FakeSlack, product_client: None, uid: str, failure: int | str
) -> None:
    """Only a post and a stream's calls are never sent again after Slack's 500 or an answer cut halfway
    (test_post_timeout.py): an edit and a reaction are, as slack-sdk's handlers do a 500 or a cut connection."""
    channel = f"C{uid}"
    ts = slack.post(channel, None, "first", key="k0")
    how: dict[str, Any] = {"status": 500, "error": "internal_error"} if failure == 500 else {"cut": failure}
    fake_slack.fail("chat.update", match=channel, **how)
    fake_slack.fail("reactions.add", match=channel, **how)
    slack.update(channel, ts, "first, edited")
    assert slack.react(channel, ts, "eyes")
    failed = 500 if failure == 500 else 0  # a cut is recorded as status 0
    assert calls(fake_slack, "chat.update", channel) == calls(fake_slack, "reactions.add", channel) == [failed, 200]
    assert calls(fake_slack, "chat.postMessage", channel) == [200]


def test_a_retry_after_longer_than_the_time_left_fails_at_once(
    fake_slack: FakeSlack, product_client: None, uid: str
) -> None:
    channel = f"C{uid}"
    fake_slack.fail("chat.postMessage", status=429, retry_after=30, match=channel)
    started = time.monotonic()
    with backpressure.within(5.0), pytest.raises(SlackApiError) as raised:
        slack.post(channel, None, "hello", key="k")
    assert time.monotonic() - started < 10  # never slept the 30 s past a 5 s budget
    assert calls(fake_slack, "chat.postMessage", channel) == [429]
    with backpressure.within(5.0):
        reason = backpressure.storm(raised.value)
    assert reason is not None
    assert "wait 30 s" in reason
    assert "this session had left" in reason


def test_outside_a_session_a_long_retry_after_is_not_slept_either(
    fake_slack: FakeSlack, product_client: None, uid: str
) -> None:
    """The ingress must answer Slack within 3 s, and the sweep runs again anyway: an hour's Retry-After fails the
    call at once there too (slack-sdk's own handler would sleep the hour)."""
    channel = f"C{uid}"
    fake_slack.fail("reactions.add", status=429, retry_after=3600, match=channel)
    root = fake_slack.user_message("U0HUMAN", channel, "a thread")["ts"]
    started = time.monotonic()
    assert slack.react(channel, root, "eyes") is False  # refused, logged, never fatal
    assert time.monotonic() - started < 10  # never slept the hour
    assert calls(fake_slack, "reactions.add", channel) == [429]


def test_inside_a_session_retries_go_on_while_the_budget_lasts(
    fake_slack: FakeSlack, product_client: None, uid: str
) -> None:
    """Three 503s in a row: more than the ingress's two retries, well within a session's budget."""
    channel = f"C{uid}"
    fake_slack.fail("chat.postMessage", times=3, status=503, match=channel)
    with backpressure.within(60.0):
        slack.post(channel, None, "hello", key="k")
    assert calls(fake_slack, "chat.postMessage", channel) == [503, 503, 503, 200]
    fake_slack.fail("chat.postMessage", times=3, status=503, match=channel)
    with pytest.raises(SlackApiError):  # outside a session: two retries, then the error
        slack.post(channel, None, "hello again", key="k2")
    assert calls(fake_slack, "chat.postMessage", channel)[4:] == [503, 503, 503]


def test_backoff_never_runs_past_the_budget(fake_slack: FakeSlack, product_client: None, uid: str) -> None:
    channel = f"C{uid}"
    fake_slack.fail("chat.postMessage", times=20, status=503, match=channel)  # refused: retried, backoff
    started = time.monotonic()
    with backpressure.within(2.5), pytest.raises(SlackApiError):
        slack.post(channel, None, "hello", key="k")
    assert time.monotonic() - started < 4.0
    assert 2 <= len(calls(fake_slack, "chat.postMessage", channel)) < 6


def test_a_refused_connection_is_retried_only_within_the_budget(
    product_client: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens here once the socket closes
    monkeypatch.setenv("SLACK_API_BASE_URL", f"http://127.0.0.1:{port}/api/")
    config.reset()
    deps.reset()
    try:
        started = time.monotonic()
        with backpressure.within(1.5), pytest.raises(backpressure.CONNECTION_ERRORS) as raised:
            slack.post("C1", None, "hello", key="k")
        assert time.monotonic() - started < 3.0
        assert backpressure.storm(raised.value) == f"Slack could not be reached ({type(raised.value).__name__})"
    finally:
        deps.reset()
        config.reset()


def test_a_storm_that_outlasts_the_budget_ends_the_session_failed_and_says_so(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The answer's post is refused with a Retry-After longer than the whole budget: no sleep, no retry loop, no
    silence; the failure is persisted and the failure notice (Slack takes it) tells the thread."""
    channel = f"C{uid}"
    fake_gemini.script(FakeGemini.matching(uid, FakeGemini.text(f"All done {uid}.")))
    fake_slack.fail("chat.postMessage", status=429, retry_after=3600, match=f"All done {uid}")
    thread = mention(fake_slack, channel, "say hello")
    ended = wait_status(thread.session_id, SessionStatus.FAILED, SessionStatus.DONE, timeout=60)
    assert ended.status == SessionStatus.FAILED
    assert "Slack asked me to wait 3600 s" in (ended.error or "")
    assert "could not be told" not in (ended.error or "")
    [notice] = [m["text"] for m in fake_slack.bot_replies(channel, thread.ts)]
    assert "Slack asked me to wait 3600 s" in notice
    assert calls(fake_slack, "chat.postMessage", channel) == [429, 200]  # one try for the answer, none slept
    # The reaction follows the failure's commit (a fresh clone's CI read the reactions before it came).
    wait_for(lambda: Reaction.FAILED.value in fake_slack.reactions(channel, thread.ts), what="the failure reaction")


def test_a_storm_that_refuses_the_notice_too_still_persists_the_failure(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    fake_gemini.script(FakeGemini.matching(uid, FakeGemini.text(f"All done {uid}.")))
    fake_slack.fail("chat.postMessage", times=50, status=429, retry_after=3600, match=channel)
    thread = mention(fake_slack, channel, "say hello")
    ended = wait_status(thread.session_id, SessionStatus.FAILED, SessionStatus.DONE, timeout=60)
    assert ended.status == SessionStatus.FAILED
    assert "Slack asked me to wait 3600 s" in (ended.error or "")
    assert "the thread could not be told" in (ended.error or "")
    assert fake_slack.bot_replies(channel, thread.ts) == []
    assert calls(fake_slack, "chat.postMessage", channel) == [429, 429]  # the answer, the notice; once each
    wait_for(lambda: Reaction.FAILED.value in fake_slack.reactions(channel, thread.ts), what="the failure reaction")

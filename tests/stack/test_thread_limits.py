"""Reading threads within Slack's limits (issue 27 item 3): apps distributed outside the Marketplace may call
``conversations.replies`` once a minute for 15 messages. A thread read Slack answers ``ratelimited`` with a long
``Retry-After`` does not fail the session: it goes on with what it has (the request, the messages read before the
limit) and the model is told so; a short one is waited out as before."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from slack_sdk import WebClient

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack import FakeSlackConfig, running
from infra.fakes.slack.client import FakeSlack
from shared import deps
from shared.agent import prompts
from shared.slack import backpressure
from shared.slack import client as slack
from shared.state.models import SessionStatus
from tests.agent_helpers import HUMAN, mention, wait_status

G = FakeGemini


@pytest.fixture
def thread() -> Iterator[tuple[FakeSlack, str]]:
    with running(FakeSlackConfig(bot_token="xoxb-limits", signing_secret="s")) as server:
        fake = FakeSlack(server.url)
        root = fake.user_message(HUMAN, "C1", "<@UBOT> hi")["ts"]
        for n in range(20):
            fake.user_message(HUMAN, "C1", f"reply {n}", thread_ts=root)
        web = WebClient(
            token="xoxb-limits", base_url=f"{server.url}/api/", retry_handlers=backpressure.retry_handlers()
        )
        with deps.override(slack=web):
            yield fake, root


def test_a_long_rate_limit_returns_what_was_read_at_once(thread: tuple[FakeSlack, str]) -> None:
    fake, root = thread
    fake.fail("conversations.replies", status=429, retry_after=60)
    with backpressure.within(300):  # a session with minutes left still does not wait a minute for its thread
        messages, limited = slack.thread_read("C1", root)
    assert (messages, limited) == ([], 60.0)
    assert len(fake.calls("conversations.replies")) == 1
    # 15 messages a page, then the one-a-minute limit: the pages read are kept.
    fake.fail("conversations.replies", status=429, retry_after=60, match="cursor")
    with backpressure.within(300):
        messages, limited = slack.thread_read("C1", root, limit=15)
    assert limited == 60.0
    assert [m["text"] for m in messages][:2] == ["<@UBOT> hi", "reply 0"]


def test_a_short_rate_limit_is_waited_out(thread: tuple[FakeSlack, str]) -> None:
    fake, root = thread
    fake.fail("conversations.replies", status=429, retry_after=1)
    with backpressure.within(300):
        messages, limited = slack.thread_read("C1", root)
    assert limited is None
    assert len(messages) == 21


def test_the_model_is_told_the_thread_could_not_be_read() -> None:
    text = prompts.thread_prompt([], request="deploy it", requester="U1", limited=58.4)
    assert "rate-limited" in text
    assert "58 s" in text
    assert "deploy it" in text


@pytest.mark.stack
def test_a_session_whose_thread_read_is_rate_limited_goes_on_with_the_request(
    script: Callable[..., int], fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    fake_slack.fail("conversations.replies", times=3, status=429, retry_after=60, match=channel)
    script(G.text("Done from the request alone."))
    thread = mention(fake_slack, channel, "summarise the incident")
    wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    [asked] = [r for r in fake_gemini.requests() if uid in repr(r["body"])]
    assert "rate-limited reading this thread" in repr(asked["body"])
    assert [m["text"] for m in fake_slack.bot_replies(channel, thread.ts)][-1] == "Done from the request alone."

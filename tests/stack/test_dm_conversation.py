"""A DM is a conversation (issue 26 item 6): a request typed at the top level of a person's DM with the app is
answered there, in the conversation, not in a thread under the request (as Slack's agent view and the app's Messages
tab show a DM), while a reply typed inside a DM thread is answered in that thread. What is keyed by the thread keeps
working: the conversation's question is answered by the person's next top-level message, its continuation answers
at the top level, "stop" typed there stops it, ✅ marks the request, and a takeover finds the posts it made there.
With streaming on, such an answer is posted whole (Slack streams only replies to a message: ``thread_ts``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk import WebClient

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import BOT_TOKEN, OPERATOR_ID, Stack
from shared import deps
from shared.slack.surface import ThreadSurface
from shared.state import dm_conversations, ids, sessions
from shared.state.models import SessionStatus
from tests.agent_helpers import open_question, wait_status
from tests.poll import wait_for

G = FakeGemini
Script = Callable[..., int]


def say(fake_slack: FakeSlack, channel: str, text: str, *, thread_ts: str | None = None) -> dict[str, Any]:
    """The operator types in their DM with the app (an operator, so they may answer its questions)."""
    sent = fake_slack.user_message(OPERATOR_ID, channel, text, thread_ts=thread_ts, channel_type="im")
    assert [d["status"] for d in sent["deliveries"]] == [200], sent
    return sent


def session_of(sent: dict[str, Any]) -> str:
    return ids.session_for_event(sent["deliveries"][0]["event_id"])


def top_level_bot_posts(fake_slack: FakeSlack, channel: str) -> list[str]:
    return [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id") and not m.get("thread_ts")]


def in_thread_bot_posts(fake_slack: FakeSlack, channel: str, ts: str) -> list[str]:
    return [m["text"] for m in fake_slack.bot_replies(channel, ts) if m.get("thread_ts")]


@pytest.mark.stack
def test_a_question_at_the_top_level_is_answered_by_the_next_top_level_message(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    channel = f"D{uid}"
    script(G.call("ask_operator", question="Which region?", options=["eu", "us"]), G.text("Deployed to eu."))
    sent = say(fake_slack, channel, f"deploy the release [{uid}]")
    asker = session_of(sent)
    wait_status(asker, SessionStatus.PAUSED)
    question = open_question(asker)
    assert any("Which region?" in text for text in top_level_bot_posts(fake_slack, channel))
    reply = say(fake_slack, channel, "eu")
    continuation = wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE)
    assert continuation.origin.thread_ts == sent["ts"]
    assert sessions.get_session(session_of(reply)) is None  # an answer, not a new request
    assert top_level_bot_posts(fake_slack, channel)[-1] == "Deployed to eu."
    assert in_thread_bot_posts(fake_slack, channel, sent["ts"]) == []
    wait_for(lambda: "white_check_mark" in fake_slack.reactions(channel, sent["ts"]), what="✅ on the request")


@pytest.mark.stack
def test_stop_typed_at_the_top_level_stops_the_conversation_waiting_there(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    channel = f"D{uid}"
    script(G.call("ask_operator", question="Which region?", options=["eu", "us"]))
    sent = say(fake_slack, channel, f"deploy the release [{uid}]")
    asker = session_of(sent)
    wait_status(asker, SessionStatus.PAUSED)
    say(fake_slack, channel, "stop")
    wait_status(asker, SessionStatus.STOPPED)
    assert any("Stopped by" in text for text in top_level_bot_posts(fake_slack, channel))
    assert in_thread_bot_posts(fake_slack, channel, sent["ts"]) == []
    assert "octagonal_sign" in fake_slack.reactions(channel, sent["ts"])


@pytest.mark.stack
def test_a_reply_inside_a_dm_thread_is_answered_in_that_thread(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    channel = f"D{uid}"
    script(G.text("At the top."))
    sent = say(fake_slack, channel, f"first question [{uid}]")
    wait_status(session_of(sent), SessionStatus.DONE)
    script(G.text("In the thread."))
    reply = say(fake_slack, channel, f"a follow-up in a thread [{uid}]", thread_ts=sent["ts"])
    follow = wait_status(session_of(reply), SessionStatus.DONE)
    assert (follow.origin.thread_ts, follow.origin.request_ts) == (sent["ts"], reply["ts"])
    assert in_thread_bot_posts(fake_slack, channel, sent["ts"]) == ["In the thread."]
    assert top_level_bot_posts(fake_slack, channel) == ["At the top."]


@pytest.mark.stack
def test_a_takeover_finds_what_the_conversation_posted_at_the_top_level(stack: Stack, fake_slack: FakeSlack,
                                                                      uid: str) -> None:  # fmt: skip
    channel = f"D{uid}"
    request = fake_slack.user_message("U0HUMAN", channel, "hello", channel_type="im")["ts"]
    fake_slack.user_message("U0HUMAN", channel, "something else", channel_type="im")
    web = WebClient(token=BOT_TOKEN, base_url=stack.url("fake_slack") + "/api/")
    with deps.override(slack=web):
        first = ThreadSurface(channel, request, request)
        posted = first.post("Working on it.", key=f"s-{uid}:0")
        taken_over = ThreadSurface(channel, request, request)
        taken_over.recover()
        assert taken_over.posted == {f"s-{uid}:0": posted}
        assert taken_over.post("Working on it.", key=f"s-{uid}:0") == posted  # not posted twice
    assert top_level_bot_posts(fake_slack, channel) == ["Working on it."]


@pytest.mark.stack
@pytest.mark.usefixtures("stack")
def test_the_dm_conversation_only_moves_forward(uid: str) -> None:
    channel = f"D{uid}"
    assert dm_conversations.current(channel) is None
    assert dm_conversations.started(channel, "1700000000.000200")
    assert not dm_conversations.started(channel, "1700000000.000100")  # an earlier request recorded late
    assert not dm_conversations.started(channel, "1700000000.000200")  # Slack's retry of the same
    assert dm_conversations.current(channel) == "1700000000.000200"
    assert dm_conversations.started(channel, "1700000001.000000")
    assert dm_conversations.current(channel) == "1700000001.000000"


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")  # module-scoped (tests/conftest.py): this module's last test
@pytest.mark.timeout(360)  # agent_session restarted with streaming on, on a busy machine
def test_a_top_level_dm_request_is_answered_in_the_conversation_without_a_stream(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    channel = f"D{uid}"
    script(G.call("read_thread"), G.text("First answer."))
    sent = say(fake_slack, channel, f"what changed today? [{uid}]")
    done = wait_status(session_of(sent), SessionStatus.DONE, timeout=60)
    assert (done.origin.channel, done.origin.thread_ts) == (channel, sent["ts"])  # still keyed by the request's thread
    assert top_level_bot_posts(fake_slack, channel) == ["First answer."]
    assert in_thread_bot_posts(fake_slack, channel, sent["ts"]) == []
    [answer] = [m for m in fake_slack.messages(channel) if m.get("bot_id")]
    assert done.stream.answer_ts == answer["ts"]  # its 👍/👎 count
    assert [c for c in fake_slack.calls("chat.startStream") if c["args"].get("channel") == channel] == []
    wait_for(lambda: "white_check_mark" in fake_slack.reactions(channel, sent["ts"]), what="✅ on the request")
    statuses = [c["args"]["thread_ts"] for c in fake_slack.calls("assistant.threads.setStatus")
                if c["args"].get("channel_id") == channel]  # fmt: skip
    assert set(statuses) == {sent["ts"]}  # the status line while it worked, then cleared
    assert fake_slack.status(channel, sent["ts"]) == ""
    # The next top-level message opens a conversation of its own once the first has ended.
    script(G.text("Second answer."))
    again = say(fake_slack, channel, f"and yesterday? [{uid}]")
    second = wait_status(session_of(again), SessionStatus.DONE, timeout=60)
    assert second.origin.thread_ts == again["ts"]
    assert top_level_bot_posts(fake_slack, channel) == ["First answer.", "Second answer."]
    assert dm_conversations.current(channel) == again["ts"]

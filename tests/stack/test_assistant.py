"""Slack's assistant pane: opening it sets the suggested prompts and a title, a message there runs a session like a
DM and is answered in its thread, a context change is acknowledged and nothing more, Slack's refusals are survived."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import OPERATOR_ID
from shared import config
from shared.slack.events import AssistantThread, BadEvent, classify
from shared.state import ids, questions
from shared.state.models import QuestionStatus, SessionStatus
from shared.usecases import assistant_pane
from tests.agent_helpers import open_question, wait_status

G = FakeGemini
Script = Callable[..., int]


def assistant_event(kind: str, **thread: Any) -> dict[str, Any]:
    """An Events API payload of an assistant_thread_* event, as Slack's docs show it."""
    body = {"user_id": "U1", "context": {"channel_id": "C1", "team_id": "T1", "enterprise_id": None},
            "channel_id": "D1", "thread_ts": "1729999327.187299"} | thread  # fmt: skip
    event = {"type": kind, "assistant_thread": body, "event_ts": "1715873754.429808"}
    return {"type": "event_callback", "event_id": "Ev1", "api_app_id": "A1", "team_id": "T1", "event": event}


def test_the_assistant_events_are_classified_without_side_effects() -> None:
    started = classify(assistant_event("assistant_thread_started"))
    assert started == AssistantThread(event_id="Ev1", started=True, channel="D1", thread_ts="1729999327.187299",
                                      user="U1", context_channel="C1")  # fmt: skip
    changed = classify(assistant_event("assistant_thread_context_changed", context={}))
    assert isinstance(changed, AssistantThread)
    assert (changed.started, changed.context_channel) == (False, None)
    with pytest.raises(BadEvent, match=r"assistant_thread\.thread_ts"):
        classify(assistant_event("assistant_thread_started", thread_ts=None))
    anonymous = classify(assistant_event("assistant_thread_started", user_id=None))
    assert isinstance(anonymous, AssistantThread)
    assert anonymous.user == ""
    missing = assistant_event("assistant_thread_started")
    del missing["event"]["assistant_thread"]
    with pytest.raises(BadEvent, match="assistant_thread is missing"):
        classify(missing)


def delivered(opened: dict[str, Any]) -> dict[str, Any]:
    [delivery] = opened["deliveries"]
    assert (delivery["type"], delivery["status"]) == ("assistant_thread_started", 200), opened
    return dict(delivery)


def response_of(fake_slack: FakeSlack, delivery: dict[str, Any]) -> dict[str, Any]:
    """What the app answered to one delivery (the fake keeps every one)."""
    [record] = [d for d in fake_slack.deliveries("event") if d["event_id"] == delivery["event_id"]]
    answer: dict[str, Any] = json.loads(record["response"])
    return answer


def calls_for(fake_slack: FakeSlack, method: str, thread_ts: str) -> list[dict[str, Any]]:
    return [c["args"] for c in fake_slack.calls(method) if c["args"].get("thread_ts") == thread_ts]


@pytest.mark.stack
def test_opening_the_pane_sets_the_configured_prompts_and_a_title(fake_slack: FakeSlack, uid: str) -> None:
    opened = fake_slack.open_assistant(f"U{uid}", context_channel="C0LOCAL")
    delivered(opened)
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    shown = fake_slack.assistant_thread(channel, thread_ts)
    configured = config.Settings({}).assistant_prompts  # the stack runs with the default
    assert shown["prompts"] == [{"title": title, "message": message} for title, message in configured]
    assert (shown["prompts_title"], shown["title"]) == (assistant_pane.PROMPTS_TITLE, assistant_pane.THREAD_TITLE)
    [prompts] = calls_for(fake_slack, "assistant.threads.setSuggestedPrompts", thread_ts)
    assert prompts["channel_id"] == channel  # Slack's argument names, the thread named (assistant_view)
    [title] = calls_for(fake_slack, "assistant.threads.setTitle", thread_ts)
    assert (title["channel_id"], title["title"]) == (channel, assistant_pane.THREAD_TITLE)


@pytest.mark.stack
def test_a_message_in_the_pane_runs_a_session_answered_in_its_thread(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    opened = fake_slack.open_assistant(f"U{uid}")
    delivered(opened)
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    script(G.text("Here is **the plan**:\n\n- one\n- two"))
    sent = fake_slack.user_message(f"U{uid}", channel, f"plan the release [{uid}]", thread_ts=thread_ts)
    [delivery] = sent["deliveries"]
    assert (delivery["type"], delivery["status"]) == ("message", 200)
    session = wait_status(ids.session_for_event(delivery["event_id"]), SessionStatus.DONE)
    assert (session.origin.channel, session.origin.thread_ts) == (
        channel,
        thread_ts,
    )  # the pane's thread, like a DM thread
    [answer] = fake_slack.bot_replies(channel, thread_ts)
    assert answer["blocks"][0] == {"type": "markdown", "text": "Here is **the plan**:\n\n- one\n- two"}
    assert answer["text"] == "Here is *the plan*:\n\n• one\n• two"  # the fallback, in mrkdwn
    assert fake_slack.statuses(channel, thread_ts)[0] == "is thinking…"  # the pane shows the work
    assert fake_slack.assistant_thread(channel, thread_ts)["title"] == f"plan the release [{uid}]"  # named by it

    # A later request in the same thread starts its own session there; the thread keeps the name it has.
    script(G.text("Done again."))
    again = fake_slack.user_message(f"U{uid}", channel, f"and the notes [{uid}]", thread_ts=thread_ts)
    wait_status(ids.session_for_event(again["deliveries"][0]["event_id"]), SessionStatus.DONE)
    assert fake_slack.bot_replies(channel, thread_ts)[-1]["text"] == "Done again."
    assert fake_slack.assistant_thread(channel, thread_ts)["title"] == f"plan the release [{uid}]"
    assert len(calls_for(fake_slack, "assistant.threads.setTitle", thread_ts)) == 2  # "New request", the request


@pytest.mark.stack
def test_slacks_retry_of_the_opening_neither_renames_the_thread_nor_offers_prompts_again(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Slack retries an ``assistant_thread_started`` it thinks went unanswered (X-Slack-Retry-Num), possibly after
    the person has typed: the thread keeps the name its request gave it and gets one set of prompts."""
    opened = fake_slack.open_assistant(f"U{uid}")
    started = delivered(opened)
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    script(G.text("Done."))
    sent = fake_slack.user_message(f"U{uid}", channel, f"check the build [{uid}]", thread_ts=thread_ts)
    wait_status(ids.session_for_event(sent["deliveries"][0]["event_id"]), SessionStatus.DONE)
    retried = fake_slack.redeliver(started["event_id"])
    assert (retried["status"], retried["retry_num"]) == (200, 1)
    assert fake_slack.assistant_thread(channel, thread_ts)["title"] == f"check the build [{uid}]"
    assert len(calls_for(fake_slack, "assistant.threads.setSuggestedPrompts", thread_ts)) == 1
    assert len(calls_for(fake_slack, "assistant.threads.setTitle", thread_ts)) == 2  # "New request", the request


@pytest.mark.stack
def test_a_message_and_a_context_change_while_the_panes_session_runs_join_it(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """While the pane's session works, the person moves to another channel and types again, mentioning the app: the
    context change changes nothing, the message is a note that session reads (no second session), and the thread is
    still named after the first request (the second may be in the thread before the session reads it)."""
    opened = fake_slack.open_assistant(f"U{uid}", context_channel="C0LOCAL")
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    script(G.delayed(2, G.call("read_thread")), G.text("Both done."))
    fake_slack.slow("assistant.threads.setStatus", 1.0, match=thread_ts)  # the session reads its thread a bit later
    sent = fake_slack.user_message(f"U{uid}", channel, f"check the build [{uid}]", thread_ts=thread_ts)
    first = ids.session_for_event(sent["deliveries"][0]["event_id"])
    wait_status(first, SessionStatus.RUNNING)
    changed = fake_slack.change_assistant_context(channel, thread_ts, "C0OPERATORS")
    assert response_of(fake_slack, changed["deliveries"][0])["ignored"].startswith("assistant context change")
    bot = fake_slack.config()["bot_user_id"]
    again = fake_slack.user_message(f"U{uid}", channel, f"<@{bot}> and the tests [{uid}]", thread_ts=thread_ts)
    assert response_of(fake_slack, again["deliveries"][0]) == {"ok": True, "noted": first}
    wait_status(first, SessionStatus.DONE)
    assert [m["text"] for m in fake_slack.bot_replies(channel, thread_ts)] == ["Both done."]
    *_, last = [json.dumps(r) for r in fake_gemini.requests() if f"check the build [{uid}]" in json.dumps(r)]
    assert f"and the tests [{uid}]" in last  # the note reached the session's next turn
    assert fake_slack.assistant_thread(channel, thread_ts)["title"] == f"check the build [{uid}]"


@pytest.mark.stack
def test_a_reply_in_the_pane_while_a_question_is_open_answers_it(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    opened = fake_slack.open_assistant(OPERATOR_ID)  # an operator may answer in their own pane
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    script(G.call("ask_operator", question="Which region?", options=["eu", "us"]))
    sent = fake_slack.user_message(OPERATOR_ID, channel, f"deploy it [{uid}]", thread_ts=thread_ts)
    first = ids.session_for_event(sent["deliveries"][0]["event_id"])
    wait_status(first, SessionStatus.PAUSED)
    question = open_question(first)
    script(G.text("Deployed to eu."))
    reply = fake_slack.user_message(OPERATOR_ID, channel, "eu", thread_ts=thread_ts)
    assert response_of(fake_slack, reply["deliveries"][0]) == {"ok": True, "answer": "answered"}
    answered = questions.get_question(question.question_id)
    assert answered is not None
    assert (answered.status, answered.matched_option) == (QuestionStatus.ANSWERED, "eu")
    wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE)
    assert fake_slack.bot_replies(channel, thread_ts)[-1]["blocks"][0]["text"] == "Deployed to eu."


@pytest.mark.stack
def test_a_context_change_is_acknowledged_and_changes_nothing(fake_slack: FakeSlack, uid: str) -> None:
    opened = fake_slack.open_assistant(f"U{uid}", context_channel="C0LOCAL")
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    before = len(fake_slack.calls())
    changed = fake_slack.change_assistant_context(channel, thread_ts, "C0OPERATORS")
    [delivery] = changed["deliveries"]
    assert (delivery["type"], delivery["status"]) == ("assistant_thread_context_changed", 200)
    assert fake_slack.calls()[before:] == []  # no Slack call, no session
    assert fake_slack.assistant_thread(channel, thread_ts)["title"] == assistant_pane.THREAD_TITLE


@pytest.mark.stack
def test_slacks_refusals_are_logged_and_acknowledged(fake_slack: FakeSlack, uid: str) -> None:
    fake_slack.fail("assistant.threads.setSuggestedPrompts", error="missing_scope")
    fake_slack.fail("assistant.threads.setTitle", error="invalid_thread_ts")
    opened = fake_slack.open_assistant(f"U{uid}")
    answered = response_of(fake_slack, delivered(opened))  # 200: Slack's retry would be refused the same way
    assert (answered["prompts_refused"], answered["title_refused"]) == ("missing_scope", "invalid_thread_ts")
    shown = fake_slack.assistant_thread(opened["channel"], opened["thread_ts"])
    assert "prompts" not in shown
    assert "title" not in shown


@pytest.mark.stack
def test_a_rate_limited_title_is_retried_within_slacks_three_seconds(fake_slack: FakeSlack, uid: str) -> None:
    fake_slack.fail("assistant.threads.setTitle", status=429, retry_after=1)
    opened = fake_slack.open_assistant(f"U{uid}")
    delivery = delivered(opened)
    assert "title_refused" not in response_of(fake_slack, delivery)
    shown = fake_slack.assistant_thread(opened["channel"], opened["thread_ts"])
    assert shown["title"] == assistant_pane.THREAD_TITLE
    assert len(calls_for(fake_slack, "assistant.threads.setTitle", opened["thread_ts"])) == 2


@pytest.mark.stack
def test_the_fake_answers_slacks_errors_for_the_assistant_methods(fake_slack: FakeSlack, uid: str) -> None:
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

    from infra import stack as local

    opened = fake_slack.open_assistant(f"U{uid}")
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    web = WebClient(token=local.BOT_TOKEN, base_url=fake_slack.base_url + "/api/")
    prompt = {"title": "t", "message": "m"}

    def error(call: Callable[[], Any]) -> str:
        with pytest.raises(SlackApiError) as refused:
            call()
        return str(refused.value.response["error"])

    assert error(lambda: web.assistant_threads_setTitle(channel_id="D0NOPE", thread_ts=thread_ts, title="x")) == (
        "channel_not_found"
    )
    assert error(lambda: web.assistant_threads_setTitle(channel_id=channel, thread_ts="1.000001", title="x")) == (
        "invalid_thread_ts"
    )
    assert error(lambda: web.assistant_threads_setTitle(channel_id=channel, thread_ts=thread_ts, title="")) == (
        "invalid_arguments"
    )
    for prompts in ([prompt] * 5, [{"title": "t"}], []):  # more than four, one without its message, none
        assert error(lambda p=prompts: web.assistant_threads_setSuggestedPrompts(  # type: ignore[misc]
            channel_id=channel, thread_ts=thread_ts, prompts=p)) == "invalid_arguments"  # fmt: skip
    web.assistant_threads_setSuggestedPrompts(channel_id=channel, prompts=[prompt])  # no thread_ts: the latest thread
    assert fake_slack.assistant_thread(channel, thread_ts)["prompts"] == [prompt]


@pytest.mark.stack
def test_an_opening_whose_delivery_died_before_its_calls_is_offered_by_slacks_retry(
    fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (review): the opening was recorded before its two Slack calls, and taken back only if Python got to
    run its ``except``: a delivery killed in between (its instance stopped, out of memory) left the record, Slack's
    retry was answered "duplicate", and the thread never got its prompts or its name."""
    from shared.slack.events import AssistantThread
    from shared.state import events
    from shared.usecases import assistant_pane

    opened = fake_slack.open_assistant(f"U{uid}")
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    thread = AssistantThread(event_id=f"EvKilled{uid}", started=True, channel=channel, thread_ts=thread_ts,
                             user=f"U{uid}", context_channel=None)  # fmt: skip
    before = len(calls_for(fake_slack, "assistant.threads.setSuggestedPrompts", thread_ts))

    def killed(_thread: AssistantThread) -> dict[str, str | bool]:
        raise SystemExit("the instance stopped before its calls")  # no except of the product's runs after a kill

    with monkeypatch.context() as dying:
        dying.setattr(assistant_pane, "_offer", killed)
        dying.setattr(events, "forget_event", lambda _event_id: None, raising=False)  # killed: nothing runs after
        with pytest.raises(SystemExit):
            assistant_pane.opened(thread)
    assert assistant_pane.opened(thread).get("duplicate") is None  # Slack's retry offers them
    assert len(calls_for(fake_slack, "assistant.threads.setSuggestedPrompts", thread_ts)) == before + 1
    assert assistant_pane.opened(thread).get("duplicate") is True  # and a later retry does nothing


@pytest.mark.stack
def test_a_retried_opening_whose_first_delivery_died_does_not_rename_a_thread_the_person_typed_in(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the opening's first delivery died before its calls (nothing recorded), the person typed a request in
    the thread meanwhile (its session named the thread), and Slack's retry (X-Slack-Retry-Num, a minute on) then
    renamed it "New request" and offered the prompts under the conversation. A retry that finds a session in the
    thread offers nothing and is recorded."""
    from shared.slack.events import AssistantThread
    from shared.usecases import assistant_pane

    opened = fake_slack.open_assistant(f"U{uid}")  # its delivery, as if died: the test offers nothing for it
    channel, thread_ts = opened["channel"], opened["thread_ts"]
    script(G.text("Done."))
    sent = fake_slack.user_message(f"U{uid}", channel, f"ship the fix [{uid}]", thread_ts=thread_ts)
    wait_status(ids.session_for_event(sent["deliveries"][0]["event_id"]), SessionStatus.DONE)
    titles = calls_for(fake_slack, "assistant.threads.setTitle", thread_ts)
    prompts = calls_for(fake_slack, "assistant.threads.setSuggestedPrompts", thread_ts)
    thread = AssistantThread(event_id=f"EvDied{uid}", started=True, channel=channel, thread_ts=thread_ts,
                             user=f"U{uid}", context_channel=None)  # fmt: skip
    assert assistant_pane.opened(thread).get("ignored")
    assert fake_slack.assistant_thread(channel, thread_ts)["title"] == f"ship the fix [{uid}]"
    assert calls_for(fake_slack, "assistant.threads.setTitle", thread_ts) == titles
    assert calls_for(fake_slack, "assistant.threads.setSuggestedPrompts", thread_ts) == prompts
    assert assistant_pane.opened(thread).get("duplicate") is True  # recorded: later retries too

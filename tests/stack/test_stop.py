"""Stopping a session from Slack: its Stop button or "stop" typed in its thread, by its requester or an operator.

Every test stops the session while something is in flight (a slow model reply, a slow tool call, a running child)
and counts the requests the Gemini stub received: none after the step boundary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import BOT_USER_ID, OPERATOR_ID
from shared.asks.answers import decide
from shared.queue import tasks
from shared.slack import blocks
from shared.state import ids, questions, sessions, steps
from shared.state.models import SessionStatus, StepKind
from shared.state.questions import AnswerRecord
from shared.usecases.stop import is_stop
from tests.agent_helpers import HUMAN, Thread, mention, open_question, session, texts, wait_status
from tests.poll import wait_for

G = FakeGemini
Script = Callable[..., int]
STRANGER = "U0STRANGER"


def reactions(fake_slack: FakeSlack, channel: str, ts: str) -> list[str]:
    return fake_slack.reactions(channel, ts)


def stop_buttons(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for b in message.get("blocks") or [] if b["type"] == "actions" for e in b["elements"]
            if e["action_id"] == blocks.STOP_ACTION]  # fmt: skip


def ephemeral_texts(fake_slack: FakeSlack, channel: str, user: str) -> list[str]:
    return [e["text"] for e in fake_slack.ephemerals(channel, user)]


def what_the_stop_showed(fake_slack: FakeSlack, channel: str, since: int, button_ts: str) -> list[str]:
    """The Slack calls a stop made, in order: "button off" (the edit that took the Stop button off ``button_ts``),
    "note: …" (a private note), "post: …" (a thread message)."""
    shown = []
    for call in fake_slack.calls(channel=channel)[since:]:
        args = call["args"]
        if call["method"] == "chat.update" and args.get("ts") == button_ts and "stop:" not in json.dumps(args):
            shown.append("button off")
        elif call["method"] == "chat.postEphemeral":
            shown.append(f"note: {args['text']}")
        elif call["method"] == "chat.postMessage" and "Stopped" in str(args.get("text")):
            shown.append(f"post: {args['text']}")
    return shown


def test_stop_is_the_word_alone() -> None:
    assert all(is_stop(text) for text in ("stop", "  Stop!", "<@UBOT> STOP."))
    assert not any(is_stop(text) for text in ("stop the service", "don't stop", ""))


@pytest.mark.stack
def test_stop_typed_by_the_requester_during_a_model_call(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.delayed(4, G.call("read_thread")), G.text("never said"))
    thread = mention(fake_slack, f"C{uid}", "think slowly")
    wait_for(lambda: len(fake_gemini.requests()) == 1, what="the model call in flight")
    fake_slack.user_message(STRANGER, thread.channel, "stop", thread_ts=thread.ts)
    assert ephemeral_texts(fake_slack, thread.channel, STRANGER) == [
        "Only the person who asked or an operator can stop this session."
    ]
    running = session(thread.session_id)
    assert running is not None
    assert running.stop_requested is None  # a refused stop changes nothing

    fake_slack.user_message(HUMAN, thread.channel, "stop", thread_ts=thread.ts)
    wait_status(thread.session_id, SessionStatus.STOPPED)
    wait_for(lambda: "octagonal_sign" in reactions(fake_slack, thread.channel, thread.ts), what="the stop's mark")
    time.sleep(1.5)  # the model's late reply arrived and was dropped: no tool ran, nothing was asked again
    assert len(fake_gemini.requests()) == 1
    kinds = [s.kind for s in steps.load_steps(thread.session_id)]
    assert StepKind.TOOL_RESULTS not in kinds
    assert StepKind.MODEL not in kinds
    assert reactions(fake_slack, thread.channel, thread.ts) == ["octagonal_sign"]
    assert fake_slack.statuses(thread.channel, thread.ts)[-1] == ""
    replies = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert replies == [f":octagonal_sign: Stopped by <@{HUMAN}>. Nothing more will happen unless someone asks again."]
    assert ephemeral_texts(fake_slack, thread.channel, HUMAN) == [
        "Stopping: the session ends after the step it is on now."
    ]


@pytest.mark.stack
def test_the_stop_button_during_a_tool_call(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("post_update", text="Starting the copy"), G.call("post_update", text="Copying tables"),
           G.text("never said"))  # fmt: skip
    fake_slack.slow("chat.postMessage", 4, match="Copying tables")
    thread = mention(fake_slack, f"C{uid}", "copy the tables")
    first = fake_slack.wait_for_bot_replies(thread.channel, thread.ts, 1, timeout=60)[0]
    [button] = stop_buttons(first)
    assert button["value"] == thread.session_id
    second = fake_slack.wait_for_bot_replies(thread.channel, thread.ts, 2, timeout=60)[1]  # stored; its answer is late
    assert "Copying tables" in second["text"]
    assert stop_buttons(second) == []  # the first update carries it

    refused = fake_slack.click(STRANGER, thread.channel, first["ts"], blocks.STOP_ACTION)
    assert refused["status"] == 200
    assert ephemeral_texts(fake_slack, thread.channel, STRANGER) == [
        "Only the person who asked or an operator can stop this session."
    ]
    since = len(fake_slack.calls(channel=thread.channel))
    fake_slack.click(OPERATOR_ID, thread.channel, first["ts"], blocks.STOP_ACTION)
    wait_status(thread.session_id, SessionStatus.STOPPED)
    time.sleep(1.0)
    assert len(fake_gemini.requests()) == 2  # the call ran to its end; no model turn after it
    wait_for(lambda: reactions(fake_slack, thread.channel, thread.ts) == ["octagonal_sign"], what="the stop's mark")
    stopped = f":octagonal_sign: Stopped by <@{OPERATOR_ID}>. Nothing more will happen unless someone asks again."
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == stopped
    # In the order it happened: the button goes first, then the private note, then (at the boundary) the post.
    assert what_the_stop_showed(fake_slack, thread.channel, since, first["ts"]) == [
        "button off",
        "note: Stopping: the session ends after the step it is on now.",
        f"post: {stopped}",
    ]
    assert stop_buttons(fake_slack.bot_replies(thread.channel, thread.ts)[0]) == []
    # pressed again, too late, on a copy of the button still on someone's screen
    fake_slack.click(OPERATOR_ID, thread.channel, first["ts"], blocks.STOP_ACTION, value=thread.session_id)
    assert ephemeral_texts(fake_slack, thread.channel, OPERATOR_ID)[-1] == "That session has already ended."


@pytest.mark.stack
def test_stop_typed_by_an_operator_while_children_run(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> None:
    task = f"scan every bucket {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task)))
    fake_gemini.script(*(FakeGemini.matching(json.dumps({"task": task}), item)
                         for item in (G.delayed(4, G.call("read_thread")), G.text("child never said"))))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scan the buckets")
    child_id = ids.child_id(thread.session_id, 1, 0)
    wait_status(thread.session_id, SessionStatus.PAUSED)
    wait_for(lambda: any(json.dumps({"task": task}) in texts(r) for r in fake_gemini.requests()), what="the child")
    tree = fake_slack.wait_for(
        lambda: [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if stop_buttons(m)],
        timeout=60,
        what="the tree",
    )[0]
    assert stop_buttons(tree)[0]["value"] == thread.session_id

    fake_slack.user_message(OPERATOR_ID, thread.channel, "stop", thread_ts=thread.ts)
    wait_status(thread.session_id, SessionStatus.STOPPED)
    wait_status(child_id, SessionStatus.STOPPED, timeout=30)
    time.sleep(1.0)
    child_requests = [r for r in fake_gemini.requests() if json.dumps({"task": task}) in texts(r)]
    assert len(child_requests) == 1  # its slow reply came back after the stop: nothing ran after it
    assert StepKind.TOOL_RESULTS not in [s.kind for s in steps.load_steps(child_id) if s.session_id == child_id]
    wait_for(lambda: "octagonal_sign" in reactions(fake_slack, thread.channel, thread.ts), what="the stop's mark")
    assert "white_check_mark" not in reactions(fake_slack, thread.channel, thread.ts)
    # Once every task has ended, the tree's message no longer offers a Stop.
    wait_for(lambda: not stop_buttons(next(m for m in fake_slack.bot_replies(thread.channel, thread.ts)
                                           if m["ts"] == tree["ts"])), what="the tree's Stop gone")  # fmt: skip


def answered_while_a_task_runs(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, task: str
) -> tuple[Thread, str]:
    """A conversation that started ``task`` without waiting for it and answered while it runs (its model reply is
    slow): the thread and the task's id."""
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task, blocking=False)),
        FakeGemini.matching(f"[C{uid}]", G.text("A helper is scanning the buckets.")),
    )
    fake_gemini.script(*(FakeGemini.matching(json.dumps({"task": task}), item)
                         for item in (G.delayed(4, G.call("read_thread")), G.text("child never said"))))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scan the buckets")
    child_id = ids.child_id(thread.session_id, 1, 0)
    wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    wait_for(lambda: any(json.dumps({"task": task}) in texts(r) for r in fake_gemini.requests()), what="the child")
    child = session(child_id)
    assert child is not None
    assert child.status in {SessionStatus.QUEUED, SessionStatus.RUNNING}  # its slow model reply is on its way
    return thread, child_id


@pytest.mark.stack
def test_the_trees_stop_button_stops_the_tasks_still_running_after_their_conversation_answered(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the session answered while a task it did not wait for still ran; the tree's message offered Stop,
    and pressing it said "That session has already ended." and stopped nothing (the task ran on)."""
    thread, child_id = answered_while_a_task_runs(fake_slack, fake_gemini, uid, f"scan every bucket {uid}")
    tree = next(m for m in fake_slack.bot_replies(thread.channel, thread.ts) if stop_buttons(m))
    assert stop_buttons(tree)[0]["value"] == thread.session_id

    fake_slack.click(HUMAN, thread.channel, tree["ts"], blocks.STOP_ACTION)
    wait_status(child_id, SessionStatus.STOPPED, timeout=30)
    assert "That session has already ended." not in ephemeral_texts(fake_slack, thread.channel, HUMAN)
    assert session(ids.child_result_id(child_id)) is None  # a stopped task reports nothing
    wait_for(lambda: not stop_buttons(next(m for m in fake_slack.bot_replies(thread.channel, thread.ts)
                                           if m["ts"] == tree["ts"])), what="the tree's Stop gone")  # fmt: skip


@pytest.mark.stack
def test_stop_typed_after_the_conversation_answered_stops_the_tasks_still_running(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: "stop" typed in a thread whose conversation had answered, while a task it did not wait for still ran,
    found no session working there and stopped nothing."""
    task = f"scan every bucket {uid}"
    thread, child_id = answered_while_a_task_runs(fake_slack, fake_gemini, uid, task)
    fake_slack.user_message(HUMAN, thread.channel, "stop", thread_ts=thread.ts)
    wait_status(child_id, SessionStatus.STOPPED, timeout=30)
    assert session(ids.child_result_id(child_id)) is None  # a stopped task reports nothing


@pytest.mark.stack
def test_the_requester_stops_the_continuation_with_the_first_sessions_button(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The Stop button names the session that posted it; once an answer has continued that conversation, it stops
    the continuation, for the person who started it (the continuation was started by the operator's answer)."""
    script(G.call("post_update", text="Setting up"), G.call("ask_operator", question="sqlite or postgres?"))
    thread = mention(fake_slack, f"C{uid}", "set up the database")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    first = fake_slack.bot_replies(thread.channel, thread.ts)[0]
    assert stop_buttons(first)[0]["value"] == thread.session_id

    script(G.delayed(4, G.call("read_thread")), G.text("never said"))
    record = AnswerRecord(answer="postgres", answered_by=OPERATOR_ID, matched_option=None,
                          answer_ts=f"{time.time():.6f}", text="postgres")  # fmt: skip
    question = open_question(thread.session_id)
    answered = questions.answer_question(question.question_id, record, lambda q, asker: decide(record, q, asker))
    assert answered.continuation is not None
    continuation = answered.continuation.session_id
    tasks.enqueue_session(continuation)
    wait_for(lambda: len(fake_gemini.requests()) == 3, what="the continuation's model call in flight")

    fake_slack.click(HUMAN, thread.channel, first["ts"], blocks.STOP_ACTION)
    wait_status(continuation, SessionStatus.STOPPED)
    time.sleep(1.0)
    assert len(fake_gemini.requests()) == 3
    assert ephemeral_texts(fake_slack, thread.channel, HUMAN) == [
        "Stopping: the session ends after the step it is on now."
    ]


@pytest.mark.stack
def test_a_waiting_session_stopped_shows_one_message_and_its_button_goes_first(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Issue 26.5: a paused session ends at once, so its "Stopped by" is the one message; no "Stopping…" note
    follows it, and the Stop button is gone before it appears."""
    script(G.call("post_update", text="Looking"), G.call("ask_operator", question="which bucket?"))
    thread = mention(fake_slack, f"C{uid}", "clean a bucket")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    first = fake_slack.bot_replies(thread.channel, thread.ts)[0]
    assert stop_buttons(first)
    since = len(fake_slack.calls(channel=thread.channel))
    assert fake_slack.click(HUMAN, thread.channel, first["ts"], blocks.STOP_ACTION)["status"] == 200
    wait_status(thread.session_id, SessionStatus.STOPPED)
    stopped = f":octagonal_sign: Stopped by <@{HUMAN}>. Nothing more will happen unless someone asks again."
    wait_for(lambda: what_the_stop_showed(fake_slack, thread.channel, since, first["ts"]), what="the stop's messages")
    assert what_the_stop_showed(fake_slack, thread.channel, since, first["ts"]) == ["button off", f"post: {stopped}"]
    assert ephemeral_texts(fake_slack, thread.channel, HUMAN) == []
    assert stop_buttons(next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == first["ts"])) == []
    # A press on a copy of the button still on someone's screen (the fake Slack sends the value it was given):
    fake_slack.click(HUMAN, thread.channel, first["ts"], blocks.STOP_ACTION, value=thread.session_id)
    assert ephemeral_texts(fake_slack, thread.channel, HUMAN) == ["That session has already ended."]


@pytest.mark.stack
def test_stop_with_a_mention_stops_once_and_starts_nothing(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    """A "@bot stop" in a waiting session's thread arrives as two events (its message, then its app_mention twin): the
    first stops the session, and the twin, finding nothing left to stop, is no new request "stop"."""
    script(G.call("ask_operator", question="which bucket?"))
    thread = mention(fake_slack, f"C{uid}", "clean a bucket")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    sent = fake_slack.user_message(HUMAN, thread.channel, f"<@{BOT_USER_ID}> stop", thread_ts=thread.ts)
    assert sorted(d["type"] for d in sent["deliveries"]) == ["app_mention", "message"]
    assert all(d["status"] == 200 for d in sent["deliveries"]), sent
    wait_status(thread.session_id, SessionStatus.STOPPED)
    assert [sessions.get_session(ids.session_for_event(d["event_id"])) for d in sent["deliveries"]] == [None, None]
    assert sessions.active_sessions_in_thread(thread.channel, thread.ts) == []
    assert ephemeral_texts(fake_slack, thread.channel, HUMAN) == []


@pytest.mark.stack
def test_a_stop_redelivered_by_slack_says_nothing_more(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Slack's retry of a "stop" (its first answer was slow) while the session runs on to its step boundary: the
    stop is acted on once, so the requester is told "Stopping…" once, never "already ended" as well."""
    script(G.delayed(4, G.call("read_thread")), G.text("never said"))
    thread = mention(fake_slack, f"C{uid}", "think slowly")
    wait_for(lambda: len(fake_gemini.requests()) == 1, what="the model call in flight")
    sent = fake_slack.user_message(HUMAN, thread.channel, "stop", thread_ts=thread.ts)
    [delivery] = sent["deliveries"]
    assert fake_slack.redeliver(delivery["event_id"])["status"] == 200
    wait_status(thread.session_id, SessionStatus.STOPPED)
    assert ephemeral_texts(fake_slack, thread.channel, HUMAN) == [
        "Stopping: the session ends after the step it is on now."
    ]

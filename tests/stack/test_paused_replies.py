"""A person's reply in a thread whose session is paused on something it does not answer (a child's work, an
approval, an operator question its sender may not answer): kept as a note the resumed turn reads, once, and its
sender told so, once, however often Slack sends the message and whichever of its twin events comes first.

Before, such a reply was dropped: by a non-operator (or an operator's reply that decided nothing) while the session
waited on a child or an approval it was ignored without a word; a non-operator's reply to an open question was
refused and forgotten. The product runs in this process on the real Firestore emulator (``rig``: its tasks go to a
sink, each delivered by the test when it says so), the fake Slack and the fake Gemini.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from bench import cost
from infra import slack_payloads as events
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.state import approvals as stored_approvals
from shared.state import ids
from shared.state.models import ApprovalStatus, NoteKind, QuestionStatus, SessionStatus, WaitKind
from tests.agent_helpers import function_responses, open_question, texts

pytestmark = pytest.mark.stack
G = FakeGemini
STRANGER = "U0STRANGER"
REPLY = "also keep the old database around"


def last_request(rig: cost.Rig) -> dict[str, Any]:
    return [r for r in rig.gemini.requests() if rig.uid in json.dumps(r["body"])][-1]


def sent_together(rig: cost.Rig, *requests: tuple[bytes, dict[str, str]]) -> list[dict[str, Any]]:
    """Every request to the ingress at once (Slack's retry beside the first, or a message's twin events)."""
    start = threading.Barrier(len(requests))
    replies: list[dict[str, Any]] = [{} for _ in requests]

    def send(request: tuple[bytes, dict[str, str]], into: dict[str, Any]) -> None:
        start.wait()
        rig.ingress(request, into)

    threads = [threading.Thread(target=send, args=pair) for pair in zip(requests, replies, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def posted(rig: cost.Rig, session_id: str, text: str) -> str:
    """The ts of ``text`` posted in the session's thread (what a person's reply is in Slack)."""
    origin = rig.session(session_id).origin
    return str(rig.slack.chat_postMessage(channel=origin.channel, thread_ts=origin.thread_ts, text=text)["ts"])


def twins(rig: cost.Rig, session_id: str, text: str, *, user: str) -> list[tuple[bytes, dict[str, str]]]:
    """A reply that mentions the app, as Slack sends it: an app_mention and a message event of one message."""
    origin = rig.session(session_id).origin
    ts = posted(rig, session_id, f"<@{local.BOT_USER_ID}> {text}")
    mention = events.mention(channel=origin.channel, ts=ts, thread_ts=origin.thread_ts, text=text, user=user)
    message = events.message(channel=origin.channel, ts=ts, thread_ts=origin.thread_ts, user=user,
                             text=f"<@{local.BOT_USER_ID}> {text}")  # fmt: skip
    return [events.signed(e, event_id=f"Ev{rig.uid}{ts}{e['type']}") for e in (mention, message)]


def told(fake_slack: FakeSlack, rig: cost.Rig, session_id: str, user: str) -> list[str]:
    return [e["text"] for e in fake_slack.ephemerals(rig.session(session_id).origin.channel, user)]


def resumed(rig: cost.Rig, asker: str) -> str:
    """The continuation that resumes ``asker``'s paused turn."""
    return ids.resume_id(asker, rig.session(asker).waiting[0].seq)


def kept_refusals(said: list[str]) -> int:
    """How many notices ``said`` holds, each the refusal that says the message was kept (nothing else said)."""
    assert all("I have kept it" in text and "Only the operators" in text for text in said), said
    return len(said)


def paused_on_a_child(rig: cost.Rig) -> tuple[str, str]:
    """A session paused on a blocking child (queued, not delivered yet): the parent and the child."""
    task = f"check the disks [{rig.uid}]"
    parent = rig.paused("check the fleet", G.call("delegate", task=task))
    assert rig.session(parent).awaited(WaitKind.CHILD)
    return parent, ids.child_id(parent, 1, 0)


@pytest.mark.parametrize("user", [STRANGER, local.OPERATOR_ID])
def test_a_reply_while_the_session_waits_on_a_child_reaches_its_resumed_turn_once(
    rig: cost.Rig, fake_slack: FakeSlack, user: str
) -> None:
    """Defect: nothing was open to answer and nothing ran, so the reply was ignored and the resumed turn never saw
    it. Now it is a note on the paused session, carried to the continuation the child's end creates; Slack's retry
    beside the first delivery changes nothing, and the sender is told once what the session waits for."""
    parent, child = paused_on_a_child(rig)
    request = rig.reply(parent, REPLY, user=user)
    replies = sent_together(rig, request, request)
    assert sorted(str(r.get("noted") or r.get("duplicate")) for r in replies) == sorted([parent, "True"]), replies
    [note] = rig.session(parent).notes
    assert (note.kind, note.text, note.user) == (NoteKind.STEER, REPLY, user)
    assert told(fake_slack, rig, parent, user) == [
        "I am waiting for work I handed to a helper before I carry on. I have kept your message, and will read it then."
    ]
    rig.script(G.text("The disks are fine."))
    rig.deliver(child)
    rig.expect(child, SessionStatus.DONE)
    rig.expect(parent, SessionStatus.RESUMED)
    continuation = resumed(rig, parent)
    rig.script(G.text("All good, and the old database stays."))
    rig.deliver(continuation)
    rig.expect(continuation, SessionStatus.DONE)
    last = last_request(rig)
    assert texts(last).count(REPLY) == 1, texts(last)
    assert f'"from": "<@{user}>"' in texts(last)
    rig.script_used()


def test_a_strangers_reply_while_calls_await_approval_is_kept_and_an_operators_still_denies(
    rig: cost.Rig, fake_slack: FakeSlack
) -> None:
    """Defect: a reply by someone who may not decide the card was ignored without a word. Now it is kept for the
    resumed turn and its sender told so; an operator's reply still denies the call, its text the reason."""
    asker = rig.paused("scale the api", G.call("scale_service", name="api", replicas=3))
    [approval_id] = rig.session(asker).awaited(WaitKind.APPROVAL)
    replied: dict[str, Any] = {}
    rig.ingress(rig.reply(asker, REPLY, user=STRANGER), replied)
    assert replied == {"ok": True, "noted": asker}, replied
    assert [n.text for n in rig.session(asker).notes] == [REPLY]
    [said] = told(fake_slack, rig, asker, STRANGER)
    assert "an operator's decision on a call" in said
    assert stored_approvals.get_approval(approval_id).status == ApprovalStatus.PENDING  # type: ignore[union-attr]
    denied: dict[str, Any] = {}
    rig.ingress(rig.reply(asker, "not now", user=local.OPERATOR_ID), denied)
    assert denied.get("decision"), denied
    assert stored_approvals.get_approval(approval_id).status == ApprovalStatus.DENIED  # type: ignore[union-attr]
    continuation = resumed(rig, asker)
    rig.script(G.text("Not scaled, as you said."))
    rig.deliver(continuation)
    rig.expect(continuation, SessionStatus.DONE)
    last = last_request(rig)
    assert texts(last).count(REPLY) == 1, texts(last)
    [response] = function_responses(last)
    assert "not now" in json.dumps(response)
    rig.script_used()


@pytest.mark.parametrize("first", ["app_mention", "message"])
def test_a_strangers_mention_while_a_question_is_open_is_refused_and_kept_once(
    rig: cost.Rig, fake_slack: FakeSlack, first: str
) -> None:
    """Defect: a non-operator's reply to an open question was refused and dropped: the session never read what
    they said. Now it is refused as an answer and kept as a note; the mention's twin events, in either order and at
    once, make one note and one notice."""
    asker = rig.paused("set up the database", G.call("ask_operator", question="sqlite or postgres?"))
    question = open_question(asker)
    pair = twins(rig, asker, "postgres, and keep the old one", user=STRANGER)
    pair.sort(key=lambda r: json.loads(r[0])["event"]["type"] != first)
    replies = sent_together(rig, *pair)
    assert sorted(str(r.get("answer")) for r in replies) == ["duplicate", "not_allowed"], replies
    assert kept_refusals(told(fake_slack, rig, asker, STRANGER)) == 1
    [note] = rig.session(asker).notes
    assert (note.user, note.starts_session) == (STRANGER, True)
    assert open_question(asker).status == QuestionStatus.OPEN
    for request in pair:  # Slack's retries, later: acted on already
        again: dict[str, Any] = {}
        rig.ingress(request, again)
    assert len(rig.session(asker).notes) == 1
    assert kept_refusals(told(fake_slack, rig, asker, STRANGER)) == 1
    answered: dict[str, Any] = {}
    rig.ingress(rig.reply(asker, "sqlite", user=local.OPERATOR_ID), answered)
    assert answered.get("answer") == "answered", answered
    continuation = ids.resumed_by(question.question_id)
    rig.script(G.text("SQLite it is."))
    rig.deliver(continuation)
    rig.expect(continuation, SessionStatus.DONE)
    last = last_request(rig)
    assert texts(last).count("postgres, and keep the old one") == 1, texts(last)
    assert [r["response"]["result"]["answer"] for r in function_responses(last)] == ["sqlite"]
    rig.script_used()


def test_a_mention_while_the_session_waits_on_a_child_still_starts_a_session(rig: cost.Rig) -> None:
    """A mention asks the app itself: it starts a session of its own as before (its message twin is no note)."""
    parent, _child = paused_on_a_child(rig)
    replies = sent_together(rig, *twins(rig, parent, "what is the weather?", user=STRANGER))
    assert [r for r in replies if "session_id" in r], replies
    assert rig.session(parent).notes == []

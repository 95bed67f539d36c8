"""A person's reply in a thread whose session is queued, not yet running: the continuation an answer just made
takes it as a note (it never reads the thread), a queued mention reads it with the thread (no note).

The product runs in this process on the real Firestore emulator (``rig``: its tasks go to a sink, each delivered by
the test when it says so), the fake Slack and the fake Gemini.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.limits import MAX_MESSAGE_CHARS, MAX_PENDING_NOTES_CHARS
from shared.slack import blocks
from shared.state import ids
from shared.state import questions as stored
from shared.state.models import NoteKind, Question, SessionStatus
from tests.agent_helpers import function_responses, open_question, texts

pytestmark = pytest.mark.stack
G = FakeGemini
REPLY = "also keep the old database around"


def last_request(rig: cost.Rig) -> dict[str, Any]:
    """The model's latest request of this rig's conversations."""
    return [r for r in rig.gemini.requests() if rig.uid in json.dumps(r["body"])][-1]


def sent_together(rig: cost.Rig, request: tuple[bytes, dict[str, str]], copies: int) -> list[dict[str, Any]]:
    """``copies`` deliveries of one Slack event to the ingress at once (Slack's retry beside the first)."""
    start = threading.Barrier(copies)
    replies: list[dict[str, Any]] = [{} for _ in range(copies)]

    def send(into: dict[str, Any]) -> None:
        start.wait()
        rig.ingress(request, into)

    threads = [threading.Thread(target=send, args=(into,)) for into in replies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def answered_and_queued(rig: cost.Rig) -> tuple[str, str]:
    """A session paused on a question that an operator's press has just answered: the asker, and the continuation
    that press queued (its task not delivered yet)."""
    asker = rig.paused("set up the database", G.call("ask_operator", question="sqlite or postgres?",
                                                     options=["sqlite", "postgres"]))  # fmt: skip
    question = open_question(asker)
    pressed: dict[str, Any] = {}
    rig.interactivity(rig.answer_press(question), pressed)
    continuation = ids.resumed_by(question.question_id)
    rig.expect(continuation, SessionStatus.QUEUED)
    return asker, continuation


@pytest.mark.parametrize("copies", [1, 2])
def test_a_reply_while_the_answers_continuation_is_queued_reaches_its_first_turn_once(
    rig: cost.Rig, copies: int
) -> None:
    """Defect: the reply found no open question (answered) and no running session (the continuation was queued,
    its task not yet delivered): ignored, and the continuation, which reads no thread, never saw it. Now it is a note
    to the queued continuation, read at its first turn with the answer, once, even if Slack sends it twice at once."""
    asker, continuation = answered_and_queued(rig)
    rig.expect(asker, SessionStatus.RESUMED)
    replies = sent_together(rig, rig.reply(asker, REPLY, user="U0HUMAN"), copies)
    noted = [r for r in replies if "noted" in r]
    assert [r["noted"] for r in noted] == [continuation], replies
    assert all(r.get("duplicate") for r in replies if r not in noted), replies
    [note] = rig.session(continuation).notes
    assert (note.kind, note.text) == (NoteKind.STEER, REPLY)
    rig.script(G.text("Postgres, and the old one stays."))
    rig.deliver(continuation)
    rig.expect(continuation, SessionStatus.DONE)
    first = last_request(rig)
    assert [r["response"]["result"]["answer"] for r in function_responses(first)] == ["postgres"]
    assert texts(first).count(REPLY) == 1, texts(first)
    assert rig.session(continuation).notes == []
    rig.script_used()


def test_a_reply_while_a_mention_is_queued_reaches_its_first_turn_once(rig: cost.Rig) -> None:
    """A queued mention reads its thread as it opens: a reply meanwhile is there, so it is no note as well (the
    model would read it twice)."""
    session_id = rig.start("set up the database")
    replied: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, REPLY, user="U0HUMAN"), replied)
    assert "noted" not in replied, replied
    assert rig.session(session_id).notes == []
    rig.script(G.text("Done."))
    rig.deliver(session_id)
    rig.expect(session_id, SessionStatus.DONE)
    assert texts(last_request(rig)).count(REPLY) == 1, texts(last_request(rig))
    rig.script_used()


def press(rig: cost.Rig, question: Question, option: int) -> None:
    """The operator's press of ``question``'s option ``option`` (posted)."""
    value = blocks.question_value(question.question_id, option)
    pressed: dict[str, Any] = {}
    rig.interactivity(rig.press(question.channel, question.post_ts or "", question.thread_ts,
                                action_id=f"answer_{option}", value=value), pressed)  # fmt: skip


def test_a_reply_noted_for_a_late_answers_continuation_goes_with_its_hand_over(rig: cost.Rig) -> None:
    """A continuation of a late answer (its asker had ended) whose transcript another session writes by the time it
    is claimed hands its answer over to that session and ends without running: the reply noted for it while it was
    queued goes over with it, and the writer's continuation reads both, the reply once."""
    asker = rig.start("ship the ui")
    rig.script(G.calls(("ask_operator", {"question": "Dark mode?", "options": ["yes", "no"], "blocking": False}),
                       ("ask_operator", {"question": "Big font?", "options": ["yes", "no"], "blocking": False})),
               G.text("Shipped."))  # fmt: skip
    rig.deliver(asker)
    rig.expect(asker, SessionStatus.DONE)
    origin = rig.session(asker).origin
    asked = stored.thread_questions(origin.channel, origin.thread_ts).open
    assert sorted(q.text for q in asked) == ["Big font?", "Dark mode?"]
    for question in asked:
        press(rig, question, 1)
    late = {ids.continuation_id(q.question_id) for q in asked}
    for continuation in late:
        rig.expect(continuation, SessionStatus.QUEUED)
    replied: dict[str, Any] = {}
    rig.ingress(rig.reply(asker, REPLY, user="U0HUMAN"), replied)
    noted = str(replied["noted"])
    [writer] = late - {noted}
    rig.script(G.call("ask_operator", question="Which release?", options=["1.9", "2.0"]))
    rig.deliver(writer)  # it takes the transcript over and pauses on a question of its own
    rig.expect(writer, SessionStatus.PAUSED)
    rig.deliver(noted)  # its answer and the reply go to the paused writer
    rig.expect(noted, SessionStatus.RESUMED)
    assert sorted(n.text for n in rig.session(writer).notes if n.kind == NoteKind.STEER) == [REPLY]
    release = open_question(writer)
    rig.script(G.text("Shipping 2.0."))
    press(rig, release, 2)
    resumed = ids.resumed_by(release.question_id)
    rig.deliver(resumed)
    rig.expect(resumed, SessionStatus.DONE)
    assert texts(last_request(rig)).count(REPLY) == 1, texts(last_request(rig))
    rig.script_used()


def test_replies_past_what_a_session_may_hold_unread_are_not_passed_on_and_it_is_said_once(
    rig: cost.Rig, fake_slack: FakeSlack
) -> None:
    """Defect: every reply while a session worked was appended to its document, with no bound on what it held
    unread, and read in one step: a thread flooded with long messages made that step (and the document) larger
    than Firestore takes, and the session failed at every attempt. Now a reply past ``MAX_PENDING_NOTES_CHARS``
    unread is not passed on; its sender is told, once (its twin event and Slack's retry change nothing), and the
    session reads what it holds."""
    asker, continuation = answered_and_queued(rig)
    long = "x" * MAX_MESSAGE_CHARS
    fits = MAX_PENDING_NOTES_CHARS // MAX_MESSAGE_CHARS
    for n in range(fits):
        replied: dict[str, Any] = {}
        rig.ingress(rig.reply(asker, f"{n} {long}"[:MAX_MESSAGE_CHARS], user="U0HUMAN"), replied)
        assert replied.get("noted") == continuation, replied
    over = rig.reply(asker, "one more", user="U0HUMAN")
    replies = sent_together(rig, over, 2)  # Slack's retry beside the first
    assert sorted(str(r.get("refused") or r.get("duplicate")) for r in replies) == ["True", "too much unread"]
    assert len(rig.session(continuation).notes) == fits
    channel = rig.session(asker).origin.channel
    told = [e for e in fake_slack.ephemerals(channel, "U0HUMAN") if "was not passed on" in e["text"]]
    assert len(told) == 1
    rig.script(G.text("Postgres, and I read your notes."))
    rig.deliver(continuation)
    rig.expect(continuation, SessionStatus.DONE)
    assert "one more" not in texts(last_request(rig))

"""What a failed session asked and left open is closed (round 3, session 17): a question it went on working past, or
a turn's question and approval cards whose pause never came (a crash given up). Before, they stayed open with live
buttons and 💬 after the thread was told "Nothing more will happen on its own"; an answer then started a continuation
of the failed session, and an Approve was refused while its card kept offering Approve. Now the failure closes them,
their posts say so without buttons; an answer or a decision that reaches one anyway (its close cut off, or racing
the failure) is refused with a private note and closes what is left, and no continuation or task is made.

On the real stack (Firestore emulator, fake Slack, fake Gemini), deliveries made in-process as Cloud Tasks makes them.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from bench import cost
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.agent.pausing import Pauses
from shared.asks import answers, stopping
from shared.asks import approvals as asking_approvals
from shared.handlers import agent_session, slack_interactivity
from shared.state import approvals as stored_approvals
from shared.state import firestore, ids, sessions
from shared.state import questions as stored_questions
from shared.state.models import ApprovalStatus, Question, QuestionStatus, SessionStatus
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack
G = FakeGemini
OPERATOR = local.OPERATOR_ID


def _delivery(session_id: str, attempt: int) -> int:
    """One delivery of the session's task, ``attempt`` its retry count (2: its last, a crash there gives it up)."""
    headers = {"x-cloudtasks-taskname": f"t-{session_id}", "x-cloudtasks-taskretrycount": str(attempt)}
    _, status = agent_session.handle(json.dumps({"session_id": session_id}).encode(), headers)
    return status


def _post(fake_slack: FakeSlack, channel: str, ts: str | None) -> dict[str, Any]:
    return next(m for m in fake_slack.messages(channel) if m["ts"] == ts)


def _buttons(post: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in post.get("blocks") or [] if b.get("type") == "actions" for e in b["elements"]]


def _asked_on_the_side(rig: cost.Rig, then: dict[str, Any]) -> str:
    """A session (queued) that will ask a non-blocking question with options and work on; its next model request
    gets ``then``."""
    session_id = rig.start("pick a colour and paint")
    rig.script(G.call("ask_operator", question="Colour?", options=["red", "blue"], blocking=False), then)
    return session_id


def _found(session_id: str) -> Question:
    """The session's question (its first turn's first call)."""
    found = stored_questions.get_question(ids.question_id(session_id, 1, 0))
    assert found is not None
    return found


def _press(rig: cost.Rig, question: Question) -> dict[str, Any]:
    reply, status = slack_interactivity.handle(*rig.answer_press(question))
    assert status == 200, reply
    return dict(reply)


def _assert_refused(session_id: str, fake_slack: FakeSlack, question: Question, reply: dict[str, Any]) -> None:
    """The press changed nothing: the question is closed, not answered; no continuation; the presser told privately;
    its post shows no buttons and no 💬."""
    found = _found(session_id)
    assert found.status == QuestionStatus.CANCELLED, found.status
    assert reply["answer"] == "not_open"
    assert sessions.get_session(ids.continuation_id(question.question_id)) is None
    told = [e["text"] for e in fake_slack.ephemerals(question.channel, OPERATOR)]
    assert told
    assert "cancelled" in told[-1] or told[-1] == answers.UNWAITED, told
    post = _post(fake_slack, question.channel, question.post_ts)
    assert _buttons(post) == []
    assert stopping.FAILED in post["text"]
    assert "speech_balloon" not in fake_slack.reactions(question.channel, question.post_ts or "")


@pytest.mark.timeout(300)
def test_a_failed_sessions_non_blocking_question_is_closed_and_a_later_press_changes_nothing(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack
) -> None:
    """Defect: the model failed after a non-blocking question; the question stayed open with its buttons and 💬, and
    a press started a continuation of the failed session."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        session_id = _asked_on_the_side(rig, G.error(503, "UNAVAILABLE", "overloaded", times=9))
        rig.deliver(session_id)
        rig.expect(session_id, SessionStatus.FAILED)
        question = _found(session_id)
        assert question.status == QuestionStatus.CANCELLED
        queued = len(rig.created_tasks.order)
        _assert_refused(session_id, fake_slack, question, _press(rig, question))
        assert rig.created_tasks.order[queued:] == []
        rig.gemini.reset()


@pytest.mark.timeout(300)
def test_a_press_on_a_failed_sessions_question_left_open_is_refused_and_closes_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack
) -> None:
    """The failure's close cut off (Slack refused, the process killed): the question is still open when the operator
    presses. Defect: the press started a continuation of the failed session. Now it is refused (a private note, no
    continuation, no task) and closes the question, its post without buttons."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        monkeypatch.setattr(stopping, "close_failed", lambda session: [], raising=False)
        session_id = _asked_on_the_side(rig, G.error(503, "UNAVAILABLE", "overloaded", times=9))
        rig.deliver(session_id)
        rig.expect(session_id, SessionStatus.FAILED)
        question = _found(session_id)
        assert question.status == QuestionStatus.OPEN  # left open by the cut-off close
        monkeypatch.undo()
        queued = len(rig.created_tasks.order)
        reply = _press(rig, question)
        _assert_refused(session_id, fake_slack, question, reply)
        assert [e["text"] for e in fake_slack.ephemerals(question.channel, OPERATOR)][-1] == answers.UNWAITED
        assert rig.created_tasks.order[queued:] == []
        rig.gemini.reset()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("closed_by_failure", [True, False], ids=["closed by the failure", "close cut off"])
def test_an_approval_card_of_a_turn_given_up_before_its_pause_is_closed(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack, closed_by_failure: bool
) -> None:
    """A turn's approval card was posted, then its pause crashed on every attempt: the session was given up (failed).
    Defect: the card stayed pending with live Approve/Deny buttons; an Approve was refused privately and left it so.
    Now the failure (or, its close cut off, that refused Approve) expires the approval, its card says why without
    buttons; the Approve runs nothing and queues nothing."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        session_id = rig.start("scale the api")
        rig.script(G.call("scale_service", name="api", replicas=3), G.text("unused"))

        def crash(*args: Any, **kwargs: Any) -> bool:
            raise RuntimeError("killed as it paused")

        monkeypatch.setattr(Pauses, "pause_on_record", crash)
        if not closed_by_failure:
            monkeypatch.setattr(stopping, "close_failed", lambda session: [], raising=False)
        assert _delivery(session_id, 0) == 500
        assert _delivery(session_id, 2) == 200  # its last attempt crashes too: given up
        monkeypatch.undo()
        rig.expect(session_id, SessionStatus.FAILED)
        approval = stored_approvals.get_approval(ids.approval_id(session_id, 1, 0))
        assert approval is not None
        assert approval.card_ts
        assert approval.status == (ApprovalStatus.EXPIRED if closed_by_failure else ApprovalStatus.PENDING)
        queued = len(rig.created_tasks.order)
        thread_ts = rig.session(session_id).origin.thread_ts
        reply, status = slack_interactivity.handle(*rig.approve_press(approval, thread_ts))
        assert status == 200, reply
        after = stored_approvals.get_approval(approval.approval_id)
        assert after is not None
        assert after.status == ApprovalStatus.EXPIRED
        card = _post(fake_slack, approval.channel, approval.card_ts)
        assert _buttons(card) == []
        assert stopping.FAILED in card["text"]
        assert asking_approvals.running_verdict(after) not in card["text"]
        assert rig.created_tasks.order[queued:] == []
        assert sessions.get_session(ids.resume_id(session_id, 1)) is None
        rig.gemini.reset()


@pytest.mark.timeout(300)
def test_a_press_racing_the_failure_has_exactly_one_outcome(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack
) -> None:
    """The operator presses while the session is being given up (its last attempt crashing), on parallel threads.
    Whichever wins, exactly one outcome holds: the answer was taken while it still ran (a note, the question
    answered; unread when it failed, it resumes in the question's continuation, as before) or the failure closed the
    question and the press was refused (no continuation); never a question left open, never live buttons."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        session_id = _asked_on_the_side(rig, G.error(400, "INVALID_ARGUMENT", "no such thing", times=9))
        assert _delivery(session_id, 0) == 500  # its reply cannot be read as a turn: a crash, retried
        question = _found(session_id)
        assert question.status == QuestionStatus.OPEN
        start = threading.Barrier(2)
        results: dict[str, Any] = {}

        def give_up() -> None:
            start.wait()
            results["delivery"] = _delivery(session_id, 2)

        def press() -> None:
            start.wait()
            results["press"] = slack_interactivity.handle(*rig.answer_press(question))

        threads = [threading.Thread(target=give_up), threading.Thread(target=press)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert results["delivery"] == 200
        reply, status = results["press"]
        assert status == 200, reply
        rig.expect(session_id, SessionStatus.FAILED)
        found = _found(session_id)
        post = _post(fake_slack, question.channel, question.post_ts)
        assert _buttons(post) == []
        assert "speech_balloon" not in fake_slack.reactions(question.channel, question.post_ts or "")
        if reply["answer"] == "noted":  # the answer won: the running session had it as a note
            assert found.status == QuestionStatus.ANSWERED
            # (read by its last turn, or else resumed in the question's continuation: ``followup.start_for_unread``)
        else:  # the failure won: the press was refused, the question closed, nothing started
            assert reply["answer"] == "not_open", reply
            assert found.status == QuestionStatus.CANCELLED
            assert stopping.FAILED in post["text"]
            assert sessions.get_session(ids.continuation_id(question.question_id)) is None
        rig.gemini.reset()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("end", ["stopped", "failed"])
def test_a_question_an_earlier_session_of_the_conversation_asked_is_closed_when_the_conversation_ends(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack, end: str
) -> None:
    """A conversation asked a non-blocking question, then paused on a blocking one; the answer's continuation is
    stopped, or fails. Defect: the end closed only the questions the continuation itself asked; the earlier one kept
    its buttons and 💬, and a press on it started another continuation of the ended conversation."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        first = rig.paused(
            "format and deploy",
            G.call("ask_operator", question="Tabs?", options=["yes", "no"], blocking=False),
            G.call("ask_operator", question="Deploy now?", options=["yes", "no"]),
        )
        origin = rig.session(first).origin
        [deploy, tabs] = stored_questions.thread_questions(origin.channel, origin.thread_ts).open  # newest first
        assert (tabs.blocking, deploy.blocking) == (False, True)
        reply: dict[str, Any] = {}
        rig.interactivity(rig.answer_press(deploy), reply)
        resumed = ids.resumed_by(deploy.question_id)
        if end == "stopped":
            rig.script(G.call("ask_operator", question="Which region?", options=["eu", "us"]))
            rig.deliver(resumed)
            rig.expect(resumed, SessionStatus.PAUSED)
            stopping.stop(resumed, by=f"<@{OPERATOR}>")
        else:
            rig.script(G.error(503, "UNAVAILABLE", "overloaded", times=9))
            rig.deliver(resumed)
        rig.expect(resumed, SessionStatus(end))
        closed = stored_questions.get_question(tabs.question_id)
        assert closed is not None
        assert closed.status == QuestionStatus.CANCELLED
        post = _post(fake_slack, tabs.channel, tabs.post_ts)
        assert _buttons(post) == []
        assert "speech_balloon" not in fake_slack.reactions(tabs.channel, tabs.post_ts or "")
        queued = len(rig.created_tasks.order)
        assert _press(rig, tabs)["answer"] == "not_open"
        assert sessions.get_session(ids.continuation_id(tabs.question_id)) is None
        assert rig.created_tasks.order[queued:] == []
        rig.gemini.reset()


@pytest.mark.timeout(300)
def test_a_non_blocking_question_of_a_conversation_the_sweep_abandons_is_closed_with_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack
) -> None:
    """A conversation asked a non-blocking question, then paused on a blocking one that nobody answered: the sweep
    abandons it and tells the thread to mention it again. Defect: the non-blocking question kept its buttons and 💬,
    and a press on it resumed the abandoned conversation (a continuation ran and answered). Now the abandon closes it
    and the press changes nothing."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        first = rig.paused(
            "format and deploy",
            G.call("ask_operator", question="Tabs?", options=["yes", "no"], blocking=False),
            G.call("ask_operator", question="Deploy now?", options=["yes", "no"]),
        )
        origin = rig.session(first).origin
        [deploy, tabs] = stored_questions.thread_questions(origin.channel, origin.thread_ts).open  # newest first
        asked = firestore.now() - timedelta(hours=73)
        firestore.db().collection(firestore.QUESTIONS).document(deploy.question_id).update({"asked_at": asked})
        assert rig.sweep(firestore.now())["abandoned"] == 1
        rig.expect(first, SessionStatus.ABANDONED)
        closed = stored_questions.get_question(tabs.question_id)
        assert closed is not None
        assert closed.status == QuestionStatus.CANCELLED
        post = _post(fake_slack, tabs.channel, tabs.post_ts)
        assert _buttons(post) == []
        assert "speech_balloon" not in fake_slack.reactions(tabs.channel, tabs.post_ts or "")
        queued = len(rig.created_tasks.order)
        assert _press(rig, tabs)["answer"] == "not_open"
        assert sessions.get_session(ids.continuation_id(tabs.question_id)) is None
        assert rig.created_tasks.order[queued:] == []


@pytest.mark.timeout(300)
def test_an_approve_noted_for_a_turn_that_then_fails_says_its_call_did_not_run(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, fake_slack: FakeSlack
) -> None:
    """The card was posted, the pause crashed, and the operator approved while the session waited for its retry (still
    running: the decision is noted for its pause); the retry crashed too and the session was given up. Defect: the
    card said "approved; running it now" for ever while nothing ran. Now it says the call did not run."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        session_id = rig.start("scale the api")
        rig.script(G.call("scale_service", name="api", replicas=3), G.text("unused"))

        def crash(*args: Any, **kwargs: Any) -> bool:
            raise RuntimeError("killed as it paused")

        monkeypatch.setattr(Pauses, "pause_on_record", crash)
        assert _delivery(session_id, 0) == 500
        rig.expect(session_id, SessionStatus.RUNNING)
        approval = stored_approvals.get_approval(ids.approval_id(session_id, 1, 0))
        assert approval is not None
        thread_ts = rig.session(session_id).origin.thread_ts
        reply, status = slack_interactivity.handle(*rig.approve_press(approval, thread_ts))
        assert status == 200, reply
        assert "running it now" in _post(fake_slack, approval.channel, approval.card_ts)["text"]
        assert _delivery(session_id, 2) == 200  # its last attempt crashes too: given up
        monkeypatch.undo()
        rig.expect(session_id, SessionStatus.FAILED)
        card = _post(fake_slack, approval.channel, approval.card_ts)
        assert "running it now" not in card["text"]
        assert f"not run: {stopping.FAILED}" in card["text"]
        assert _buttons(card) == []
        assert sessions.get_session(ids.resume_id(session_id, 1)) is None
        rig.gemini.reset()

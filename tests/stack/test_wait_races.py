"""Resolutions racing the end of the turn they resolve (round 3, flow 14): an operator's answer or decision that
arrives while the session waiting on it is being stopped (a person's Stop) or abandoned (the sweep), a resolution
delivered both as a button press and as a text reply, and a turn that waits on several kinds of thing at once
(questions, twin approve-tier calls, a child) whose last resolutions land together. Whatever the order, a turn
resumes at most once, a stopped or abandoned turn never resumes, and no call runs twice. And the ends themselves:
a newer question that cancels a question of a turn still running ends it when it pauses, an answer to the other
question of a turn being ended is refused truthfully, what a Stop killed part way left open is closed by what comes
next, and a Stop racing the sweep's abandon tells the thread once.

On the real stack: the fake Slack delivers the presses and replies to the functions (in threads released together
where the test says so), the resuming task is delivered as Cloud Tasks may (twice at once, retried on non-2xx), and
the end being raced is run here, in the test process, with the answer arriving inside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest

from bench import cost
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import lifecycle, questions, stopping
from shared.slack import blocks
from shared.slack.surface import Reaction
from shared.state import approvals as stored_approvals
from shared.state import firestore, ids, sessions, steps
from shared.state import questions as stored_questions
from shared.state.models import Approval, ApprovalStatus, QuestionStatus, SessionStatus, StepKind
from shared.state.session_model import Session
from tests import delivery
from tests.agent_helpers import Thread, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import executions, press
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import for_child, requests_for
from tests.stack.test_queued_replies import answered_and_queued
from tests.stack.test_twin_calls import (
    OPERATOR2,
    at_once,
    carded,
    pick,
    replied_once,
    resumed_once,
    twin_questions,
)

pytestmark = pytest.mark.stack
OPERATOR = local.OPERATOR_ID
G = FakeGemini


def test_an_answer_that_arrives_while_its_session_is_being_stopped_resumes_nothing(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Stop marks the paused session stopped, then cancels its questions. An operator's press on one of its
    questions in between (the question still open, its session stopped) must not resume the stopped turn."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    pressed: list[dict[str, Any]] = []
    real = stopping._close_paused

    def answered_first(found: Session, *, by: str) -> None:
        if found.session_id == thread.session_id and not pressed:
            pressed.append(pick(fake_slack, thread, asked[1], 1))  # handled by the stack's own function
        real(found, by=by)

    monkeypatch.setattr(stopping, "_close_paused", answered_first)
    assert stopping.stop(thread.session_id, by=f"<@{OPERATOR}>") == [thread.session_id]
    assert [p["status"] for p in pressed] == [200]
    stopped = sessions.get_session(thread.session_id)
    assert stopped is not None
    assert stopped.status == SessionStatus.STOPPED
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []  # nothing resumes the stopped turn
    found = [stored_questions.get_question(q) for q in asked]
    assert [q.status if q else None for q in found] == [QuestionStatus.CANCELLED, QuestionStatus.CANCELLED]
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this question any more" in text for text in told), told


@pytest.mark.parametrize("arrives", ["before its end", "after its end"])
def test_an_answer_that_arrives_while_the_sweep_abandons_its_twin_resumes_nothing(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch,
    arrives: str,
) -> None:  # fmt: skip
    """The sweep abandons the first of two twin questions (closed first), ends the session paused on them, then
    cancels the rest of its turn. An operator's press on the second in between (before the session's end: it is
    still paused; or after it: it is abandoned, the question still open) must not resume the turn the sweep is
    ending (the thread is told the session stopped waiting): the session ends abandoned, nothing resumes it, the
    model is never called again."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    first = stored_questions.get_question(asked[0])
    assert first is not None
    pressed: list[dict[str, Any]] = []
    owner, name = (sessions, "end_session") if arrives == "before its end" else (questions, "_end_waits")
    real = getattr(owner, name)

    def answered_first(ended: Any, *args: Any, **kwargs: Any) -> Any:
        if not pressed:
            pressed.append(pick(fake_slack, thread, asked[1], 2))  # handled by the stack's own function
        return real(ended, *args, **kwargs)

    monkeypatch.setattr(owner, name, answered_first)
    assert questions.abandon(first, firestore.now() + timedelta(hours=500))
    assert [p["status"] for p in pressed] == [200]
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []  # nothing resumes the abandoned turn
    ended = sessions.get_session(thread.session_id)
    assert ended is not None
    assert ended.status == SessionStatus.ABANDONED
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []
    assert len(notices(fake_slack, thread)) == 1, fake_slack.messages(thread.channel, thread.ts)


def test_a_refused_answer_between_the_sweeps_close_and_its_end_leaves_one_notice(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (a reviewer's): the sweep's abandon closes the first of two twin questions, then ends the session; an
    answer to the second landing between the two is refused, and its ``close_unwaited`` ends the session and shows
    the abandoned question; the sweep's end then finds the session ended and showed it too: "Nobody answered"
    twice. Now the notice is claimed once (``shared.asks.notices``): the sweep's abandon claims it as it closes the
    question (so a sweep killed after the end still owes it), the refused answer's show finds it claimed, and the
    sweep posts it as it goes on. The sweep runs in a thread of its own, held in the window while the stack's
    function handles the answer."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    first = wait_for(partial(posted_question, asked[0]), timeout=60, what="the question's post")
    closed, go_on = threading.Event(), threading.Event()
    real = sessions.end_session

    def held(*args: Any, **kwargs: Any) -> Any:
        closed.set()  # the question is closed; the session not ended yet
        assert go_on.wait(120)
        return real(*args, **kwargs)

    monkeypatch.setattr(sessions, "end_session", held)
    outcome: list[bool] = []
    sweep = threading.Thread(target=lambda: outcome.append(questions.abandon(first, firestore.now() + timedelta(
        hours=500))))  # fmt: skip
    sweep.start()
    try:
        assert closed.wait(60)
        assert pick(fake_slack, thread, asked[1], 1)["status"] == 200  # handled by the stack's own function
        wait_status(thread.session_id, SessionStatus.ABANDONED, timeout=60)  # ended by the refused answer
    finally:
        go_on.set()
        sweep.join(120)
    assert outcome == [True]
    wait_for(lambda: notices(fake_slack, thread), timeout=60, what="the notice")
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this question any more" in text for text in told), told
    assert len(notices(fake_slack, thread)) == 1, fake_slack.messages(thread.channel, thread.ts)


def notices(fake_slack: FakeSlack, thread: Thread) -> list[str]:
    """The thread's "Nobody answered" notices."""
    return [m["text"] for m in fake_slack.messages(thread.channel, thread.ts) if "Nobody answered" in m["text"]]


ASK = ("ask_operator", {"question": "Which zone?", "options": ["north", "south"]})
TWIN = ("scale_service", {"name": "api", "replicas": 3})
RAN = {"scaled": "api", "replicas": 3}
ORDERS = {
    "child-deny-q1-then-q0-and-approve": (("child", "deny", "q1"), ("q0", "approve")),
    "q0-approve-q1-then-child-and-deny": (("q0", "approve", "q1"), ("child", "deny")),
}


@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
@pytest.mark.timeout(360)  # a parent, a child, five resolutions and parallel deliveries on a busy machine
def test_twin_questions_twin_approvals_and_a_child_in_one_turn_resume_it_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, order: str
) -> None:
    """One model turn (no call ids) asks the same question twice, makes the same approve-tier call twice and
    delegates: five waits of three kinds. They are resolved in ``order``, the last two at the same moment, and the
    resuming task is delivered twice at once: one resumed turn, each response at its own call's position in call
    order, the approved twin run once under its own key, the denied one never, one final reply."""
    task = f"resize the workers {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ASK, ASK, TWIN, TWIN, ("delegate", {"task": task}))),
                       FakeGemini.matching(f"[C{uid}]", G.text("All five are done.")))  # fmt: skip
    for_child(fake_gemini, task, idless(("scale_service", {"name": "workers", "replicas": 4})),
              G.text("The workers run 4 replicas."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick two zones and scale")
    parent = thread.session_id
    paused = wait_status(parent, SessionStatus.PAUSED, timeout=60)
    kinds = ["question", "question", "approval", "approval", "child"]
    assert [(w.index, w.kind.value) for w in paused.waiting] == list(enumerate(kinds))
    child_id = ids.child_id(parent, 1, 4)
    wait_status(child_id, SessionStatus.PAUSED, timeout=60)  # on its own card: it ends when the test presses it
    asked = [ids.question_id(parent, 1, n) for n in (0, 1)]
    cards = {n: wait_for(partial(carded, ids.approval_id(parent, 1, n)), timeout=30, what="a card") for n in (2, 3)}
    child_card = wait_for(partial(carded, ids.approval_id(child_id, 1, 0)), timeout=30, what="the child's card")
    actions: dict[str, Callable[[], dict[str, Any]]] = {
        "q0": lambda: pick(fake_slack, thread, asked[0], 1),
        "q1": lambda: pick(fake_slack, thread, asked[1], 2),
        "approve": lambda: press(fake_slack, cards[2], blocks.APPROVE_ACTION),
        "deny": lambda: press(fake_slack, cards[3], blocks.DENY_ACTION, user=OPERATOR2),
        "child": lambda: press(fake_slack, child_card, blocks.APPROVE_ACTION, user=OPERATOR2),
    }
    resumed = ids.resume_id(parent, 1)
    first, together = ORDERS[order]
    for step in first:
        assert actions[step]()["status"] == 200
        if step == "child":
            wait_status(child_id, SessionStatus.DONE, timeout=60)
        assert sessions.get_session(resumed) is None  # something is still waited on
    assert [c["status"] for c in at_once(*(actions[step] for step in together))] == [200, 200]
    wait_for(lambda: sessions.get_session(resumed), timeout=90, what="the resuming continuation")
    attempts = delivery.deliver(stack.function_url("agent_session"), resumed, task="resume", copies=2)
    assert delivery.settled(attempts, 2), attempts
    wait_status(resumed, SessionStatus.DONE, timeout=90)
    responses = resumed_once(fake_gemini, thread, 5)
    assert [r["name"] for r in responses] == ["ask_operator"] * 2 + ["scale_service"] * 2 + ["delegate"]
    assert [r["response"]["result"]["answer"] for r in responses[:2]] == ["north", "south"]
    assert responses[2]["response"] == {"result": RAN}
    assert f"denied by <@{OPERATOR2}>" in responses[3]["response"]["error"]
    assert responses[4]["response"] == {"result": "The workers run 4 replicas."}
    assert all("id" not in r for r in responses)
    assert [e["key"] for e in executions(parent)] == [ids.call_key(parent, 1, 2)]  # the approved twin, once
    assert [e["replicas"] for e in executions(child_id)] == [4]
    replied_once(fake_slack, thread, "All five are done.")


def test_a_press_and_a_text_reply_of_the_same_answer_at_once_resolve_each_wait_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A turn (no ids) waits on a question and an approve-tier call. The operator presses "south" and types "south"
    at the same moment: the question is answered once, with "south"; the reply either lost that race (told so) or,
    read after the answer, denied the pending call (its text the reason), never both; the card, if still pending,
    is approved. The turn resumes once, each call's response at its position; the call runs at most once."""
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ASK, TWIN)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Handled.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scale the api in a zone")
    parent = thread.session_id
    wait_status(parent, SessionStatus.PAUSED, timeout=60)
    question_id = ids.question_id(parent, 1, 0)
    card = wait_for(partial(carded, ids.approval_id(parent, 1, 1)), timeout=30, what="the card")
    pressed, replied = at_once(
        lambda: pick(fake_slack, thread, question_id, 2),
        lambda: fake_slack.user_message(OPERATOR, thread.channel, "south", thread_ts=thread.ts),
    )
    assert pressed["status"] == 200
    assert all(d["status"] == 200 for d in replied["deliveries"]), replied
    answered = stored_questions.get_question(question_id)
    assert answered is not None
    assert answered.status == QuestionStatus.ANSWERED
    assert answered.answer == "south"
    decided = stored_approvals.get_approval(card.approval_id)
    assert decided is not None
    if decided.status == ApprovalStatus.PENDING:  # the reply lost the answer's race: told so, nothing denied
        told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
        assert any("already answered" in text for text in told), told
        assert press(fake_slack, card, blocks.APPROVE_ACTION)["status"] == 200
    else:
        assert decided.status == ApprovalStatus.DENIED
        assert decided.reason == "south"
    resumed = ids.resume_id(parent, 1)
    wait_status(resumed, SessionStatus.DONE, timeout=90)
    responses = resumed_once(fake_gemini, thread, 2)
    assert responses[0]["response"]["result"]["answer"] == "south"
    if decided.status == ApprovalStatus.PENDING:
        assert responses[1]["response"] == {"result": RAN}
        assert [e["key"] for e in executions(parent)] == [ids.call_key(parent, 1, 1)]
    else:
        assert "denied by" in responses[1]["response"]["error"]
        assert executions(parent) == []
    replied_once(fake_slack, thread, "Handled.")


def test_a_stop_and_the_last_answer_at_the_same_moment_resume_the_turn_at_most_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The turn waits on twin questions; one is answered; then "stop" is typed and the other answer pressed at the
    same moment. Either the stop wins (the press is refused, nothing resumes) or the answer does (its continuation
    is stopped, or finishes the step it is on): the turn is resumed at most once, the model is called at most once
    with its responses, and the thread says "Stopped by" once if a session was stopped (none if the continuation
    ended first: the stop finds nothing to stop)."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    assert pick(fake_slack, thread, asked[0], 1)["status"] == 200
    stopped, pressed = at_once(
        lambda: fake_slack.user_message(OPERATOR, thread.channel, "stop", thread_ts=thread.ts),
        lambda: pick(fake_slack, thread, asked[1], 2),
    )
    assert all(d["status"] == 200 for d in stopped["deliveries"]), stopped
    assert pressed["status"] == 200
    resumed = ids.resume_id(thread.session_id, 1)
    first = wait_status(thread.session_id, SessionStatus.STOPPED, SessionStatus.RESUMED, timeout=60)
    stopped_one = first
    if first.status == SessionStatus.RESUMED:  # the answer won: the stop stops its continuation (or it finishes)
        stopped_one = wait_status(resumed, SessionStatus.STOPPED, SessionStatus.DONE, timeout=90)
    else:
        assert sessions.get_session(resumed) is None
    calls = [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)]
    assert len(calls) <= 1
    assert len([s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]) <= 1
    posts = [m for m in fake_slack.messages(thread.channel, thread.ts) if "Stopped by" in str(m.get("text"))]
    assert len(posts) == (1 if stopped_one.status == SessionStatus.STOPPED else 0)  # none if it ended first


def test_a_stop_of_the_continuation_an_answer_just_queued_tells_the_thread_once(rig: cost.Rig) -> None:
    """An answer resumed the turn; its continuation is queued, its task not delivered yet, when "stop" is typed: the
    continuation ends at once (it never runs), and the thread says "Stopped by" once, as for a paused session."""
    asker, continuation = answered_and_queued(rig)
    stopped: dict[str, Any] = {}
    rig.ingress(rig.reply(asker, "stop"), stopped)
    assert stopped == {"ok": True, "stop": "stopped"}
    rig.expect(continuation, SessionStatus.STOPPED)
    rig.deliver(continuation)  # its task, delivered late: nothing runs
    rig.expect(continuation, SessionStatus.STOPPED)
    found = rig.session(asker)
    thread = FakeSlack(rig.stack.url("fake_slack")).messages(found.origin.channel, found.origin.thread_ts)
    assert len([m for m in thread if "Stopped by" in str(m.get("text"))]) == 1


NEWER = "a newer question"
ENDS = {"the sweep's abandon": "abandon", NEWER: "cancel_older"}


@pytest.mark.parametrize("end", list(ENDS))
def test_an_answer_to_the_other_question_while_its_turn_is_being_ended_is_refused_truthfully(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch, end: str
) -> None:
    """Defect: the sweep abandons (or a newer question in the thread cancels) the first of two twin questions, then
    ends the session paused on them. A press on the second in between (its session still paused) was stored and its
    answerer told it was noted, though the session then ended without reading it. Now it is refused, its answerer
    told nothing waits on it any more; the question is then cancelled with the rest of the turn, nothing resumes."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    first = stored_questions.get_question(asked[0])
    assert first is not None
    pressed: list[dict[str, Any]] = []
    real = sessions.end_session

    def answered_first(ended: Any, *args: Any, **kwargs: Any) -> Any:
        if not pressed:  # the question the end has not closed yet (a newer question closes the newest first)
            [other] = [q for q in asked if (stored_questions.get_question(q) or first).status == QuestionStatus.OPEN]
            pressed.append(pick(fake_slack, thread, other, 2))  # handled by the stack's own function
        return real(ended, *args, **kwargs)

    monkeypatch.setattr(sessions, "end_session", answered_first)
    if ENDS[end] == "abandon":
        assert questions.abandon(first, firestore.now() + timedelta(hours=500))
    else:
        newer = ids.question_id(f"{thread.session_id}-b", 1, 0)
        questions.cancel_older(thread.channel, thread.ts, keep=newer, asker=f"{thread.session_id}-b", seq=1)
    assert [p["status"] for p in pressed] == [200]
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this question any more" in text for text in told), told
    closed = [stored_questions.get_question(q) for q in asked]
    assert [q.answer if q else "?" for q in closed] == [None, None]  # never stored as an answer nothing reads
    assert QuestionStatus.CANCELLED in [q.status if q else None for q in closed]
    ended = sessions.get_session(thread.session_id)
    assert ended is not None
    assert ended.status == SessionStatus.ABANDONED
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


@pytest.mark.timeout(240)
def test_a_newer_question_that_cancels_a_question_of_a_turn_still_running_ends_it_when_it_pauses(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: one turn asks a blocking question and delegates a blocking child. A newer question in the thread (in
    another session) cancels the first before the turn's pause commits: the cancel finds its asker still running and
    ends nothing, and the pause then waited on the cancelled question and the child, which no end could wake (the
    sweep's net ended it a day later, silently). Now the pause finds its question closed unanswered and ends the
    session abandoned instead, as the cancel ends a paused asker: the child is stopped (its card says so, its call
    never runs), nothing resumes the turn, the model is never called with its responses, the thread is not told
    "Nobody answered"."""
    thread = question_replaced_while_its_turn_runs(fake_slack, fake_gemini, uid)
    parent = thread.session_id
    asked = ids.question_id(parent, 1, 0)
    cancelled = stored_questions.get_question(asked)
    assert cancelled is not None
    assert cancelled.status == QuestionStatus.CANCELLED
    running = sessions.get_session(parent)
    assert running is not None
    assert running.status == SessionStatus.RUNNING  # the cancel came before the pause: it ended nothing
    ended = wait_status(parent, SessionStatus.ABANDONED, timeout=90)
    assert ended.error is not None
    assert questions.REPLACED in ended.error
    assert [(w.kind.value, w.key) for w in ended.waiting] == [
        ("question", asked),
        ("child", ids.child_id(parent, 1, 1)),
    ]
    child = wait_status(ids.child_id(parent, 1, 1), SessionStatus.STOPPED, timeout=90)
    assert child.status == SessionStatus.STOPPED
    assert executions(child.session_id) == []
    assert sessions.get_session(ids.resume_id(parent, 1)) is None
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []
    shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
    assert not any("Nobody answered" in t or "stopped waiting" in t for t in shown), shown
    assert any(blocks.cancelled_text("Which zone?") in t for t in shown), shown


def question_replaced_while_its_turn_runs(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> Thread:
    """A turn asks a blocking question and delegates a blocking child; its worker is held after the question's post
    while a newer question in the thread (another session's) cancels the first, before the turn's pause commits."""
    task = f"resize the workers {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ASK, ("delegate", {"task": task}))),
                       FakeGemini.matching(f"[C{uid}]", G.text("never said")))  # fmt: skip
    for_child(fake_gemini, task, idless(("scale_service", {"name": "workers", "replicas": 4})),
              G.text("The workers run 4 replicas."))  # fmt: skip
    fake_slack.slow("reactions.add", 20, match=Reaction.QUESTION.value)  # the worker held after its question's post
    thread = mention(fake_slack, f"C{uid}", "pick a zone and scale")
    wait_for(lambda: [c for c in fake_slack.calls("reactions.add") if Reaction.QUESTION.value in repr(c["args"])],
             timeout=60, what="the question's post")  # fmt: skip
    other = f"{thread.session_id}-b"  # the session asking the newer question: its ask cancels the older ones first
    questions.cancel_older(thread.channel, thread.ts, keep=ids.question_id(other, 1, 0), asker=other, seq=1)
    return thread


def stop_killed_after_its_first_cancel(stack: Stack, fake_slack: FakeSlack, thread: Thread) -> list[dict[str, Any]]:
    """The word "stop" typed in the thread of a paused session; the Slack ingress is SIGKILLed while it updates the
    post of the first thing the Stop cancels (held there), after marking the session stopped, and started again. What
    the operator's message sent (its deliveries)."""
    # The ingress held after its first cancel (this thread's: a session an earlier test left may be stopped too).
    fake_slack.slow("chat.update", 60, match=f'"channel": "{thread.channel}"')
    sent: list[dict[str, Any]] = []

    def stop() -> None:
        sent.append(fake_slack.user_message(OPERATOR, thread.channel, "stop", thread_ts=thread.ts))

    sending = threading.Thread(target=stop, daemon=True)
    try:
        sending.start()
        wait_for(lambda: [c for c in fake_slack.calls("chat.update") if c["args"].get("channel") == thread.channel
                          and "session was stopped" in repr(c["args"])],
                 timeout=60, what="the first cancel's post update")  # fmt: skip
        stack.kill_function("slack_events")
    finally:
        stack.start_function("slack_events")
    sending.join(timeout=60)
    return sent


def paused_on_a_question_and_a_card(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> tuple[Thread, Approval]:
    """A session (no call ids) paused on one turn's question and approve-tier call, both posted; its model is never
    asked again. The thread and the call's approval (as posted)."""
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ASK, TWIN)),
                       FakeGemini.matching(f"[C{uid}]", G.text("never said")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scale the api in a zone")
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    wait_for(partial(posted_question, ids.question_id(thread.session_id, 1, 0)), timeout=60, what="the question")
    return thread, wait_for(partial(carded, ids.approval_id(thread.session_id, 1, 1)), timeout=30, what="the card")


STOP_KILLED = ["Slack's retry of the stop", "an answer", "the sweep", "the sweep's reminder"]


@pytest.mark.parametrize("then", STOP_KILLED)
def test_the_questions_a_stop_killed_part_way_left_open_are_closed_by_what_comes_next(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, then: str
) -> None:
    """Defect: a Stop SIGKILLed after marking the paused session stopped and before closing its second question
    left that question open; Slack's retry of the Stop finds the session ended and closes nothing, so a press on it
    was refused for ever, its buttons and 💬 still there, and the sweep then posted "Nobody answered" to the stopped
    thread. Now the refused press (or the sweep) closes it as the Stop would have: cancelled, its post saying the
    session was stopped, 💬 off; nothing resumes, the thread is never told "Nobody answered"."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    posts = {q: wait_for(partial(posted_question, q), timeout=60, what="the question's post") for q in asked}
    sent = stop_killed_after_its_first_cancel(stack, fake_slack, thread)
    assert sessions.get_session(thread.session_id).status == SessionStatus.STOPPED  # type: ignore[union-attr]
    left = [q for q in asked if (stored_questions.get_question(q) or posts[q]).status == QuestionStatus.OPEN]
    assert len(left) == 1, left  # killed between its two cancels
    [open_one] = left
    question = posts[open_one]
    if then == "Slack's retry of the stop":  # the session has ended: the word is taken as an answer, refused
        [event] = sent[0]["deliveries"]
        assert fake_slack.redeliver(event["event_id"])["status"] == 200
    elif then == "an answer":
        assert pick(fake_slack, thread, open_one, 1)["status"] == 200
    if then == "the sweep's reminder":  # 24 h on: never reminded, closed as the Stop would have closed it
        assert not lifecycle.Ask(question).remind(firestore.now() + timedelta(hours=30))
        closed = stored_questions.get_question(open_one)
        assert closed is not None
        assert closed.status == QuestionStatus.CANCELLED
        assert closed.reminded_at is None
        shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
        assert not any("this question has waited" in t for t in shown), shown
    elif then != "the sweep":
        told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
        assert any("Nothing waits on this question any more" in text for text in told), told
        closed = stored_questions.get_question(open_one)
        assert closed is not None
        assert closed.status == QuestionStatus.CANCELLED
    else:
        assert questions.abandon(question, firestore.now() + timedelta(hours=500))
    [post] = [m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == question.post_ts]
    assert "Cancelled: the session was stopped by" in post["text"], post
    assert Reaction.QUESTION.value not in fake_slack.reactions(thread.channel, question.post_ts or "")
    shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
    assert not any("Nobody answered" in t for t in shown), shown
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


def posted_question(question_id: str) -> Any:
    found = stored_questions.get_question(question_id)
    return found if found is not None and found.post_ts else None


def test_a_stop_while_the_sweep_abandons_the_question_tells_the_thread_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the sweep abandons a question (closed first), and "stop" is typed before it ends the session paused
    on it: the Stop ends the session (stopped) and says so, and the sweep's abandon, finding the session no longer
    paused, still told the thread "Nobody answered": two notices for one end. Now the stopped session's question is
    shown as the Stop's (cancelled), the thread hears "Stopped by" only."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    first = wait_for(partial(posted_question, asked[0]), timeout=60, what="the question's post")
    typed: list[dict[str, Any]] = []
    real = sessions.end_session

    def stopped_first(ended: Any, *args: Any, **kwargs: Any) -> Any:
        if not typed:
            typed.append(fake_slack.user_message(OPERATOR, thread.channel, "stop", thread_ts=thread.ts))
        return real(ended, *args, **kwargs)

    monkeypatch.setattr(sessions, "end_session", stopped_first)
    assert questions.abandon(first, firestore.now() + timedelta(hours=500))
    assert all(d["status"] == 200 for d in typed[0]["deliveries"]), typed
    stopped = sessions.get_session(thread.session_id)
    assert stopped is not None
    assert stopped.status == SessionStatus.STOPPED
    shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
    notices = [t for t in shown if "Nobody answered" in t or "Stopped by" in t]
    assert len(notices) == 1, notices
    assert all((q.status if q else None) != QuestionStatus.OPEN for q in map(stored_questions.get_question, asked))
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


@pytest.mark.parametrize("then", ["a press", "the sweep's reminder"])
def test_the_card_a_stop_killed_part_way_left_pending_is_closed_by_what_comes_next(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, then: str
) -> None:
    """The same kill, for a turn that waits on a question and an approve-tier call: the Stop cancelled the question
    (its post held) and never denied the call. A press on its card is refused (nothing waits on it) and, now, denies
    it as the Stop would have, its card saying so: the call never runs, nothing resumes. The sweep's 24 h reminder
    (it reminded the stopped thread) denies it the same way and reminds nothing."""
    thread, card = paused_on_a_question_and_a_card(fake_slack, fake_gemini, uid)
    stop_killed_after_its_first_cancel(stack, fake_slack, thread)
    pending = stored_approvals.get_approval(card.approval_id)
    assert pending is not None
    assert pending.status == ApprovalStatus.PENDING  # killed before the Stop denied it
    if then == "a press":
        assert press(fake_slack, card, blocks.APPROVE_ACTION)["status"] == 200
        told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
        assert any("Nothing waits on this call any more" in text for text in told), told
    else:
        assert not lifecycle.Ask(pending).remind(firestore.now() + timedelta(hours=30))
        shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
        assert not any("waited" in t and "for approval" in t for t in shown), shown
    denied = stored_approvals.get_approval(card.approval_id)
    assert denied is not None
    assert denied.status == ApprovalStatus.DENIED
    assert executions(thread.session_id) == []
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


class Killed(Exception):
    """A process dying at this point (the test's own process: its next step never runs)."""


def abandon_cut_off(question: Any, monkeypatch: pytest.MonkeyPatch, at: datetime | None = None) -> None:
    """The sweep's abandon of ``question`` (as of ``at``: long past its bound by default) closes it and dies before
    ending the session paused on it."""

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    monkeypatch.setattr(sessions, "end_session", killed)
    with pytest.raises(Killed):
        questions.abandon(question, at or firestore.now() + timedelta(hours=500))
    monkeypatch.undo()


def test_an_answer_to_the_other_question_of_a_turn_whose_abandon_was_cut_off_ends_it(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the sweep's abandon closed the first of two twin questions and died before ending the session paused
    on them. The next sweep left the session alone (its second question open), every answer to the second was
    refused (its turn is being ended) and, hours later, the sweep posted "Nobody answered" about a question that
    had been answered. Now the refused answer ends the session (abandoned) as the abandon would have: the second
    question is cancelled, nothing resumes, the sweep finds nothing open to abandon; the thread is told once that
    the first went unanswered, as the abandon would have told it."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    first = wait_for(partial(posted_question, asked[0]), timeout=60, what="the question's post")
    abandon_cut_off(first, monkeypatch)
    assert sessions.get_session(thread.session_id).status == SessionStatus.PAUSED  # type: ignore[union-attr]
    second = wait_for(partial(posted_question, asked[1]), timeout=60, what="the other question's post")
    assert pick(fake_slack, thread, asked[1], 1)["status"] == 200
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this question any more" in text for text in told), told
    ended = sessions.get_session(thread.session_id)
    assert ended is not None
    assert ended.status == SessionStatus.ABANDONED
    closed = stored_questions.get_question(asked[1])
    assert closed is not None
    assert closed.status == QuestionStatus.CANCELLED
    assert closed.answer is None
    assert not questions.abandon(second, firestore.now() + timedelta(hours=500))  # nothing left for the sweep
    shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
    assert len([t for t in shown if "Nobody answered" in t]) == 1, shown  # the first's, never the second's
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


def test_an_approval_of_a_call_of_a_turn_being_ended_is_refused_and_never_runs(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a turn waits on a question and an approve-tier call; a newer question in the thread cancels the
    question, and the call is approved before the cancel ends the session. The approval was recorded (the card
    said approved), the end could not expire it, and the call never ran. Now the decision is refused as an answer
    to another question of the turn is: its approver told nothing waits on it, the call expired with the turn, its
    card saying so; nothing runs or resumes."""
    thread, card = paused_on_a_question_and_a_card(fake_slack, fake_gemini, uid)
    pressed: list[dict[str, Any]] = []
    real = sessions.end_session

    def approved_first(ended: Any, *args: Any, **kwargs: Any) -> Any:
        if not pressed:
            pressed.append(press(fake_slack, card, blocks.APPROVE_ACTION))  # handled by the stack's own function
        return real(ended, *args, **kwargs)

    monkeypatch.setattr(sessions, "end_session", approved_first)
    newer = ids.question_id(f"{thread.session_id}-b", 1, 0)
    questions.cancel_older(thread.channel, thread.ts, keep=newer, asker=f"{thread.session_id}-b", seq=1)
    assert [p["status"] for p in pressed] == [200]
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this call any more" in text for text in told), told
    ended = sessions.get_session(thread.session_id)
    assert ended is not None
    assert ended.status == SessionStatus.ABANDONED
    expired = stored_approvals.get_approval(card.approval_id)
    assert expired is not None
    assert expired.status not in {ApprovalStatus.PENDING, ApprovalStatus.APPROVED}, expired.status
    assert executions(thread.session_id) == []
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


def test_an_approval_of_a_turn_whose_abandon_was_cut_off_shows_the_abandoned_question_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the sweep's abandon closed a turn's question and died before ending the session paused on it and its
    approve-tier call; a press on the call's card was refused and ended the session, but told nobody about the
    question: its post kept its buttons and 💬, and "Nobody answered" was never posted (the sweep's retry finds the
    question closed, its net acts on paused sessions only). Now the refused press shows the abandon as the sweep
    would have: the post updated, 💬 off, the thread told once, and the sweep's retry adds nothing."""
    thread, card = paused_on_a_question_and_a_card(fake_slack, fake_gemini, uid)
    question = posted_question(ids.question_id(thread.session_id, 1, 0))
    at = firestore.now() + timedelta(hours=500)
    abandon_cut_off(question, monkeypatch, at)
    assert press(fake_slack, card, blocks.APPROVE_ACTION)["status"] == 200
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this call any more" in text for text in told), told
    ended = sessions.get_session(thread.session_id)
    assert ended is not None
    assert ended.status == SessionStatus.ABANDONED
    assert not questions.abandon(question, at)  # the sweep's retry: nothing open left
    [post] = [m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == question.post_ts]
    assert "Abandoned after" in post["text"], post
    assert Reaction.QUESTION.value not in fake_slack.reactions(thread.channel, question.post_ts or "")
    shown = [m["text"] for m in fake_slack.messages(thread.channel, thread.ts)]
    assert len([t for t in shown if "Nobody answered" in t]) == 1, shown
    denied = stored_approvals.get_approval(card.approval_id)
    assert denied is not None
    assert denied.status not in {ApprovalStatus.PENDING, ApprovalStatus.APPROVED}, denied.status
    assert executions(thread.session_id) == []
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


@pytest.mark.timeout(300)
def test_a_turn_ended_abandoned_whose_worker_dies_in_its_slack_calls_has_ended_its_waits(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a turn whose question a newer one cancelled ends abandoned when it pauses; its worker committed the
    end, then cleared its status in Slack before ending what the turn waited on. Killed (or failed) there, the
    retry found the session ended and did nothing: the blocking child it delegated kept waiting on its card for
    ever. Now its waits end before any call to Slack: the child is stopped, its call never runs."""
    thread = question_replaced_while_its_turn_runs(fake_slack, fake_gemini, uid)
    parent = thread.session_id
    fake_slack.slow("assistant.threads.setStatus", 120, match='"status": ""')  # the end's status cleared: held
    try:
        wait_status(parent, SessionStatus.ABANDONED, timeout=90)
        wait_for(lambda: [c for c in fake_slack.calls("assistant.threads.setStatus") if '""' in repr(c["args"])
                          or "''" in repr(c["args"])], timeout=60, what="the end's status cleared")  # fmt: skip
        stack.kill_function("agent_session")
    finally:
        stack.start_function("agent_session")
    child = wait_status(ids.child_id(parent, 1, 1), SessionStatus.STOPPED, timeout=90)
    assert executions(child.session_id) == []
    assert sessions.get_session(ids.resume_id(parent, 1)) is None
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


def test_an_answer_to_a_question_an_abandoned_session_left_open_closes_it(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a newer question cancelled the first of two twin questions and ended the session paused on them
    (abandoned), then died before ending the rest of its turn. The second question stayed open, every answer to it
    refused, and only a Stop's end was closed by a refusal. Now the refusal ends what the abandoned session left
    open, as its end would have: the question cancelled, its post saying why; nothing resumes."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    for q in asked:
        wait_for(partial(posted_question, q), timeout=60, what="the question's post")

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise Killed

    monkeypatch.setattr(stopping, "end_waits", killed)
    newer = ids.question_id(f"{thread.session_id}-b", 1, 0)
    with pytest.raises(Killed):
        questions.cancel_older(thread.channel, thread.ts, keep=newer, asker=f"{thread.session_id}-b", seq=1)
    monkeypatch.undo()
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    [left] = [q for q in asked if stored_questions.get_question(q).status == QuestionStatus.OPEN]  # type: ignore[union-attr]
    assert pick(fake_slack, thread, left, 1)["status"] == 200
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this question any more" in text for text in told), told
    closed = stored_questions.get_question(left)
    assert closed is not None
    assert closed.status == QuestionStatus.CANCELLED
    assert closed.answer is None
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []

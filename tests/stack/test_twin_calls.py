"""Twin calls (round 3, flows 14-15): one model turn, several calls of one tool with IDENTICAL arguments and no call
ids, as an outside scenario's model sends them. Only a call's position tells the twins apart: each gets its own wait
(card or question), its own outcome and its own response at its own position; each decision runs at most its own
call, once; the turn resumes once, however the decisions and the resuming task's deliveries race.

On the real stack: the fake Slack presses the cards and the question buttons (in parallel where the test says so),
the resuming task is delivered as Cloud Tasks may (twice at once, retried on non-2xx), executions are counted in
Firestore (``demo_actions``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
import requests

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import firestore, ids, sessions, steps
from shared.state import questions as stored_questions
from shared.state.models import Approval, ApprovalStatus, Question, QuestionStatus, SessionStatus, StepKind
from tests import delivery
from tests.agent_helpers import Thread, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import executions, press
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import (
    answers,
    child_requests,
    for_child,
    parent_answers,
    requests_for,
    thread_ends_with,
)
from tests.stack.test_mixed_turns import MixedTurn

pytestmark = pytest.mark.stack
G = FakeGemini
OPERATOR, OPERATOR2 = local.OPERATOR_ID, "U0OPERATOR2"
TWIN = ("scale_service", {"name": "api", "replicas": 3})
RAN = {"scaled": "api", "replicas": 3}


def at_once(*actions: Callable[[], Any]) -> list[Any]:
    """Run ``actions`` in threads released together; their results (a thread's exception is raised here)."""
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)
    errors: list[BaseException] = []

    def run(n: int, action: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[n] = action()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n, a), daemon=True) for n, a in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors:
        raise errors[0]
    return results


def twin_cards(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, then: str) -> tuple[Thread, list[Approval]]:
    """A mention whose model turn makes the same approve-tier call twice (identical arguments, no ids), then says
    ``then``: the thread and its two approvals, in call order, each with its own card."""
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(TWIN, TWIN)),
                       FakeGemini.matching(f"[C{uid}]", G.text(then)))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scale the api to 3, twice")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    assert [(w.index, w.kind.value) for w in paused.waiting] == [(0, "approval"), (1, "approval")]
    cards = [stored.get_approval(ids.approval_id(thread.session_id, 1, n)) for n in (0, 1)]
    assert all(c is not None and c.card_ts is not None for c in cards)
    found = [c for c in cards if c is not None]
    assert found[0].digest == found[1].digest  # the same exact call, twice: only the position differs
    assert found[0].card_ts != found[1].card_ts
    shown = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["ts"] in {c.card_ts for c in found}]
    assert len(shown) == 2  # two cards
    return thread, found


def resumed_once(fake_gemini: FakeGemini, thread: Thread, calls: int) -> list[dict[str, Any]]:
    """The turn resumed exactly once, with one stored response per call in call order; the model's resumed request's
    function responses."""
    answered = [s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]
    assert len(answered) == 1
    assert [(r.seq, r.index) for r in answered[0].answers or []] == [(1, n) for n in range(calls)]
    resumed = [r for r in requests_for(fake_gemini, f"[{thread.channel}]") if function_responses(r)]
    assert len(resumed) == 1  # one resumed model turn
    return function_responses(resumed[0])


def final_replies(fake_slack: FakeSlack, thread: Thread, text: str) -> int:
    return sum(m["text"] == text for m in answers(fake_slack, thread))


def replied_once(fake_slack: FakeSlack, thread: Thread, text: str) -> None:
    """The thread gets the final reply ``text``, exactly once."""
    wait_for(lambda: final_replies(fake_slack, thread, text), timeout=30, what="the final reply")
    assert final_replies(fake_slack, thread, text) == 1


def answered_in_order(fake_gemini: FakeGemini, thread: Thread) -> list[str]:
    """The answers a turn of two questions resumed once with, in call order."""
    return [r["response"]["result"]["answer"] for r in resumed_once(fake_gemini, thread, 2)]


def resumed_with_answers(fake_gemini: FakeGemini, fake_slack: FakeSlack, thread: Thread, expected: list[str]) -> None:
    """The turn of two questions resumed once, each call answered ``expected`` in order, and its reply posted once."""
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=60)
    assert answered_in_order(fake_gemini, thread) == expected
    replied_once(fake_slack, thread, "Zones noted.")


def carded(approval_id: str) -> Approval | None:
    """The approval once its card is posted."""
    found = stored.get_approval(approval_id)
    return found if found is not None and found.card_ts is not None else None


def decided(approval: Approval, status: ApprovalStatus) -> bool:
    found = stored.get_approval(approval.approval_id)
    return found is not None and found.status == status


@pytest.mark.parametrize("approved", [0, 1])
def test_twin_calls_one_approved_one_denied_run_exactly_the_approved_one_at_its_position(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, approved: int
) -> None:
    thread, cards = twin_cards(fake_slack, fake_gemini, uid, "Scaled once.")
    denied = 1 - approved
    press(fake_slack, cards[approved], blocks.APPROVE_ACTION)
    wait_for(lambda: decided(cards[approved], ApprovalStatus.APPROVED), timeout=30, what="the approval")
    assert executions(thread.session_id) == []  # its twin is undecided: nothing runs yet
    press(fake_slack, cards[denied], blocks.DENY_ACTION)
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=60)
    [ran] = executions(thread.session_id)
    assert ran["key"] == ids.call_key(thread.session_id, 1, approved)  # the approved call, not its twin
    responses = resumed_once(fake_gemini, thread, 2)
    assert [r["name"] for r in responses] == ["scale_service", "scale_service"]
    assert responses[approved]["response"] == {"result": RAN}
    assert "denied by" in responses[denied]["response"]["error"]
    assert "result" not in responses[denied]["response"]
    replied_once(fake_slack, thread, "Scaled once.")


def test_twin_calls_both_approved_each_run_once(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> None:
    thread, cards = twin_cards(fake_slack, fake_gemini, uid, "Scaled twice.")
    press(fake_slack, cards[1], blocks.APPROVE_ACTION)
    press(fake_slack, cards[0], blocks.APPROVE_ACTION)
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=60)
    ran = executions(thread.session_id)
    assert sorted(e["key"] for e in ran) == sorted(ids.call_key(thread.session_id, 1, n) for n in (0, 1))
    responses = resumed_once(fake_gemini, thread, 2)
    assert [r["response"] for r in responses] == [{"result": RAN}, {"result": RAN}]
    replied_once(fake_slack, thread, "Scaled twice.")


@pytest.mark.parametrize("decisions", ["approve both", "approve and deny"])
def test_twin_decisions_pressed_at_once_and_the_resume_delivered_twice_at_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, decisions: str
) -> None:
    """The two clicks (two operators, one card each) land together; the resuming task is delivered twice at once
    beside the dispatcher's own delivery: one resumed turn, each call run at most once, one final reply."""
    thread, cards = twin_cards(fake_slack, fake_gemini, uid, "Decided.")
    second = blocks.APPROVE_ACTION if decisions == "approve both" else blocks.DENY_ACTION
    clicks = at_once(lambda: press(fake_slack, cards[0], blocks.APPROVE_ACTION),
                     lambda: press(fake_slack, cards[1], second, user=OPERATOR2))  # fmt: skip
    assert [c["status"] for c in clicks] == [200, 200]
    resumed = ids.resume_id(thread.session_id, 1)
    wait_for(lambda: sessions.get_session(resumed), timeout=30, what="the resuming continuation")
    attempts = delivery.deliver(stack.function_url("agent_session"), resumed, task="resume", copies=2)
    assert delivery.settled(attempts, 2), attempts
    wait_status(resumed, SessionStatus.DONE, timeout=60)
    ran = executions(thread.session_id)
    responses = resumed_once(fake_gemini, thread, 2)
    assert responses[0]["response"] == {"result": RAN}
    if decisions == "approve both":
        assert sorted(e["key"] for e in ran) == sorted(ids.call_key(thread.session_id, 1, n) for n in (0, 1))
        assert responses[1]["response"] == {"result": RAN}
    else:
        assert [e["key"] for e in ran] == [ids.call_key(thread.session_id, 1, 0)]
        assert f"denied by <@{OPERATOR2}>" in responses[1]["response"]["error"]
    replied_once(fake_slack, thread, "Decided.")


def test_twin_questions_answered_in_reverse_order_each_answer_at_its_own_position(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    ask = ("ask_operator", {"question": "Which zone?", "options": ["north", "south"]})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ask, ask)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick two zones")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    assert [(w.index, w.kind.value) for w in paused.waiting] == [(0, "question"), (1, "question")]
    asked = [stored_questions.get_question(ids.question_id(thread.session_id, 1, n)) for n in (0, 1)]
    first, second = (q for q in asked if q is not None)
    assert first.post_ts is not None
    assert second.post_ts is not None
    assert first.post_ts != second.post_ts  # two posts
    # The second question is answered first ("south"), then the first ("north").
    fake_slack.click(
        OPERATOR, thread.channel, second.post_ts, "answer_2", value=blocks.question_value(second.question_id, 2)
    )
    wait_for(lambda: (q := stored_questions.get_question(second.question_id)) is not None
             and q.status == QuestionStatus.ANSWERED, timeout=30, what="the second question's answer")  # fmt: skip
    still = stored_questions.get_question(first.question_id)
    assert still is not None
    assert still.status == QuestionStatus.OPEN
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None  # the first still waits
    fake_slack.click(
        OPERATOR, thread.channel, first.post_ts, "answer_1", value=blocks.question_value(first.question_id, 1)
    )
    resumed_with_answers(fake_gemini, fake_slack, thread, ["north", "south"])


def test_twin_questions_answered_by_text_replies_in_turn(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Two free-text questions, alike, no ids: each reply answers one question (the newest open one), never both;
    each answer reaches its own call, and the turn resumes once."""
    ask = ("ask_operator", {"question": "Which zone?"})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ask, ask)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick two zones")
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    for reply in ("east", "west"):
        sent = fake_slack.user_message(OPERATOR, thread.channel, reply, thread_ts=thread.ts)
        assert all(d["status"] == 200 for d in sent["deliveries"]), sent
    resumed_with_answers(fake_gemini, fake_slack, thread, ["west", "east"])  # a reply answers the newest


@pytest.mark.timeout(300)
def test_a_question_an_approval_and_a_child_resolved_at_once_resume_the_turn_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The three resolutions of a mixed turn (the operator's answer, the Approve of the parent's card, the Approve
    that lets the child end) arrive together from threads, and the resuming task is delivered twice at once: one
    resumed turn, each response at its call's position, the approved call run once, one final reply."""
    turn = MixedTurn(fake_slack, fake_gemini, uid)

    def answer() -> dict[str, Any]:
        return fake_slack.user_message(OPERATOR, turn.thread.channel, "eu-west", thread_ts=turn.thread.ts)

    results = at_once(
        answer,
        lambda: press(fake_slack, turn.approval(turn.approval_id), blocks.APPROVE_ACTION),
        lambda: press(fake_slack, turn.approval(turn.child_approval_id), blocks.APPROVE_ACTION, user=OPERATOR2),
    )
    assert all(d["status"] == 200 for d in results[0]["deliveries"]), results[0]
    assert [r["status"] for r in results[1:]] == [200, 200]
    wait_for(lambda: sessions.get_session(turn.resumed), timeout=90, what="the resuming continuation")
    attempts = delivery.deliver(stack.function_url("agent_session"), turn.resumed, task="resume", copies=2)
    assert delivery.settled(attempts, 2), attempts
    wait_status(turn.resumed, SessionStatus.DONE, timeout=90)
    responses = turn.final_responses()
    assert [r["name"] for r in responses] == ["ask_operator", "scale_service", "delegate"]
    assert responses[0]["response"]["result"]["answer"] == "eu-west"
    assert responses[1]["response"]["result"] == {"scaled": "api", "replicas": 3}
    assert responses[2]["response"] == {"result": "The workers run 4 replicas."}
    assert [e["replicas"] for e in executions(turn.thread.session_id)] == [3]
    assert [e["replicas"] for e in executions(turn.child_id)] == [4]
    turn.resumed_once()
    assert len([r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)]) == 1
    wait_for(lambda: final_replies(fake_slack, turn.thread, "All three are done."), timeout=30, what="the reply")
    assert final_replies(fake_slack, turn.thread, "All three are done.") == 1


def twin_questions(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> tuple[Thread, list[str]]:
    """A mention whose model turn asks the same question twice (identical text and options, no ids), then says
    "Zones noted.": the thread and the two questions' ids, in call order."""
    ask = ("ask_operator", {"question": "Which zone?", "options": ["north", "south"]})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ask, ask)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick two zones")
    return thread, [ids.question_id(thread.session_id, 1, n) for n in (0, 1)]


def pick(fake_slack: FakeSlack, thread: Thread, question_id: str, option: int) -> dict[str, Any]:
    def posted() -> Question | None:
        found = stored_questions.get_question(question_id)
        return found if found is not None and found.post_ts else None

    question = wait_for(posted, timeout=60, what=f"the post of {question_id}")
    value = blocks.question_value(question_id, option)
    return fake_slack.click(OPERATOR, thread.channel, question.post_ts or "", f"answer_{option}", value=value)


def test_twin_questions_pressed_at_once_and_the_resume_delivered_twice_at_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    clicks = at_once(lambda: pick(fake_slack, thread, asked[1], 2), lambda: pick(fake_slack, thread, asked[0], 1))
    assert [c["status"] for c in clicks] == [200, 200]
    resumed = ids.resume_id(thread.session_id, 1)
    wait_for(lambda: sessions.get_session(resumed), timeout=30, what="the resuming continuation")
    attempts = delivery.deliver(stack.function_url("agent_session"), resumed, task="resume", copies=2)
    assert delivery.settled(attempts, 2), attempts
    wait_status(resumed, SessionStatus.DONE, timeout=60)
    assert answered_in_order(fake_gemini, thread) == ["north", "south"]
    replied_once(fake_slack, thread, "Zones noted.")


def test_a_twin_question_answered_while_its_session_still_asks_the_other(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The first question is answered while the session is still posting the second (held by a slow Slack): the
    answer is the first call's, read at the pause, and the second's answer resumes the turn once."""
    fake_slack.slow("chat.postMessage", 15, match="-1-1|1")  # the second question's post (its first button's value)
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_for(lambda: any("-1-1|1" in repr(c["args"]) for c in fake_slack.calls("chat.postMessage")), timeout=60,
             what="the second question's post")  # fmt: skip
    assert pick(fake_slack, thread, asked[0], 2)["status"] == 200
    noted = stored_questions.get_question(asked[0])
    assert noted is not None
    assert noted.continuation_id == thread.session_id  # a note for the asker, still running
    wait_status(thread.session_id, SessionStatus.PAUSED, SessionStatus.RESUMED, timeout=60)
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None  # the second still waits
    assert pick(fake_slack, thread, asked[1], 1)["status"] == 200
    resumed_with_answers(fake_gemini, fake_slack, thread, ["south", "north"])


def test_twin_blocking_delegates_with_one_task_each_report_at_their_own_position(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    task = f"count the crates {uid}"
    twin = ("delegate", {"task": task})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(twin, twin)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Counted twice.")))  # fmt: skip
    for_child(fake_gemini, task, G.text("first count: 7"), G.text("second count: 8"))
    thread = mention(fake_slack, f"C{uid}", "count the crates twice")
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=90)
    children = [sessions.get_session(ids.child_id(thread.session_id, 1, n)) for n in (0, 1)]
    results = [c.result if c is not None else None for c in children]
    assert sorted(str(r) for r in results) == ["first count: 7", "second count: 8"]
    assert len(child_requests(fake_gemini, task)) == 2  # each child ran once
    responses = resumed_once(fake_gemini, thread, 2)
    assert [r["response"] for r in responses] == [{"result": results[0]}, {"result": results[1]}]
    replied_once(fake_slack, thread, "Counted twice.")


@pytest.mark.parametrize("decisions", ["approve both", "approve and deny"])
def test_a_childs_twin_calls_decided_at_once_resume_the_child_once(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, decisions: str
) -> None:
    """A delegated child's turn makes the same approve-tier call twice (no ids); the two cards are decided together:
    the child resumes once, each call run at most once under its own key, its responses at their positions, and the
    parent reports once."""
    task = f"resize the api {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))),
                       FakeGemini.matching(f"[C{uid}]", G.text("The helper is done.")))  # fmt: skip
    for_child(fake_gemini, task, idless(TWIN, TWIN), G.text("Decided."))
    thread = mention(fake_slack, f"C{uid}", "resize the api")
    child_id = ids.child_id(thread.session_id, 1, 0)
    paused = wait_status(child_id, SessionStatus.PAUSED, timeout=60)
    assert [(w.index, w.kind.value) for w in paused.waiting] == [(0, "approval"), (1, "approval")]
    cards = [wait_for(partial(carded, ids.approval_id(child_id, 1, n)), timeout=30, what="a card") for n in (0, 1)]
    second = blocks.APPROVE_ACTION if decisions == "approve both" else blocks.DENY_ACTION
    clicks = at_once(lambda: press(fake_slack, cards[0], blocks.APPROVE_ACTION),
                     lambda: press(fake_slack, cards[1], second, user=OPERATOR2))  # fmt: skip
    assert [c["status"] for c in clicks] == [200, 200]
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=90)
    ran = sorted(e["key"] for e in executions(child_id))
    both = decisions == "approve both"
    assert ran == [ids.call_key(child_id, 1, n) for n in ((0, 1) if both else (0,))]
    resumed = [r for r in child_requests(fake_gemini, task) if function_responses(r)]
    assert len(resumed) == 1  # the child resumed once
    responses = function_responses(resumed[0])
    assert responses[0]["response"] == {"result": RAN}
    if both:
        assert responses[1]["response"] == {"result": RAN}
    else:
        assert f"denied by <@{OPERATOR2}>" in responses[1]["response"]["error"]
    assert len(responses) == 2
    assert len([s for s in steps.load_steps(child_id) if s.kind == StepKind.ANSWER]) == 1
    replied_once(fake_slack, thread, "The helper is done.")


def test_one_reply_and_its_twin_events_answer_one_of_twin_questions(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A reply that mentions the bot arrives as two events (``message`` and ``app_mention``), each retried by Slack:
    it answers one of the turn's twin questions, never both; the turn waits for the other's answer."""
    ask = ("ask_operator", {"question": "Which zone?"})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(ask, ask)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick two zones")
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    sent = fake_slack.user_message(OPERATOR, thread.channel, f"<@{local.BOT_USER_ID}> east", thread_ts=thread.ts)
    assert sorted(d["type"] for d in sent["deliveries"]) == ["app_mention", "message"]
    for event in sent["deliveries"]:
        assert fake_slack.redeliver(event["event_id"])["status"] == 200  # Slack retries both
    still = [q.question_id for q in stored_questions.thread_questions(thread.channel, thread.ts).open]
    assert still == [ids.question_id(thread.session_id, 1, 0)]  # the newest was answered, the first still waits
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None
    fake_slack.user_message(OPERATOR, thread.channel, "west", thread_ts=thread.ts)
    resumed_with_answers(fake_gemini, fake_slack, thread, ["west", "east"])


def test_a_question_and_an_approval_both_decided_while_their_turn_still_posts_resume_it_in_place(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Both waits of a mixed turn (no ids) resolved before it pauses (the card's post held by a slow Slack): the
    turn never pauses, runs the approved call once and gives each call its own response."""
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("ask_operator", {"question": "Which zone?",
                                                                                  "options": ["north", "south"]}),
                                                                TWIN)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Scaled in the south.")))  # fmt: skip
    fake_slack.slow("chat.postMessage", 15, match="approval needed")
    thread = mention(fake_slack, f"C{uid}", "scale the api where I say")
    assert pick(fake_slack, thread, ids.question_id(thread.session_id, 1, 0), 2)["status"] == 200

    def card() -> dict[str, Any] | None:
        return next((m for m in fake_slack.messages(thread.channel, thread.ts) if "approval needed" in m["text"]), None)

    shown = wait_for(card, timeout=60, what="the card")
    approval = stored.get_approval(ids.approval_id(thread.session_id, 1, 1))
    assert approval is not None
    assert press(fake_slack, approval, blocks.APPROVE_ACTION, message_ts=str(shown["ts"]))["status"] == 200
    done = wait_status(thread.session_id, SessionStatus.DONE, SessionStatus.RESUMED, timeout=60)
    if done.status == SessionStatus.RESUMED:  # paused after all (a very slow machine): its continuation ends it
        wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=60)
    assert [e["key"] for e in executions(thread.session_id)] == [ids.call_key(thread.session_id, 1, 1)]
    responses = resumed_once(fake_gemini, thread, 2)
    assert responses[0]["response"]["result"]["answer"] == "south"
    assert responses[1]["response"] == {"result": RAN}
    replied_once(fake_slack, thread, "Scaled in the south.")


def test_a_stop_of_a_turn_paused_on_twin_questions_cancels_both_once(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    for _ in range(2):  # a second Stop changes nothing
        sent = fake_slack.user_message(OPERATOR, thread.channel, "stop", thread_ts=thread.ts)
        assert all(d["status"] == 200 for d in sent["deliveries"]), sent
        wait_status(thread.session_id, SessionStatus.STOPPED, timeout=60)
    found = [stored_questions.get_question(q) for q in asked]
    assert [q.status if q else None for q in found] == [QuestionStatus.CANCELLED, QuestionStatus.CANCELLED]
    posts = {m["ts"]: str(m["text"]) for m in fake_slack.messages(thread.channel, thread.ts)}
    assert all(q is not None and "Cancelled" in posts[q.post_ts or ""] for q in found)
    assert sum("Stopped by" in text for text in posts.values()) == 1
    assert pick(fake_slack, thread, asked[1], 1)["status"] == 200  # a late press: refused, nothing resumes
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []


def test_the_sweep_abandoning_twin_questions_ends_their_turn_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    for question_id in asked:
        firestore.db().collection("questions").document(question_id).update(
            {"asked_at": firestore.now() - timedelta(hours=500)}
        )
    for _ in range(2):  # a second sweep changes nothing
        assert requests.post(stack.function_url("sweep"), json={}, timeout=60).status_code == 200
    wait_status(thread.session_id, SessionStatus.ABANDONED, timeout=30)
    found = [stored_questions.get_question(q) for q in asked]
    assert all(q is not None and q.status in {QuestionStatus.ABANDONED, QuestionStatus.CANCELLED} for q in found)
    told = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "Nobody answered" in str(m["text"])]
    assert len(told) == 1
    assert pick(fake_slack, thread, asked[0], 1)["status"] == 200  # a late press: refused, nothing resumes
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None


def test_twin_answer_child_calls_answer_the_child_once(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The parent answers its child's question twice in one turn, identically, without ids: the child gets one
    answer and resumes once; the second call is told the question is no longer open, at its own position."""
    task = f"resize the workers {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))))
    for_child(fake_gemini, task, idless(("ask_parent", {"question": "Is 4 enough?", "blocking": True})),
              G.text("Scaled the workers to 4."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "resize the workers")
    child_id = ids.child_id(thread.session_id, 1, 0)
    twin = ("answer_child", {"child_id": child_id, "answer": "Yes, 4."})
    parent_answers(fake_gemini, uid, idless(twin, twin), "The workers run 4 replicas.")
    wait_for(lambda: thread_ends_with(fake_slack, thread, "The workers run 4 replicas."), timeout=120,
             what="the helper's report")  # fmt: skip
    resumed = [r for r in child_requests(fake_gemini, task) if function_responses(r)]
    assert len(resumed) == 1  # the child resumed once, with one answer
    assert [r["response"] for r in function_responses(resumed[0])] == [
        {"result": {"answer": "Yes, 4.", "from": "the session that delegated your task"}}
    ]
    assert len([s for s in steps.load_steps(child_id) if s.kind == StepKind.ANSWER]) == 1
    told = [r for r in function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1]) if r["name"] == "answer_child"]
    assert [r["response"] for r in told] == [
        {
            "result": {
                "answered": child_id,
                "child": "resumed",
                "question_id": f"pq-{child_id}-1-0",
                "question": "Is 4 enough?",
                "still_waiting": [],
            }
        },
        {"error": f"{child_id} is not a child of this session with an open question"},
    ]  # each at its own position
    assert final_replies(fake_slack, thread, "The workers run 4 replicas.") == 1


def test_a_non_blocking_answer_while_its_turns_resumption_is_still_queued_reaches_that_resumption(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A blocking and a non-blocking question in one turn (no ids): the blocking one answered, then the non-blocking
    one before the resuming continuation is claimed. The late answer's own continuation found the paused session
    resumed (its continuation not claimed yet) and took the transcript over, writing after the turn's unanswered
    calls; it must hand its answer to the resumption instead, which answers each call at its position."""
    from infra.fakes.dispatch.client import Dispatcher

    blocking = ("ask_operator", {"question": "Which zone?", "options": ["north", "south"]})
    aside = ("ask_operator", {"question": "Which size?", "options": ["small", "large"], "blocking": False})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(blocking, aside)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick a zone and a size")
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    resumed = ids.resume_id(thread.session_id, 1)
    dispatch = Dispatcher(stack.url("dispatch"))
    dispatch.hold(resumed)
    try:
        assert pick(fake_slack, thread, ids.question_id(thread.session_id, 1, 0), 1)["status"] == 200
        dispatch.wait_held(1, match=resumed, timeout=30)
        late = ids.question_id(thread.session_id, 1, 1)
        assert pick(fake_slack, thread, late, 1)["status"] == 200
        handed = wait_status(ids.continuation_id(late), SessionStatus.RESUMED, SessionStatus.DONE, timeout=60)
    finally:
        dispatch.release(resumed)
    assert handed.status == SessionStatus.RESUMED
    assert handed.handed_to == resumed
    wait_status(resumed, SessionStatus.DONE, timeout=60)
    [request] = [r for r in requests_for(fake_gemini, f"[{thread.channel}]") if function_responses(r)]
    responses = function_responses(request)  # one per call, in call order, in the turn after the calls
    assert [r["response"]["result"].get("answer") for r in responses] == ["north", None]
    assert responses[1]["response"]["result"]["status"] == "asked"
    assert "small" in json.dumps(request["body"]["contents"][-1])  # the late answer, as a note beside them
    replied_once(fake_slack, thread, "Zones noted.")


def test_a_question_an_approval_and_a_non_blocking_question_clicked_at_once_resume_the_turn_once(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """One turn (no ids): a blocking question, an approve-tier call and a non-blocking question, all three clicked
    at once. The turn resumes once, each call answered at its position, the approved call run once, and the
    non-blocking answer reaches the model as a note, whichever session it finds writing the transcript."""
    blocking = ("ask_operator", {"question": "Which zone?", "options": ["north", "south"]})
    aside = ("ask_operator", {"question": "Which size?", "options": ["small", "large"], "blocking": False})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(blocking, TWIN, aside)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick a zone and a size, and scale")
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    approval = stored.get_approval(ids.approval_id(thread.session_id, 1, 1))
    assert approval is not None
    clicks = at_once(lambda: pick(fake_slack, thread, ids.question_id(thread.session_id, 1, 0), 2),
                     lambda: press(fake_slack, approval, blocks.APPROVE_ACTION),
                     lambda: pick(fake_slack, thread, ids.question_id(thread.session_id, 1, 2), 1))  # fmt: skip
    assert [c["status"] for c in clicks] == [200, 200, 200]
    resumed = ids.resume_id(thread.session_id, 1)
    wait_status(resumed, SessionStatus.DONE, timeout=90)
    assert [e["key"] for e in executions(thread.session_id)] == [ids.call_key(thread.session_id, 1, 1)]
    written = steps.load_steps(thread.session_id)
    answered = [s for s in written if s.kind == StepKind.ANSWER and s.answers is not None]
    assert [[(r.seq, r.index) for r in s.answers or []] for s in answered] == [[(1, 0), (1, 1)]]  # resumed once
    # The non-blocking answer's own continuation never wrote between the turn and its responses: it handed its
    # answer over (or, had the turn's session ended first, ran after it).
    late = ids.continuation_id(ids.question_id(thread.session_id, 1, 2))
    assert all(s.seq > answered[0].seq for s in written if s.session_id == late)
    called = [r for r in requests_for(fake_gemini, f"[{thread.channel}]") if function_responses(r)]
    responses = function_responses(called[0])  # (a later turn may follow, for a note that came after it)
    assert responses[0]["response"]["result"]["answer"] == "south"
    assert responses[1]["response"] == {"result": RAN}
    assert responses[2]["response"]["result"]["status"] == "asked"
    shown = json.dumps([r["body"]["contents"] for r in requests_for(fake_gemini, f"[{thread.channel}]")])
    assert "small" in shown  # the non-blocking answer, as a note


def test_the_sweep_abandoning_a_non_blocking_question_leaves_the_turn_paused_on_another(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A turn (no ids) asks a non-blocking question and a blocking one, and pauses on the blocking one only. The
    sweep abandoning the non-blocking one (nothing waits on it) ended the paused session and cancelled the question
    it waited on; the session must wait on, its thread not told to start again, and the blocking answer resume its
    turn once."""
    aside = ("ask_operator", {"question": "Which size?", "options": ["small", "large"], "blocking": False})
    blocking = ("ask_operator", {"question": "Which zone?", "options": ["north", "south"]})
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(aside, blocking)),
                       FakeGemini.matching(f"[C{uid}]", G.text("Zones noted.")))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "pick a size and a zone")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    asked = [ids.question_id(thread.session_id, 1, n) for n in (0, 1)]
    assert [w.key for w in paused.waiting] == [asked[1]]
    firestore.db().collection("questions").document(asked[0]).update(
        {"asked_at": firestore.now() - timedelta(hours=500)}
    )
    swept = requests.post(stack.function_url("sweep"), json={}, timeout=60).json()
    assert swept["abandoned"] >= 1
    aged = stored_questions.get_question(asked[0])
    assert aged is not None
    assert aged.status == QuestionStatus.ABANDONED
    waited = stored_questions.get_question(asked[1])
    assert waited is not None
    assert waited.status == QuestionStatus.OPEN
    still = sessions.get_session(thread.session_id)
    assert still is not None
    assert still.status == SessionStatus.PAUSED
    told = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts) if "To start again" in m["text"]]
    assert told == []  # it waits on: the abandoned post says so, and nobody is told to start again
    assert pick(fake_slack, thread, asked[1], 1)["status"] == 200
    wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.DONE, timeout=60)
    [request] = [r for r in requests_for(fake_gemini, f"[{thread.channel}]") if function_responses(r)]
    responses = function_responses(request)
    assert responses[0]["response"]["result"]["status"] == "asked"
    assert responses[1]["response"]["result"]["answer"] == "north"
    replied_once(fake_slack, thread, "Zones noted.")

"""What a parent hears of its children, and what a helper may see (issue 23 items 3 to 5, issue 24.11).

On the real stack, tasks delivered in parallel by the dispatcher; the model sends no call ids.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import OPERATOR_ID
from shared.agent.tools import builtin
from shared.asks import delegation, questions
from shared.state import firestore, ids, steps
from shared.state import questions as stored_questions
from shared.state.models import SessionStatus, StepKind
from tests.agent_helpers import Thread, conversation_done, function_responses, mention, texts, wait_status
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import answers, child_requests, for_child, requests_for

pytestmark = pytest.mark.stack
G = FakeGemini


@pytest.mark.parametrize("reply", ["", None])
def test_a_child_that_ends_without_a_result_is_an_error_for_its_parent(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, reply: str | None
) -> None:
    """Defect: a child whose last reply had empty text (or none at all) reached its parent as {"result": ""}."""
    task = f"find the owner {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))))
    for_child(fake_gemini, task, G.text("") if reply == "" else G.raw({"candidates": [
        {"content": {"role": "model", "parts": []}, "finishReason": "STOP"}]}))  # fmt: skip
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The helper found nothing; I will ask around.")))
    thread = mention(fake_slack, f"C{uid}", "who owns this")
    conversation_done(thread.session_id, timeout=60)
    [response] = function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1])
    assert response["response"] == {"error": "the helper ended without a result"}


def test_a_non_blocking_child_without_a_result_is_reported_as_an_error(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    task = f"tidy the wiki {uid}"
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task, "blocking": False}))),
        FakeGemini.matching(f"[C{uid}]", G.text("A helper tidies the wiki.")),
        FakeGemini.matching(f"[C{uid}]", G.text("The helper reported nothing.")),
    )
    for_child(fake_gemini, task, G.delayed(2, G.text("")))
    thread = mention(fake_slack, f"C{uid}", "tidy the wiki")
    child_id = ids.child_id(thread.session_id, 1, 0)
    wait_status(ids.child_result_id(child_id), SessionStatus.DONE, timeout=60)
    assert "the helper ended without a result" in texts(requests_for(fake_gemini, f"[C{uid}]")[-1])


def test_a_child_sees_only_its_task_as_delegate_says(fake_slack: FakeSlack, fake_gemini: FakeGemini,
                                                     uid: str) -> None:  # fmt: skip
    """Issue 24.11: delegate's description says the child cannot see the thread; the child's read_thread said
    otherwise. A child is not offered read_thread, and a call of it is refused saying why."""
    assert "sees only the task" in (builtin.delegate.declaration().description or "")
    task = f"sum the invoices {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))))
    for_child(fake_gemini, task, G.call("read_thread", limit=5), G.text("I only have the task: 0 invoices."))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("No invoices.")))
    thread = mention(fake_slack, f"C{uid}", "sum the invoices; secret thread text 1234")
    conversation_done(thread.session_id, timeout=60)
    asked = child_requests(fake_gemini, task)
    declared = {d["name"] for t in asked[0]["body"].get("tools", []) for d in t.get("functionDeclarations", [])}
    assert "read_thread" not in declared
    [refused] = function_responses(asked[-1])
    assert "not available to a helper session" in refused["response"]["error"]
    assert "secret thread text 1234" not in texts(asked[-1])


def _child_asking_a_paused_parent(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str,
                                  *later: dict[str, object], asks: int = 1) -> tuple[Thread, str, str]:  # fmt: skip
    """A parent starts a non-blocking child and asks the operator in one turn (no call ids) and pauses; the child
    asks it ``asks`` blocking questions in one turn (no call ids) and pauses too. ``later``: the parent's replies
    after that."""
    task = f"choose the cache size {uid}"
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task, "blocking": False}),
                                                ("ask_operator", {"question": f"Which tier? {uid}"}))),
        *(FakeGemini.matching(f"[C{uid}]", item) for item in later),
    )  # fmt: skip
    asked = [("ask_parent", {"question": f"How much memory may I use? ({n})", "blocking": True}) for n in range(asks)]
    for_child(fake_gemini, task, idless(*asked), G.text("Chose 512 MB myself."))
    thread = mention(fake_slack, f"C{uid}", "size the cache")
    child_id = ids.child_id(thread.session_id, 1, 0)
    wait_status(child_id, SessionStatus.PAUSED, timeout=60)
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    assert paused.awaited_question is not None
    return thread, child_id, paused.awaited_question


def _released(fake_gemini: FakeGemini, child_id: str, task: str, asks: int = 1) -> None:
    child = wait_status(child_id, SessionStatus.DONE, timeout=60)
    assert child.parent_question is not None
    assert child.parent_question.released
    assert [q.released for q in child.parent_questions] == [True] * asks  # every question of the turn
    responses = function_responses(child_requests(fake_gemini, task)[-1])
    assert [r["response"] for r in responses] == [{"error": delegation.UNANSWERED}] * asks  # errors its model sees
    assert len([s for s in steps.load_steps(child_id) if s.kind == StepKind.ANSWER]) == 1  # resumed once


def test_a_child_asking_a_conversation_that_ends_in_a_continuation_is_released(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect (item 3): only a session that had called delegate itself released the children asking it; the
    operator's answer resumed the parent in a continuation, which ended without answering, and the child waited
    for ever."""
    thread, child_id, _ = _child_asking_a_paused_parent(
        fake_slack, fake_gemini, uid, G.text("Tier two; the helper decides the size."), G.text("Cache: 512 MB.")
    )
    fake_slack.user_message(OPERATOR_ID, thread.channel, "tier two", thread_ts=thread.ts)
    continuation = ids.resumed_by(ids.question_id(thread.session_id, 1, 1))
    wait_status(continuation, SessionStatus.DONE, timeout=60)
    _released(fake_gemini, child_id, f"choose the cache size {uid}")
    wait_status(ids.child_result_id(child_id), SessionStatus.DONE, timeout=60)  # its result still reaches the thread


@pytest.mark.parametrize("asks", [1, 2])
def test_a_child_asking_a_conversation_that_is_abandoned_is_released(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, asks: int
) -> None:
    """The sweep abandons the parent's question (nobody answered): the parent ends abandoned, and the child asking
    it is released at once instead of staying paused with its budget reserved (each of its open questions, when
    one turn asked two)."""
    thread, child_id, question_id = _child_asking_a_paused_parent(fake_slack, fake_gemini, uid,
                                                                  G.text("The helper chose 512 MB."),
                                                                  asks=asks)  # fmt: skip
    question = stored_questions.get_question(question_id)
    assert question is not None
    assert questions.abandon(question, firestore.now() + timedelta(hours=100))
    wait_status(thread.session_id, SessionStatus.ABANDONED, timeout=60)
    _released(fake_gemini, child_id, f"choose the cache size {uid}", asks)


def test_a_result_after_the_conversations_budget_is_spent_is_reported_without_a_model_turn(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect (item 4): a non-blocking child's result that came after its parent ended started a continuation with
    a fresh budget of its own (which could delegate again: a tree outspent its budget with nobody involved). The
    conversation's budget (SESSION_MAX_TURNS=6 here) is one: spent, the result is passed on as it is."""
    task = f"archive the logs {uid}"
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task, "blocking": False}))),
        *(FakeGemini.matching(f"[C{uid}]", G.call("read_thread", limit=1)) for _ in range(5)),
        FakeGemini.matching(f"[C{uid}]", G.text("Out of turns; the helper archives the logs.")),  # the wrap-up
    )
    for_child(fake_gemini, task, G.delayed(6, G.text("Archived 42 files.")))
    thread = mention(fake_slack, f"C{uid}", "archive the logs")
    wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    child_id = ids.child_id(thread.session_id, 1, 0)
    later = wait_status(ids.child_result_id(child_id), SessionStatus.DONE, timeout=60)
    assert later.limits.turns == 0
    assert len(requests_for(fake_gemini, f"[C{uid}]")) == 7  # six turns and the wrap-up: none for the result
    last = answers(fake_slack, thread)[-1]["text"]
    assert "Archived 42 files." in last
    assert "budget was spent" in last

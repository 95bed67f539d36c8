"""Waits of several kinds in one turn, from a model that sends no call ids (issue 23, item 2 and the approval
cases): every call gets exactly one response, in call order, and the turn resumes once.

On the real stack, tasks delivered in parallel by the dispatcher.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import ids, steps
from shared.state.models import SessionStatus, StepKind, WaitKind
from tests.agent_helpers import Thread, function_responses, mention, session, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import executions, press, resumed
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import child_requests, for_child, parent_answers, requests_for, thread_ends_with

pytestmark = pytest.mark.stack
G = FakeGemini


def card_text(fake_slack: FakeSlack, channel: str, thread_ts: str, card_ts: str | None) -> str:
    return str(next(m for m in fake_slack.messages(channel, thread_ts) if m["ts"] == card_ts)["text"])


def test_three_calls_of_one_approve_tier_tool_without_ids_approved_last_to_first(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Each call gets its own outcome; a card says "running" only once a run is queued (before, the first
    approval of three said "running it now" while nothing ran)."""
    calls = [("scale_service", {"name": "api", "replicas": n}) for n in (2, 5, 7)]
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", idless(*calls)),
        FakeGemini.matching(f"[C{uid}]", G.text("Scaled three times.")),
    )
    thread = mention(fake_slack, f"C{uid}", "scale the api three times")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    cards = sorted(stored.get_approvals(paused.awaited(WaitKind.APPROVAL)), key=lambda a: a.call_index)
    assert [a.call_index for a in cards] == [0, 1, 2]
    press(fake_slack, cards[2], blocks.APPROVE_ACTION)
    wait_for(lambda: "approved by" in card_text(fake_slack, thread.channel, thread.ts, cards[2].card_ts), timeout=60,
             what="the first decision on its card")  # fmt: skip
    first = card_text(fake_slack, thread.channel, thread.ts, cards[2].card_ts)
    assert "running it now" not in first
    assert "once the other calls of its turn are decided" in first
    press(fake_slack, cards[1], blocks.APPROVE_ACTION)
    press(fake_slack, cards[0], blocks.APPROVE_ACTION)
    wait_status(resumed(cards[0]), SessionStatus.DONE, timeout=60)
    assert sorted(e["replicas"] for e in executions(thread.session_id)) == [2, 5, 7]
    responses = function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1])
    assert [r["response"]["result"]["replicas"] for r in responses] == [2, 5, 7]


def resizing_the_workers(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, child_turn: dict[str, Any],
                         child_says: str, answer: str, report: str) -> tuple[Thread, str, str]:  # fmt: skip
    """A parent (its model sends no call ids) delegates "resize the workers" to a child whose turn ``child_turn``
    asks it (the child then says ``child_says``); the parent answers ``answer``, then reports ``report``. The parent's
    thread, the child's task and the child's id."""
    task = f"resize the workers {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))))
    for_child(fake_gemini, task, child_turn, G.text(child_says))
    thread = mention(fake_slack, f"C{uid}", "resize the workers")
    child_id = ids.child_id(thread.session_id, 1, 0)
    parent_answers(fake_gemini, uid, idless(("answer_child", {"child_id": child_id, "answer": answer})), report)
    return thread, task, child_id


def test_an_approval_and_a_blocking_ask_parent_in_one_child_turn(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect (item 2): the parent's answer woke the child while the approval was pending; its held call was told it
    did not run, it paused again on a question already answered, and a later Approve said "running it now" while
    nothing ran. Now the child's turn waits on both: the parent's answer is recorded and wakes nothing, the card
    never says "running" before the run is queued, and the Approve resumes the turn once with both responses."""
    thread, task, child_id = resizing_the_workers(
        fake_slack, fake_gemini, uid, idless(("scale_service", {"name": "workers", "replicas": 4}),
                                             ("ask_parent", {"question": "Is 4 enough?", "blocking": True})),
        "Scaled the workers to 4.", "Yes, 4.", "The workers run 4 replicas.",
    )  # fmt: skip
    paused = wait_status(child_id, SessionStatus.PAUSED, timeout=60)
    assert [(w.index, w.kind.value) for w in paused.waiting] == [(0, "approval"), (1, "parent_answer")]
    approval = stored.get_approval(ids.approval_id(child_id, 1, 0))
    assert approval is not None
    wait_for(lambda: (s := session(child_id)) is not None and s.parent_question is not None
             and s.parent_question.answer == "Yes, 4.", timeout=60, what="the parent's answer")  # fmt: skip
    assert wait_status(child_id, SessionStatus.PAUSED).status == SessionStatus.PAUSED  # the approval still waits
    assert executions(child_id) == []
    assert "running" not in card_text(fake_slack, thread.channel, thread.ts, approval.card_ts)
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    wait_for(lambda: thread_ends_with(fake_slack, thread, "The workers run 4 replicas."), timeout=90,
             what="the helper's report")  # fmt: skip
    assert [e["replicas"] for e in executions(child_id)] == [4]
    resumed_child = child_requests(fake_gemini, task)[-1]
    responses = [r["response"] for r in function_responses(resumed_child)]
    assert responses == [{"result": {"scaled": "workers", "replicas": 4}},
                         {"result": {"answer": "Yes, 4.", "from": "the session that delegated your task"}}]  # fmt: skip
    answered = [s for s in steps.load_steps(child_id) if s.kind == StepKind.ANSWER]
    assert len(answered) == 1  # resumed exactly once

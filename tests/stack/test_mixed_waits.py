"""Waits of several kinds in one turn, from a model that sends no call ids (issue 23, item 2 and the approval
cases): every call gets exactly one response, in call order, and the turn resumes once.

On the real stack, tasks delivered in parallel by the dispatcher.
"""

from __future__ import annotations

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import ids, steps
from shared.state.models import SessionStatus, StepKind
from tests.agent_helpers import function_responses, mention, texts, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import executions, press, resumed
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import child_requests, for_child, requests_for

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
    cards = sorted(stored.get_approvals(paused.approval_ids), key=lambda a: a.call_index)
    assert [a.call_index for a in cards] == [0, 1, 2]
    press(fake_slack, cards[2], blocks.APPROVE_ACTION)
    wait_for(lambda: "approved by" in card_text(fake_slack, thread.channel, thread.ts, cards[2].card_ts), timeout=10,
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


def test_an_approval_and_a_blocking_ask_parent_in_one_child_turn(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect (item 2): the blocking question reached the parent while the approval was pending; the parent's
    answer woke the child, its held call was told it did not run, it paused again on a question already answered,
    and a later Approve said "running it now" while nothing ran. Now the question cannot wait beside the held call
    (the model hears so, as it does for ask_operator and delegate), and the turn resumes once, when it is decided."""
    task = f"resize the workers {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))))
    for_child(fake_gemini, task,
              idless(("scale_service", {"name": "workers", "replicas": 4}),
                     ("ask_parent", {"question": "Is 4 enough?", "blocking": True})),
              G.text("Scaled the workers to 4."))  # fmt: skip
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The workers run 4 replicas.")))
    thread = mention(fake_slack, f"C{uid}", "resize the workers")
    child_id = ids.child_id(thread.session_id, 1, 0)
    paused = wait_status(child_id, SessionStatus.PAUSED, timeout=60)
    [approval] = stored.get_approvals(paused.approval_ids)
    child = wait_status(child_id, SessionStatus.PAUSED)
    assert child.parent_question is None  # nothing was asked that could wake it
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(child_id)] == [4]
    resumed_child = child_requests(fake_gemini, task)[-1]
    responses = [r["response"] for r in function_responses(resumed_child)]
    assert responses[0]["result"] == {"scaled": "workers", "replicas": 4}
    assert "cannot wait in the same turn as calls awaiting approval" in responses[1]["error"]
    assert len(responses) == 2
    assert not any("Is 4 enough?" in texts(r) for r in requests_for(fake_gemini, f"[C{uid}]"))
    assert "approved by" in card_text(fake_slack, thread.channel, thread.ts, approval.card_ts)
    answered = [s for s in steps.load_steps(child_id) if s.kind == StepKind.ANSWER]
    assert len(answered) == 1  # resumed exactly once

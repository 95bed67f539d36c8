"""How a paused turn's waits end (issue 23, round 3): every wake-up and every end consults the turn's waiting record.

- A mixed turn whose completing answer met a Cloud Tasks outage: a second press queues the turn's resuming
  continuation (before, it looked for the continuation of the question alone, and requeued nothing).
- Two sibling blocking ``ask_parent`` calls in one child turn are two questions, each with its own answer, answered
  one at a time or by question_id in any order (before, the second overwrote the first and both calls got one
  answer); the child resumes once.
- A child asks its parent while the parent is paused on a mixed turn.
- A Stop of a mixed-turn pause ends everything it waited on, once.
- The sweep expiring the approval that completes a mixed turn resumes it once, the call told it did not run.

On the real stack (emulators), tasks delivered in parallel by the dispatcher; the outage case drives the ingress
in-process with a Cloud Tasks client that cannot connect, as tests/stack/test_ingress_outage.py does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import requests

from bench import cost
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.handlers import slack_interactivity
from shared.slack import blocks
from shared.state import approvals as stored_approvals
from shared.state import firestore, ids, sessions, steps
from shared.state import questions as stored_questions
from shared.state.models import ApprovalStatus, QuestionStatus, SessionStatus, StepKind
from tests.agent_helpers import Thread, function_responses, mention, session, wait_status
from tests.poll import wait_for
from tests.rigs import Outage, queued_again
from tests.stack.test_approvals import executions
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import child_requests, for_child, parent_answers, requests_for, thread_ends_with
from tests.stack.test_mixed_turns import MixedTurn, card_text

pytestmark = pytest.mark.stack
G = FakeGemini
OPERATOR = local.OPERATOR_ID


def test_a_second_press_queues_the_mixed_turn_its_answer_completed_after_a_cloud_tasks_outage(
    rig: cost.Rig, outage: Outage
) -> None:
    """Defect (4a): the answer that completed a mixed turn found Cloud Tasks down (503, the answer and the turn's
    resuming continuation recorded); the operator's second press looked for the question's own continuation, which a
    mixed turn never has, and queued nothing: the turn stayed queued until the rescue job."""
    session_id = rig.start("scale the api where I say")
    rig.script(idless(("ask_operator", {"question": "Which zone?", "options": ["a", "b"]}),
                      ("scale_service", {"name": "api", "replicas": 3})),
               G.text("Scaled in zone b."))  # fmt: skip
    rig.deliver(session_id)
    paused = rig.session(session_id)
    assert [w.kind.value for w in paused.waiting] == ["question", "approval"]
    approval = stored_approvals.get_approval(ids.approval_id(session_id, 1, 1))
    question = stored_questions.get_question(ids.question_id(session_id, 1, 0))
    assert approval is not None
    assert approval.card_ts
    assert question is not None
    assert question.post_ts
    approve = rig.press(approval.channel, approval.card_ts, paused.origin.thread_ts, action_id=blocks.APPROVE_ACTION,
                        value=blocks.approval_value(approval.approval_id, approval.digest))  # fmt: skip
    assert slack_interactivity.handle(*approve)[1] == 200  # recorded; the turn still waits on the question

    def pick() -> tuple[bytes, dict[str, str]]:
        return rig.press(question.channel, question.post_ts or "", question.thread_ts, action_id="answer_2",
                         value=blocks.question_value(question.question_id, 2))  # fmt: skip

    outage.down = True
    _, status = slack_interactivity.handle(*pick())
    assert status == 503
    resumed = ids.resume_id(session_id, 1)
    assert rig.session(resumed).status == SessionStatus.QUEUED  # recorded, not undone
    # the operator presses again
    queued_again(rig, outage, slack_interactivity.handle, pick(), resumed, reply={"ok": True, "answer": "not_open"})


def two_questions(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str,
                  answers: Callable[[str], list[dict[str, Any]]]) -> tuple[Thread, str, str]:  # fmt: skip
    """A parent (no call ids) delegates to a child whose one turn asks it two blocking questions (no call ids); the
    parent's next turns are ``answers(child_id)`` (the arguments of one answer_child call each), then it says it
    answered, then it reports. The thread, the child's task and the child's id."""
    task = f"resize the workers {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(("delegate", {"task": task}))))
    for_child(fake_gemini, task, idless(("ask_parent", {"question": "Which cluster?", "blocking": True}),
                                        ("ask_parent", {"question": "How many replicas?", "blocking": True})),
              G.text("Resized the workers in eu to 4."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "resize the workers")
    child_id = ids.child_id(thread.session_id, 1, 0)
    fake_gemini.script(*[FakeGemini.matching(f"[C{uid}]", idless(("answer_child", {"child_id": child_id, **a})))
                         for a in answers(child_id)],
                       FakeGemini.matching(f"[C{uid}]", G.text("I answered the helper; it will report.")),
                       FakeGemini.matching(f"[C{uid}]", G.text("The workers run 4 replicas in eu.")))  # fmt: skip
    return thread, task, child_id


def each_call_got_its_own_answer(fake_slack: FakeSlack, fake_gemini: FakeGemini, thread: Thread, task: str,
                                 child_id: str) -> list[dict[str, Any]]:  # fmt: skip
    """The child's two calls got "eu" and "4" in call order, it resumed once, and the parent's report is in the
    thread; returns the parent's answer_child responses."""
    wait_for(lambda: thread_ends_with(fake_slack, thread, "The workers run 4 replicas in eu."), timeout=120,
             what="the helper's report")  # fmt: skip
    child = session(child_id)
    assert child is not None
    assert child.status == SessionStatus.DONE
    responses = [r["response"] for r in function_responses(child_requests(fake_gemini, task)[-1])]
    said = "the session that delegated your task"
    assert responses == [{"result": {"answer": "eu", "from": said}}, {"result": {"answer": "4", "from": said}}]
    assert len([s for s in steps.load_steps(child_id) if s.kind == StepKind.ANSWER]) == 1  # resumed once
    answered = [r["response"] for q in requests_for(fake_gemini, f"[C{uid_of(thread)}]") for r in function_responses(q)
                if r["name"] == "answer_child"]  # fmt: skip
    return [a for i, a in enumerate(answered) if a not in answered[:i]]


def child_question_notes(found: Any) -> list[dict[str, Any]]:
    """The child_question notes (one JSON line each) in the text of these model requests."""
    if isinstance(found, dict):
        return [n for value in found.values() for n in child_question_notes(value)]
    if isinstance(found, list):
        return [n for value in found for n in child_question_notes(value)]
    if not isinstance(found, str) or "child_question" not in found:
        return []
    lines = [json.loads(line) for line in found.splitlines() if line.startswith("{")]
    return [line for line in lines if isinstance(line, dict) and line.get("kind") == "child_question"]


def uid_of(thread: Thread) -> str:
    return thread.channel.removeprefix("C")


def test_two_blocking_ask_parent_calls_in_one_child_turn_each_get_their_own_answer_one_at_a_time(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a child held one question to its parent, so the second ask_parent call of a turn overwrote the first
    and the parent's one answer was the response of both. Now each call is its own question: the parent answers
    them one at a time without naming them (the oldest open one first; each answer says what still waits), each call
    gets its own answer in call order, and the child resumes once."""
    thread, task, child_id = two_questions(fake_slack, fake_gemini, uid, lambda _: [{"answer": "eu"}, {"answer": "4"}])
    answered = each_call_got_its_own_answer(fake_slack, fake_gemini, thread, task, child_id)
    first, second = f"pq-{child_id}-1-0", f"pq-{child_id}-1-1"
    assert [a["result"]["question_id"] for a in answered] == [first, second]
    assert answered[0]["result"]["still_waiting"] == [{"question_id": second, "question": "How many replicas?"}]
    assert answered[1]["result"]["still_waiting"] == []
    told = {(n["question_id"], n["question"]) for n in child_question_notes(requests_for(fake_gemini, f"[C{uid}]"))}
    assert {(first, "Which cluster?"), (second, "How many replicas?")} <= told  # each reached the parent, by its id


def test_two_blocking_ask_parent_calls_answered_by_question_id_out_of_order(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The parent answers the second question first, by its question_id, then the first: each call still gets its
    own answer in call order, and the child resumes once, after the second answer."""
    thread, task, child_id = two_questions(fake_slack, fake_gemini, uid, lambda child: [
        {"answer": "4", "question_id": f"pq-{child}-1-1"}, {"answer": "eu", "question_id": f"pq-{child}-1-0"},
    ])  # fmt: skip
    answered = each_call_got_its_own_answer(fake_slack, fake_gemini, thread, task, child_id)
    assert [a["result"]["question_id"] for a in answered] == [f"pq-{child_id}-1-1", f"pq-{child_id}-1-0"]


def test_a_child_asks_its_parent_while_the_parent_waits_on_a_mixed_turn(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The parent waits on an operator question and a blocking child; the child asks it a blocking question. The
    parent can answer only once it runs, so it stops waiting for the child (its delegate call gets "still running",
    the result comes as a note) and resumes when the operator answers, reads the child's question and answers it;
    the child then finishes and its result reaches the thread."""
    task = f"count the nodes {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(
        ("ask_operator", {"question": "Which region?"}), ("delegate", {"task": task}),
    )))  # fmt: skip
    for_child(fake_gemini, task, idless(("ask_parent", {"question": "Count drained nodes too?", "blocking": True})),
              G.text("12 nodes, drained ones included."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "count the nodes")
    child_id = ids.child_id(thread.session_id, 1, 1)
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    assert [w.kind.value for w in paused.waiting] == ["question", "child"]
    wait_for(lambda: (s := session(thread.session_id)) is not None and s.waiting and s.waiting[1].released,
             timeout=60, what="the child's question to release the parent's wait on it")  # fmt: skip
    assert session(thread.session_id).status == SessionStatus.PAUSED  # type: ignore[union-attr]  # the question waits
    parent_answers(
        fake_gemini,
        uid,
        idless(("answer_child", {"child_id": child_id, "answer": "Yes."})),
        "There are 12 nodes in eu-west.",
    )
    sent = fake_slack.user_message(OPERATOR, thread.channel, "eu-west", thread_ts=thread.ts)
    assert all(d["status"] == 200 for d in sent["deliveries"]), sent
    wait_for(lambda: thread_ends_with(fake_slack, thread, "There are 12 nodes in eu-west."), timeout=120,
             what="the child's result in the thread")  # fmt: skip
    resumed = requests_for(fake_gemini, f"[C{uid}]")
    first_resume = next(r for r in resumed if len(function_responses(r)) == 2)
    outcomes = [r["response"] for r in function_responses(first_resume)]
    assert outcomes[0]["result"]["answer"] == "eu-west"
    assert outcomes[1]["result"]["status"] == "still running"
    child_said = [r["response"] for r in function_responses(child_requests(fake_gemini, task)[-1])]
    assert child_said == [{"result": {"answer": "Yes.", "from": "the session that delegated your task"}}]


def said_not_run(fake_slack: FakeSlack, thread: Thread, card_ts: str | None) -> None:
    wait_for(lambda: "not run" in card_text(fake_slack, thread, card_ts), timeout=30, what="the card's 'not run'")


def test_a_stop_of_a_mixed_turn_pause_ends_everything_it_waits_on_once(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A Stop while the turn waits on a question, an approval and a child: the session stops, the question is
    cancelled (its post says so), the approval is denied (never runs, its card says so), the child is stopped, the
    thread says "Stopped by" once, and nothing resumes; a second Stop changes nothing."""
    turn = MixedTurn(fake_slack, fake_gemini, uid)
    thread = turn.thread
    for _ in range(2):
        sent = fake_slack.user_message(OPERATOR, thread.channel, "stop", thread_ts=thread.ts)
        assert all(d["status"] == 200 for d in sent["deliveries"]), sent
        wait_status(thread.session_id, SessionStatus.STOPPED, timeout=60)
    wait_status(turn.child_id, SessionStatus.STOPPED, timeout=60)
    question = stored_questions.get_question(turn.question_id)
    assert question is not None
    assert question.status == QuestionStatus.CANCELLED
    for approval_id in (turn.approval_id, turn.child_approval_id):
        approval = stored_approvals.get_approval(approval_id)
        assert approval is not None
        assert approval.status == ApprovalStatus.DENIED
        said_not_run(fake_slack, thread, approval.card_ts)
    posts = [m for m in fake_slack.messages(thread.channel, thread.ts) if "Stopped by" in str(m.get("text"))]
    assert len(posts) == 1
    assert "Cancelled" in next(str(m["text"]) for m in fake_slack.messages(thread.channel, thread.ts)
                               if m["ts"] == question.post_ts)  # fmt: skip
    assert sessions.get_session(turn.resumed) is None
    assert executions(thread.session_id) == []
    assert executions(turn.child_id) == []


def test_the_sweep_expiring_the_approval_that_completes_a_mixed_turn_resumes_it_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The question is answered; the approval is left too long and the sweep expires it: that completes the turn,
    which resumes once, the answer and the expiry (an error the model sees; nothing ran) each the response of its
    call; a second sweep changes nothing."""
    fake_gemini.script(
        FakeGemini.matching(
            f"[C{uid}]",
            idless(("ask_operator", {"question": "Which region?"}), ("scale_service", {"name": "api", "replicas": 5})),
        ),
        FakeGemini.matching(f"[C{uid}]", G.text("The scaling expired; nothing changed in eu-west.")),
    )
    thread = mention(fake_slack, f"C{uid}", "scale the api where I say")
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    sent = fake_slack.user_message(OPERATOR, thread.channel, "eu-west", thread_ts=thread.ts)
    assert all(d["status"] == 200 for d in sent["deliveries"]), sent
    question_id = ids.question_id(thread.session_id, 1, 0)
    wait_for(lambda: (q := stored_questions.get_question(question_id)) is not None
             and q.status == QuestionStatus.ANSWERED, timeout=30, what="the answer")  # fmt: skip
    approval_id = ids.approval_id(thread.session_id, 1, 1)
    firestore.db().collection("approvals").document(approval_id).update(
        {"asked_at": firestore.now() - timedelta(hours=500)}
    )
    swept = requests.post(stack.function_url("sweep"), json={}, timeout=60).json()
    assert swept["approvals_expired"] >= 1
    resumed = ids.resume_id(thread.session_id, 1)
    wait_status(resumed, SessionStatus.DONE, timeout=90)
    again = requests.post(stack.function_url("sweep"), json={}, timeout=60).json()
    assert again["approvals_expired"] == 0
    responses = function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1])
    assert [r["name"] for r in responses] == ["ask_operator", "scale_service"]
    assert responses[0]["response"]["result"]["answer"] == "eu-west"
    assert "expired" in responses[1]["response"]["error"]
    assert executions(thread.session_id) == []
    answered = [s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]
    assert len(answered) == 1
    approval = stored_approvals.get_approval(approval_id)
    assert approval is not None
    assert approval.status == ApprovalStatus.EXPIRED
    assert "expired" in card_text(fake_slack, thread, approval.card_ts)

"""One model turn that waits on several kinds of things at once (issue 23, the mixed turn): an ``ask_operator``, an
approve-tier call and a blocking ``delegate`` together, from a model that sends no call ids. The turn pauses once,
waits on every kind, and resumes exactly once when every call has an outcome, one response per call in call order,
whatever order the outcomes arrive in.

On the real stack: the operator replies in the thread and presses the cards; the child ends when its own approval
is pressed (so the test chooses when); the resuming task is delivered in parallel, as Cloud Tasks may.
"""

from __future__ import annotations

import itertools
import logging
from datetime import timedelta
from typing import Any

import pytest
import requests

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import answers, questions, stopping
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import firestore, ids, sessions, steps
from shared.state import questions as stored_questions
from shared.state.models import Approval, ApprovalStatus, QuestionStatus, SessionStatus, StepKind
from tests import delivery
from tests.agent_helpers import Thread, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import executions, press
from tests.stack.test_call_identity import idless
from tests.stack.test_delegation import for_child, requests_for

pytestmark = pytest.mark.stack
G = FakeGemini
OPERATOR = local.OPERATOR_ID
STEPS = ("answer", "approve", "child")


def card_text(fake_slack: FakeSlack, thread: Thread, card_ts: str | None) -> str:
    return str(next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == card_ts)["text"])


class MixedTurn:
    """A parent whose one model turn asks the operator, makes an approve-tier call and delegates, without ids."""

    def __init__(self, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> None:
        self.fake_slack, self.fake_gemini, self.uid = fake_slack, fake_gemini, uid
        self.task = f"resize the workers {uid}"
        fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(
            ("ask_operator", {"question": "Which region?"}),
            ("scale_service", {"name": "api", "replicas": 3}),
            ("delegate", {"task": self.task}),
        )))  # fmt: skip
        # The child's own call needs approval, so it ends when the test presses its card.
        for_child(fake_gemini, self.task, idless(("scale_service", {"name": "workers", "replicas": 4})),
                  G.text("The workers run 4 replicas."))  # fmt: skip
        fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("All three are done.")))
        self.thread = mention(fake_slack, f"C{uid}", "resize the api and the workers")
        parent = self.thread.session_id
        self.child_id = ids.child_id(parent, 1, 2)
        self.question_id = ids.question_id(parent, 1, 0)
        self.approval_id = ids.approval_id(parent, 1, 1)
        self.child_approval_id = ids.approval_id(self.child_id, 1, 0)
        self.resumed = ids.resume_id(parent, 1)
        paused = wait_status(parent, SessionStatus.PAUSED, timeout=60)
        assert [(w.index, w.kind.value) for w in paused.waiting] == [(0, "question"), (1, "approval"), (2, "child")]
        wait_status(self.child_id, SessionStatus.PAUSED, timeout=60)  # on its own card

    def approval(self, approval_id: str) -> Any:
        found = stored.get_approval(approval_id)
        assert found is not None
        assert found.card_ts is not None
        return found

    def resolve(self, step: str) -> None:
        if step == "answer":
            sent = self.fake_slack.user_message(OPERATOR, self.thread.channel, "eu-west", thread_ts=self.thread.ts)
            assert all(d["status"] == 200 for d in sent["deliveries"]), sent
            wait_for(lambda: (q := stored_questions.get_question(self.question_id)) is not None
                     and q.status == QuestionStatus.ANSWERED, timeout=30, what="the answer")  # fmt: skip
        elif step == "approve":
            press(self.fake_slack, self.approval(self.approval_id), blocks.APPROVE_ACTION)
            wait_for(lambda: self.approval(self.approval_id).status == ApprovalStatus.APPROVED, timeout=30,
                     what="the decision")  # fmt: skip
        else:
            press(self.fake_slack, self.approval(self.child_approval_id), blocks.APPROVE_ACTION)
            wait_status(self.child_id, SessionStatus.DONE, timeout=60)

    def still_waiting(self) -> None:
        parent = sessions.get_session(self.thread.session_id)
        assert parent is not None
        assert parent.status == SessionStatus.PAUSED
        assert sessions.get_session(self.resumed) is None  # nothing resumed it yet
        assert executions(self.thread.session_id) == []

    def final_responses(self) -> list[dict[str, Any]]:
        return function_responses(requests_for(self.fake_gemini, f"[C{self.uid}]")[-1])

    def resumed_once(self) -> None:
        answered = [s for s in steps.load_steps(self.thread.session_id) if s.kind == StepKind.ANSWER]
        assert len(answered) == 1
        assert [(r.seq, r.index) for r in answered[0].answers or []] == [(1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("order", list(itertools.permutations(STEPS)), ids="-".join)
@pytest.mark.timeout(300)  # a parent, a child and three decisions on a busy machine (the first also starts the stack)
def test_a_question_an_approval_and_a_child_in_one_turn_resume_it_once_in_any_order(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, order: tuple[str, ...]
) -> None:
    """Before, the ask and the delegate were refused beside the held call. Now each outcome is recorded as it comes;
    the card says "running" only for the decision that queues the run; the last outcome resumes the turn once
    (its task delivered three times at once), each call getting its own response, in call order."""
    turn = MixedTurn(fake_slack, fake_gemini, uid)
    for step in order[:-1]:
        turn.resolve(step)
        turn.still_waiting()
    if "approve" in order[:-1]:
        text = card_text(fake_slack, turn.thread, turn.approval(turn.approval_id).card_ts)
        assert "running it now" not in text
        assert "once the other calls of its turn are decided" in text
    turn.resolve(order[-1])
    wait_for(lambda: sessions.get_session(turn.resumed), timeout=30, what="the resuming continuation")
    attempts = delivery.deliver(stack.function_url("agent_session"), turn.resumed, task="resume", copies=3)
    assert 200 in {
        a.status for a in attempts
    }  # a copy that lost the race for the claim is retried, as Cloud Tasks does
    wait_status(turn.resumed, SessionStatus.DONE, timeout=90)
    responses = turn.final_responses()
    assert [r["name"] for r in responses] == ["ask_operator", "scale_service", "delegate"]
    assert responses[0]["response"]["result"]["answer"] == "eu-west"
    assert responses[1]["response"]["result"] == {"scaled": "api", "replicas": 3}
    assert responses[2]["response"] == {"result": "The workers run 4 replicas."}
    assert all("id" not in r for r in responses)
    assert [e["replicas"] for e in executions(turn.thread.session_id)] == [3]
    turn.resumed_once()
    card_ts = turn.approval(turn.approval_id).card_ts
    updates = [str(c["args"].get("text")) for c in fake_slack.calls("chat.update") if c["args"].get("ts") == card_ts]
    assert any("running it now" in text for text in updates)  # said once the run was queued (at the last outcome)


@pytest.mark.timeout(360)  # a restart on a busy machine, and Cloud Tasks' retry
def test_a_mixed_turn_whose_resuming_worker_is_killed_in_the_approved_call_answers_each_call_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """SIGKILL inside the approved call of the resumed turn: the takeover does not run it again (the ledger says it
    started: outcome unknown), and every call still gets exactly one response, in call order."""
    turn = MixedTurn(fake_slack, fake_gemini, uid)
    turn.resolve("child")
    turn.resolve("answer")
    fake_slack.slow("chat.postMessage", 60, match="Scaling `api`")  # the worker is inside the tool when it dies
    turn.resolve("approve")
    wait_for(lambda: [c for c in fake_slack.calls("chat.postMessage") if "Scaling `api`" in repr(c["args"])],
             timeout=60, what="the approved call to start")  # fmt: skip
    stack.kill_function("agent_session")
    stack.start_function("agent_session")
    wait_status(turn.resumed, SessionStatus.DONE, timeout=120)
    assert executions(turn.thread.session_id) == []  # it died before recording: never re-run
    responses = turn.final_responses()
    assert [r["name"] for r in responses] == ["ask_operator", "scale_service", "delegate"]
    assert responses[0]["response"]["result"]["answer"] == "eu-west"
    assert "outcome unknown" in responses[1]["response"]["error"]
    assert responses[2]["response"] == {"result": "The workers run 4 replicas."}
    turn.resumed_once()


def waiting_on_a_question_and_an_approval(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> Thread:
    """A session paused on a turn (without ids) that asks the operator and makes an approve-tier call."""
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(
        ("ask_operator", {"question": "Which region?"}), ("scale_service", {"name": "api", "replicas": 5}),
    )))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scale the api where I say")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    assert [w.kind.value for w in paused.waiting] == ["question", "approval"]
    return thread


def approve_refused(fake_slack: FakeSlack, thread: Thread, approval: Approval, refusal: str) -> Approval:
    """An Approve of ``approval`` refused with a private note saying ``refusal``: the approval as it is then, which
    nobody approved."""
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    wait_for(lambda: any(refusal in e["text"] for e in fake_slack.ephemerals(thread.channel)),
             timeout=30, what="the refusal")  # fmt: skip
    after = stored.get_approval(approval.approval_id)
    assert after is not None
    assert after.approved_by == []
    return after


def abandoned_with_its_approval(fake_slack: FakeSlack, thread: Thread) -> None:
    """The session is abandoned and its turn's approval expired with it: its card says it did not run, a later
    Approve is refused with a plain message and changes nothing, and nothing ran."""
    wait_status(thread.session_id, SessionStatus.ABANDONED, timeout=30)
    approval = stored.get_approval(ids.approval_id(thread.session_id, 1, 1))
    assert approval is not None
    assert approval.status == ApprovalStatus.EXPIRED
    assert "not run" in card_text(fake_slack, thread, approval.card_ts)
    after = approve_refused(fake_slack, thread, approval, "expired; nothing ran")
    assert after.status == ApprovalStatus.EXPIRED
    assert executions(thread.session_id) == []
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None  # and nothing resumed the turn


def test_the_sweep_abandoning_a_mixed_turns_question_ends_its_approvals_too(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect (4b): a turn waits on a question and an approval; the sweep abandoned the question, ending the session,
    and left the approval pending, its card still asking. Now everything the turn waited on ends with it: the
    approval expires (it never runs), its card says why, and a later Approve is refused with a plain message and
    changes nothing."""
    thread = waiting_on_a_question_and_an_approval(fake_slack, fake_gemini, uid)
    question_id = ids.question_id(thread.session_id, 1, 0)
    firestore.db().collection("questions").document(question_id).update(
        {"asked_at": firestore.now() - timedelta(hours=500)}
    )
    swept = requests.post(stack.function_url("sweep"), json={}, timeout=60).json()
    assert swept["abandoned"] >= 1
    abandoned_with_its_approval(fake_slack, thread)


def test_a_newer_question_ending_a_mixed_turn_ends_its_approvals_too(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A newer blocking question from another session of the thread cancels the older one and abandons the session
    paused on it (``questions.cancel_older``), which left that turn's approval pending, its card still asking, as
    the sweep's abandon once did. Now it ends as the sweep's does: the approval expires and never runs."""
    thread = waiting_on_a_question_and_an_approval(fake_slack, fake_gemini, uid)
    questions.cancel_older(thread.channel, thread.ts, keep=f"newer-{uid}", asker=f"another-session-{uid}")
    abandoned_with_its_approval(fake_slack, thread)


@pytest.mark.parametrize("dies_in", ["end_session", "end_waits"])
def test_a_newer_question_retried_after_dying_between_its_cancel_and_the_end_ends_the_older_turn(
    stack: Stack,
    fake_slack: FakeSlack,
    fake_gemini: FakeGemini,
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
    dies_in: str,
) -> None:
    """Defect: a newer blocking question cancels the older one, then ends the session paused on it. A failure in
    between (here: ending the session, or ending the rest of its turn's waits, fails once, as a worker dying there
    would stop) left the older question cancelled, and the ask's retry, finding it open no more, skipped it: the
    older session stayed paused for ever on a cancelled question (the sweep ages open questions and pending
    approvals, never a session paused on neither), its approval pending. The retry now finishes what the first
    try began."""
    thread = waiting_on_a_question_and_an_approval(fake_slack, fake_gemini, uid)
    owner = sessions if dies_in == "end_session" else stopping
    real = getattr(owner, dies_in)

    def dies_once(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(owner, dies_in, real)
        raise RuntimeError(f"died in {dies_in}")

    monkeypatch.setattr(owner, dies_in, dies_once)
    newer, asker = f"q-newer-{uid}", f"another-session-{uid}"
    with pytest.raises(RuntimeError, match=f"died in {dies_in}"):
        questions.cancel_older(thread.channel, thread.ts, keep=newer, asker=asker)
    older = stored_questions.get_question(ids.question_id(thread.session_id, 1, 0))
    assert older is not None
    assert older.status == QuestionStatus.CANCELLED
    questions.cancel_older(thread.channel, thread.ts, keep=newer, asker=asker)  # the ask's retry
    abandoned_with_its_approval(fake_slack, thread)


def test_a_decision_for_a_call_nothing_waits_on_is_refused_and_changes_nothing(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A turn waits on a question and an approval; its session ends without its waits being closed (a failure
    outside the product's paths). A later Approve is refused with a plain message, nothing runs, nothing resumes;
    the refusal closes what the failed session left open (round 3, session 17: before, the approval stayed pending and
    its card kept offering Approve), as the failure would have."""
    thread = waiting_on_a_question_and_an_approval(fake_slack, fake_gemini, uid)
    ended = sessions.end_session(thread.session_id, expect=SessionStatus.PAUSED, status=SessionStatus.FAILED)
    assert ended is not None
    approval = stored.get_approval(ids.approval_id(thread.session_id, 1, 1))
    assert approval is not None
    after = approve_refused(fake_slack, thread, approval, "Nothing waits on this call any more")
    assert after.approved_by == []
    wait_for(lambda: "not run: the session failed" in card_text(fake_slack, thread, approval.card_ts),
             timeout=30, what="the card closed")  # fmt: skip
    closed = stored.get_approval(approval.approval_id)
    assert closed is not None
    assert closed.status == ApprovalStatus.EXPIRED
    assert executions(thread.session_id) == []
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None


@pytest.mark.timeout(300)
def test_answering_a_paused_mixed_turns_question_logs_that_the_turn_still_waits(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, the answer to one question of a paused turn that still waited on its approval and its child was
    logged as "answer queued as a note for the running session": the session was paused, not running."""
    turn = MixedTurn(fake_slack, fake_gemini, uid)
    question = stored_questions.get_question(turn.question_id)
    assert question is not None
    with caplog.at_level(logging.INFO, logger="shared.asks.answers"):
        outcome = answers.answer(question, user=OPERATOR, text="eu-west", answer_ts=f"{uid}.9")
    assert outcome.result == answers.AnswerOutcome.NOTED
    said = [r.getMessage() for r in caplog.records if r.name == "shared.asks.answers"]
    assert "answer recorded; the paused turn still waits on the rest of its record" in said
    assert not any("running session" in line for line in said)
    turn.still_waiting()

"""A continuation's reads before its first model request (issue 28.1), on the emulator: its task names the record it
resumes and its transcript's first free step id when it was woken, so its claim reads the transcript's steps by id in
its one batched read (``shared.state.claim_reads``), used only if that id is still free; else, or with a task that
names nothing, the run queries the transcript after the claim, reading what its record came to beside the query
(``shared.agent.waits.outcomes``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.state import claim_reads, ids, sessions, steps
from shared.state.firestore import now, session_ref
from shared.state.models import SessionStatus, Step, StepKind, Waiting, WaitKind
from shared.state.session_model import Session
from shared.state.sessions import Claim, ClaimResult
from shared.state.updates import session_update
from shared.usecases import worker
from tests.poll import wait_for
from tests.rigs import asked_and_answered, counted_rig

pytestmark = pytest.mark.stack

LATER = timedelta(minutes=10)  # a claim this much later finds every lease taken in the test expired


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    with counted_rig(stack, monkeypatch) as rig:
        yield rig


def issued(rig: cost.Rig, since: int, prefix: str) -> Callable[[], bool]:
    return lambda: any(entry.startswith(prefix) for entry in rig.counter.snapshot().trace[since:])


def test_the_claim_reads_the_transcript_by_id_and_nothing_queries_it(rig: cost.Rig) -> None:
    asker, continuation = asked_and_answered(rig)
    stored = steps.load_steps(asker)
    body = json.loads(rig.created_tasks.bodies[continuation])
    assert body["transcript_next"] == stored[-1].seq + 1 == rig.session(continuation).next_seq
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    assert not [entry for entry in ops.trace if entry.startswith("RunQuery")], ops.trace
    assert not [entry for entry in ops.trace if entry.endswith(" 0r")], ops.trace


def test_a_task_naming_no_record_has_its_transcript_queried(rig: cost.Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that names no record (one queued by an older version): the run queries its transcript after the claim
    and reads what its record came to at the same time: the query waits here until the outcomes' read is sent."""
    _, continuation = asked_and_answered(rig)
    rig.created_tasks.bodies.pop(continuation)  # delivered as {"session_id": ...} alone
    load = steps.load_steps

    def load_once_the_outcomes_are_asked_for(transcript_id: str) -> list[Step]:
        since = len(rig.counter.snapshot().trace)
        wait_for(issued(rig, since, "BatchGetDocuments"), timeout=30, what="the outcomes' read sent beside the query")
        return load(transcript_id)

    monkeypatch.setattr(steps, "load_steps", load_once_the_outcomes_are_asked_for)
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    claimed = ops.trace.index("Commit 2w")  # the claim's commit; then the query and ONE read of the outcomes
    assert sorted(ops.trace[claimed + 1 : claimed + 3]) == ["BatchGetDocuments 1r", "RunQuery 3r"], ops.trace
    # The resumed step's commit, no empty read: one commit fenced on what the claim left (``step_fence``).
    assert ops.trace[claimed + 3] == "Commit 3w", ops.trace


def _run_again_under_a_dead_lease(session_id: str) -> Session:
    """``session_id`` running under a worker whose lease has run out but who is still alive: it may still store a
    step until a claim takes its transcript (every step commit checks the worker and the transcript's writer)."""
    session_ref(session_id).update(
        session_update(status=SessionStatus.RUNNING, worker="w-slow", lease_until=now() - timedelta(seconds=1))
    )
    found = sessions.get_session(session_id)
    assert found is not None
    return found


def _store_a_step(writer: Session) -> Step:
    latest = steps.load_steps(writer.transcript)[-1].seq
    step = Step(seq=latest + 1, session_id=writer.session_id, kind=StepKind.NOTES, content=None, audit=[], at=now())
    steps.commit_step(writer, step, lease_seconds=60)
    return step


def _writer(asker: str, continuation: str, *, other: bool) -> Session:
    """The transcript's writer, alive under an expired lease: the asker itself, or (``other``) another session of
    its transcript the root names as its writer."""
    if not other:
        return _run_again_under_a_dead_lease(asker)
    data = session_ref(continuation).get().to_dict() or {}
    other_id = f"{continuation}-earlier"
    session_ref(other_id).set({**data, "session_id": other_id})
    session_ref(asker).update(session_update(transcript_writer=other_id))
    return _run_again_under_a_dead_lease(other_id)


def _claim(continuation: str, resumes: list[Waiting], transcript_next: int) -> Claim:
    claim = sessions.claim_session(continuation, worker="w-new", task="t", attempt=0, lease_seconds=60,
                                   at=datetime.now(UTC) + LATER, resumes=resumes,
                                   transcript_next=transcript_next)  # fmt: skip
    assert claim.result == ClaimResult.CLAIMED, claim
    assert claim.session is not None
    return claim


@pytest.mark.parametrize("other", [False, True], ids=["the root writes", "another session writes"])
def test_a_step_stored_after_the_task_was_made_is_not_missed(rig: cost.Rig, other: bool) -> None:
    """The writer stores a step at the id the task named as free, then the claim takes the transcript over: the
    claim's steps are not the whole transcript, so the run is not handed them (it queries, and has that step)."""
    asker, continuation = asked_and_answered(rig)
    record, named = rig.session(continuation).waiting, rig.session(continuation).next_seq
    writer = _writer(asker, continuation, other=other)
    late = _store_a_step(writer)
    assert late.seq == named
    assert _claim(continuation, record, named).transcript is None


@pytest.mark.parametrize("other", [False, True], ids=["the root writes", "another session writes"])
def test_the_claims_steps_are_the_whole_transcript_when_the_named_id_is_free(rig: cost.Rig, other: bool) -> None:
    asker, continuation = asked_and_answered(rig)
    writer = _writer(asker, continuation, other=other)
    _store_a_step(writer)  # before the free id is taken as named: a continuation woken after it
    claim = _claim(continuation, rig.session(continuation).waiting, len(steps.load_steps(asker)))
    assert claim.transcript == steps.load_steps(asker)
    # the writer's next step is refused now: the claim took the transcript
    with pytest.raises(steps.LeaseLost):
        _store_a_step(writer)


def test_a_step_committed_during_the_claim_is_never_missed(rig: cost.Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old writer, alive under an expired lease, stores a step at the named free id while the claim's
    transaction has read the steps and not committed yet (on a thread of its own, as another instance would). Either
    the step lands first and the claim, retried, finds the id taken (the run queries), or the claim commits first and
    the writer is refused: never a claim that hands on steps missing a stored one."""
    asker, continuation = asked_and_answered(rig)
    record, named = rig.session(continuation).waiting, rig.session(continuation).next_seq
    writer = _writer(asker, continuation, other=False)
    outcome: dict[str, Any] = {}
    read = claim_reads.read

    def store() -> None:
        try:
            outcome["stored"] = _store_a_step(writer)
        except steps.LeaseLost as refused:
            outcome["refused"] = refused

    def read_then_a_step(*args: Any, **kwargs: Any) -> claim_reads.ClaimReads:
        found = read(*args, **kwargs)
        if "thread" not in outcome:  # the claim's first attempt, between its batched read and its commit
            outcome["thread"] = threading.Thread(target=store)
            outcome["thread"].start()
            outcome["thread"].join(timeout=3)  # the emulator may hold the step's commit until the claim ends
        return found

    monkeypatch.setattr(claim_reads, "read", read_then_a_step)
    claim = _claim(continuation, record, named)
    outcome["thread"].join()
    assert ("stored" in outcome) != ("refused" in outcome), outcome
    if "stored" in outcome:
        assert outcome["stored"].seq == named
        assert claim.transcript is None  # the id was taken before the claim committed: the run queries
    else:
        assert claim.transcript == steps.load_steps(asker)


def test_the_delivery_hands_the_run_the_whole_transcript(rig: cost.Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step stored after the continuation's task was made, before its claim: the run is not handed the claim's
    steps (they miss it); it queries, and resumes with that step in its transcript."""
    asker, continuation = asked_and_answered(rig)
    writer = _writer(asker, continuation, other=False)
    handed: list[list[Step] | None] = []
    claim = sessions.claim_session

    def claim_after_a_step(*args: Any, **kwargs: Any) -> Claim:
        _store_a_step(writer)  # after the task named the free id, before the claim
        return claim(*args, **{**kwargs, "at": datetime.now(UTC) + LATER})

    def recorded(found: Claim, **kwargs: Any) -> Any:
        handed.append(kwargs.get("transcript"))
        return None

    monkeypatch.setattr(sessions, "claim_session", claim_after_a_step)
    monkeypatch.setattr(worker, "_after_claim", recorded)
    body = json.loads(rig.created_tasks.bodies[continuation])
    resumes = [Waiting.from_doc(entry) for entry in body["resumes"]]
    worker.run_delivery(continuation, task="t", attempt=0, resumes=resumes, transcript_next=body["transcript_next"])
    assert handed == [None]  # the run queries again, and has the step


def _answered_step(asker: str) -> dict[str, Any]:
    """The function response the resumed step stored for the operator's answer."""
    [step] = [step for step in steps.load_steps(asker) if step.kind == StepKind.ANSWER]
    assert step.content is not None
    [part] = step.content["parts"]
    return dict(part["function_response"]["response"])


def test_the_answered_question_is_read_and_its_step_stored_by_the_claim(rig: cost.Rig) -> None:
    """The continuation's task names the record it resumes: the claim reads the question and the transcript's steps
    with the session and its transcript's root, and stores the step resuming the turn in its own commit; nothing is
    read or written after it before the model is asked (its turn's step is the next commit, fenced on what the claim
    left: ``step_fence``)."""
    asker, continuation = asked_and_answered(rig)
    assert b'"resumes"' in rig.created_tasks.bodies[continuation]
    before = len(steps.load_steps(asker))
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    rest = list(ops.trace)
    claimed = rest.index("Commit 3w")  # the claim's commit: the session, the root's writer, the resumed step
    # the session, its root, the question, the steps and the free id after them
    batch = f"BatchGetDocuments {3 + before + 1}r"
    assert rest[: claimed + 1] == ["BeginTransaction", batch, "Commit 3w"], ops.trace
    assert rest[claimed + 1] == "Commit 3w", ops.trace  # its turn's step, the root's writer, the session
    assert _answered_step(asker)["result"]["matched_option"] == "postgres"
    [stored] = [step for step in steps.load_steps(asker) if step.kind == StepKind.ANSWER]
    assert stored.session_id == continuation
    assert len(stored.audit) == 1


def test_a_task_naming_another_record_reads_the_outcomes_after_the_claim(rig: cost.Rig) -> None:
    """A stale task (its body names a record the session does not hold): what the claim read for it is not used;
    the run reads its own record's outcomes after the claim, as before, and resumes with the operator's answer."""
    asker, continuation = asked_and_answered(rig)
    [entry] = rig.session(continuation).waiting
    other = Waiting(entry.seq, entry.index + 1, WaitKind.QUESTION, ids.question_id(asker, entry.seq, entry.index + 1))
    stored = len(steps.load_steps(asker))
    rig.created_tasks.bodies[continuation] = json.dumps(
        {"session_id": continuation, "resumes": [other.to_doc()], "transcript_next": stored}
    ).encode()
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    claimed = ops.trace.index("Commit 2w")
    # the question it named, read for nothing, with the transcript's steps (used: the free id was free)
    assert ops.trace[claimed - 1] == f"BatchGetDocuments {3 + stored + 1}r", ops.trace
    assert ops.trace[claimed + 1] == "BatchGetDocuments 1r", ops.trace  # the session's own record's question
    assert not [entry for entry in ops.trace if entry.startswith("RunQuery")], ops.trace
    assert _answered_step(asker)["result"]["matched_option"] == "postgres"


def test_a_child_ending_while_the_turns_continuation_is_queued_reports_to_it(rig: cost.Rig) -> None:
    """A non-blocking child ends after the operator's answer woke its parent's turn and before that turn's
    continuation claimed the transcript: the continuation reads its result (its step commits read the root's list),
    so no late-result continuation is started beside it, which would take the transcript and add steps after the
    turn still waiting for its responses."""
    question = {"question": "sqlite or postgres?", "options": ["sqlite", "postgres"]}
    asks = FakeGemini.calls(("delegate", {"task": f"find the latest schema [{rig.uid}]", "blocking": False}),
                            ("ask_operator", question))  # fmt: skip
    parent, continuation = asked_and_answered(rig, asks)
    [child] = [c for c in rig.created_tasks.bodies if c.startswith(f"child-{parent}-")]
    rig.expect(parent, SessionStatus.RESUMED)
    rig.script(FakeGemini.text(f"the schema is v7 [{rig.uid}]"))
    rig.deliver(child)
    rig.expect(child, SessionStatus.DONE)
    assert sessions.get_session(ids.child_result_id(child)) is None  # nobody else takes the transcript
    rig.script(FakeGemini.text("Going with postgres, schema v7."))
    rig.deliver(continuation)
    rig.expect(continuation, SessionStatus.DONE)
    shown = json.dumps([step.content for step in steps.load_steps(parent)])
    assert shown.count(f"the schema is v7 [{rig.uid}]") == 1  # the result reached the transcript once

"""A continuation's reads before its first model request (issue 28.1), with real threads on the emulator: its
transcript's query starts beside its claim and is used only if the claim leaves the transcript as the query read
it (``shared.state.transcript_ahead``); what its waiting record came to is read in one batched read, beside the
transcript's query when that one runs after the claim (``shared.agent.waits.outcomes``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.state import ids, sessions, steps, transcript_ahead
from shared.state.firestore import now, session_ref
from shared.state.models import SessionStatus, Step, StepKind, Waiting, WaitKind
from shared.state.session_model import Session
from shared.state.sessions import Claim, ClaimResult
from shared.state.updates import session_update
from shared.usecases import worker
from tests.poll import wait_for
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack

LATER = timedelta(minutes=10)  # a claim this much later finds every lease taken in the test expired


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    with counted_rig(stack, monkeypatch) as rig:
        yield rig


def asked_and_answered(rig: cost.Rig) -> tuple[str, str]:
    """A session paused on an operator question, answered: its id and its queued continuation's."""
    asks = FakeGemini.call("ask_operator", question="sqlite or postgres?", options=["sqlite", "postgres"])
    session_id = rig.paused("set up the database", asks)
    question_id = rig.session(session_id).awaited_question
    assert question_id
    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "2"), reply)
    assert reply.get("answer") == "answered", reply
    continuation = ids.resumed_by(question_id)
    rig.expect(continuation, SessionStatus.QUEUED)
    return session_id, continuation


def issued(rig: cost.Rig, since: int, prefix: str) -> Callable[[], bool]:
    return lambda: any(entry.startswith(prefix) for entry in rig.counter.snapshot().trace[since:])


def test_the_transcript_query_starts_beside_the_claim_and_is_used(rig: cost.Rig,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    _, continuation = asked_and_answered(rig)
    since = len(rig.counter.snapshot().trace)
    claim = sessions.claim_session

    def claim_once_the_query_is_out(*args: Any, **kwargs: Any) -> Claim:  # the claim waits for the query to be sent
        wait_for(issued(rig, since, "RunQuery"), timeout=30, what="the transcript's query sent before the claim")
        return claim(*args, **kwargs)

    monkeypatch.setattr(sessions, "claim_session", claim_once_the_query_is_out)
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    assert [entry for entry in ops.trace if entry.startswith("RunQuery")] == ["RunQuery 3r"]  # not queried again
    assert not [entry for entry in ops.trace if entry.endswith(" 0r")], ops.trace


def test_the_outcomes_are_read_beside_the_transcripts_query(rig: cost.Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a query beside the claim (here: switched off) and a task that names no record (one queued by an older
    version), the run queries its transcript and reads what its record came to at the same time: the query waits here
    until the outcomes' read has been sent."""
    _, continuation = asked_and_answered(rig)
    rig.created_tasks.bodies.pop(continuation)  # delivered as {"session_id": ...} alone

    @contextmanager
    def no_query_ahead(session_id: str) -> Iterator[None]:
        yield None

    monkeypatch.setattr(transcript_ahead, "beside_claim", no_query_ahead)
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


def _store_a_step(writer: Session) -> None:
    latest = steps.load_steps(writer.transcript)[-1].seq
    step = Step(seq=latest + 1, session_id=writer.session_id, kind=StepKind.NOTES, content=None, audit=[], at=now())
    steps.commit_step(writer, step, lease_seconds=60)


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


def _claim(continuation: str) -> Claim:
    claim = sessions.claim_session(continuation, worker="w-new", task="t", attempt=0, lease_seconds=60,
                                   at=datetime.now(UTC) + LATER)  # fmt: skip
    assert claim.result == ClaimResult.CLAIMED, claim
    assert claim.session is not None
    return claim


@pytest.mark.parametrize("other", [False, True], ids=["the root writes", "another session writes"])
def test_a_query_read_before_the_last_step_is_dropped(rig: cost.Rig, other: bool) -> None:
    """The writer stores a step after the query read the transcript, then the claim takes the transcript over:
    the query misses that step, so the run must not use it."""
    asker, continuation = asked_and_answered(rig)
    writer = _writer(asker, continuation, other=other)
    ahead = transcript_ahead.Ahead(asker)
    ahead.wait()  # the query has read the transcript
    _store_a_step(writer)
    claim = _claim(continuation)
    assert ahead.usable(claim) is None
    assert len(steps.load_steps(asker)) == len(transcript_ahead.read_steps(asker).steps)


@pytest.mark.parametrize("other", [False, True], ids=["the root writes", "another session writes"])
def test_a_query_read_after_the_last_step_is_used(rig: cost.Rig, other: bool) -> None:
    asker, continuation = asked_and_answered(rig)
    writer = _writer(asker, continuation, other=other)
    _store_a_step(writer)
    ahead = transcript_ahead.Ahead(asker)
    claim = _claim(continuation)
    assert ahead.usable(claim) == steps.load_steps(asker)


def test_a_query_of_another_transcript_is_dropped(rig: cost.Rig) -> None:
    asker, continuation = asked_and_answered(rig)
    ahead = transcript_ahead.Ahead(asker)
    ahead.wait()
    session = rig.session(continuation)
    settled = datetime(2000, 1, 1, tzinfo=UTC)  # long before the query
    session.transcript_id = f"{asker}-elsewhere"  # the claimed session continues another transcript than its id names
    assert ahead.usable(Claim(ClaimResult.CLAIMED, session, settled=settled)) is None
    session.transcript_id = asker
    assert ahead.usable(Claim(ClaimResult.CLAIMED, session, settled=settled)) == steps.load_steps(asker)
    assert ahead.usable(Claim(ClaimResult.LIVE_LEASE, None, settled=settled)) is None  # the claim does not run it


def test_only_a_continuations_id_starts_a_query_beside_its_claim() -> None:
    with transcript_ahead.beside_claim("ev-123") as ahead:
        assert ahead is None  # a mention may have no transcript yet: a query for nothing would cost a read
    with transcript_ahead.beside_claim(ids.child_id("ev-123", 1, 0)) as ahead:
        assert ahead is None


def test_the_delivery_hands_the_run_what_the_query_read(rig: cost.Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A step stored between the query beside the claim and the claim: the run is not handed that query's steps."""
    asker, continuation = asked_and_answered(rig)
    writer = _writer(asker, continuation, other=False)
    handed: list[list[Step] | None] = []
    claim = sessions.claim_session

    def claim_after_a_step(*args: Any, **kwargs: Any) -> Claim:
        wait_for(issued(rig, since, "RunQuery "), timeout=30, what="the query beside the claim to have read")
        _store_a_step(writer)  # after the query read the transcript, before the claim
        return claim(*args, **{**kwargs, "at": datetime.now(UTC) + LATER})

    def recorded(found: Claim, **kwargs: Any) -> Any:
        handed.append(kwargs.get("transcript"))
        return None

    since = len(rig.counter.snapshot().trace)
    monkeypatch.setattr(sessions, "claim_session", claim_after_a_step)
    monkeypatch.setattr(worker, "_after_claim", recorded)
    worker.run_delivery(continuation, task="t", attempt=0)
    assert handed == [None]  # dropped: the run queries again, and has the step


def _answered_step(asker: str) -> dict[str, Any]:
    """The function response the resumed step stored for the operator's answer."""
    [step] = [step for step in steps.load_steps(asker) if step.kind == StepKind.ANSWER]
    assert step.content is not None
    [part] = step.content["parts"]
    return dict(part["function_response"]["response"])


def test_the_answered_question_is_read_and_its_step_stored_by_the_claim(rig: cost.Rig) -> None:
    """The continuation's task names the record it resumes: the claim reads the question with the session and its
    transcript's root, and stores the step resuming the turn in its own commit; nothing is read or written after it
    before the model is asked (its turn is the next transaction)."""
    asker, continuation = asked_and_answered(rig)
    assert b'"resumes"' in rig.created_tasks.bodies[continuation]
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    rest = [entry for entry in ops.trace if not entry.startswith("RunQuery")]
    claimed = rest.index("Commit 3w")  # the claim's commit: the session, the root's writer, the resumed step
    assert rest[: claimed + 1] == ["BeginTransaction", "BatchGetDocuments 3r", "Commit 3w"], ops.trace
    assert rest[claimed + 1 : claimed + 3] == ["BeginTransaction", "BatchGetDocuments 2r"], ops.trace  # its turn
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
    rig.created_tasks.bodies[continuation] = json.dumps(
        {"session_id": continuation, "resumes": [other.to_doc()]}
    ).encode()
    rig.script(FakeGemini.text("Going with postgres."))
    ops = rig.delivered(continuation, SessionStatus.DONE)
    rest = [entry for entry in ops.trace if not entry.startswith("RunQuery")]
    claimed = rest.index("Commit 2w")
    assert rest[claimed - 1] == "BatchGetDocuments 3r", ops.trace  # the question it named, read for nothing
    assert rest[claimed + 1] == "BatchGetDocuments 1r", ops.trace  # the session's own record's question
    assert _answered_step(asker)["result"]["matched_option"] == "postgres"

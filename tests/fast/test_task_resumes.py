"""A continuation's task names the waiting record it resumes (issue 28.1), so its claim reads what that record came
to in its own batched read: the task body's ``resumes``, what the claim reads for it, and the check that hands the
reads to the run only for the record the claimed session holds (a stale or duplicate task falls back to the run's
own read)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore

from shared import config
from shared.handlers.agent_session import parse_task
from shared.queue import tasks
from shared.state import claim_reads, ids
from shared.state.models import SessionKind, Waiting, WaitKind
from shared.state.session_model import Origin, Session

ASKER = "ev-Ev123"
QUESTION = Waiting(3, 0, WaitKind.QUESTION, ids.question_id(ASKER, 3, 0))
APPROVAL = Waiting(3, 1, WaitKind.APPROVAL, ids.approval_id(ASKER, 3, 1))
CHILD = Waiting(3, 2, WaitKind.CHILD, ids.child_id(ASKER, 3, 2))
PARENT = Waiting(3, 3, WaitKind.PARENT_ANSWER, "parentq-x")


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TASKS_QUEUE", "projects/p/locations/l/queues/q")
    monkeypatch.setenv("TASKS_TARGET_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:9")  # nothing listens: nothing is read here
    config.reset()
    yield
    monkeypatch.undo()
    config.reset()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    client = firestore.Client(project="offline", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]  # builds references only
    monkeypatch.setattr("shared.deps.firestore", lambda: client)


def _body(task: object) -> bytes:
    return bytes(task.http_request.body)  # type: ignore[attr-defined]


@pytest.mark.usefixtures("settings")
def test_a_continuations_task_names_the_record_it_resumes() -> None:
    record = [QUESTION, APPROVAL]
    task = tasks.build_session_task(ids.resume_id(ASKER, 3), resumes=record)
    named = parse_task(_body(task))
    assert named.session_id == ids.resume_id(ASKER, 3)
    assert named.resumes == record
    assert named.transcript_next is None  # no transcript's free step id named
    # the name is the session's alone: the same task whoever queues it, with or without the record
    assert task.name == tasks.build_session_task(ids.resume_id(ASKER, 3)).name
    with_steps = parse_task(_body(tasks.build_session_task(ids.resume_id(ASKER, 3), resumes=record, transcript_next=5)))
    assert (with_steps.resumes, with_steps.transcript_next) == (record, 5)


@pytest.mark.usefixtures("settings")
@pytest.mark.parametrize("named", [0, -1, tasks.MAX_STEPS_NAMED + 1, "5", 5.0, True, None])
def test_a_transcript_step_id_out_of_bounds_or_not_an_int_is_not_named(named: object) -> None:
    """A task names its transcript's first free step id only with a record, and only up to ``MAX_STEPS_NAMED``
    (its claim reads every step before it); parsed, anything else is read as none, and the task still runs."""
    if isinstance(named, int) and not isinstance(named, bool):
        body = _body(tasks.build_session_task(ids.resume_id(ASKER, 3), resumes=[QUESTION], transcript_next=named))
        assert "transcript_next" not in json.loads(body)
    payload = {"session_id": "resume-ev-1-3", "resumes": [QUESTION.to_doc()], "transcript_next": named}
    assert parse_task(json.dumps(payload).encode()).transcript_next is None
    alone = parse_task(json.dumps({"session_id": "resume-ev-1-3", "transcript_next": 5}).encode())
    assert alone.transcript_next is None  # without a record: a stale or hand-made task


@pytest.mark.usefixtures("offline")
def test_the_claims_steps_are_the_transcript_only_up_to_a_free_step_id() -> None:
    """The steps before the first free id the task named, read with the claim, are the whole transcript when that id
    is still free (nothing follows a free id); a step stored at it since (a stale task) leaves the run to query."""
    session = SimpleNamespace(update_time=None, exists=True)

    def step(seq: int) -> dict[str, Any]:
        return {"seq": seq, "session_id": ASKER, "kind": "model", "content": None, "audit": [], "at": None}

    stored: dict[str, dict[str, Any] | None] = {
        f"sessions/{ASKER}/steps/{ids.step_doc(seq)}": step(seq) for seq in range(3)
    }
    free = {**stored, f"sessions/{ASKER}/steps/{ids.step_doc(3)}": None}
    reads = claim_reads.ClaimReads(session, free, resumes=[QUESTION], transcript=ASKER, through=3)
    assert [found.seq for found in reads.steps(ASKER) or []] == [0, 1, 2]
    assert reads.steps("ev-other") is None  # the claimed session continues another transcript than its id names
    taken = {**stored, f"sessions/{ASKER}/steps/{ids.step_doc(3)}": step(3)}
    assert claim_reads.ClaimReads(session, taken, resumes=[QUESTION], transcript=ASKER, through=3).steps(ASKER) is None
    assert claim_reads.ClaimReads(session, free, resumes=[QUESTION], transcript=ASKER).steps(ASKER) is None  # unnamed
    gap = {**free, f"sessions/{ASKER}/steps/{ids.step_doc(1)}": None}  # never so: a broken invariant is not trusted
    assert claim_reads.ClaimReads(session, gap, resumes=[QUESTION], transcript=ASKER, through=3).steps(ASKER) is None


@pytest.mark.usefixtures("offline")
def test_the_claim_reads_the_steps_before_the_named_free_id_in_its_batch() -> None:
    reads: list[list[str]] = []

    class Transaction:
        pass

    def get_all(refs: list[Any], transaction: object) -> list[Any]:
        reads.append([ref.path for ref in refs])
        return [SimpleNamespace(reference=ref, exists=False, update_time=None, to_dict=lambda: None) for ref in refs]

    from shared.state.firestore import db

    client: Any = db()
    original = client.get_all
    client.get_all = get_all
    try:
        claim_reads.read(Transaction(), ids.resume_id(ASKER, 3), [QUESTION], 4)  # type: ignore[arg-type]
        claim_reads.read(Transaction(), ids.resume_id(ASKER, 3), [QUESTION])  # type: ignore[arg-type]
    finally:
        client.get_all = original
    steps = [f"sessions/{ASKER}/steps/{ids.step_doc(seq)}" for seq in range(5)]
    assert reads[0][-5:] == steps
    assert not [path for path in reads[1] if "/steps/" in path]


@pytest.mark.usefixtures("settings")
def test_a_task_without_a_record_names_none() -> None:
    assert json.loads(_body(tasks.build_session_task("ev-Ev1"))) == {"session_id": "ev-Ev1"}
    assert parse_task(_body(tasks.build_session_task("ev-Ev1"))).resumes is None
    too_long = [Waiting(3, i, WaitKind.CHILD, f"child-{i}") for i in range(tasks.MAX_RESUMES_NAMED + 1)]
    assert parse_task(_body(tasks.build_session_task("ev-Ev1", resumes=too_long))).resumes is None


@pytest.mark.usefixtures("settings")
def test_a_continuation_is_enqueued_with_the_record_it_resumes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``enqueue_continuation``: the one way the answer and decision paths queue a continuation (its attempt in the
    task's name, its waiting record in the body)."""
    created: list[Any] = []

    def create_task(*, parent: str, task: Any, **_: object) -> Any:
        created.append(task)
        return task

    monkeypatch.setattr("shared.deps.tasks", lambda: SimpleNamespace(create_task=create_task))
    continuation = Session(ids.resume_id(ASKER, 3), SessionKind.CONTINUATION, Origin("C1", "1.0", "1.1", "U1"), "",
                           datetime.now(UTC), waiting=[QUESTION, APPROVAL], next_seq=5)  # fmt: skip
    name = tasks.enqueue_continuation(continuation, attempt="decided-3")
    [task] = created
    assert name == task.name == tasks.build_session_task(continuation.session_id, attempt="decided-3").name
    named = parse_task(_body(task))
    assert named.resumes == [QUESTION, APPROVAL]
    assert named.transcript_next == 5  # where its asker's transcript stood when it was woken


@pytest.mark.parametrize(
    "resumes",
    [
        "q-1",
        [],
        ["q-1"],
        [{"seq": 3, "index": 0, "kind": "no-such-kind", "key": "q-1"}],
        [{"seq": 3, "kind": "question", "key": "q-1"}],  # no index
        [{"seq": "3", "index": 0, "kind": "question", "key": "q-1"}],
        # Keys no document of the record can have: the claim would fail building their refs (a path, an empty id,
        # a reserved name), or read one document twice.
        [{"seq": 3, "index": 0, "kind": "question", "key": "q-1/answers/x"}],
        [{"seq": 3, "index": 0, "kind": "question", "key": ""}],
        [{"seq": 3, "index": 0, "kind": "question", "key": "__q__"}],
        [{"seq": 3, "index": 0, "kind": "question", "key": "x" * 1501}],
        [{"seq": 3, "index": i, "kind": "question", "key": "q-1"} for i in (0, 1)],
    ],
)
def test_a_malformed_record_is_read_as_none_and_the_task_still_runs(resumes: object) -> None:
    named = parse_task(json.dumps({"session_id": "resume-ev-1-3", "resumes": resumes}).encode())
    assert named == type(named)("resume-ev-1-3", None)


def test_bad_task_bodies_are_still_refused() -> None:
    for body in (b"not json", b"[]", b'{"resumes": []}', b'{"session_id": ""}'):
        with pytest.raises(ValueError, match="body"):
            parse_task(body)


@pytest.mark.usefixtures("offline")
def test_the_claim_reads_the_questions_and_approvals_of_the_record_not_its_children() -> None:
    released = Waiting(3, 4, WaitKind.QUESTION, ids.question_id(ASKER, 3, 4), released=True)
    record = [QUESTION, APPROVAL, CHILD, PARENT, released]
    paths = [ref.path for ref in claim_reads.outcome_refs(record, ASKER)]
    ledger_entry = f"sessions/{ASKER}/calls/{ids.call_doc(APPROVAL.seq, APPROVAL.index)}"  # the approved call's
    assert paths == [f"questions/{QUESTION.key}", f"approvals/{APPROVAL.key}", ledger_entry]
    unknown = [ref.path for ref in claim_reads.outcome_refs(record, None)]  # a transcript the id does not name
    assert unknown == [f"questions/{QUESTION.key}", f"approvals/{APPROVAL.key}"]
    assert claim_reads.outcome_refs(None, ASKER) == []


@pytest.mark.usefixtures("offline")
def test_what_the_claim_read_is_handed_on_only_for_the_record_it_named() -> None:
    session = SimpleNamespace(update_time=None, exists=True)
    docs: dict[str, dict[str, Any] | None] = {
        f"questions/{QUESTION.key}": {"status": "answered"},
        f"sessions/{ASKER}": {"status": "resumed"},
    }
    reads = claim_reads.ClaimReads(session, docs, resumes=[QUESTION])
    assert reads.outcomes([QUESTION]) == {f"questions/{QUESTION.key}": {"status": "answered"}}
    assert reads.outcomes([QUESTION, APPROVAL]) is None  # the session waits on more than the task named
    assert reads.outcomes([Waiting(5, 0, WaitKind.QUESTION, ids.question_id(ASKER, 5, 0))]) is None  # a stale task
    assert reads.outcomes([]) is None  # its resumed step is stored already (a duplicate delivery)
    assert claim_reads.ClaimReads(session, docs).outcomes([QUESTION]) is None  # the task named no record
    # a question named but not stored reads as missing, as the run's own read would
    missing = claim_reads.ClaimReads(session, {f"questions/{QUESTION.key}": None}, resumes=[QUESTION])
    assert missing.outcomes([QUESTION]) == {f"questions/{QUESTION.key}": None}


def test_only_a_record_of_operator_questions_is_resumed_in_its_claims_commit() -> None:
    from shared.agent.waits import in_claim

    assert in_claim.for_claim(None) is None  # the task names no record
    for other in (APPROVAL, CHILD, PARENT, Waiting(3, 5, WaitKind.MCP_INPUT, "q-x")):
        assert in_claim.for_claim([QUESTION, other]) is None
    released = Waiting(3, 0, WaitKind.QUESTION, QUESTION.key, released=True)
    assert in_claim.for_claim([released]) is None
    assert in_claim.for_claim([QUESTION]) is not None


def test_what_an_answered_question_gives_its_call_is_decided_from_the_question_alone() -> None:
    from shared.agent.waits import question
    from shared.state.models import Question, QuestionStatus

    asked = Question.from_doc({"question_id": QUESTION.key, "session_id": ASKER, "channel": "C1", "thread_ts": "1.0",
                               "text": "sqlite or postgres?", "options": ["sqlite", "postgres"], "status": "answered",
                               "answer": "2", "answered_by": "U1", "matched_option": "postgres", "transcript_id": ASKER,
                               "blocking": True, "call_id": None, "asked_at": None})  # fmt: skip
    answered = question.result_of(asked)
    assert answered is not None
    assert answered.to_dict()["result"]["matched_option"] == "postgres"
    cancelled = question.result_of(Question.from_doc({**asked.to_doc(), "status": QuestionStatus.CANCELLED.value}))
    assert cancelled is not None
    assert "cancelled" in str(cancelled.to_dict())
    assert question.result_of(None) == question.NO_QUESTION
    assert question.result_of(Question.from_doc({**asked.to_doc(), "mcp_input": {"seq": 3}})) is None  # runs again

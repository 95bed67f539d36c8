"""The one Firestore access layer. Every read and write of product state goes through here.

Collections: ``events`` (Slack de-duplication, with a TTL field), ``sessions``,
``questions``. The client is a lazy module global so importing costs nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared import config
from shared.models import Question, QuestionStatus, Session, SessionKind, SessionStatus, Step

log = logging.getLogger(__name__)

EVENTS = "events"
THREADS = "threads"  # per Slack thread: the ids of its open questions, so an answer finds them by id
STEPS = "steps"  # subcollection of a session: its transcript and audit log
SESSIONS = "sessions"
QUESTIONS = "questions"

# The field Firestore's TTL policy on ``events`` deletes by (declared in Terraform).
EVENT_EXPIRES_FIELD = "expires_at"


@dataclass(frozen=True)
class Index:
    """A composite index a query here needs; Terraform must declare each one (checked by a test)."""

    collection: str
    fields: tuple[tuple[str, str], ...]  # (field path, "ASCENDING" | "DESCENDING"), in order


# Every composite index the queries in this module use. Keep it next to the queries it serves.
INDEXES: tuple[Index, ...] = (
    # The sweep: open questions by age.
    Index(QUESTIONS, (("status", "ASCENDING"), ("asked_at", "ASCENDING"))),
    # The sweep: sessions queued too long (their task was never created), oldest first.
    Index(SESSIONS, (("status", "ASCENDING"), ("updated_at", "ASCENDING"))),
    # The sweep: silent exits not yet narrated or escalated.
    Index(SESSIONS, (("status", "ASCENDING"), ("followed_up", "ASCENDING"), ("updated_at", "ASCENDING"))),
    # The sweep: running sessions whose lease expired long ago (their task ran out of retries).
    Index(SESSIONS, (("status", "ASCENDING"), ("lease_until", "ASCENDING"))),
    # Messages during a running session: the running session of a thread.
    Index(SESSIONS, (("channel", "ASCENDING"), ("thread_ts", "ASCENDING"), ("status", "ASCENDING"))),
)

_client: firestore.Client | None = None


def db() -> firestore.Client:
    """The Firestore client, built on first use (it honours FIRESTORE_EMULATOR_HOST itself)."""
    global _client  # noqa: PLW0603 - lazy global, as in the functions-framework samples
    if _client is None:
        settings = config.settings()
        _client = firestore.Client(project=settings.google_cloud_project, database=settings.firestore_database)
    return _client


def now() -> datetime:
    return datetime.now(UTC)


def start_session_for_event(*, event_id: str, event_type: str, session: Session) -> bool:
    """Record the Slack event and create its session in one atomic commit.

    Both documents are written with ``create()``: if the event was seen before
    (a Slack retry, or a concurrent duplicate delivery) the whole commit fails
    and nothing changes. Returns True only for the one delivery that won.
    """
    record = _event_record(event_type, session.session_id, session.created_at)
    batch = db().batch()
    batch.create(db().collection(EVENTS).document(event_id), record)
    # The same message can arrive as two events (app_mention and its message twin): it acts once.
    batch.create(db().collection(EVENTS).document(message_key(session.channel, session.trigger_ts)), record)
    batch.create(db().collection(SESSIONS).document(session.session_id), session.to_doc())
    try:
        batch.commit()
    except (gexc.AlreadyExists, gexc.Conflict):
        return False
    return True


def message_key(channel: str, ts: str) -> str:
    """The de-duplication record of one Slack message (or button press), whatever events carried it."""
    return f"msg-{channel}-{ts}"


def claim_message(channel: str, ts: str, *, kind: str, session_id: str) -> bool:
    """Record that a message was acted on, with ``create()``; False if an earlier event already did."""
    try:
        db().collection(EVENTS).document(message_key(channel, ts)).create(_event_record(kind, session_id, now()))
    except (gexc.AlreadyExists, gexc.Conflict):
        return False
    return True


def forget_message(channel: str, ts: str) -> None:
    db().collection(EVENTS).document(message_key(channel, ts)).delete()


def _event_record(kind: str, session_id: str, at: datetime) -> dict[str, Any]:
    expires = at + timedelta(hours=config.settings().event_ttl_hours)
    return {"type": kind, "session_id": session_id, "received_at": at, EVENT_EXPIRES_FIELD: expires}


def forget_event_session(*, event_id: str, session_id: str, message: str) -> None:
    """Undo ``start_session_for_event`` when the task could not be enqueued, so Slack's retry starts clean."""
    batch = db().batch()
    batch.delete(db().collection(EVENTS).document(event_id))
    batch.delete(db().collection(EVENTS).document(message))
    batch.delete(db().collection(SESSIONS).document(session_id))
    batch.commit()


def get_session(session_id: str) -> Session | None:
    snap = db().collection(SESSIONS).document(session_id).get()
    data = snap.to_dict()
    return Session.from_doc(data) if snap.exists and data is not None else None


def record_delivery(session_id: str, *, task_name: str, attempt: int) -> int:
    """Count a task delivery on the session document; returns the count. Creates nothing."""
    ref = db().collection(SESSIONS).document(session_id)
    ref.update(
        {"deliveries": firestore.Increment(1), "last_delivery": {"task": task_name, "attempt": attempt, "at": now()}}
    )
    data: dict[str, Any] = ref.get(field_paths=["deliveries"]).to_dict() or {}
    return int(data.get("deliveries", 0))


class LeaseLost(RuntimeError):
    """Another worker took the session over; this one must stop writing."""


def _session_ref(session_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(SESSIONS).document(session_id)
    return ref


def _step_ref(transcript_id: str, seq: int) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = _session_ref(transcript_id).collection(STEPS).document(f"{seq:06d}")
    return ref


def claim_session(
    session_id: str, *, worker: str, task: str, attempt: int, lease_seconds: int, at: datetime | None = None
) -> tuple[Session | None, str]:
    """Claim a session for this worker in a transaction; returns (session, why) with session None if not ours.

    Claimable: ``queued``; or ``running`` with an expired lease (its worker died);
    or ``running`` under a lease held by an earlier attempt of this same task,
    because Cloud Tasks only redelivers a task after that attempt failed.
    Anything else is a duplicate delivery and is left alone.
    """
    ref = _session_ref(session_id)
    when = at or now()

    @firestore.transactional
    def claim(transaction: firestore.Transaction) -> tuple[Session | None, str]:
        snap = ref.get(transaction=transaction)
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return None, "no such session"
        session = Session.from_doc(data)
        if session.status == SessionStatus.RUNNING:
            expired = session.lease_until is None or session.lease_until <= when
            redelivered = session.lease_task == task and attempt > session.lease_attempt
            if not (expired or redelivered):
                return None, "running under a live lease"
            why = "took over an expired lease" if expired else "took over from a failed attempt of this task"
        elif session.status == SessionStatus.QUEUED:
            why = "claimed"
        else:
            return None, f"already {session.status.value}"
        fields = {
            "status": SessionStatus.RUNNING.value,
            "worker": worker,
            "lease_task": task,
            "lease_attempt": attempt,
            "lease_until": when + timedelta(seconds=lease_seconds),
            "started_at": session.started_at or when,
            "updated_at": when,
        }
        transaction.update(ref, fields)
        for key, value in fields.items():
            setattr(session, key, value)
        session.status = SessionStatus.RUNNING
        return session, why

    result: tuple[Session | None, str] = claim(db().transaction())
    return result


def load_steps(transcript_id: str) -> list[Step]:
    """Every step of a transcript, in order: one query."""
    query = _session_ref(transcript_id).collection(STEPS).order_by("seq")
    return [Step.from_doc(snap.to_dict() or {}) for snap in query.stream()]


class NotesPending(RuntimeError):
    """Notes reached a session just as it tried to end; it must read them first."""

    def __init__(self, notes: list[dict[str, Any]]) -> None:
        super().__init__(f"{len(notes)} note(s) arrived")
        self.notes = notes


def commit_step(
    session: Session,
    step: Step | None,
    *,
    lease_seconds: int,
    fields: dict[str, Any] | None = None,
    consumed_notes: list[dict[str, Any]] | None = None,
    wait_for_notes: bool = True,
) -> list[dict[str, Any]]:
    """Persist one step and the session's progress together, fenced by the lease.

    One transaction: read the session to check this worker still holds it, create
    the step with ``create()`` (a step is never overwritten), and update the session
    (next sequence number, lease renewal and any other ``fields``, such as a
    terminal status). The same read returns the session's pending notes (answers
    to non-blocking questions, messages sent during the run), so checking for them
    costs no extra read; ``consumed_notes`` are removed. A terminal status is not
    written while notes are pending: ``NotesPending`` is raised instead, unless the
    session may not go on (``wait_for_notes=False``: its budget is spent).
    """
    ref = _session_ref(session.session_id)
    when = now()
    updates: dict[str, Any] = {"updated_at": when, **(fields or {})}
    if step is not None:
        updates["next_seq"] = step.seq + 1
    ending = updates.get("status", SessionStatus.RUNNING.value) != SessionStatus.RUNNING.value
    updates["lease_until"] = None if ending else when + timedelta(seconds=lease_seconds)
    if consumed_notes:
        updates["notes"] = firestore.ArrayRemove(consumed_notes)

    @firestore.transactional
    def write(transaction: firestore.Transaction) -> list[dict[str, Any]]:
        current = ref.get(transaction=transaction, field_paths=["worker", "status", "notes"]).to_dict() or {}
        if current.get("worker") != session.worker or current.get("status") != SessionStatus.RUNNING.value:
            raise LeaseLost(f"session is now {current.get('status')} under worker {current.get('worker')}")
        pending = [n for n in current.get("notes") or [] if n not in (consumed_notes or [])]
        if ending and pending and wait_for_notes and updates.get("status") != SessionStatus.FAILED.value:
            raise NotesPending(pending)
        if step is not None:
            transaction.create(_step_ref(session.transcript, step.seq), step.to_doc())
        transaction.update(ref, updates)
        return pending

    pending: list[dict[str, Any]] = write(db().transaction())
    if step is not None:
        session.next_seq = step.seq + 1
    for key in ("status", "closed_loop", "turns", "tool_calls", "error", "question_id"):
        if key in updates:
            setattr(session, key, SessionStatus(updates[key]) if key == "status" else updates[key])
    return pending


def running_session_in_thread(channel: str, thread_ts: str) -> Session | None:
    """The thread's running session, if any, with one indexed query (channel, thread_ts, status)."""
    for doc in _in_thread(SESSIONS, channel, thread_ts, SessionStatus.RUNNING.value, limit=1):
        return Session.from_doc(doc)
    return None


def _in_thread(collection: str, channel: str, thread_ts: str, status: str, *, limit: int) -> list[dict[str, Any]]:
    """Documents of one thread in one status: an indexed query on (channel, thread_ts, status)."""
    query = (
        db()
        .collection(collection)
        .where(filter=FieldFilter("channel", "==", channel))
        .where(filter=FieldFilter("thread_ts", "==", thread_ts))
        .where(filter=FieldFilter("status", "==", status))
        .limit(limit)
    )
    return [snap.to_dict() or {} for snap in query.stream()]


def add_note(session_id: str, note: dict[str, Any]) -> bool:
    """Queue a note for a running session, in a transaction; False if it is no longer running."""
    ref = _session_ref(session_id)

    @firestore.transactional
    def add(transaction: firestore.Transaction) -> bool:
        current = ref.get(transaction=transaction, field_paths=["status"]).to_dict() or {}
        if current.get("status") != SessionStatus.RUNNING.value:
            return False
        transaction.update(ref, {"notes": firestore.ArrayUnion([note])})
        return True

    added: bool = add(db().transaction())
    return added


# --- questions ------------------------------------------------------------------------------


def _question_ref(question_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(QUESTIONS).document(question_id)
    return ref


def _thread_ref(channel: str, thread_ts: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(THREADS).document(f"{channel}-{thread_ts}")
    return ref


def _unlist(
    question: Question, answered_by: str | None = None, answer_ts: str | None = None
) -> tuple[firestore.DocumentReference, dict[str, Any]]:
    """The write that takes a question off its thread's list of open questions (and says who answered it)."""
    fields: dict[str, Any] = {"open_question_ids": firestore.ArrayRemove([question.question_id])}
    if answered_by is not None:
        fields["last_answer"] = {"question_id": question.question_id, "by": answered_by, "ts": answer_ts, "at": now()}
    return _thread_ref(question.channel, question.thread_ts), fields


def create_question(question: Question) -> Question:
    """Write a question with ``create()``, listed on its thread in the same commit.

    A retried step that wrote it already gets the stored one back.
    """
    batch = db().batch()
    batch.create(_question_ref(question.question_id), question.to_doc())
    batch.set(
        _thread_ref(question.channel, question.thread_ts),
        {"open_question_ids": firestore.ArrayUnion([question.question_id])},
        merge=True,
    )
    try:
        batch.commit()
    except (gexc.AlreadyExists, gexc.Conflict):
        stored = get_question(question.question_id)
        assert stored is not None
        return stored
    return question


def get_question(question_id: str) -> Question | None:
    snap = _question_ref(question_id).get()
    data = snap.to_dict()
    return Question.from_doc(data) if snap.exists and data is not None else None


@dataclass(frozen=True)
class ThreadQuestions:
    """What a thread has open, and the last answer it got (to tell a late racer who won)."""

    open: list[Question]
    last_answer: dict[str, Any] | None


def thread_questions(channel: str, thread_ts: str) -> ThreadQuestions:
    """The thread's open questions, newest first: a point read of the thread, then of its open questions.

    Point reads cost the same however many questions the database holds; the list on the thread
    changes in the same commit or transaction as every question's status.
    """
    thread = _thread_ref(channel, thread_ts).get().to_dict() or {}
    ids = thread.get("open_question_ids") or []
    questions = []
    if ids:
        snaps = db().get_all([_question_ref(question_id) for question_id in ids])
        questions = [Question.from_doc(snap.to_dict() or {}) for snap in snaps if snap.exists]
    open_ones = sorted((q for q in questions if q.status == QuestionStatus.OPEN), key=lambda q: q.asked_at)
    return ThreadQuestions(open_ones[::-1], thread.get("last_answer"))


def open_questions_in_thread(channel: str, thread_ts: str) -> list[Question]:
    return thread_questions(channel, thread_ts).open


def close_question(question_id: str, status: QuestionStatus) -> bool:
    """Move an open question to ``status`` (cancelled, abandoned) in a transaction; False if it was not open."""
    ref = _question_ref(question_id)

    @firestore.transactional
    def close(transaction: firestore.Transaction) -> bool:
        current = ref.get(transaction=transaction, field_paths=["status", "channel", "thread_ts"]).to_dict() or {}
        if current.get("status") != QuestionStatus.OPEN.value:
            return False
        transaction.update(ref, {"status": status.value, "closed_at": now()})
        thread = _thread_ref(current["channel"], current["thread_ts"])
        transaction.set(thread, {"open_question_ids": firestore.ArrayRemove([question_id])}, merge=True)
        return True

    closed: bool = close(db().transaction())
    return closed


@dataclass(frozen=True)
class Answered:
    """What one answer attempt did."""

    question: Question | None  # None: there is no such question
    continuation: Session | None = None  # the continuation session this answer created, if it won
    noted: bool = False  # it won, and went to the still-running asker as a note instead


def continuation_id(question_id: str) -> str:
    return f"answer-{question_id}"


def answer_question(
    question_id: str, *, answer: str, answered_by: str, matched_option: str | None, trigger_ts: str, text: str
) -> Answered:
    """In one transaction: the open question becomes answered and its continuation session is created.

    Exactly one answer wins. A non-blocking question whose session still runs (or is
    paused on another question) gets no continuation: the answer is queued on that
    session as a note, and a paused session's notes move to its continuation.
    """
    qref = _question_ref(question_id)
    when = now()

    @firestore.transactional
    def answer_it(transaction: firestore.Transaction) -> Answered:
        snap = qref.get(transaction=transaction)
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return Answered(None)
        question = Question.from_doc(data)
        if question.status != QuestionStatus.OPEN:
            return Answered(question)
        fields = {
            "status": QuestionStatus.ANSWERED.value,
            "answer": answer,
            "answered_by": answered_by,
            "answered_at": when,
            "matched_option": matched_option,
            "answer_ts": trigger_ts,
        }
        asker = _session_ref(question.session_id)
        current = asker.get(transaction=transaction, field_paths=["status", "notes"]).to_dict() or {}
        status, waiting_notes = current.get("status"), list(current.get("notes") or [])
        if not question.blocking and status in {SessionStatus.RUNNING.value, SessionStatus.PAUSED.value}:
            # The asker is still working, or paused on another question: the answer waits as a note
            # for its next turn (a paused asker's notes move to its continuation, below).
            note = {"kind": "answer", "question_id": question_id, "question": question.text, "text": answer,
                    "user": answered_by, "ts": trigger_ts, "matched_option": matched_option}  # fmt: skip
            transaction.update(asker, {"notes": firestore.ArrayUnion([note])})
            transaction.update(qref, {**fields, "continuation_id": question.session_id})
            transaction.set(*_unlist(question, answered_by, trigger_ts), merge=True)
            question.status, question.answer, question.answer_ts = QuestionStatus.ANSWERED, answer, trigger_ts
            question.continuation_id = question.session_id
            return Answered(question, noted=True)
        session = Session(
            session_id=continuation_id(question_id),
            kind=SessionKind.CONTINUATION,
            channel=question.channel,
            thread_ts=question.thread_ts,
            trigger_ts=trigger_ts,
            trigger_user=answered_by,
            text=text,
            created_at=when,
            parent_session_id=question.session_id,
            question_id=question_id,
            transcript_id=question.transcript_id,
            notes=waiting_notes if status == SessionStatus.PAUSED.value else [],
        )
        transaction.create(_session_ref(session.session_id), session.to_doc())
        if session.notes:
            transaction.update(asker, {"notes": []})
        # Claims the answering message, so its app_mention twin cannot start a session of its own.
        transaction.set(
            db().collection(EVENTS).document(message_key(question.channel, trigger_ts)),
            _event_record("answer", session.session_id, when),
        )
        transaction.update(qref, {**fields, "continuation_id": session.session_id})
        transaction.set(*_unlist(question, answered_by, trigger_ts), merge=True)
        question.status = QuestionStatus.ANSWERED
        question.answer, question.answered_by, question.matched_option = answer, answered_by, matched_option
        question.continuation_id, question.answer_ts = session.session_id, trigger_ts
        return Answered(question, session)

    result: Answered = answer_it(db().transaction())
    return result


# --- follow-ups and the sweep ----------------------------------------------------------------


def retry_id(session_id: str) -> str:
    return f"retry-{session_id}"


def create_retry(session: Session, *, reason: str) -> Session:
    """The narration retry of a silent session, created once (``create()``); a second call returns the first."""
    retry = Session(
        session_id=retry_id(session.session_id),
        kind=SessionKind.RETRY,
        channel=session.channel,
        thread_ts=session.thread_ts,
        trigger_ts=session.trigger_ts,
        trigger_user=session.trigger_user,
        text=session.text,
        created_at=now(),
        parent_session_id=session.session_id,
        retry_reason=reason,
    )
    try:
        _session_ref(retry.session_id).create(retry.to_doc())
    except (gexc.AlreadyExists, gexc.Conflict):
        stored = get_session(retry.session_id)
        assert stored is not None
        return stored
    return retry


def mark_followed_up(session_id: str) -> None:
    try:
        _session_ref(session_id).update({"followed_up": True, "updated_at": now()})
    except gexc.NotFound:
        log.warning("cannot mark a missing session as followed up", extra={"followed": session_id})


def audit_of(session: Session) -> list[dict[str, Any]]:
    """The audit records ``session`` wrote, in order: the ground truth of what it did."""
    return [entry for step in load_steps(session.transcript) if step.session_id == session.session_id
            for entry in step.audit]  # fmt: skip


def _stale(collection: str, filters: list[tuple[str, str, Any]], order: str, cutoff: datetime,
           page_size: int) -> Iterator[Any]:  # fmt: skip
    """Documents matching ``filters`` whose ``order`` field is at or before ``cutoff``, oldest first, by pages.

    An indexed query on equality fields and a time: it reads only stale documents, however large the
    collection grows.
    """
    query: Any = db().collection(collection)
    for field_path, op, value in filters:
        query = query.where(filter=FieldFilter(field_path, op, value))
    query = query.where(filter=FieldFilter(order, "<=", cutoff)).order_by(order).limit(page_size)
    last = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        yield from page
        if len(page) < page_size:
            return
        last = page[-1]


def stale_questions(cutoff: datetime, *, page_size: int) -> Iterator[Question]:
    """Open questions asked at or before ``cutoff``."""
    for snap in _stale(QUESTIONS, [("status", "==", QuestionStatus.OPEN.value)], "asked_at", cutoff, page_size):
        yield Question.from_doc(snap.to_dict() or {})


def stale_sessions(status: SessionStatus, field_path: str, cutoff: datetime, *, page_size: int,
                   not_followed_up: bool = False) -> Iterator[Session]:  # fmt: skip
    """Sessions in ``status`` whose ``field_path`` time is at or before ``cutoff``."""
    filters: list[tuple[str, str, Any]] = [("status", "==", status.value)]
    if not_followed_up:
        filters.append(("followed_up", "==", False))
    for snap in _stale(SESSIONS, filters, field_path, cutoff, page_size):
        yield Session.from_doc(snap.to_dict() or {})


def mark_reminded(question_id: str, at: datetime) -> bool:
    """Record the one reminder of an open question; False if it was already reminded or is not open."""
    ref = _question_ref(question_id)

    @firestore.transactional
    def mark(transaction: firestore.Transaction) -> bool:
        current = ref.get(transaction=transaction, field_paths=["status", "reminded_at"]).to_dict() or {}
        if current.get("status") != QuestionStatus.OPEN.value or current.get("reminded_at") is not None:
            return False
        transaction.update(ref, {"reminded_at": at})
        return True

    marked: bool = mark(db().transaction())
    return marked


def end_session(session_id: str, *, expect: SessionStatus, status: SessionStatus, cutoff: datetime | None = None,
                **fields: Any) -> Session | None:  # fmt: skip
    """Move a session from ``expect`` to ``status`` in a transaction (for a running one: only if its lease
    expired before ``cutoff``); returns it, or None if it changed meanwhile."""
    ref = _session_ref(session_id)

    @firestore.transactional
    def end(transaction: firestore.Transaction) -> Session | None:
        snap = ref.get(transaction=transaction)
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return None
        session = Session.from_doc(data)
        if session.status != expect:
            return None
        if cutoff is not None and (session.lease_until is None or session.lease_until > cutoff):
            return None
        updates = {"status": status.value, "lease_until": None, "ended_at": now(), "updated_at": now(), **fields}
        transaction.update(ref, updates)
        session.status = status
        return session

    ended: Session | None = end(db().transaction())
    return ended

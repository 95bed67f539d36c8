"""Questions and threads: ``questions/{id}`` and ``threads/{channel}-{thread_ts}``.

A thread document lists the ids of its open questions and is changed in the same commit or transaction as every
question's status, so an answer finds a thread's open questions with point reads, whatever the database's size.
Answering is one commit fenced by what it read (a transaction when that fails), whose product rule (a note or a
continuation) the caller decides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud import firestore

from shared.errors import Contended
from shared.state import events, fenced, ids, waiting
from shared.state.firestore import (
    ALREADY_EXISTS,
    db,
    event_ref,
    now,
    question_ref,
    remind_once,
    session_ref,
    thread_ref,
    transact,
)
from shared.state.models import Note, Question, QuestionStatus, SessionStatus, WaitKind
from shared.state.session_model import Session
from shared.state.updates import (
    LastAnswer,
    appended,
    question_update,
    session_update,
    thread_listed,
    thread_unlisted,
    thread_update,
)


def create_question(question: Question) -> Question:
    """Write a question with ``create()``, listed on its thread in the same commit.

    A retried step that wrote it already gets the stored one back.
    """
    batch = db().batch()
    batch.create(question_ref(question.question_id), question.to_doc())
    batch.set(
        thread_ref(question.channel, question.thread_ts),
        thread_listed(open_question_ids=[question.question_id]),
        merge=True,
    )
    try:
        batch.commit()
    except ALREADY_EXISTS:
        stored = get_question(question.question_id)
        assert stored is not None
        return stored
    return question


def set_post_ts(question_id: str, post_ts: str) -> Question:
    """Record the question's post once it is visible; returns the question as it stands (it may be answered)."""
    ref = question_ref(question_id)

    @firestore.transactional
    def record(transaction: firestore.Transaction) -> Question:
        question = Question.from_doc(ref.get(transaction=transaction).to_dict() or {})
        if question.post_ts is None:
            transaction.update(ref, question_update(post_ts=post_ts))
            question.post_ts = post_ts
        return question

    recorded: Question = transact(record)
    return recorded


def get_question(question_id: str) -> Question | None:
    snap = question_ref(question_id).get()
    data = snap.to_dict()
    return Question.from_doc(data) if snap.exists and data is not None else None


def get_questions(question_ids: list[str]) -> dict[str, Question]:
    """The questions of ``question_ids`` that exist, by id, in one batched read (none for no ids)."""
    if not question_ids:
        return {}
    snaps = db().get_all([question_ref(question_id) for question_id in question_ids])
    return {snap.id: Question.from_doc(snap.to_dict() or {}) for snap in snaps if snap.exists}


@dataclass(frozen=True)
class ThreadQuestions:
    """What a thread has open, and the last answer it got (to tell a late racer who won)."""

    open: list[Question]
    last_answer: dict[str, Any] | None
    open_approval_ids: list[str] = field(default_factory=list)  # read with the same document
    replaced: dict[str, str] = field(default_factory=dict)  # questions cancelled as replaced, by their replacement
    read_at: datetime | None = None  # when the thread document was read: what it listed open is as of then


def thread_questions(channel: str, thread_ts: str) -> ThreadQuestions:
    """The thread's open questions, newest first: a point read of the thread, then of its open questions.

    A question answered between the two reads is the thread's last answer, though the thread read before it said
    so: a reply racing its winner is then told it lost, not taken for a message about nothing."""
    snap = thread_ref(channel, thread_ts).get()
    thread = snap.to_dict() or {}
    questions = get_questions(thread.get("open_question_ids") or []).values()
    open_ones = sorted((q for q in questions if q.status == QuestionStatus.OPEN), key=lambda q: q.asked_at)
    last = thread.get("last_answer")
    for question in questions:
        answered_at = question.answered_at
        if question.status == QuestionStatus.ANSWERED and question.answered_by and answered_at is not None \
                and (last is None or last["at"] < answered_at):  # fmt: skip
            last = LastAnswer(question_id=question.question_id, by=question.answered_by, ts=question.answer_ts,
                              at=answered_at)  # fmt: skip
    return ThreadQuestions(open_ones[::-1], last, list(thread.get("open_approval_ids") or []),
                           dict(thread.get("replaced") or {}), read_at=snap.read_time)  # fmt: skip


def _unlist(question: Question, answered_by: str | None = None,
            answer_ts: str | None = None) -> tuple[firestore.DocumentReference, dict[str, Any]]:  # fmt: skip
    """The write that takes a question off its thread's list of open questions (and says who answered it)."""
    fields = thread_unlisted(open_question_ids=[question.question_id])
    if answered_by is not None:
        last = LastAnswer(question_id=question.question_id, by=answered_by, ts=answer_ts, at=now())
        fields |= thread_update(last_answer=last)
    return thread_ref(question.channel, question.thread_ts), fields


def close_question(question_id: str, status: QuestionStatus, *, replaced_by: str | None = None) -> bool:
    """Move an open question to ``status`` (cancelled, abandoned) in a transaction; False if it was not open.
    ``replaced_by``: the newer question that replaces it, recorded on the thread in the same commit (a retry of that
    ask finds there what it cancelled, though the thread lists it open no more)."""
    ref = question_ref(question_id)

    @firestore.transactional
    def close(transaction: firestore.Transaction) -> bool:
        current = ref.get(transaction=transaction, field_paths=["status", "channel", "thread_ts"]).to_dict() or {}
        if current.get("status") != QuestionStatus.OPEN.value:
            return False
        transaction.update(ref, question_update(status=status, closed_at=now()))
        thread = thread_ref(current["channel"], current["thread_ts"])
        fields = thread_unlisted(open_question_ids=[question_id])
        if replaced_by is not None:
            fields |= thread_update(replaced={question_id: replaced_by})
        transaction.set(thread, fields, merge=True)
        return True

    closed: bool = transact(close)
    return closed


def mark_reminded(question_id: str, at: datetime) -> bool:
    """Record the one reminder of an open question; False if it was already reminded or is not open."""
    return remind_once(question_ref(question_id), QuestionStatus.OPEN.value, question_update(reminded_at=at))


# --- answering --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AnswerRecord:
    """One person's answer to one question, as it arrived."""

    answer: str
    answered_by: str
    matched_option: str | None
    answer_ts: str  # the message (or button press) that answered
    text: str  # what the continuation records as its trigger text
    pressed: bool = False  # a button press, not a reply


@dataclass(frozen=True)
class Asker:
    """The asking session as the answer transaction read it."""

    status: SessionStatus | None
    notes: list[Note] = field(default_factory=list)
    trace_id: str | None = None


@dataclass(frozen=True)
class Resolution:
    """What the caller decided an answer does: a note for the asker, or a continuation session."""

    note: Note | None = None
    continuation: Session | None = None


@dataclass(frozen=True)
class Answered:
    """What one answer attempt did."""

    question: Question | None  # None: there is no such question
    continuation: Session | None = None  # the continuation session this answer created, if it won
    noted: bool = False  # it won, and went to the still-running asker as a note instead
    repeated: bool = False  # this message (or press) already answered a question: it answers nothing more
    refused: bool = False  # the caller's check of the question as read refused the answer: nothing was written
    still_waits: bool = False  # it answered one wait of a paused turn that still waits on others (``noted`` too)
    # Refused, nothing written: its asker was stopped, failed or abandoned, or another question of its paused turn was
    # closed unanswered (the sweep abandoned it, a newer question replaced it: the asker is being ended), and the end
    # cancels its questions right after (a non-blocking one too: its thread was told to start again); an answer in
    # between must not start a continuation of what was ended, nor be stored as if the turn would read it.
    unwaited: bool = False


# An asker ended so is closing its questions, blocking or not: an answer resumes nothing (a failed or abandoned session
# told its thread to mention it again; a stopped one, that nothing more will happen).
_UNWAITED = frozenset({SessionStatus.STOPPED, SessionStatus.FAILED, SessionStatus.ABANDONED})


def answer_question(question_id: str, record: AnswerRecord | Callable[[Question], AnswerRecord | None],
                    decide: Callable[[Question, Asker], Resolution]) -> Answered:  # fmt: skip
    """The open question becomes answered, and what ``decide`` chose is written with it, all in one commit.

    Exactly one answer wins, and one message answers at most one question: the answering message is claimed with
    ``create()`` in the same commit, so its other events (a Slack retry, its ``app_mention`` twin) answer
    nothing more, whichever question is open when they arrive. A button press names its one question, which the
    same commit closes: it is not claimed (the press again finds its question answered). A continuation is created
    with ``create()``; a paused asker becomes ``resumed``, its pending notes moving to the continuation.

    ``record`` may be made from the question as read (a button press checks its question there, with no read of
    its own before): None refuses the answer (``Answered.refused``) and writes nothing. The question, its asker and
    the continuation that would resume its turn (both named in the question's id) are read in one round trip, outside
    a transaction, and the answer is committed fenced by what was read (``shared.state.fenced``): two round trips.
    A racing write to any of them (another answer, a stop, a claim), or a turn that waits on more than this question,
    sends the answer to the transaction (begin, the same read, commit), which decides as if the first try never
    happened.
    """
    qref = question_ref(question_id)
    when = now()
    asker_fields = ["status", "notes", "trace_id", "waiting", "kind", "question_id", "approval_ids", "child_ids"]
    hints = (ids.asker_of_question(question_id), ids.resume_hint(question_id))
    refs = [qref] + [session_ref(hint) for hint in hints if hint is not None]

    def answer_it(snaps: fenced.Read, out: firestore.WriteBatch, transaction: firestore.Transaction | None) -> Answered:
        """The answer decided from ``snaps`` (the question, its asker and the continuation that would resume its
        turn) and written in ``out``; ``transaction``: where to read more (None: nothing more may be read)."""
        snap = snaps[qref.path]
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return Answered(None)
        question = Question.from_doc(data)
        made = record(question) if callable(record) else record
        if made is None:
            return Answered(question, refused=True)
        if question.status != QuestionStatus.OPEN:
            return Answered(question)
        asker_ref = session_ref(question.session_id)
        if asker_ref.path not in snaps and transaction is None:
            raise fenced.Unfenceable("the question's id does not name its asker")
        if asker_ref.path in snaps:
            current = snaps[asker_ref.path].to_dict() or {}
        else:  # a question whose id does not name its asker (none is made so now): read it on its own
            current = asker_ref.get(transaction=transaction, field_paths=asker_fields).to_dict() or {}
        status = SessionStatus(current["status"]) if current.get("status") else None
        if status in _UNWAITED:
            return Answered(question, unwaited=True)  # its end is closing its questions: nothing resumes it
        asker = Asker(status, [Note.from_doc(n) for n in current.get("notes") or []], current.get("trace_id"))
        kind = WaitKind.MCP_INPUT if question.mcp_input else WaitKind.QUESTION
        if question.blocking and waiting.waits_on(current, kind, question_id):
            # One wait of a mixed turn: the turn resumes once everything in its record is resolved.
            whole = current if asker_ref.path in snaps else asker_ref.get(transaction=transaction).to_dict() or {}
            resolving = (kind, question_id)
            others = waiting.outcomes(transaction, whole, waiting.record_of(whole), besides=resolving,
                                      fenced=transaction is None)  # fmt: skip
            if others.closed:  # another question of its turn was closed unanswered: its session is being ended
                return Answered(question, unwaited=True)
            found = waiting.check(transaction, question.session_id, whole, resolving=resolving, read=snaps,
                                  fenced=transaction is None, found=others)  # fmt: skip
            woken = waiting.wake(out, found, trigger_ts=made.answer_ts, user=made.answered_by,
                                 at=when) if found else None  # fmt: skip
            return _record(out, question, made, when, woken, target=woken.session_id if woken else None)
        resolution = decide(question, asker)
        target = resolution.continuation.session_id if resolution.continuation else question.session_id
        if resolution.note is not None:
            out.update(asker_ref, appended(notes=[resolution.note]))
        if resolution.continuation is not None:
            out.create(session_ref(target), resolution.continuation.to_doc())
            if asker.status == SessionStatus.PAUSED:  # no longer waiting: its continuation carries on
                out.update(asker_ref, session_update(status=SessionStatus.RESUMED, notes=[]))
        answered = _record(out, question, made, when, resolution.continuation, target=target)
        return Answered(answered.question, resolution.continuation, noted=resolution.note is not None)

    try:
        # Fenced on the question and its asker (and whatever else it read as existing, or creates); else the
        # transaction, in which racing answers contend for the question and its asker.
        result = fenced.resolve(refs, answer_it, depends=refs[:2])
    except ALREADY_EXISTS:
        return Answered(get_question(question_id), repeated=True)
    except Contended:  # the transaction gave up for contention: a racing answer may have won meanwhile
        lost = _answered_meanwhile(question_id, record)
        if lost is None:
            raise  # still open: the sender's retry (Slack's) answers it
        return lost
    return result


def _answered_meanwhile(question_id: str, record: AnswerRecord | Callable[[Question], AnswerRecord | None]
                        ) -> Answered | None:  # fmt: skip
    """After an answer that could not commit for contention: a question another answer closed meanwhile is
    answered already, as if this one had read it so (nothing written); None while it is still open."""
    found = get_question(question_id)
    if found is None or found.status == QuestionStatus.OPEN:
        return None
    if callable(record) and record(found) is None:
        return Answered(found, refused=True)
    return Answered(found)


def _record(transaction: firestore.WriteBatch, question: Question, record: AnswerRecord, when: datetime,
            woken: Session | None, *, target: str | None) -> Answered:  # fmt: skip
    """Write the answer on its question, claiming the answering message (a reply's); ``woken``: the session it
    resumed (an answer that leaves its mixed turn still waiting resumes nothing: ``noted``)."""
    target = target or question.session_id
    fields = question_update(
        status=QuestionStatus.ANSWERED,
        answer=record.answer,
        answered_by=record.answered_by,
        answered_at=when,
        matched_option=record.matched_option,
        answer_ts=record.answer_ts,
        answer_pressed=record.pressed,
        continuation_id=target,
    )
    # The answering message is claimed with create(): one message answers at most one question, whatever
    # carried it (a Slack retry, its app_mention twin) and whichever question is open when it arrives again. A
    # button press has no message to claim: it names its one question, which this very commit takes out of `open`,
    # so the same press again finds it answered and writes nothing (a claim of its key would never be met).
    if not record.pressed:
        transaction.create(
            event_ref(ids.message_key(question.channel, record.answer_ts)),
            events.record("answer", target, when),
        )
    transaction.update(question_ref(question.question_id), fields)
    transaction.set(*_unlist(question, record.answered_by, record.answer_ts), merge=True)
    if question.post_channel and question.post_ts:  # its post's thread in the operator channel, too
        transaction.set(thread_ref(question.post_channel, question.post_ts),
                        _unlist(question, record.answered_by, record.answer_ts)[1], merge=True)  # fmt: skip
    question = Question.from_doc({**question.to_doc(), **fields})
    return Answered(question, woken, noted=woken is None, still_waits=woken is None)

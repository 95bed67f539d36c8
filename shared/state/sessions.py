"""Sessions and their lease: create, claim, end, queue a note, find a thread's running session.

A session is claimed in a transaction that takes a lease; every later write of its worker is fenced by that
lease (``shared.state.steps.commit_step``). A claim's outcome is a ``ClaimResult``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Unpack

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.errors import Contended
from shared.state import claim_reads, claim_step, ids, lease, quotas, results, step_fence
from shared.state.firestore import (
    ALREADY_EXISTS,
    SESSIONS,
    contended,
    db,
    now,
    question_ref,
    session_ref,
    transact,
)
from shared.state.models import Note, NoteKind, Question, SessionKind, SessionStatus, Step, Waiting
from shared.state.session_model import Session, SessionChanges, stored
from shared.state.updates import appended, session_update

log = logging.getLogger(__name__)


def get_session(session_id: str) -> Session | None:
    snap = session_ref(session_id).get()
    data = snap.to_dict()
    return Session.from_doc(data) if snap.exists and data is not None else None


def create_session(session: Session) -> Session:
    """Create ``session`` once (``create()``); a second call with the same id returns the stored one."""
    try:
        session_ref(session.session_id).create(session.to_doc())
    except ALREADY_EXISTS:
        stored = get_session(session.session_id)
        assert stored is not None
        return stored
    return session


class ClaimResult(StrEnum):
    """What one delivery of a session's task found."""

    CLAIMED = "claimed"  # it was queued: this worker runs it
    TOOK_OVER_EXPIRED = "took over an expired lease"  # its worker died
    TOOK_OVER_RETRY = "took over from a failed attempt of this task"  # Cloud Tasks redelivered after a failure
    NO_SESSION = "no such session"
    LIVE_LEASE = "running under a live lease"  # a duplicate delivery while another worker runs it
    # A retry of the task while its lease was renewed within a heartbeat: the earlier attempt may still be alive (a
    # copy delivered beside it, or a dispatch deadline missed by a live worker). Retry later; a dead one beats no more.
    RENEWED_LATELY = "a retry while the session's lease was renewed within a heartbeat"
    TRANSCRIPT_BUSY = "its transcript is still being written by another session"  # retry later
    HANDED_OVER = "a late answer, handed as a note to the session writing its transcript"
    FINISHED = "already finished"  # done, failed, paused...: nothing to do

    @property
    def takeover(self) -> bool:
        return self in {ClaimResult.TOOK_OVER_EXPIRED, ClaimResult.TOOK_OVER_RETRY}


@dataclass(frozen=True)
class Claim:
    result: ClaimResult
    session: Session | None  # set when this worker now holds the session
    status: SessionStatus | None = None  # the status found, when it was not claimable
    trace_id: str | None = None  # the session's trace, claimable or not (its logs stay one filter)
    handed_to: str | None = None  # HANDED_OVER: the session that now has the answer
    writer_dead: bool = False  # HANDED_OVER: that session runs under an expired lease (its worker is gone)
    found: Session | None = None  # FINISHED: the session as found (a delivery after its end still has duties)
    question: Question | None = None  # a continuation's question, read with the claim (its opening starts from it)
    # Claimed: its transcript's steps as the claim read and left them, when its task named the turn it resumes and
    # they are all of it (``claim_reads.ClaimReads.steps``; None: the run queries them).
    transcript: list[Step] | None = None
    # Claimed: what its waiting record came to, read with the claim, by path (``claim_reads.ClaimReads.outcomes``).
    outcomes: dict[str, dict[str, Any] | None] | None = None
    stepped: Step | None = None  # Claimed: the resumed turn's step, stored in the claim's commit (``claim_step``)


def claim_session(session_id: str, *, worker: str, task: str, attempt: int, lease_seconds: int,
                  at: datetime | None = None, resumes: list[Waiting] | None = None,
                  transcript_next: int | None = None,
                  first_step: claim_step.FirstStep | None = None) -> Claim:  # fmt: skip
    """Claim a session for this worker in a transaction.

    Claimable: ``queued``; or ``running`` with an expired lease (its worker died); or ``running`` under a lease
    held by an earlier attempt of this same task, because Cloud Tasks only redelivers a task after that attempt
    failed, once that lease has gone a heartbeat interval (and the slack of a renewal's round trips:
    ``lease.renewed_lately``) without a renewal: two retries delivered together (or a retry beside a copy of the
    delivery) both see an earlier attempt's lease, and only the first to claim it may run; the other finds the lease
    just taken and is asked to retry later (``RENEWED_LATELY``). A worker that really died is taken over at most one
    and a half heartbeats later than without that rule. Anything else is a duplicate delivery and is left alone.
    ``resumes``: the record the task names (its outcomes read in the claim's batch, and with ``transcript_next``,
    its transcript's first free step id then, the steps before it: ``claim_reads``);
    ``first_step``: the resumed turn's step, stored in the claim's commit if it can be made from what it read.
    """
    ref = session_ref(session_id)
    used: list[firestore.Transaction] = []  # the attempt that committed is the last
    calm: dict[int, step_fence.Settled | None] = {}  # by attempt: what it saw settled (``step_fence``)

    @firestore.transactional
    def claim(transaction: firestore.Transaction) -> Claim:
        used.append(transaction)
        when = at or now()  # each attempt's own: the lease it writes starts when it commits, not when it began
        # One round trip: the session, and the transcript, writer and question its id names (hints, checked).
        reads = claim_reads.read(transaction, session_id, resumes, transcript_next)
        snap = reads.session
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return Claim(ClaimResult.NO_SESSION, None)
        session = Session.from_doc(data)
        if session.status == SessionStatus.RUNNING:
            expired = session.lease.until is None or session.lease.until <= when
            redelivered = session.lease.task == task and attempt > session.lease.attempt
            if not (expired or redelivered):
                return Claim(ClaimResult.LIVE_LEASE, None, trace_id=session.trace_id)
            fresh = lease.renewed_lately(snap.update_time, snap.read_time, lease_seconds=lease_seconds, at=when)
            if not expired and fresh:
                return Claim(ClaimResult.RENEWED_LATELY, None, trace_id=session.trace_id)
            result = ClaimResult.TOOK_OVER_EXPIRED if expired else ClaimResult.TOOK_OVER_RETRY
        elif session.status == SessionStatus.QUEUED:
            result = ClaimResult.CLAIMED
        else:
            return Claim(ClaimResult.FINISHED, None, session.status, session.trace_id, found=session)
        if session.transcript != session.session_id:
            refused = _take_transcript(transaction, session, when, reads)
            if refused is not None:
                return refused
        fields = session_update(
            status=SessionStatus.RUNNING,
            worker=worker,
            lease_task=task,
            lease_attempt=attempt,
            lease_until=when + timedelta(seconds=lease_seconds),
            takeovers=session.lease.takeovers + 1 if result.takeover else session.lease.takeovers,
            takeovers_without_progress=session.lease.takeovers_without_progress + (1 if result.takeover else 0),
            started_at=session.started_at or when,
            updated_at=when,
        )
        stepped = first_step(session, reads) if first_step is not None else None  # before the session's update:
        fields |= claim_step.created(transaction, session, stepped)  # that stays the claim's last write
        # Only over the document as read: a claim that commits beside another (the emulator has let two do so
        # after a lock wait) fails its precondition instead of running the session a second time.
        transaction.update(ref, fields, option=db().write_option(last_update_time=snap.update_time))
        session.apply(fields)
        calm[len(used)] = step_fence.at_claim(transaction, session, reads)
        return Claim(result, session, trace_id=session.trace_id, question=_question_read(session, reads),
                     transcript=reads.steps(session.transcript), outcomes=reads.outcomes(session.waiting),
                     stepped=stepped)  # fmt: skip

    try:
        claimed: Claim = _claim_again_if_changed(claim)  # parallel deliveries of one task race for it
    except Contended:  # parallel deliveries contended for the session until its transaction gave up
        lost = _lost_to_a_copy(session_id, task=task, attempt=attempt, when=at or now())
        if lost is None:
            raise
        return lost
    written = getattr(used[-1], "write_results", None) if used else None
    if claimed.session is not None and written:  # the session's update is the claim's last write
        lease.wrote(claimed.session, written[-1].update_time)
        step_fence.claimed(claimed.session, used[-1], calm.get(len(used)))
    return claimed


def _question_read(session: Session, reads: claim_reads.ClaimReads) -> Question | None:
    """The question ``session`` continues from, if the claim read it (its id named it)."""
    ref = question_ref(session.question_id) if session.question_id else None
    data = reads.data(ref) if ref is not None and reads.read(ref) else None
    return Question.from_doc(data) if data else None


def _take_transcript(transaction: firestore.Transaction, session: Session, when: datetime,
                     reads: claim_reads.ClaimReads) -> Claim | None:  # fmt: skip
    """A continuation's claim becomes its transcript's writer (None), or says why it does not run."""
    writer = _transcript_writer(transaction, session, when, reads)
    if writer is None:
        return None
    result_of = _late_result_of(session)
    if result_of is not None and result_of not in writer.awaiting:
        return _read_already(transaction, session, writer, when)  # its transcript read the result meanwhile
    # A child's result this continuation brings leaves the transcript's list of results to read.
    taken = {results.AWAITING: firestore.ArrayRemove([result_of])} if result_of is not None else {}
    late = _late_note(transaction, session, reads) if writer.active else None
    if late is not None:
        if taken:
            transaction.update(session_ref(session.transcript), taken)
        return _hand_over(transaction, session, writer, late, when)
    if writer.busy:
        return Claim(ClaimResult.TRANSCRIPT_BUSY, None, trace_id=session.trace_id)
    # Only over the root as read, as the session's update: a claim the emulator lets commit beside another fails here.
    root = session_ref(session.transcript)
    read_at = reads.updated.get(root.path)
    option = db().write_option(last_update_time=read_at) if read_at is not None else None
    transaction.update(root, {**session_update(transcript_writer=session.session_id), **taken}, option=option)
    return None


def _claim_again_if_changed(claim: Callable[[firestore.Transaction], Claim]) -> Claim:
    """The claim, run again from its reads once if the session (or its resumed step) changed before its commit."""
    try:
        return contended(claim)
    except (gexc.FailedPrecondition, gexc.AlreadyExists):
        log.info("the session changed while it was claimed; reading it again")
        return contended(claim)


def _lost_to_a_copy(session_id: str, *, task: str, attempt: int, when: datetime) -> Claim | None:
    """After a claim that could not commit for contention: a live lease taken by a copy of this very delivery (the
    same task, this attempt or a later one) makes this delivery a duplicate, as if it had read that lease; anything
    else is left to Cloud Tasks' retry (None)."""
    data = session_ref(session_id).get().to_dict()
    found = Session.from_doc(data) if data else None
    live = found is not None and found.status == SessionStatus.RUNNING and (found.lease.until or when) > when
    if found is None or not live or found.lease.task != task or found.lease.attempt < attempt:
        return None
    log.info("a parallel copy of this delivery claimed the session first", extra={"session_id": session_id})
    return Claim(ClaimResult.LIVE_LEASE, None, trace_id=found.trace_id)


# A session in one of these statuses has not ended: a parent waits for such a child.
UNFINISHED = frozenset({SessionStatus.QUEUED.value, SessionStatus.RUNNING.value, SessionStatus.PAUSED.value})


def all_ended(session_ids: list[str], transaction: firestore.Transaction | None = None) -> bool:
    """Whether every one of these sessions has ended (point reads; in ``transaction`` if given)."""
    if not session_ids:
        return True  # no read with nothing to read
    snaps = db().get_all([session_ref(s) for s in session_ids], field_paths=["status"], transaction=transaction)
    found = {snap.id: (snap.to_dict() or {}).get("status") for snap in snaps}
    return all(found.get(s) not in UNFINISHED for s in session_ids)


@dataclass(frozen=True)
class _Writer:
    """The session that writes a transcript now, as a claim of another session of it found it."""

    session_id: str
    status: str | None
    live: bool  # running under a lease that has not expired
    awaiting: tuple[str, ...] = ()  # the transcript's non-blocking children whose results it has not read

    @property
    def active(self) -> bool:
        """It will still read notes: it runs (even if its worker died: a takeover resumes it), waits, or is queued
        to run again (a parent whose children have ended)."""
        return self.status in {SessionStatus.RUNNING.value, SessionStatus.PAUSED.value, SessionStatus.QUEUED.value}

    @property
    def busy(self) -> bool:
        """It writes the transcript now, or is about to: nobody may take it over."""
        return self.live or self.status == SessionStatus.QUEUED.value


def _transcript_writer(transaction: firestore.Transaction, session: Session, when: datetime,
                       reads: claim_reads.ClaimReads) -> _Writer | None:  # fmt: skip
    """The writer of the transcript ``session`` continues, or None if it is ``session`` already.

    Two sessions can never write one transcript: every step commit checks the writer (``commit_step``), and a
    claim takes it over only from a writer that is not running under a live lease.
    """
    root = session_ref(session.transcript)
    fields = ["transcript_writer", "status", "lease_until", "waiting", results.AWAITING]
    found = _doc(transaction, root, fields, reads)
    awaiting = tuple(str(c) for c in found.get(results.AWAITING) or [])
    writer = found.get("transcript_writer") or session.transcript
    if writer == session.session_id:
        return None
    if writer != session.transcript:
        found = _doc(transaction, session_ref(writer), ["status", "lease_until", "waiting"], reads)
    heir = _heir(writer, found)
    if heir is not None and heir != session.session_id:
        # A writer whose paused turn woke writes on in the continuation that resumes it, queued until claimed: that
        # one is the writer to be (news goes to it; nothing else takes the transcript from it meanwhile).
        writer, found = heir, _doc(transaction, session_ref(heir), ["status", "lease_until"], reads)
    until = found.get("lease_until")
    live = found.get("status") == SessionStatus.RUNNING.value and until is not None and until > when
    return _Writer(writer, found.get("status"), live, awaiting)


def _heir(writer: str, found: dict[str, Any]) -> str | None:
    """The continuation that resumes ``writer``'s turn (named after it, ``waiting.wake``), if ``writer`` (its fields
    ``found``) is a top-level session whose waiting record woke (resumed)."""
    record = found.get("waiting") or []
    if found.get("status") != SessionStatus.RESUMED.value or not record or not isinstance(record[0], dict):
        return None
    return ids.resume_id(writer, Waiting.from_doc(record[0]).seq)


def _doc(transaction: firestore.Transaction, ref: firestore.DocumentReference, fields: list[str],
         reads: claim_reads.ClaimReads) -> dict[str, Any]:  # fmt: skip
    """A document's ``fields``, as the claim read it already, or read now in ``transaction``."""
    if reads.read(ref):
        return reads.data(ref) or {}
    return reads.noted(ref.get(transaction=transaction, field_paths=fields))


def _late_result_of(session: Session) -> str | None:
    """The child whose result this continuation brings (``children.report_late``), if that is what it brings."""
    note = session.late_note
    return note.question_id if note is not None and note.kind == NoteKind.CHILD_RESULT else None


def _read_already(transaction: firestore.Transaction, session: Session, writer: _Writer, when: datetime) -> Claim:
    """A continuation bringing a child's result its transcript has read meanwhile (a session of it collected it at
    a step commit): it ends without running, so the result is never read twice."""
    transaction.update(
        session_ref(session.session_id),
        session_update(status=SessionStatus.RESUMED, handed_to=writer.session_id, ended_at=when, updated_at=when),
    )
    return Claim(ClaimResult.FINISHED, None, SessionStatus.RESUMED, session.trace_id)


def _late_note(transaction: firestore.Transaction, session: Session, reads: claim_reads.ClaimReads) -> Note | None:
    """The news a continuation brings, if it is news rather than a pending call's response: an answer to a
    non-blocking question, or a child's result. Any session of the transcript can read it."""
    if session.late_note is not None:
        return session.late_note
    if not session.question_id or session.waiting:
        return None
    ref = question_ref(session.question_id)
    data = reads.data(ref) if reads.read(ref) else ref.get(transaction=transaction).to_dict()
    question = Question.from_doc(data) if data else None
    if question is None or question.blocking:
        return None
    return Note(kind=NoteKind.ANSWER, text=question.answer or session.text, user=session.origin.trigger_user,
                ts=session.origin.trigger_ts, question_id=question.question_id, question=question.text,
                matched_option=question.matched_option)  # fmt: skip


def _hand_over(transaction: firestore.Transaction, session: Session, writer: _Writer, note: Note,
               when: datetime) -> Claim:  # fmt: skip
    """News whose transcript another session is writing (running, or paused on its own question, approvals or
    children) goes to that session as a note, read at its next turn or by its continuation; this one ends.
    Running instead would answer nothing the model asked and interleave two sessions in one transcript. The thread's
    messages noted for this one while it was queued (``steering.add_note``) go there with it."""
    transaction.update(session_ref(writer.session_id), appended(notes=[note, *session.notes]))
    transaction.update(
        session_ref(session.session_id),
        session_update(status=SessionStatus.RESUMED, handed_to=writer.session_id, ended_at=when, updated_at=when),
    )
    dead = writer.status == SessionStatus.RUNNING.value and not writer.live
    return Claim(ClaimResult.HANDED_OVER, None, SessionStatus.RESUMED, session.trace_id, writer.session_id, dead)


def end_session(session_id: str, *, expect: SessionStatus, status: SessionStatus, cutoff: datetime | None = None,
                **fields: Unpack[SessionChanges]) -> Session | None:  # fmt: skip
    """Move a session from ``expect`` to ``status`` in a transaction (for a running one: only if its lease
    expired before ``cutoff``); returns it, or None if it changed meanwhile."""
    ref = session_ref(session_id)

    @firestore.transactional
    def end(transaction: firestore.Transaction) -> Session | None:
        snap = ref.get(transaction=transaction)
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return None
        session = Session.from_doc(data)
        if session.status != expect:
            return None
        if cutoff is not None and (session.lease.until is None or session.lease.until > cutoff):
            return None
        updates = {
            **session_update(status=status, lease_until=None, ended_at=now(), updated_at=now()),
            **stored(fields),
        }
        transaction.update(ref, {**updates, **quotas.released(transaction, session_id, data)})
        session.apply(updates)
        return session

    ended: Session | None = transact(end)
    return ended


def children_of(session_id: str) -> list[Session]:
    """The sessions ``session_id`` delegated to (one indexed query)."""
    query = db().collection(SESSIONS).where(filter=FieldFilter("parent_session_id", "==", session_id))
    return [Session.from_doc(snap.to_dict() or {}) for snap in query.stream()]


def tree_members(root_id: str) -> list[Session]:
    """Every session delegated within the tree rooted at ``root_id``, at any depth (one indexed query)."""
    query = db().collection(SESSIONS).where(filter=FieldFilter("root_session_id", "==", root_id))
    return [Session.from_doc(snap.to_dict() or {}) for snap in query.stream()]


def set_stream_ts(session_id: str, ts: str, *, by: Session | None = None) -> None:
    """Record a streamed message before anything is appended to it, so a takeover finds it (one write). Written
    by its running worker (``by``), it keeps the update time that worker's fenced writes rest on (``lease``)."""
    ref = session_ref(session_id)
    known = lease.last_written(by) if by is not None else None
    if by is not None and known is not None:
        try:
            written = ref.update(session_update(stream_ts=ts), option=db().write_option(last_update_time=known))
        except (gexc.FailedPrecondition, gexc.Aborted):
            pass  # written by someone else meanwhile: written plainly, as below
        else:
            lease.wrote(by, written.update_time)
            return
    ref.update(session_update(stream_ts=ts))


def steered_session_in_thread(channel: str, thread_ts: str, *, as_of: datetime | None = None) -> Session | None:
    """The top-level session a person's message in the thread steers, if any, with one indexed query (channel,
    thread_ts, status); ``as_of``: as it was at that time (a read time Firestore gave, within the hour), instead of
    now. The running one; else a continuation queued to resume the thread's turn (its first turn reads its notes,
    never the thread). A queued mention reads the thread as it opens: a message there needs no note. A delegated
    child or a narration runs in the same thread but does not talk to it: a person's message there is never theirs."""
    statuses = [SessionStatus.RUNNING.value, SessionStatus.QUEUED.value]
    query = _in_thread(channel, thread_ts, statuses)
    found = [Session.from_doc(snap.to_dict() or {}) for snap in query.stream(read_time=as_of)]
    running = [s for s in found if s.top_level and s.status == SessionStatus.RUNNING]
    queued = [s for s in found if s.status == SessionStatus.QUEUED and takes_notes_queued(s.kind, s.late_note)]
    return next(iter(running + queued), None)


def takes_notes_queued(kind: SessionKind | str | None, late_note: object) -> bool:
    """Whether a queued session of this kind takes a thread message as a note: a continuation that resumes the
    thread's turn (its first turn reads its notes before the model's; a mention reads the thread instead). One that
    brings a late child's result may end without running (its result read meanwhile), so it takes none."""
    return kind == SessionKind.CONTINUATION.value and late_note is None


def active_sessions_in_thread(channel: str, thread_ts: str, *, delegated: bool = False) -> list[Session]:
    """The thread's top-level sessions that have not ended (queued, running or paused), with one indexed query
    (channel, thread_ts, status): what a person's "stop" in the thread stops (``delegated``: its delegated tasks
    that have not ended instead)."""
    active = [SessionStatus.QUEUED.value, SessionStatus.RUNNING.value, SessionStatus.PAUSED.value]
    found = [Session.from_doc(snap.to_dict() or {}) for snap in _in_thread(channel, thread_ts, active).stream()]
    return [s for s in found if (s.reports_to_parent if delegated else s.top_level)]


def any_session_in_thread(channel: str, thread_ts: str) -> bool:
    """Whether any session, in any status, was started in the thread (one indexed query, at most one document)."""
    return any(
        True for _ in _in_thread(channel, thread_ts, [status.value for status in SessionStatus]).limit(1).stream()
    )


def _in_thread(channel: str, thread_ts: str, statuses: list[str]) -> Any:
    """The query of the thread's sessions in ``statuses`` (the index on channel, thread_ts, status)."""
    return (
        db()
        .collection(SESSIONS)
        .where(filter=FieldFilter("channel", "==", channel))
        .where(filter=FieldFilter("thread_ts", "==", thread_ts))
        .where(filter=FieldFilter("status", "in", statuses))
    )


def mark_followed_up(session_id: str) -> None:
    try:
        session_ref(session_id).update(session_update(followed_up=True, updated_at=now()))
    except gexc.NotFound:
        log.warning("cannot mark a missing session as followed up", extra={"followed": session_id})

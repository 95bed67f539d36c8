"""A transcript's steps and a running session's notes: every step is written in one transaction with the
session's progress, fenced by its lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore

from shared.errors import ProductError
from shared.state import child_questions, lease, quotas, results, spend, step_fence, waiting
from shared.state.firestore import STEPS, contended, db, now, session_ref, step_ref
from shared.state.models import Audit, Note, NoteKind, SessionStatus, Step, Waiting, WaitKind
from shared.state.session_model import Session, SessionUpdate, stored
from shared.state.updates import session_update


class LeaseLost(ProductError):
    """Another worker took the session over; this one must stop writing."""


class StopRequested(ProductError):
    """Someone stopped the session (or its tree): it ends at this step boundary, writing nothing more."""

    def __init__(self, by: str) -> None:
        super().__init__(f"stopped by {by}")
        self.by = by


class NotesPending(ProductError):
    """Notes reached a session just as it tried to end; it must read them first."""

    def __init__(self, notes: list[Note]) -> None:
        super().__init__(f"{len(notes)} note(s) arrived")
        self.notes = notes


# Terminal statuses a session may not take while notes are pending: it reads them first.
_WAITS_FOR_NOTES = frozenset({SessionStatus.DONE.value, SessionStatus.SILENT_EXIT.value})


class ChildAsked(ProductError):
    """A child of the turn this session was about to wait on asked it a question meanwhile: waiting would wait
    for ever (the child waits for the answer), so the session carries on and reads the question."""

    def __init__(self, notes: list[Note]) -> None:
        super().__init__(f"{', '.join(n.user for n in notes)} asked while the session ran")
        self.notes = notes


class WaitsResolved(ProductError):
    """Everything a turn was about to wait on (answered, decided, ended) was resolved while it ran: it carries on
    in place. ``own``: what resolved a wait on the session's own document, as the commit read it (its parent's
    answer, in ``parent_question``), which the turn's copy of the session does not hold yet."""

    def __init__(self, message: str, own: dict[str, Any]) -> None:
        super().__init__(message)
        self.own = own


class TurnAbandoned(ProductError):
    """A question of the turn this session was about to wait on was closed unanswered while it ran (a newer
    question in its thread replaced it, ``cancel_older``, which ends a paused asker but leaves a running one be):
    the session ends (abandoned) instead of pausing, as it would have had it paused first. ``record``: what the turn
    waits on; ``closed``: the questions closed, by id: their status."""

    def __init__(self, record: list[Waiting], closed: dict[str, str]) -> None:
        super().__init__(f"question(s) {', '.join(closed)} of the turn were closed unanswered while it ran")
        self.record = record
        self.closed = closed


def _kept_by_pause(transaction: firestore.Transaction, current: dict[str, Any], pending: list[Note],
                   record: list[Waiting]) -> list[Note]:  # fmt: skip
    """The pending notes a pause on this waiting record keeps; raises if the pause would wait on what has already
    happened, or ``TurnAbandoned`` if a question of it was closed unanswered. It reads (what the record waits on), so
    it runs before the transaction's first write."""
    children = {w.key for w in record if w.kind == WaitKind.CHILD and not w.released}
    asked = [n for n in pending if n.kind == NoteKind.CHILD_QUESTION and n.user in children]
    if asked:
        raise ChildAsked(asked)
    found = waiting.outcomes(transaction, current, record)
    if found.closed:
        raise TurnAbandoned(record, found.closed)
    if not found.unresolved(record):
        own = {"parent_question": current.get("parent_question"), "parent_questions": current.get("parent_questions")}
        raise WaitsResolved(f"the {len(record)} waits of the turn were resolved while it ran", own)
    return waiting.notes_left(pending, record)


def load_steps(transcript_id: str) -> list[Step]:
    """Every step of a transcript, in order: one query."""
    query = session_ref(transcript_id).collection(STEPS).order_by("seq")
    return [Step.from_doc(snap.to_dict() or {}) for snap in query.stream()]


def audit_of(session: Session) -> list[Audit]:
    """The audit records ``session`` wrote, in order: the ground truth of what it did."""
    return [entry for step in load_steps(session.transcript) if step.session_id == session.session_id
            for entry in step.audit]  # fmt: skip


def _progress(step: Step | None, fields: SessionUpdate | None, consumed: list[dict[str, Any]], *,
              lease_seconds: int, when: datetime) -> dict[str, Any]:  # fmt: skip
    """The session's fields a step commit writes: its progress, its lease (none once it ends), the notes read."""
    updates: dict[str, Any] = {"updated_at": when, **stored(fields or {})}
    if step is not None:
        updates["next_seq"] = step.seq + 1
        updates["takeovers_without_progress"] = 0  # progress: a later takeover starts counting again
    ending = updates.get("status", SessionStatus.RUNNING.value) != SessionStatus.RUNNING.value
    updates["lease_until"] = None if ending else when + timedelta(seconds=lease_seconds)
    if consumed:
        updates["notes"] = firestore.ArrayRemove(consumed)
    return updates


# What a step commit reads of the session (and of its transcript's root, for a continuation).
_FENCE_FIELDS = ["worker", "status", "notes", "transcript_writer", "stop_requested", "parent_question",
                 "parent_questions",
                 results.AWAITING, child_questions.MAY_ASK, quotas.RELEASES]  # fmt: skip


def _read_with_root(transaction: firestore.Transaction, ref: firestore.DocumentReference,
                    root_ref: firestore.DocumentReference | None,
                    fields: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """A session's ``fields`` and its transcript root's (the session itself when ``root_ref`` is None), read in
    ``transaction`` in one batched read."""
    if root_ref is None:
        current = ref.get(transaction=transaction, field_paths=fields).to_dict() or {}
        return current, current
    snaps = {s.reference.path: s for s in db().get_all([ref, root_ref], field_paths=fields, transaction=transaction)}
    return snaps[ref.path].to_dict() or {}, snaps[root_ref.path].to_dict() or {}


def _wrote(session: Session, used: list[firestore.Transaction], *, running: bool) -> None:
    """Remember the update time of the session's document as this commit left it (its last write: the last of the
    transaction's ``used`` attempts), while the session still runs under this worker's lease; forget it once the
    session pauses or ends. Nothing if no transaction ran (``step_fence`` committed the step, and remembered it)."""
    if not used:
        return
    written = getattr(used[-1], "write_results", None) or []
    if running and written:
        lease.wrote(session, written[-1].update_time)
    else:
        lease.forget(session)


def _plain(updates: dict[str, Any], *, ending: bool, pausing: bool, consumed: bool, spending: bool) -> bool:
    """Whether a step commit may rest on the last one (``step_fence``): it consumes no notes, records no spend and
    leaves the session running, or ends it done (an end that would wait for notes: the fence says there are none)."""
    done = ending and updates.get("status") in _WAITS_FOR_NOTES
    return (done or not ending) and not (pausing or consumed or spending)


@dataclass(frozen=True)
class _Stopped:
    """A model turn's commit that found a stop requested: it stored only the tokens the turn spent."""

    by: str
    spent: dict[str, Any]


def _stopped(transaction: firestore.Transaction, session: Session, by: str, updates: dict[str, Any],
             spent: int) -> _Stopped:  # fmt: skip
    """A stop found by a step commit: it writes nothing and raises, unless the step is a model turn that answered as
    the stop came, whose tokens were really spent: those alone are stored (the session's totals, the person's day)."""
    if "tokens" not in updates:
        raise StopRequested(by)
    spent_only = {"tokens": updates["tokens"], "updated_at": updates["updated_at"]}
    spend.record(transaction, session, spent, updates["updated_at"])
    transaction.update(session_ref(session.session_id), spent_only)
    return _Stopped(by, spent_only)


def _unless_stopped(session: Session, pending: list[Note] | _Pending | _Stopped) -> list[Note] | _Pending:
    """What a step commit returned; one that found a stop (``_stopped``): the session as it stored it, and the stop
    raised."""
    if isinstance(pending, _Stopped):
        lease.forget(session)  # it ends at this boundary (its end's commit reads what it needs)
        session.apply(pending.spent)
        raise StopRequested(pending.by)
    return pending


@dataclass(frozen=True)
class _Pending:
    """An ending that found notes: the children's results it read are stored as notes, nothing else."""

    notes: list[Note]


def commit_step(
    session: Session,
    step: Step | None,
    *,
    lease_seconds: int,
    fields: SessionUpdate | None = None,
    consumed_notes: list[Note] | None = None,
    wait_for_notes: bool = True,
    pausing_on_record: list[Waiting] | None = None,
    spent: int = 0,
    fenced: Sequence[step_fence.FencedWrite] = (),
) -> list[Note]:
    """Persist one step and the session's progress together, fenced by the lease; returns the pending notes.

    One transaction: read the session to check this worker still holds it, create the step with ``create()``
    (a step is never overwritten), and update the session (next sequence number, lease renewal and any other
    ``fields``, such as a terminal status). The same read returns the session's pending notes, so checking for
    them costs no extra read; ``consumed_notes`` are removed. A terminal status is not written while notes are
    pending: ``NotesPending`` is raised instead, unless the session may not go on (``wait_for_notes=False``).
    A pause on ``pausing_on_record`` (what the turn's calls wait on, of one kind or several) stores it as the
    session's waiting record, writing nothing but raising ``WaitsResolved`` if nothing in it is still waited on, and
    ``ChildAsked`` if a child it waits on has asked a question; the notes that brought outcomes it waits on are
    dropped (the resumption reads each from its own document). ``fenced`` are written with the step, under the same
    fence (the ``done`` records of the calls whose results it carries: ``shared.state.ledger``); only a commit that
    returns wrote them (one that raises, or stores the notes it found instead, wrote none of them). A plain step
    commit after the claim needs no read while nobody else wrote the session or its root since and every step commit
    before it was made so (``step_fence``: one commit fenced on their update times, else this transaction).
    """
    ref = session_ref(session.session_id)
    when = now()
    consumed = [note.to_doc() for note in consumed_notes or []]
    updates = _progress(step, fields, consumed, lease_seconds=lease_seconds, when=when)
    ending, spending = updates["lease_until"] is None, bool(spent) and spend.in_force().on

    continuing = session.transcript != session.session_id
    root_ref = session_ref(session.transcript) if continuing else None

    used: list[firestore.Transaction] = []  # the attempt that committed is the last (none: ``step_fence`` committed)

    @firestore.transactional
    def write(transaction: firestore.Transaction) -> list[Note] | _Pending | _Stopped:
        used.append(transaction)
        # The session and its transcript's root (for a continuation), in one round trip.
        current, root = _read_with_root(transaction, ref, root_ref, _FENCE_FIELDS)
        if current.get("worker") != session.lease.worker or current.get("status") != SessionStatus.RUNNING.value:
            raise LeaseLost(f"session is now {current.get('status')} under worker {current.get('worker')}")
        pausing = updates.get("status") == SessionStatus.PAUSED.value
        if current.get("stop_requested") and (pausing or not ending):
            return _stopped(transaction, session, str(current["stop_requested"]), updates, spent if spending else 0)
        # Only the transcript's writer may add to it (a continuation becomes the writer when it is claimed).
        writer = root.get("transcript_writer")
        if writer not in (None, session.session_id):
            raise LeaseLost(f"session {writer} writes this transcript now")
        pending = [Note.from_doc(n) for n in current.get("notes") or [] if n not in consumed]
        # The results of the transcript's non-blocking children that ended since, and its children's questions:
        # notes from this commit on.
        collected = results.collect(
            transaction,
            session.transcript,
            results.awaiting_of(root),
            [*pending, *(consumed_notes or [])],
            asking=child_questions.may_ask_of(root),
        )
        pending += collected.notes
        if pausing_on_record:  # its reads before this transaction's first write (the records dropped below)
            pending = _kept_by_pause(transaction, current, pending, pausing_on_record)
        # The results read leave the root's list (in the session's own update when it is the root).
        dropped = results.drop(transaction, session.transcript, collected, separately=continuing)
        # A pause is never blocked by notes: they move to the continuation. Only an ending waits for them.
        if ending and pending and wait_for_notes and updates.get("status") in _WAITS_FOR_NOTES:
            if collected.records:  # the records read are kept as notes: this commit stores only them
                transaction.update(ref, {**session_update(notes=list(pending), updated_at=when), **dropped})
                return _Pending(pending)
            raise NotesPending(pending)
        writes = {**updates, **dropped}
        if collected.notes:  # the notes as read, less the consumed ones, with the results read
            writes |= session_update(notes=list(pending))
        if pausing_on_record:
            writes |= session_update(notes=list(pending), waiting=list(pausing_on_record))
        for write_with_step in fenced:
            write_with_step.apply(transaction)
        if step is not None:
            transaction.create(step_ref(session.transcript, step.seq), step.to_doc())
        spend.record(transaction, session, spent if spending else 0, when)  # against its person's daily budget
        # A mention's session that pauses or ends no longer runs: it stops counting against the rate limits.
        released = quotas.released(transaction, session.session_id, current) if ending else {}
        transaction.update(ref, {**writes, **released})
        return pending

    # A parent's step contends with its children writing to its document (their ends, their questions): retried as
    # such, its commit more often and an aborted (lock-timed-out) read again, as the answers and the claims are.
    # A step after the claim, when the claim saw everything this commit checks settled and every step commit since
    # was made so: one commit fenced on nobody having written the session or its root since (``step_fence``), else
    # the transaction. (plain: a step that leaves the session running, or ends it done, and reads and records
    # nothing more)
    plain = _plain(updates, ending=ending, pausing=bool(pausing_on_record), consumed=bool(consumed), spending=spending)
    pending: list[Note] | _Pending | _Stopped = (
        [] if step_fence.commit(session, step, updates, fenced, plain=plain, ends=ending) else contended(write)
    )
    pending = _unless_stopped(session, pending)
    _wrote(session, used, running=not ending and not isinstance(pending, _Pending))
    if isinstance(pending, _Pending):
        session.notes = pending.notes
        raise NotesPending(pending.notes)
    session.apply(updates)
    session.waiting = list(pausing_on_record) if pausing_on_record else session.waiting
    session.notes = pending
    return pending

"""A paused session's waiting record in Firestore (issue 23): whether everything its turn waits on is resolved,
and the one wake-up that resumes that turn.

A turn that waits on more than one kind of thing (an operator question, approvals, children, its parent's answer,
an MCP server's input request) pauses once with its record (``Session.waiting``). Every resolution (an answer, a
decision, a child's end, a parent's answer) is one transaction that records its own outcome where it always did,
reads the asker and, through ``check``, every other waited thing; the one that finds them all resolved wakes the
asker (``wake``): a delegated child is queued again, a top-level session resumes in a continuation named after the
paused turn. Transactions are serializable, so of two resolutions racing, exactly one sees the other's outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from google.cloud import firestore

from shared.state import ids, legacy_waits, waits
from shared.state.fenced import FENCE_FAILED, Unfenceable
from shared.state.firestore import ALREADY_EXISTS, contended, db, question_ref, session_ref
from shared.state.models import (
    Note,
    NoteKind,
    QuestionStatus,
    SessionKind,
    SessionStatus,
    Waiting,
    WaitKind,
)
from shared.state.origin import continuing
from shared.state.session_model import Session
from shared.state.updates import appended, session_update


def record_of(asker: dict[str, Any]) -> list[Waiting]:
    """The waiting record of a session document (empty: it does not wait; a document stored under the old pause
    markers is read as the record they meant)."""
    return [Waiting.from_doc(entry) for entry in legacy_waits.upgraded(asker).get("waiting") or []]


def waits_on(asker: dict[str, Any], kind: WaitKind, key: str) -> bool:
    """Whether this paused session's record waits on ``key`` (and nothing released it). Keys name their kind (a
    question's, an approval's, a child's and a parent question's ids differ); ``kind`` says what the caller
    resolves (an operator question and an MCP server's request are both questions)."""
    paused = asker.get("status") == SessionStatus.PAUSED.value
    return paused and any(w.key == key and not w.released for w in record_of(asker))


def _ref(entry: Waiting) -> firestore.DocumentReference | None:
    return waits.of(entry.kind).ref(entry)


# The question statuses that end the session waiting on them (``shared.asks.questions``: cancel_older, abandon; a
# stop): whoever closed the question so ends the session next, and its turn never resumes.
_ENDS_ITS_SESSION = frozenset({QuestionStatus.CANCELLED.value, QuestionStatus.ABANDONED.value})
_ASKED = frozenset({WaitKind.QUESTION, WaitKind.MCP_INPUT})  # the kinds stored as questions


@dataclass(frozen=True)
class Outcomes:
    """What a waiting record's entries came to, as read: those still waited on, and its questions closed unanswered
    (cancelled, abandoned: whoever closed one is ending the session), by id: their status."""

    open: list[Waiting]
    closed: dict[str, str]

    def unresolved(self, record: list[Waiting], *, resuming: bool = False) -> list[Waiting]:
        """The entries still waited on; ``resuming``: the caller wakes the turn when nothing is left, so a question
        closed unanswered counts as still waited on (a resolution racing that end must not resume what is ending)."""
        return [w for w in record if w in self.open or (resuming and w.key in self.closed)]


def outcomes(transaction: firestore.Transaction | None, asker: dict[str, Any], record: list[Waiting], *,
             besides: tuple[WaitKind, str] | None = None, fenced: bool = False) -> Outcomes:  # fmt: skip
    """The entries of ``record`` (leaving out ``besides``, the one being resolved by the caller) as read now (point
    reads in ``transaction``, one batch). ``fenced``: a fenced commit follows, which cannot fence these reads
    (``Unfenceable`` when there is anything to read)."""
    others = [w for w in record if (besides is None or w.key != besides[1]) and not w.released]
    refs = {w: ref for w in others if (ref := _ref(w)) is not None}  # each kind says what it reads (if anything)
    found: dict[str, dict[str, Any]] = {}
    if refs and fenced:
        raise Unfenceable(f"the turn waits on {len(refs)} more thing(s) of their own documents")
    if refs:
        snaps = db().get_all(list(refs.values()), field_paths=["status"], transaction=transaction)
        found = {snap.reference.path: snap.to_dict() or {} for snap in snaps if snap.exists}
    read = {w: found.get(refs[w].path) if w in refs else None for w in others}
    closed = closed_unanswered(others, {w.key: (read[w] or {}).get("status") for w in others})
    return Outcomes([w for w in others if not waits.of(w.kind).resolved(w, read[w], asker)], closed)


def closed_unanswered(record: list[Waiting], statuses: Mapping[str, Any]) -> dict[str, str]:
    """The questions of ``record`` (entries not released) closed unanswered (cancelled, abandoned: whoever closed one
    is ending the session), by id: their status, from ``statuses`` (by key, as read: by ``outcomes`` in a pause's
    commit or an answer's transaction, or with the questions themselves)."""
    return {w.key: str(statuses.get(w.key)) for w in record
            if not w.released and w.kind in _ASKED and statuses.get(w.key) in _ENDS_ITS_SESSION}  # fmt: skip


def asked(record: list[Waiting]) -> list[str]:
    """The ids of the questions ``record`` still waits on (entries not released)."""
    return [w.key for w in record if w.kind in _ASKED and not w.released]


def unresolved(transaction: firestore.Transaction | None, asker: dict[str, Any], record: list[Waiting], *,
               besides: tuple[WaitKind, str] | None = None, fenced: bool = False,
               resuming: bool = False) -> list[Waiting]:  # fmt: skip
    """The entries of ``record`` still waited on (``outcomes``), leaving out ``besides``. ``resuming``: the caller
    wakes the turn when nothing is left, so a question of it closed unanswered (cancelled, abandoned: its session is
    being ended by whoever closed it) counts as still waited on: a resolution racing that end must not resume what
    is ending."""
    return outcomes(transaction, asker, record, besides=besides, fenced=fenced).unresolved(record, resuming=resuming)


@dataclass(frozen=True)
class Wake:
    """A complete paused turn, as read in a resolution's transaction: who resumes it (written by ``wake``)."""

    asker_id: str
    asker: dict[str, Any]
    resumed: bool  # its continuation exists already (another resolution woke it)


def check(transaction: firestore.Transaction | None, asker_id: str, asker: dict[str, Any], *,
          resolving: tuple[WaitKind, str] | None = None,
          read: Mapping[str, Any] | None = None, fenced: bool = False, net: bool = False,
          found: Outcomes | None = None) -> Wake | None:  # fmt: skip
    """Reads only (in ``transaction``, or plain reads without one). A ``Wake`` when the paused ``asker`` waits on
    nothing more once ``resolving`` is resolved; None while anything else is waited on. ``read``: snapshots the
    transaction read already, by path (the turn's continuation among them is not read again). ``fenced``: a fenced
    commit follows (``shared.state.fenced``) and nothing beyond ``read`` may be read (``Unfenceable``): the asker's
    other waits, with documents of their own, are the transaction's to decide. A turn with a question closed
    unanswered is never woken (its session is being ended, ``unresolved``), except for ``net``: the sweep's net,
    which ends such a session itself (``settle_unwaited``). ``found``: the record's outcomes as the caller read them
    (``outcomes``, leaving out ``resolving``), not read again."""
    record = record_of(asker)
    if asker.get("status") != SessionStatus.PAUSED.value or not record:
        return None
    found = found or outcomes(transaction, asker, record, besides=resolving, fenced=fenced)
    if found.unresolved(record, resuming=not net):
        return None
    resumed = False
    if asker.get("kind") != SessionKind.CHILD.value:
        resume_ref = session_ref(ids.resume_id(asker_id, record[0].seq))
        known = (read or {}).get(resume_ref.path)
        if known is None and fenced:
            raise Unfenceable(f"{resume_ref.path} was not read")
        resumed = (known or resume_ref.get(transaction=transaction, field_paths=["status"])).exists
    return Wake(asker_id, asker, resumed)


def wake(transaction: firestore.Transaction | firestore.WriteBatch, found: Wake, *, trigger_ts: str | None,
         user: str, at: datetime, extra: dict[str, Any] | None = None, news: list[Note] | None = None,
         fence: datetime | None = None) -> Session | None:  # fmt: skip
    """Writes only. Resume the complete turn: a child is queued again (it keeps its identity, parent and budget);
    a top-level session becomes ``resumed`` and its continuation, carrying the record and the notes that reached
    it meanwhile (and ``news``), is created. ``extra``: more fields for the asker, in the same write. ``fence``: the
    asker's update time as read (in a batch instead of a transaction): its write fails if anything wrote it since.
    Returns the session whose task to queue (None: already woken)."""
    asker = Session.from_doc(found.asker)
    ref = session_ref(found.asker_id)
    option = db().write_option(last_update_time=fence) if fence is not None else None
    news = news or []
    if asker.kind == SessionKind.CHILD:  # its record stored as read (a session paused under the old markers too)
        fields = {
            **session_update(status=SessionStatus.QUEUED, started_at=None, updated_at=at, waiting=list(asker.waiting)),
            **legacy_waits.dropped(found.asker),
            **(extra or {}),
        }
        if news:
            fields |= appended(notes=list(news))
        transaction.update(ref, fields, option=option)
        asker.status = SessionStatus.QUEUED
        return asker
    if found.resumed:
        if extra or news:
            fields = {**(extra or {}), **session_update(updated_at=at)}
            if news:
                fields |= appended(notes=list(news))
            transaction.update(ref, fields, option=option)
        return None
    continuation = Session.new(
        session_id=ids.resume_id(found.asker_id, asker.waiting[0].seq),
        kind=SessionKind.CONTINUATION,
        **continuing(asker),
        trigger_ts=trigger_ts or asker.origin.thread_ts,
        trigger_user=user,
        text=f"the outcomes of {len(asker.waiting)} waiting call(s)",
        created_at=at,
        waiting=list(asker.waiting),
        notes=[*asker.notes, *news],
        next_seq=asker.next_seq,  # its asker's transcript's first free step id (its claim checks it is still free)
    )
    transaction.create(session_ref(continuation.session_id), continuation.to_doc())
    transaction.update(ref, {**session_update(status=SessionStatus.RESUMED, notes=[], updated_at=at), **(extra or {})},
                       option=option)  # fmt: skip
    return continuation


def release_children(asker: dict[str, Any]) -> list[dict[str, Any]]:
    """The record with its children's waits released (a child of the turn asked its parent, who cannot answer
    while it waits): those calls get "still running", each child's result reaching the asker as a note."""
    return [replace(w, released=w.released or w.kind == WaitKind.CHILD).to_doc() for w in record_of(asker)]


def waited_children(asker: dict[str, Any]) -> list[str]:
    """The children a paused session's record still waits on."""
    paused = asker.get("status") == SessionStatus.PAUSED.value
    return [w.key for w in record_of(asker) if paused and w.kind == WaitKind.CHILD and not w.released]


def wake_after_child(child: Session, at: datetime) -> Session | None:
    """After a blocking child's end: its parent, woken if its waiting record is complete now (only for a parent that
    waits on a record naming this child). Returns the session to queue.

    Siblings end at once: each first reads the parent and its record outside a transaction, and only one that finds
    nothing else waited on wakes it. Its own end is committed before, so of siblings ending together the last to
    commit sees every other end (reads are strongly consistent) and wakes the parent; the others leave it to that
    one (a question or approval of the same turn, resolved later, wakes it through its own check). Several may find
    the record complete at once: each wakes it in one batch fenced by the parent's update time as read (and a
    continuation's ``create()``), which only one commits; the others, and anything that wrote the parent since,
    fall back to the waking transaction, which finds it woken (issue 28.4: no transaction on the parent to contend
    for)."""
    parent_ref = session_ref(child.tree.parent_id or "")
    snap = parent_ref.get()
    seen = snap.to_dict() if snap.exists else None
    if seen is None or not waits_on(seen, WaitKind.CHILD, child.session_id):
        return None
    if seen.get("status") == SessionStatus.PAUSED.value and unresolved(None, seen, record_of(seen), resuming=True):
        return None  # something else is still waited on: whatever resolves last wakes the parent
    batch = db().batch()
    woken = wake(batch, Wake(parent_ref.id, seen, False), trigger_ts=None, user=child.origin.trigger_user, at=at,
                 fence=snap.update_time)  # fmt: skip
    try:
        batch.commit()
    except FENCE_FAILED:  # written since (woken, most likely), its continuation exists, or aborted by contention
        pass
    else:
        return woken

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Session | None:
        data = parent_ref.get(transaction=transaction).to_dict()
        if data is None or not waits_on(data, WaitKind.CHILD, child.session_id):
            return None
        found = check(transaction, parent_ref.id, data)
        return wake(transaction, found, trigger_ts=None, user=child.origin.trigger_user, at=at) if found else None

    fallback: Session | None = contended(run)
    return fallback


class Unwaited(StrEnum):
    """What the sweep's check of a paused session found (``settle_unwaited``)."""

    WAITS = "waits"  # something in its record is still open, it changed meanwhile, or its turn resumed already
    WOKEN = "woken"  # nothing was open any more and nothing had resumed it: woken now (a top-level session's
    # continuation created, a delegated child queued again)
    ENDS = "ends"  # nothing is open, and it must not resume: no record to resume from, or an operator question of
    # its turn was cancelled or abandoned (the session was meant to end with it: a newer question replaced it, or
    # the sweep gave up on it)


@dataclass(frozen=True)
class Settled:
    found: Unwaited
    woken: Session | None = None  # WOKEN: the session whose task to queue (the continuation, or the child itself)
    closed: dict[str, str] = field(default_factory=dict)  # ENDS: its turn's closed questions, by id: their status


def settle_unwaited(session_id: str, *, before: datetime, at: datetime, grace: timedelta) -> Settled:
    """The sweep's safety net for a session left paused with nothing open (a path that closed its last wait
    without resuming or ending it: a worker, handler or sweep killed between the two). In one transaction: still
    paused, not updated since ``before``, everything its record names resolved, and (a top-level session) its
    turn's continuation not created: woken exactly as the resolution that closed its last wait would have woken it
    (``wake``: a top-level session ``resumed``, its continuation created with ``create()``; a delegated child
    ``queued`` again under its own id). ``ENDS`` (nothing written) when it cannot resume: the caller ends it. Two
    sweeps racing wake it once: the loser's transaction reads it resumed, or queued. A question of its turn closed
    less than ``grace`` before ``at`` leaves it ``WAITS``: the path that closed it (an abandon, a newer question)
    may still be ending the session itself, and says so better than the net would."""
    ref = session_ref(session_id)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Settled:
        data = ref.get(transaction=transaction).to_dict()
        if data is None or data.get("status") != SessionStatus.PAUSED.value:
            return Settled(Unwaited.WAITS)
        if (data.get("updated_at") or at) > before:
            return Settled(Unwaited.WAITS)
        record = record_of(data)
        if not record:
            return Settled(Unwaited.ENDS)
        found = check(transaction, session_id, data, net=True)
        if found is None or found.resumed:
            return Settled(Unwaited.WAITS)
        refs = [question_ref(key) for key in asked(record)]
        snaps = list(db().get_all(refs, field_paths=["status", "closed_at"], transaction=transaction)) if refs else []
        closed = {snap.id: snap.to_dict() or {} for snap in snaps if snap.exists}
        closed = {key: data for key, data in closed.items() if data.get("status") in _ENDS_ITS_SESSION}
        if any(data.get("closed_at") is not None and data["closed_at"] > at - grace for data in closed.values()):
            return Settled(Unwaited.WAITS)
        if closed:
            return Settled(Unwaited.ENDS, closed={key: str(data["status"]) for key, data in closed.items()})
        user = Session.from_doc(data).origin.trigger_user
        return Settled(Unwaited.WOKEN, wake(transaction, found, trigger_ts=None, user=user, at=at))

    try:
        settled: Settled = contended(run)
    except ALREADY_EXISTS:  # another sweep created its continuation first
        return Settled(Unwaited.WAITS)
    return settled


def notes_left(pending: list[Note], record: list[Waiting]) -> list[Note]:
    """The pending notes a pause on ``record`` keeps: an outcome that reached the session as a note before it
    paused (an answer, a decision, a parent's answer) is read from its own document on resume, never twice."""
    keys = {w.key for w in record}
    return [note for note in pending if note.question_id not in keys or note.kind == NoteKind.CHILD_RESULT]

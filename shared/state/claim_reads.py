"""What a claim reads, in one round trip (issue 28.1): the session and, as far as its id names them, its
transcript's root, the session that wrote that transcript last and the question it answers; and, as far as its task
names the waiting record a continuation resumes (``shared.queue.tasks``), the questions and approvals that record
waited on (what they came to: the resumption's outcomes, handed to it so it reads them no more) and the transcript's
steps by their ids, up to the first free one when the task was made (``steps``: the transcript as the claim leaves
it; the task names that id, the continuation's ``next_seq``, copied from its asker when it was woken).

Session ids are derived from their cause (``shared.state.ids``): an answer's continuation is named after its
question, whose id names its asker; a resumption after the session it resumes. Those names are only hints, read in
the same batch as the session: the claim uses a document read here only when the session's own fields name that
very document, and reads anything else as it did before. A wrong hint costs one document read, never a wrong
answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud import firestore

from shared.state import child_questions, ids, results
from shared.state.firestore import APPROVALS, db, ledger_ref, question_ref, session_ref, step_ref
from shared.state.models import Step, Waiting, WaitKind

_ANSWER = "answer-"  # ids.continuation_id
_RESUME = "resume-"  # ids.resume_id
_MAX_DEPTH = 32  # a chain of continuations this long is read as before


def transcript_hint(session_id: str) -> str:
    """The transcript a session continues, as its id tells it (its own id when the id tells nothing)."""
    current = session_id
    for _ in range(_MAX_DEPTH):
        asker = writer_hint(current)
        if asker is None:
            return current
        current = asker
    return session_id


def writer_hint(session_id: str) -> str | None:
    """The session whose pause ``session_id`` continues (the asker of its question, or the session it resumes)."""
    if session_id.startswith(_ANSWER):
        return ids.asker_of_question(session_id[len(_ANSWER) :])
    if session_id.startswith(_RESUME):
        resumed, _, seq = session_id[len(_RESUME) :].rpartition("-")
        return resumed if resumed and seq.isdigit() else None
    return None


def outcome_refs(resumes: list[Waiting] | None, transcript: str | None) -> list[firestore.DocumentReference]:
    """The documents of the named record's outcomes a claim reads beside the session: its questions and approvals
    (as ``shared.state.waits`` stores them), and each approved call's ledger entry in ``transcript`` (the one the
    session's id names). Each question or approval is resolved once, by an operator's answer or decision, before
    the continuation exists; a ledger entry is written only under the session's lease, which this claim takes (a
    write that would land between its read and its commit is fenced on the session this claim updates). A child's
    session is not among them (its tree may still write it: the claim would contend with that)."""
    refs = []
    for entry in resumes or []:
        if entry.released:
            continue
        if entry.kind in {WaitKind.QUESTION, WaitKind.MCP_INPUT}:
            refs.append(question_ref(entry.key))
        elif entry.kind == WaitKind.APPROVAL:
            refs.append(db().collection(APPROVALS).document(entry.key))
            if transcript:
                refs.append(ledger_ref(transcript, entry.seq, entry.index))
    return refs


def question_hint(session_id: str) -> str | None:
    """The question an answer's continuation is named after."""
    return session_id[len(_ANSWER) :] if session_id.startswith(_ANSWER) else None


_MISSING = object()


@dataclass(frozen=True)
class ClaimReads:
    """The session's snapshot and the documents read beside it (by path; None for one that does not exist), and
    the update time of every document the claim read (beside it, or later in its transaction: ``noted``)."""

    session: Any  # the session's DocumentSnapshot
    beside: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    updated: dict[str, datetime] = field(default_factory=dict)
    resumes: list[Waiting] | None = None  # the waiting record the task named (its documents are in ``beside``)
    transcript: str | None = None  # the transcript the session's id names (its ledger entries are in ``beside``)
    through: int | None = None  # that transcript's steps 0 to this one are in ``beside`` (the task's free step id)

    def noted(self, snap: Any) -> dict[str, Any]:
        """A document the claim read in its transaction after this batch: its update time kept; its data."""
        if snap.exists and snap.update_time is not None:
            self.updated[snap.reference.path] = snap.update_time
        return snap.to_dict() or {}

    def steps(self, transcript: str) -> list[Step] | None:
        """``transcript``'s steps in order, as read with the claim, if that read is the whole of it (None: the run
        queries it). It is when every id before the last one read is taken and that one is free: a transcript's
        steps are numbered one after another from 0, each the one after the last, by the one session writing it at a
        time, so none follows a free id. Read in the claim's transaction, they hold until it commits, and once it
        has, only the claimed session adds to the transcript (its claim took the writership, or held it). A task
        whose id was taken since (a stale one), or anything else read (a gap), costs the query it saved."""
        if self.through is None or transcript != self.transcript:
            return None
        found = [self.beside.get(step_ref(transcript, seq).path) for seq in range(self.through + 1)]
        if found[-1] is not None or any(data is None for data in found[:-1]):
            return None
        return [Step.from_doc(data) for data in found[:-1] if data is not None]

    def read(self, ref: firestore.DocumentReference) -> bool:
        """Whether ``ref`` was read beside the session."""
        return ref.path in self.beside

    def outcomes(self, record: list[Waiting]) -> dict[str, dict[str, Any] | None] | None:
        """The documents of ``record``'s outcomes read beside the session, by path, if ``record`` (the claimed
        session's own) is the one its task named; None (read them apart, as before) if it names another: a stale or
        duplicate task, or one that named none."""
        if not record or record != self.resumes:
            return None
        named = outcome_refs(record, self.transcript)
        return {ref.path: self.beside.get(ref.path) for ref in named if ref.path in self.beside}

    def quiet_root(self, transcript: str) -> firestore.DocumentReference | None:
        """The root of ``transcript`` (the session itself, or a document read beside it) if it awaits no child's
        result or question (nothing the turn would collect first); else None."""
        root = session_ref(transcript)
        if root.path == self.session.reference.path:  # the session is its own root
            found = self.session.to_dict() or {}
        elif self.read(root):
            found = self.data(root) or {}
        else:
            return None
        return None if results.awaiting_of(found) or child_questions.may_ask_of(found) else root

    def data(self, ref: firestore.DocumentReference) -> dict[str, Any] | None:
        """The data of a document read beside the session (None if it does not exist); only if ``read(ref)``."""
        found = self.beside.get(ref.path, _MISSING)
        assert found is not _MISSING, f"{ref.path} was not read with the claim"
        return found  # type: ignore[return-value]


def read(
    transaction: firestore.Transaction,
    session_id: str,
    resumes: list[Waiting] | None = None,
    transcript_next: int | None = None,
) -> ClaimReads:
    """The session and the documents its id (and ``resumes``, the record its task names, and ``transcript_next``,
    the first free step id of its transcript it names) name, in ``transaction``, in one batched read."""
    ref = session_ref(session_id)
    refs = [ref]
    for hinted in (transcript_hint(session_id), writer_hint(session_id)):
        if hinted and hinted != session_id and all(r.path != session_ref(hinted).path for r in refs):
            refs.append(session_ref(hinted))
    question = question_hint(session_id)
    if question:
        refs.append(question_ref(question))
    transcript = transcript_hint(session_id)
    refs += [r for r in outcome_refs(resumes, transcript) if all(r.path != known.path for known in refs)]
    through = transcript_next if resumes and transcript != session_id else None
    refs += [step_ref(transcript, seq) for seq in range(through + 1)] if through is not None else []
    if len(refs) == 1:
        return ClaimReads(ref.get(transaction=transaction))
    snaps = {snap.reference.path: snap for snap in db().get_all(refs, transaction=transaction)}
    beside = {path: (snap.to_dict() if snap.exists else None) for path, snap in snaps.items() if path != ref.path}
    updated = {path: snap.update_time for path, snap in snaps.items() if snap.exists and snap.update_time}
    return ClaimReads(snaps[ref.path], beside, updated, resumes, transcript, through)


def stamp(when: datetime) -> tuple[int, int]:
    """A Firestore time to the nanosecond (seconds, nanos), for an exact comparison: ``datetime`` compares to the
    microsecond only, and the emulator's times carry nanoseconds."""
    to_pb = getattr(when, "timestamp_pb", None)
    if to_pb is not None:
        pb = to_pb()
        return int(pb.seconds), int(pb.nanos)
    whole = int(when.timestamp())
    return whole, (when.microsecond * 1000)

"""Approvals: ``approvals/{id}``, listed on their thread's document while pending (point reads, like questions).

A decision is one commit fenced by what it read (a transaction when that fails; ``shared.state.fenced``): the
approval must be pending; it becomes approved, denied or expired (an approval that needs several approvers records
each distinct one and stays pending until the last); and if it was the last undecided call of its turn, what the
caller decided (a continuation for a paused session, a note for one still running) is written with it.

A decision claims no de-duplication record: it names its one approval, and the commit that records it is fenced on
that approval and changes it, so the same decision again (a press's redelivery, a reply's twin event, an Edit
submitted twice) finds what its first commit left: the approval decided, with this decision's ``decision_ts``; or,
still pending for more approvers, its approver among ``approved_by`` (``again``), for the same call (an Approve
shows its digest; an edit equal to the call that runs keeps the approvals of that call). Two decisions at once both
read it pending; the fence lets one commit, and the other decides again from what that one wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore

from shared.errors import Contended
from shared.state import fenced, ids, waiting
from shared.state.firestore import (
    ALREADY_EXISTS,
    APPROVALS,
    db,
    now,
    remind_once,
    session_ref,
    thread_ref,
)
from shared.state.models import Approval, ApprovalStatus, Note, SessionStatus, WaitKind
from shared.state.session_model import Session
from shared.state.updates import appended, approval_update, thread_listed, thread_unlisted


def _ref(approval_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(APPROVALS).document(approval_id)
    return ref


def create_approvals(approvals: list[Approval]) -> list[Approval]:
    """Write a turn's approvals with ``create()``, listed on their thread in the same commit; a retried step gets
    the stored ones back."""
    if not approvals:
        return []
    batch = db().batch()
    for approval in approvals:
        batch.create(_ref(approval.approval_id), approval.to_doc())
    first = approvals[0]
    batch.set(
        thread_ref(first.channel, first.thread_ts),
        thread_listed(open_approval_ids=[a.approval_id for a in approvals]),
        merge=True,
    )
    try:
        batch.commit()
    except ALREADY_EXISTS:
        return [stored for a in approvals if (stored := get_approval(a.approval_id)) is not None]
    return approvals


def get_approval(approval_id: str) -> Approval | None:
    snap = _ref(approval_id).get()
    data = snap.to_dict()
    return Approval.from_doc(data) if snap.exists and data is not None else None


def get_approvals(approval_ids: list[str]) -> list[Approval]:
    """Approvals by id, in the order asked (point reads)."""
    if not approval_ids:
        return []
    snaps = {snap.id: snap for snap in db().get_all([_ref(a) for a in approval_ids])}
    return [Approval.from_doc(snaps[a].to_dict() or {}) for a in approval_ids if a in snaps and snaps[a].exists]


def set_card_ts(approval_id: str, card_ts: str, *, channel: str | None = None, asked_in: str | None = None) -> None:
    """Note the posted card; ``channel``: it went to the operator channel, not the thread (``asked_in`` links back)."""
    fields: dict[str, Any] = approval_update(card_ts=card_ts)
    if channel:
        fields |= approval_update(card_channel=channel, asked_in=asked_in)
    _ref(approval_id).update(fields)


def pending(approval_ids: list[str]) -> list[Approval]:
    """The pending ones of these approvals (a thread's list, read with its questions: no read when it is empty)."""
    return [a for a in get_approvals(approval_ids) if a.status == ApprovalStatus.PENDING]


@dataclass(frozen=True)
class Decision:
    status: ApprovalStatus
    by: str
    reason: str | None
    ts: str  # the press or message that decided (claimed once)
    edit: tuple[str, str] | None = None  # an edit: the edited call's canonical arguments and digest (an approval)
    shown: str | None = None  # the digest of the call the decider was shown: an approval counts only for that call
    revision: int | None = None  # an Edit modal's: the approval's revision it was opened on (it counts only there)


@dataclass(frozen=True)
class Decided:
    approval: Approval | None  # None: no such approval
    won: bool = False  # this decision was the one recorded
    continuation: Session | None = None  # the turn is fully decided and its paused session resumes
    repeated: bool = False  # what this decision would create exists already (its continuation): decided meanwhile
    partial: bool = False  # an approval recorded; more approvers are needed before it runs
    again: bool = False  # this approver had already approved it: a second approval needs another person
    resumes: bool = False  # it completed its turn and its asker resumes (a continuation, or a note it reads)
    unwaited: bool = False  # refused: the session that asked has ended, so nothing waits on this call any more
    refused: bool = False  # the caller's check of the approval as read refused the decision: nothing was written
    stale: bool = False  # an approval of a call an edit has replaced meanwhile: not counted


Resume = Callable[[Approval, SessionStatus | None, str | None], Note | None]  # approval, asker, trace


_WAITING = frozenset({SessionStatus.RUNNING.value, SessionStatus.PAUSED.value, SessionStatus.QUEUED.value})


def decide(approval_id: str, decision: Decision, resume: Resume, admit: Callable[[Approval], bool] | None = None,
           *, waited_only: bool = False) -> Decided:  # fmt: skip
    """Record one decision, exactly once; if it completes its turn, write what ``resume`` chose for the asker.

    ``admit`` checks the approval as the transaction read it (a button press, with no read of its own before):
    False refuses the decision (``Decided.refused``) and writes nothing. ``waited_only``: a person's decision,
    refused (nothing written) when the session that asked has ended. The approval and its asker (named in its id)
    are read in one round trip, the turn's other approvals in one more."""
    ref = _ref(approval_id)
    when = now()
    # The approval, its asker and the continuation that would resume its turn (both named in its id): one read.
    hints = (ids.asker_of_approval(approval_id), ids.resume_hint(approval_id))
    refs = [ref] + [session_ref(hint) for hint in hints if hint is not None]

    def run(read: fenced.Read, out: firestore.WriteBatch, transaction: firestore.Transaction | None) -> Decided:
        """The decision made from ``read`` and written in ``out``; ``transaction``: where to read more (None:
        nothing more may be read, ``fenced.Unfenceable``)."""
        snap = read[ref.path]
        data = snap.to_dict() if snap.exists else None
        if data is None:
            return Decided(None)
        approval = Approval.from_doc(data)
        if admit is not None and not admit(approval):
            return Decided(approval, refused=True)
        if approval.status != ApprovalStatus.PENDING:
            return Decided(approval)
        runs = approval.edited_digest or approval.digest
        # An edit to the very call that runs (a double submission, or two editors making one edit): it changes no
        # call, so the approvals of that call stand and its editor is the first one's.
        again = decision.edit is not None and decision.edit[1] == runs
        moved = decision.shown not in (None, runs) or decision.revision not in (None, approval.revision)
        if decision.status == ApprovalStatus.APPROVED and moved and not again:
            return Decided(approval, stale=True)  # an edit committed between the decider's read and this decision
        approved_by = approval.approved_by
        edited: dict[str, Any] = {}
        if decision.edit is not None and not again:  # the edited call: earlier approvals were of another call
            edited = approval_update(edited_args=decision.edit[0], edited_digest=decision.edit[1],
                                     edited_by=decision.by, revision=approval.revision + 1)  # fmt: skip
            approved_by = []
        if decision.status == ApprovalStatus.APPROVED:
            if decision.by in approved_by:
                return Decided(approval, again=True)
            approved_by = [*approved_by, decision.by]
            if len(approved_by) < approval.approvals_needed:  # one of several: recorded, still pending
                asking = read.get(session_ref(approval.session_id).path) or session_ref(approval.session_id).get(
                    transaction=_reading(transaction))  # fmt: skip
                if waited_only and _unwaited(transaction, asking.to_dict() or {}, approval)[0]:
                    return Decided(approval, unwaited=True)  # as the last approver of the call would be
                out.update(ref, {**approval_update(approved_by=approved_by), **edited})
                return Decided(Approval.from_doc({**data, "approved_by": approved_by, **edited}), won=True,
                               partial=True)  # fmt: skip
        siblings, asker = _turn_and_asker(transaction, approval, read)
        unwaited, others = _unwaited(transaction, asker, approval) if waited_only else (False, None)
        if unwaited:  # nothing waits on this call any more
            return Decided(approval, unwaited=True)
        fields: dict[str, Any] = {
            **approval_update(
                status=decision.status,
                decided_by=decision.by,
                decided_at=when,
                reason=decision.reason,
                decision_ts=decision.ts,
                approved_by=approved_by,
            ),
            **edited,
        }
        approval = Approval.from_doc({**approval.to_doc(), **fields})
        complete = all(s.status != ApprovalStatus.PENDING for s in siblings)
        continuation, resumes = _resume_asker(transaction, out, approval, asker, complete=complete,
                                              decision=decision, resume=resume, when=when, read=read,
                                              found=others)  # fmt: skip
        if continuation is not None:
            fields |= approval_update(continuation_id=continuation.session_id)
        out.update(ref, fields)  # what the same decision again finds: decided, with its decision_ts
        for thread in _listed_on(approval):
            out.set(thread, thread_unlisted(open_approval_ids=[approval_id]), merge=True)
        return Decided(approval, won=True, continuation=continuation, resumes=resumes)

    try:
        # Fenced on the approval and its asker (and whatever else it read as existing, or creates); else the
        # transaction, in which parallel decisions contend for the turn and its asker.
        result = fenced.resolve(refs, run, depends=refs[:2])
    except ALREADY_EXISTS:
        return Decided(get_approval(approval_id), repeated=True)
    except Contended:  # the transaction gave up for contention: a racing decision may have won meanwhile
        lost = _decided_meanwhile(approval_id, admit)
        if lost is None:
            raise  # still pending: the sender's retry decides it
        return lost
    return result


def _listed_on(approval: Approval) -> list[firestore.DocumentReference]:
    """The threads that list ``approval`` while it is pending: its conversation's, and a routed card's own."""
    threads = [thread_ref(approval.channel, approval.thread_ts)]
    if approval.card_channel and approval.card_ts:
        threads.append(thread_ref(approval.card_channel, approval.card_ts))
    return threads


def _decided_meanwhile(approval_id: str, admit: Callable[[Approval], bool] | None) -> Decided | None:
    """After a decision that could not commit for contention: an approval another decision settled meanwhile is
    decided already, as if this one had read it so (nothing written); None while it is still pending."""
    found = get_approval(approval_id)
    if found is None or found.status == ApprovalStatus.PENDING:
        return None
    return Decided(found, refused=admit is not None and not admit(found))


def _resume_asker(transaction: firestore.Transaction | None, out: firestore.WriteBatch, approval: Approval,
                  asker: dict[str, Any], *, complete: bool, decision: Decision, resume: Resume, when: datetime,
                  read: dict[str, Any],
                  found: waiting.Outcomes | None = None) -> tuple[Session | None, bool]:  # fmt: skip
    """What a decision does to its asker, read (in ``transaction``; None: from ``read`` only) and written (in ``out``)
    with the decision: a paused turn resumes once everything in its waiting record is resolved; an asker still
    running (``complete``: its turn's calls all decided) gets the note ``resume`` chose, read at its pause. Returns
    the session to queue and whether a run is queued (or noted) for the turn. ``found``: the outcomes of the rest of
    the turn's record, as the decision read them already (``_unwaited``), not read again."""
    asker_ref = session_ref(approval.session_id)
    status = SessionStatus(asker["status"]) if asker.get("status") else None
    if waiting.waits_on(asker, WaitKind.APPROVAL, approval.approval_id):
        woken = waiting.check(transaction, approval.session_id, asker,
                              resolving=(WaitKind.APPROVAL, approval.approval_id), read=read,
                              fenced=transaction is None, found=found)  # fmt: skip
        if woken is None:
            return None, False
        return waiting.wake(out, woken, trigger_ts=decision.ts, user=decision.by, at=when), True
    outcome = resume(approval, status, asker.get("trace_id")) if complete else None
    if outcome is not None:  # still running: it finds the decisions at its pause
        out.update(asker_ref, appended(notes=[outcome]))
    return None, outcome is not None


def _turn_and_asker(transaction: firestore.Transaction | None, approval: Approval,
                    read: dict[str, Any]) -> tuple[list[Approval], dict[str, Any]]:  # fmt: skip
    """The other approvals of ``approval``'s turn and its asker's document, in one round trip (``read``: what the
    transaction read already; no ``transaction``: nothing more may be read, the siblings' states being no fenced
    commit's to hold)."""
    others = [_ref(a) for a in approval.turn_ids if a != approval.approval_id]
    asker_ref = session_ref(approval.session_id)
    more = others + ([] if asker_ref.path in read else [asker_ref])
    if more:
        read.update({snap.reference.path: snap for snap in db().get_all(more, transaction=_reading(transaction))})
    siblings = [Approval.from_doc(read[o.path].to_dict() or {}) for o in others if read[o.path].exists]
    return siblings, read[asker_ref.path].to_dict() or {}


def _unwaited(transaction: firestore.Transaction | None, asker: dict[str, Any],
              approval: Approval) -> tuple[bool, waiting.Outcomes | None]:  # fmt: skip
    """Whether nothing waits on the decisions of ``asker``'s turn: it ended, or a question of its turn was closed
    unanswered (a newer question replaced it, the sweep abandoned it) and whoever closed it is ending it, so a
    decision would run nothing, as an answer to another of its questions is refused (``shared.state.questions``).
    Reads more only for a turn that asked: the outcomes of its whole record but ``approval`` (one batch), returned
    so that the decision does not read them again (``waiting.check``'s ``found``)."""
    if asker.get("status") not in _WAITING:
        return True, None
    record = waiting.record_of(asker)
    if not any(w.kind in {WaitKind.QUESTION, WaitKind.MCP_INPUT} for w in record):
        return False, None
    found = waiting.outcomes(transaction, asker, record, besides=(WaitKind.APPROVAL, approval.approval_id),
                             fenced=transaction is None)  # fmt: skip
    return bool(found.closed), found


def _reading(transaction: firestore.Transaction | None) -> firestore.Transaction:
    """The transaction to read more in; none (a fenced commit, which cannot hold such a read): ``Unfenceable``."""
    if transaction is None:
        raise fenced.Unfenceable("the decision reads more than its approval, asker and continuation")
    return transaction


def mark_reminded(approval_id: str, at: datetime) -> bool:
    """Record the one reminder of a pending approval; False if it was already reminded or is not pending."""
    return remind_once(_ref(approval_id), ApprovalStatus.PENDING.value, approval_update(reminded_at=at))

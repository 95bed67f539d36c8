"""A session's step commits after its claim, fenced without a read (issue 28.1): one commit instead of a
transaction's three round trips (begin, the batched read of the session and its transcript's root, commit).

A step commit reads the session and its transcript's root to check what must hold before the step is stored
(``steps.commit_step``): this worker still holds the session running, nobody asked it to stop, it still writes the
transcript, and no notes, children's results or children's questions wait to be read. Right after a claim the worker
knows all of that already: the claim's transaction read both documents and wrote the session (and the root, when
it took the transcript over), so as long as nobody else wrote either since, they are exactly as the claim left
them. That is what this commit is fenced on: the session's update is preconditioned on the update time of this
worker's own last write of it (``lease.last_written``: the claim's, or a later ledger touch, stream record or
heartbeat, none of which change what the step commit checks; each of the first two rests on the write before it,
and a heartbeat that read someone else's write since, a note or a stop, says so: ``lease.unbroken``), and a
continuation's root on the update time the claim left it with (an update of its writer to the same value, which is
what it is). A session that is its own transcript's root (a mention's, a delegated child's) has the one document,
fenced by the session's precondition alone. Any other write since (a takeover's claim, a note, a stop, a child's
result or question, another continuation's hand-over) fails a precondition, the commit writes nothing, and the step
commit runs its transaction as before.

A commit made so leaves both documents as the worker knows them, so the next step commit may rest on it in turn:
the chain holds while every step commit is made this way, and ends at the first that is not (``take`` forgets it; a
transaction reads, as before). Only what the claim saw settled starts one: a session whose claim found no pending
notes, no stop, another session writing its transcript or, on the root, no children's results or questions to read;
and only a step that consumes no notes and records no spend against a daily budget, and leaves the session running
or ends it done (a mention's answer, a delegated child's own end: ``children.finish``; not a session whose start
counted against rate limits, whose end takes its counters back), is committed so. Anything else reads in its
transaction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from google.cloud import firestore

from shared.state import lease, quotas
from shared.state.claim_reads import ClaimReads
from shared.state.fenced import FENCE_FAILED
from shared.state.firestore import db, session_ref, step_ref
from shared.state.models import Step
from shared.state.session_model import Session
from shared.state.updates import session_update


class FencedWrite(Protocol):
    """A write committed with the step (a call's ``done`` record: ``shared.state.ledger``)."""

    def apply(self, transaction: Any) -> None: ...


@dataclass(frozen=True)
class Settled:
    """What a claim saw settled: its transcript's root, and the update time the claim left it with (as read, or as
    the claim's own write of it gave it: ``claimed``)."""

    root: str | None  # a continuation's root's document path; None: the session is its own transcript's root
    root_time: datetime | None = None
    root_written: int | None = None  # the position of the claim's write of the root among its writes, if it wrote it
    counted: bool = False  # its start counts against rate limits: its end takes its counters back (a transaction)


# By worker: what its claim saw settled, until its next step commit that is not made here (a hint: a precondition
# checks it).
_SETTLED: OrderedDict[str, Settled] = OrderedDict()
_KEPT = 1024
_LOCK = threading.Lock()


def at_claim(transaction: firestore.Transaction, session: Session, reads: ClaimReads) -> Settled | None:
    """At the end of the claim's ``transaction``, once it takes ``session`` (as claimed) and wrote everything it
    writes: what it saw settled, if it did."""
    if session.notes or session.stop_requested:
        return None
    own = reads.session.to_dict() or {}
    counted = bool(own.get(quotas.RELEASES))
    if session.transcript == session.session_id:  # its own root, as the claim read it
        mine = own.get("transcript_writer") in (None, session.session_id)
        quiet = mine and reads.quiet_root(session.transcript) is not None
        return Settled(None, counted=counted) if quiet else None
    root = reads.quiet_root(session.transcript)
    if root is None:
        return None
    writes = [pb.update.name for pb in getattr(transaction, "_write_pbs", None) or []]
    written = [i for i, name in enumerate(writes) if name == root._document_path]
    return Settled(root.path, reads.updated.get(root.path), written[-1] if written else None, counted)


def claimed(session: Session, transaction: firestore.Transaction, settled: Settled | None) -> None:
    """The claim of ``session`` committed in ``transaction`` (its last attempt), having seen ``settled``."""
    worker = session.lease.worker
    if settled is None or not worker:
        return
    if settled.root is None:
        _keep(worker, settled)
        return
    root_time = settled.root_time  # as read: a claim that commits leaves what it read unchanged
    if settled.root_written is not None:
        written = getattr(transaction, "write_results", None) or []
        root_time = written[settled.root_written].update_time if settled.root_written < len(written) else None
    if root_time is not None:
        _keep(worker, Settled(settled.root, root_time, counted=settled.counted))


def _keep(worker: str, settled: Settled) -> None:
    with _LOCK:
        _SETTLED[worker] = settled
        _SETTLED.move_to_end(worker)
        while len(_SETTLED) > _KEPT:
            _SETTLED.popitem(last=False)


def take(session: Session) -> Settled | None:
    """What ``session``'s claim, and the step commits fenced since, left settled, forgotten (only the next step
    commit may rest on it, and that commit keeps it again only if it is made here)."""
    with _LOCK:
        return _SETTLED.pop(session.lease.worker or "", None)


def commit(session: Session, step: Step | None, updates: dict[str, Any], fenced: Sequence[FencedWrite], *,
           plain: bool, ends: bool = False) -> bool:  # fmt: skip
    """``step``, the session's ``updates`` and the ``fenced`` writes in one commit, preconditioned as the module
    says, if every step commit since the session's claim saw it settled was made so and the step is ``plain`` (it
    consumes no notes, records no spend and leaves the session running, or ``ends`` it done: a mention's answer, a
    delegated child's end, ``children.finish``, whose transaction would read nothing it does not know, unless its
    start counts against rate limits, whose counters its end takes back). False (nothing written) if not, if this
    worker knows no write of its own to rest on, or if a precondition failed: the caller's transaction decides."""
    settled = take(session)  # only the next step commit, whether it commits here or not
    known = lease.last_written(session)
    if settled is None or step is None or not plain or known is None or (ends and settled.counted):
        return False
    if settled.root is not None and settled.root_time is None:
        return False
    if not lease.unbroken(session):  # a renewal found someone else's write (a note, a stop) since the claim
        return False
    client = db()
    batch = client.batch()
    for write in fenced:
        write.apply(batch)
    batch.create(step_ref(session.transcript, step.seq), step.to_doc())
    if settled.root is not None:  # a continuation's root, as the claim (or the last commit made here) left it
        batch.update(
            client.document(settled.root),
            session_update(transcript_writer=session.session_id),
            option=client.write_option(last_update_time=settled.root_time),
        )
    # The session's update last: its update time is this worker's last write of it.
    batch.update(session_ref(session.session_id), updates, option=client.write_option(last_update_time=known))
    try:
        written = batch.commit()
    except FENCE_FAILED:
        return False
    if ends:  # the session no longer runs under this worker: nothing rests on this write
        lease.forget(session)
        return True
    lease.wrote(session, written[-1].update_time)
    root_time = written[-2].update_time if settled.root is not None else None
    _keep(
        session.lease.worker or "", Settled(settled.root, root_time, counted=settled.counted)
    )  # the next may rest on it
    return True

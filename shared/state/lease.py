"""A running session's lease, renewed by its worker's heartbeat between the step commits that renew it too.

The renewal never takes a lock: it reads the session (worker, status) and writes the new expiry with a precondition
on the document's update time, so it cannot wait on, or abort, the step commit it may run beside, and it can never
extend a lease that another worker took over, or a session that paused or ended, in between. A renewal that meets
a change (a step commit, a note) is simply skipped: the next beat tries again.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc

from shared.state.claim_reads import stamp
from shared.state.firestore import db, now, session_ref
from shared.state.models import SessionStatus
from shared.state.session_model import Session
from shared.state.updates import session_update

log = logging.getLogger(__name__)

BEATS_PER_LEASE = 4  # a running worker renews its lease every quarter of it (``shared.agent.heartbeat``)
# A live worker's next write lands a heartbeat interval after its last renewal returned, plus that renewal's read and
# write: a session is still renewed lately for half an interval more (a retry that read it within that gap took a
# live worker's session over, as a dead one's).
RENEWAL_SLACK = 0.5

# When this instance's workers last wrote their sessions' documents (Firestore's update time, by worker): a write
# preconditioned on that update time is fenced by the lease without reading the document first (``fenced_write``).
# A hint only: a write by anyone else since (a note, a heartbeat) fails the precondition, and the caller reads.
_WRITTEN: OrderedDict[str, tuple[Any, bool]] = OrderedDict()  # by worker: (update time, unbroken)
_WRITTEN_KEPT = 1024  # the workers of this instance's latest deliveries
_WRITTEN_LOCK = threading.Lock()


def wrote(session: Session, update_time: Any, *, read_at: Any | None = None) -> None:
    """This worker's write of its session's document (running, under its lease) got ``update_time``. ``read_at``:
    the update time the write's precondition was read at, for a write that read the document first (a renewal)
    rather than resting on this worker's last write: if that is not the last write, someone else wrote in between,
    which ``unbroken`` remembers."""
    worker = session.lease.worker
    if not worker or update_time is None:
        return
    with _WRITTEN_LOCK:
        known, unbroken = _WRITTEN.get(worker, (None, True))
        if read_at is not None and (known is None or stamp(known) != stamp(read_at)):
            unbroken = False
        _WRITTEN[worker] = (update_time, unbroken)
        _WRITTEN.move_to_end(worker)
        while len(_WRITTEN) > _WRITTEN_KEPT:
            _WRITTEN.popitem(last=False)


def last_written(session: Session) -> Any | None:
    """The update time of this worker's latest write of its session's document, if it knows one."""
    with _WRITTEN_LOCK:
        return _WRITTEN.get(session.lease.worker or "", (None, True))[0]


def unbroken(session: Session) -> bool:
    """Whether every write of the session's document this worker knows of, since it first wrote it (its claim),
    rested on its previous one: nobody else wrote the document in between (as far as a renewal could tell)."""
    with _WRITTEN_LOCK:
        found = _WRITTEN.get(session.lease.worker or "")
        return found is not None and found[1]


def forget(session: Session) -> None:
    """The worker no longer holds its session running (it paused or ended): nothing is fenced by that write."""
    with _WRITTEN_LOCK:
        _WRITTEN.pop(session.lease.worker or "", None)


def beat_seconds(lease_seconds: int) -> float:
    """How often a running worker renews a lease of ``lease_seconds``."""
    return max(0.5, lease_seconds / BEATS_PER_LEASE)


def renewed_lately(updated_at: datetime | None, read_at: datetime | None, *, lease_seconds: int,
                   at: datetime) -> bool:  # fmt: skip
    """Whether a running session's document was written less than a heartbeat interval ago (and the slack of a
    renewal's own round trips, ``RENEWAL_SLACK``): its claim, a step commit, a heartbeat (or news for it, a note)
    since the last beat its worker owed. Measured by Firestore's own clock, from the document's update time to the
    moment the claim read it (``read_at``; ``at`` if later, a time a test gives): a worker's clock, or a ``now`` taken
    before a slow claim, cannot make a fresh claim look old."""
    if updated_at is None:
        return False
    current = max(at, read_at) if read_at is not None else at
    return current - updated_at < timedelta(seconds=beat_seconds(lease_seconds) * (1 + RENEWAL_SLACK))


def renew(session: Session, *, lease_seconds: int) -> bool:
    """Extend ``session``'s lease by ``lease_seconds`` from now if its worker still holds it running; False once
    it does not (the heartbeat then stops)."""
    ref = session_ref(session.session_id)
    snap = ref.get(field_paths=["worker", "status"])
    current = snap.to_dict() or {}
    if current.get("worker") != session.lease.worker or current.get("status") != SessionStatus.RUNNING.value:
        return False
    until = now() + timedelta(seconds=lease_seconds)
    try:
        written = ref.update(
            session_update(lease_until=until), option=db().write_option(last_update_time=snap.update_time)
        )
    except (gexc.FailedPrecondition, gexc.Aborted):
        log.debug("the session changed while its lease was renewed; the next beat renews it")
        return True
    wrote(session, written.update_time, read_at=snap.update_time)
    session.lease.until = until
    return True


def release(session: Session) -> bool:
    """End ``session``'s lease now if its worker still holds it running: that worker's attempt failed and Cloud
    Tasks will retry it, so the retry takes it over at once rather than a heartbeat later. False if not (another
    worker took it, it paused or ended, or it changed meanwhile: the retry then waits as for a dead worker)."""
    ref = session_ref(session.session_id)
    snap = ref.get(field_paths=["worker", "status"])
    current = snap.to_dict() or {}
    if current.get("worker") != session.lease.worker or current.get("status") != SessionStatus.RUNNING.value:
        return False
    forget(session)
    try:
        ref.update(session_update(lease_until=now()), option=db().write_option(last_update_time=snap.update_time))
    except (gexc.FailedPrecondition, gexc.Aborted):
        return False
    return True

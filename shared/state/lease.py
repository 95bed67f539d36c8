"""A running session's lease, renewed by its worker's heartbeat between the step commits that renew it too.

The renewal never takes a lock: it reads the session (worker, status) and writes the new expiry with a precondition
on the document's update time, so it cannot wait on, or abort, the step commit it may run beside, and it can never
extend a lease that another worker took over, or a session that paused or ended, in between. A renewal that meets
a change (a step commit, a note) is simply skipped: the next beat tries again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from google.api_core import exceptions as gexc

from shared.state.firestore import db, now, session_ref
from shared.state.models import Session, SessionStatus

log = logging.getLogger(__name__)

BEATS_PER_LEASE = 4  # a running worker renews its lease every quarter of it (``shared.agent.heartbeat``)


def beat_seconds(lease_seconds: int) -> float:
    """How often a running worker renews a lease of ``lease_seconds``."""
    return max(0.5, lease_seconds / BEATS_PER_LEASE)


def renewed_lately(lease_until: datetime | None, *, lease_seconds: int, at: datetime) -> bool:
    """Whether a lease ending at ``lease_until`` was taken or renewed (claim, step commit, heartbeat: each sets it
    to that moment plus ``lease_seconds``) within the last heartbeat interval before ``at``: its worker showed it
    was alive since the last beat it owed."""
    if lease_until is None:
        return False
    return lease_until - timedelta(seconds=lease_seconds) > at - timedelta(seconds=beat_seconds(lease_seconds))


def renew(session: Session, *, lease_seconds: int) -> bool:
    """Extend ``session``'s lease by ``lease_seconds`` from now if its worker still holds it running; False once
    it does not (the heartbeat then stops)."""
    ref = session_ref(session.session_id)
    snap = ref.get(field_paths=["worker", "status"])
    current = snap.to_dict() or {}
    if current.get("worker") != session.worker or current.get("status") != SessionStatus.RUNNING.value:
        return False
    until = now() + timedelta(seconds=lease_seconds)
    try:
        ref.update({"lease_until": until}, option=db().write_option(last_update_time=snap.update_time))
    except (gexc.FailedPrecondition, gexc.Aborted):
        log.debug("the session changed while its lease was renewed; the next beat renews it")
        return True
    session.lease_until = until
    return True

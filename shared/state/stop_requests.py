"""A stop of one session, in one transaction on its document (``request_stop``); ``shared/asks/stopping.py`` stops
a whole tree through it and closes what each member waited on."""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import firestore

from shared.state import quotas
from shared.state.firestore import now, session_ref, transact
from shared.state.models import SessionStatus
from shared.state.updates import session_update


@dataclass(frozen=True)
class StopRequest:
    """What a stop found and did."""

    was: SessionStatus  # the status it had
    run_to_stop: bool  # a waiting child queued again so a worker ends it and tells its parent: queue its task


def request_stop(session_id: str, *, by: str) -> StopRequest | None:
    """Stop one session: a queued or paused one ends now (a child among them is queued again to end through a
    worker, which tells its parent); a running one is asked to, and ends at its next step boundary (every step
    commit reads the request). None if it had ended already."""
    ref = session_ref(session_id)

    @firestore.transactional
    def stop(transaction: firestore.Transaction) -> StopRequest | None:
        fields = ["status", "parent_session_id", quotas.RELEASES]
        current = ref.get(transaction=transaction, field_paths=fields).to_dict() or {}
        status = SessionStatus(current["status"]) if current.get("status") else None
        if status is None or status.value not in {"queued", "paused", "running"}:
            return None
        waiting = status in {SessionStatus.QUEUED, SessionStatus.PAUSED}
        if waiting and not current.get("parent_session_id"):
            transaction.update(
                ref,
                {
                    **session_update(
                        status=SessionStatus.STOPPED,
                        error=f"stopped by {by}",
                        lease_until=None,
                        ended_at=now(),
                        updated_at=now(),
                    ),
                    **quotas.released(transaction, session_id, current),
                },
            )
            return StopRequest(status, run_to_stop=False)
        update = session_update(stop_requested=by, updated_at=now())
        if waiting:
            update |= session_update(status=SessionStatus.QUEUED, started_at=None)
        transaction.update(ref, update)
        return StopRequest(status, run_to_stop=waiting)

    found: StopRequest | None = transact(stop)
    return found

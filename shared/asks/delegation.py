"""Delegation (flow 10): a session hands a task to a child session, which reports back to it, never to the thread.

A blocking child is created while its parent's turn runs and started only once the turn knows all its blocking
children (``launch``), so no child can end before its siblings are recorded. A non-blocking child starts at once.
"""

from __future__ import annotations

import logging

from shared import config
from shared.state import children, sessions, tasks
from shared.state.firestore import now
from shared.state.models import Session, child_session

log = logging.getLogger(__name__)


class DelegationRefused(ValueError):
    """A delegation the product will not start: the model hears why."""


def start(parent: Session, *, seq: int, index: int, task: str, blocking: bool) -> Session:
    """Create the child of this call once (its id comes from the call); a non-blocking one is queued at once."""
    max_depth = config.settings().delegate_max_depth
    if parent.depth >= max_depth:
        raise DelegationRefused(f"delegation is limited to {max_depth} level(s); do this task yourself")
    if not task.strip():
        raise DelegationRefused("the task is empty")
    child = sessions.create_session(
        child_session(parent, seq=seq, index=index, task=task.strip(), blocking=blocking, siblings=[], at=now())
    )
    if not blocking:
        tasks.enqueue_session(child.session_id)
    log.info("child session created", extra={"child": child.session_id, "blocking": blocking})
    return child


def resume_parent(started: Session | None) -> None:
    """Queue what a child's end started: its parent queued again, or a continuation of the parent's transcript.
    The task name carries the parent's step count, so each resumption is its own task."""
    if started is None:
        return
    tasks.enqueue_session(started.session_id, attempt=f"after-{started.next_seq}")
    log.info("child's end resumes its parent", extra={"resumed": started.session_id})


def launch(child_ids: list[str]) -> None:
    """Start the blocking children of one turn, each knowing the others (a re-run turn starts them again: their
    task names are fixed, so nothing runs twice)."""
    children.set_siblings(child_ids)
    for child_id in child_ids:
        tasks.enqueue_session(child_id)

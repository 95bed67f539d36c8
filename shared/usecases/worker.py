"""What one delivery of a session's task does: claim the session, run it, and say what Cloud Tasks should do.

Cloud Tasks treats any 2xx as done and anything else as a failure to retry, so a duplicate delivery or a finished
session is done; an unexpected crash asks for a retry so the next attempt takes the session over from its stored
transcript, until it has crashed too often and is failed with the thread told.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from dataclasses import dataclass

from shared import config
from shared.agent import heartbeat, opening
from shared.agent.waits import in_claim
from shared.errors import Contended
from shared.logs import current_trace, session_context
from shared.queue import tasks
from shared.slack import backpressure
from shared.state import claim_reads, lease, sessions, steps
from shared.state.batched import Docs
from shared.state.claim_step import FirstStep
from shared.state.firestore import now
from shared.state.models import Question, SessionStatus, Step, Waiting
from shared.state.session_model import Session
from shared.state.sessions import Claim, ClaimResult

log = logging.getLogger(__name__)

GIVE_UP_AFTER_ATTEMPTS = 3  # a session that crashes this often is failed, and the thread told, not retried forever
# A session taken over more often than this without storing a step is failed too: its worker is killed at the same
# point every time (out of memory, a timeout), where no exception is ever raised, and the rescue would loop for ever.
MAX_TAKEOVERS_WITHOUT_PROGRESS = 3
_ENDED = {SessionStatus.DONE, SessionStatus.FAILED, SessionStatus.STOPPED, SessionStatus.ABANDONED}
_STOPS_CHILDREN = _ENDED - {SessionStatus.DONE}  # a child ended so has stopped what it delegated, or left it to this


@dataclass(frozen=True)
class Delivery:
    """What a delivery achieved: ``retry`` asks Cloud Tasks to deliver again."""

    retry: bool
    detail: dict[str, str]


def run_delivery(session_id: str, *, task: str, attempt: int, resumes: list[Waiting] | None = None,
                 transcript_next: int | None = None) -> Delivery:  # fmt: skip
    """One delivery of ``session_id``'s task; ``resumes``: the waiting record the task names (a continuation's), whose
    outcomes the claim reads in its own batch (used only if the session's own record is that one), with its
    transcript's steps before ``transcript_next`` (used only if that id is still free)."""
    worker = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    # A continuation's claim reads its transcript's steps in its batch when its task names the turn it resumes; the
    # step resuming that turn is stored in the claim's commit when it can be made from what the claim read.
    claim = sessions.claim_session(
        session_id,
        worker=worker,
        task=task,
        attempt=attempt,
        lease_seconds=config.settings().session_lease_seconds,
        resumes=resumes,
        transcript_next=transcript_next,
        first_step=_first_step(session_id, resumes),
    )
    transcript = claim.transcript
    if transcript is not None and claim.stepped is not None:
        transcript = [*transcript, claim.stepped]
    elif claim.stepped is not None and claim.stepped.seq == 0:  # a child's opening: nothing was stored before it
        transcript = [claim.stepped]
    with session_context(session_id, trace=claim.trace_id or current_trace()):
        return _after_claim(claim, task=task, attempt=attempt, transcript=transcript)


def _first_step(session_id: str, resumes: list[Waiting] | None) -> FirstStep | None:
    if not resumes or claim_reads.transcript_hint(session_id) == session_id:
        return opening.child_opening  # a delegated child taken fresh opens in its claim's commit (issue 28.4)
    return in_claim.for_claim(resumes)


def _after_claim(claim: Claim, *, task: str, attempt: int, transcript: list[Step] | None = None) -> Delivery:
    session = claim.session
    if claim.result in {ClaimResult.TRANSCRIPT_BUSY, ClaimResult.RENEWED_LATELY}:
        # Its asker has not stopped yet, or the attempt this retry follows may still be alive: Cloud Tasks delivers
        # again after a backoff (a dead worker's lease is not renewed again, so a later retry takes it over).
        log.info("asking for a later delivery", extra={"task": task, "reason": claim.result.value})
        return Delivery(True, {"error": claim.result.value})
    if claim.result == ClaimResult.HANDED_OVER:
        log.info("late answer handed to the session writing the transcript", extra={"handed_to": claim.handed_to})
        if claim.writer_dead and claim.handed_to:  # nobody would read it: its takeover is queued at once
            tasks.enqueue_session(claim.handed_to, attempt=f"takeover-{task}")
        return Delivery(False, {"handed_to": claim.handed_to or ""})
    reason = f"already {claim.status.value}" if claim.status else claim.result.value
    ended_child = claim.found if claim.found is not None and claim.found.reports_to_parent else None
    if ended_child is not None and claim.status in _ENDED:
        _after_child_end(ended_child)
    if session is None:
        log.info("nothing to do for this delivery", extra={"reason": reason, "task": task, "attempt": attempt})
        return Delivery(False, {"skipped": reason})
    stalled = session.lease.takeovers_without_progress
    if stalled > MAX_TAKEOVERS_WITHOUT_PROGRESS:
        from shared.agent.failure import give_up

        log.error("session killed at the same step on every attempt; giving up", extra={"takeovers": stalled})
        why = f"its worker stopped {stalled} times in a row without storing a step"
        return _given_up(session, give_up(session, why))
    opened = claim.stepped is not None and claim.stepped.seq == 0  # its first step, stored by the claim
    return _run(session, claim.result.takeover, reason, task=task, attempt=attempt, question=claim.question,
                transcript=transcript, outcomes=claim.outcomes, opened=opened)  # fmt: skip


def _after_child_end(child: Session) -> None:
    """A delivery of a delegated child that has ended: what its worker may have died or failed before doing, between
    storing its end and this (its parent woken or resumed, what it delegated stopped unless it ended done, its line
    in the tree's status message shown)."""
    from shared.asks import delegation, stopping, tree_status
    from shared.state import children

    try:
        if child.tree.delegate_blocking:
            delegation.wake_parent(child)
        else:  # its result is read by its parent's transcript; one that ended meanwhile gets it in a continuation
            delegation.resume_parent(child, children.Finished(children.report_late(child), False))
        if child.status in _STOPS_CHILDREN:  # a child reports once: what its own children find has nobody to go to
            stopping.stop_children(child, by=stopping.DELEGATOR_ENDED)
    finally:  # a sibling's update of the message may have been left to this end (shared/asks/tree_status.py)
        tree_status.show_ended(child)


def _run(session: Session, takeover: bool, reason: str, *, task: str, attempt: int,
         question: Question | None = None, transcript: list[Step] | None = None,
         outcomes: Docs | None = None, opened: bool = False) -> Delivery:  # fmt: skip
    from shared.agent.runner import Runner

    log.info("session claimed", extra={"reason": reason, "task": task, "attempt": attempt, "kind": session.kind.value})
    # Slack's retries (a 429's Retry-After, a 5xx's backoff) wait only while the session's wall budget lasts. The
    # heartbeat keeps the short lease alive meanwhile (a long model call or tool included), a wrap-up's time more:
    # from now for a takeover that starts past the budget (its worker died long ago), whose run is that wrap-up.
    seconds = config.settings().session_lease_seconds
    beating = heartbeat.kept(session, lease_seconds=seconds, for_seconds=max(0.0, _time_left(session)) + 2 * seconds)
    with backpressure.within(_time_left(session)):  # the failure notice too waits for Slack within the budget
        with beating:
            try:
                status = Runner(session, takeover=takeover, started_at=session.started_at, question=question,
                                transcript=transcript, claimed_outcomes=outcomes, opened=opened).run()  # fmt: skip
            except steps.LeaseLost as exc:
                log.warning("lost the session to another worker; stopping", extra={"reason": str(exc)})
                return Delivery(False, {"skipped": "lease lost"})
            except Exception as exc:
                crash = exc
            else:
                return Delivery(False, {"status": status.value})
        return _crashed(session, crash, attempt)  # its heartbeat has stopped: a retry may take the lease at once


def _time_left(session: Session) -> float:
    """Seconds left of the session's wall budget, counted from its first claim (a takeover's clock runs on)."""
    elapsed = (now() - session.started_at).total_seconds() if session.started_at else 0.0
    return config.settings().session_wall_seconds - max(0.0, elapsed)


def _release(session: Session) -> None:
    """The retry takes the session over at once, not a heartbeat later (it cannot tell this attempt is gone)."""
    try:
        lease.release(session)
    except Exception:  # the same hiccup, probably: the retry waits a heartbeat instead
        log.warning("could not release the lease of the failed attempt", exc_info=True)


def _crashed(session: Session, exc: Exception, attempt: int) -> Delivery:
    from shared.agent.failure import give_up, slack_storm

    if isinstance(exc, Contended) and attempt + 1 < GIVE_UP_AFTER_ATTEMPTS:
        # A commit gave up for contention: not a crash, and the retry carries on (on the last attempt it is given
        # up as a crash is: Cloud Tasks would stop retrying and leave the session running, untold).
        _release(session)
        raise exc  # the handler asks for a retry (a warning, no traceback)
    storm = backpressure.storm(exc)
    if storm is not None:  # Slack refused past the budget: a plain, persisted failure, not a retry loop
        log.error("Slack kept refusing; the session ends failed", extra={"reason": storm}, exc_info=exc)
        slack_storm(session, storm, f"{type(exc).__name__}: {exc}")
        return Delivery(False, {"status": "failed"})
    if attempt + 1 < GIVE_UP_AFTER_ATTEMPTS:
        # Probably transient (Slack or Firestore hiccup): Cloud Tasks redelivers and the next attempt resumes.
        log.error("session attempt crashed; asking Cloud Tasks to retry", extra={"attempt": attempt}, exc_info=exc)
        _release(session)
        return Delivery(True, {"error": "session attempt failed, retry"})
    log.error("session crashed on every attempt; giving up", extra={"attempt": attempt}, exc_info=exc)
    return _given_up(session, give_up(session, f"{type(exc).__name__}: {exc}"))


def _given_up(session: Session, finished: bool) -> Delivery:
    """A given-up session's delivery: done, or retried to finish a delegated child's failure (``give_up``)."""
    if finished:
        return Delivery(False, {"status": "failed"})
    _release(session)
    return Delivery(True, {"error": "the failure of a delegated task is not finished, retry"})

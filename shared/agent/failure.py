"""How a session ends ``failed``: the thread told in plain words where Slack lets it, the failure always persisted.

A model outage, a crash that repeats, or a Slack storm that outlasts the session's budget all end here. Telling
the thread is best effort when Slack itself is what failed: the failure is stored either way (with why the thread
could not be told), so a session never ends silently and never stays ``running`` for the sweep to guess about.
"""

from __future__ import annotations

import logging

from shared.agent import followup
from shared.asks import delegation, stopping, tree_status
from shared.slack import backpressure
from shared.slack.surface import ThreadSurface
from shared.state import children as stored_children
from shared.state import origin, steps
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, Note, SessionStatus, Step, StepKind
from shared.state.session_model import Session, SessionUpdate

log = logging.getLogger(__name__)


def fail_session(session: Session, reason: str, surface: ThreadSurface, *, detail: str) -> None:
    """Tell the thread in plain words what happened and what to do (the details stay in the logs and the session's
    record), persist the failure, and end the session as failed. Messages that reached it unread are not lost.
    A child tells its parent instead, whose delegate call gets the failure as its error."""
    log.error("session failed", extra={"reason": reason, "detail": detail})
    if session.reports_to_parent:
        step = Step(seq=session.next_seq, session_id=session.session_id, kind=StepKind.FAILED, content=None,
                    audit=[Audit(AuditType.FAILURE, now(), error=reason)], at=now())  # fmt: skip
        finished = stored_children.finish(session, step, status=SessionStatus.FAILED, result=reason,
                                          error=f"{reason}: {detail}", wait_for_notes=False)  # fmt: skip
        delegation.resume_parent(session, finished)
        stopping.stop_children(session, by="the session that delegated it failed")
        _close_asks(session)
        return
    text = (
        f"Sorry, I could not finish this: {reason}. Nothing more will happen on its own. Mention me again in this "
        "thread to try again; if it keeps failing, an operator can look up what went wrong."
    )
    audit = [Audit(AuditType.FAILURE, now(), error=reason)]
    error = f"{reason}: {detail}"
    try:
        audit.append(Audit(AuditType.POST, now(), ts=surface.post(text, key=f"{session.session_id}:failed:0")))
    except Exception as exc:
        untold = backpressure.storm(exc)
        if untold is None:
            raise
        log.error("the thread could not be told of the failure", extra={"reason": untold})
        error += f" (the thread could not be told: {untold})"
    step = Step(seq=session.next_seq, session_id=session.session_id, kind=StepKind.FAILED, content=None,
                audit=audit, at=now())  # fmt: skip
    fields: SessionUpdate = {"status": SessionStatus.FAILED, "error": error, "ended_at": now()}
    unread = steps.commit_step(session, step, lease_seconds=0, fields=fields)
    try:
        surface.failed()  # the status cleared and ❌ on the request: Slack may take these while refusing posts
    except Exception as exc:
        if backpressure.storm(exc) is None:
            raise
        log.warning("the failure reaction could not be added", extra={"reason": backpressure.storm(exc)})
    _close_asks(session, unread)
    stopping.stop_children(session, by="the session that delegated it failed")
    delegation.release_askers(session)  # children an earlier session of this conversation started
    followup.start_for_unread(session, unread)


def _close_asks(session: Session, unread: list[Note] | None = None) -> None:
    """What the failed session asked and left open (a question it went on working past, a question or approval cards
    of a turn that crashed before it paused) is closed, its posts saying so, and a card approved for its pause that
    it never read says the call did not run (``unread``). Best effort: a Slack storm or a hiccup here leaves the open
    ones to the first answer or decision, which is refused for the failed session and closes them
    (``stopping.close_unwaited``)."""
    try:
        stopping.close_failed(session, unread)
    except Exception as exc:
        log.warning("could not close the failed session's open asks", extra={"error": repr(exc)})


def slack_storm(session: Session, reason: str, detail: str) -> None:
    """End a session whose Slack calls Slack kept refusing past its budget: failed, with the reason stored."""
    request = origin.request_ts(session)
    surface = ThreadSurface(session.origin.channel, session.origin.thread_ts, request, quiet=session.reports_to_parent)
    _fail_outside_run(session, reason, surface, detail=detail)


def give_up(session: Session, reason: str) -> bool:
    """End a session that keeps crashing as failed, telling the thread; best effort for a conversation's own session
    (a failure here is logged: a later delivery of an ended one does nothing, so a retry would finish nothing). False
    when a delegated child's failure was left unfinished (its end, its parent told, its own children stopped): its
    delivery is retried, and the retry finishes it (an ended child's delivery tells its parent and stops what it
    delegated: ``shared.usecases.worker``)."""
    try:
        surface = ThreadSurface(session.origin.channel, session.origin.thread_ts, origin.request_ts(session))
        surface.recover()
        _fail_outside_run(session, "an internal error stopped me", surface, detail=reason)
    except Exception:
        log.exception("could not record the failure of a crashing session")
        return not session.reports_to_parent
    return True


def _fail_outside_run(session: Session, reason: str, surface: ThreadSurface, *, detail: str) -> None:
    """``fail_session`` for a session whose run is over (or never began): a delegated child's end is shown in its
    tree's status message here, as its run shows an end it stores (its run's last update came before this end)."""
    try:
        fail_session(session, reason, surface, detail=detail)
    finally:
        if session.reports_to_parent:
            tree_status.show_ended(session)  # (nothing if its end was not stored: another worker holds it)

"""What happens after a silent exit: a narration retry, or, for a retry that was itself silent, an operator alert.

Retries and scheduled sessions never spawn retries, so a failing narration cannot
loop: it escalates to a person instead.
"""

from __future__ import annotations

import logging

from shared import config, slack, store, tasks
from shared.models import Session, SessionKind

log = logging.getLogger(__name__)


def after_silent_exit(session: Session, *, reason: str) -> str:
    """Start the narration of ``session``, or alert the operators if it may not have one; returns the action."""
    if session.kind in {SessionKind.RETRY, SessionKind.SCHEDULED}:
        alert(session, reason=reason)
        return "escalated"
    retry = store.create_retry(session, reason=reason)
    tasks.enqueue_session(retry.session_id)
    log.info("narration retry queued", extra={"retry": retry.session_id, "reason": reason})
    return "narrated"


def alert(session: Session, *, reason: str) -> None:
    """Tell the operators, in the thread and in the operator channel if one is set, that work went unreported."""
    settings = config.settings()
    mentions = " ".join(f"<@{user}>" for user in sorted(settings.operator_user_ids)) or "Operators"
    original = session.parent_session_id if session.kind == SessionKind.RETRY else session.session_id
    text = (
        f":warning: {mentions}: a session in this thread did work but never reported back, and it could not be "
        f"narrated automatically ({reason}). Please check session `{original}`."
    )
    key = f"{session.session_id}:alert"
    slack.post(session.channel, session.thread_ts, text, key=key)
    if settings.operator_channel:
        link = f"thread {session.thread_ts} in <#{session.channel}>"
        slack.post(settings.operator_channel, None, f"{text} ({link})", key=f"{key}:channel")
    store.mark_followed_up(session.session_id)
    if original and original != session.session_id:
        store.mark_followed_up(original)
    log.warning("operators alerted about an unreported session", extra={"reason": reason})


def narrated(session: Session) -> None:
    """A narration that closed its loop settles the session it narrated."""
    if session.kind == SessionKind.RETRY and session.parent_session_id:
        store.mark_followed_up(session.parent_session_id)

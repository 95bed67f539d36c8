"""The message a conversation started from: where every session of it shows its work and its end (👀, ✅, ⚠️, 🛑).

A continuation's own trigger is what resumed it (a button press, an operator's reply, a child's result), not a
message the requester reads as theirs: Slack answers ``message_not_found`` for a press's ts, and a ✅ on the
operator's reply says nothing about the request. Every kind of session leads back to a mention: a continuation
through the transcript it continues, a retry through the session it narrates, a child through its parent. Each
session is given its request's ts when it is made (``Session.request_ts``, from the question, approval, parent or
narrated session that leads to it), so finding it costs no read; only sessions stored before that walk the chain.
"""

from __future__ import annotations

from shared.state import sessions
from shared.state.models import Session, SessionKind

MAX_HOPS = 8  # a chain longer than any tree this product builds (depth, continuations): stop rather than loop


def origin_of(session: Session) -> str | None:
    """The session one step nearer the request, or None for a mention (it is the request)."""
    if session.kind == SessionKind.MENTION:
        return None
    if session.kind == SessionKind.RETRY:
        return session.narrated_session_id
    if session.kind == SessionKind.CHILD:
        return session.parent_session_id
    return session.transcript if session.transcript != session.session_id else session.asker_session_id


def request_ts(session: Session) -> str:
    """The ts of the request message behind ``session``: kept on it (no read) since sessions carry it; a session
    stored before that follows its chain (its own trigger when the chain cannot be followed)."""
    if session.request_message:
        return session.request_message
    current = session
    for _ in range(MAX_HOPS):
        origin = origin_of(current)
        if not origin or origin == current.session_id:
            break
        found = sessions.get_session(origin)
        if found is None or found.channel != session.channel:
            break
        current = found
    return current.trigger_ts

"""The message a conversation started from: where every session of it shows its work and its end (👀, ✅, ⚠️, 🛑).

A continuation's own trigger is what resumed it (a button press, an operator's reply, a child's result), not a
message the requester reads as theirs: Slack answers ``message_not_found`` for a press's ts, and a ✅ on the
operator's reply says nothing about the request. Every kind of session leads back to a mention: a continuation
through the transcript it continues, a retry through the session it narrates, a child through its parent. Each
session is given its request's ts when it is made (``Session.request_ts``, from the question, approval, parent or
narrated session that leads to it), so finding it costs no read; only sessions stored before that walk the chain.

What a new record copies from the session or record it comes from is copied here, once per kind of copy: a
question's or an approval's asker (``asked_by``), a continuation's paused asker (``resuming``: through the question
or approval it asked; ``continuing``: the session itself, its waits all resolved or a late child's result), and a
session that works on in another's thread (``same_thread``: a narration retry, a delegated child).
"""

from __future__ import annotations

from typing import TypedDict

from shared.state import sessions
from shared.state.models import Approval, Question, SessionKind
from shared.state.session_model import Session

MAX_HOPS = 8  # a chain longer than any tree this product builds (depth, continuations): stop rather than loop


class AskedBy(TypedDict):
    """The asking session's part of a question or an approval: where it shows, and what a continuation resumes."""

    session_id: str
    transcript_id: str
    channel: str
    thread_ts: str
    request_ts: str | None


def asked_by(session: Session) -> AskedBy:
    """The fields a question or an approval ``session`` asks copies from it (the requester is named differently in
    each: ``Question.requester``, ``Approval.requested_by``)."""
    return AskedBy(session_id=session.session_id, transcript_id=session.transcript, channel=session.origin.channel,
                   thread_ts=session.origin.thread_ts, request_ts=session.request_message)  # fmt: skip


class Resuming(TypedDict):
    """A continuation's part that comes from the question or approval it resumes."""

    channel: str
    thread_ts: str
    asker_session_id: str
    requested_by: str | None
    transcript_id: str
    request_ts: str | None


def resuming(record: Question | Approval) -> Resuming:
    """What the continuation that resumes ``record``'s asker copies from it: the same thread, transcript and
    requester."""
    requester = record.requester if isinstance(record, Question) else record.requested_by
    return Resuming(channel=record.channel, thread_ts=record.thread_ts, asker_session_id=record.session_id,
                    requested_by=requester, transcript_id=record.transcript_id,
                    request_ts=record.request_ts)  # fmt: skip


class Continuing(TypedDict):
    """A continuation's part that comes from the session it continues directly (not through a question or an
    approval): the same thread, transcript, requester, trace and request."""

    channel: str
    thread_ts: str
    asker_session_id: str
    requested_by: str | None
    transcript_id: str
    trace_id: str | None
    request_ts: str | None


def continuing(session: Session) -> Continuing:
    """What a continuation of ``session``'s own transcript copies from it (the continuation of a turn whose waits
    are all resolved; a late child's result for an ended parent)."""
    return Continuing(channel=session.origin.channel, thread_ts=session.origin.thread_ts,
                      asker_session_id=session.session_id, requested_by=session.requester,
                      transcript_id=session.transcript, trace_id=session.trace_id,
                      request_ts=session.request_message)  # fmt: skip


class SameThread(TypedDict):
    """A session's part that comes from the session whose thread it works in (a retry narrates it, a child helps it)."""

    channel: str
    thread_ts: str
    trigger_ts: str
    trigger_user: str
    trace_id: str | None
    request_ts: str | None


def same_thread(session: Session) -> SameThread:
    """What a session working in ``session``'s thread copies from it: the thread, its trigger, trace and request."""
    return SameThread(
        channel=session.origin.channel,
        thread_ts=session.origin.thread_ts,
        trigger_ts=session.origin.trigger_ts,
        trigger_user=session.origin.trigger_user,
        trace_id=session.trace_id,
        request_ts=session.request_message,
    )


def origin_of(session: Session) -> str | None:
    """The session one step nearer the request, or None for a mention (it is the request)."""
    if session.kind == SessionKind.MENTION:
        return None
    if session.kind == SessionKind.RETRY:
        return session.narrated_session_id
    if session.kind == SessionKind.CHILD:
        return session.tree.parent_id
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
        if found is None or found.origin.channel != session.origin.channel:
            break
        current = found
    return current.origin.trigger_ts

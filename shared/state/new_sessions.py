"""One factory per kind of session, so a session is never assembled field by field elsewhere.

Each derives the session's id from what caused it (the Slack event, the question, the approved turn, the silent
session), so every retry of one cause builds the same document.
"""

from __future__ import annotations

from datetime import datetime

from shared.state import ids
from shared.state.models import Question, SessionKind
from shared.state.origin import resuming, same_thread
from shared.state.session_model import Session


def mention_session(
    *, event_id: str, channel: str, thread_ts: str, ts: str, user: str, text: str, at: datetime,
    trace_id: str | None = None,
) -> Session:  # fmt: skip
    """The session a mention (or a DM) starts; its id is derived from the Slack event."""
    return Session.new(
        session_id=ids.session_for_event(event_id),
        kind=SessionKind.MENTION,
        channel=channel,
        thread_ts=thread_ts,
        trigger_ts=ts,
        trigger_user=user,
        text=text,
        event_id=event_id,
        created_at=at,
        transcript_writer=ids.session_for_event(event_id),
        trace_id=trace_id,
        request_ts=ts,
    )


def continuation_session(question: Question, *, answer_ts: str, user: str, text: str, at: datetime,
                         trace_id: str | None = None) -> Session:  # fmt: skip
    """The session an answer resumes: it continues the asker's transcript from the pending call."""
    return Session.new(
        session_id=ids.continuation_id(question.question_id),
        kind=SessionKind.CONTINUATION,
        **resuming(question),
        trigger_ts=answer_ts,
        trigger_user=user,
        text=text,
        created_at=at,
        question_id=question.question_id,
        trace_id=trace_id,
    )


def retry_session(silent: Session, *, reason: str, at: datetime) -> Session:
    """The narration retry of a silent session: it reports from the audit log only."""
    return Session.new(
        session_id=ids.retry_id(silent.session_id),
        kind=SessionKind.RETRY,
        **same_thread(silent),
        text=silent.text,
        created_at=at,
        narrated_session_id=silent.session_id,
        retry_reason=reason,
    )

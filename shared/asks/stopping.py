"""Stopping a session stops its whole tree (flow 10): nothing it started waits for ever.

A queued or paused member ends at once, its open questions and pending approvals cancelled with their posts
updated; a running one ends at its next step boundary (it reads the request with every step it stores). A person
stops a session with its Stop button or by typing "stop" in its thread: only its requester or an operator may.
"""

from __future__ import annotations

import logging
import re
from enum import StrEnum

from shared import config
from shared.asks import approvals, delegation
from shared.slack import blocks
from shared.slack import client as slack
from shared.slack.surface import Reaction
from shared.state import approvals as stored_approvals
from shared.state import questions as stored_questions
from shared.state import sessions, tasks
from shared.state.models import QuestionStatus, Session, SessionStatus

log = logging.getLogger(__name__)


def stop(session_id: str, *, by: str) -> list[str]:
    """Stop ``session_id`` and every session it delegated to, down the tree; the ids stopped or asked to stop."""
    stopped: list[str] = []
    waiting = [session_id]
    while waiting:
        current = waiting.pop()
        request = sessions.request_stop(current, by=by)
        if request is not None:
            stopped.append(current)
        if request is not None and request.was == SessionStatus.PAUSED:
            found = sessions.get_session(current)
            if found is not None:
                close_waits(found, by=by)
                delegation.release_askers(found)  # children of earlier sessions of its conversation
                if found.top_level:  # it waited: nobody else will tell the thread
                    slack.post(found.channel, found.thread_ts, f":octagonal_sign: Stopped by {by}.",
                               key=f"{found.session_id}:stopped")  # fmt: skip
                    slack.react(found.channel, found.trigger_ts, Reaction.STOPPED)
        if request is not None and request.run_to_stop:
            tasks.enqueue_session(current, attempt=f"stop-{len(stopped)}-{request.was.value}")
        waiting.extend(child.session_id for child in sessions.children_of(current))
    log.info("stopped a session tree", extra={"root": session_id, "stopped": stopped, "by": by})
    return stopped


def stop_children(session: Session, *, by: str) -> list[str]:
    """Stop what ``session`` delegated (it failed or was stopped itself)."""
    return [s for child in sessions.children_of(session.session_id) for s in stop(child.session_id, by=by)]


def close_waits(session: Session, *, by: str) -> None:
    """A stopped session's open questions are cancelled and its pending approvals denied, their posts updated."""
    thread = stored_questions.thread_questions(session.channel, session.thread_ts)
    for question in thread.open:
        if question.session_id != session.session_id:
            continue
        if stored_questions.close_question(question.question_id, QuestionStatus.CANCELLED) and question.post_ts:
            slack.update(session.channel, question.post_ts,
                         blocks.cancelled_text(question.text, f"the session was stopped by {by}"))  # fmt: skip
            slack.unreact(session.channel, question.post_ts, Reaction.QUESTION)
    for approval in stored_approvals.pending(thread.open_approval_ids):
        if approval.session_id == session.session_id:
            approvals.cancel(approval, by=by)


class StopOutcome(StrEnum):
    STOPPED = "stopped"  # asked to stop (a running session ends at its next step boundary)
    REFUSED = "refused"  # neither its requester nor an operator: nothing changed
    ENDED = "ended"  # it had ended already
    UNKNOWN = "unknown"  # no such session in this thread


_STOP_WORD = re.compile(r"\s*(?:<@[A-Z0-9]+>\s*)?stop[\s.!]*", re.IGNORECASE)


def is_stop(text: str) -> bool:
    """Whether a thread message is the word "stop" alone (after a mention of the bot, if any)."""
    return _STOP_WORD.fullmatch(text) is not None


def stop_by_person(session_id: str, *, user: str, channel: str, thread_ts: str | None) -> StopOutcome:
    """A person's Stop (a button, or "stop" typed in the thread), answered with an ephemeral note. The requester
    is whoever started the conversation (a continuation's answerer is an operator anyway)."""
    found = sessions.get_session(session_id)
    first = found if found is None or found.transcript == found.session_id else sessions.get_session(found.transcript)
    requesters = {s.trigger_user for s in (found, first) if s is not None}
    if found is None or found.channel != channel or not found.top_level:
        outcome, note = StopOutcome.UNKNOWN, "There is no session of mine to stop here."
    elif user not in requesters and user not in config.settings().operator_user_ids:
        outcome, note = StopOutcome.REFUSED, "Only the person who asked or an operator can stop this session."
    elif not _stop_conversation(found, by=f"<@{user}>"):
        outcome, note = StopOutcome.ENDED, "That session has already ended."
    else:
        outcome, note = StopOutcome.STOPPED, "Stopping: the session ends after the step it is on now."
    slack.ephemeral(channel, user, note, thread_ts=thread_ts)
    log.info("a person's stop", extra={"stop_session": session_id, "user": user, "outcome": outcome.value})
    return outcome


def _stop_conversation(session: Session, *, by: str) -> list[str]:
    """Stop ``session`` and the session that continues its conversation now, if another does (a Stop button
    names the session that posted it; an answer may have continued it since)."""
    stopped = stop(session.session_id, by=by)
    if session.status in {SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.PAUSED}:
        return stopped
    active = sessions.active_sessions_in_thread(session.channel, session.thread_ts)
    later = [
        other for other in active if other.transcript == session.transcript and other.session_id != session.session_id
    ]
    return stopped + [s for other in later for s in stop(other.session_id, by=by)]

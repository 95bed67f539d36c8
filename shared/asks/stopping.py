"""Stopping a session stops its whole tree (flow 10): nothing it started waits for ever.

A queued or paused member ends at once, its open questions and pending approvals cancelled with their posts
updated; a running one ends at its next step boundary (it reads the request with every step it stores). A person
stops a session with its Stop button or by typing "stop" in its thread: only its requester or an operator may.
"""

from __future__ import annotations

import logging
import re
from enum import StrEnum
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block

from shared import config
from shared.asks import approvals, delegation
from shared.slack import blocks, placement
from shared.slack import client as slack
from shared.slack.blocks import STOP_BLOCK_PREFIX
from shared.slack.surface import Reaction
from shared.state import approvals as stored_approvals
from shared.state import origin, sessions, tasks
from shared.state import questions as stored_questions
from shared.state.models import QuestionStatus, Session, SessionStatus

log = logging.getLogger(__name__)

STOPPING_NOTE = "Stopping: the session ends after the step it is on now."
ENDED_NOTE = "That session has already ended."


def stopped_text(by: str) -> str:
    """The one public message a stop leaves in the thread (the runner's, or this module's for a waiting session)."""
    return f":octagonal_sign: Stopped by {by}. Nothing more will happen unless someone asks again."


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
                    asked = origin.request_ts(found)
                    slack.post(found.channel, placement.reply_ts(found.channel, found.thread_ts, asked),
                               stopped_text(by), key=f"{found.session_id}:stopped")  # fmt: skip
                    slack.react(found.channel, asked, Reaction.STOPPED)
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
    """A person's Stop (a button, or "stop" typed in the thread). The requester is whoever started the
    conversation (a continuation's answerer is an operator anyway).

    What the thread shows comes in the order it happens, one message for one stop: the Stop buttons go first; a
    session that waits ends at once and says so in the thread; a running one gets the private "Stopping…" note
    before it is asked to stop, so its public "Stopped by" always comes after. Refusals are private notes."""

    def answer(outcome: StopOutcome, note: str | None) -> StopOutcome:
        if note:
            slack.ephemeral(channel, user, note, thread_ts=thread_ts)
        log.info("a person's stop", extra={"stop_session": session_id, "user": user, "outcome": outcome.value})
        return outcome

    found = sessions.get_session(session_id) if session_id else None  # a tampered press may name nothing
    first = found if found is None or found.transcript == found.session_id else sessions.get_session(found.transcript)
    requesters = {s.trigger_user for s in (found, first) if s is not None}
    if found is None or found.channel != channel or not found.top_level:
        return answer(StopOutcome.UNKNOWN, "There is no session of mine to stop here.")
    if user not in requesters and user not in config.settings().operator_user_ids:
        return answer(StopOutcome.REFUSED, "Only the person who asked or an operator can stop this session.")
    targets = _conversation(found)
    if not targets:
        return answer(StopOutcome.ENDED, ENDED_NOTE)
    remove_stop_buttons(found)
    if any(t.status == SessionStatus.RUNNING for t in targets):
        slack.ephemeral(channel, user, STOPPING_NOTE, thread_ts=thread_ts)
    stopped = [s for target in targets for s in stop(target.session_id, by=f"<@{user}>")]
    return answer(StopOutcome.STOPPED, None) if stopped else answer(StopOutcome.ENDED, ENDED_NOTE)  # ended meanwhile


_UNFINISHED = {SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.PAUSED}


def _conversation(session: Session) -> list[Session]:
    """What a stop of ``session`` stops: itself while it has not ended, else the session that continues its
    conversation now, if another does (a Stop button names the session that posted it; an answer may have
    continued it since)."""
    if session.status in _UNFINISHED:
        return [session]
    active = sessions.active_sessions_in_thread(session.channel, session.thread_ts)
    return [o for o in active if o.transcript == session.transcript and o.session_id != session.session_id]


def remove_stop_buttons(session: Session) -> None:
    """Take the Stop buttons of ``session``'s conversation off its thread's messages (one thread read), so the
    button goes with the first thing the stop shows. Best effort: a refused edit leaves a button whose press then
    answers "already ended"."""
    try:
        thread = slack.thread_messages(session.channel, session.thread_ts)
    except SlackApiError as exc:
        log.warning("could not read the thread to remove its Stop buttons", extra={"error": exc.response.get("error")})
        return
    known: dict[str, bool] = {}

    def ours(block: dict[str, Any]) -> bool:
        block_id = str(block.get("block_id") or "")
        if block.get("type") != "actions" or not block_id.startswith(STOP_BLOCK_PREFIX):
            return False
        named = block_id.removeprefix(STOP_BLOCK_PREFIX)
        if named not in known:
            other = sessions.get_session(named) if named != session.session_id else session
            known[named] = other is not None and other.transcript == session.transcript
        return known[named]

    for message in thread:
        shown = message.get("blocks") or []
        kept = [b for b in shown if not ours(b)]
        if len(kept) == len(shown):
            continue
        try:
            slack.update(session.channel, str(message["ts"]), str(message.get("text") or ""),
                         blocks=Block.parse_all(kept))  # fmt: skip
        except SlackApiError as exc:
            log.warning("could not remove a Stop button", extra={"error": exc.response.get("error")})

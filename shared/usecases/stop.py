"""A person stops a session (flow 10): its Stop button, or the word "stop" typed in its thread.

Only its requester or an operator may. The Stop buttons go first, then the whole tree stops
(``shared.asks.stopping``): a waiting session at once, a running one at its next step boundary.
"""

from __future__ import annotations

import logging
import re
from enum import StrEnum
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block

from shared import config
from shared.asks.stopping import stop
from shared.slack import client as slack
from shared.slack.blocks import STOP_BLOCK_PREFIX
from shared.state import sessions
from shared.state.models import SessionStatus
from shared.state.session_model import Session

log = logging.getLogger(__name__)

STOPPING_NOTE = "Stopping: the session ends after the step it is on now."
ENDED_NOTE = "That session has already ended."


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
    requesters = {s.origin.trigger_user for s in (found, first) if s is not None}
    if found is None or found.origin.channel != channel or not found.top_level:
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
    continued it since), else the tasks its conversation delegated that still run."""
    if session.status in _UNFINISHED:
        return [session]
    active = sessions.active_sessions_in_thread(session.origin.channel, session.origin.thread_ts)
    found = [o for o in active if o.transcript == session.transcript and o.session_id != session.session_id]
    return found or _tasks_running(session)


def _tasks_running(session: Session) -> list[Session]:
    """The conversation answered while tasks it did not wait for still run (its tree's message offers Stop): the
    topmost of its tree's sessions that have not ended (stopping each stops what it delegated)."""
    members = sessions.tree_members(session.tree_root)
    running = {m.session_id for m in members if m.status in _UNFINISHED}
    return [m for m in members if m.session_id in running and m.tree.parent_id not in running]


def remove_stop_buttons(session: Session) -> None:
    """Take the Stop buttons of ``session``'s conversation off its thread's messages (one thread read), so the
    button goes with the first thing the stop shows. Best effort: a refused edit leaves a button whose press then
    answers "already ended"."""
    try:
        thread = slack.thread_messages(session.origin.channel, session.origin.thread_ts)
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
            slack.update(session.origin.channel, str(message["ts"]), str(message.get("text") or ""),
                         blocks=Block.parse_all(kept))  # fmt: skip
        except SlackApiError as exc:
            log.warning("could not remove a Stop button", extra={"error": exc.response.get("error")})

"""What happens after a silent exit: a narration retry, or, for a retry that was itself silent, an operator alert.

Retries never spawn retries, so a failing narration cannot loop: it escalates to a person instead.
"""

from __future__ import annotations

import logging

from shared import config
from shared.asks import notices
from shared.queue import tasks
from shared.slack import blocks, placement
from shared.state import dm_conversations, origin, sessions
from shared.state import notices as stored_notices
from shared.state import questions as stored_questions
from shared.state.firestore import now
from shared.state.models import Note, NoteKind, SessionKind
from shared.state.new_sessions import continuation_session, mention_session, retry_session
from shared.state.notices import Notice
from shared.state.session_model import Session

log = logging.getLogger(__name__)


def after_silent_exit(session: Session, *, reason: str) -> str:
    """Start the narration of ``session``, or alert the operators if it may not have one; returns the action."""
    if session.kind == SessionKind.RETRY:
        alert(session, reason=reason)
        return "escalated"
    retry = sessions.create_session(retry_session(session, reason=reason, at=now()))
    tasks.enqueue_session(retry.session_id)
    log.info("narration retry queued", extra={"retry": retry.session_id, "reason": reason})
    return "narrated"


def alert(session: Session, *, reason: str) -> None:
    """Tell the operators, in the thread and in the operator channel if one is set, that work went unreported: each
    post once, however many sweeps find it at once, and again by the next sweep while Slack refuses it
    (``shared.asks.notices``). Both are claimed before the session is marked followed up, so a sweep killed after the
    mark leaves them to the next sweep (which looks for a post it may have made before posting it); the mark is made
    even when another holds them or posted them (owed notices need no unreported session to be found again). A
    refused post is not raised: it is owed to the next sweep or rescue, and the end of a worker that alerts is not
    failed for it."""
    key = f"{session.session_id}:alert"
    settings = config.settings()
    mentions = blocks.operator_mentions(settings.operator_user_ids)
    original = session.narrated_session_id if session.kind == SessionKind.RETRY else session.session_id
    text = (
        f":warning: {mentions}: a session in this thread did work but never reported back, and it could not be "
        f"narrated automatically ({reason}). Please check session `{original}`."
    )
    where = placement.reply_ts(session.origin.channel, session.origin.thread_ts, origin.request_ts(session))
    told = [Notice(key, "alert", session.origin.channel, where, text, key)]
    if settings.operator_channel:
        link = f"thread {session.origin.thread_ts} in <#{session.origin.channel}>"
        told.append(Notice(f"{key}:channel", "alert", settings.operator_channel, None, f"{text} ({link})",
                           f"{key}:channel"))  # fmt: skip
    claimed = [(notice, claim) for notice in told if (claim := stored_notices.claim(notice, hold=notices.HOLD))]
    # Marked whether or not this caller claimed them: a claimed notice is owed until posted (its record is read by
    # every sweep and rescue), so one posted or held by another (a sweep killed before this mark, its notices then
    # posted by the rescue) must not leave the session unreported for every later sweep.
    sessions.mark_followed_up(session.session_id)
    if original and original != session.session_id:
        sessions.mark_followed_up(original)
    if not claimed:
        log.info("the operators' alert is another's (posted, or being posted)", extra={"reason": reason})
        return
    for notice, claim in claimed:
        try:
            notices.deliver(notice, claim)
        except notices.NotPosted:  # logged; owed to the next sweep or rescue (a worker's end is not failed for it)
            continue
    log.warning("operators alerted about an unreported session", extra={"reason": reason})


def narrated(session: Session) -> None:
    """A narration that closed its loop settles the session it narrated."""
    if session.kind == SessionKind.RETRY and session.narrated_session_id:
        sessions.mark_followed_up(session.narrated_session_id)


def start_for_unread(session: Session, notes: list[Note]) -> None:
    """What reached a session as a note in its last moments (it then ended at its budget, or failed) is not
    dropped: a mention starts a session of its own, and an answer to one of its non-blocking questions resumes the
    transcript in that question's continuation, once each (their ids come from the message and the question)."""
    for note in notes:
        if note.kind == NoteKind.ANSWER and note.question_id:
            _continue_for_answer(note.question_id)
            continue
        if note.kind != NoteKind.STEER or not note.starts_session:
            continue
        thread_ts = session.origin.thread_ts
        if placement.top_level(session.origin.channel, session.origin.thread_ts, origin.request_ts(session)):
            thread_ts = note.ts  # typed at the DM's top level: a conversation of its own there
            dm_conversations.started(session.origin.channel, note.ts)
        unread = mention_session(
            event_id=f"note-{session.origin.channel}-{note.ts}",
            channel=session.origin.channel,
            thread_ts=thread_ts,
            ts=note.ts,
            user=note.user,
            text=note.text,
            at=now(),
        )
        started = sessions.create_session(unread)
        tasks.enqueue_session(started.session_id)
        log.info("an unread mention starts its own session", extra={"started": started.session_id})


def _continue_for_answer(question_id: str) -> None:
    question = stored_questions.get_question(question_id)
    if question is None or question.blocking or question.answer_ts is None:
        return  # a blocking answer is a pending call's response: read at the pause, never left as a note
    at = now()
    user, text = question.answered_by or "", question.answer or ""
    continuation = continuation_session(question, answer_ts=question.answer_ts, user=user, text=text, at=at)
    resumed = sessions.create_session(continuation)
    tasks.enqueue_session(resumed.session_id)
    log.info("an unread answer resumes the transcript", extra={"started": resumed.session_id})

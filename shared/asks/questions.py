"""Questions to the operator: ask one, cancel older ones, remind about one, abandon one.

One turn's open blocking questions per thread: a new one cancels the older ones of other turns (the calls of one
turn each wait on their own), and a paused session that waited on a cancelled question is closed. The sweep reminds
once and then abandons.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError

from shared import config
from shared.asks import cancelling, notices, routing
from shared.slack import blocks, placement
from shared.slack import client as slack
from shared.slack.surface import Reaction, ThreadSurface
from shared.state import ids, sessions
from shared.state import notices as stored_notices
from shared.state import questions as stored
from shared.state.firestore import now
from shared.state.models import Question, QuestionStatus, SessionStatus
from shared.state.notices import Notice
from shared.state.origin import asked_by
from shared.state.session_model import Session

log = logging.getLogger(__name__)

REPLACED = "a newer question replaces it"


def replaced(statuses: Iterable[str]) -> bool:
    """Whether a turn whose questions closed unanswered with ``statuses`` had one replaced by a newer question (else
    they went unanswered)."""
    return QuestionStatus.CANCELLED.value in statuses


def why_closed(statuses: Iterable[str], *, unanswered: str) -> str:
    """Why a session whose turn had questions closed unanswered with ``statuses`` stopped waiting: a newer question
    replaces one (``REPLACED``), or ``unanswered``."""
    return f"its session stopped waiting: {REPLACED if replaced(statuses) else unanswered}"


def ask(session: Session, *, seq: int, call_index: int, call_id: str | None, question: str, options: list[str],
        blocking: bool, surface: ThreadSurface, mcp_input: dict[str, Any] | None = None,
        link: str | None = None, round: int = 1) -> Question:  # fmt: skip
    """Record ``question`` open, then post it in the session's thread, then note the post on the record.

    The record exists before anyone can see the question, so a reply or a button press that comes at once answers
    it. A retried step finds what it did before (the same id, the same post key). ``mcp_input`` is an MCP server's
    request the answer resumes (``round``: its request in that call, each its own question and post); ``link`` a
    URL the question shows as a link button (stored with it: a retry shows it again with its button).
    """
    qid = ids.question_id(session.session_id, seq, call_index, round)
    elsewhere = routing.operator_channel(
        session.origin.channel
    )  # operators cannot see this conversation: their channel
    if blocking:
        cancel_older(session.origin.channel, session.origin.thread_ts, keep=qid, asker=session.session_id, seq=seq)
    asked = stored.create_question(
        Question(
            question_id=qid,
            **asked_by(session),
            text=question,
            options=options,
            blocking=blocking,
            call_id=call_id,
            asked_at=now(),
            requester=session.requester,
            mcp_input=mcp_input,
            seq=seq,
            call_index=call_index,
            post_channel=elsewhere,
            link=link,
        )
    )
    settings = config.settings()
    operators = settings.operator_user_ids if settings.question_mentions_operators else None
    text = blocks.question_text(question, options, operators=operators, link=link)
    shown = blocks.question_blocks(qid, question, options, operators=operators, link=link)
    key = ids.post_key(session.session_id, seq, f"{call_index}:question" + (f"-r{round}" if round > 1 else ""))
    if asked.post_ts is None and asked.post_channel:  # in the operators' channel, linked back; the person told
        asked = stored.set_post_ts(qid, routing.ask_operators(asked, surface, key=key, text=text, blocks=shown))
    elif asked.post_ts is None:
        asked = stored.set_post_ts(qid, surface.post(text, key=key, blocks=shown))
    post_channel, post_ts = asked.post_place()[0], asked.post_ts or ""
    if asked.status == QuestionStatus.OPEN:
        slack.react(post_channel, post_ts, Reaction.QUESTION)  # the question stands even if this fails
    elif asked.status == QuestionStatus.ANSWERED:  # answered before its post was recorded
        slack.update(post_channel, post_ts, answered_text(asked))
    return asked


def answered_text(question: Question) -> str:
    """What an answered question's post says instead of its buttons."""
    return blocks.answered_text(
        question.answered_by or "", question.answer or "", question.text, pressed=question.answer_pressed
    )


def cancel_older(channel: str, thread_ts: str, *, keep: str, asker: str, seq: int | None = None) -> None:
    """Cancel the thread's other open blocking questions, say so on their posts, close sessions left waiting. The
    questions of the asker's own turn (step ``seq``) stay open: one turn may wait on several, each its call's.

    Each cancel records on the thread that ``keep`` replaced it, so a retry of this ask (its worker died, or a call
    failed, between a cancel and the end of the session paused on it) finishes what the first try began: the
    thread no longer lists that question as open, and its session would otherwise stay paused on it for ever."""
    thread = stored.thread_questions(channel, thread_ts)
    for older in thread.open:
        if older.question_id == keep or not older.blocking or (older.session_id == asker and older.seq == seq):
            continue
        # The ask lifecycle's cancel step.
        if cancelling.cancel_question(older, why=REPLACED, by=asker, replaced_by=keep):
            _abandon_asker(older, asker=asker)
    begun = [question_id for question_id, by in thread.replaced.items() if by == keep]  # none on a first try
    for older in stored.get_questions(begun).values():
        if older.status == QuestionStatus.CANCELLED:
            _abandon_asker(older, asker=asker, again=True)  # first: the post below is only shown again
            cancelling.show_cancelled(older, why=REPLACED)


def _abandon_asker(older: Question, *, asker: str, again: bool = False) -> None:
    """The session paused on ``older``, a question a newer one replaced, ends (abandoned), and everything else its
    turn waited on with it. ``again``: a retry, which also ends the waits of a session the first try abandoned
    (it may have stopped before ending them; each end changes nothing the second time)."""
    if older.session_id == asker:
        return
    ended = sessions.end_session(older.session_id, expect=SessionStatus.PAUSED, status=SessionStatus.ABANDONED)
    if ended is None and again:
        found = sessions.get_session(older.session_id)
        ended = found if found is not None and found.status == SessionStatus.ABANDONED else None
    if ended is not None:
        _end_waits(ended, why=f"its session stopped waiting: {REPLACED}", by=asker)


def reminder(question: Question, at: datetime) -> Notice | None:
    """The one reminder of a question left open too long, mentioning the operators, under its post when it was routed
    to the operator channel; None if it is not open or was reminded (the sweep posts it once: ``lifecycle.Ask``)."""
    if question.reminded_at is not None or question.status != QuestionStatus.OPEN:
        return None
    operators = blocks.operator_mentions(config.settings().operator_user_ids)
    hours = int((at - question.asked_at).total_seconds() // 3600)
    text = f":alarm_clock: {operators}: this question has waited {hours} hours for an answer:\n>{question.text}"
    where = (question.post_channel, question.post_ts) if question.post_channel and question.post_ts else (
        question.channel, _reply_ts(question))  # fmt: skip
    key = f"{question.question_id}:reminder"
    return Notice(key, "reminder", *where, text, key, about=f"questions/{question.question_id}")


def abandon(question: Question, at: datetime) -> bool:
    """Stop waiting for a question: the paused session closed (and everything else its turn waited on), 💬 off, the
    post updated, the thread told. A non-blocking question closes alone: no turn waits on it (the thread is told
    only if its session is not still paused on the rest of its turn).

    The session ends right after the question closes, before any call to Slack: a post that fails (the bot removed
    from the channel, Slack down) used to leave it paused for ever on a question the sweep no longer ages. A sweep
    killed between the two leaves it paused with nothing open; the next sweep ends it and shows the abandon
    (``shared.usecases.sweep``). The thread is told before what else the turn waited on is ended: a failure or a
    kill there cannot lose the notice, and a failure of the notice still ends the rest."""
    if not stored.close_question(question.question_id, QuestionStatus.ABANDONED):
        return False
    hours = _hours_open(question, at)
    # A blocking question's notice is claimed before its session ends: a sweep killed after the end (the question no
    # longer open, the session no longer paused: no later sweep looks at either) leaves it owed to the next sweep.
    notice = abandoned_notice(question, at)
    claimed = stored_notices.claim(notice, hold=notices.HOLD) if question.blocking else None
    try:
        # Only a blocking question is waited on: a session paused on something else goes on waiting for that.
        ended = sessions.end_session(question.session_id, expect=SessionStatus.PAUSED,
                                     status=SessionStatus.ABANDONED) if question.blocking else None  # fmt: skip
        if ended is None and _closed_by_stop(question):
            if claimed is not None:
                notices.give_up(notice, "its session was stopped")
            return True
        # A thread still waiting (its session paused on the rest of its turn, or a later session of the thread on a
        # question or an approval of its own) is not told to start again: the post alone says it.
        waits_on = not question.blocking and (_paused(question.session_id) or _thread_waits(question))
    except Exception:
        if claimed is not None:  # nothing was posted: whichever path finishes this abandon tells the thread
            stored_notices.release(notice.claim)
        raise
    try:
        # First: a sweep killed in what follows has told the thread (a blocking one's notice, claimed above).
        show_abandoned(question, at, tell=not waits_on and not question.blocking)
        if claimed is not None:
            notices.deliver(notice, claimed)
    finally:
        if ended is not None:
            _end_waits(ended, why=f"its session stopped waiting: a question went unanswered for {hours} hours",
                       by="sweep")  # fmt: skip
    return True


def _thread_waits(question: Question) -> bool:
    """Whether the question's thread waits on something else asked of the operators (a blocking question, an
    approval): a conversation there goes on, and a mention would answer that, not start again."""
    thread = stored.thread_questions(question.channel, question.thread_ts)
    others = [q for q in thread.open if q.question_id != question.question_id and q.blocking]
    return bool(others or thread.open_approval_ids)


def _paused(session_id: str) -> bool:
    found = sessions.get_session(session_id)
    return found is not None and found.status == SessionStatus.PAUSED


def _closed_by_stop(question: Question) -> bool:
    """A question of a stopped session (its Stop was killed before it closed it): shown as the Stop would have shown
    it, and what else the session left open closed too; never "Nobody answered" in a stopped thread."""
    from shared.asks import stopping  # (as in ``_end_waits``)

    stopped = stopping.close_stopped(question.session_id)
    if stopped is None:
        return False
    cancelling.show_cancelled(question, why=f"the session was stopped by {stopping.stopped_by(stopped)}")
    return True


def _hours_open(question: Question, at: datetime) -> int:
    return int((at - question.asked_at).total_seconds() // 3600)


def show_closed(closed: list[Question], at: datetime) -> None:
    """Questions closed unanswered by a path stopped before it ended their session, shown as that path would have
    shown them: an abandoned question's post updated and the thread told once; a question a newer one replaced
    shown so, the thread told nothing (it has that one to answer)."""
    for question in closed:
        if question.status == QuestionStatus.CANCELLED:
            cancelling.show_cancelled(question, why=REPLACED)
    abandoned = [q for q in closed if q.status == QuestionStatus.ABANDONED]
    for n, question in enumerate(abandoned):
        show_abandoned(question, at, tell=n == 0)


def show_abandoned(question: Question, at: datetime, *, tell: bool = True) -> None:
    """An abandoned question made known: 💬 off, its post updated, (``tell``) the thread told how to start again."""
    hours = _hours_open(question, at)
    if question.post_ts:
        slack.unreact(question.post_place()[0], question.post_ts, Reaction.QUESTION)
        try:
            slack.update(question.post_place()[0], question.post_ts, blocks.abandoned_text(question.text, hours))
        except SlackApiError as exc:  # the thread is told below either way
            log.warning("could not update the abandoned question", extra={"error": exc.response.get("error")})
    # The sweep's abandon and a refused answer may both show it: posted once (``shared.asks.notices``), and again by
    # the next sweep while Slack refuses it.
    if tell:
        notices.post(abandoned_notice(question, at))


def abandoned_notice(question: Question, at: datetime) -> Notice:
    """The thread told that nobody answered ``question`` and how to start again."""
    text = (f"Nobody answered this question for {_hours_open(question, at)} hours, so I have stopped waiting. "
            "To start again, mention me in this thread with what you would like.")  # fmt: skip
    key = f"{question.question_id}:abandoned"
    return Notice(f"notice-{key}", "notice", question.channel, _reply_ts(question), text, key)


def _end_waits(ended: Session, *, why: str, by: str) -> None:
    """A session abandoned while paused: everything else its turn waited on ends too (a mixed turn's approvals,
    children, other questions), each through the ask lifecycle's cancel step, with what else its conversation left
    open, and its children's questions to it will not be answered either."""
    # The lifecycle's table (``shared.asks.lifecycle``) holds this module's functions: imported here, so the table
    # can be built when this module is.
    from shared.asks import stopping

    stopping.end_abandoned(ended, why=why, by=by)


def _reply_ts(question: Question) -> str | None:
    """Where the sweep's posts about a question go: its thread, or the DM itself (shared/slack/placement.py)."""
    return placement.reply_ts(question.channel, question.thread_ts, question.request_ts)

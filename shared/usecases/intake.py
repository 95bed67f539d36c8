"""What a person's Slack message does: answer the thread's open question, steer its running session, or start a
new session. On the Slack ingress path, so it never imports google-genai.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from shared.asks import answers, approvals
from shared.asks.answers import AnswerOutcome
from shared.limits import MAX_MESSAGE_CHARS, TOO_LARGE_REQUEST_CHARS, capped
from shared.logs import current_trace, session_context
from shared.queue import tasks
from shared.slack import client as slack
from shared.slack.events import Message
from shared.state import dm_conversations, events, ids, quotas, sessions, steering
from shared.state import questions as stored_questions
from shared.state.firestore import now
from shared.state.models import Note, NoteKind, SessionStatus, WaitKind
from shared.state.new_sessions import mention_session
from shared.state.session_model import Session
from shared.state.steering import NoteAdded
from shared.usecases import stop

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Routed:
    """What became of a message, for the HTTP reply: ``retry`` asks Slack to send it again."""

    detail: dict[str, str | bool]
    retry: bool = False


def route(start: Message, *, bot_user_id: str | None, retry_num: str | None) -> Routed:
    """A thread reply may answer the thread's open question; a mention or a DM otherwise starts a session.

    A message typed at the top level of a DM is a reply in the DM's current top-level conversation (answered at the
    top level, shared/slack/placement.py) when that conversation has an open question, a running session or a
    continuation queued to resume it; else it opens a conversation of its own."""
    message = _in_conversation(start)
    if message.in_thread and stop.is_stop(message.text):
        stopped = _stop(message, notes_in=start.thread_ts if start.in_thread else None)
        if stopped is not None:
            return stopped
    if message.in_thread:
        thread = stored_questions.thread_questions(message.channel, message.thread_ts)  # one read: questions, approvals
        asked = _answer_or_deny(message, thread, bot_user_id=bot_user_id, redelivered=retry_num is not None)
        if asked is not None:
            return asked
        # The thread's running session as the thread was read (one moment: no session asks and pauses between the
        # two reads unseen), or the continuation queued to resume its turn (an answer just given): it reads its
        # notes, never the thread. If none ran then, whatever opens in the thread later is asked after this message,
        # by a session started since: the thread is not read again.
        running = sessions.steered_session_in_thread(message.channel, message.thread_ts, as_of=thread.read_at)
        if running is not None:
            steered = _steer(message, running, bot_user_id=bot_user_id)
            if steered is not None:
                return steered
            # It stopped running since: it may have asked and paused (what it waits on is recorded before it
            # pauses). Read again, the message takes what opened meanwhile as it would have a moment later, instead
            # of being dropped.
            again = stored_questions.thread_questions(message.channel, message.thread_ts)
            if _opened_since(thread, again):
                asked = _answer_or_deny(message, again, bot_user_id=bot_user_id, redelivered=retry_num is not None)
                if asked is not None:
                    return asked
        kept = _keep_while_paused(message, bot_user_id=bot_user_id)
        if kept is not None:
            return kept
        if running is not None and not start.starts_session:
            return Routed({"ok": True, "ignored": "the thread's session ended"})
    if not start.starts_session:
        return Routed({"ok": True, "ignored": "thread message with no open question and no running session"})
    return start_session(start, retry_num=retry_num)


def _answer_or_deny(message: Message, thread: stored_questions.ThreadQuestions, *, bot_user_id: str | None,
                    redelivered: bool) -> Routed | None:  # fmt: skip
    """A thread reply to what the thread has open (``thread``, as read): a denial of the calls awaiting approval, or
    an answer to its open question; None if it is neither. ``redelivered``: Slack's retry of this event."""
    # A reply answers an open blocking question first (one turn may wait on a question and approvals at once), also
    # one that closed after the reply was posted: it was typed to that question and lost the race (or it answered it,
    # and this is Slack's redelivery); it is told so below, never taken for a denial of the calls.
    blocked = any(q.blocking for q in thread.open) or _raced_an_answer(message, thread)
    deniable = [] if blocked else thread.open_approval_ids
    decided = approvals.deny_by_reply(
        open_approval_ids=deniable,
        user=message.user,
        text=message.text,
        ts=message.ts,
        channel=message.channel,
    )
    if decided is not None:  # an operator's reply while calls await approval: a denial, its text the reason
        return Routed({"ok": True, "decision": decided.value})
    outcome = answers.answer_reply(
        thread=thread,
        channel=message.channel,
        thread_ts=message.thread_ts,
        user=message.user,
        text=message.text,
        ts=message.ts,
        bot_user_id=bot_user_id,
        redelivered=redelivered,
        keep=lambda asker: steering.add_note(asker, _note(message, bot_user_id), channel=message.channel, paused=True),
    )
    if outcome.result != AnswerOutcome.NO_QUESTION:
        return Routed({"ok": True, "answer": outcome.result.value})
    return None


def _raced_an_answer(message: Message, thread: stored_questions.ThreadQuestions) -> bool:
    """Whether the thread's last answer closed a blocking question after ``message`` was posted (Slack's ts): the
    reply was written while that question was open (a click on it won the race, or the reply itself answered it)."""
    last = thread.last_answer
    if not last or last.get("at") is None:
        return False
    try:
        posted = float(message.ts)
    except ValueError:
        return False
    if posted >= last["at"].timestamp():
        return False
    raced = stored_questions.get_question(str(last["question_id"]))
    return raced is not None and raced.blocking


def _opened_since(before: stored_questions.ThreadQuestions, after: stored_questions.ThreadQuestions) -> bool:
    """Whether a question or an approval opened in the thread between the two reads."""
    return bool({q.question_id for q in after.open} - {q.question_id for q in before.open}) or bool(
        set(after.open_approval_ids) - set(before.open_approval_ids)
    )


def _in_conversation(message: Message) -> Message:
    """``message`` as a reply in the conversation it continues: itself, unless it was typed at the top level of a DM
    whose current top-level conversation is an earlier one (then its thread is that conversation's)."""
    if not message.direct or message.in_thread:
        return message
    current = dm_conversations.current(message.channel)
    if current is None or current == message.ts:
        return message
    return replace(message, thread_ts=current)


def _stop(message: Message, *, notes_in: str | None) -> Routed | None:
    """The word "stop" typed in a thread whose session has not ended stops it (only its requester or an operator
    may); None if nothing in the thread is working, and the message is handled like any other. Private notes go to
    ``notes_in`` (None: the DM itself, where a top-level conversation is)."""
    active = sessions.active_sessions_in_thread(message.channel, message.thread_ts)
    if not active:  # its conversation answered while tasks it did not wait for still run: their trees stop
        tasks_of = sessions.active_sessions_in_thread(message.channel, message.thread_ts, delegated=True)
        active = [root for root in map(sessions.get_session, sorted({t.tree_root for t in tasks_of})) if root]
    if not active:
        return None
    # The message is claimed first, so that its other events (Slack's retry, its app_mention twin) stop nothing
    # again and, finding the session ended, start no session "stop"; a stop that fails part way gives the claim up
    # for Slack's retry.
    if not events.claim_message(message.channel, message.ts, kind="stop", session_id=""):
        return Routed({"ok": True, "duplicate": True})
    try:
        outcomes = [stop.stop_by_person(s.session_id, user=message.user, channel=message.channel,
                                        thread_ts=notes_in) for s in active]  # fmt: skip
    except Exception:
        events.release(ids.message_key(message.channel, message.ts))
        raise
    return Routed({"ok": True, "stop": outcomes[0].value})


UNREAD_FULL = ("I have not read the messages sent here while I work yet, and I cannot take more before I do: this one "
               "was not passed on. Send it again once I answer.")  # fmt: skip


def _steer(message: Message, running: Session, *, bot_user_id: str | None) -> Routed | None:
    """A message while the thread's session runs (or its continuation is queued to run): a note it reads at its
    next turn, not a second session. None if the session stopped running in between (the caller handles the
    message like any other).

    If that session's worker died (its lease expired), the note would wait for nobody: a delivery of its task is
    queued at once, and its takeover reads the note.
    """
    session_id = running.session_id
    with session_context(session_id):
        added = steering.add_note(session_id, _note(message, bot_user_id), channel=message.channel)
        dead = running.lease.until is not None and running.lease.until <= now()
        if added == NoteAdded.DUPLICATE:
            if dead:  # Slack's redelivery: the first delivery may have found Cloud Tasks down (same task name)
                tasks.enqueue_session(session_id, attempt=f"takeover-{message.ts}")
            return Routed({"ok": True, "duplicate": True})
        if added == NoteAdded.FULL:  # its unread messages are read in one step, which must fit: nothing changed
            log.warning("message not passed on: the session has too much unread", extra={"ts": message.ts})
            slack.ephemeral(message.channel, message.user, UNREAD_FULL, thread_ts=message.thread_ts)
            return Routed({"ok": True, "refused": "too much unread"})
        if added == NoteAdded.ADDED:
            log.info("message queued as a note for the running session", extra={"ts": message.ts})
            if dead:
                tasks.enqueue_session(session_id, attempt=f"takeover-{message.ts}")
                log.warning("the session's worker is gone; a takeover is queued", extra={"ts": message.ts})
            return Routed({"ok": True, "noted": session_id})
    return None  # it stopped running in between (it ended, or paused on something asked meanwhile)


def _mentions(message: Message, bot_user_id: str | None) -> bool:
    """Whether ``message`` mentions the app: either event of a mention may arrive first, the mention is in its text
    either way."""
    return message.starts_session or bool(bot_user_id and f"<@{bot_user_id}>" in message.text)


def _note(message: Message, bot_user_id: str | None) -> Note:
    """A person's thread message as a note for the thread's session, its speaker the signed event's user."""
    return Note(kind=NoteKind.STEER, text=capped(message.text, MAX_MESSAGE_CHARS), user=message.user, ts=message.ts,
                starts_session=_mentions(message, bot_user_id) or None)  # fmt: skip


_WAITED_FOR = {
    WaitKind.QUESTION: "an operator's answer",
    WaitKind.APPROVAL: "an operator's decision on a call I want to make",
    WaitKind.CHILD: "work I handed to a helper",
    WaitKind.PARENT_ANSWER: "an answer",
    WaitKind.MCP_INPUT: "an operator's input for a tool",
}


def waiting_note(session: Session) -> str:
    """What the sender of a message kept for a paused session is told: what it waits for, and that it will read the
    message when it carries on."""
    kinds = list(dict.fromkeys(w.kind for w in session.waiting if not w.released))
    what = " and ".join(_WAITED_FOR[kind] for kind in kinds) or "what I asked for"
    return f"I am waiting for {what} before I carry on. I have kept your message, and will read it then."


def _keep_while_paused(message: Message, *, bot_user_id: str | None) -> Routed | None:
    """A message in a thread whose session is paused (on a child, an approval, an MCP server's input, a question it
    does not answer): a note its resumed turn reads, as a message during a running session is, and its sender told
    so (once: the note claims the message, so Slack's retry and the app_mention twin find it acted on). None if the
    thread has no paused session, or the message mentions the app (a mention starts a session of its own, as
    before; its message twin is ignored)."""
    if _mentions(message, bot_user_id):
        return None
    paused = [s for s in sessions.active_sessions_in_thread(message.channel, message.thread_ts)
              if s.status == SessionStatus.PAUSED]  # fmt: skip
    if not paused:
        return None
    session = max(paused, key=lambda s: s.created_at)  # the thread's latest conversation, if an older one waits too
    with session_context(session.session_id):
        added = steering.add_note(session.session_id, _note(message, bot_user_id), channel=message.channel,
                                  paused=True)  # fmt: skip
        if added == NoteAdded.DUPLICATE:
            return Routed({"ok": True, "duplicate": True})
        if added == NoteAdded.FULL:
            slack.ephemeral(message.channel, message.user, UNREAD_FULL, thread_ts=message.thread_ts)
            return Routed({"ok": True, "refused": "too much unread"})
        if added == NoteAdded.ADDED:
            log.info("message kept as a note for the paused session", extra={"ts": message.ts})
            slack.ephemeral(message.channel, message.user, waiting_note(session), thread_ts=message.thread_ts)
            return Routed({"ok": True, "noted": session.session_id})
    # It resumed in between: the continuation queued to resume its turn takes the note; else (it ended) the message
    # is handled like any other.
    running = sessions.steered_session_in_thread(message.channel, message.thread_ts)
    return _steer(message, running, bot_user_id=bot_user_id) if running is not None else None


def _enqueue_if_queued(session_id: str) -> Routed:
    """A repeat of a message whose session exists: its task is created again if it never ran (same task name)."""
    existing = sessions.get_session(session_id)
    if existing is not None and existing.status == SessionStatus.QUEUED:
        try:
            tasks.enqueue_session(session_id)
        except tasks.QueueUnavailable as exc:
            log.warning("could not enqueue the session task again; asking Slack to retry", extra={"reason": str(exc)})
            return Routed({"error": "could not enqueue, retry"}, retry=True)
        except Exception:
            log.exception("could not enqueue the session task again; asking Slack to retry")
            return Routed({"error": "could not enqueue, retry"}, retry=True)
    return Routed({"ok": True, "duplicate": True})


def start_session(start: Message, *, retry_num: str | None) -> Routed:
    if start.direct and not start.in_thread:  # first, so that Slack's retry of a failed start records it too
        dm_conversations.started(start.channel, start.ts)
    session = mention_session(
        event_id=start.event_id,
        channel=start.channel,
        thread_ts=start.thread_ts,
        ts=start.ts,
        user=start.user,
        text=capped(start.text, TOO_LARGE_REQUEST_CHARS),  # beyond that the session only says it is too long
        at=now(),
        trace_id=current_trace(),
    )
    with session_context(session.session_id):
        started = events.start_session_for_event(event_id=start.event_id, event_type=start.event_type,
                                                 session=session, quota=quotas.in_force())  # fmt: skip
        if started.outcome == events.Start.DUPLICATE:
            log.info("duplicate event delivery", extra={"event_id": start.event_id, "retry_num": retry_num})
            return _enqueue_if_queued(session.session_id)
        if started.refusal is not None:
            return _refuse(start, started.refusal)
        # Never undone: if the task cannot be created now, Slack's retry (asked for below) or the rescue job
        # creates it; the session is recorded and stays queued until then.
        try:
            tasks.enqueue_session(session.session_id)
        except tasks.QueueUnavailable as exc:  # an outage, not a bug: no traceback
            log.warning("could not enqueue the session task; asking Slack to retry", extra={"reason": str(exc)})
            return Routed({"error": "could not enqueue, retry"}, retry=True)
        except Exception:
            log.exception("could not enqueue the session task; asking Slack to retry")
            return Routed({"error": "could not enqueue, retry"}, retry=True)
        log.info(
            "session queued", extra={"event_id": start.event_id, "channel": start.channel, "thread_ts": start.thread_ts}
        )
        return Routed({"ok": True, "session_id": session.session_id})


def _refuse(start: Message, refusal: quotas.Refusal) -> Routed:
    """A start over a rate limit: one short note only its sender sees, and nothing else."""
    when = f"after {refusal.resets:%H:%M} UTC" if refusal.resets else "when one of the running requests ends"
    text = f"I can't take this now: the limit of {refusal.limit} is reached. Try again {when}."
    slack.ephemeral(start.channel, start.user, text, thread_ts=start.thread_ts if start.in_thread else None)
    log.info("start refused by a rate limit", extra={"limit": refusal.limit, "user": start.user})
    return Routed({"ok": True, "limited": refusal.limit})

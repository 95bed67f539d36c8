"""Answers: a thread reply or a button press from an operator resumes the asking session, exactly once.

A thread's open questions are found by point reads (``threads/`` lists them); a button names its question, which
is trusted only once found open in the very channel and message pressed. The answer and what it causes (the
continuation session, or a note for a still-running asker) are written in one commit fenced by what it read (a
Firestore transaction when a racing write moved it: ``shared.state.fenced``), so racing answers (two operators, a
Slack retry, a button press with a text reply) make exactly one; the losers hear that the question was already
answered.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from shared import config
from shared.asks import questions, stopping
from shared.limits import MAX_MESSAGE_CHARS, capped
from shared.logs import session_context
from shared.queue import tasks
from shared.slack import blocks
from shared.slack import client as slack
from shared.slack.actions import ButtonPress
from shared.slack.surface import Reaction
from shared.state import batched, events, ids, sessions
from shared.state import questions as stored
from shared.state.firestore import now
from shared.state.models import Note, NoteKind, Question, QuestionStatus, SessionStatus
from shared.state.new_sessions import continuation_session
from shared.state.questions import AnswerRecord, Asker, Resolution
from shared.state.steering import NoteAdded

log = logging.getLogger(__name__)

RACE_WINDOW = timedelta(seconds=15)  # an operator reply this soon after an answer lost the race to it

UNWAITED = "Nothing waits on this question any more (the session that asked it has ended), so nothing changed."

REFUSAL = "Only the operators can answer this question; your message was not taken as an answer."
KEPT_REFUSAL = (
    "Only the operators can answer this question, so your message was not taken as an answer. I have kept it, and "
    "will read it when I carry on."
)

# How a thread reply that may not answer the open question is kept for the asking session to read instead: given
# the asker's id, a note added with the message claimed in the same commit (``shared.state.steering.add_note``);
# anything but ADDED or DUPLICATE: not kept (a delegated child's question, an asker that ended), refused as before.
Keep = Callable[[str], NoteAdded]

_NUMBER = re.compile(r"^\(?\s*(\d{1,3})\s*[.)]?$")


class AnswerOutcome(StrEnum):
    """What one answer attempt did (the HTTP reply carries it, and the tests read it)."""

    ANSWERED = "answered"  # it won: a continuation was created
    NOTED = "noted"  # it won: the still-running asker reads it as a note
    DUPLICATE = "duplicate"  # the same message or press again
    ALREADY_ANSWERED = "already_answered"  # another answer won
    NOT_ALLOWED = "not_allowed"  # not an operator
    NO_QUESTION = "no_question"  # nothing open to answer
    NOT_OPEN = "not_open"  # a button on a question no longer open


@dataclass(frozen=True)
class Outcome:
    result: AnswerOutcome
    question_id: str | None = None
    continuation_id: str | None = None


def match_option(reply: str, options: list[str]) -> str | None:
    """The option a reply picks: by number (``2``, ``(2)``, ``2.``), exact label, or a unique substring.

    None means no option matched (out of range, ambiguous, or free text); the reply then goes to the model as
    free text, marked unmatched.
    """
    text = reply.strip()
    if not options or not text:
        return None
    number = _NUMBER.match(text)
    if number:
        index = int(number.group(1))
        return options[index - 1] if 1 <= index <= len(options) else None
    folded = text.casefold()
    for option in options:
        if option.casefold() == folded:
            return option
    containing = [option for option in options if folded in option.casefold()]
    return containing[0] if len(containing) == 1 else None


def may_answer(user: str, question: Question) -> bool:
    """Operators may answer; the requester too if ALLOW_REQUESTER_ANSWERS says so, except the daily-budget
    question: lifting a budget is the operators' alone."""
    settings = config.settings()
    if user in settings.operator_user_ids:
        return True
    if ids.is_daily_budget_call(question.call_id):
        return False
    return settings.allow_requester_answers and user == question.requester


def decide(record: AnswerRecord, question: Question, asker: Asker) -> Resolution:
    """The answer goes to the asker as a note while it still runs (it reads a blocking answer as the response of
    the call it was about to pause on), or while it is paused on another question (a non-blocking answer);
    otherwise a continuation resumes the transcript, taking over a paused asker's pending notes."""
    still_running = asker.status == SessionStatus.RUNNING
    if still_running or (not question.blocking and asker.status == SessionStatus.PAUSED):
        note = Note(
            kind=NoteKind.ANSWER,
            text=record.answer,
            user=record.answered_by,
            ts=record.answer_ts,
            question_id=question.question_id,
            question=question.text,
            matched_option=record.matched_option,
        )
        return Resolution(note=note)
    continuation = continuation_session(
        question, answer_ts=record.answer_ts, user=record.answered_by, text=record.text, at=now(),
        trace_id=asker.trace_id,
    )  # fmt: skip
    if asker.status == SessionStatus.PAUSED:
        continuation.notes = list(asker.notes)
    return Resolution(continuation=continuation)


def answer(question: Question, *, user: str, text: str, answer_ts: str, label: str | None = None,
           pressed: bool = False, place: tuple[str, str | None] | None = None,
           redelivered: bool = False, keep: Keep | None = None) -> Outcome:  # fmt: skip
    """Record ``user``'s answer to ``question`` (a reply's text, or a button's label) and resume the session.
    ``place``: the channel and thread the answer came from (the question's own thread, or the thread its post
    starts in the operator channel); ``redelivered``: Slack's retry of the reply's event; ``keep``: how a reply in
    the question's own thread that may not answer it is kept for its session to read instead (``Keep``)."""
    place = place or (question.channel, question.thread_ts)
    if not may_answer(user, question):
        in_its_thread = place == (question.channel, question.thread_ts)
        kept = keep(question.session_id) if keep is not None and in_its_thread else NoteAdded.NOT_RUNNING
        if kept == NoteAdded.DUPLICATE:  # the note claimed the message: acted on already
            return Outcome(AnswerOutcome.DUPLICATE, question.question_id)
        # Claimed, so that a message acted on already (the request that started the session, a note, a refusal) is
        # not refused when Slack redelivers it or its app_mention twin arrives after the question opened.
        claimed = kept in (NoteAdded.ADDED, NoteAdded.FULL)  # FULL: claimed too, its note not kept
        if not claimed and not events.claim_message(place[0], answer_ts, kind="refused_answer", session_id=""):
            return Outcome(AnswerOutcome.DUPLICATE, question.question_id)
        if kept == NoteAdded.ADDED:
            _wake_if_dead(question.session_id, answer_ts)
        _refuse(question, user, place, kept=kept == NoteAdded.ADDED)
        return Outcome(AnswerOutcome.NOT_ALLOWED, question.question_id)
    text = capped(text, MAX_MESSAGE_CHARS)  # stored with the question and handed to the model
    matched = label if label is not None else match_option(text, question.options)
    record = AnswerRecord(
        answer=text, answered_by=user, matched_option=matched, answer_ts=answer_ts, text=text, pressed=pressed
    )
    result = stored.answer_question(question.question_id, record, lambda q, a: decide(record, q, a))
    return _settled(result, user=user, answer_ts=answer_ts, pressed=pressed, place=place, redelivered=redelivered)


def _settled(result: stored.Answered, *, user: str, answer_ts: str, pressed: bool,
             place: tuple[str, str | None] | None = None, redelivered: bool = False) -> Outcome:  # fmt: skip
    """What an answer transaction did, made known: the continuation's task queued, the question's post updated, a
    loser told (``place``: where the answer came from; the question's thread by default)."""
    found, continuation = result.question, result.continuation
    if found is None:
        return Outcome(AnswerOutcome.NO_QUESTION)
    channel, thread_ts = place or (found.channel, found.thread_ts)
    if result.repeated:
        # Already acted on: make sure what it caused is queued (a continuation whose task was never created).
        acted = events.message_record(found.channel, answer_ts) or {}
        _requeue_if_queued(str(acted.get("session_id") or ""))
        log.info("this message already answered a question", extra={"question_id": found.question_id})
        return Outcome(AnswerOutcome.DUPLICATE, found.question_id)
    if result.unwaited:  # its session was stopped or abandoned a moment ago: the question is being cancelled
        slack.ephemeral(channel, user, UNWAITED, thread_ts=thread_ts)
        # An end cut off before it closed the question (a Stop, an abandon killed or failed part way) would leave it
        # open, refusing every answer, until the sweep: the refusal closes what the ended (or ending) session still
        # has open itself (nothing, once its end has).
        stopping.close_unwaited(found.session_id)
        log.info("answer refused: nothing waits on the question any more", extra={"question_id": found.question_id})
        return Outcome(AnswerOutcome.NOT_OPEN, found.question_id)
    if result.still_waits:  # the paused turn resumes once the rest of its waiting record is resolved
        _acknowledge(found, answer_ts, pressed=pressed, channel=channel)
        log.info("answer recorded; the paused turn still waits on the rest of its record",
                 extra={"question_id": found.question_id})  # fmt: skip
        return Outcome(AnswerOutcome.NOTED, found.question_id, found.session_id)
    if result.noted:
        _wake_if_dead(found.session_id, answer_ts)
        _acknowledge(found, answer_ts, pressed=pressed, channel=channel)
        log.info("answer queued as a note for the running session", extra={"question_id": found.question_id})
        return Outcome(AnswerOutcome.NOTED, found.question_id, found.session_id)
    if continuation is None:
        if found.answer_ts == answer_ts:
            # The same message again (a Slack retry, or its app_mention twin): make sure the work is queued.
            if found.continuation_id and found.continuation_id != found.session_id:
                _requeue_if_queued(found.continuation_id)
            if redelivered:  # its first delivery may have answered 503 before its acknowledgement: shown again
                _acknowledge(found, answer_ts, pressed=False, channel=channel)
            return Outcome(AnswerOutcome.DUPLICATE, found.question_id, found.continuation_id)
        requeue_answered(found)  # the winner's delivery may have found Cloud Tasks down
        _tell_loser(channel, thread_ts or found.thread_ts, user, answer_ts, closed_note(found))
        return Outcome(AnswerOutcome.ALREADY_ANSWERED, found.question_id)
    with session_context(continuation.session_id, trace=continuation.trace_id):
        # A delegated child whose mixed turn this answer completed is queued again under its own id.
        again = f"answered-{found.question_id}" if continuation.session_id == found.session_id else ""
        # Its task names the record it resumes: its claim reads what the record came to in its own batch.
        tasks.enqueue_continuation(continuation, attempt=again)
    _acknowledge(found, answer_ts, pressed=pressed, channel=channel)
    log.info("question answered", extra={"question_id": found.question_id, "continuation": continuation.session_id})
    return Outcome(AnswerOutcome.ANSWERED, found.question_id, continuation.session_id)


def _refuse(question: Question, user: str, place: tuple[str, str | None] | None = None, *, kept: bool = False) -> None:
    """The person may not answer: told privately where they tried (``place``; the question's thread by default),
    and whether their message was kept for the session to read (``kept``)."""
    channel, thread_ts = place or (question.channel, question.thread_ts)
    slack.ephemeral(channel, user, KEPT_REFUSAL if kept else REFUSAL, thread_ts=thread_ts)
    log.info("answer refused: not an operator", extra={"question_id": question.question_id, "user": user})


def _requeue_if_queued(session_id: str) -> None:
    """Create the task of a session that never ran again (task names are fixed, so this is idempotent)."""
    session = sessions.get_session(session_id) if session_id else None
    if session is not None and session.status == SessionStatus.QUEUED:
        with session_context(session_id, trace=session.trace_id):
            tasks.enqueue_continuation(session)
            log.info("an answer already recorded: its continuation's task created again")


def _wake_if_dead(session_id: str, answer_ts: str) -> None:
    """An answer noted for an asker that still runs: if its worker is dead (its lease, renewed by a heartbeat while
    it lives, has expired), its takeover is queued at once to read it, as a thread message's is."""
    asker = sessions.get_session(session_id)
    if asker is not None and asker.status == SessionStatus.RUNNING and asker.lease.until is not None \
            and asker.lease.until <= now():  # fmt: skip
        tasks.enqueue_session(session_id, attempt=f"takeover-{answer_ts}")
        log.warning("the asker's worker is gone; a takeover is queued to read the answer")


def requeue_answered(question: Question | str) -> None:
    """Any path that finds ``question`` answered already (Slack's redelivery of the answer, a second press, a late
    reply): what its answer woke gets its task again if it is still queued, as a mention's duplicate does. The
    delivery that recorded the answer may have found Cloud Tasks down and answered 503.

    What it woke is the session its answer recorded (``continuation_id``): the continuation of a single question, a
    mixed turn's resuming continuation (named after the turn, not the question), or a delegated child queued again
    under its own id (its task named after the answer, as the winner named it)."""
    found = stored.get_question(question) if isinstance(question, str) else question
    if found is None:
        return
    woke = found.continuation_id or ids.continuation_id(found.question_id)
    if woke != found.session_id:
        _requeue_if_queued(woke)
        return
    asker = sessions.get_session(woke)  # a child whose turn this answer completed: queued again as itself
    if asker is not None and asker.status == SessionStatus.QUEUED and asker.tree.parent_id:
        with session_context(woke, trace=asker.trace_id):
            tasks.enqueue_session(woke, attempt=f"answered-{found.question_id}")


def _tell_loser(channel: str, thread_ts: str, user: str, ts: str, text: str) -> None:
    """One ephemeral note per losing message, however often Slack retries its event."""
    if events.claim_message(channel, ts, kind="lost_answer", session_id=""):
        slack.ephemeral(channel, user, text, thread_ts=thread_ts)


def _acknowledge(question: Question, answer_ts: str, *, pressed: bool, channel: str) -> None:
    """The question looks answered: its post shows the answer without buttons and loses 💬; the answering message
    (in ``channel``) gets ✅ (a button press has none). A post not recorded yet is updated by its asker once it is.
    The calls are independent of one another and made at the same time."""
    acks: list[Callable[[], object]] = []
    post_channel, post_ts = question.post_place()[0], question.post_ts
    if post_ts:
        acks.append(lambda: slack.unreact(post_channel, post_ts, Reaction.QUESTION))
        acks.append(lambda: slack.update(post_channel, post_ts, questions.answered_text(question)))
    if not pressed:
        acks.append(lambda: slack.react(channel, answer_ts, Reaction.ANSWERED))
    # Independent Slack calls, made at once (the click's handler answers Slack sooner), once the answer is recorded
    # and what it woke queued: a post left with its buttons is shown answered by the next press of one; a reply
    # whose acknowledgement may pass later fails its event, and Slack's redelivery shows it (``redelivered``).
    slack.best_effort("the answered question's post", lambda: batched.together(*acks), transient_raises=not pressed)


def closed_note(question: Question) -> str:
    if question.status == QuestionStatus.ANSWERED:
        return f"This question was already answered by <@{question.answered_by}>."
    return f"This question is {question.status.value}; there is nothing to answer now."


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """An app_mention in a question's thread is an answer too, without the mention itself."""
    if bot_user_id:
        text = text.replace(f"<@{bot_user_id}>", "")
    return text.strip()


def answer_reply(*, channel: str, thread_ts: str, user: str, text: str, ts: str, bot_user_id: str | None,
                 thread: stored.ThreadQuestions | None = None, redelivered: bool = False,
                 keep: Keep | None = None) -> Outcome:  # fmt: skip
    """A message in a thread: an answer if the thread has an open question (``thread``: already read).
    ``redelivered``: Slack's retry of its event (its first delivery may have failed before its acknowledgement, which
    is then made again; the reply's other event, its app_mention twin, is no retry and makes none); ``keep``: how a
    reply that may not answer is kept for the asker instead (``answer``)."""
    thread = thread or stored.thread_questions(channel, thread_ts)
    if thread.open:
        return answer(thread.open[0], user=user, text=strip_mention(text, bot_user_id), answer_ts=ts,
                      place=(channel, thread_ts), redelivered=redelivered, keep=keep)  # fmt: skip
    last = thread.last_answer
    if last and last.get("ts") == ts:  # the answer itself, again (Slack's redelivery, its twin): make sure it is queued
        answered = stored.get_question(str(last["question_id"]))
        if answered is None:
            return Outcome(AnswerOutcome.DUPLICATE, str(last["question_id"]))
        requeue_answered(answered)
        if redelivered:
            # Slack redelivers what got no 2xx: the first delivery may have found Cloud Tasks down and answered 503
            # before its acknowledgement. Shown again, as a second press does (each call is idempotent).
            _acknowledge(answered, ts, pressed=False, channel=channel)
        return Outcome(AnswerOutcome.DUPLICATE, answered.question_id)
    if last and user in config.settings().operator_user_ids and now() - last["at"] < RACE_WINDOW:
        # It lost a race it could not see: the question closed while this reply was on its way.
        requeue_answered(str(last["question_id"]))
        _tell_loser(channel, thread_ts, user, ts, f"This question was already answered by <@{last['by']}>.")
        return Outcome(AnswerOutcome.ALREADY_ANSWERED, str(last["question_id"]))
    return Outcome(AnswerOutcome.NO_QUESTION)


def answer_press(press: ButtonPress) -> Outcome:
    """A button press on a question post: valid only for an option of that question, on that very message.

    The press is checked against the question as the answer transaction reads it (no read of its own before): a
    press refused there wrote nothing, and is then told why."""
    parsed = blocks.parse_question_value(press.value)
    if parsed is None:
        return _not_this_question(press)
    index, answer_ts = parsed[1], ids.press_key(press.action_ts)
    made: list[AnswerRecord] = []

    def admitted(question: Question) -> AnswerRecord | None:
        made.clear()
        if not _pressed_here(press, question, index) or question.status != QuestionStatus.OPEN:
            return None
        if not may_answer(press.user, question):
            return None
        label = question.options[index - 1]
        made.append(AnswerRecord(answer=label, answered_by=press.user, matched_option=label, answer_ts=answer_ts,
                                 text=label, pressed=True))  # fmt: skip
        return made[0]

    result = stored.answer_question(parsed[0], admitted, lambda q, a: decide(made[0], q, a))
    question = result.question
    if question is None:
        return _not_this_question(press)
    if not result.refused:
        return _settled(result, user=press.user, answer_ts=answer_ts, pressed=True, place=question.post_place())
    if not _pressed_here(press, question, index):
        return _not_this_question(press)
    if question.status != QuestionStatus.OPEN:
        if question.status == QuestionStatus.ANSWERED:  # a second press: the first may have found Cloud Tasks down
            requeue_answered(question)
            # A press comes from a post that still shows its buttons: the answer's acknowledgement never ran (the
            # winning delivery answered 503 before it) or is under way. Shown again (each call is idempotent).
            _acknowledge(question, question.answer_ts or "", pressed=True, channel=press.channel)
        slack.ephemeral(press.channel, press.user, closed_note(question), thread_ts=question.post_place()[1])
        return Outcome(AnswerOutcome.NOT_OPEN, question.question_id)
    _refuse(question, press.user, question.post_place())
    return Outcome(AnswerOutcome.NOT_ALLOWED, question.question_id)


def _pressed_here(press: ButtonPress, question: Question, index: int) -> bool:
    """The press came from this question's own post (or, before its post is recorded, its thread), in its channel,
    for one of its options."""
    on_its_post = question.post_ts == press.message_ts or (
        question.post_ts is None and press.thread_ts == question.post_place()[1]
    )
    return question.post_place()[0] == press.channel and on_its_post and 1 <= index <= len(question.options)


def _not_this_question(press: ButtonPress) -> Outcome:
    log.warning("button value matches no question of this message", extra={"value": press.value[:100]})
    slack.ephemeral(press.channel, press.user, "That button does not belong to an open question here; nothing changed.")
    return Outcome(AnswerOutcome.NO_QUESTION)

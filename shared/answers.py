"""Answers: a thread reply or a button press from an operator resumes the paused session, exactly once.

The open question of a thread is found with one indexed query (or, for a button,
a point read of the question its value names). The answer and the continuation
session are written in one Firestore transaction, so racing answers (two
operators, a Slack retry, a button press with a text reply) make exactly one
continuation; the losers hear that the question was already answered.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta

from shared import config, slack, store, tasks
from shared.models import Question, QuestionStatus

log = logging.getLogger(__name__)

ANSWERED_REACTION = "white_check_mark"
QUESTION_REACTION = "speech_balloon"

RACE_WINDOW = timedelta(seconds=15)  # an operator reply this soon after an answer lost the race to it

_NUMBER = re.compile(r"^\(?\s*(\d{1,3})\s*[.)]?$")


def match_option(reply: str, options: list[str]) -> str | None:
    """The option a reply picks: by number (``2``, ``(2)``, ``2.``), exact label, or a unique substring.

    None means no option matched (out of range, ambiguous, or free text); the
    reply then goes to the model as free text, marked unmatched.
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
    settings = config.settings()
    if user in settings.operator_user_ids:
        return True
    return settings.allow_requester_answers and user == question.requester


@dataclass(frozen=True)
class Outcome:
    """What happened to one answer attempt, for the HTTP reply and the tests."""

    result: str  # "answered", "noted", "duplicate", "already_answered", "not_allowed", "no_question"
    question_id: str | None = None
    continuation_id: str | None = None


def strip_mention(text: str, bot_user_id: str | None) -> str:
    """An app_mention in a question's thread is an answer too, without the mention itself."""
    if bot_user_id:
        text = text.replace(f"<@{bot_user_id}>", "")
    return text.strip()


def answer(question: Question, *, user: str, text: str, answer_ts: str, label: str | None = None) -> Outcome:
    """Record ``user``'s answer to ``question`` (a reply's text, or a button's label) and resume the session."""
    if not may_answer(user, question):
        slack.ephemeral(
            question.channel,
            user,
            "Only the operators can answer this question; your message was not taken as an answer.",
            thread_ts=question.thread_ts,
        )
        log.info("answer refused: not an operator", extra={"question_id": question.question_id, "user": user})
        return Outcome("not_allowed", question.question_id)
    matched = label if label is not None else match_option(text, question.options)
    result = store.answer_question(
        question.question_id, answer=text, answered_by=user, matched_option=matched, trigger_ts=answer_ts, text=text
    )
    stored, continuation = result.question, result.continuation
    if stored is None:
        return Outcome("no_question")
    if result.noted:
        _acknowledge(stored, answer_ts)
        log.info("answer queued as a note for the running session", extra={"question_id": stored.question_id})
        return Outcome("noted", stored.question_id, stored.session_id)
    if continuation is None:
        if stored.answer_ts == answer_ts:
            # The same message again (a Slack retry, or its app_mention twin): make sure the work is queued.
            if stored.continuation_id and stored.continuation_id != stored.session_id:
                tasks.enqueue_session(stored.continuation_id)
            return Outcome("duplicate", stored.question_id, stored.continuation_id)
        _tell_loser(stored.channel, stored.thread_ts, user, answer_ts, closed_note(stored))
        return Outcome("already_answered", stored.question_id)
    tasks.enqueue_session(continuation.session_id)
    _acknowledge(stored, answer_ts)
    log.info("question answered", extra={"question_id": stored.question_id, "continuation": continuation.session_id})
    return Outcome("answered", stored.question_id, continuation.session_id)


def _tell_loser(channel: str, thread_ts: str, user: str, ts: str, text: str) -> None:
    """One ephemeral note per losing message, however often Slack retries its event."""
    if store.claim_message(channel, ts, kind="lost_answer", session_id=""):
        slack.ephemeral(channel, user, text, thread_ts=thread_ts)


def _acknowledge(question: Question, answer_ts: str) -> None:
    """💬 off the question, ✅ on the answer; neither is fatal if Slack refuses."""
    if question.post_ts:
        slack.unreact(question.channel, question.post_ts, QUESTION_REACTION)
    if not answer_ts.startswith("click-"):  # a button press has no message to react to
        slack.react(question.channel, answer_ts, ANSWERED_REACTION)


def closed_note(question: Question) -> str:
    if question.status == QuestionStatus.ANSWERED:
        return f"This question was already answered by <@{question.answered_by}>."
    return f"This question is {question.status.value}; there is nothing to answer now."


def answer_reply(*, channel: str, thread_ts: str, user: str, text: str, ts: str, bot_user_id: str | None) -> Outcome:
    """A message in a thread: an answer if the thread has an open question."""
    thread = store.thread_questions(channel, thread_ts)
    if thread.open:
        return answer(thread.open[0], user=user, text=strip_mention(text, bot_user_id), answer_ts=ts)
    last = thread.last_answer
    if last and last.get("ts") == ts:
        return Outcome("duplicate", str(last["question_id"]))  # the answer itself, again (its app_mention twin)
    if last and user in config.settings().operator_user_ids and store.now() - last["at"] < RACE_WINDOW:
        # It lost a race it could not see: the question closed while this reply was on its way.
        _tell_loser(channel, thread_ts, user, ts, f"This question was already answered by <@{last['by']}>.")
        return Outcome("already_answered", str(last["question_id"]))
    return Outcome("no_question")

"""Where operators are asked: an approval card or an operator question raised where operators cannot see it (a
person's direct message with the app, which is also where Slack's agent pane lives) goes to ``OPERATOR_CHANNEL``,
linked back to the conversation, and the person's conversation says an operator was asked. A decision or an answer
there (a button, or a reply under the post) resumes the session as one in the conversation's thread would. With no
operator channel, nobody can decide or answer it: the session is told at once and the person reads why, in plain
words.

The post in the operator channel is top level, outside any thread a takeover reads to find its posts again, so it
is made exactly once by ``post_once``: its attempt is recorded first (``shared.state.routed``, keyed by the
question or approval), and a retry after a crash looks for it in the channel's history by its post key before
posting again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import Block, SectionBlock
from slack_sdk.models.blocks.basic_components import MarkdownTextObject

from shared import config
from shared.slack import client as slack
from shared.slack.blocks import escaped
from shared.slack.surface import ThreadSurface
from shared.state import routed
from shared.state.models import Question

log = logging.getLogger(__name__)

NOBODY_FOR_MODEL = (
    "not run: nobody can approve this call here. This conversation is a direct message that operators cannot see, "
    "and no operator channel is configured (OPERATOR_CHANNEL). Tell the person, and suggest they ask in a channel "
    "the operators are in; do not try the call again here."
)
NOBODY_FOR_PERSON = (
    ":lock: This needs an operator's approval, but operators cannot see this conversation and no operator channel "
    "is set up, so nothing ran. Ask me in a channel the operators are in."
)

NOBODY_TO_ANSWER_FOR_MODEL = (
    "not asked: nobody can answer an operator question here. This conversation is a direct message that operators "
    "cannot see, and no operator channel is configured (OPERATOR_CHANNEL). Go on without the answer if you can, or "
    "tell the person what you need and suggest they ask in a channel the operators are in; do not ask again here."
)
NOBODY_TO_ANSWER_FOR_PERSON = (
    ":lock: I needed an operator to answer a question, but operators cannot see this conversation and no operator "
    "channel is set up, so nobody was asked. Ask me in a channel the operators are in."
)
HISTORY_PAGE = 200  # messages per conversations.history page while a crashed post is looked for
CLOCK_SKEW = timedelta(minutes=1)  # between this clock and Slack's: how far before an attempt its post is looked for


def hidden_from_operators(channel: str) -> bool:
    """A person's direct message with the app (Slack's agent pane lives there too): operators cannot see it."""
    return channel.startswith("D")


def operator_channel(channel: str) -> str | None:
    """Where a decision asked in ``channel`` goes instead of its thread; None: the thread itself."""
    if not hidden_from_operators(channel):
        return None
    return config.settings().operator_channel or None


def nobody_can_decide(channel: str) -> bool:
    return hidden_from_operators(channel) and not config.settings().operator_channel


def nobody_can_answer(channel: str, *, operators_only: bool = False) -> bool:
    """No operator can see a question asked in ``channel`` and none is asked elsewhere; only the person is there,
    who may answer only with ``ALLOW_REQUESTER_ANSWERS`` (never a question only operators may answer)."""
    return nobody_can_decide(channel) and (operators_only or not config.settings().allow_requester_answers)


def refuse_question(surface: ThreadSurface, *, key: str) -> str:
    """Nobody can answer a question here: the person reads why (once, ``key``); returns what the model is told."""
    surface.post(NOBODY_TO_ANSWER_FOR_PERSON, key=key)
    return NOBODY_TO_ANSWER_FOR_MODEL


def link(channel: str, ts: str) -> str:
    """A link to the conversation (Slack's permalink; its mrkdwn mention when Slack gives none)."""
    try:
        permalink = slack.client().chat_getPermalink(channel=channel, message_ts=ts).get("permalink")
    except SlackApiError as exc:
        log.warning("no permalink for the conversation", extra={"error": exc.response.get("error")})
        permalink = None
    return f"<{permalink}|the conversation>" if permalink else f"the conversation (thread {ts} in <#{channel}>)"


def post_once(record_id: str, channel: str, text: str, *, key: str, blocks: Sequence[Block],
              listed: routed.Listed) -> str:  # fmt: skip
    """Post ``record_id``'s message top level in ``channel`` exactly once, across crashes; returns its ts. The
    record is then listed on the thread the post starts, so replies under it reach it."""
    attempt = routed.begin(record_id, channel)
    ts = attempt.ts or (find_posted(channel, key, attempt.started_at) if attempt.again else None)
    if ts is None:
        ts = slack.post(channel, None, text, key=key, blocks=blocks)
    routed.finish(record_id, channel=channel, ts=ts, listed=listed)
    return ts


def find_posted(channel: str, key: str, since: datetime) -> str | None:
    """The ts of the app's top-level post in ``channel`` carrying ``key``, made after ``since`` (an attempt that
    died before it recorded its post), or None. Read only after a crash: newest first, back to ``since``."""
    oldest, cursor = f"{(since - CLOCK_SKEW).timestamp():.6f}", None
    while True:
        response = slack.client().conversations_history(channel=channel, oldest=oldest, limit=HISTORY_PAGE,
                                                        cursor=cursor, include_all_metadata=True)  # fmt: skip
        for message in response.get("messages") or []:
            metadata = message.get("metadata") or {}
            if metadata.get("event_type") == slack.POST_KEY_EVENT and (
                (metadata.get("event_payload") or {}).get("key") == key
            ):
                log.warning("a routed post made before a crash was found; not posting it again", extra={"key": key})
                return str(message["ts"])
        cursor = (response.get("response_metadata") or {}).get("next_cursor")
        if not cursor or not response.get("has_more"):
            return None


def ask_operators(question: Question, surface: ThreadSurface, *, key: str, text: str, blocks: Sequence[Block]) -> str:
    """Post ``question`` (its ``text`` and ``blocks`` as the thread would show them) in the operator channel with a
    link to the conversation, and tell the conversation that the operators were asked; returns the post's ts."""
    elsewhere = question.post_channel
    assert elsewhere is not None
    asked_in = link(question.channel, question.thread_ts)
    who = f" by <@{question.requester}>" if question.requester else ""
    intro = f":speech_balloon: Asked in {asked_in}{who}; answer here (a reply under this message, or a button)."
    ts = post_once(question.question_id, elsewhere, f"{intro}\n{text}", key=key,
                   blocks=[SectionBlock(text=MarkdownTextObject(text=intro)), *blocks],
                   listed=routed.Listed.QUESTION)  # fmt: skip
    surface.post(f":speech_balloon: I asked the operators in <#{elsewhere}>:\n>{quoted(question.text)}\n"
                 "I will carry on here once one answers.", key=f"{key}:asked")  # fmt: skip
    return ts


def quoted(text: str) -> str:
    """The question as quoted text in the conversation: every line quoted, no markup formed from it."""
    return escaped(text).replace("\n", "\n>")

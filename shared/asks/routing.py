"""Where operators are asked: a decision raised where operators cannot see it (a person's direct message with the
app, which is also where Slack's agent pane lives) goes to ``OPERATOR_CHANNEL``, linked back to the conversation,
and the person's conversation says an operator was asked. With no operator channel, nobody can decide it: the
session is told at once and the person reads why, in plain words.
"""

from __future__ import annotations

import logging

from slack_sdk.errors import SlackApiError

from shared import config
from shared.slack import client as slack

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


def link(channel: str, ts: str) -> str:
    """A link to the conversation (Slack's permalink; its mrkdwn mention when Slack gives none)."""
    try:
        permalink = slack.client().chat_getPermalink(channel=channel, message_ts=ts).get("permalink")
    except SlackApiError as exc:
        log.warning("no permalink for the conversation", extra={"error": exc.response.get("error")})
        permalink = None
    return f"<{permalink}|the conversation>" if permalink else f"the conversation (thread {ts} in <#{channel}>)"

"""Who lives in the local workspace and where they talk: the people the browser page lets you be.

Slack ids are what the product sees; names and avatar colours are what a person sees. Which of them are
operators is the product's setting (``OPERATOR_USER_IDS``), which the stack hands the fake Slack, so the page
can say so without knowing the product.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Person:
    id: str
    name: str  # the handle: what @-mentions and autocomplete show
    real_name: str
    color: str  # the avatar's background


PEOPLE = (
    Person("U0HUMAN", "riley", "Riley Requester", "#2bac76"),
    Person("U0OPERATOR", "olivia", "Olivia Operator", "#e8912d"),
    Person("U0GUEST", "sam", "Sam Guest", "#4a6ee0"),
)
BOT_NAME, BOT_REAL_NAME, BOT_COLOR = "agent", "Agent (the bot)", "#611f69"
CHANNELS = (("C0LOCAL", "general"), ("C0OPERATORS", "operators"))
OPERATORS_CHANNEL = "C0OPERATORS"
# What each channel is for, shown under its name (Slack's channel purpose).
PURPOSES = {
    "C0LOCAL": "Mention @agent with a request; it answers in the thread. Try “demo” for a tour.",
    OPERATORS_CHANNEL: (
        "For the operators: the bot posts here what they must see outside a thread (OPERATOR_CHANNEL), such as "
        "work that ended without reporting back and decisions asked where operators cannot see them. It stays "
        "empty until one happens."
    ),
}


def dm_channel(user_id: str) -> str:
    """The DM between a person and the bot: a ``D`` id, which Slack's events call ``channel_type: im``."""
    return "D" + user_id[1:]


def person(user_id: str) -> Person | None:
    return next((p for p in PEOPLE if p.id == user_id), None)


def directory(bot_user_id: str, operators: tuple[str, ...]) -> Json:
    """People and channels for the page: each person with their DM and whether the product calls them an operator."""
    people = [{**asdict(p), "operator": p.id in operators, "dm": dm_channel(p.id)} for p in PEOPLE]
    bot = {"id": bot_user_id, "name": BOT_NAME, "real_name": BOT_REAL_NAME, "color": BOT_COLOR, "bot": True}
    channels = [{"id": c, "name": n, "purpose": PURPOSES.get(c, "")} for c, n in CHANNELS]
    return {"people": people, "bot": bot, "channels": channels}

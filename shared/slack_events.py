"""What a verified Slack Events API payload asks of us, decided without side effects.

``classify`` turns a parsed body into one of a few small outcomes; the ingress
carries them out. Keeping it pure is what lets every loop-prevention and
bad-input rule be tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Message subtypes a person produces; everything else (edits, deletes, joins, bot posts) is ignored.
_HUMAN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})


class BadEvent(ValueError):
    """The payload lacks a field it needs; the message is the short reason sent back with the 400."""


@dataclass(frozen=True)
class Challenge:
    challenge: str


@dataclass(frozen=True)
class Ignore:
    reason: str


@dataclass(frozen=True)
class StartSession:
    """A mention or a direct message: someone asked the bot for something."""

    event_id: str
    event_type: str
    channel: str
    thread_ts: str
    ts: str
    user: str
    text: str


Outcome = Challenge | Ignore | StartSession


def _text_field(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{where}.{key} is missing")
    return value


def _own_or_bot(body: dict[str, Any], event: dict[str, Any]) -> str | None:
    """Why this event came from a bot, or from this app itself; None for a person."""
    if event.get("bot_id") or event.get("bot_profile") or event.get("subtype") == "bot_message":
        return "bot message"
    app_id = body.get("api_app_id")
    if app_id and event.get("app_id") == app_id:
        return "own message"
    bot_users = {a.get("user_id") for a in body.get("authorizations") or [] if isinstance(a, dict) and a.get("is_bot")}
    if event.get("user") in bot_users:
        return "own message"
    return None


def classify(body: Any) -> Outcome:
    """Decide what a signature-verified payload asks for; raises BadEvent for a malformed one."""
    if not isinstance(body, dict):
        raise BadEvent("body is not a JSON object")
    kind = body.get("type")
    if kind == "url_verification":
        return Challenge(_text_field(body, "challenge", "body"))
    if kind != "event_callback":
        return Ignore(f"envelope type {kind!r}")

    event_id = _text_field(body, "event_id", "body")
    event = body.get("event")
    if not isinstance(event, dict):
        raise BadEvent("body.event is missing")
    event_type = _text_field(event, "type", "event")
    if event_type not in {"app_mention", "message"}:
        return Ignore(f"event type {event_type!r}")

    if event_type == "message" and event.get("subtype") not in _HUMAN_SUBTYPES:
        return Ignore(f"message subtype {event.get('subtype')!r}")
    why = _own_or_bot(body, event)
    if why:
        return Ignore(why)
    if event_type == "message" and event.get("channel_type") != "im":
        # Channel messages reach us only for threads; routing them is the answers path's job.
        return Ignore("channel message without a mention")

    ts = _text_field(event, "ts", "event")
    thread_ts = event.get("thread_ts") or ts
    if not isinstance(thread_ts, str):
        raise BadEvent("event.thread_ts is not a string")
    text = event.get("text", "")
    if not isinstance(text, str):
        raise BadEvent("event.text is not a string")
    return StartSession(
        event_id=event_id,
        event_type=event_type,
        channel=_text_field(event, "channel", "event"),
        thread_ts=thread_ts,
        ts=ts,
        user=_text_field(event, "user", "event"),
        text=text,
    )

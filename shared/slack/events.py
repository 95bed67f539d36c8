"""What a verified Slack Events API payload asks of us, decided without side effects.

``classify`` turns a parsed body into one of a few small outcomes; the ingress
carries them out. Keeping it pure is what lets every loop-prevention and
bad-input rule be tested without a network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.errors import Refused

# Message subtypes a person produces; everything else (edits, deletes, joins, bot posts) is ignored.
_HUMAN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})


class BadEvent(Refused):
    """The payload lacks a field it needs; the message is the short reason sent back with the 400."""


@dataclass(frozen=True)
class Challenge:
    challenge: str


@dataclass(frozen=True)
class Ignore:
    reason: str


@dataclass(frozen=True)
class Message:
    """A person's message that concerns the bot: a mention, a direct message, or a reply in a thread."""

    event_id: str
    event_type: str
    channel: str
    thread_ts: str
    ts: str
    user: str
    text: str
    direct: bool  # a DM: every message is for the bot

    @property
    def mention(self) -> bool:
        return self.event_type == "app_mention"

    @property
    def in_thread(self) -> bool:
        return self.thread_ts != self.ts

    @property
    def starts_session(self) -> bool:
        return self.mention or self.direct


@dataclass(frozen=True)
class AssistantThread:
    """Someone opened the app (``started``), or looks at something else with it open (``started`` False).

    Two surfaces send these. Slack's agent messaging experience (``agent_view``, the manifest's): the app's
    Messages tab was opened (``app_home_opened`` with ``tab: "messages"``) or the person moved on
    (``app_context_changed``); ``thread_ts`` is None, the DM itself is the conversation. The older assistant pane
    (``assistant_view``): ``assistant_thread_started`` / ``assistant_thread_context_changed``, about one thread
    of the DM. ``channel`` is the DM ("" when Slack leaves it out of a context change); ``context_channel`` the
    channel they view, when Slack says."""

    event_id: str
    started: bool
    channel: str
    thread_ts: str | None
    user: str
    context_channel: str | None


ASSISTANT_EVENTS = {"assistant_thread_started": True, "assistant_thread_context_changed": False}
AGENT_EVENTS = {"app_home_opened", "app_context_changed"}
CHANNEL_ENTITY = "slack#/types/channel_id"  # an app_context_changed entity naming a channel

Outcome = Challenge | Ignore | Message | AssistantThread


def _text_field(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{where}.{key} is missing")
    return value


def _not_new(event: dict[str, Any]) -> str | None:
    """Why this event is no person's new message (an edit, a delete, a join, a bot's post); None if it is one."""
    subtype = event.get("subtype")
    if subtype is not None and not isinstance(subtype, str):
        raise BadEvent("event.subtype is not a string")
    if event["type"] == "message" and subtype not in _HUMAN_SUBTYPES:
        return f"message subtype {subtype!r}"
    if event.get("edited"):  # Slack sends a mention again when its message is edited: the request is not new
        return "edited message"
    return None


def _id_field(obj: dict[str, Any], key: str, where: str) -> str:
    """A Slack id or ts, which names Firestore documents: no "/" (a path separator there)."""
    value = _text_field(obj, key, where)
    if "/" in value:
        raise BadEvent(f"{where}.{key} is not a Slack id")
    return value


def _own_or_bot(body: dict[str, Any], event: dict[str, Any]) -> str | None:
    """Why this event came from a bot, or from this app itself; None for a person."""
    if event.get("bot_id") or event.get("bot_profile") or event.get("subtype") == "bot_message":
        return "bot message"
    app_id = body.get("api_app_id")
    if app_id and event.get("app_id") == app_id:
        return "own message"
    authorizations = body.get("authorizations") or []
    if not isinstance(authorizations, list):
        raise BadEvent("body.authorizations is not a list")
    bot_users = {a.get("user_id") for a in authorizations if isinstance(a, dict) and a.get("is_bot")}
    user = event.get("user")
    if isinstance(user, str) and user in bot_users:
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

    event_id = _id_field(body, "event_id", "body")
    event = body.get("event")
    if not isinstance(event, dict):
        raise BadEvent("body.event is missing")
    event_type = _text_field(event, "type", "event")
    if event_type in ASSISTANT_EVENTS:
        return _assistant_thread(event_id, event, started=ASSISTANT_EVENTS[event_type])
    if event_type in AGENT_EVENTS:
        return _agent_view(event_id, event)
    if event_type not in {"app_mention", "message"}:
        return Ignore(f"event type {event_type!r}")

    why = _not_new(event) or _own_or_bot(body, event)
    if why:
        return Ignore(why)
    ts = _id_field(event, "ts", "event")
    thread_ts = event.get("thread_ts") or ts
    if not isinstance(thread_ts, str):
        raise BadEvent("event.thread_ts is not a string")
    if "/" in thread_ts:
        raise BadEvent("event.thread_ts is not a Slack id")
    direct = event_type == "message" and event.get("channel_type") == "im"
    if event_type == "message" and not direct and thread_ts == ts:
        # A top-level channel message without a mention is not for the bot (its mention twin is).
        return Ignore("channel message without a mention")
    text = event.get("text", "")
    if not isinstance(text, str):
        raise BadEvent("event.text is not a string")
    return Message(
        event_id=event_id,
        event_type=event_type,
        channel=_id_field(event, "channel", "event"),
        thread_ts=thread_ts,
        ts=ts,
        user=_id_field(event, "user", "event"),  # names the person's limits and spend documents
        text=text,
        direct=direct,
    )


def _assistant_thread(event_id: str, event: dict[str, Any], *, started: bool) -> AssistantThread:
    thread = event.get("assistant_thread")
    if not isinstance(thread, dict):
        raise BadEvent("event.assistant_thread is missing")
    context, user = thread.get("context"), thread.get("user_id")
    viewed = context.get("channel_id") if isinstance(context, dict) else None
    return AssistantThread(
        event_id=event_id,
        started=started,
        channel=_id_field(thread, "channel_id", "event.assistant_thread"),
        thread_ts=_id_field(thread, "thread_ts", "event.assistant_thread"),
        user=user if isinstance(user, str) else "",  # only logged: a payload without it is still served
        context_channel=viewed if isinstance(viewed, str) and viewed else None,
    )


def _agent_view(event_id: str, event: dict[str, Any]) -> AssistantThread | Ignore:
    """``app_home_opened`` on the Messages tab, or ``app_context_changed`` (its first ``channel_id`` entity, the
    most relevant, is what the person views)."""
    user = event.get("user")
    user = user if isinstance(user, str) else ""
    if event["type"] == "app_home_opened":
        if event.get("tab") != "messages":
            return Ignore(f"app home tab {event.get('tab')!r}")
        return AssistantThread(event_id=event_id, started=True, channel=_id_field(event, "channel", "event"),
                               thread_ts=None, user=user, context_channel=None)  # fmt: skip
    context = event.get("context")
    entities = context.get("entities") if isinstance(context, dict) else None
    entities = entities if isinstance(entities, list) else []
    channels = [e.get("value") for e in entities if isinstance(e, dict) and e.get("type") == CHANNEL_ENTITY]
    viewed = next((c for c in channels if isinstance(c, str)), None)
    dm = event.get("channel")
    return AssistantThread(event_id=event_id, started=False, channel=_id_field(event, "channel", "event") if dm else "",
                           thread_ts=None, user=user, context_channel=viewed or None)  # fmt: skip

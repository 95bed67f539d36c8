"""Slack interactivity payloads, parsed into typed values without side effects.

Slack sends interactivity form-encoded, with the JSON in a ``payload`` field, signed like events. A button press
(``block_actions``) becomes a ``ButtonPress``; its value is only a claim until a use case checks it against what
the product stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from shared.errors import Refused
from shared.limits import UnusableJson, loads_untrusted

RECORD_ID = re.compile(r"[A-Za-z0-9_-]{0,1500}")  # a Firestore document id as shared.state.ids makes them; or none


class BadPayload(Refused):
    """The interactivity request is malformed; the message is the short reason sent back with the 400."""


@dataclass(frozen=True)
class ButtonPress:
    """One press of a button on a message the bot posted."""

    user: str
    channel: str
    message_ts: str  # the message the button is on
    thread_ts: str | None  # the thread that message is in, if any
    action_id: str
    value: str
    action_ts: str  # unique per press: a retry of the same press carries the same one
    trigger_id: str = ""  # lets the app open a modal for this press, within 3 s (views.open)


def parse_payload(body: bytes) -> dict[str, Any]:
    """The ``payload`` JSON object of a form-encoded interactivity request."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise BadPayload("body is not form-encoded") from None
    raw = form.get("payload")
    if not raw:
        raise BadPayload("body has no payload field")
    try:
        payload = loads_untrusted(raw[0])
    except UnusableJson as exc:
        raise BadPayload(f"payload is not usable JSON: {exc}") from None
    except ValueError:
        raise BadPayload("payload is not JSON") from None
    if not isinstance(payload, dict):
        raise BadPayload("payload is not a JSON object")
    return payload


def button_press(payload: dict[str, Any]) -> ButtonPress:
    """The press a ``block_actions`` payload carries."""
    try:
        action = payload["actions"][0]
        container = payload.get("container") or {}
        return _checked(
            ButtonPress(
                user=str(payload["user"]["id"]),
                channel=str(container.get("channel_id") or payload["channel"]["id"]),
                message_ts=str(container["message_ts"]),
                thread_ts=_thread_of(payload, container),
                action_id=str(action.get("action_id") or ""),
                value=str(action.get("value") or ""),
                action_ts=str(action.get("action_ts") or payload.get("trigger_id") or ""),
                trigger_id=str(payload.get("trigger_id") or ""),
            )
        )
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise BadPayload(f"malformed block_actions payload: {exc}") from None


def submitted_view(payload: dict[str, Any]) -> dict[str, Any]:
    """The ``view`` of a ``view_submission``, when it and what is read of it have their shapes (objects where Slack
    sends objects); else a BadPayload, which a list or a string where an object belongs would otherwise be (a 500)."""
    view, user = payload.get("view"), payload.get("user")
    state = view.get("state") if isinstance(view, dict) else None
    values = state.get("values") if isinstance(state, dict) else None
    shapes = {"view": view, "user": user or {}, "view.state": state or {}, "view.state.values": values or {}}
    for name, value in shapes.items():
        if not isinstance(value, dict):
            raise BadPayload(f"malformed view_submission payload: {name} is not an object")
    return dict(view) if isinstance(view, dict) else {}


def _checked(press: ButtonPress) -> ButtonPress:
    """``press``, if its value names a record the way every button the product posts does (``<id>`` or
    ``<id>|<detail>``, the id of ``shared.state.ids``'s characters); a value such as ``a/b|1`` or ``..`` would be
    read as a Firestore path (a 500 from the client, or another collection's document), so it is a BadPayload."""
    record = press.value.rpartition("|")[0] if "|" in press.value else press.value  # as blocks.parse_*_value read it
    if not RECORD_ID.fullmatch(record) or (len(record) > 3 and record.startswith("__") and record.endswith("__")):
        raise BadPayload("the button's value names no record")
    slack_ids = {"user": press.user, "channel": press.channel, "message_ts": press.message_ts,
                 "thread_ts": press.thread_ts or "", "action_ts": press.action_ts}  # fmt: skip
    for name, value in slack_ids.items():  # each names a document (a feedback's, a press's, a thread's)
        if "/" in value:
            raise BadPayload(f"the press's {name} is not a Slack id")
    return press


def _thread_of(payload: dict[str, Any], container: dict[str, Any]) -> str | None:
    message = payload.get("message") if isinstance(payload.get("message"), dict) else {}
    thread = container.get("thread_ts") or (message or {}).get("thread_ts")
    return str(thread) if thread else None

"""Slack Events API bodies, shaped and signed as Slack sends them, for the benchmarks and the budget test."""

from __future__ import annotations

import json
import time
from typing import Any

from infra import stack as local
from infra.signing import signed_headers


def envelope(event: dict[str, Any], *, event_id: str) -> dict[str, Any]:
    """An ``event_callback`` around ``event``, with the authorizations Slack adds."""
    return {
        "token": "unused-verification-token",
        "team_id": local.TEAM_ID,
        "api_app_id": local.APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "authorizations": [
            {"enterprise_id": None, "team_id": local.TEAM_ID, "user_id": local.BOT_USER_ID, "is_bot": True}
        ],
        "is_ext_shared_channel": False,
    }


def app_mention(*, channel: str, ts: str, text: str, user: str = "U0HUMAN") -> dict[str, Any]:
    return {
        "type": "app_mention",
        "user": user,
        "text": f"<@{local.BOT_USER_ID}> {text}",
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    }


def thread_reply(*, channel: str, ts: str, thread_ts: str, text: str, user: str) -> dict[str, Any]:
    return {
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "thread_ts": thread_ts,
        "channel": channel,
        "event_ts": ts,
        "channel_type": "channel",
    }


def signed(event: dict[str, Any], *, event_id: str, secret: str = local.SIGNING_SECRET) -> tuple[bytes, dict[str, str]]:
    """The raw body and the headers (names in lower case, as ``functions/main.py`` hands them on)."""
    body = json.dumps(envelope(event, event_id=event_id)).encode()
    headers = {name.lower(): value for name, value in signed_headers(secret, body).items()}
    return body, headers

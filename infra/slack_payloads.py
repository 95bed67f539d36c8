"""Slack Events API payloads shaped as Slack sends them, for the tests, the benchmarks and the tools.

The signature comes from ``infra.signing`` (slack-sdk's own code), so a body built here verifies exactly
as a real one would.
"""

from __future__ import annotations

import json
import time
from typing import Any

from infra import stack as local
from infra.signing import signed_headers


def event_callback(event: dict[str, Any], *, event_id: str) -> dict[str, Any]:
    """An Events API envelope around ``event``, shaped like Slack's."""
    return {
        "token": "verification-token-unused",
        "team_id": local.TEAM_ID,
        "api_app_id": local.APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": local.TEAM_ID,
                "user_id": local.BOT_USER_ID,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }


def mention(
    *, channel: str, ts: str, user: str = "U0HUMAN", text: str | None = None, thread_ts: str | None = None
) -> dict[str, Any]:
    text = f"hello from {channel}" if text is None else text
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": f"<@{local.BOT_USER_ID}> {text}",
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message(
    *, channel: str, ts: str, user: str = "U0HUMAN", text: str = "hello", channel_type: str = "channel", **extra: Any
) -> dict[str, Any]:
    return {
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "channel_type": channel_type,
        **extra,
    }


def signed(event: dict[str, Any], *, event_id: str, secret: str = local.SIGNING_SECRET) -> tuple[bytes, dict[str, str]]:
    """The raw body and the headers of an event delivery (names in lower case, as ``functions/main.py`` passes them)."""
    body = json.dumps(event_callback(event, event_id=event_id)).encode()
    headers = {name.lower(): value for name, value in signed_headers(secret, body).items()}
    return body, headers

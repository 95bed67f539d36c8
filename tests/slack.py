"""Building and sending Slack requests the way Slack does, for tests."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import requests

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


@dataclass
class SlackSender:
    """Posts signed requests to the local functions."""

    events_url: str
    secret: str

    @classmethod
    def for_stack(cls, stack: local.Stack) -> SlackSender:
        return cls(events_url=stack.function_url("slack_events"), secret=local.SIGNING_SECRET)

    def post_raw(self, body: bytes, headers: dict[str, str] | None = None, url: str | None = None) -> requests.Response:
        return requests.post(url or self.events_url, data=body, headers=headers or {}, timeout=10)

    def post_signed(
        self,
        body: bytes,
        *,
        timestamp: int | None = None,
        extra_headers: dict[str, str] | None = None,
        url: str | None = None,
    ) -> requests.Response:
        headers = signed_headers(self.secret, body, timestamp=timestamp)
        headers.update(extra_headers or {})
        return self.post_raw(body, headers, url)

    def send_event(
        self, event: dict[str, Any], *, event_id: str, extra_headers: dict[str, str] | None = None
    ) -> requests.Response:
        body = json.dumps(event_callback(event, event_id=event_id)).encode()
        return self.post_signed(body, extra_headers=extra_headers)

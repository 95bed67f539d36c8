"""Building and sending Slack requests the way Slack does, for tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import requests

from infra import stack as local
from infra.signing import signed_headers
from infra.slack_payloads import event_callback, mention, message

__all__ = ["SlackSender", "event_callback", "mention", "message"]


@dataclass
class SlackSender:
    """Posts signed requests to the local functions."""

    events_url: str
    secret: str

    @classmethod
    def for_stack(cls, stack: local.Stack) -> SlackSender:
        return cls(events_url=stack.function_url("slack_events"), secret=local.SIGNING_SECRET)

    def post_raw(self, body: bytes, headers: dict[str, str] | None = None, url: str | None = None) -> requests.Response:
        # As long as the fake Slack waits for a delivery (FAKESLACK_DELIVERY_SECONDS, tests/conftest.py): a cold
        # function on a busy machine answers its first request late (the ingress's speed is `make bench`'s).
        return requests.post(url or self.events_url, data=body, headers=headers or {}, timeout=20)

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

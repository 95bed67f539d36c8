"""Signing requests exactly as Slack does, for the fake Slack, the tests and the benchmarks.

The signature itself comes from slack-sdk's ``SignatureVerifier.generate_signature``:
the same code that verifies it, so the two can never drift apart.
"""

from __future__ import annotations

import time

from slack_sdk.signature import SignatureVerifier


def signed_headers(
    secret: str, body: bytes | str, *, timestamp: int | None = None, content_type: str = "application/json"
) -> dict[str, str]:
    """Headers Slack sends with a request whose raw body is ``body``."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    assert signature is not None
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature}

"""Slack's request signature: slack-sdk's ``SignatureVerifier`` with its 5-minute window, time injected."""

from __future__ import annotations

from collections.abc import Mapping

from slack_sdk.signature import Clock, SignatureVerifier

from shared import config


def verify(body: bytes, headers: Mapping[str, str], clock: Clock | None = None) -> bool:
    """True only for a request Slack signed with our secret in the last five minutes; False for anything malformed."""
    verifier = SignatureVerifier(config.settings().slack_signing_secret, clock=clock or Clock())
    try:
        return verifier.is_valid_request(body, headers)
    except (ValueError, UnicodeDecodeError):
        # A non-numeric timestamp or a body that is not UTF-8 cannot carry a valid signature.
        return False

"""What every handler shares: the reply type and the one body-size check."""

from __future__ import annotations

from typing import Any

Reply = tuple[dict[str, Any], int]

SLACK_MAX_BODY_BYTES = 1024 * 1024  # Slack events and interactivity payloads
INTERNAL_MAX_BODY_BYTES = 64 * 1024  # Cloud Tasks and Cloud Scheduler bodies


def too_large(body: bytes, limit: int) -> Reply | None:
    """The 413 for a body over ``limit`` (entry points read at most ``limit + 1`` bytes), else None."""
    if len(body) > limit:
        return {"error": "body too large"}, 413
    return None

"""Deterministic ids: every retry of the same cause lands on the same document and task name.

Slack retries an event with the same ``event_id``; a continuation is caused by one
question. Deriving ids from the cause is what makes every write idempotent.
"""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def _clean(text: str) -> str:
    """Keep only characters valid in both Firestore document ids and Cloud Tasks task ids."""
    return _SAFE.sub("_", text)[:200]


def session_for_event(event_id: str) -> str:
    return f"ev-{_clean(event_id)}"


def task_id(session_id: str, attempt: str = "") -> str:
    """A task id for a session; a short hash prefix spreads names across Cloud Tasks' key space."""
    base = f"{session_id}-{attempt}" if attempt else session_id
    prefix = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{prefix}-{_clean(base)}"

"""Structured logs: one JSON object per line, the shape Cloud Logging parses.

Cloud Logging turns a JSON line on stdout into a structured entry, reading
``severity`` and ``message``; every other key lands in ``jsonPayload``. The
session id is bound per request with ``session_context`` so that every line a
session writes carries it, without threading it through every call.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

_session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)

# Python level names that differ from Cloud Logging's LogSeverity names.
_SEVERITY = {"WARNING": "WARNING", "CRITICAL": "CRITICAL", "FATAL": "CRITICAL"}

# Attributes every LogRecord has; anything else was passed with ``extra=`` and is logged as a field.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line with ``severity`` and the bound session id."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": _SEVERITY.get(record.levelname, record.levelname),
            "message": record.getMessage(),
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "logger": record.name,
        }
        session_id = getattr(record, "session_id", None) or _session_id.get()
        if session_id:
            entry["session_id"] = session_id
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


_configured = False


def setup(level: str = "INFO") -> None:
    """Send the root logger to stdout as JSON lines; safe to call on every request."""
    global _configured  # noqa: PLW0603 - once per process
    if _configured:
        return
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The HTTP client libraries are chatty at INFO and say nothing we need per request.
    for noisy in ("urllib3", "httpx", "httpx2", "httpcore", "google_genai.models", "slack_sdk.web.base_client"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    _configured = True


@contextmanager
def session_context(session_id: str | None) -> Iterator[None]:
    """Every log line written inside carries ``session_id``."""
    token = _session_id.set(session_id)
    try:
        yield
    finally:
        _session_id.reset(token)


def current_session_id() -> str | None:
    return _session_id.get()

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
import re
import sys
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from shared import config

_session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("session_id", default=None)
_trace: contextvars.ContextVar[str | None] = contextvars.ContextVar("trace", default=None)

TRACE_FIELD = "logging.googleapis.com/trace"  # Cloud Logging groups a request's lines by it
_W3C = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")
_CLOUD = re.compile(r"^([0-9a-fA-F]{32})(?:/|$)")

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
        trace = _trace.get()
        if trace:
            project = config.settings().google_cloud_project
            entry[TRACE_FIELD] = f"projects/{project}/traces/{trace}" if project else trace
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
def session_context(session_id: str | None, *, trace: str | None = None) -> Iterator[None]:
    """Every log line written inside carries ``session_id`` (and ``trace``, when given, in Cloud Logging's trace
    field; tasks created inside carry it on, so a session's lines are one filter in the Logs Explorer)."""
    token = _session_id.set(session_id)
    trace_token = _trace.set(trace or _trace.get())
    try:
        yield
    finally:
        _trace.reset(trace_token)
        _session_id.reset(token)


def current_trace() -> str | None:
    return _trace.get()


def trace_from(headers: Mapping[str, str]) -> str | None:
    """The trace id of an incoming request: W3C ``traceparent`` (Cloud Tasks passes on what we set), else Google's
    ``x-cloud-trace-context``."""
    parent = _W3C.match(headers.get("traceparent", "").strip().lower())
    if parent:
        return parent.group(1)
    cloud = _CLOUD.match(headers.get("x-cloud-trace-context", "").strip())
    return cloud.group(1).lower() if cloud else None


def new_trace() -> str:
    return uuid.uuid4().hex


def traceparent(trace: str) -> str:
    """A W3C ``traceparent`` header for an outgoing request in ``trace`` (a fresh span id)."""
    return f"00-{trace}-{uuid.uuid4().hex[:16]}-01"

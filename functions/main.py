"""Cloud Functions entry points. Each one parses the request, calls the shared library, returns.

Imports of heavy modules happen inside the handlers so that each function's
cold start pays only for what it uses (the Slack ingress never loads google-genai).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import flask
import functions_framework

# Locally and in the deploy zip, ``shared`` sits beside or above this file.
_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (_HERE, os.path.dirname(_HERE)):
    if os.path.isdir(os.path.join(_path, "shared")) and _path not in sys.path:
        sys.path.insert(0, _path)

from shared import config, logs  # noqa: E402 - needs the path set up above

Response = tuple[dict[str, Any], int]


def _headers(request: flask.Request) -> dict[str, str]:
    """Request headers with lower-case names, the form the shared library looks them up in."""
    return {name.lower(): value for name, value in request.headers.items()}


def _body(request: flask.Request, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of the body, so an oversized one is detected without reading it all."""
    return request.stream.read(limit + 1)


def _serve(request: flask.Request, handler: Callable[[bytes, dict[str, str]], Response], limit: int) -> Response:
    """What every entry point does first: JSON logs, POST only, a bounded body, lower-cased headers."""
    logs.setup(config.settings().log_level)
    if request.method != "POST":
        return {"error": "POST only"}, 405
    if (request.content_length or 0) > limit:
        return {"error": "body too large"}, 413
    return handler(_body(request, limit), _headers(request))


@functions_framework.http
def slack_events(request: flask.Request) -> Response:
    """Slack Events API: signed JSON events and the url_verification handshake."""
    from shared import ingress

    return _serve(request, ingress.handle_events, ingress.MAX_BODY_BYTES)


@functions_framework.http
def slack_interactivity(request: flask.Request) -> Response:
    """Slack interactivity: signed, form-encoded button presses on question posts."""
    from shared import ingress, interactivity

    return _serve(request, interactivity.handle, ingress.MAX_BODY_BYTES)


@functions_framework.http
def agent_session(request: flask.Request) -> Response:
    """Cloud Tasks target: runs one agent session named in the JSON body."""
    from shared import worker

    return _serve(request, worker.handle_task, worker.MAX_TASK_BODY_BYTES)


@functions_framework.http
def sweep(request: flask.Request) -> Response:
    """Cloud Scheduler target: the daily sweep of stale questions and silent sessions."""
    from shared import sweep as daily

    return _serve(request, daily.handle, daily.MAX_BODY_BYTES)

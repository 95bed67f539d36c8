"""Cloud Functions entry points. Each one parses the request, calls the shared library, returns.

Imports of heavy modules happen inside the handlers so that each function's
cold start pays only for what it uses (the Slack ingress never loads google-genai).
"""

from __future__ import annotations

import logging
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


def _serve(
    request: flask.Request, entry_point: str, handler: Callable[[bytes, dict[str, str]], Response], limit: int
) -> Response:
    """What every entry point does first: JSON logs, its secrets checked, POST only, a bounded body, lower-cased
    headers. A configuration error, found here or by the handler, is one ERROR line and a 500 naming the variable."""
    try:
        logs.setup(config.settings().log_level)
    except config.ConfigError as exc:
        logs.setup()
        return _misconfigured(exc)
    try:
        _check_secrets(entry_point)
        config.check_rules(entry_point)
        if request.method != "POST":
            return {"error": "POST only"}, 405
        if request.headers.get("Origin") is not None:
            # A browser names the page that sent it; Slack, Cloud Tasks and Cloud Scheduler send none. Locally,
            # where the token is off, a page on any site could otherwise post to these loopback ports: run the
            # sweep with "now" years ahead (every open question abandoned), or a delivery of any session.
            return {"error": "a browser's request: these entry points answer Slack and Google Cloud only"}, 403
        # At most limit + 1 bytes are read, whatever Content-Length says; the handler answers the 413, after the
        # OIDC token on the internal entry points (a stranger learns nothing of their size limit).
        return handler(_body(request, limit), _headers(request))
    except config.ConfigError as exc:
        return _misconfigured(exc)


def _check_secrets(entry_point: str) -> None:
    """ConfigError while a secret ``entry_point`` uses holds Terraform's placeholder or a malformed value, before
    anything is read or stored: every request is refused until it is set. An unset one is named at its first use
    (the url_verification handshake needs no bot token)."""
    for var in config.secrets_for(entry_point):
        try:
            var.read(config.settings())
        except config.NotSet:
            continue


def _misconfigured(exc: config.ConfigError) -> Response:
    """The 500 for a configuration error: the variable and its fix in the log, never a value in the reply."""
    variable = exc.variable or "configuration"
    logging.getLogger("functions.main").error(
        "refusing the request: %s is not set up", variable, extra={"variable": variable, "fix": str(exc)}
    )
    return {"error": f"server misconfigured: {variable} is not set up"}, 500


@functions_framework.http
def slack_events(request: flask.Request) -> Response:
    """Slack Events API: signed JSON events and the url_verification handshake."""
    from shared.handlers import slack_events as handler

    return _serve(request, config.SLACK_EVENTS, handler.handle, handler.MAX_BODY_BYTES)


@functions_framework.http
def slack_interactivity(request: flask.Request) -> Response:
    """Slack interactivity: signed, form-encoded button presses on question posts."""
    from shared.handlers import slack_interactivity as handler

    return _serve(request, config.SLACK_INTERACTIVITY, handler.handle, handler.MAX_BODY_BYTES)


@functions_framework.http
def agent_session(request: flask.Request) -> Response:
    """Cloud Tasks target: runs one agent session named in the JSON body."""
    from shared.handlers import agent_session as handler

    return _serve(request, config.AGENT_SESSION, handler.handle, handler.MAX_TASK_BODY_BYTES)


@functions_framework.http
def sweep(request: flask.Request) -> Response:
    """Cloud Scheduler target: the daily sweep of stale questions and silent sessions."""
    from shared.handlers import sweep as handler

    return _serve(request, config.SWEEP, handler.handle, handler.MAX_BODY_BYTES)

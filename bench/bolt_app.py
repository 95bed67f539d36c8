"""The peer the ingress is measured against: a Slack Bolt for Python app doing the same work.

Served by functions-framework exactly as ``functions/main.py`` is
(``--source bench/bolt_app.py --target slack_events``), through Bolt's Google
Cloud Functions adapter, with ``process_before_response=True`` (the listener runs
before the 200, as it must on Cloud Functions). Its listener does what our
ingress does for a mention, through the same calls: one Firestore commit that
``create()``s ``events/{event_id}`` (with the message key and the session
document), then one Cloud Task on the same emulator queue. So the two differ only
in the framework around that work. Request verification stays on with the same
signing secret; token verification is off, and the client points at the fake
Slack, so nothing leaves the machine (Bolt calls ``auth.test`` there once, on its
first request, and caches it).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import flask
import functions_framework

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from shared import config, logs  # noqa: E402 - needs the path set up above

log = logging.getLogger("bench.bolt_app")

_handler: Any = None


def on_mention(body: dict[str, Any], event: dict[str, Any]) -> None:
    """De-duplicate and enqueue, as ``shared.usecases.intake.start_session`` does for a mention."""
    from shared.queue import tasks
    from shared.state import events, firestore
    from shared.state.new_sessions import mention_session

    event_id = str(body["event_id"])
    ts = str(event["ts"])
    session = mention_session(
        event_id=event_id,
        channel=str(event["channel"]),
        thread_ts=str(event.get("thread_ts") or ts),
        ts=ts,
        user=str(event["user"]),
        text=str(event.get("text", "")),
        at=firestore.now(),
    )
    if not events.start_session_for_event(event_id=event_id, event_type="app_mention", session=session):
        log.info("duplicate event delivery", extra={"event_id": event_id})
        return
    tasks.enqueue_session(session.session_id)
    log.info("session queued", extra={"event_id": event_id, "channel": session.origin.channel})


def handler() -> Any:
    """The Bolt app and its adapter, built on first use like the product's lazy clients."""
    global _handler  # noqa: PLW0603 - lazy global
    if _handler is None:
        from slack_bolt import App
        from slack_bolt.adapter.google_cloud_functions import SlackRequestHandler
        from slack_sdk import WebClient

        settings = config.settings()
        app = App(
            signing_secret=settings.slack_signing_secret,
            client=WebClient(token=settings.slack_bot_token, base_url=settings.slack_api_base_url),
            token_verification_enabled=False,
            request_verification_enabled=True,
            process_before_response=True,
        )
        app.event("app_mention")(on_mention)
        _handler = SlackRequestHandler(app)
    return _handler


@functions_framework.http
def slack_events(request: flask.Request) -> Any:
    logs.setup(config.settings().log_level)
    return handler().handle(request)

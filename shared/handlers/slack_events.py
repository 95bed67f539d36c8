"""The ``slack_events`` entry point: verify, classify, route, answer well inside Slack's 3 seconds.

It waits only on Firestore and one task creation (or, when someone opens the app's assistant pane, two quick
Slack calls), and never imports google-genai: the model runs later, in ``agent_session``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from shared.handlers.common import SLACK_MAX_BODY_BYTES, Reply, slack_entry_point
from shared.limits import UnusableJson, loads_untrusted
from shared.logs import new_trace, session_context, trace_from
from shared.slack.events import AssistantThread, BadEvent, Challenge, Ignore, classify
from shared.usecases import assistant_pane, intake

log = logging.getLogger(__name__)

MAX_BODY_BYTES = SLACK_MAX_BODY_BYTES


@slack_entry_point
def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
    """Answer one Events API request, signed and at most MAX_BODY_BYTES (``slack_entry_point`` checked both)."""
    try:
        payload = loads_untrusted(body)
    except UnusableJson as exc:
        return {"error": f"body is not usable JSON: {exc}"}, 400
    except (ValueError, UnicodeDecodeError):
        return {"error": "body is not JSON"}, 400
    try:
        outcome = classify(payload)
    except BadEvent as exc:
        return {"error": str(exc)}, 400
    if isinstance(outcome, Challenge):
        return {"challenge": outcome.challenge}, 200
    if isinstance(outcome, Ignore):
        log.debug("ignored event", extra={"reason": outcome.reason})
        return {"ok": True, "ignored": outcome.reason}, 200
    if isinstance(outcome, AssistantThread):
        return (assistant_pane.opened if outcome.started else assistant_pane.context_changed)(outcome), 200
    # One trace per session, from here on: the request's own (Cloud Run's header), or a new one.
    with session_context(None, trace=trace_from(headers) or new_trace()):
        routed = intake.route(outcome, bot_user_id=_bot_user_id(payload), retry_num=headers.get("x-slack-retry-num"))
    return routed.detail, 503 if routed.retry else 200


def _bot_user_id(body: dict[str, Any]) -> str | None:
    for authorization in body.get("authorizations") or []:
        if isinstance(authorization, dict) and authorization.get("is_bot") and authorization.get("user_id"):
            return str(authorization["user_id"])
    return None

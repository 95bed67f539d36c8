"""Slack interactivity: button presses on a question post (``block_actions``).

Slack sends these form-encoded, with the JSON in a ``payload`` field, signed like
events. A button's value names its question and option (``<question_id>|<n>``);
the value is only trusted after the question it names is found open in the very
channel and message the click came from, so a forged or stale value changes nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from shared import answers, slack, store
from shared.ingress import MAX_BODY_BYTES, Reply, verify
from shared.models import QuestionStatus

log = logging.getLogger(__name__)


def parse_payload(body: bytes) -> dict[str, Any]:
    """The ``payload`` JSON object of a form-encoded interactivity request; ValueError if malformed."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise ValueError("body is not form-encoded") from None
    raw = form.get("payload")
    if not raw:
        raise ValueError("body has no payload field")
    try:
        payload = json.loads(raw[0])
    except ValueError:
        raise ValueError("payload is not JSON") from None
    if not isinstance(payload, dict):
        raise ValueError("payload is not a JSON object")
    return payload


def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
    if len(body) > MAX_BODY_BYTES:
        return {"error": "body too large"}, 413
    if not verify(body, headers):
        return {"error": "invalid signature"}, 401
    try:
        payload = parse_payload(body)
    except ValueError as exc:
        return {"error": str(exc)}, 400
    if payload.get("type") != "block_actions":
        return {"ok": True, "ignored": f"payload type {payload.get('type')!r}"}, 200
    try:
        click = _click(payload)
    except (KeyError, TypeError, ValueError) as exc:
        return {"error": f"malformed block_actions payload: {exc}"}, 400
    return _answer_click(**click)


def _click(payload: dict[str, Any]) -> dict[str, str]:
    action = payload["actions"][0]
    container = payload.get("container") or {}
    return {
        "user": str(payload["user"]["id"]),
        "channel": str(container.get("channel_id") or payload["channel"]["id"]),
        "message_ts": str(container["message_ts"]),
        "value": str(action.get("value") or ""),
        "action_ts": str(action.get("action_ts") or payload.get("trigger_id") or ""),
    }


def _answer_click(*, user: str, channel: str, message_ts: str, value: str, action_ts: str) -> Reply:
    question_id, _, number = value.rpartition("|")
    question = store.get_question(question_id) if question_id else None
    valid = (
        question is not None
        and question.channel == channel
        and question.post_ts == message_ts
        and number.isdigit()
        and 1 <= int(number) <= len(question.options)
    )
    if question is None or not valid:
        log.warning("button value matches no question of this message", extra={"value": value[:100], "user": user})
        slack.ephemeral(channel, user, "That button does not belong to an open question here; nothing changed.")
        return {"ok": True, "answer": "no_question"}, 200
    if question.status != QuestionStatus.OPEN:
        slack.ephemeral(channel, user, answers.closed_note(question), thread_ts=question.thread_ts)
        return {"ok": True, "answer": "not_open"}, 200
    label = question.options[int(number) - 1]
    outcome = answers.answer(question, user=user, text=label, answer_ts=f"click-{action_ts}", label=label)
    if outcome.result == "answered" and question.post_ts:
        done = f":white_check_mark: <@{user}> chose: *{label}*"
        slack.update(channel, question.post_ts, f"{done}\n_{question.text}_")
    return {"ok": True, "answer": outcome.result}, 200

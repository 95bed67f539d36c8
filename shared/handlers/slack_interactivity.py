"""The ``slack_interactivity`` entry point: signed, form-encoded button presses (``block_actions``) and the Edit
modal's submissions (``view_submission``, answered in the response body as Slack expects)."""

from __future__ import annotations

from collections.abc import Mapping

from shared.asks import answers, approvals, edits, feedback
from shared.handlers.common import SLACK_MAX_BODY_BYTES, Reply, slack_entry_point
from shared.logs import new_trace, session_context, trace_from
from shared.slack import approval_card, blocks, edit_modal, placement
from shared.slack.actions import BadPayload, button_press, parse_payload, submitted_view
from shared.usecases import stop

MAX_BODY_BYTES = SLACK_MAX_BODY_BYTES


@slack_entry_point
def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
    """Answer one interactivity request, signed and at most MAX_BODY_BYTES (``slack_entry_point`` checked both)."""
    try:
        payload = parse_payload(body)
        if payload.get("type") == "view_submission" and submitted_view(payload).get("callback_id") == (
            edit_modal.CALLBACK_ID
        ):
            with session_context(None, trace=trace_from(headers) or new_trace()):
                return edits.submit(payload), 200
        if payload.get("type") != "block_actions":
            return {"ok": True, "ignored": f"payload type {payload.get('type')!r}"}, 200
        press = button_press(payload)
    except BadPayload as exc:
        return {"error": str(exc)}, 400
    if press.action_id == blocks.LINK_ACTION:  # Slack opened the link; it answers nothing
        return {"ok": True, "ignored": "link button"}, 200
    with session_context(None, trace=trace_from(headers) or new_trace()):
        if press.action_id == blocks.FEEDBACK_ACTION:
            return {"ok": True, "feedback": feedback.press(press).value}, 200
        if press.action_id == blocks.STOP_ACTION:
            # A top-level DM conversation's progress message is in the DM itself: the notes go there too.
            thread = press.thread_ts or (None if placement.is_dm(press.channel) else press.message_ts)
            stopped = stop.stop_by_person(press.value, user=press.user, channel=press.channel, thread_ts=thread)
            return {"ok": True, "stop": stopped.value}, 200
        if press.action_id == approval_card.EDIT_ACTION:
            return {"ok": True, "edit": edits.open_editor(press)}, 200
        if press.action_id in {blocks.APPROVE_ACTION, blocks.DENY_ACTION}:
            return {"ok": True, "decision": approvals.decide_press(press).value}, 200
        outcome = answers.answer_press(press)
    return {"ok": True, "answer": outcome.result.value}, 200

"""Edit before approve: the Edit button opens a modal of the call's arguments; a valid submission is the editor's
approval of the edited call.

The press is checked as an Approve press is (its card, its digest, who may decide, still pending) before
``views.open`` uses its ``trigger_id`` (valid for 3 s). The submission is checked against the tool's JSON Schema
(stored on the approval when it was asked): a bad value is answered with ``response_action: errors`` and changes
nothing, and so is an edit that moves the call into the other case of its ``TOOL_TIERS`` rule's ``when`` (the
approvers written on the approval were chosen for its case, and the other case may need others, or deny it). A
valid one is one decision transaction, as Approve's: the edited arguments, their digest and the editor are written
with the approval (``approved_by`` starts again with the editor: earlier approvals were of another call), its
decision named by the view's id; a double submission decides once (its second finds the approval decided by this
view, or the edit it makes already running with its editor's approval); an Approve or Deny that won first makes the
edit lose, and the editor is told in the modal. The modal's ``private_metadata`` is sealed (``ticket``): a
submission counts only from the person it was opened for, for that approval and for the call as it stood (its
digest and revision); anything else is refused in the modal and changes nothing. The continuation runs the edited
call through the ledger, once.
Submitted unchanged, the modal is an approval of the call as it stands, not an edit (the model hears of none).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from shared import config
from shared.asks import approvals, approvers
from shared.slack import call_view, edit_modal
from shared.slack import client as slack
from shared.slack.actions import ButtonPress
from shared.slack.blocks import parse_approval_value
from shared.state import approvals as stored
from shared.state.approvals import Decision
from shared.state.models import Approval, ApprovalStatus

log = logging.getLogger(__name__)

Reply = dict[str, Any]
TOO_LONG = ("This call does not fit Slack's editor (an argument over 3,000 characters, or more arguments than a "
            "modal holds), so it cannot be edited from Slack; approve or deny it as it stands.")  # fmt: skip
CROSSES_RULE = ("With these values TOOL_TIERS treats the call otherwise (other approvers, or another tier); an edit "
                "cannot change that. Nothing changed.")  # fmt: skip


def ticket(approval: Approval, opener: str) -> str:
    """The ``private_metadata`` of an Edit modal opened by ``opener`` on ``approval``'s call as it stands: sealed
    with a key only this app holds, so a submission counts only for that approval, that very call (its digest and
    revision: an edit since, even one back to the same arguments, makes it stale) and that person."""
    runs = approval.edited_digest or approval.digest
    return edit_modal.seal(edit_modal.Ticket(approval.approval_id, runs, approval.revision, opener), _key())


def _key() -> str:
    return config.settings().slack_signing_secret


def open_editor(press: ButtonPress) -> str:
    """An Edit press: the modal of this call's arguments, or a private note why not. Returns what happened."""
    parsed = parse_approval_value(press.value)
    approval = stored.get_approval(parsed[0]) if parsed else None
    on_its_card = approval is not None and approval.card_place()[0] == press.channel
    if parsed is None or approval is None or not on_its_card or approval.card_ts != press.message_ts:
        slack.ephemeral(press.channel, press.user, "That button does not belong to an approval here; nothing changed.")
        return "no_approval"
    if not approvers.may_decide(press.user, approval):
        slack.ephemeral(press.channel, press.user, approvers.refusal(approval), thread_ts=approval.card_place()[1])
        return "not_allowed"
    if approval.status != ApprovalStatus.PENDING:
        slack.ephemeral(press.channel, press.user, approvals.closed_note(approval), thread_ts=approval.card_place()[1])
        return "already_decided"
    runs = approval.edited_digest or approval.digest
    if parsed[1] != runs or approval.schema is None:
        slack.ephemeral(press.channel, press.user, "That button does not match the call it was shown for.",
                        thread_ts=approval.card_place()[1])  # fmt: skip
        return "tampered"
    current = approvals.effective_args(approval) or {}
    if not edit_modal.fits(json.loads(approval.schema), current):  # a card shown before its Edit was withheld
        slack.ephemeral(press.channel, press.user, TOO_LONG, thread_ts=approval.card_place()[1])
        return "too_long"
    modal = edit_modal.view(ticket(approval, press.user), approval.tool, schema=json.loads(approval.schema),
                            args=current, order=approval.shown_order)  # fmt: skip
    try:
        slack.client().views_open(trigger_id=press.trigger_id, view=modal)
    except SlackApiError as exc:  # an expired trigger (the press took over 3 s to reach us): say so
        log.warning("edit modal not opened", extra={"error": exc.response.get("error")})
        slack.ephemeral(press.channel, press.user, "Slack did not let me open the editor in time; press Edit again.",
                        thread_ts=approval.card_place()[1])  # fmt: skip
        return "not_opened"
    return "opened"


def _errors(approval: Approval | None, message: str, *, field: str | None = None) -> Reply:
    """A modal answer that keeps it open with ``message`` under ``field`` when the modal has that argument's
    field, else under its first field (the first of the card's order the schema names: an argument it does not
    name has no field of its own)."""
    properties = (json.loads(approval.schema).get("properties") or {}) if approval and approval.schema else {}
    if field is not None and field in properties:
        return {"response_action": "errors", "errors": {f"arg:{field}": message[:150]}}
    order = [*(approval.shown_order if approval is not None else []), *properties]
    first = next((f"arg:{n}" for n in order if n in properties), None)
    return {"response_action": "errors", "errors": {first or "arg:": message[:150]}}


CHANGED = "The call changed since this editor opened (another edit); nothing changed."
NOT_YOURS = "This editor was opened by someone else; press Edit on the card yourself. Nothing changed."


def _stands(approval: Approval, user: str, args: dict[str, Any]) -> bool:
    """The call is now ``user``'s own edit with these very arguments, counted as their approval and still pending:
    a submission of that edit again (a double click) stands as it is, and closes its modal."""
    edited = approval.edited_args is not None and approval.edited_args == approvals.canonical(args)
    return edited and user in approval.approved_by and approval.status == ApprovalStatus.PENDING


def submit(payload: dict[str, Any]) -> Reply:
    """A submitted Edit modal: errors to show in it, or ``{}`` (Slack closes it) once the edit is the decision."""
    view = payload.get("view") or {}
    user = str((payload.get("user") or {}).get("id") or "")
    meta = edit_modal.unseal(str(view.get("private_metadata") or ""), _key())
    approval = stored.get_approval(meta.approval_id) if meta else None
    if meta is None or approval is None or approval.schema is None or not user:  # under a field the view has
        first = next(iter((view.get("state") or {}).get("values") or {}), "arg:")
        return {"response_action": "errors", "errors": {first: "This editor does not belong to an approval; "
                                                               "nothing changed."}}  # fmt: skip
    if not approvers.may_decide(user, approval):
        return _errors(approval, approvers.refusal(approval))
    if user != meta.opener:  # Slack sends a modal's submission as its opener's: this one was not opened for them
        log.warning("edit modal submitted by another person", extra={"approval_id": approval.approval_id})
        return _errors(approval, NOT_YOURS)
    view_id = str(view.get("id") or payload.get("trigger_id") or "")
    if approval.status != ApprovalStatus.PENDING:
        # Decided already: its continuation may never have been queued (the deciding submission met a Cloud Tasks
        # outage, or its instance died before queueing it); this submission queues it again (the same task name).
        approvals.requeue_decided(approval)
        if approval.decision_ts == f"edit-{view_id}":  # this very edit decided it: it stands, the modal closes
            return {}
        return _errors(approval, approvals.closed_note(approval))
    values = ((view.get("state") or {}).get("values")) or {}
    args, errors = edit_modal.parse(json.loads(approval.schema), values)
    if meta.digest != (approval.edited_digest or approval.digest) or meta.revision != approval.revision:
        if not errors and _stands(approval, user, args):  # this very edit, submitted again after it counted
            return {}
        return _errors(approval, CHANGED)
    if errors:
        return {"response_action": "errors", "errors": errors}
    crossing = approvers.crossed(approval, args)
    if crossing is not None:  # shown under the field that crossed (a rule's argument the schema names)
        return _errors(approval, CROSSES_RULE, field=crossing)
    edited = approvals.canonical(args)
    shown = call_view.shown_call(approval.tool, args, approval.shown_order)
    if not call_view.presentable(shown):
        return _errors(approval, f"The edited call is too long to show ({len(shown)} characters); shorten it.")
    unchanged = edited == (approval.edited_args or approval.args)  # an approval of the call as it is: no edit
    edit = None if unchanged else (edited, approvals.digest(approval.tool, edited))
    decision = Decision(ApprovalStatus.APPROVED, user, None, f"edit-{view_id}", edit, shown=meta.digest,
                        revision=meta.revision)  # fmt: skip
    outcome = approvals.decide_edit(approval, decision)
    if outcome in {approvals.DecisionOutcome.EDITED_SINCE, approvals.DecisionOutcome.ALREADY_DECIDED}:
        return _decided_meanwhile(approval, outcome, user, args if edit is not None else None)
    if outcome == approvals.DecisionOutcome.NOT_WAITED:
        return _errors(approval, approvals.UNWAITED)
    log.info("approval edited", extra={"approval_id": approval.approval_id, "outcome": outcome.value})
    return {}


def _decided_meanwhile(approval: Approval, outcome: approvals.DecisionOutcome, user: str,
                       edited: dict[str, Any] | None) -> Reply:  # fmt: skip
    """The edit's decision found the approval changed since it was read: by this very edit (a double submission,
    which stands, and the modal closes), by another edit, or by a decision."""
    fresh = stored.get_approval(approval.approval_id) or approval
    if edited is not None and _stands(fresh, user, edited):
        return {}
    if outcome == approvals.DecisionOutcome.EDITED_SINCE:  # another edit committed since the checks above
        return _errors(approval, CHANGED)
    return _errors(fresh, approvals.closed_note(fresh) if fresh.status != ApprovalStatus.PENDING else
                   "You have approved this call already; it needs another approver.")  # fmt: skip

"""Approvals (flow 9): a risky call runs only after an operator approves that exact call, and then exactly once.

A call whose tier is ``approve`` does not run: an approval record bound to a digest of the tool's name and its
canonical arguments is written, and a card is posted with Approve / Deny buttons. The press (or an operator's
reply in the thread, which denies with its text as the reason) decides it in one transaction; when every call
of the turn is decided, the paused session resumes in a continuation that runs the approved calls through the
ledger. Who may decide: the operators, and the requester only with ``ALLOW_REQUESTER_APPROVALS``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any

from shared import config
from shared.limits import MAX_MESSAGE_CHARS, capped
from shared.logs import session_context
from shared.slack import blocks
from shared.slack import client as slack
from shared.slack.actions import ButtonPress
from shared.slack.surface import ThreadSurface
from shared.state import approvals as stored
from shared.state import events, ids, sessions, tasks
from shared.state.approvals import Decision
from shared.state.firestore import now
from shared.state.models import Approval, ApprovalStatus, Note, NoteKind, Session, SessionStatus
from shared.state.new_sessions import approvals_continuation

log = logging.getLogger(__name__)


class DecisionOutcome(StrEnum):
    DECIDED = "decided"
    DUPLICATE = "duplicate"
    ALREADY_DECIDED = "already_decided"
    NOT_ALLOWED = "not_allowed"
    NO_APPROVAL = "no_approval"
    TAMPERED = "tampered"


def canonical(args: Mapping[str, Any]) -> str:
    """Arguments as canonical JSON: sorted keys, no spaces; what the digest binds and the card shows."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(tool: str, canonical_args: str) -> str:
    """A short digest of tool name and canonical arguments: the identity of one exact call."""
    return hashlib.sha256(f"{tool}\n{canonical_args}".encode()).hexdigest()[:16]


def may_decide(user: str, approval: Approval) -> bool:
    settings = config.settings()
    if user in settings.operator_user_ids:
        return True
    return settings.allow_requester_approvals and user == approval.requested_by


def request(session: Session, seq: int, calls: list[tuple[int, str | None, str, dict[str, Any]]],
            surface: ThreadSurface, *, label: str | None = None) -> list[Approval]:  # fmt: skip
    """Record the turn's risky calls, then post one card each, then note the cards on the records."""
    turn_ids = [ids.approval_id(session.session_id, seq, index) for index, *_ in calls]
    if label is None and session.reports_to_parent:  # a child's call: say whose work it is
        label = f"for a delegated task: {session.text[:150]}"
    wanted = []
    for (index, call_id, tool, args), approval_id in zip(calls, turn_ids, strict=True):
        args_json = canonical(args)
        wanted.append(
            Approval(
                approval_id=approval_id,
                session_id=session.session_id,
                transcript_id=session.transcript,
                channel=session.channel,
                thread_ts=session.thread_ts,
                seq=seq,
                call_index=index,
                call_id=call_id,
                tool=tool,
                args=args_json,
                digest=digest(tool, args_json),
                turn_ids=turn_ids,
                asked_at=now(),
                requested_by=session.requester,
                label=label,
            )
        )
    recorded = stored.create_approvals(wanted)
    operators = config.settings().operator_user_ids
    for approval in recorded:
        if approval.card_ts:
            continue
        card_ts = surface.post(
            blocks.approval_text(
                approval.tool,
                approval.args,
                approval.digest,
                requested_by=approval.requested_by,
                label=approval.label,
                operators=operators,
            ),
            key=ids.post_key(session.session_id, seq, f"{approval.call_index}:approval"),
            for_operators=True,
            blocks=blocks.approval_blocks(
                approval.approval_id,
                approval.tool,
                approval.args,
                approval.digest,
                requested_by=approval.requested_by,
                label=approval.label,
                operators=operators,
            ),
        )
        stored.set_card_ts(approval.approval_id, card_ts)
        approval.card_ts = card_ts
    return recorded


def resume(approval: Approval, asker: SessionStatus | None, trace_id: str | None) -> Session | Note | None:
    """When the last call of a turn is decided: a paused asker resumes in a continuation; one still running (it
    has not paused yet) finds the decisions at its pause and carries on in place."""
    if asker == SessionStatus.PAUSED:
        return approvals_continuation(approval, user=approval.decided_by or "", at=now(), trace_id=trace_id)
    if asker == SessionStatus.RUNNING:
        return Note(kind=NoteKind.DECISION, text=approval.status.value, user=approval.decided_by or "",
                    ts=approval.decision_ts or "", question_id=approval.approval_id)  # fmt: skip
    return None


def _decide(approval: Approval, decision: Decision) -> DecisionOutcome:
    result = stored.decide(approval.approval_id, decision, resume)
    found = result.approval
    if found is None:
        return DecisionOutcome.NO_APPROVAL
    if result.repeated or not result.won:  # decided already: its continuation may never have been queued
        _requeue_decided(found)
    if result.repeated:
        return DecisionOutcome.DUPLICATE
    if not result.won:
        if found.decision_ts == decision.ts:
            return DecisionOutcome.DUPLICATE
        slack.ephemeral(found.channel, decision.by, closed_note(found), thread_ts=found.thread_ts)
        return DecisionOutcome.ALREADY_DECIDED
    if result.continuation is not None:  # the work first; the card's wording after
        with session_context(result.continuation.session_id, trace=result.continuation.trace_id):
            tasks.enqueue_session(result.continuation.session_id, attempt=f"decided-{found.seq}")
    if found.status == ApprovalStatus.DENIED and found.card_ts:
        update_card(found, f":no_entry_sign: denied by <@{found.decided_by}>" + (
            f": {found.reason}" if found.reason else ""))  # fmt: skip
    elif found.card_ts and result.resumes:  # "running" only when a run is queued
        update_card(found, f":hourglass_flowing_sand: approved by <@{found.decided_by}>; running it now")
    elif found.card_ts:
        update_card(found, f":hourglass_flowing_sand: approved by <@{found.decided_by}>; it runs once the other "
                    "calls of its turn are decided")  # fmt: skip
    log.info("approval decided", extra={"approval_id": found.approval_id, "status": found.status.value})
    return DecisionOutcome.DECIDED


def _requeue_decided(approval: Approval) -> None:
    """A decision already recorded (Slack's redelivery, a second press): the turn's continuation, if it is still
    queued, gets its task again (the same name; the delivery that decided may have found Cloud Tasks down)."""
    # The decision that completed the turn names it (a child resumes itself: its own id); other siblings do not.
    session_id = approval.continuation_id or ids.resume_id(approval.session_id, approval.seq)
    continuation = sessions.get_session(session_id)
    if continuation is not None and continuation.status == SessionStatus.QUEUED:
        tasks.enqueue_session(session_id, attempt=f"decided-{approval.seq}")


def decide_press(press: ButtonPress) -> DecisionOutcome:
    """An Approve or Deny press: valid only for a pending approval, on its own card, for the call it showed."""
    parsed = blocks.parse_approval_value(press.value)
    approval = stored.get_approval(parsed[0]) if parsed else None
    on_its_card = approval is not None and (
        approval.card_ts == press.message_ts or (approval.card_ts is None and press.thread_ts == approval.thread_ts)
    )
    if parsed is None or approval is None or approval.channel != press.channel or not on_its_card:
        slack.ephemeral(press.channel, press.user, "That button does not belong to an approval here; nothing changed.")
        return DecisionOutcome.NO_APPROVAL
    if parsed[1] != approval.digest or digest(approval.tool, approval.args) != approval.digest:
        log.warning("approval press with a digest that is not the call's", extra={"approval_id": approval.approval_id})
        slack.ephemeral(press.channel, press.user, "That button does not match the call it was shown for; nothing ran.")
        return DecisionOutcome.TAMPERED
    if not may_decide(press.user, approval):
        slack.ephemeral(press.channel, press.user, "Only the operators can approve or deny this; nothing changed.",
                        thread_ts=approval.thread_ts)  # fmt: skip
        return DecisionOutcome.NOT_ALLOWED
    if approval.status != ApprovalStatus.PENDING:
        slack.ephemeral(press.channel, press.user, closed_note(approval), thread_ts=approval.thread_ts)
        return DecisionOutcome.ALREADY_DECIDED
    status = ApprovalStatus.APPROVED if press.action_id == blocks.APPROVE_ACTION else ApprovalStatus.DENIED
    return _decide(approval, Decision(status, press.user, None, ids.press_key(press.action_ts)))


def deny_by_reply(*, open_approval_ids: list[str], user: str, text: str, ts: str) -> DecisionOutcome | None:
    """An operator's reply while approvals are pending in the thread denies them all, its text the reason; None
    when nothing is pending (the reply is then handled as usual).

    Each denial is keyed by the message and the approval, so a retry of the message after a crash part-way
    denies what is still pending; the message itself is claimed last, so its other events (a retry once all are
    decided, its app_mention twin) do nothing more.
    """
    pending = stored.pending(open_approval_ids)
    if not pending:
        return None
    if not may_decide(user, pending[0]):
        return None  # not a decision: the message is handled as any other
    reason = capped(text, MAX_MESSAGE_CHARS)
    outcomes = [_decide(a, Decision(ApprovalStatus.DENIED, user, reason, f"{ts}:{a.approval_id}")) for a in pending]
    events.claim_message(pending[0].channel, ts, kind="decision", session_id=pending[0].session_id)
    return outcomes[0]


def closed_note(approval: Approval) -> str:
    if approval.status == ApprovalStatus.EXPIRED:
        return "This approval expired; nothing ran and nothing will."
    return f"This call was already {approval.status.value} by <@{approval.decided_by}>; nothing changed."


def update_card(approval: Approval, verdict: str) -> None:
    if approval.card_ts:
        text = blocks.decided_card(approval.tool, approval.args, approval.digest, verdict)
        slack.update(approval.channel, approval.card_ts, text)


def remind(approval: Approval, at: datetime) -> bool:
    """The one reminder of a pending approval, after QUESTION_REMIND_HOURS, marked once its post succeeded."""
    if approval.reminded_at is not None or approval.status != ApprovalStatus.PENDING:
        return False
    operators = blocks.operator_mentions(config.settings().operator_user_ids)
    hours = int((at - approval.asked_at).total_seconds() // 3600)
    text = f":alarm_clock: {operators}: this call has waited {hours} hours for approval: `{approval.tool}`"
    slack.post(approval.channel, approval.thread_ts, text, key=f"{approval.approval_id}:reminder")
    return stored.mark_reminded(approval.approval_id, at)


def expire(approval: Approval, at: datetime) -> bool:
    """Stop waiting: the approval expires (never runs), its card says so, and its session is told or closed."""
    decision = Decision(ApprovalStatus.EXPIRED, "sweep", "expired", f"expire-{approval.approval_id}")
    result = stored.decide(approval.approval_id, decision, resume)
    if not result.won or result.approval is None:
        return False
    if result.continuation is not None:
        tasks.enqueue_session(result.continuation.session_id, attempt=f"decided-{approval.seq}")
    hours = int((at - approval.asked_at).total_seconds() // 3600)
    update_card(result.approval, f":hourglass: expired after {hours} hours; it did not run")
    return True


def cancel(approval: Approval, *, by: str) -> bool:
    """The session that asked was stopped: the call is denied (never run) and its card says so."""
    decision = Decision(ApprovalStatus.DENIED, by, "the session was stopped", f"stop-{approval.approval_id}")
    result = stored.decide(approval.approval_id, decision, resume)  # the asker has stopped: nothing resumes
    if not result.won or result.approval is None:
        return False
    update_card(result.approval, f":octagonal_sign: not run: the session was stopped by {by}")
    return True

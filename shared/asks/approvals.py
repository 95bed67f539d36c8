"""Approvals (flow 9): a risky call runs only after an operator approves that exact call, and then exactly once.

A call whose tier is ``approve`` does not run: an approval record bound to a digest of the tool's name and its
canonical arguments is written, and a card is posted with Approve / Deny buttons. The press (or an operator's
reply in the thread, which denies with its text as the reason) decides it in one fenced commit (a transaction
when a racing write moved what it read: ``shared.state.fenced``); when every call of the turn is decided, the
paused session resumes in a continuation that runs the approved calls through the ledger. Who may decide: the
approvers the tool's rule names, else the operators (and the requester only with ``ALLOW_REQUESTER_APPROVALS``); a
rule may ask for two distinct approvers (``shared.asks.approvers``). The card: ``shared.slack.approval_card``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any, NamedTuple

from shared import config
from shared.asks import approvers, routing
from shared.limits import MAX_MESSAGE_CHARS, capped
from shared.logs import session_context
from shared.queue import tasks
from shared.slack import approval_card, backpressure, blocks, call_view, edit_modal
from shared.slack import client as slack
from shared.slack.actions import ButtonPress
from shared.slack.surface import ThreadSurface
from shared.state import approvals as stored
from shared.state import events, ids, routed, sessions
from shared.state.approvals import Decision
from shared.state.firestore import now
from shared.state.models import Approval, ApprovalStatus, Note, NoteKind, SessionStatus
from shared.state.notices import Notice
from shared.state.origin import asked_by
from shared.state.session_model import Session

log = logging.getLogger(__name__)


class DecisionOutcome(StrEnum):
    DECIDED = "decided"
    DUPLICATE = "duplicate"
    ALREADY_DECIDED = "already_decided"
    NOT_ALLOWED = "not_allowed"
    NO_APPROVAL = "no_approval"
    TAMPERED = "tampered"
    EDITED_SINCE = "edited_since"  # an Approve of the call as it was before an operator's edit: not counted
    NOT_WAITED = "not_waited"  # the session that asked has ended: nothing waits on the call, nothing changed


DECISION_RACE_WINDOW = timedelta(seconds=15)  # a denying reply this soon after a decision lost the race to it
UNWAITED = "Nothing waits on this call any more (the session that asked for it has ended), so nothing changed."


def canonical(args: Mapping[str, Any]) -> str:
    """Arguments as canonical JSON: sorted keys, no spaces; what the digest binds and the card shows."""
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(tool: str, canonical_args: str) -> str:
    """A short digest of tool name and canonical arguments: the identity of one exact call."""
    return hashlib.sha256(f"{tool}\n{canonical_args}".encode()).hexdigest()[:16]


def may_decide(user: str, approval: Approval) -> bool:
    return approvers.may_decide(user, approval)


class Held(NamedTuple):
    """A call of the model's turn held for an operator's decision (its tier is ``approve``), by its position."""

    call_index: int  # its position in its model turn
    call_id: str | None  # the model's own id, when it gave one
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Asked:
    """What the asking side knows about one held call: its sentence, its shown order and its rule's approvers."""

    summary: str | None = None
    shown_order: tuple[str, ...] = ()
    approvers: tuple[str, ...] = ()
    approvals: int = 1
    schema: str | None = None  # the tool's JSON Schema: the Edit modal's fields (None: no Edit button)
    rule_when: str | None = None  # its ``TOOL_TIERS`` rule's ``when`` as JSON, when it has one


def shown_size(tool: str, args: Mapping[str, Any], shown_order: tuple[str, ...] = ()) -> int:
    """How many characters the card needs for this call (more than ``call_view.MAX_SHOWN_CHARS``: not shown)."""
    return len(call_view.shown_call(tool, args, shown_order))


def card_of(approval: Approval) -> approval_card.Card:
    return approval_card.Card(
        approval_id=approval.approval_id, tool=approval.tool, args=approval.args, digest=approval.digest,
        summary=approval.summary, shown_order=approval.shown_order, requested_by=approval.requested_by,
        label=approval.label, expires_at=approval.expires_at, approvers=approval.approvers,
        approvals_needed=approval.approvals_needed, approved_by=approval.approved_by,
        operators=config.settings().operator_user_ids, editable=editable(approval),
        edited_args=approval.edited_args, edited_by=approval.edited_by, edited_digest=approval.edited_digest,
        asked_in=approval.asked_in,
    )  # fmt: skip


def editable(approval: Approval) -> bool:
    """An Edit button only for a call whose tool has a schema and whose every argument fits the modal's field."""
    args = effective_args(approval)
    return approval.schema is not None and args is not None and edit_modal.fits(json.loads(approval.schema), args)


def effective_args(approval: Approval) -> dict[str, Any] | None:
    """The arguments an approved call runs with: an operator's edit (when its digest holds), else the original
    (None: the stored edit does not match its digest, so nothing may run)."""
    if approval.edited_args is None:
        return dict(json.loads(approval.args))
    if approval.edited_digest != digest(approval.tool, approval.edited_args):
        return None
    return dict(json.loads(approval.edited_args))


def expiry(asked_at: datetime) -> datetime:
    """When the sweep expires an approval asked at ``asked_at`` (its first run after this)."""
    settings = config.settings()
    return asked_at + timedelta(hours=settings.question_remind_hours + settings.question_abandon_hours)


def request(session: Session, seq: int, calls: Sequence[Held],
            surface: ThreadSurface, *, label: str | None = None,
            asked: Mapping[int, Asked] | None = None) -> list[Approval]:  # fmt: skip
    """Record the turn's risky calls, then post one card each, then note the cards on the records. ``asked`` (by
    call index) is each call's sentence, order and approvers."""
    turn_ids = [ids.approval_id(session.session_id, seq, index) for index, *_ in calls]
    if label is None and session.reports_to_parent:  # a child's call: say whose work it is
        label = f"for a delegated task: {session.text[:150]}"
    wanted = []
    elsewhere = routing.operator_channel(
        session.origin.channel
    )  # operators cannot see this conversation: their channel
    for (index, call_id, tool, args), approval_id in zip(calls, turn_ids, strict=True):
        args_json = canonical(args)
        about = (asked or {}).get(index) or Asked()
        asked_at = now()
        wanted.append(
            Approval(
                approval_id=approval_id,
                **asked_by(session),
                seq=seq,
                call_index=index,
                call_id=call_id,
                tool=tool,
                args=args_json,
                digest=digest(tool, args_json),
                turn_ids=turn_ids,
                asked_at=asked_at,
                requested_by=session.requester,
                label=label,
                summary=about.summary,
                shown_order=list(about.shown_order),
                expires_at=expiry(asked_at),
                approvers=list(about.approvers),
                approvals_needed=about.approvals,
                schema=about.schema,
                rule_when=about.rule_when,
                card_channel=elsewhere,
            )
        )
    recorded = stored.create_approvals(wanted)
    for approval in recorded:
        if approval.card_ts:
            continue
        key = ids.post_key(session.session_id, seq, f"{approval.call_index}:approval")
        if elsewhere := approval.card_channel:  # the card goes to the operators' channel, linked back, once
            approval.asked_in = routing.link(session.origin.channel, session.origin.thread_ts)
            card = card_of(approval)
            card_ts = routing.post_once(approval.approval_id, elsewhere, approval_card.text(card), key=key,
                                        blocks=approval_card.blocks(card), listed=routed.Listed.APPROVAL)  # fmt: skip
            stored.set_card_ts(approval.approval_id, card_ts, channel=elsewhere, asked_in=approval.asked_in)
            surface.post(f":lock: This needs an operator's approval: {approval_card.sentence(card)}. I asked the "
                         f"operators in <#{elsewhere}>, and I will carry on here once one decides.",
                         key=f"{key}:asked")  # fmt: skip
        else:
            card = card_of(approval)
            card_ts = surface.post(approval_card.text(card), key=key, for_operators=True,
                                   blocks=approval_card.blocks(card))  # fmt: skip
            stored.set_card_ts(approval.approval_id, card_ts)
        approval.card_ts = card_ts
    return recorded


def resume(approval: Approval, asker: SessionStatus | None, trace_id: str | None) -> Note | None:
    """When the last call of a turn is decided and its asker does not pause on it yet: one still running finds the
    decisions at its pause and carries on in place. (A paused asker waits on its waiting record, which the decision
    resolves: ``shared.state.waiting``.)"""
    if asker == SessionStatus.RUNNING:
        return Note(kind=NoteKind.DECISION, text=approval.status.value, user=approval.decided_by or "",
                    ts=approval.decision_ts or "", question_id=approval.approval_id)  # fmt: skip
    return None


def _lost(found: Approval, decision: Decision, *, again: bool, quiet: bool) -> DecisionOutcome:
    """A decision that was not recorded: the same approver twice, or another decision first (told privately,
    unless ``quiet``: an Edit modal tells its editor itself)."""
    if not again and found.decision_ts == decision.ts:
        return DecisionOutcome.DUPLICATE
    if not quiet:
        note = "You have approved this call already; it needs another approver's approval too." if again else (
            closed_note(found))  # fmt: skip
        slack.ephemeral(found.card_place()[0], decision.by, note, thread_ts=found.card_place()[1])
    return DecisionOutcome.ALREADY_DECIDED


def _decide(approval: Approval, decision: Decision, *, quiet: bool = False) -> DecisionOutcome:
    """Record one decision and show it; ``quiet``: the loser of a race is told by the caller (an Edit modal)."""
    return _shown(stored.decide(approval.approval_id, decision, resume, waited_only=True), decision, quiet=quiet)


def _shown(result: stored.Decided, decision: Decision, *, quiet: bool = False) -> DecisionOutcome:
    """What a decision transaction did, made known: the continuation's task queued, the card updated."""
    found = result.approval
    if found is None:
        return DecisionOutcome.NO_APPROVAL
    if result.stale or result.unwaited:
        return _not_counted(found, decision, quiet=quiet, unwaited=result.unwaited)
    if result.repeated or not result.won:  # decided already: its continuation may never have been queued
        _requeue_decided(found)
    if result.repeated:
        return DecisionOutcome.DUPLICATE
    if result.again or not result.won:
        return _lost(found, decision, again=result.again, quiet=quiet)
    if result.partial:  # one approver of several: the card counts it and keeps its buttons
        if found.card_ts:
            card, ts = card_of(found), found.card_ts
            slack.best_effort("the counted card", lambda: slack.update(
                found.card_place()[0], ts, approval_card.text(card), blocks=approval_card.blocks(card)))  # fmt: skip
        log.info("approval counted", extra={"approval_id": found.approval_id, "approved_by": found.approved_by})
        return DecisionOutcome.DECIDED
    if result.continuation is not None:  # the work first (a slow or failing card update must not hold it back)
        with session_context(result.continuation.session_id, trace=result.continuation.trace_id):
            # Its task names the record it resumes: its claim reads the decisions and their calls' ledger entries.
            tasks.enqueue_continuation(result.continuation, attempt=f"decided-{found.seq}")
    if found.card_ts and result.resumes and found.status != ApprovalStatus.DENIED:
        # "Running" only when a run is queued. The run shows the call's result on the card, which this update
        # would overwrite for good were it late, so it is made at once or not at all (the run shows "running"
        # itself): a retry after Slack's rate limit or an error would land after the result.
        _show_running(found)
    if found.status == ApprovalStatus.DENIED and found.card_ts:
        _show(found, f":no_entry_sign: denied by <@{found.decided_by}>" + (
            f": {blocks.as_written(found.reason)}" if found.reason else ""))  # fmt: skip
    elif found.card_ts and not result.resumes:
        _show(found, f":hourglass_flowing_sand: approved by {_people(found)}; it runs once the other calls of its turn "
              "are decided")  # fmt: skip
    log.info("approval decided", extra={"approval_id": found.approval_id, "status": found.status.value})
    return DecisionOutcome.DECIDED


def _show(found: Approval, verdict: str) -> None:  # recorded and queued: a card not updated now never fails the click
    slack.best_effort("the decided card", lambda: update_card(found, verdict))


def _show_running(approval: Approval) -> None:
    """The card of an approved call whose run is queued: "running", no buttons. One attempt, no retry (the run
    could show its result meanwhile), and nothing it raises fails the click: the run shows "running" again itself."""
    try:
        with backpressure.waiting_at_most(0):
            update_card(approval, running_verdict(approval))
    except Exception as exc:  # best effort, whatever Slack or the connection did
        log.warning("could not show the approved card as running", extra={"error": repr(exc)})


def running_verdict(approval: Approval) -> str:
    return f":hourglass_flowing_sand: approved by {_people(approval)}; running it now"


def _people(approval: Approval) -> str:
    return " and ".join(f"<@{u}>" for u in approval.approved_by or [approval.decided_by or "someone"])


def _not_counted(found: Approval, decision: Decision, *, quiet: bool, unwaited: bool) -> DecisionOutcome:
    """A decision the transaction refused, the decider told why (unless ``quiet``: an Edit modal tells its editor
    itself): ``unwaited``, its session ended (abandoned, failed, stopped), so a decision would run nothing; else an
    approval of a call an edit replaced after the decider read it."""
    if unwaited:
        log.info("decision refused: nothing waits on the call", extra={"approval_id": found.approval_id})
    if not quiet:
        place = found.card_place()
        slack.ephemeral(place[0], decision.by, UNWAITED if unwaited else edited_since_note(found), thread_ts=place[1])
    if unwaited:  # an end cut off before it closed the call left its card pending: closed now, as the end would have
        from shared.asks import stopping  # (it asks this module to deny the calls)

        stopping.close_unwaited(found.session_id)
    return DecisionOutcome.NOT_WAITED if unwaited else DecisionOutcome.EDITED_SINCE


def decide_edit(approval: Approval, decision: Decision) -> DecisionOutcome:
    """A valid Edit submission: the editor's approval of the edited call (``decision.edit``), exactly once."""
    return _decide(approval, decision, quiet=True)


def requeue_decided(approval: Approval) -> None:
    """See ``_requeue_decided`` (an Edit modal's submission after its decision)."""
    _requeue_decided(approval)


def _requeue_decided(approval: Approval) -> None:
    """A decision already recorded (Slack's redelivery, a second press): the turn's continuation, if it is still
    queued, gets its task again (the same name; the delivery that decided may have found Cloud Tasks down)."""
    # The decision that completed the turn names it (a child resumes itself: its own id); other siblings do not.
    session_id = approval.continuation_id or ids.resume_id(approval.session_id, approval.seq)
    continuation = sessions.get_session(session_id)
    if continuation is not None and continuation.status == SessionStatus.QUEUED:
        tasks.enqueue_continuation(continuation, attempt=f"decided-{approval.seq}")


def decide_press(press: ButtonPress) -> DecisionOutcome:
    """An Approve or Deny press: valid only for a pending approval, on its own card, for the call it showed.

    The press is checked against the approval as the decision's transaction reads it (no read of its own before):
    a press refused there wrote nothing, and is then told why."""
    parsed = blocks.parse_approval_value(press.value)
    if parsed is None:
        return _not_this_approval(press)
    status = ApprovalStatus.APPROVED if press.action_id == blocks.APPROVE_ACTION else ApprovalStatus.DENIED
    decision = Decision(status, press.user, None, ids.press_key(press.action_ts), shown=parsed[1])
    result = stored.decide(parsed[0], decision, resume, admit=lambda a: _press_refusal(press, parsed[1], a) is None,
                           waited_only=True)  # fmt: skip
    if result.approval is None or not result.refused:
        return _shown(result, decision) if result.approval is not None else _not_this_approval(press)
    approval = result.approval
    refusal = _press_refusal(press, parsed[1], approval)
    if refusal == DecisionOutcome.NO_APPROVAL:
        return _not_this_approval(press)
    if refusal == DecisionOutcome.EDITED_SINCE:
        return _pressed_before_edit(press, approval, status)
    if refusal == DecisionOutcome.TAMPERED:
        log.warning("approval press with a digest that is not the call's", extra={"approval_id": approval.approval_id})
        slack.ephemeral(press.channel, press.user, "That button does not match the call it was shown for; nothing ran.")
        return DecisionOutcome.TAMPERED
    if refusal == DecisionOutcome.NOT_ALLOWED:
        slack.ephemeral(press.channel, press.user, approvers.refusal(approval), thread_ts=approval.card_place()[1])
        return DecisionOutcome.NOT_ALLOWED
    _requeue_decided(approval)  # a press again after the deciding one found Cloud Tasks down
    slack.ephemeral(press.channel, press.user, closed_note(approval), thread_ts=approval.card_place()[1])
    return DecisionOutcome.ALREADY_DECIDED


def _press_refusal(press: ButtonPress, pressed_digest: str, approval: Approval) -> DecisionOutcome | None:
    """Why a press may not decide ``approval`` as found (None: it may), in the order a press is told."""
    on_its_card = approval.card_ts == press.message_ts or (
        approval.card_ts is None and press.thread_ts == approval.card_place()[1]
    )
    if approval.card_place()[0] != press.channel or not on_its_card:
        return DecisionOutcome.NO_APPROVAL
    if approval.status != ApprovalStatus.PENDING and pressed_digest in {approval.digest, approval.edited_digest}:
        return DecisionOutcome.ALREADY_DECIDED  # an edit decided it while this card still showed the original
    runs = approval.edited_digest or approval.digest  # (an edit back to the call asked for is no edit here)
    if approval.status == ApprovalStatus.PENDING and pressed_digest == approval.digest != runs:
        return DecisionOutcome.EDITED_SINCE  # the card as shown before an operator's edit (two approvers)
    if pressed_digest != runs or digest(approval.tool, approval.args) != approval.digest:
        return DecisionOutcome.TAMPERED
    if not may_decide(press.user, approval):
        return DecisionOutcome.NOT_ALLOWED
    if approval.status != ApprovalStatus.PENDING:
        return DecisionOutcome.ALREADY_DECIDED
    return None


def _not_this_approval(press: ButtonPress) -> DecisionOutcome:
    slack.ephemeral(press.channel, press.user, "That button does not belong to an approval here; nothing changed.")
    return DecisionOutcome.NO_APPROVAL


def _pressed_before_edit(press: ButtonPress, approval: Approval, status: ApprovalStatus) -> DecisionOutcome:
    """A press on the card as it was before an operator edited the call (a rule of several approvers keeps it
    pending after an edit). An Approve was of the original arguments, which no longer run: it is not counted for
    the edited call, and the presser is told to look at the edited one. A Deny still ends it: nothing runs."""
    if not may_decide(press.user, approval):
        slack.ephemeral(press.channel, press.user, approvers.refusal(approval), thread_ts=approval.card_place()[1])
        return DecisionOutcome.NOT_ALLOWED
    if status == ApprovalStatus.DENIED:
        return _decide(approval, Decision(status, press.user, None, ids.press_key(press.action_ts)))
    slack.ephemeral(press.channel, press.user, edited_since_note(approval), thread_ts=approval.card_place()[1])
    log.info("approve press on the call before its edit", extra={"approval_id": approval.approval_id})
    return DecisionOutcome.EDITED_SINCE


def edited_since_note(approval: Approval) -> str:
    return (f"<@{approval.edited_by}> edited this call after this card was shown, so your approval of the earlier "
            "arguments was not recorded: an approval counts only for the exact call that runs. The card now shows "
            "the edited call; approve that one if you agree with it.")  # fmt: skip


def deny_by_reply(*, open_approval_ids: list[str], user: str, text: str, ts: str,
                  channel: str | None = None) -> DecisionOutcome | None:  # fmt: skip
    """An operator's reply while approvals are pending in the thread denies all that its author may decide, its text
    the reason; None when none is (the reply is then handled as usual), unless the thread as read listed approvals
    decided since: the reply lost to that decision, and is told so. The thread may be the one a routed card starts
    in the operator channel (``channel``: where the reply is).

    Each denial is keyed by the message and the approval, so a retry of the message after a crash part-way
    denies what is still pending; the message itself is claimed last, so its other events (a retry once all are
    decided, its app_mention twin) do nothing more.
    """
    # Each call's rule decides who may deny it; the rest are not this reply's, decided or not (a twin event of a
    # reply that denied some, arriving before the reply claimed its message, then finds what it denied decided).
    # A reply written before a card was posted was meant for something else (a question the card's turn followed):
    # it decides only the approvals its author could have seen (Slack's ts values compared exactly, as decimals).
    listed = [a for a in stored.get_approvals(open_approval_ids) if may_decide(user, a) and _seen_before(a, ts)]
    pending = [a for a in listed if a.status == ApprovalStatus.PENDING]
    if not pending:
        # Listed on the thread as read, decided since (a decision unlists its approval in its own commit): this
        # denial lost a race to that decision, and is told so as if it had read the approval pending.
        # The message is claimed first: told once, and Slack's retry (or its app_mention twin), finding nothing
        # listed, is not taken for a note to the run the decision started.
        lost = next((a for a in listed if _decided_just_now(a)), None)
        if lost is not None:
            if events.claim_message(channel or lost.channel, ts, kind="decision", session_id=lost.session_id):
                keyed = f"{ts}:{lost.approval_id}"  # as this message's own denial is: that one is no loser
                return _shown(stored.Decided(lost), Decision(ApprovalStatus.DENIED, user, None, keyed))
            _requeue_decided(lost)
            return DecisionOutcome.DUPLICATE
        return None
    reason = capped(text, MAX_MESSAGE_CHARS)
    outcomes = [_decide(a, Decision(ApprovalStatus.DENIED, user, reason, f"{ts}:{a.approval_id}")) for a in pending]
    events.claim_message(channel or pending[0].channel, ts, kind="decision", session_id=pending[0].session_id)
    return outcomes[0]


def _seen_before(approval: Approval, ts: str) -> bool:
    """True if ``approval``'s card was posted before the message ``ts`` was written."""
    try:
        return approval.card_ts is not None and Decimal(approval.card_ts) < Decimal(ts)
    except InvalidOperation:  # not Slack's format: as before, the reply may decide it
        return True


def _decided_just_now(approval: Approval) -> bool:
    """Approved or denied by a person (a Slack user, not a session that ended) within ``DECISION_RACE_WINDOW``: a
    reply that read it pending lost to that. A routed card's thread lists its approval after it is decided too."""
    by_person = approval.status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED) and (
        (approval.decided_by or "")[:1] in ("U", "W")
    )
    return by_person and approval.decided_at is not None and now() - approval.decided_at < DECISION_RACE_WINDOW


def closed_note(approval: Approval) -> str:
    if approval.status == ApprovalStatus.EXPIRED:
        return "This approval expired; nothing ran and nothing will."
    return f"This call was already {approval.status.value} by <@{approval.decided_by}>; nothing changed."


def update_card(approval: Approval, verdict: str, *, result: str | None = None) -> None:
    """The decided card: its verdict (and the call's result once it ran), the exact call still shown, no buttons."""
    if approval.card_ts:
        card = card_of(approval)
        slack.update(approval.card_place()[0], approval.card_ts, approval_card.decided_text(card, verdict),
                     blocks=approval_card.decided_blocks(card, verdict, result=result))  # fmt: skip


RESULT_CHARS = 1_500  # of a call's result on its card (plain text; the model gets it whole)


def ran(approval: Approval, response: Mapping[str, Any]) -> None:
    """The card once the approved call ran: who approved it, and what it returned (shown inertly)."""
    failed = "error" in response
    mark = ":warning:" if failed else ":white_check_mark:"
    verdict = f"{mark} approved by {_people(approval)}; it ran" + (" and failed" if failed else "")
    shown = json.dumps(response.get("error", response.get("result", response)), ensure_ascii=False, default=str)
    result = call_view.visible(shown if len(shown) <= RESULT_CHARS else shown[:RESULT_CHARS] + "…")
    update_card(approval, verdict, result=("Error: " if failed else "Result: ") + result)


def reminder(approval: Approval, at: datetime) -> Notice | None:
    """The one reminder of a pending approval, after QUESTION_REMIND_HOURS (None: decided, or reminded)."""
    if approval.reminded_at is not None or approval.status != ApprovalStatus.PENDING:
        return None
    card, hours = card_of(approval), int((at - approval.asked_at).total_seconds() // 3600)
    text = f":alarm_clock: {approval_card.who_decides(card)}: this call has waited {hours} hours for approval: " + (
        approval_card.sentence(card))  # fmt: skip
    key = f"{approval.approval_id}:reminder"
    return Notice(key, "reminder", *approval.reminder_place(), text, key, about="approvals/" + approval.approval_id)


def expire(approval: Approval, at: datetime) -> bool:
    """Stop waiting: the approval expires (never runs), its card says so, and its session is told or closed."""
    decision = Decision(ApprovalStatus.EXPIRED, "sweep", "expired", f"expire-{approval.approval_id}")
    result = stored.decide(approval.approval_id, decision, resume)
    if not result.won or result.approval is None:
        return False
    if result.continuation is not None:
        tasks.enqueue_continuation(result.continuation, attempt=f"decided-{approval.seq}")
    hours = int((at - approval.asked_at).total_seconds() // 3600)
    update_card(result.approval, f":hourglass: expired after {hours} hours; it did not run")
    return True

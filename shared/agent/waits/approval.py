"""An operator's decision on an approve-tier call: a denied or expired call is told it did not run; an approved
one runs once, through the ledger, bound to the exact call approved (or to an operator's edit, by its own
digest), and its card says so."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.cloud import firestore
from google.genai import types

from shared.agent.tools.base import Outcome, Suspend
from shared.agent.tools.result import ToolResult
from shared.agent.waits.base import Resumed, cannot_wait
from shared.asks import approvals
from shared.limits import MAX_TOOL_RESULT_CHARS
from shared.state import ledger
from shared.state.batched import Docs
from shared.state.firestore import APPROVALS, db, now
from shared.state.models import Approval, ApprovalStatus, Audit, AuditType, Note, Waiting, WaitKind
from shared.state.session_model import Session


@dataclass(frozen=True)
class Decided:
    """The turn's decided approvals by id, and the ledger entries of their calls by call index."""

    approvals: dict[str, Approval]
    recorded: dict[int, ledger.Entry]


def decided_response(resumed: Resumed, approval: Approval, call: types.FunctionCall, seq: int,
                     entry: ledger.Entry | None) -> ToolResult | Suspend:  # fmt: skip
    """What the call gets once decided: denied or expired, it did not run; approved, it runs (once)."""
    if approval.status == ApprovalStatus.DENIED:
        reason = approval.reason or "no reason given"
        return ToolResult.fail(f"denied by <@{approval.decided_by}>: {reason}. It did not run; another call "
                               "needs its own approval.")  # fmt: skip
    if approval.status != ApprovalStatus.APPROVED:
        return ToolResult.fail(f"the approval {approval.status.value}; the call did not run")
    # Bound to the exact call: the same tool, the same canonical arguments, still pending in this transcript.
    args = dict(call.args or {})
    if call.name != approval.tool or approvals.digest(approval.tool, approvals.canonical(args)) != approval.digest:
        approvals.update_card(approval, ":no_entry_sign: not run: the pending call is not the one approved")
        return ToolResult.fail("not run: the pending call is not the call that was approved")
    runs = approvals.effective_args(approval)  # an operator's edit runs instead, bound by its own digest
    if runs is None:
        return ToolResult.fail("not run: the edited call does not match its approval")
    ctx = resumed.calls.context(seq, approval.call_index, call, caller=approval.session_id)
    # The card's updates are display only: "running" is made beside the call's started record and its run (the
    # click's handler has said so already, once; a failure here is logged and the approved call still runs), and
    # its result beside what follows the step that stores that result (the model's request), after "running".
    verdict = approvals.running_verdict(approval)
    running = resumed.calls.run.show_beside("running", lambda: approvals.update_card(approval, verdict))
    ran = call if approval.edited_args is None else types.FunctionCall(name=call.name, args=runs, id=call.id)
    outcome = resumed.calls.call(approval.tool, ran, ctx, entry)
    # (an approved call cannot start a wait: a tool that waits is told so, as a resumed MCP call is)
    shown = outcome.response if isinstance(outcome, Suspend) else None
    result = outcome.capped(MAX_TOOL_RESULT_CHARS) if isinstance(outcome, ToolResult) else cannot_wait(approval.tool)

    def show_result() -> None:
        running.result()  # never overwritten by a late "running"
        approvals.ran(approval, shown if shown is not None else result.to_dict())

    resumed.after_step.append(("the approved call's result", show_result))
    if isinstance(outcome, Suspend):
        return outcome
    return ToolResult.from_dict(edited_response(approval, result.to_dict()))


def _approval_ref(approval_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(APPROVALS).document(approval_id)
    return ref


@dataclass(frozen=True)
class ApprovalResume:
    kind: WaitKind = WaitKind.APPROVAL
    shown_in_tree: bool = False

    def pausing(self, entries: list[Waiting]) -> None:
        return None

    def refs(self, session: Session, seq: int, entries: list[Waiting]) -> list[firestore.DocumentReference]:
        """Each approval, and the ledger entry of the call it decides (a crash may have run it already)."""
        return [_approval_ref(w.key) for w in entries] + [ledger.call_ref(session, seq, w.index) for w in entries]

    def found(self, session: Session, seq: int, entries: list[Waiting], docs: Docs) -> Decided:
        decided = {w.key: docs.get(_approval_ref(w.key).path) for w in entries}
        recorded = {w.index: docs.get(ledger.call_ref(session, seq, w.index).path) for w in entries}
        return Decided(
            {key: Approval.from_doc(data) for key, data in decided.items() if data is not None},
            {index: ledger.entry_of(data) for index, data in recorded.items() if data is not None},
        )

    def outcome(self, resumed: Resumed, entry: Waiting, call: types.FunctionCall, found: Decided) -> Outcome:
        approval = found.approvals[entry.key]
        resumed.audit.append(Audit(AuditType.APPROVAL, now(), name=approval.tool, args=approval.digest,
                                   result=approval.status.value, text=approval.decided_by))  # fmt: skip
        decided = decided_response(resumed, approval, call, entry.seq, found.recorded.get(entry.index))
        ctx = resumed.calls.context(entry.seq, entry.index, call)
        resumed.audit.append(resumed.calls.audit(approval.tool, call, decided, ctx))
        return decided

    def news(self, entries: list[Waiting]) -> list[Note]:
        return []


WAIT = ApprovalResume()


def edited_response(approval: Approval, response: dict[str, Any]) -> dict[str, Any]:
    """The model's function response for a call an operator edited: it ran with these arguments, not the model's."""
    if approval.edited_args is None:
        return response
    edit = {"by": approval.edited_by, "arguments": json.loads(approval.edited_args),
            "note": "An operator edited this call's arguments before approving it; it ran with these arguments, "
                    "not the ones you asked for."}  # fmt: skip
    return {**response, "edited": edit}

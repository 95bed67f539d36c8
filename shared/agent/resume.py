"""How a paused turn resumes: each kind of outcome that arrives later (a parent's answer, the children's results,
the operator's decisions, an MCP server's answered request) becomes the function response of the call that waited
for it, by the call's position in its turn.

The ``Resumer`` writes those responses, through the run's state (``RunState``); it runs calls through ``ToolCalls``
and pauses again through ``Pauses``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from google.genai import types

from shared.agent import prompts
from shared.agent.calls import ToolCalls
from shared.agent.opening import answer_of
from shared.agent.run_state import RunState
from shared.agent.tools.base import Outcome, ResumesWithInput, Suspend, ToolContext, Wait, short
from shared.agent.tools.mcp.inputs import Pending as McpPending
from shared.agent.tools.result import ToolResult
from shared.agent.transcript import pending_turn
from shared.agent.waits.resuming import Resuming, WaitOn
from shared.asks import approvals, delegation, tree_status
from shared.limits import MAX_TOOL_RESULT_CHARS
from shared.state import children as stored_children
from shared.state import ledger, outcome_reads
from shared.state import questions as stored
from shared.state import waiting as stored_waiting
from shared.state.firestore import now
from shared.state.models import (
    Approval,
    ApprovalStatus,
    Audit,
    AuditType,
    Note,
    Question,
    QuestionStatus,
    SessionKind,
    SessionStatus,
    StepKind,
    Waiting,
    WaitKind,
)
from shared.state.session_model import Session

if TYPE_CHECKING:  # Pauses makes its Resumer (each calls the other)
    from shared.agent.pausing import Pauses

NO_RESULT = stored_children.NO_RESULT
NO_OUTCOME = ToolResult.fail("no outcome")


class Resumer:
    """Writes the responses of a paused turn's calls as their outcomes arrive (True where it says: paused again)."""

    def __init__(self, run: RunState, calls: ToolCalls, pauses: Pauses) -> None:
        self.run = run
        self.calls = calls
        self.pauses = pauses  # a resumed call may pause again (an MCP server that asks for more input)
        # The run's own objects, shared (never rebound during a run).
        self.session, self.steps, self.tools, self.surface = run.session, run.steps, run.tools, run.surface

    def _decided_response(self, approval: Approval, call: types.FunctionCall, seq: int,
                          entry: ledger.Entry | None) -> ToolResult | Suspend:  # fmt: skip
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
        ctx = self.calls.context(seq, approval.call_index, call, caller=approval.session_id)
        approvals.update_card(approval, approvals.running_verdict(approval))  # read before what the call posts
        ran = call if approval.edited_args is None else types.FunctionCall(name=call.name, args=runs, id=call.id)
        outcome = self.calls.call(approval.tool, ran, ctx, entry)
        if isinstance(outcome, Suspend):
            approvals.ran(approval, outcome.response)
            return outcome
        # (an approved call cannot start a wait: a tool that waits is told so, as a resumed MCP call is)
        result = (
            outcome.capped(MAX_TOOL_RESULT_CHARS) if isinstance(outcome, ToolResult) else cannot_wait(approval.tool)
        )
        approvals.ran(approval, result.to_dict())
        return ToolResult.from_dict(approvals.edited_response(approval, result.to_dict()))

    # --- an MCP server's request for input, answered ------------------------------------------------------------
    def answered_question(self) -> Question | None:
        """The answered question a continuation starts from (read once: the opening uses it too)."""
        session = self.session
        if session.kind != SessionKind.CONTINUATION or not session.question_id or session.late_note is not None:
            return None
        return stored.get_question(session.question_id)

    def _input_outcome(self, question: Question,
                       call: types.FunctionCall) -> tuple[ToolResult | Suspend, ToolContext]:  # fmt: skip
        """The paused MCP call run again with the operator's answer (once, through the ledger: its own entry per
        round): its outcome (its result as stored, or a new request for input), and its context."""
        pending = McpPending.from_doc(question.mcp_input or {})
        name = call.name or ""
        found: object = self.tools.get(name)
        tool = found if isinstance(found, ResumesWithInput) else None  # through the tool protocol, whatever the tool
        ctx = self.calls.context(pending.seq, pending.index, call, caller=pending.caller)
        outcome: Outcome
        if question.status != QuestionStatus.ANSWERED:
            outcome = ToolResult.fail(f"the operator's input was not given (the question was "
                                      f"{question.status.value}), so the call did not complete")  # fmt: skip
        elif tool is None:
            outcome = ToolResult.fail(f"{name} is not available now (its MCP server could not be reached), so the "
                                      "call did not complete")  # fmt: skip
        else:
            part = f"-r{pending.round}"
            entry = ledger.entries(self.session, pending.seq, [pending.index], part=part).get(pending.index)
            resumes = tool
            outcome = self.calls.call(name, call, ctx, entry, run=lambda: resumes.resume_input(question, ctx),
                                      part=part)  # fmt: skip
        if isinstance(outcome, Wait):
            return cannot_wait(name), ctx
        return (outcome if isinstance(outcome, Suspend) else outcome.capped(MAX_TOOL_RESULT_CHARS)), ctx

    # --- a mixed turn's waiting record, resolved ---------------------------------------------------------------
    def resume_record(self, record: list[Waiting], *, consumed: list[Note] | None = None) -> bool:
        """Every call the record waited on gets its outcome, in call order, in one step: an answer, a decision (an
        approved call runs once, through the ledger), a child's result, the parent's answer, an MCP call run again
        with the operator's input. A record whose turn is no longer pending (a child that waited for its own
        children before reporting) brings their results as news. True if the session paused again (an MCP server
        asked for more input)."""
        seq = record[0].seq
        turn = pending_turn(self.steps)
        resuming = Resuming(turn, seq, {w.index: WaitOn(w.kind, w.key) for w in record})
        if turn is None:  # it waited for its children before reporting, its calls answered long ago: results are news
            ended = stored_children.get_children([w.key for w in record if w.kind == WaitKind.CHILD])
            if ended:
                resuming.responses.text(prompts.notes_text([stored_children.result_note(c) for c in ended]))
        read = self.run.outcomes_of(record)  # with the ledger's entries of its approved calls, in one read
        outcomes, recorded = _Outcomes(read, self.session), read.ledgered
        audit: list[Audit] = []
        again: list[Waiting] = []
        for entry in sorted(record, key=lambda w: w.index):
            on = WaitOn(entry.kind, entry.key)
            waiting = resuming.call_for(on)
            if waiting is None:
                continue  # its response is already in the transcript (a re-run after a crash)
            outcome = self._record_outcome(entry, waiting[1], outcomes, recorded.get(entry.index), audit)
            if isinstance(outcome, Suspend):  # the server asks for (more) input: that call waits again
                then = Waiting(seq, entry.index, WaitKind.MCP_INPUT, outcome.question.question_id)
                resuming.arrive(on, then=WaitOn(then.kind, then.key))
                again.append(then)
                continue
            resuming.arrive(on, outcome if isinstance(outcome, ToolResult) else NO_OUTCOME)
        self.run.commit(StepKind.ANSWER, resuming.responses, audit, consumed=consumed or [], waiting=[])
        if any(w.kind == WaitKind.CHILD for w in record):
            tree_status.refresh(self.session, self.surface)
        if again:
            return self.pauses.pause_on_record(again, None, [], self.session.limits.tool_calls)
        return False

    def _record_outcome(self, entry: Waiting, call: types.FunctionCall, outcomes: _Outcomes,
                        ledgered: ledger.Entry | None, audit: list[Audit]) -> Outcome:  # fmt: skip
        """What the call that waited on ``entry`` gets (its audit appended to ``audit``)."""
        if entry.released:
            return ToolResult.ok({"status": "still running", "child_id": entry.key, "note": RELEASED})
        if entry.kind in {WaitKind.QUESTION, WaitKind.MCP_INPUT}:
            question = outcomes.questions.get(entry.key)
            audit.append(Audit(AuditType.ANSWER, now()))
            if question is None or (question.status != QuestionStatus.ANSWERED and entry.kind == WaitKind.QUESTION):
                return ToolResult.fail(f"the operator did not answer (the question was "
                                       f"{question.status.value if question else 'lost'})")  # fmt: skip
            if entry.kind == WaitKind.QUESTION and not question.mcp_input:
                return ToolResult.ok(answer_of(question))
            outcome, ctx = self._input_outcome(question, call)
            audit.append(self.calls.audit(call.name or "", call, outcome, ctx))
            return outcome
        if entry.kind == WaitKind.APPROVAL:
            approval = outcomes.approvals[entry.key]
            audit.append(Audit(AuditType.APPROVAL, now(), name=approval.tool, args=approval.digest,
                               result=approval.status.value, text=approval.decided_by))  # fmt: skip
            decided = self._decided_response(approval, call, entry.seq, ledgered)
            ctx = self.calls.context(entry.seq, entry.index, call)
            audit.append(self.calls.audit(approval.tool, call, decided, ctx))
            return decided
        if entry.kind == WaitKind.CHILD:
            child = outcomes.children.get(entry.key)
            ended = (child_response(child) if child else ToolResult.fail("the helper session is lost")).capped(
                MAX_TOOL_RESULT_CHARS)  # fmt: skip
            audit.append(Audit(AuditType.TOOL, now(), name=call.name, args=short(call.args),
                               result=short(ended.to_dict())))  # fmt: skip
            return ended
        return outcomes.parent_answer(entry)


RELEASED = "A child asked you a question, so you no longer wait: its result reaches you as a note."


class _Outcomes:
    """What a waiting record's things came to, read once (point reads, by kind)."""

    def __init__(self, read: outcome_reads.Outcomes, session: Session) -> None:
        self.questions, self.approvals, self.children = read.questions, read.approvals, read.children
        self.session = session

    def parent_answer(self, entry: Waiting) -> ToolResult:
        """The parent's answer, for each blocking ask_parent call of the turn that asked (its one answer answers
        them all: a child has one open question to its parent at a time)."""
        asked = self.session.parent_question
        held = self.session.to_doc()
        if asked is None or not stored_waiting.parent_answered(held, entry):
            return ToolResult.fail(delegation.UNANSWERED)
        if asked.released:
            return ToolResult.fail(asked.answer or delegation.UNANSWERED)
        return ToolResult.ok({"answer": asked.answer, "from": "the session that delegated your task"})


def cannot_wait(name: str) -> ToolResult:
    return ToolResult.fail(f"{name} cannot wait here")


def child_response(child: Session) -> ToolResult:
    """What a delegate call returns once its child has ended: its result, or an error (never an empty success)."""
    if child.status == SessionStatus.DONE and not child.error and not (child.result or "").strip():
        return ToolResult.fail(NO_RESULT)
    if child.status == SessionStatus.DONE and not child.error:
        return ToolResult.ok(child.result or "")
    if child.status == SessionStatus.DONE:
        return ToolResult.fail(f"the child {child.error}; what it said last: {child.result or '(nothing)'}")
    return ToolResult.fail(f"the child did not finish ({child.status.value}): "
                           f"{child.result or child.error or 'no reason'}")  # fmt: skip

"""One turn's tool calls, dispatched: each pending call run (or held for approval, or refused by the budgets) in
call order, its response stored with the position of the call it answers, then the turn settled (``Pauses``: a
pause for a question, approvals, children, a parent's answer or several at once). How a paused turn resumes is
``shared.agent.resume``. The dispatcher names no tool: what a call waits on comes from its outcome.
"""

from __future__ import annotations

import logging

from shared.agent import presenting
from shared.agent.calls import ToolCalls
from shared.agent.pausing import Pauses, Ran
from shared.agent.run_state import RunState
from shared.agent.tools.base import Outcome, Suspend, Wait
from shared.agent.tools.result import ToolResult
from shared.agent.transcript import PendingTurn, Responses
from shared.asks import tree_status
from shared.limits import per_call_chars
from shared.state import ledger
from shared.state.models import Audit, Waiting, WaitKind

log = logging.getLogger(__name__)


class ToolTurn:
    """Runs the pending calls of a turn and settles it."""

    def __init__(self, run: RunState, calls: ToolCalls, pauses: Pauses) -> None:
        self.run = run
        self.calls = calls
        self.pauses = pauses

    def run_tools(self, turn: PendingTurn) -> bool:
        """Run the pending calls and persist their responses; True if the session paused (a blocking question, or
        risky calls waiting for approval). Ids come from the model step and each call's index in it, so a turn
        re-run after a crash finds its questions, approvals and ledger entries again."""
        run, seq = self.run, turn.seq
        responses = Responses()
        audit: list[Audit] = []
        suspended: list[tuple[int, Suspend]] = []  # the calls that wait on an operator question, each its own
        used = run.session.limits.tool_calls
        per_call = per_call_chars(len(turn.calls))  # a step stays under 1 MiB
        # A takeover may re-run a turn whose calls partly ran: the ledger says which.
        recorded = ledger.entries(run.session, seq, [i for i, _ in turn.calls]) if run.replaying() else {}
        held = self.calls.held(turn)
        asked = presenting.asked(run.tools, held)
        oversized = presenting.oversized(held, asked)  # never shown, never run: the model makes a smaller call
        oversized |= presenting.undecidable(run.session, run.surface, seq, [h for h in held if h[0] not in oversized])
        held = [h for h in held if h[0] not in oversized]
        record: list[Waiting] = []  # the blocking children this turn started, its question to its parent
        for index, call in turn.calls:
            name = call.name or ""
            if any(h[0] == index for h in held):
                continue  # waits for an operator's decision: no response yet
            ctx = self.calls.context(seq, index, call)
            outcome: Outcome
            run.keep_lease()
            refused = oversized.get(index) or self.calls.refusal(used)
            if refused is not None:
                outcome = refused
            else:
                outcome = self.calls.shown(f"{seq}.{index}", name, call, ctx, recorded.get(index))
                used += 1
                run.used[name] += 1
            if isinstance(outcome, ToolResult):
                outcome = outcome.capped(per_call)
            audit.append(self.calls.audit(name, call, outcome, ctx))
            if isinstance(outcome, Wait):  # no response: the child's result (or the parent's answer) will be it
                record.append(Waiting(seq, index, WaitKind.CHILD if outcome.child else WaitKind.PARENT_ANSWER,
                                      outcome.key))  # fmt: skip
                continue
            if isinstance(outcome, Suspend):  # no function response: the operator's answer will be it
                suspended.append((index, outcome))
                continue
            responses.add(seq, index, call, outcome)
        if any((tool := run.tools.get(call.name or "")) is not None and tool.starts_children for _, call in turn.calls):
            # The thread sees the tasks it started; before the turn is stored, so a takeover finds this post.
            run.record_calls()  # (after the calls' results are recorded, as before any other work)
            tree_status.refresh(run.session, run.surface)
        record.extend(_question_wait(seq, index, pause) for index, pause in suspended)
        return self.pauses.settle(held, record, Ran(seq, responses, audit, used), asked=asked)


def _question_wait(seq: int, index: int, pause: Suspend) -> Waiting:
    """The wait of a call suspended on an operator question: an ask, or an MCP server's request for input."""
    kind = WaitKind.MCP_INPUT if pause.question.mcp_input else WaitKind.QUESTION
    return Waiting(seq, index, kind, pause.question.question_id)

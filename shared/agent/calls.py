"""One tool call: its context, its tier, whether the budgets let it run, the call itself (through the ledger when its
tool is outward or not idempotent: flow 8), how the thread sees it run, and its audit record.

``ToolCalls`` is used by the turn's dispatcher (``ToolTurn``) and by the resumptions (``Resumer``: an approved
call, an MCP call run again with the operator's input); it names no tool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from google.genai import types

from shared import config
from shared.agent import activity, prompts
from shared.agent.run_state import RunState
from shared.agent.tools import policy
from shared.agent.tools.base import Outcome, Suspend, Tier, ToolContext, short
from shared.agent.tools.result import ToolResult
from shared.agent.transcript import PendingTurn
from shared.asks import questions
from shared.asks.approvals import Held
from shared.slack import blocks
from shared.state import ids, ledger
from shared.state import questions as stored_questions
from shared.state.firestore import now
from shared.state.models import Audit, AuditType

log = logging.getLogger(__name__)


class ToolCalls:
    """Runs single calls of the run's tools."""

    def __init__(self, run: RunState) -> None:
        self.run = run

    def context(self, seq: int, index: int, call: types.FunctionCall, caller: str = "") -> ToolContext:
        run = self.run
        return ToolContext(run.session, seq, index, call.id, run.surface, used=run.used,
                           thread_text=run.thread_text(), caller_id=caller)  # fmt: skip

    def held(self, turn: PendingTurn) -> list[Held]:
        """The calls whose tier is ``approve``: they run only after an operator approves each exact call."""
        held: list[Held] = []
        for index, call in turn.calls:
            spec = self.run.tools.get(call.name or "")
            args = dict(call.args or {})
            if spec is not None and policy.call_tier(spec, args, self.context(turn.seq, index, call)) == Tier.APPROVE:
                held.append(Held(index, call.id, spec.name, args))
        return held

    def refusal(self, used: int) -> ToolResult | None:
        """Why this call is not made, if it is not: the budgets."""
        if used >= self.run.budget.max_tool_calls:
            return ToolResult.fail("tool budget exhausted; wrap up without more tools")
        if self.run.budget.time_left() <= 0:
            return ToolResult.fail("out of time: this call was not made; wrap up without more tools")
        return None

    def shown(self, task_id: str, name: str, call: types.FunctionCall, ctx: ToolContext,
              entry: ledger.Entry | None) -> Outcome:  # fmt: skip
        """A call, shown while it runs: on the status line, and as a task card where the answer streams."""
        surface = self.run.surface
        surface.doing(activity.doing(name, call.args))
        card = activity.task(name, call.args)
        if card is not None:
            surface.step(task_id, card[0], sources=card[1])
        outcome = self.call(name, call, ctx, entry)
        surface.step_done(task_id, failed=isinstance(outcome, ToolResult) and outcome.failed)
        return outcome

    def call(self, name: str, call: types.FunctionCall, ctx: ToolContext, entry: ledger.Entry | None, *,
             run: Callable[[], Outcome] | None = None, part: str = "") -> Outcome:  # fmt: skip
        """One call, through the ledger when its tool is outward or not idempotent (flow 8): ``started`` committed
        before it runs, ``done`` left to the run's next commit (``RunState.unrecorded``: the step that carries its
        response, or the next ledger call's start). ``run`` and ``part`` are a later round of the call (an MCP call
        resumed with the operator's input), with its own ledger entry."""
        state, session, tools = self.run, self.run.session, self.run.tools
        run = run or (lambda: tools.run(name, call.args, ctx))
        spec = tools.get(name)
        if spec is None or not (spec.outward or not spec.idempotent):
            state.record_calls()  # the earlier calls' results are recorded before a call outside the ledger runs
            return run()
        if entry is not None and entry.status == ledger.CallStatus.DONE and entry.response is not None:
            return ToolResult.from_dict(entry.response)  # it ran to the end before the crash: its result stands
        if entry is not None and not spec.idempotent:
            asked = _asked_before(ctx, part)
            if asked is not None:  # the call had come back asking the operator: it waits on that question again
                return asked
            self._tell_outcome_unknown(name, call, ctx)
            return ToolResult.fail(prompts.OUTCOME_UNKNOWN)
        if entry is None:  # its start, with the results of the calls that ran before it (one commit)
            ledger.start(session, seq=ctx.seq, index=ctx.call_index, key=ctx.idempotency_key, name=name,
                         args=short(call.args, 2000), part=part, done=state.unrecorded)  # fmt: skip
            state.unrecorded = []
        outcome = run()  # an idempotent call re-runs with the same key
        if isinstance(outcome, ToolResult):  # recorded with the step that carries it (or the next call's start)
            state.unrecorded.append(ledger.finished(session, seq=ctx.seq, index=ctx.call_index,
                                                    response=outcome.to_dict(), part=part))  # fmt: skip
        return outcome

    def audit(self, name: str, call: types.FunctionCall, outcome: Outcome, ctx: ToolContext) -> Audit:
        """The call's audit record: its arguments, and its result (or, for a call that waits, what it said)."""
        spec = self.run.tools.get(name)
        response = outcome.to_dict() if isinstance(outcome, ToolResult) else outcome.response
        # A failed outward call is outward work too: the requester still expects to hear how it went.
        return Audit(AuditType.TOOL, now(), name=name, args=short(call.args), result=short(response),
                     outward=bool(spec and spec.outward), posts=ctx.post_ts)  # fmt: skip

    def _tell_outcome_unknown(self, name: str, call: types.FunctionCall, ctx: ToolContext) -> None:
        operators = blocks.operator_mentions(config.settings().operator_user_ids)
        text = (
            f":warning: {operators}: I was restarted while `{name}` was running, and I cannot tell whether it "
            f"happened, so I did not run it again. Its arguments: `{short(call.args, 500)}`. Please check."
        )
        self.run.surface.post(text, key=ctx.post_key(":unknown"), for_operators=True)
        log.warning("a started call's outcome is unknown; not run again", extra={"tool": name})


def _asked_before(ctx: ToolContext, part: str) -> Suspend | None:
    """The operator question a started call's round asked before a crash, if it did: an MCP server's request for the
    operator's input, whose question is written (keyed by the call and its round) only once the server answered so.
    That round ran nothing on the server; it waits on its question, as it did before the crash. None: it asked none,
    and its outcome is unknown."""
    asked_round = int(part.removeprefix("-r")) + 1 if part else 1  # a resumed round ``-rN`` asks question N + 1
    question_id = ids.question_id(ctx.session.session_id, ctx.seq, ctx.call_index, asked_round)
    question = stored_questions.get_question(question_id)
    if question is None or question.mcp_input is None:
        return None
    log.warning("a started call had asked the operator for input; it waits on that question",
                extra={"question_id": question_id})  # fmt: skip
    # Shown as a retried ask shows it: posted if the crash came before its post (its key: never twice), its 💬 added.
    shown = questions.ask(ctx.session, seq=ctx.seq, call_index=ctx.call_index, call_id=ctx.call_id,
                          question=question.text, options=question.options, blocking=question.blocking,
                          surface=ctx.surface, mcp_input=question.mcp_input, link=question.link,
                          round=asked_round)  # fmt: skip
    return Suspend(shown, {"status": "waiting for the operator's input", "question": question.text})

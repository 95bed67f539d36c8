"""One turn's tool calls: tiers, the ledger, and the pause for a question, approvals, children or a parent's
answer (how a paused turn resumes is ``shared.agent.resume``). Every response is stored with the position of the
call it answers.

``ToolTurns`` is the part of the ``Runner`` that runs calls; it relies on the runner's session, steps, toolset,
surface and commit.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from google.genai import types

from shared import config
from shared.agent import activity, presenting, prompts
from shared.agent.budget import Budget
from shared.agent.opening import answer_content
from shared.agent.resume import Resumptions, capped_response
from shared.agent.tools import policy
from shared.agent.tools.base import Outcome, Suspend, Tier, ToolContext, Wait, short
from shared.agent.tools.toolset import Toolset
from shared.agent.transcript import PendingTurn, Responses, contents_of, pending_turn
from shared.asks import approvals, delegation, tree_status
from shared.asks.approvals import Held
from shared.limits import MAX_STEP_CHARS, MAX_TOOL_RESULT_CHARS
from shared.slack import blocks
from shared.slack.surface import ThreadSurface
from shared.state import children as stored_children
from shared.state import ledger, steps
from shared.state import questions as stored
from shared.state.firestore import now
from shared.state.models import (
    Audit,
    AuditType,
    Session,
    SessionStatus,
    Step,
    StepKind,
    Waiting,
    WaitKind,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Ran:
    """What a turn's calls came to: the model step, the responses, their audit and the session's tool calls."""

    seq: int
    responses: Responses
    audit: list[Audit]
    used: int


class ToolTurns(Resumptions):
    session: Session
    steps: list[Step]
    tools: Toolset
    surface: ThreadSurface
    budget: Budget
    used: Counter[str]
    takeover: bool

    def _commit(self, kind: StepKind, content: types.Content | Responses | None, audit: list[Audit],
                **kw: Any) -> Step:  # fmt: skip
        raise NotImplementedError

    def _keep_lease(self) -> None:
        raise NotImplementedError

    # --- a turn's calls ----------------------------------------------------------------------------------------
    def _run_tools(self, turn: PendingTurn) -> bool:
        """Run the pending calls and persist their responses; True if the session paused (a blocking question, or
        risky calls waiting for approval). Ids come from the model step and each call's index in it, so a turn
        re-run after a crash finds its questions, approvals and ledger entries again."""
        seq = turn.seq
        responses = Responses()
        audit: list[Audit] = []
        pause: Suspend | None = None
        pause_call = turn.calls[0]
        used = self.session.tool_calls
        # A step stays well under 1 MiB.
        per_call = min(MAX_TOOL_RESULT_CHARS, MAX_STEP_CHARS // max(1, len(turn.calls)))
        # A takeover may re-run a turn whose calls partly ran: the ledger says which.
        recorded = ledger.entries(self.session, seq, [i for i, _ in turn.calls]) if self._replaying() else {}
        held = self._held(turn)
        asked = presenting.asked(self.tools, held)
        oversized = presenting.oversized(held, asked)  # never shown, never run: the model makes a smaller call
        oversized |= presenting.undecidable(self.session, self.surface, seq, [h for h in held if h[0] not in oversized])
        held = [h for h in held if h[0] not in oversized]
        record: list[Waiting] = []  # the blocking children this turn started, its question to its parent
        for index, call in turn.calls:
            name = call.name or ""
            if any(h[0] == index for h in held):
                continue  # waits for an operator's decision: no response yet
            ctx = self._context(seq, index, call)
            outcome: Outcome
            self._keep_lease()
            refused = oversized.get(index) or self._refusal(used)
            if refused is not None:
                outcome = refused
            else:
                outcome = self._shown_call(f"{seq}.{index}", name, call, ctx, recorded.get(index))
                used += 1
                self.used[name] += 1
            response = outcome.response if isinstance(outcome, Suspend | Wait) else capped_response(outcome, per_call)
            audit.append(self._tool_audit(name, call, response, ctx))
            if isinstance(outcome, Wait):  # no response: the child's result (or the parent's answer) will be it
                record.append(Waiting(seq, index, WaitKind.CHILD if outcome.child else WaitKind.PARENT_ANSWER,
                                      outcome.key))  # fmt: skip
                continue
            if isinstance(outcome, Suspend):
                if pause is not None:  # a second blocking ask in one turn cancelled the first
                    cancelled = {"result": {"status": "cancelled", "note": "A newer question replaces this one."}}
                    responses.add(seq, *pause_call, cancelled)
                pause, pause_call = outcome, (index, call)  # no function response: the operator's answer will be it
                continue
            responses.add(seq, index, call, response)
        if any(call.name == delegation.STARTS_CHILDREN for _, call in turn.calls):
            # The thread sees the tasks it started; before the turn is stored, so a takeover finds this post.
            tree_status.refresh(self.session, self.surface)
        if pause is not None:
            record.append(_question_wait(seq, pause_call[0], pause))
        return self._settle(held, record, pause, _Ran(seq, responses, audit, used), asked=asked)

    def _settle(self, held: list[Held], record: list[Waiting], pause: Suspend | None, ran: _Ran, *,
                asked: dict[int, approvals.Asked]) -> bool:  # fmt: skip
        """Store the turn's responses, pausing on what its calls wait for: one kind of thing through its own
        pause, several kinds (approvals, a question, children, the parent's answer, MCP input) on one waiting
        record. True if the session paused."""
        content, audit, used = ran.responses, ran.audit, ran.used
        if held and record:  # a turn that waits on several kinds of things pauses once, on its waiting record
            return self._pause_mixed(held, record, ran, asked=asked)
        if held:
            return self._pause_for_approvals(ran.seq, held, content, audit, used, asked=asked)
        if len({w.kind for w in record}) > 1 or sum(w.kind == WaitKind.PARENT_ANSWER for w in record) > 1:
            return self._pause_mixed([], record, ran)
        children = [w.key for w in record if w.kind == WaitKind.CHILD]
        if children:
            return self._pause_for_children(children, content, audit, used)
        parent = [w.key for w in record if w.kind == WaitKind.PARENT_ANSWER]
        if parent:
            return self._pause_for_parent(parent[0], content, audit, used)
        if pause is None:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            return False
        return self._pause_for_question(pause, content, audit, used)

    def _shown_call(self, task_id: str, name: str, call: types.FunctionCall, ctx: ToolContext,
                    entry: ledger.Entry | None) -> Outcome:  # fmt: skip
        """A call, shown while it runs: on the status line, and as a task card where the answer streams."""
        self.surface.doing(activity.doing(name, call.args))
        card = activity.task(name, call.args)
        if card is not None:
            self.surface.step(task_id, card[0], sources=card[1])
        outcome = self._call(name, call, ctx, entry)
        self.surface.step_done(task_id, failed=isinstance(outcome, dict) and "error" in outcome)
        return outcome

    def _refusal(self, used: int) -> dict[str, Any] | None:
        """Why this call is not made, if it is not: the budgets."""
        if used >= self.budget.max_tool_calls:
            return {"error": "tool budget exhausted; wrap up without more tools"}
        if self.budget.time_left() <= 0:
            return {"error": "out of time: this call was not made; wrap up without more tools"}
        return None

    def _context(self, seq: int, index: int, call: types.FunctionCall, caller: str = "") -> ToolContext:
        return ToolContext(self.session, seq, index, call.id, self.surface, used=self.used,
                           thread_text=self._thread_text(), caller_id=caller)  # fmt: skip

    def _thread_text(self) -> str:
        """What the thread said when the transcript opened (its first prompt), for the policy's host rule."""
        first = next((s for s in self.steps if s.kind == StepKind.PROMPT and s.content), None)
        return _text_of(contents_of([first])[0]) if first else ""

    def _held(self, turn: PendingTurn) -> list[Held]:
        """The calls whose tier is ``approve``: they run only after an operator approves each exact call."""
        held: list[Held] = []
        for index, call in turn.calls:
            spec = self.tools.get(call.name or "")
            args = dict(call.args or {})
            if spec is not None and policy.call_tier(spec, args, self._context(turn.seq, index, call)) == Tier.APPROVE:
                held.append(Held(index, call.id, spec.name, args))
        return held

    def _tool_audit(self, name: str, call: types.FunctionCall, response: dict[str, Any], ctx: ToolContext) -> Audit:
        spec = self.tools.get(name)
        # A failed outward call is outward work too: the requester still expects to hear how it went.
        return Audit(AuditType.TOOL, now(), name=name, args=short(call.args), result=short(response),
                     outward=bool(spec and spec.outward), posts=ctx.post_ts)  # fmt: skip

    def _pause_for_question(self, pause: Suspend, content: Responses | None, audit: list[Audit], used: int) -> bool:
        question_id = pause.question.question_id
        try:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on=question_id,
                         status=SessionStatus.PAUSED.value, question_id=question_id, ended_at=now())  # fmt: skip
        except steps.AnsweredMeanwhile as meanwhile:
            # Answered while this turn ran: the answer is the pending call's response, and the session goes on.
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            answered = stored.get_question(question_id) or pause.question
            if answered.mcp_input:  # an MCP server's request: the answer resumes that call
                return self._resume_input(answered, consumed=[meanwhile.note])
            answer = answer_content(answered, self.steps)
            self._commit(StepKind.ANSWER, answer, [Audit(AuditType.ANSWER, now())], consumed=[meanwhile.note])
            log.info("question answered before the session paused; going on", extra={"question_id": question_id})
            return False
        self.surface.paused()
        log.info("session paused for the operator", extra={"question_id": question_id})
        return True

    def _pause_for_approvals(self, seq: int, held: list[Held], content: Responses | None, audit: list[Audit],
                             used: int, *, asked: dict[int, approvals.Asked] | None = None) -> bool:  # fmt: skip
        """Record the held calls and post their cards, then pause, unless every one was decided meanwhile."""
        self.surface.doing(activity.APPROVAL)
        requested = approvals.request(self.session, seq, held, self.surface, asked=asked)
        approval_ids = [a.approval_id for a in requested]
        try:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_all=approval_ids,
                         status=SessionStatus.PAUSED.value, approval_ids=approval_ids, ended_at=now())  # fmt: skip
        except steps.AnsweredMeanwhile as meanwhile:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            return self._resume_approvals(approval_ids, consumed=meanwhile.notes)
        self.surface.paused()
        log.info("session paused for approvals", extra={"approvals": approval_ids})
        return True

    def _pause_for_children(self, child_ids: list[str], content: Responses | None, audit: list[Audit],
                            used: int, *, launch: bool = True) -> bool:  # fmt: skip
        """Start the turn's blocking children, then pause until all have ended, unless they ended meanwhile."""
        if launch:
            delegation.launch(child_ids)
        try:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_children=child_ids,
                         status=SessionStatus.PAUSED.value, child_ids=child_ids, ended_at=now())  # fmt: skip
        except steps.ChildrenEnded:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            self._resume_children(child_ids)
            return False
        except steps.ChildAsked:  # as if the question had interrupted the wait: read it, the children go on
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            stored_children.release(self.session, child_ids)
            turn = pending_turn(self.steps)  # its delegate calls get "still running" (none when it settles)
            if turn is not None:
                self.session.released_seq = turn.seq
                self._release_children()
            return False
        self.surface.paused()
        log.info("session paused for its children", extra={"children": child_ids})
        return True

    def _pause_mixed(self, held: list[Held], record: list[Waiting], ran: _Ran, *,
                     asked: dict[int, approvals.Asked] | None = None) -> bool:  # fmt: skip
        """A turn that waits on several kinds of things (approvals, a question, children, its parent's answer, an
        MCP server's input request): the cards posted and the children started, it pauses once on its waiting
        record, unless everything in it was resolved meanwhile."""
        if held:
            self.surface.doing(activity.APPROVAL)
            requested = approvals.request(self.session, ran.seq, held, self.surface, asked=asked)
            record = [*record, *(Waiting(ran.seq, a.call_index, WaitKind.APPROVAL, a.approval_id) for a in requested)]
        children = [w.key for w in record if w.kind == WaitKind.CHILD]
        if children:
            delegation.launch(children)
        return self._pause_on_record(sorted(record, key=lambda w: w.index), ran.responses, ran.audit, ran.used)

    def _pause_on_record(self, record: list[Waiting], content: Responses | None, audit: list[Audit],
                         used: int) -> bool:  # fmt: skip
        """Pause on this waiting record (True); or, if it was resolved while the turn ran, resume in place."""
        try:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_record=record,
                         status=SessionStatus.PAUSED.value, ended_at=now())  # fmt: skip
        except steps.WaitsResolved:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            return self._resume_record(record)
        except steps.ChildAsked:  # a child of this turn asked meanwhile: the turn no longer waits on its children
            children = [w.key for w in record if w.kind == WaitKind.CHILD and not w.released]
            stored_children.release(self.session, children)
            released = [replace(w, released=True) if w.kind == WaitKind.CHILD else w for w in record]
            return self._pause_on_record(released, content, audit, used)
        self.surface.paused()
        log.info("session paused on its waiting record", extra={"waits": [f"{w.kind.value}:{w.key}" for w in record]})
        return True

    def _pause_for_parent(self, question_id: str, content: Responses | None, audit: list[Audit],
                          used: int) -> bool:  # fmt: skip
        """A child's blocking question to its parent: pause until the answer, unless it came meanwhile."""
        try:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on=question_id,
                         status=SessionStatus.PAUSED.value, ended_at=now())  # fmt: skip
        except steps.AnsweredMeanwhile as meanwhile:
            self._commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            self._resume_parent_answer(consumed=meanwhile.notes)
            return False
        log.info("child paused for its parent's answer", extra={"question": question_id})
        return True

    def _replaying(self) -> bool:
        """True once per run, for the first turn a takeover runs tools for (the one the dead worker was in)."""
        replaying, self.takeover = self.takeover, False
        return replaying

    def _call(self, name: str, call: types.FunctionCall, ctx: ToolContext, entry: ledger.Entry | None, *,
              run: Callable[[], Outcome] | None = None, part: str = "") -> Outcome:  # fmt: skip
        """One call, through the ledger when its tool is outward or not idempotent (flow 8). ``run`` and ``part``
        are a later round of the call (an MCP call resumed with the operator's input), with its own ledger entry."""
        run = run or (lambda: self.tools.run(name, call.args, ctx))
        spec = self.tools.get(name)
        if spec is None or not (spec.outward or not spec.idempotent):
            return run()
        if entry is not None and entry.status == ledger.CallStatus.DONE and entry.response is not None:
            return entry.response  # it ran to the end before the crash: its response stands
        if entry is not None and not spec.idempotent:
            self._tell_outcome_unknown(name, call, ctx)
            return {"error": prompts.OUTCOME_UNKNOWN}
        if entry is None:
            ledger.start(self.session, seq=ctx.seq, index=ctx.call_index, key=ctx.idempotency_key, name=name,
                         args=short(call.args, 2000), part=part)  # fmt: skip
        outcome = run()  # an idempotent call re-runs with the same key
        if not isinstance(outcome, Suspend | Wait):
            ledger.done(self.session, seq=ctx.seq, index=ctx.call_index, response=outcome, part=part)
        return outcome

    def _tell_outcome_unknown(self, name: str, call: types.FunctionCall, ctx: ToolContext) -> None:
        operators = blocks.operator_mentions(config.settings().operator_user_ids)
        text = (
            f":warning: {operators}: I was restarted while `{name}` was running, and I cannot tell whether it "
            f"happened, so I did not run it again. Its arguments: `{short(call.args, 500)}`. Please check."
        )
        self.surface.post(text, key=ctx.post_key(":unknown"), for_operators=True)
        log.warning("a started call's outcome is unknown; not run again", extra={"tool": name})


def _question_wait(seq: int, index: int, pause: Suspend) -> Waiting:
    """The wait of a call suspended on an operator question: an ask, or an MCP server's request for input."""
    kind = WaitKind.MCP_INPUT if pause.question.mcp_input else WaitKind.QUESTION
    return Waiting(seq, index, kind, pause.question.question_id)


def _text_of(content: types.Content) -> str:
    return "".join(p.text or "" for p in content.parts or [] if p.text and not p.thought)

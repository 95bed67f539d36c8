"""One turn's tool calls: tiers, the ledger, the pause for a question or for approvals, and the resumption of a
turn whose risky calls were decided.

``ToolTurns`` is the part of the ``Runner`` that runs calls; it relies on the runner's session, steps, toolset,
surface and commit.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from google.genai import types

from shared import config
from shared.agent import activity, presenting, prompts
from shared.agent.budget import Budget
from shared.agent.opening import answer_content
from shared.agent.tools import policy
from shared.agent.tools.base import Outcome, Suspend, Tier, ToolContext, Wait, short
from shared.agent.tools.mcp.inputs import Pending as McpPending
from shared.agent.tools.mcp.tool import McpTool
from shared.agent.tools.toolset import Toolset
from shared.agent.transcript import PendingTurn, contents_of, pending_turn
from shared.asks import approvals, delegation, tree_status
from shared.limits import MAX_STEP_CHARS, MAX_TOOL_RESULT_CHARS, capped
from shared.slack import blocks
from shared.slack.surface import ThreadSurface
from shared.state import approvals as stored_approvals
from shared.state import children as stored_children
from shared.state import ids, ledger, steps
from shared.state import questions as stored
from shared.state.firestore import now
from shared.state.models import (
    Approval,
    ApprovalStatus,
    Audit,
    AuditType,
    Note,
    Question,
    Session,
    SessionKind,
    SessionStatus,
    Step,
    StepKind,
)

log = logging.getLogger(__name__)

Held = tuple[int, str | None, str, dict[str, Any]]  # (call index, call id, tool, arguments)


class ToolTurns:
    session: Session
    steps: list[Step]
    tools: Toolset
    surface: ThreadSurface
    budget: Budget
    used: Counter[str]
    takeover: bool

    def _commit(self, kind: StepKind, content: types.Content | None, audit: list[Audit], **kw: Any) -> Step:
        raise NotImplementedError

    def _keep_lease(self) -> None:
        raise NotImplementedError

    # --- a turn's calls ----------------------------------------------------------------------------------------
    def _run_tools(self, turn: PendingTurn) -> bool:
        """Run the pending calls and persist their responses; True if the session paused (a blocking question, or
        risky calls waiting for approval). Ids come from the model step and each call's index in it, so a turn
        re-run after a crash finds its questions, approvals and ledger entries again."""
        seq = turn.seq
        parts: list[types.Part] = []
        audit: list[Audit] = []
        pause: Suspend | None = None
        pause_call = turn.calls[0][1]
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
        waits: list[Wait] = []  # the blocking children this turn started, or its blocking question to its parent
        delegating = any(c.name == "delegate" and _blocking(c) for _, c in turn.calls)
        for index, call in turn.calls:
            name = call.name or ""
            if any(h[0] == index for h in held):
                continue  # waits for an operator's decision: no response yet
            ctx = self._context(seq, index, call)
            outcome: Outcome
            self._keep_lease()
            refused = oversized.get(index) or self._refusal(name, call, held=bool(held), delegating=delegating,
                                                            used=used)  # fmt: skip
            if refused is not None:
                outcome = refused
            else:
                outcome = self._shown_call(f"{seq}.{index}", name, call, ctx, recorded.get(index))
                used += 1
                self.used[name] += 1
            response = outcome.response if isinstance(outcome, Suspend | Wait) else capped_response(outcome, per_call)
            audit.append(self._tool_audit(name, call, response, ctx))
            if isinstance(outcome, Wait):
                waits.append(outcome)  # no function response: the child's result (or the parent's answer) will be it
                continue
            if isinstance(outcome, Suspend):
                if pause is not None:  # a second blocking ask in one turn cancelled the first
                    cancelled = {"result": {"status": "cancelled", "note": "A newer question replaces this one."}}
                    parts.append(_response(pause_call, cancelled))
                pause, pause_call = outcome, call  # no function response: the operator's answer will be it
                continue
            parts.append(_response(call, response))
        if any(call.name == "delegate" for _, call in turn.calls):
            # The thread sees the tasks it started; before the turn is stored, so a takeover finds this post.
            tree_status.refresh(self.session, self.surface)
        content = types.Content(role="user", parts=parts) if parts else None
        if held:
            return self._pause_for_approvals(seq, held, content, audit, used, asked=asked)
        children = [w.key for w in waits if w.child]
        if children:
            return self._pause_for_children(children, content, audit, used)
        if waits:
            return self._pause_for_parent(waits[0].key, content, audit, used)
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

    def _refusal(self, name: str, call: types.FunctionCall, *, held: bool, delegating: bool,
                 used: int) -> dict[str, Any] | None:  # fmt: skip
        """Why this call is not made, if it is not: one turn waits for one kind of thing, and the budgets."""
        if held and _blocking(call) and name in {"ask_operator", "delegate"}:
            return {"error": f"{name} cannot wait in the same turn as calls awaiting approval; call it again after "
                             "they are decided"}  # fmt: skip
        if delegating and _blocking(call) and name in {"ask_operator", "ask_parent"}:
            return {"error": f"{name} cannot wait in the same turn as blocking delegate calls; ask again once "
                             "their results are in"}  # fmt: skip
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
                held.append((index, call.id, spec.name, args))
        return held

    def _tool_audit(self, name: str, call: types.FunctionCall, response: dict[str, Any], ctx: ToolContext) -> Audit:
        spec = self.tools.get(name)
        # A failed outward call is outward work too: the requester still expects to hear how it went.
        return Audit(AuditType.TOOL, now(), name=name, args=short(call.args), result=short(response),
                     outward=bool(spec and spec.outward), posts=ctx.post_ts)  # fmt: skip

    def _pause_for_question(self, pause: Suspend, content: types.Content | None, audit: list[Audit], used: int) -> bool:
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

    def _pause_for_approvals(self, seq: int, held: list[Held], content: types.Content | None, audit: list[Audit],
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

    def _pause_for_children(self, child_ids: list[str], content: types.Content | None, audit: list[Audit],
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

    def _pause_for_parent(self, question_id: str, content: types.Content | None, audit: list[Audit],
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

    def _resume_parent_answer(self, *, consumed: list[Note] | None = None) -> None:
        """The parent's answer is the response of the blocking ask_parent call that waited for it."""
        fresh = stored_children.get_children([self.session.session_id])
        asked = fresh[0].parent_question if fresh else None
        turn = pending_turn(self.steps)
        pending = dict(turn.calls) if turn is not None and asked is not None and turn.seq == asked.seq else {}
        call = pending.get(asked.index) if asked is not None else None
        parts = []
        if asked is not None and call is not None:
            answer = {"answer": asked.answer, "from": "the session that delegated your task"}
            parts.append(_response(call, {"result": answer}))
        content = types.Content(role="user", parts=parts) if parts else None
        self._commit(StepKind.ANSWER, content, [Audit(AuditType.ANSWER, now())], consumed=consumed or [])

    def _release_children(self) -> None:
        """A child's question interrupted this session's wait for its children: the waiting delegate calls get
        "still running" responses, and each remaining result reaches it as a note (ended ones already did)."""
        turn = pending_turn(self.steps)
        parts = []
        if turn is not None and turn.seq == self.session.released_seq:
            for index, call in turn.calls:
                child_id = ids.child_id(self.session.session_id, turn.seq, index)
                note = "A child asked you a question, so you no longer wait: its result reaches you as a note."
                parts.append(_response(call, {"result": {"status": "still running", "child_id": child_id,
                                                         "note": note}}))  # fmt: skip
        content = types.Content(role="user", parts=parts) if parts else None
        self._commit(StepKind.TOOL_RESULTS, content, [], released_seq=None)

    def _resume_children(self, child_ids: list[str], *, consumed: list[Note] | None = None) -> None:
        """The ended children of one turn: each result is the response of the delegate call that started it (a
        child that failed or ran out of budget is an error response, never silence). One step holds them all."""
        ended = sorted(stored_children.get_children(child_ids), key=lambda c: c.delegate_index or 0)
        turn = pending_turn(self.steps)
        seq = ended[0].delegate_seq if ended else -1
        pending = dict(turn.calls) if turn is not None and turn.seq == seq else {}
        parts: list[types.Part] = []
        audit: list[Audit] = []
        if turn is None:  # it waited before reporting, its calls answered long ago: their results are news
            news = [stored_children.result_note(child) for child in ended]
            parts.append(types.Part(text=prompts.notes_text(news)))
        for child in ended:
            call = pending.get(child.delegate_index if child.delegate_index is not None else -1)
            if call is None:
                continue  # its response is already in the transcript (a re-run after a crash)
            response = capped_response(child_response(child), MAX_TOOL_RESULT_CHARS)
            audit.append(Audit(AuditType.TOOL, now(), name="delegate", args=short(call.args), result=short(response)))
            parts.append(_response(call, response))
        content = types.Content(role="user", parts=parts) if parts else None
        self._commit(StepKind.ANSWER, content, audit, consumed=consumed or [], child_ids=[])
        tree_status.refresh(self.session, self.surface)  # whatever order the children's own refreshes landed in

    def _resume_approvals(self, approval_ids: list[str], *, consumed: list[Note] | None = None) -> bool:
        """The decided calls of one turn: each approved one runs once through the ledger, with exactly the shown
        arguments; a denied or expired one gets an error response. One step holds them all. True if the session
        paused again: an approved MCP call whose server asked for input (its question's answer resumes it)."""
        decided = sorted(stored_approvals.get_approvals(approval_ids), key=lambda a: a.call_index)
        turn = pending_turn(self.steps)
        seq = decided[0].seq if decided else -1
        # By position in the turn that made them: calls need not have ids, and two may be alike.
        pending = dict(turn.calls) if turn is not None and turn.seq == seq else {}
        recorded = ledger.entries(self.session, seq, [a.call_index for a in decided])
        parts: list[types.Part] = []
        audit: list[Audit] = []
        pause: Suspend | None = None
        for approval in decided:
            call = pending.get(approval.call_index)
            audit.append(Audit(AuditType.APPROVAL, now(), name=approval.tool, args=approval.digest,
                               result=approval.status.value, text=approval.decided_by))  # fmt: skip
            if call is None:
                continue  # its response is already in the transcript (a re-run after a crash)
            decided_outcome = self._decided_response(approval, call, seq, recorded.get(approval.call_index))
            response = decided_outcome.response if isinstance(decided_outcome, Suspend) else decided_outcome
            audit.append(self._tool_audit(approval.tool, call, response, self._context(seq, approval.call_index, call)))
            if isinstance(decided_outcome, Suspend) and pause is None:
                pause = decided_outcome  # no function response: the operator's answer resumes the call
                continue
            parts.append(_response(call, response))
        content = types.Content(role="user", parts=parts) if parts else None
        self._commit(StepKind.ANSWER, content, audit, consumed=consumed or [], approval_ids=[])
        return pause is not None and self._pause_for_question(pause, None, [], self.session.tool_calls)

    def _decided_response(self, approval: Approval, call: types.FunctionCall, seq: int,
                          entry: ledger.Entry | None) -> dict[str, Any] | Suspend:  # fmt: skip
        if approval.status == ApprovalStatus.DENIED:
            reason = approval.reason or "no reason given"
            return {"error": f"denied by <@{approval.decided_by}>: {reason}. It did not run; another call needs its "
                             "own approval."}  # fmt: skip
        if approval.status != ApprovalStatus.APPROVED:
            return {"error": f"the approval {approval.status.value}; the call did not run"}
        # Bound to the exact call: the same tool, the same canonical arguments, still pending in this transcript.
        args = dict(call.args or {})
        if call.name != approval.tool or approvals.digest(approval.tool, approvals.canonical(args)) != approval.digest:
            approvals.update_card(approval, ":no_entry_sign: not run: the pending call is not the one approved")
            return {"error": "not run: the pending call is not the call that was approved"}
        runs = approvals.effective_args(approval)  # an operator's edit runs instead, bound by its own digest
        if runs is None:
            return {"error": "not run: the edited call does not match its approval"}
        ctx = self._context(seq, approval.call_index, call, caller=approval.session_id)
        approvals.update_card(approval, approvals.running_verdict(approval))  # read before what the call posts
        ran = call if approval.edited_args is None else types.FunctionCall(name=call.name, args=runs, id=call.id)
        outcome = self._call(approval.tool, ran, ctx, entry)
        response = (
            outcome.response if isinstance(outcome, Suspend | Wait) else capped_response(outcome, MAX_TOOL_RESULT_CHARS)
        )
        approvals.ran(approval, response)
        if isinstance(outcome, Suspend):
            return outcome
        return approvals.edited_response(approval, response)

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

    # --- an MCP server's request for input, answered ------------------------------------------------------------
    def _answered_question(self) -> Question | None:
        """The answered question a continuation starts from (read once: the opening uses it too)."""
        session = self.session
        if session.kind != SessionKind.CONTINUATION or not session.question_id or session.late_note is not None:
            return None
        return stored.get_question(session.question_id)

    def _resume_input(self, question: Question, *, consumed: list[Note] | None = None) -> bool:
        """The paused MCP call runs again with the operator's answer and the server's stored state, once, through
        the ledger (its own entry per round); its result is the response of the call the model made. True if the
        session paused again (the server asked for more)."""
        pending = McpPending.from_doc(question.mcp_input or {})
        turn = pending_turn(self.steps)
        call = dict(turn.calls).get(pending.index) if turn is not None and turn.seq == pending.seq else None
        answered = Audit(AuditType.ANSWER, now())
        if call is None:  # its response is already in the transcript (a re-run after a crash)
            self._commit(StepKind.ANSWER, None, [answered], consumed=consumed or [])
            return False
        name = call.name or ""
        tool = self.tools.get(name)
        ctx = self._context(pending.seq, pending.index, call, caller=pending.caller)
        outcome: Outcome
        if not isinstance(tool, McpTool):
            outcome = {"error": f"{name} is not available now (its MCP server could not be reached), so the call "
                                "did not complete"}  # fmt: skip
        else:
            part = f"-r{pending.round}"
            entry = ledger.entries(self.session, pending.seq, [pending.index], part=part).get(pending.index)
            outcome = self._call(name, call, ctx, entry, run=lambda: tool.resume(pending, question, ctx), part=part)
        if isinstance(outcome, Wait):
            outcome = {"error": f"{name} cannot wait here"}
        response = outcome.response if isinstance(outcome, Suspend) else capped_response(outcome, MAX_TOOL_RESULT_CHARS)
        audit = [answered, self._tool_audit(name, call, response, ctx)]
        if isinstance(outcome, Suspend):  # the server asked again: a new question, and the session pauses again
            self._commit(StepKind.ANSWER, None, [answered], consumed=consumed or [])
            return self._pause_for_question(outcome, None, audit[1:], self.session.tool_calls)
        self._commit(StepKind.ANSWER, types.Content(role="user", parts=[_response(call, response)]), audit,
                     consumed=consumed or [])  # fmt: skip
        return False

    def _tell_outcome_unknown(self, name: str, call: types.FunctionCall, ctx: ToolContext) -> None:
        operators = blocks.operator_mentions(config.settings().operator_user_ids)
        text = (
            f":warning: {operators}: I was restarted while `{name}` was running, and I cannot tell whether it "
            f"happened, so I did not run it again. Its arguments: `{short(call.args, 500)}`. Please check."
        )
        self.surface.post(text, key=ctx.post_key(":unknown"), for_operators=True)
        log.warning("a started call's outcome is unknown; not run again", extra={"tool": name})


def child_response(child: Session) -> dict[str, Any]:
    """What a delegate call returns once its child has ended."""
    if child.status == SessionStatus.DONE and not child.error:
        return {"result": child.result or ""}
    if child.status == SessionStatus.DONE:
        return {"error": f"the child {child.error}; what it said last: {child.result or '(nothing)'}"}
    return {"error": f"the child did not finish ({child.status.value}): {child.result or child.error or 'no reason'}"}


def _blocking(call: types.FunctionCall) -> bool:
    """Whether a call of ask_operator, delegate or ask_parent waits (ask_parent waits only when told to)."""
    blocking = (call.args or {}).get("blocking", call.name != "ask_parent")
    return blocking is True or (blocking is not False and call.name != "ask_parent")


def capped_response(response: dict[str, Any], limit: int) -> dict[str, Any]:
    """A function response as stored and sent: one larger than ``limit`` characters is cut, saying so."""
    text = json.dumps(response, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return response
    key = "error" if "error" in response else "result"
    return {key: capped(text, limit)}


def _response(call: types.FunctionCall, response: dict[str, Any]) -> types.Part:
    return types.Part(function_response=types.FunctionResponse(id=call.id, name=call.name, response=response))


def _text_of(content: types.Content) -> str:
    return "".join(p.text or "" for p in content.parts or [] if p.text and not p.thought)

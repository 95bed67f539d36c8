"""Where a run starts: the session's first step (or a reply without the model), what a crash left, the outcomes a
paused turn waited for, and the daily budget's question; and how much of its conversation's budget it may use.

``Starts`` is the part of the ``Runner`` that decides where a run starts; the resumptions (``Resumptions``) and
the endings (``Endings``) do the work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shared import config
from shared.agent import daily_budget, prompts
from shared.agent.opening import opening_content
from shared.agent.transcript import pending_turn
from shared.limits import TOO_LARGE_REQUEST_CHARS
from shared.state import spend
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, Question, Session, SessionStatus, Step, StepKind

log = logging.getLogger(__name__)


class Starts:
    session: Session
    steps: list[Step]
    # Provided by the loop, the resumptions and the endings.
    _commit: Callable[..., Step]
    _resume_children: Callable[..., None]
    _resume_approvals: Callable[..., bool]
    _release_children: Callable[[], None]
    _resume_parent_answer: Callable[..., None]
    _resume_input: Callable[..., bool]
    _resume_record: Callable[..., bool]
    _answered_question: Callable[[], Question | None]
    _unposted_answer: Callable[[], SessionStatus | None]
    _reply_without_model: Callable[[str], SessionStatus]
    _stopped: Callable[[str], SessionStatus]
    _fail: Callable[..., SessionStatus]

    def _spent_today(self) -> SessionStatus | None:
        """None if a daily token budget allows the next model turn. Otherwise a child fails (it cannot ask the
        operators), a conversation whose operators chose to stop stops, and one not asked yet asks (RUNNING)."""
        budgets = spend.in_force()
        reason = spend.over(self.session, now(), budgets) if budgets.on else None
        if reason is None:
            return None
        if self.session.reports_to_parent:
            return self._fail(f"{reason} is spent for today", detail=reason)
        answered = daily_budget.answer(self.steps)
        if answered == daily_budget.LIFT:
            return None
        if answered is not None:
            return self._stopped(f"an operator, as {reason} is spent for today")
        audit = [Audit(AuditType.MODEL, now(), text=f"{reason} is spent: asking the operators", calls=["ask_operator"])]
        self._commit(StepKind.MODEL, daily_budget.question(reason, self.session.next_seq), audit)
        log.warning("a daily token budget is spent; asking the operators", extra={"reason": reason})
        return SessionStatus.RUNNING

    def _start(self) -> SessionStatus | None:
        """Where this run starts: its first step, an answer a crash left unposted, or its children's results."""
        if not any(s.session_id == self.session.session_id for s in self.steps):
            refused = self._open()
            if refused is not None:
                return refused
        ended = self._unposted_answer()
        if ended is None and self.session.waiting and self._own_turn_waits():
            # a child queued again once everything its mixed turn waited on was resolved
            ended = SessionStatus.PAUSED if self._resume_record(self.session.waiting) else None
        elif ended is None and self.session.child_ids:  # queued again once the children it waited for had ended
            self._resume_children(self.session.child_ids)
        elif ended is None and self.session.approval_ids and self._decided_in_place():
            # a child queued again once its calls were decided
            ended = SessionStatus.PAUSED if self._resume_approvals(self.session.approval_ids) else None
        elif ended is None and self.session.released_seq is not None:
            self._release_children()  # a child's question interrupted its wait for its children
        elif ended is None and self._answered_by_parent():
            self._resume_parent_answer()  # a child queued again once its parent answered
        return ended

    def _answered_by_parent(self) -> bool:
        asked = self.session.parent_question
        turn = pending_turn(self.steps)
        return (
            asked is not None and asked.blocking and asked.answer is not None and turn is not None
            and turn.session_id == self.session.session_id and turn.seq == asked.seq
            and any(index == asked.index for index, _ in turn.calls)
        )  # fmt: skip

    def _own_turn_waits(self) -> bool:
        turn = pending_turn(self.steps)
        return turn is not None and turn.session_id == self.session.session_id

    def _decided_in_place(self) -> bool:
        """A child paused on approvals resumes itself: its held calls are still pending in its own turn."""
        turn = pending_turn(self.steps)
        return self.session.reports_to_parent and turn is not None and turn.session_id == self.session.session_id

    def _open(self) -> SessionStatus | None:
        """The session's first step; a status if that already ends it (an input too large to use) or pauses it (a
        resumed MCP call whose server asks the operator again)."""
        if len(self.session.text) > TOO_LARGE_REQUEST_CHARS:
            return self._reply_without_model(prompts.too_large_reply(len(self.session.text)))
        if self.session.waiting:  # everything a mixed turn waited on is resolved: each call gets its outcome
            return SessionStatus.PAUSED if self._resume_record(self.session.waiting) else None
        if self.session.approval_ids:  # a turn's risky calls were decided: run the approved ones
            return SessionStatus.PAUSED if self._resume_approvals(self.session.approval_ids) else None
        question = self._answered_question()
        if question is not None and question.mcp_input:  # an MCP server's request, answered: resume that call
            return SessionStatus.PAUSED if self._resume_input(question) else None
        kind, content, audit = opening_content(self.session, self.steps, question=question)
        self._commit(kind, content, audit)
        return None


def conversation_allowance(session: Session, transcript: list[Step]) -> tuple[int, int]:
    """The model turns and tool calls this session may use. A child has its allotment from its tree. A top-level
    conversation (a mention and every continuation of its transcript) shares one budget, the root's part of its
    tree's: a continuation gets what the sessions before it left (a late result cannot start a fresh budget)."""
    settings = config.settings()
    if session.max_turns is not None:
        return session.max_turns, session.max_tool_calls or 0
    turns = min(settings.session_max_turns, settings.tree_max_turns)
    calls = min(settings.session_max_tool_calls, settings.tree_max_tool_calls)
    earlier = [entry for step in transcript if step.session_id != session.session_id for entry in step.audit]
    used_turns = sum(1 for entry in earlier if entry.type == AuditType.MODEL)
    used_calls = sum(1 for entry in earlier if entry.type == AuditType.TOOL)
    return max(0, turns - used_turns), max(0, calls - used_calls)

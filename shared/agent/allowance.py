"""Whether the budgets allow the next model turn, and what the run does when they do not: the session's budget (a
wrap-up turn without tools, or a late result passed on without one) and the daily token budgets (a child fails, the
operators are asked once, their answer stands).
"""

from __future__ import annotations

import logging

from shared.agent import daily_budget, prompts
from shared.agent.ending import Ender
from shared.agent.run_state import RunState
from shared.state import spend
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, SessionStatus, StepKind

log = logging.getLogger(__name__)


class Allowance:
    """Checked before every model turn: None while the budgets last."""

    def __init__(self, run: RunState, ender: Ender) -> None:
        self.run = run
        self.ender = ender

    def out_of_budget(self) -> SessionStatus | None:
        """None while the budget lasts; once spent, the wrap-up turn, or news passed on without a model turn."""
        session = self.run.session
        reason = self.run.budget.exhausted(session.limits.turns, session.limits.tool_calls)
        if reason and session.late_note is not None and session.limits.turns == 0:
            return self.ender.late_result_without_model(session.late_note)
        if reason:
            return self.ender.final_without_tools(prompts.WRAP_UP.format(reason=reason), kind=StepKind.WRAP_UP)
        return None

    def spent_today(self) -> SessionStatus | None:
        """None if a daily token budget allows the next model turn. Otherwise a child fails (it cannot ask the
        operators), a conversation whose operators chose to stop stops, and one not asked yet asks (RUNNING)."""
        session = self.run.session
        budgets = spend.in_force()
        reason = spend.over(session, now(), budgets) if budgets.on else None
        if reason is None:
            return None
        if session.reports_to_parent:
            return self.ender.fail(f"{reason} is spent for today", detail=reason)
        answered = daily_budget.answer(self.run.steps)
        if answered == daily_budget.LIFT:
            return None
        if answered is not None:
            return self.ender.stopped(f"an operator, as {reason} is spent for today")
        audit = [Audit(AuditType.MODEL, now(), text=f"{reason} is spent: asking the operators", calls=["ask_operator"])]
        self.run.commit(StepKind.MODEL, daily_budget.question(reason, session.next_seq), audit)
        log.warning("a daily token budget is spent; asking the operators", extra={"reason": reason})
        return SessionStatus.RUNNING

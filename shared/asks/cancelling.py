"""Cancelling an ask, the cancel step of ``shared.asks.lifecycle``: a question or an approval its session no longer
waits on (the session stopped, or ended while paused) ends, never answered or run, its post saying why."""

from __future__ import annotations

from shared.asks import approvals
from shared.slack import blocks
from shared.slack import client as slack
from shared.slack.surface import Reaction
from shared.state import approvals as stored_approvals
from shared.state import questions as stored_questions
from shared.state.approvals import Decision
from shared.state.models import Approval, ApprovalStatus, Question, QuestionStatus


def cancel_question(question: Question, *, why: str, by: str = "", expired: bool = False,
                    replaced_by: str | None = None) -> bool:  # fmt: skip
    """An open question no longer waited on: cancelled, its post saying why, 💬 off. False if it was not open.
    (``by`` and ``expired`` are the lifecycle's cancel step's: a question is cancelled whoever ends it;
    ``replaced_by``: the newer question that replaces it, recorded on its thread.)"""
    if not stored_questions.close_question(question.question_id, QuestionStatus.CANCELLED, replaced_by=replaced_by):
        return False
    show_cancelled(question, why=why)
    return True


def show_cancelled(question: Question, *, why: str) -> None:
    """A cancelled question's post says why, without its buttons, and loses 💬 (again is harmless)."""
    if question.post_ts:
        slack.update(question.post_place()[0], question.post_ts, blocks.cancelled_text(question.text, why))
        slack.unreact(question.post_place()[0], question.post_ts, Reaction.QUESTION)


def cancel_approval(approval: Approval, *, why: str, by: str, expired: bool = False) -> bool:
    """A pending approval no longer waited on: denied (``expired``: expired), never run, its card saying why. Its
    asker has ended, so nothing resumes. False if it was decided already."""
    status = ApprovalStatus.EXPIRED if expired else ApprovalStatus.DENIED
    decision = Decision(status, by, why, f"{'ended' if expired else 'stop'}-{approval.approval_id}")
    result = stored_approvals.decide(approval.approval_id, decision, approvals.resume)
    if not result.won or result.approval is None:
        return False
    mark = ":hourglass:" if expired else ":octagonal_sign:"
    approvals.update_card(result.approval, f"{mark} not run: {why}")
    return True

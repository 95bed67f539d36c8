"""A turn's responses stored, and the pause on what its calls wait for: an operator question, approvals, children,
a parent's answer, an MCP server's input request, or several kinds at once on the waiting record. A pause whose
waits were resolved while the turn ran resumes in place (through the ``Resumer``).

``Pauses`` and the ``Resumer`` call each other: a pause resolved meanwhile resumes, and a resumed call may pause
again (an MCP server that asks for more input). ``Pauses`` makes its ``Resumer``, so both exist whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from shared.agent import activity
from shared.agent.calls import ToolCalls
from shared.agent.opening import answer_content
from shared.agent.resume import Resumer
from shared.agent.run_state import RunState
from shared.agent.tools.base import Suspend
from shared.agent.transcript import Responses, pending_turn
from shared.asks import approvals, delegation
from shared.asks.approvals import Held
from shared.state import children as stored_children
from shared.state import questions as stored
from shared.state import steps
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, SessionStatus, StepKind, Waiting, WaitKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ran:
    """What a turn's calls came to: the model step, the responses, their audit and the session's tool calls."""

    seq: int
    responses: Responses
    audit: list[Audit]
    used: int


class Pauses:
    """Stores a turn's responses and pauses the session on what the turn waits for (True: it paused)."""

    def __init__(self, run: RunState, calls: ToolCalls) -> None:
        self.run = run
        self.resumer = Resumer(run, calls, self)

    def settle(self, held: list[Held], record: list[Waiting], pause: Suspend | None, ran: Ran, *,
               asked: dict[int, approvals.Asked]) -> bool:  # fmt: skip
        """Store the turn's responses, pausing on what its calls wait for: one kind of thing through its own
        pause, several kinds (approvals, a question, children, the parent's answer, MCP input) on one waiting
        record. True if the session paused."""
        content, audit, used = ran.responses, ran.audit, ran.used
        if held and record:  # a turn that waits on several kinds of things pauses once, on its waiting record
            return self.pause_mixed(held, record, ran, asked=asked)
        if held:
            return self.pause_for_approvals(ran.seq, held, content, audit, used, asked=asked)
        if len({w.kind for w in record}) > 1 or sum(w.kind == WaitKind.PARENT_ANSWER for w in record) > 1:
            return self.pause_mixed([], record, ran)
        children = [w.key for w in record if w.kind == WaitKind.CHILD]
        if children:
            return self.pause_for_children(children, content, audit, used)
        parent = [w.key for w in record if w.kind == WaitKind.PARENT_ANSWER]
        if parent:
            return self.pause_for_parent(parent[0], content, audit, used)
        if pause is None:
            self.run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            return False
        return self.pause_for_question(pause, content, audit, used)

    def pause_for_question(self, pause: Suspend, content: Responses | None, audit: list[Audit], used: int) -> bool:
        run = self.run
        question_id = pause.question.question_id
        try:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on=question_id,
                       status=SessionStatus.PAUSED, question_id=question_id, ended_at=now())  # fmt: skip
        except steps.AnsweredMeanwhile as meanwhile:
            # Answered while this turn ran: the answer is the pending call's response, and the session goes on.
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            answered = stored.get_question(question_id) or pause.question
            if answered.mcp_input:  # an MCP server's request: the answer resumes that call
                return self.resumer.resume_input(answered, consumed=[meanwhile.note])
            answer = answer_content(answered, run.steps)
            run.commit(StepKind.ANSWER, answer, [Audit(AuditType.ANSWER, now())], consumed=[meanwhile.note])
            log.info("question answered before the session paused; going on", extra={"question_id": question_id})
            return False
        run.surface.paused()
        log.info("session paused for the operator", extra={"question_id": question_id})
        return True

    def pause_for_approvals(self, seq: int, held: list[Held], content: Responses | None, audit: list[Audit],
                            used: int, *, asked: dict[int, approvals.Asked] | None = None) -> bool:  # fmt: skip
        """Record the held calls and post their cards, then pause, unless every one was decided meanwhile."""
        run = self.run
        run.surface.doing(activity.APPROVAL)
        requested = approvals.request(run.session, seq, held, run.surface, asked=asked)
        approval_ids = [a.approval_id for a in requested]
        try:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_all=approval_ids,
                       status=SessionStatus.PAUSED, approval_ids=approval_ids, ended_at=now())  # fmt: skip
        except steps.AnsweredMeanwhile as meanwhile:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            return self.resumer.resume_approvals(approval_ids, consumed=meanwhile.notes)
        run.surface.paused()
        log.info("session paused for approvals", extra={"approvals": approval_ids})
        return True

    def pause_for_children(self, child_ids: list[str], content: Responses | None, audit: list[Audit],
                           used: int, *, launch: bool = True) -> bool:  # fmt: skip
        """Start the turn's blocking children, then pause until all have ended, unless they ended meanwhile."""
        run = self.run
        if launch:
            delegation.launch(child_ids)
        try:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_children=child_ids,
                       status=SessionStatus.PAUSED, child_ids=child_ids, ended_at=now())  # fmt: skip
        except steps.ChildrenEnded:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            self.resumer.resume_children(child_ids)
            return False
        except steps.ChildAsked:  # as if the question had interrupted the wait: read it, the children go on
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            stored_children.release(run.session, child_ids)
            turn = pending_turn(run.steps)  # its delegate calls get "still running" (none when it settles)
            if turn is not None:
                run.session.released_seq = turn.seq
                self.resumer.release_children()
            return False
        run.surface.paused()
        log.info("session paused for its children", extra={"children": child_ids})
        return True

    def pause_mixed(self, held: list[Held], record: list[Waiting], ran: Ran, *,
                    asked: dict[int, approvals.Asked] | None = None) -> bool:  # fmt: skip
        """A turn that waits on several kinds of things (approvals, a question, children, its parent's answer, an
        MCP server's input request): the cards posted and the children started, it pauses once on its waiting
        record, unless everything in it was resolved meanwhile."""
        run = self.run
        if held:
            run.surface.doing(activity.APPROVAL)
            requested = approvals.request(run.session, ran.seq, held, run.surface, asked=asked)
            record = [*record, *(Waiting(ran.seq, a.call_index, WaitKind.APPROVAL, a.approval_id) for a in requested)]
        children = [w.key for w in record if w.kind == WaitKind.CHILD]
        if children:
            delegation.launch(children)
        return self.pause_on_record(sorted(record, key=lambda w: w.index), ran.responses, ran.audit, ran.used)

    def pause_on_record(self, record: list[Waiting], content: Responses | None, audit: list[Audit],
                        used: int) -> bool:  # fmt: skip
        """Pause on this waiting record (True); or, if it was resolved while the turn ran, resume in place."""
        run = self.run
        try:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_record=record,
                       status=SessionStatus.PAUSED, ended_at=now())  # fmt: skip
        except steps.WaitsResolved:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            return self.resumer.resume_record(record)
        except steps.ChildAsked:  # a child of this turn asked meanwhile: the turn no longer waits on its children
            children = [w.key for w in record if w.kind == WaitKind.CHILD and not w.released]
            stored_children.release(run.session, children)
            released = [replace(w, released=True) if w.kind == WaitKind.CHILD else w for w in record]
            return self.pause_on_record(released, content, audit, used)
        run.surface.paused()
        log.info("session paused on its waiting record", extra={"waits": [f"{w.kind.value}:{w.key}" for w in record]})
        return True

    def pause_for_parent(self, question_id: str, content: Responses | None, audit: list[Audit],
                         used: int) -> bool:  # fmt: skip
        """A child's blocking question to its parent: pause until the answer, unless it came meanwhile."""
        run = self.run
        try:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on=question_id,
                       status=SessionStatus.PAUSED, ended_at=now())  # fmt: skip
        except steps.AnsweredMeanwhile as meanwhile:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            self.resumer.resume_parent_answer(consumed=meanwhile.notes)
            return False
        log.info("child paused for its parent's answer", extra={"question": question_id})
        return True

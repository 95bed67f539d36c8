"""A turn's responses stored, and the pause on what its calls wait for: every pause, of one kind of thing or of
several (an operator question, approvals, children, a parent's answer, an MCP server's input request), is one
waiting record on the session (``Session.waiting``). A pause whose waits were resolved while the turn ran resumes
in place (through the ``Resumer``).

``Pauses`` and the ``Resumer`` call each other: a pause resolved meanwhile resumes, and a resumed call may pause
again (an MCP server that asks for more input). ``Pauses`` makes its ``Resumer``, so both exist whole.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from shared.agent import activity
from shared.agent.calls import ToolCalls
from shared.agent.resume import Resumer
from shared.agent.run_state import RunState
from shared.agent.transcript import Responses
from shared.agent.waits import kinds
from shared.asks import approvals
from shared.asks.approvals import Held
from shared.state import children as stored_children
from shared.state import steps, waiting
from shared.state.firestore import now
from shared.state.models import Audit, SessionStatus, StepKind, Waiting, WaitKind

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

    def settle(self, held: list[Held], record: list[Waiting], ran: Ran, *,
               asked: dict[int, approvals.Asked]) -> bool:  # fmt: skip
        """Store the turn's responses, pausing on what its calls wait for: the cards posted and the children
        started, it pauses once on its waiting record, whatever kinds of things it waits on, unless everything in
        it was resolved meanwhile. True if the session paused."""
        run = self.run
        if not held and not record:
            run.commit(StepKind.TOOL_RESULTS, ran.responses, ran.audit, tool_calls=ran.used)
            return False
        if held:
            run.record_calls()  # the results of the calls that ran are recorded before the cards are posted
            run.surface.doing(activity.APPROVAL)
            requested = approvals.request(run.session, ran.seq, held, run.surface, asked=asked)
            record = [*record, *(Waiting(ran.seq, a.call_index, WaitKind.APPROVAL, a.approval_id) for a in requested)]
        for kind, wait in kinds.KINDS.items():  # what each kind starts (the turn's blocking children)
            wait.pausing([w for w in record if w.kind == kind])
        return self.pause_on_record(sorted(record, key=lambda w: w.index), ran.responses, ran.audit, ran.used)

    def pause_on_record(self, record: list[Waiting], content: Responses | None, audit: list[Audit],
                        used: int) -> bool:  # fmt: skip
        """Pause on this waiting record (True); or, if it was resolved while the turn ran, resume in place, the
        notes that brought its outcomes consumed (each outcome is read from its own document, never twice)."""
        run = self.run
        try:
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used, pausing_on_record=record,
                       status=SessionStatus.PAUSED, ended_at=now())  # fmt: skip
        except steps.WaitsResolved as resolved:
            # The calls read their outcomes from this copy of the session: a parent's answer noted on it while the
            # turn ran is the one its ask_parent calls get, not the question as this run asked it, unanswered.
            run.session.apply(resolved.own)
            run.commit(StepKind.TOOL_RESULTS, content, audit, tool_calls=used)
            kept = waiting.notes_left(run.notes, record)
            return self.resumer.resume_record(record, consumed=[n for n in run.notes if n not in kept])
        except steps.ChildAsked:  # a child of this turn asked meanwhile: the turn no longer waits on its children
            children = [w.key for w in record if w.kind == WaitKind.CHILD and not w.released]
            stored_children.release(run.session, children)
            released = [replace(w, released=True) if w.kind == WaitKind.CHILD else w for w in record]
            return self.pause_on_record(released, content, audit, used)
        run.surface.paused()
        log.info("session paused on its waiting record", extra={"waits": [f"{w.kind.value}:{w.key}" for w in record]})
        return True

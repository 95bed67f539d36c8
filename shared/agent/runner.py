"""The bounded agent loop: model turn → persist → run tools → persist, until an answer, a pause or a budget.

Every step is persisted before the next one starts, so a crash loses at most the step in flight and a takeover
resumes from the stored transcript. Posts carry a key derived from the step that made them; after a crash the
thread surface reads the keys Slack already has, so a re-run step does not post twice.

The ``Runner`` is composed of parts with one job each, given what they need: the run's state and its commits
(``RunState``), single tool calls (``ToolCalls``), the pauses of a turn (``Pauses``) and its resumptions
(``Resumer``), a turn's dispatcher (``ToolTurn``), where a run starts (``Starter``), the budgets' checks
(``Allowance``) and how a run ends (``Ender``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from google.genai import types

from shared import config
from shared.agent import model as gemini
from shared.agent import prompts, streamed
from shared.agent.allowance import Allowance
from shared.agent.calls import ToolCalls
from shared.agent.ending import Ender, first_content
from shared.agent.pausing import Pauses
from shared.agent.run_state import RunState, text_of
from shared.agent.starting import Starter
from shared.agent.tool_turn import ToolTurn
from shared.agent.tools.base import short
from shared.agent.transcript import contents_of, pending_turn, shorten_tool_results
from shared.asks import tree_status
from shared.state import steps
from shared.state.batched import Docs
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, NoteKind, Question, SessionStatus, Step, StepKind
from shared.state.session_model import Session

log = logging.getLogger(__name__)


class Runner:
    """Runs one claimed session to a terminal state (or a pause)."""

    def __init__(self, session: Session, *, takeover: bool, started_at: datetime | None = None,
                 question: Question | None = None, transcript: list[Step] | None = None,
                 claimed_outcomes: Docs | None = None, opened: bool = False) -> None:  # fmt: skip
        self.run_state = RunState(session, takeover=takeover, started_at=started_at, question=question,
                                  transcript=transcript, claimed_outcomes=claimed_outcomes)  # fmt: skip
        self.opened = opened  # its first step was stored by this delivery's claim: it resumes nothing
        calls = ToolCalls(self.run_state)
        pauses = Pauses(self.run_state, calls)
        self.ender = Ender(self.run_state, pauses)
        self.starter = Starter(self.run_state, pauses.resumer, self.ender)
        self.tool_turn = ToolTurn(self.run_state, calls, pauses)
        self.allowance = Allowance(self.run_state, self.ender)
        self.session = session

    def run(self) -> SessionStatus:
        try:
            return self._run_shown()
        except steps.LeaseLost:
            raise  # another worker holds the session now: this one writes nothing more
        except Exception:
            # A crash (retried: the next attempt takes the session over) or a Slack storm (the session fails): the
            # results of the calls that ran are recorded first, so the takeover reuses them.
            self.run_state.record_calls_left()
            raise
        finally:
            self.run_state.shown()  # the display updates made beside the run (an approved call's card) end with it

    def _run_shown(self) -> SessionStatus:
        if not self.session.reports_to_parent:
            return self._run_or_stop()
        # A delegated child shows its state in its tree's status message: when it resumes, and when it stops.
        if self.run_state.has_written() and not self.opened:
            tree_status.show(self.session, self.run_state.surface)
        try:
            return self._run_or_stop()
        finally:
            tree_status.show(self.session, self.run_state.surface)

    def _run_or_stop(self) -> SessionStatus:
        if self.session.stop_requested:  # a waiting child queued again only to end, telling its parent
            return self.ender.stopped(self.session.stop_requested)
        try:
            return self._run()
        except steps.StopRequested as stop:
            return self.ender.stopped(stop.by)
        except steps.TurnAbandoned as turn:  # a newer question replaced one of the turn it was pausing on
            return self.ender.abandoned(turn)

    def _run(self) -> SessionStatus:
        run = self.run_state
        run.surface.working()
        ended = self.starter.start()
        if ended is not None:
            return ended
        while True:
            turn = pending_turn(run.steps)
            if turn is not None and run.owns(turn):
                if self.tool_turn.run_tools(turn):
                    return SessionStatus.PAUSED
                continue
            if run.notes:
                self._fold_notes()
            spent = self.allowance.out_of_budget()
            if spent is not None:
                return spent
            halted = self.allowance.spent_today()
            if halted == SessionStatus.RUNNING:
                continue  # the budget question is the pending call: the next pass asks it
            if halted is not None:
                return halted
            try:
                ended = self._model_turn()
            except gemini.ContextTooLong:
                return self.ender.final_without_tools(prompts.TOO_LONG, kind=StepKind.TOO_LONG, minimal=True)
            except gemini.ModelUnavailable as exc:
                return self.ender.fail("the AI model is unavailable right now", detail=str(exc))
            except gemini.MalformedResponse as exc:
                # Tell the model what was wrong, as it would hear a bad tool call, and let it try again.
                note = f"Your last reply could not be read ({exc}). Function call arguments must be a JSON object."
                run.commit(
                    StepKind.MALFORMED,
                    types.Content(role="user", parts=[types.Part(text=note)]),
                    [Audit(AuditType.MODEL, now(), error=str(exc), calls=[])],
                    turns=self.session.limits.turns + 1,
                )
                continue
            if ended is not None:
                return ended

    def _fold_notes(self) -> None:
        """Hand the model what arrived while it worked: answers to its non-blocking questions, thread messages.
        (Decisions on approvals are the product's own bookkeeping: consumed, not shown.)"""
        consumed = list(self.run_state.notes)
        readable = [n for n in consumed if n.kind != NoteKind.DECISION]
        audit = [Audit(AuditType.NOTES, now(), count=len(readable))]
        content = (
            types.Content(role="user", parts=[types.Part(text=prompts.notes_text(readable))]) if readable else None
        )
        self.run_state.commit(StepKind.NOTES, content, audit, consumed=consumed)

    def _model_turn(self) -> SessionStatus | None:
        """One model turn, persisted. None if the loop goes on; how the session ended (or paused) once answered."""
        run = self.run_state
        history = shorten_tool_results(contents_of(run.steps), config.settings().model_context_tokens)
        system = f"{prompts.SYSTEM}\n\n{run.tools.notice}" if run.tools.notice else prompts.SYSTEM
        run.surface.working()
        response = streamed.model_turn(run.surface, history, system=system, tools=run.tools.declarations())
        content = first_content(response)
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        text = text_of(content)
        spent = gemini.usage(response)
        audit = [Audit(AuditType.MODEL, now(), text=short(text), calls=[c.name or "" for c in calls], tokens=spent)]
        totals = run.tokens_after(spent)
        if calls:
            run.commit(StepKind.MODEL, content, audit, turns=self.session.limits.turns + 1, tokens=totals)
            return None
        content = types.Content(role="model", parts=[types.Part(text=text)])
        step = run.commit(StepKind.MODEL, content, audit, turns=self.session.limits.turns + 1, tokens=totals)
        ended = self.ender.answer(text, step)
        return None if ended == SessionStatus.RUNNING else ended  # notes arrived as it finished: go on

"""The bounded agent loop: model turn → persist → run tools → persist, until an answer, a pause or a budget.

Every step is persisted before the next one starts, so a crash loses at most the step in flight and a takeover
resumes from the stored transcript. Posts carry a key derived from the step that made them; after a crash the
thread surface reads the keys Slack already has, so a re-run step does not post twice.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from datetime import datetime
from typing import Any

from google.genai import types

from shared import config, deps
from shared.agent import model as gemini
from shared.agent import prompts, streamed
from shared.agent.budget import Budget
from shared.agent.ending import Endings, first_content, text_of
from shared.agent.starting import Starts, conversation_allowance
from shared.agent.tool_turn import ToolTurns
from shared.agent.tools import toolset
from shared.agent.tools.base import short
from shared.agent.transcript import (
    PendingTurn,
    Responses,
    contents_of,
    pending_turn,
    shorten_tool_results,
    to_json,
)
from shared.asks import tree_status
from shared.state import spend, steps
from shared.state.firestore import now
from shared.state.models import (
    Audit,
    AuditType,
    Note,
    NoteKind,
    Session,
    SessionKind,
    SessionStatus,
    Step,
    StepKind,
    Waiting,
)

log = logging.getLogger(__name__)


class Runner(Starts, Endings, ToolTurns):
    """Runs one claimed session to a terminal state (or a pause)."""

    def __init__(self, session: Session, *, takeover: bool, started_at: datetime | None = None) -> None:
        settings = config.settings()
        self.session = session
        self.takeover = takeover
        self.lease = settings.session_lease_seconds
        elapsed = (now() - started_at).total_seconds() if started_at else 0.0
        # A mention or a child on its first claim has no steps yet (next_seq moves with every step): skip the query.
        fresh = session.kind in {SessionKind.MENTION, SessionKind.CHILD} and not takeover and session.next_seq == 0
        self.steps: list[Step] = [] if fresh else steps.load_steps(session.transcript)
        self.budget = Budget(  # a delegated child has its allotment from its tree's budget
            *conversation_allowance(session, self.steps),
            settings.session_wall_seconds,
            started=time.monotonic() - max(0.0, elapsed),
        )
        # A continuation appends to its asker's transcript: its first step follows the last stored one.
        session.next_seq = max(session.next_seq, self.steps[-1].seq + 1 if self.steps else 0)
        self.surface = streamed.surface_for(session, takeover=takeover)  # a takeover reads what Slack has
        self.tools = (deps.get().tools or toolset.for_session)(session)
        # Calls made so far, by tool (the policy bounds some of them per session).
        self.used = Counter(
            entry.name for s in self.steps if s.session_id == session.session_id for entry in s.audit
            if entry.type == AuditType.TOOL and entry.name
        )  # fmt: skip
        self.notes: list[Note] = list(session.notes)  # queued for the next model turn
        self.committed = time.monotonic()  # the claim took the lease just now

    # --- persistence -----------------------------------------------------------------------
    def _commit(
        self,
        kind: StepKind,
        content: types.Content | Responses | None,
        audit: list[Audit],
        *,
        consumed: list[Note] | None = None,
        wait_for_notes: bool = True,
        pausing_on: str | None = None,
        pausing_on_all: list[str] | None = None,
        pausing_on_children: list[str] | None = None,
        pausing_on_record: list[Waiting] | None = None,
        **fields: Any,
    ) -> Step:
        answers = content.refs() if isinstance(content, Responses) else None  # the calls its responses answer
        if isinstance(content, Responses):
            content = content.content()
        step = Step(
            seq=self.session.next_seq,
            session_id=self.session.session_id,
            kind=kind,
            content=to_json(content) if content is not None else None,
            audit=audit,
            at=now(),
            answers=answers,
        )
        totals = fields.get("tokens")  # a model turn: what it spent counts against the daily budgets
        spent = spend.counted(totals) - spend.counted(self.session.tokens) if isinstance(totals, dict) else 0
        self.notes = steps.commit_step(
            self.session,
            step,
            lease_seconds=self.lease,
            fields=fields,
            consumed_notes=consumed,
            wait_for_notes=wait_for_notes,
            pausing_on=pausing_on,
            pausing_on_all=pausing_on_all,
            pausing_on_children=pausing_on_children,
            pausing_on_record=pausing_on_record,
            spent=spent,
        )
        self.steps.append(step)
        self.committed = time.monotonic()
        return step

    def _keep_lease(self) -> None:
        """Renew the lease during a long turn (a slow tool, several slow calls), so no takeover starts meanwhile."""
        if time.monotonic() - self.committed > self.lease / 3:
            self.notes = steps.commit_step(self.session, None, lease_seconds=self.lease)
            self.committed = time.monotonic()

    # --- the loop --------------------------------------------------------------------------
    def run(self) -> SessionStatus:
        if not self.session.reports_to_parent:
            return self._run_or_stop()
        # A delegated child shows its state in its tree's status message: when it resumes, and when it stops.
        if any(s.session_id == self.session.session_id for s in self.steps):
            tree_status.refresh(self.session, self.surface)
        try:
            return self._run_or_stop()
        finally:
            tree_status.refresh(self.session, self.surface)

    def _run_or_stop(self) -> SessionStatus:
        if self.session.stop_requested:  # a waiting child queued again only to end, telling its parent
            return self._stopped(self.session.stop_requested)
        try:
            return self._run()
        except steps.StopRequested as stop:
            return self._stopped(stop.by)

    def _run(self) -> SessionStatus:
        self.surface.working()
        ended = self._start()
        if ended is not None:
            return ended
        while True:
            turn = pending_turn(self.steps)
            if turn is not None and self._owns(turn):
                if self._run_tools(turn):
                    return SessionStatus.PAUSED
                continue
            if self.notes:
                self._fold_notes()
            spent = self._out_of_budget()
            if spent is not None:
                return spent
            halted = self._spent_today()
            if halted == SessionStatus.RUNNING:
                continue  # the budget question is the pending call: the next pass asks it
            if halted is not None:
                return halted
            try:
                ended = self._model_turn()
            except gemini.ContextTooLong:
                return self._final_without_tools(prompts.TOO_LONG, kind=StepKind.TOO_LONG, minimal=True)
            except gemini.ModelUnavailable as exc:
                return self._fail("the AI model is unavailable right now", detail=str(exc))
            except gemini.MalformedResponse as exc:
                # Tell the model what was wrong, as it would hear a bad tool call, and let it try again.
                note = f"Your last reply could not be read ({exc}). Function call arguments must be a JSON object."
                self._commit(
                    StepKind.MALFORMED,
                    types.Content(role="user", parts=[types.Part(text=note)]),
                    [Audit(AuditType.MODEL, now(), error=str(exc), calls=[])],
                    turns=self.session.turns + 1,
                )
                continue
            if ended is not None:
                return ended

    def _out_of_budget(self) -> SessionStatus | None:
        """None while the budget lasts; once spent, the wrap-up turn, or news passed on without a model turn."""
        reason = self.budget.exhausted(self.session.turns, self.session.tool_calls)
        if reason and self.session.late_note is not None and self.session.turns == 0:
            return self._late_result_without_model(self.session.late_note)
        if reason:
            return self._final_without_tools(prompts.WRAP_UP.format(reason=reason), kind=StepKind.WRAP_UP)
        return None

    def _fold_notes(self) -> None:
        """Hand the model what arrived while it worked: answers to its non-blocking questions, thread messages.
        (Decisions on approvals are the product's own bookkeeping: consumed, not shown.)"""
        consumed = list(self.notes)
        readable = [n for n in consumed if n.kind != NoteKind.DECISION]
        audit = [Audit(AuditType.NOTES, now(), count=len(readable))]
        content = (
            types.Content(role="user", parts=[types.Part(text=prompts.notes_text(readable))]) if readable else None
        )
        self._commit(StepKind.NOTES, content, audit, consumed=consumed)

    def _owns(self, turn: PendingTurn) -> bool:
        """Pending calls are this session's to run only if it made them: another session's are a pause it did not
        take over (whatever this session wrote since)."""
        return turn.session_id == self.session.session_id

    def _model_turn(self) -> SessionStatus | None:
        """One model turn, persisted. None if the loop goes on; how the session ended (or paused) once answered."""
        history = shorten_tool_results(contents_of(self.steps), config.settings().model_context_tokens)
        system = f"{prompts.SYSTEM}\n\n{self.tools.notice}" if self.tools.notice else prompts.SYSTEM
        self.surface.working()
        response = streamed.model_turn(self.surface, history, system=system, tools=self.tools.declarations())
        content = first_content(response)
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        text = text_of(content)
        spent = gemini.usage(response)
        audit = [Audit(AuditType.MODEL, now(), text=short(text), calls=[c.name or "" for c in calls], tokens=spent)]
        totals = self._tokens_after(spent)
        if calls:
            self._commit(StepKind.MODEL, content, audit, turns=self.session.turns + 1, tokens=totals)
            return None
        content = types.Content(role="model", parts=[types.Part(text=text)])
        step = self._commit(StepKind.MODEL, content, audit, turns=self.session.turns + 1, tokens=totals)
        ended = self._answer(text, step)
        return None if ended == SessionStatus.RUNNING else ended  # notes arrived as it finished: go on

    def _tokens_after(self, spent: dict[str, int]) -> dict[str, int]:
        """The session's running token totals with one more turn (written with that turn's step)."""
        return {kind: self.session.tokens.get(kind, 0) + spent.get(kind, 0) for kind in gemini.TOKEN_KINDS}

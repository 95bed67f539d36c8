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
from shared.agent import daily_budget, followup, gate, prompts, streamed
from shared.agent import model as gemini
from shared.agent.budget import Budget
from shared.agent.failure import fail_session
from shared.agent.opening import opening_content
from shared.agent.tool_turn import ToolTurns
from shared.agent.tools import toolset
from shared.agent.tools.base import short
from shared.agent.transcript import PendingTurn, contents_of, pending_turn, shorten_tool_results, to_json
from shared.asks import delegation, stopping, tree_status
from shared.limits import TOO_LARGE_REQUEST_CHARS
from shared.state import children as stored_children
from shared.state import ids, spend, steps
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, Note, NoteKind, Session, SessionKind, SessionStatus, Step, StepKind

log = logging.getLogger(__name__)


class Runner(ToolTurns):
    """Runs one claimed session to a terminal state (or a pause)."""

    def __init__(self, session: Session, *, takeover: bool, started_at: datetime | None = None) -> None:
        settings = config.settings()
        self.session = session
        self.takeover = takeover
        self.lease = settings.session_lease_seconds
        elapsed = (now() - started_at).total_seconds() if started_at else 0.0
        self.budget = Budget(  # a delegated child has its allotment from its tree's budget
            settings.session_max_turns if session.max_turns is None else session.max_turns,
            settings.session_max_tool_calls if session.max_tool_calls is None else session.max_tool_calls,
            settings.session_wall_seconds,
            started=time.monotonic() - max(0.0, elapsed),
        )
        # A mention or a child on its first claim has no steps yet (next_seq moves with every step): skip the query.
        fresh = session.kind in {SessionKind.MENTION, SessionKind.CHILD} and not takeover and session.next_seq == 0
        self.steps: list[Step] = [] if fresh else steps.load_steps(session.transcript)
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
        content: types.Content | None,
        audit: list[Audit],
        *,
        consumed: list[Note] | None = None,
        wait_for_notes: bool = True,
        pausing_on: str | None = None,
        pausing_on_all: list[str] | None = None,
        pausing_on_children: list[str] | None = None,
        **fields: Any,
    ) -> Step:
        step = Step(
            seq=self.session.next_seq,
            session_id=self.session.session_id,
            kind=kind,
            content=to_json(content) if content is not None else None,
            audit=audit,
            at=now(),
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

    def _stopped(self, by: str) -> SessionStatus:
        """Someone stopped this session (or its tree): it ends here, says so, and stops what it delegated."""
        text = f"Stopped by {by}."
        if self.session.reports_to_parent:
            step = Step(seq=self.session.next_seq, session_id=self.session.session_id, kind=StepKind.END,
                        content=None, audit=[Audit(AuditType.RESULT, now(), text=text)], at=now())  # fmt: skip
            finished = stored_children.finish(self.session, step, status=SessionStatus.STOPPED, result=text,
                                              error=f"stopped by {by}", wait_for_notes=False)  # fmt: skip
            delegation.resume_parent(self.session, finished)
        else:
            key = ids.post_key(self.session.session_id, self.session.next_seq, "stopped")
            ts = self.surface.post(stopping.stopped_text(by), key=key)
            posted = [Audit(AuditType.POST, now(), ts=ts)]
            self._commit(StepKind.END, None, posted, status=SessionStatus.STOPPED.value, error=f"stopped by {by}",
                         ended_at=now())  # fmt: skip
            self.surface.stopped()
        stopping.close_waits(self.session, by=by)  # what it asked just before the stop reached it
        stopping.stop_children(self.session, by=by)
        log.info("session stopped", extra={"by": by})
        return SessionStatus.STOPPED

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
            reason = self.budget.exhausted(self.session.turns, self.session.tool_calls)
            if reason:
                return self._final_without_tools(prompts.WRAP_UP.format(reason=reason), kind=StepKind.WRAP_UP)
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
        if ended is None and self.session.child_ids:  # queued again once the children it waited for had ended
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

    def _decided_in_place(self) -> bool:
        """A child paused on approvals resumes itself: its held calls are still pending in its own turn."""
        turn = pending_turn(self.steps)
        return self.session.reports_to_parent and turn is not None and turn.session_id == self.session.session_id

    def _open(self) -> SessionStatus | None:
        """The session's first step; a status if that already ends it (an input too large to use) or pauses it (a
        resumed MCP call whose server asks the operator again)."""
        if len(self.session.text) > TOO_LARGE_REQUEST_CHARS:
            return self._reply_without_model(prompts.too_large_reply(len(self.session.text)))
        if self.session.approval_ids:  # a turn's risky calls were decided: run the approved ones
            return SessionStatus.PAUSED if self._resume_approvals(self.session.approval_ids) else None
        question = self._answered_question()
        if question is not None and question.mcp_input:  # an MCP server's request, answered: resume that call
            return SessionStatus.PAUSED if self._resume_input(question) else None
        kind, content, audit = opening_content(self.session, self.steps, question=question)
        self._commit(kind, content, audit)
        return None

    def _reply_without_model(self, text: str) -> SessionStatus:
        """A reply the product writes itself (an input too large to use), recorded as the session's answer."""
        note = f"[the request was not used: {len(self.session.text):,} characters]"
        self._commit(StepKind.PROMPT, types.Content(role="user", parts=[types.Part(text=note)]), [])
        step = self._commit(
            StepKind.MODEL,
            types.Content(role="model", parts=[types.Part(text=text)]),
            [Audit(AuditType.MODEL, now(), text=short(text), calls=[])],
        )
        return self._answer(text, step, last=True)

    def _unposted_answer(self) -> SessionStatus | None:
        """After a crash between an answer's model turn and the end of the session: post that answer (its key makes
        a post Slack already has a no-op) and end, instead of asking the model for a second one."""
        last = self.steps[-1] if self.steps else None
        if last is None or last.session_id != self.session.session_id or last.kind != StepKind.MODEL:
            return None
        content = contents_of([last])[0] if last.content else None
        if content is None or any(p.function_call for p in content.parts or []):
            return None
        final = len(self.steps) > 1 and self.steps[-2].kind in {StepKind.WRAP_UP, StepKind.TOO_LONG}
        status = self._answer(_text_of(content), last, last=final)
        return None if status == SessionStatus.RUNNING else status

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
        content = _first_content(response)
        calls = [p.function_call for p in content.parts or [] if p.function_call]
        text = _text_of(content)
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

    def _answer(self, text: str, step: Step, *, last: bool = False) -> SessionStatus:
        """Post the answer and end the session; notes that arrived meanwhile keep it going, unless ``last``."""
        if self.session.reports_to_parent:
            return self._report(text, last=last)
        audit: list[Audit] = []
        stamps: list[str] = []
        if text.strip():
            key = ids.post_key(self.session.session_id, step.seq, "answer")
            stamps = self.surface.answer(text, key=key, feedback=self.session.session_id)
            audit = [Audit(AuditType.POST, now(), ts=stamps[0], parts=len(stamps))]
        own = [entry for s in self.steps if s.session_id == self.session.session_id for entry in s.audit]
        closed = gate.closed_loop(own + audit)
        status = SessionStatus.DONE if closed else SessionStatus.SILENT_EXIT
        try:
            self._commit(
                StepKind.END,
                None,
                audit,
                wait_for_notes=not last,
                status=status.value,
                closed_loop=closed,
                ended_at=now(),
                answer_ts=stamps[-1] if stamps else None,  # the message its feedback buttons are on
            )
            if last and self.notes:
                log.warning("session ended at its budget with unread notes", extra={"notes": len(self.notes)})
                followup.start_for_unread(self.session, self.notes)
        except steps.NotesPending as pending:
            self._commit(StepKind.END, None, audit)  # any post is recorded; the notes are read next turn
            self.notes = pending.notes
            return SessionStatus.RUNNING
        if closed:
            self.surface.done()
            if self.used["delegate"]:
                delegation.release_askers(self.session)
            followup.narrated(self.session)
            log.info("session done", extra={"turns": self.session.turns, "tool_calls": self.session.tool_calls})
            return SessionStatus.DONE
        self.surface.silent()
        log.warning("session ended without reporting back", extra={"turns": self.session.turns})
        followup.after_silent_exit(self.session, reason="the session ended without reporting back")
        return SessionStatus.SILENT_EXIT

    def _report(self, text: str, *, last: bool) -> SessionStatus:
        """A child's end: its text is its parent's result (a budget's wrap-up says so), stored and reported to the
        parent in one transaction; it posts nothing."""
        unfinished = stored_children.unfinished_of(self.session.session_id) if self.used["delegate"] else []
        if unfinished and not last:
            return self._settle_children(unfinished)
        if unfinished:  # out of budget: it cannot read their results any more
            for child_id in unfinished:
                stopping.stop(child_id, by="the session that delegated it, which ran out of budget")
            text += f"\n\n({len(unfinished)} task(s) I delegated were still running and were stopped.)"
        wrapped = last and len(self.steps) > 1 and self.steps[-2].kind in {StepKind.WRAP_UP, StepKind.TOO_LONG}
        step = Step(seq=self.session.next_seq, session_id=self.session.session_id, kind=StepKind.END, content=None,
                    audit=[Audit(AuditType.RESULT, now(), text=short(text))], at=now())  # fmt: skip
        try:
            finished = stored_children.finish(
                self.session, step, status=SessionStatus.DONE, result=text, wait_for_notes=not last,
                error="ran out of its budget before finishing" if wrapped else None,
            )  # fmt: skip
        except steps.NotesPending as pending:
            self.notes = pending.notes
            return SessionStatus.RUNNING
        self.steps.append(step)
        delegation.resume_parent(self.session, finished)
        log.info("child done", extra={"turns": self.session.turns, "tool_calls": self.session.tool_calls})
        return SessionStatus.DONE

    def _settle_children(self, unfinished: list[str]) -> SessionStatus:
        """A child answered while sessions it delegated to still run (their calls were released by a question, or
        did not wait): it waits for them before reporting, so its result never leaves theirs out, and reads their
        results when the last one queues it again."""
        asking = [c for c in stored_children.get_children(unfinished)
                  if c.parent_question is not None and c.parent_question.answer is None]  # fmt: skip
        if asking:  # waiting for them would wait for ever: they wait for this session first
            self.notes += [delegation.question_again(c) for c in asking]
            return SessionStatus.RUNNING
        waiting = stored_children.rejoin(unfinished)
        if not waiting:
            return SessionStatus.RUNNING  # they ended meanwhile: their results are notes to read first
        audit = [Audit(AuditType.NOTES, now(), count=len(waiting))]
        paused = self._pause_for_children(waiting, None, audit, self.session.tool_calls, launch=False)
        return SessionStatus.PAUSED if paused else SessionStatus.RUNNING

    def _final_without_tools(self, instruction: str, *, kind: StepKind, minimal: bool = False) -> SessionStatus:
        """A last turn with no tools (a budget ran out, or the context is too long), and its reply posted."""
        note = types.Content(role="user", parts=[types.Part(text=instruction)])
        self._commit(kind, note, [Audit(AuditType(kind.value), now())])
        if minimal:
            first = [s for s in self.steps if s.kind == StepKind.PROMPT][:1]
            history = [*contents_of(first), note]
        else:
            history = shorten_tool_results(contents_of(self.steps), config.settings().model_context_tokens)
        self.surface.working()
        try:
            response = gemini.generate(history, system=prompts.SYSTEM)
        except (gemini.ModelUnavailable, gemini.ContextTooLong) as exc:
            return self._fail("the AI model could not produce a final answer", detail=str(exc))
        text = _text_of(_first_content(response))
        spent = gemini.usage(response)
        step = self._commit(
            StepKind.MODEL,
            types.Content(role="model", parts=[types.Part(text=text)]),
            [Audit(AuditType.MODEL, now(), text=short(text), calls=[], tokens=spent)],
            turns=self.session.turns + 1,
            tokens=self._tokens_after(spent),
        )
        return self._answer(text, step, last=True)

    def _fail(self, reason: str, *, detail: str) -> SessionStatus:
        fail_session(self.session, reason, self.surface, detail=detail)
        return SessionStatus.FAILED


def _first_content(response: types.GenerateContentResponse) -> types.Content:
    candidate = response.candidates[0] if response.candidates else None
    if candidate is None or candidate.content is None:
        return types.Content(role="model", parts=[])
    return candidate.content


def _text_of(content: types.Content) -> str:
    return "".join(p.text or "" for p in content.parts or [] if p.text and not p.thought)

"""How a session's run ends: its answer posted (or a child's result handed to its parent), a last turn without
tools when a budget or the context runs out, a reply the product writes itself, a stop, a failure.

The ``Ender`` ends a run, through the run's state (``RunState``); a child that answers while its own children
still run waits for them through ``Pauses``.
"""

from __future__ import annotations

import logging

from google.genai import types

from shared import config
from shared.agent import followup, gate, prompts
from shared.agent import model as gemini
from shared.agent.failure import fail_session
from shared.agent.pausing import Pauses
from shared.agent.run_state import RunState, text_of
from shared.agent.tools.base import short
from shared.agent.transcript import contents_of, shorten_tool_results
from shared.asks import delegation, questions, stopping
from shared.state import children as stored_children
from shared.state import ids, parent_questions, steps
from shared.state import questions as stored_questions
from shared.state.firestore import now
from shared.state.models import (
    Audit,
    AuditType,
    Note,
    SessionStatus,
    Step,
    StepKind,
    Waiting,
    WaitKind,
)

log = logging.getLogger(__name__)


class Ender:
    """Ends the run: posts or reports its answer, stops it, fails it, or gives it a last turn without tools."""

    def __init__(self, run: RunState, pauses: Pauses) -> None:
        self.run = run
        self.pauses = pauses  # a child that answers before its own children end waits for them
        # The run's own objects, shared (never rebound during a run).
        self.session, self.steps, self.surface = run.session, run.steps, run.surface

    def stopped(self, by: str) -> SessionStatus:
        """Someone stopped this session (or its tree): it ends here, says so, and stops what it delegated."""
        text = f"Stopped by {by}."
        if self.session.reports_to_parent:
            self.run.record_calls()  # a child's end is not a step of this run: the calls' results go first
            step = Step(seq=self.session.next_seq, session_id=self.session.session_id, kind=StepKind.END,
                        content=None, audit=[Audit(AuditType.RESULT, now(), text=text)], at=now())  # fmt: skip
            finished = stored_children.finish(self.session, step, status=SessionStatus.STOPPED, result=text,
                                              error=f"stopped by {by}", wait_for_notes=False)  # fmt: skip
            delegation.resume_parent(self.session, finished)
        else:
            key = ids.post_key(self.session.session_id, self.session.next_seq, "stopped")
            ts = self.surface.post(stopping.stopped_text(by), key=key)
            posted = [Audit(AuditType.POST, now(), ts=ts)]
            self.run.commit(StepKind.END, None, posted, status=SessionStatus.STOPPED,
                            error=f"stopped by {by}", ended_at=now())  # fmt: skip
            self.surface.stopped()
        stopping.close_waits(self.session, by=by)  # what it asked just before the stop reached it
        stopping.stop_children(self.session, by=by)
        delegation.release_askers(self.session, delegated=delegation.delegated_in(self.steps))
        log.info("session stopped", extra={"by": by})
        return SessionStatus.STOPPED

    def abandoned(self, turn: steps.TurnAbandoned) -> SessionStatus:
        """A question of the turn it was about to wait on was closed unanswered while it ran (a newer question in
        its thread replaced it): it ends abandoned instead of pausing, as ``shared.asks.questions.cancel_older`` ends
        a paused asker, and everything else its turn waited on ends with it (its children stopped: their results
        go nowhere; its other questions cancelled, its approvals expired), the children asking it released; a
        child's end stops all it delegated, non-blocking ones too (it reports once). The thread hears nothing more: the
        replaced question's post says so, and the newer question is there."""
        statuses = list(turn.closed.values())
        why = questions.why_closed(statuses, unanswered="a question went unanswered")
        by = _replacer(turn.closed) if questions.replaced(statuses) else "sweep"
        if self.session.reports_to_parent:  # (an MCP server's request for input, the one question a child asks)
            self.run.record_calls()
            step = Step(seq=self.session.next_seq, session_id=self.session.session_id, kind=StepKind.END,
                        content=None, audit=[Audit(AuditType.RESULT, now(), text=why)], at=now())  # fmt: skip
            finished = stored_children.finish(self.session, step, status=SessionStatus.ABANDONED, result=why,
                                              error=why, wait_for_notes=False)  # fmt: skip
            delegation.resume_parent(self.session, finished)
        else:
            self.run.commit(StepKind.END, None, [], status=SessionStatus.ABANDONED, error=why, ended_at=now(),
                            waiting=list(turn.record), wait_for_notes=False)  # fmt: skip
        # Its waits end before any call to Slack: a retry of this run finds the session ended and does nothing, so a
        # kill or a Slack error here is left to the refused answer or decision (``stopping.close_unwaited``).
        self.session.waiting = list(turn.record)
        stopping.end_waits(self.session, why=why, by=by)
        if self.session.reports_to_parent:  # a child reports once: what it delegated, non-blocking too, goes nowhere
            stopping.stop_children(self.session, by=stopping.DELEGATOR_ENDED)  # (as its redelivery, the sweep do)
        else:  # what else its conversation asked and left open closes with it
            stopping.close_asks(self.session, why=why, by=by, expired=True)
        delegation.release_askers(self.session, delegated=delegation.delegated_in(self.steps))
        if not self.session.reports_to_parent:
            self.surface.paused()
        log.info("session abandoned: a question of its turn was closed as it paused", extra={"closed": turn.closed})
        return SessionStatus.ABANDONED

    def reply_without_model(self, text: str) -> SessionStatus:
        """A reply the product writes itself (an input too large to use), recorded as the session's answer."""
        note = f"[the request was not used: {len(self.session.text):,} characters]"
        self.run.commit(StepKind.PROMPT, types.Content(role="user", parts=[types.Part(text=note)]), [])
        step = self.run.commit(
            StepKind.MODEL,
            types.Content(role="model", parts=[types.Part(text=text)]),
            [Audit(AuditType.MODEL, now(), text=short(text), calls=[])],
        )
        return self.answer(text, step, last=True)

    def late_result_without_model(self, note: Note) -> SessionStatus:
        """News (a delegated task's result) that arrived after the conversation's budget was spent: passed on to the
        thread as it is, without another model turn."""
        step = self.steps[-1]  # the opening step that holds the news
        return self.answer(prompts.late_result_text(note), step, last=True)

    def unposted_answer(self) -> SessionStatus | None:
        """After a crash between an answer's model turn and the end of the session: post that answer (its key makes
        a post Slack already has a no-op) and end, instead of asking the model for a second one."""
        last = self.steps[-1] if self.steps else None
        if last is None or last.session_id != self.session.session_id or last.kind != StepKind.MODEL:
            return None
        content = contents_of([last])[0] if last.content else None
        if content is None or any(p.function_call for p in content.parts or []):
            return None
        final = len(self.steps) > 1 and self.steps[-2].kind in {StepKind.WRAP_UP, StepKind.TOO_LONG}
        status = self.answer(text_of(content), last, last=final)
        return None if status == SessionStatus.RUNNING else status

    def answer(self, text: str, step: Step, *, last: bool = False) -> SessionStatus:
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
            self.run.commit(
                StepKind.END,
                None,
                audit,
                wait_for_notes=not last,
                status=status,
                closed_loop=closed,
                ended_at=now(),
                answer_ts=stamps[-1] if stamps else None,  # the message its feedback buttons are on
            )
            if last and self.run.notes:
                log.warning("session ended at its budget with unread notes", extra={"notes": len(self.run.notes)})
                followup.start_for_unread(self.session, self.run.notes)
        except steps.NotesPending as pending:
            self.run.commit(StepKind.END, None, audit)  # any post is recorded; the notes are read next turn
            self.run.notes = pending.notes
            return SessionStatus.RUNNING
        delegation.release_askers(self.session, delegated=delegation.delegated_in(self.steps))
        if closed:
            self.surface.done()
            followup.narrated(self.session)
            log.info(
                "session done", extra={"turns": self.session.limits.turns, "tool_calls": self.session.limits.tool_calls}
            )
            return SessionStatus.DONE
        self.surface.silent()
        log.warning("session ended without reporting back", extra={"turns": self.session.limits.turns})
        followup.after_silent_exit(self.session, reason="the session ended without reporting back")
        return SessionStatus.SILENT_EXIT

    def _report(self, text: str, *, last: bool) -> SessionStatus:
        """A child's end: its text is its parent's result (a budget's wrap-up says so), stored and reported to the
        parent in one transaction; it posts nothing."""
        delegated = delegation.delegated_in(self.steps)
        unfinished = stored_children.unfinished_of(self.session.session_id) if delegated else []
        if unfinished and not last:
            return self._settle_children(unfinished, text)
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
            self.run.notes = pending.notes
            return SessionStatus.RUNNING
        self.steps.append(step)
        delegation.resume_parent(self.session, finished)
        log.info("child done", extra={"turns": self.session.limits.turns, "tool_calls": self.session.limits.tool_calls})
        return SessionStatus.DONE

    def _settle_children(self, unfinished: list[str], text: str) -> SessionStatus:
        """A child answered while sessions it delegated to still run (their calls were released by a question, or
        did not wait): it waits for them before reporting, so its result never leaves theirs out, and reads their
        results when the last one queues it again. If they all ended meanwhile, it reports ``text`` again: their
        results are records its transcript has not read yet, and its end reads them first (its next turn has them)."""
        asking = [
            c for c in stored_children.get_children(unfinished) if parent_questions.still_open(parent_questions.of(c))
        ]
        if asking:  # waiting for them would wait for ever: they wait for this session first
            self.run.notes += [note for c in asking for note in delegation.question_again(c)]
            return SessionStatus.RUNNING
        waiting = stored_children.rejoin(unfinished)
        if not waiting:  # they ended since ``unfinished`` was read: a model turn now would not have their results
            return self._report(text, last=False)
        audit = [Audit(AuditType.NOTES, now(), count=len(waiting))]
        record = [Waiting(c.tree.delegate_seq or 0, c.tree.delegate_index or 0, WaitKind.CHILD, c.session_id)
                  for c in stored_children.get_children(waiting)]  # fmt: skip
        paused = self.pauses.pause_on_record(record, None, audit, self.session.limits.tool_calls)
        return SessionStatus.PAUSED if paused else SessionStatus.RUNNING

    def final_without_tools(self, instruction: str, *, kind: StepKind, minimal: bool = False) -> SessionStatus:
        """A last turn with no tools (a budget ran out, or the context is too long), and its reply posted."""
        note = types.Content(role="user", parts=[types.Part(text=instruction)])
        self.run.commit(kind, note, [Audit(AuditType(kind.value), now())])
        if minimal:
            first = [s for s in self.steps if s.kind == StepKind.PROMPT][:1]
            history = [*contents_of(first), note]
        else:
            history = shorten_tool_results(contents_of(self.steps), config.settings().model_context_tokens)
        self.surface.working()
        try:
            response = gemini.generate(history, system=prompts.SYSTEM)
        except (gemini.ModelUnavailable, gemini.ContextTooLong) as exc:
            return self.fail("the AI model could not produce a final answer", detail=str(exc))
        text = text_of(first_content(response))
        spent = gemini.usage(response)
        step = self.run.commit(
            StepKind.MODEL,
            types.Content(role="model", parts=[types.Part(text=text)]),
            [Audit(AuditType.MODEL, now(), text=short(text), calls=[], tokens=spent)],
            turns=self.session.limits.turns + 1,
            tokens=self.run.tokens_after(spent),
        )
        return self.answer(text, step, last=True)

    def fail(self, reason: str, *, detail: str) -> SessionStatus:
        # The failure is not a step of this run: the results of the calls that ran go first, as far as they can (a
        # failure to record them must not turn the failure into a crash and a retry).
        self.run.record_calls_left()
        fail_session(self.session, reason, self.surface, detail=detail)
        return SessionStatus.FAILED


def _replacer(closed: dict[str, str]) -> str:
    """The session whose newer question replaced one of ``closed`` (as its thread records), for what it stops; the
    question's id when the thread does not say."""
    found = stored_questions.get_questions(list(closed))
    for question in found.values():
        thread = stored_questions.thread_questions(question.channel, question.thread_ts)
        newer = thread.replaced.get(question.question_id)
        if newer is not None:
            return ids.asker_of_question(newer) or newer
    return next(iter(closed))


def first_content(response: types.GenerateContentResponse) -> types.Content:
    candidate = response.candidates[0] if response.candidates else None
    if candidate is None or candidate.content is None:
        return types.Content(role="model", parts=[])
    return candidate.content

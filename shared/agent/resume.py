"""How a paused turn resumes: each kind of outcome that arrives later (a parent's answer, the children's results,
the operator's decisions, an MCP server's answered request) becomes the function response of the call that waited
for it, by the call's position in its turn. What each kind reads and what its call gets is that kind's module
(``shared.agent.waits.kinds``); this module only dispatches to them.

The ``Resumer`` writes those responses, through the run's state (``RunState``); it runs calls through ``ToolCalls``
and pauses again through ``Pauses``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from google.genai import types

from shared.agent import prompts
from shared.agent.calls import ToolCalls
from shared.agent.run_state import RunState
from shared.agent.tools.base import Outcome, Suspend
from shared.agent.tools.result import ToolResult
from shared.agent.transcript import pending_turn
from shared.agent.waits import kinds, outcomes
from shared.agent.waits.base import Resumed
from shared.agent.waits.resuming import Resuming, WaitOn
from shared.asks import tree_status
from shared.limits import per_call_chars
from shared.state import questions as stored
from shared.state.models import Audit, Note, Question, SessionKind, StepKind, Waiting, WaitKind

if TYPE_CHECKING:  # Pauses makes its Resumer (each calls the other)
    from shared.agent.pausing import Pauses

NO_OUTCOME = ToolResult.fail("no outcome")


class Resumer:
    """Writes the responses of a paused turn's calls as their outcomes arrive (True where it says: paused again)."""

    def __init__(self, run: RunState, calls: ToolCalls, pauses: Pauses) -> None:
        self.run = run
        self.calls = calls
        self.pauses = pauses  # a resumed call may pause again (an MCP server that asks for more input)
        # The run's own objects, shared (never rebound during a run).
        self.session, self.steps, self.tools, self.surface = run.session, run.steps, run.tools, run.surface

    # --- an MCP server's request for input, answered ------------------------------------------------------------
    def answered_question(self) -> Question | None:
        """The answered question a continuation starts from (read once: the opening uses it too)."""
        session = self.session
        if session.kind != SessionKind.CONTINUATION or not session.question_id or session.late_note is not None:
            return None
        return stored.get_question(session.question_id)

    # --- a mixed turn's waiting record, resolved ---------------------------------------------------------------
    def resume_record(self, record: list[Waiting], *, consumed: list[Note] | None = None) -> bool:
        """Every call the record waited on gets its outcome, in call order, in one step: an answer, a decision (an
        approved call runs once, through the ledger), a child's result, the parent's answer, an MCP call run again
        with the operator's input. A record whose turn is no longer pending (a child that waited for its own
        children before reporting) brings their results as news. True if the session paused again (an MCP server
        asked for more input)."""
        seq = record[0].seq
        turn = pending_turn(self.steps)
        resuming = Resuming(turn, seq, {w.index: WaitOn(w.kind, w.key) for w in record})
        if turn is None:  # it waited for its children before reporting, its calls answered long ago: results are news
            news = [note for kind, wait in kinds.KINDS.items() for note in wait.news(_of_kind(record, kind))]
            if news:
                resuming.responses.text(prompts.notes_text(news))
        # Every kind's outcomes in one batched read (none if the run read them as it started, beside its transcript)
        found = outcomes.read(self.session, record, known=self.run.outcomes_read(record))
        per_call = per_call_chars(len(turn.calls) if turn is not None else len(record))  # as the turn's first pass
        audit: list[Audit] = []
        after_step: list[tuple[str, Callable[[], object]]] = []
        again: list[Waiting] = []
        for entry in sorted(record, key=lambda w: w.index):
            on = WaitOn(entry.kind, entry.key)
            waiting = resuming.call_for(on)
            if waiting is None:
                continue  # its response is already in the transcript (a re-run after a crash)
            outcome = self._record_outcome(entry, waiting[1], found, audit, after_step)
            if isinstance(outcome, Suspend):  # the server asks for (more) input: that call waits again
                then = Waiting(seq, entry.index, WaitKind.MCP_INPUT, outcome.question.question_id)
                resuming.arrive(on, then=WaitOn(then.kind, then.key))
                again.append(then)
                continue
            resuming.arrive(on, outcome.capped(per_call) if isinstance(outcome, ToolResult) else NO_OUTCOME)
        try:
            self.run.commit(StepKind.ANSWER, resuming.responses, audit, consumed=consumed or [], waiting=[])
        finally:  # its display updates, beside the model's request, made by the next step (even if this was refused)
            for what, update in after_step:
                self.run.show_beside(what, update, by_next_step=True)
        if any(kinds.of(w.kind).shown_in_tree for w in record):
            tree_status.refresh(self.session, self.surface)
        if again:
            return self.pauses.pause_on_record(again, None, [], self.session.limits.tool_calls)
        return False

    def _record_outcome(self, entry: Waiting, call: types.FunctionCall, found: dict[WaitKind, Any],
                        audit: list[Audit], after_step: list[tuple[str, Callable[[], object]]]) -> Outcome:  # fmt: skip
        """What the call that waited on ``entry`` gets, from its kind (its audit appended to ``audit``, the display
        updates to make once its step is stored to ``after_step``)."""
        if entry.released:  # it no longer waits (a child of the turn asked its parent): its result comes as a note
            return ToolResult.ok({"status": "still running", "child_id": entry.key, "note": RELEASED})
        resumed = Resumed(self.session, self.calls, self.tools, audit, after_step)
        return kinds.of(entry.kind).outcome(resumed, entry, call, found[entry.kind])


RELEASED = "A child asked you a question, so you no longer wait: its result reaches you as a note."


def _of_kind(record: list[Waiting], kind: WaitKind) -> list[Waiting]:
    return [w for w in record if w.kind == kind]

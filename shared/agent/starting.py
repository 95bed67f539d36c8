"""Where a run starts: the session's first step (or a reply without the model), what a crash left, or the outcomes
a paused turn waited for.

The ``Starter`` decides where a run starts; the ``Resumer`` and the ``Ender`` do the work.
"""

from __future__ import annotations

from shared.agent import prompts
from shared.agent.ending import Ender
from shared.agent.opening import opening_content
from shared.agent.resume import Resumer
from shared.agent.run_state import RunState
from shared.agent.tools.mcp.inputs import Pending as McpPending
from shared.agent.transcript import pending_turn
from shared.limits import TOO_LARGE_REQUEST_CHARS
from shared.state.models import Question, SessionKind, SessionStatus, Waiting, WaitKind


class Starter:
    """Where a run starts: its first step, an answer a crash left unposted, or what its paused turn waited for."""

    def __init__(self, run: RunState, resumer: Resumer, ender: Ender) -> None:
        self.run = run
        self.resumer = resumer
        self.ender = ender
        # The run's own objects, shared (never rebound during a run).
        self.session, self.steps = run.session, run.steps

    def start(self) -> SessionStatus | None:
        """Where this run starts: its first step, an answer a crash left unposted, or its children's results."""
        if not self.run.has_written():
            refused = self._open()
            if refused is not None:
                return refused
        ended = self.ender.unposted_answer()
        if ended is None and self.session.waiting and self._own_turn_waits():
            # a child queued again once everything its paused turn waited on was resolved
            ended = SessionStatus.PAUSED if self.resumer.resume_record(self.session.waiting) else None
        elif ended is None and not self.session.waiting and self._answered_by_parent():
            # read-compat: a child queued again by its parent's answer before every pause was a waiting record
            asked = self.session.parent_question
            assert asked is not None
            record = [Waiting(asked.seq, asked.index, WaitKind.PARENT_ANSWER, asked.question_id)]
            ended = SessionStatus.PAUSED if self.resumer.resume_record(record) else None
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
        """Its record is for its own turn: pending (its calls get their outcomes), or answered long ago (a child that
        waited for its children before reporting: their results are news)."""
        turn = pending_turn(self.steps)
        return turn is None or turn.session_id == self.session.session_id

    def _answered_question(self) -> Question | None:
        """The answered question a continuation starts from: as its claim read it, else read now."""
        asks = self.session.kind == SessionKind.CONTINUATION and self.session.late_note is None
        if asks and self.run.question is not None:
            return self.run.question
        return self.resumer.answered_question()

    def _open(self) -> SessionStatus | None:
        """The session's first step; a status if that already ends it (an input too large to use) or pauses it (a
        resumed MCP call whose server asks the operator again)."""
        if len(self.session.text) > TOO_LARGE_REQUEST_CHARS:
            return self.ender.reply_without_model(prompts.too_large_reply(len(self.session.text)))
        if self.session.waiting:  # everything its paused turn waited on is resolved: each call gets its outcome
            return SessionStatus.PAUSED if self.resumer.resume_record(self.session.waiting) else None
        question = self._answered_question()
        if question is not None and question.mcp_input:  # read-compat: an MCP request's answer's old continuation
            pending = McpPending.from_doc(question.mcp_input)
            record = [Waiting(pending.seq, pending.index, WaitKind.MCP_INPUT, question.question_id)]
            return SessionStatus.PAUSED if self.resumer.resume_record(record) else None
        kind, content, audit = opening_content(self.session, self.steps, question=question)
        self.run.commit(kind, content, audit)
        return None

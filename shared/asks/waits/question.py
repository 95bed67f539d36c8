"""An operator question whose asker ended: cancelled, its post saying why (the ask lifecycle's cancel step,
``shared.asks.lifecycle``)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.asks import lifecycle
from shared.asks.waits.base import Ending
from shared.state import questions as stored_questions
from shared.state.models import Waiting, WaitKind


@dataclass(frozen=True)
class QuestionEnd:
    """The end of a wait on a question document (an MCP server's request for input is one too: ``mcp_input``)."""

    kind: WaitKind = WaitKind.QUESTION

    def end(self, entry: Waiting, ending: Ending) -> list[str]:
        question = stored_questions.get_question(entry.key)
        if question is not None and lifecycle.cancel(question, why=ending.why, by=ending.by, expired=ending.expired):
            return [entry.key]
        return []


WAIT = QuestionEnd()

"""An operator question answered, cancelled or abandoned: the call that asked gets the answer (and how it matched
the options), or an error saying the operator did not answer."""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import firestore
from google.genai import types

from shared.agent.opening import answer_of
from shared.agent.tools.base import Outcome
from shared.agent.tools.result import ToolResult
from shared.agent.waits import mcp_input
from shared.agent.waits.base import Resumed
from shared.state.batched import Docs
from shared.state.firestore import now, question_ref
from shared.state.models import Audit, AuditType, Note, Question, QuestionStatus, Waiting, WaitKind
from shared.state.session_model import Session


@dataclass(frozen=True)
class QuestionResume:
    kind: WaitKind = WaitKind.QUESTION
    shown_in_tree: bool = False

    def pausing(self, entries: list[Waiting]) -> None:
        return None

    def refs(self, session: Session, seq: int, entries: list[Waiting]) -> list[firestore.DocumentReference]:
        return [question_ref(w.key) for w in entries]

    def found(self, session: Session, seq: int, entries: list[Waiting], docs: Docs) -> dict[str, Question]:
        return mcp_input.questions_in(docs, [w.key for w in entries])

    def outcome(self, resumed: Resumed, entry: Waiting, call: types.FunctionCall,
                found: dict[str, Question]) -> Outcome:  # fmt: skip
        question = found.get(entry.key)
        resumed.audit.append(Audit(AuditType.ANSWER, now()))
        result = result_of(question)
        if result is not None or question is None:
            return result or NO_QUESTION
        return mcp_input.run_with_input(resumed, question, call)  # a record stored under the old markers

    def news(self, entries: list[Waiting]) -> list[Note]:
        return []


NO_QUESTION = ToolResult.fail("the operator did not answer (the question was lost)")


def result_of(question: Question | None) -> ToolResult | None:
    """What the call that asked ``question`` gets, from the question alone (None: an MCP server's request, stored
    under the old markers, whose call runs again with the answer)."""
    if question is None:
        return NO_QUESTION
    if question.status != QuestionStatus.ANSWERED:
        return ToolResult.fail(f"the operator did not answer (the question was {question.status.value})")
    return ToolResult.ok(answer_of(question)) if not question.mcp_input else None


WAIT = QuestionResume()

"""An MCP server's request for the operator's input, answered (or not): the paused call runs again with the answer
through the tool protocol (``ResumesWithInput``), once, through the ledger (its own entry per round); it may ask
for more input (a ``Suspend``: the call waits again)."""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import firestore
from google.genai import types

from shared.agent.tools.base import Outcome, ResumesWithInput, Wait
from shared.agent.tools.mcp.inputs import Pending as McpPending
from shared.agent.tools.result import ToolResult
from shared.agent.waits.base import Resumed, cannot_wait
from shared.limits import MAX_TOOL_RESULT_CHARS
from shared.state import ledger
from shared.state.batched import Docs
from shared.state.firestore import now, question_ref
from shared.state.models import Audit, AuditType, Note, Question, QuestionStatus, Waiting, WaitKind
from shared.state.session_model import Session


def run_with_input(resumed: Resumed, question: Question, call: types.FunctionCall) -> Outcome:
    """The paused MCP call run again with the operator's answer: its result as stored, or a new request for input
    (its audit appended)."""
    pending = McpPending.from_doc(question.mcp_input or {})
    name = call.name or ""
    found: object = resumed.tools.get(name)
    tool = found if isinstance(found, ResumesWithInput) else None  # through the tool protocol, whatever the tool
    ctx = resumed.calls.context(pending.seq, pending.index, call, caller=pending.caller)
    outcome: Outcome
    if question.status != QuestionStatus.ANSWERED:
        outcome = ToolResult.fail(f"the operator's input was not given (the question was "
                                  f"{question.status.value}), so the call did not complete")  # fmt: skip
    elif tool is None:
        outcome = ToolResult.fail(f"{name} is not available now (its MCP server could not be reached), so the "
                                  "call did not complete")  # fmt: skip
    else:
        part = f"-r{pending.round}"
        entry = ledger.entries(resumed.session, pending.seq, [pending.index], part=part).get(pending.index)
        resumes = tool
        outcome = resumed.calls.call(name, call, ctx, entry, run=lambda: resumes.resume_input(question, ctx),
                                     part=part)  # fmt: skip
    if isinstance(outcome, Wait):
        outcome = cannot_wait(name)
    elif isinstance(outcome, ToolResult):
        outcome = outcome.capped(MAX_TOOL_RESULT_CHARS)
    resumed.audit.append(resumed.calls.audit(name, call, outcome, ctx))
    return outcome


def questions_in(docs: Docs, question_ids: list[str]) -> dict[str, Question]:
    """The questions of ``question_ids`` among ``docs`` (read in the resumption's batch), by id."""
    found = {key: docs.get(question_ref(key).path) for key in question_ids}
    return {key: Question.from_doc(data) for key, data in found.items() if data is not None}


@dataclass(frozen=True)
class McpInputResume:
    kind: WaitKind = WaitKind.MCP_INPUT
    shown_in_tree: bool = False

    def pausing(self, entries: list[Waiting]) -> None:
        return None

    def refs(self, session: Session, seq: int, entries: list[Waiting]) -> list[firestore.DocumentReference]:
        return [question_ref(w.key) for w in entries]

    def found(self, session: Session, seq: int, entries: list[Waiting], docs: Docs) -> dict[str, Question]:
        return questions_in(docs, [w.key for w in entries])

    def outcome(self, resumed: Resumed, entry: Waiting, call: types.FunctionCall,
                found: dict[str, Question]) -> Outcome:  # fmt: skip
        question = found.get(entry.key)
        resumed.audit.append(Audit(AuditType.ANSWER, now()))
        if question is None:
            return ToolResult.fail("the operator did not answer (the question was lost)")
        return run_with_input(resumed, question, call)

    def news(self, entries: list[Waiting]) -> list[Note]:
        return []


WAIT = McpInputResume()

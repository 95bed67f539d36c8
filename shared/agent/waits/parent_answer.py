"""A child's blocking question to its parent, answered: each blocking ``ask_parent`` call of the turn that asked
gets the parent's answer to its own question (each call is its own question), or an error if it was not answered
(or released: the parent ended)."""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import firestore
from google.genai import types

from shared.agent.tools.base import Outcome
from shared.agent.tools.result import ToolResult
from shared.agent.waits.base import Resumed
from shared.asks import delegation
from shared.state import parent_questions
from shared.state.batched import Docs
from shared.state.models import Note, Waiting, WaitKind
from shared.state.session_model import Session


@dataclass(frozen=True)
class ParentAnswerResume:
    kind: WaitKind = WaitKind.PARENT_ANSWER
    shown_in_tree: bool = False

    def pausing(self, entries: list[Waiting]) -> None:
        return None

    def refs(self, session: Session, seq: int, entries: list[Waiting]) -> list[firestore.DocumentReference]:
        return []  # the answer is on the session itself

    def found(self, session: Session, seq: int, entries: list[Waiting], docs: Docs) -> None:
        return None

    def outcome(self, resumed: Resumed, entry: Waiting, call: types.FunctionCall, found: None) -> Outcome:
        asked = parent_questions.for_call(parent_questions.of(resumed.session), entry.key, entry.seq)
        if asked is None or asked.answer is None:
            return ToolResult.fail(delegation.UNANSWERED)
        if asked.released:
            return ToolResult.fail(asked.answer or delegation.UNANSWERED)
        return ToolResult.ok({"answer": asked.answer, "from": "the session that delegated your task"})

    def news(self, entries: list[Waiting]) -> list[Note]:
        return []


WAIT = ParentAnswerResume()

"""An operator question (``ask_operator``): its question document, resolved once it is no longer open (answered,
cancelled, abandoned)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.cloud import firestore

from shared.state.firestore import question_ref
from shared.state.models import QuestionStatus, Waiting, WaitKind


@dataclass(frozen=True)
class QuestionWait:
    """A wait on a question document (an MCP server's request for input is one too: ``mcp_input``)."""

    kind: WaitKind = WaitKind.QUESTION

    def ref(self, entry: Waiting) -> firestore.DocumentReference:
        return question_ref(entry.key)

    def resolved(self, entry: Waiting, found: dict[str, Any] | None, asker: dict[str, Any]) -> bool:
        return (found or {}).get("status") != QuestionStatus.OPEN.value


WAIT = QuestionWait()

"""A child's blocking question to its parent (``ask_parent``): kept on the child's own document
(``parent_questions``), so nothing else is read; resolved once the parent answered that call's own question, or once
the child no longer holds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.state.models import Waiting, WaitKind


def parent_answered(asker: dict[str, Any], entry: Waiting) -> bool | None:
    """Whether the parent answered the question ``entry`` waits on: each ``ask_parent`` call of a turn is its own
    question (``entry.key``) with its own answer. None: the child no longer holds it, so nothing waits on it."""
    held = asker.get("parent_questions") or ([asker["parent_question"]] if asker.get("parent_question") else [])
    asked = next((q for q in held if q.get("question_id") == entry.key), None)
    if asked is None and len(held) == 1 and held[0].get("seq") == entry.seq:
        asked = held[0]  # read-compat: a document from before the list kept one question for the whole turn
    if asked is None:
        return None
    return asked.get("answer") is not None


@dataclass(frozen=True)
class ParentAnswerWait:
    kind: WaitKind = WaitKind.PARENT_ANSWER

    def ref(self, entry: Waiting) -> None:
        return None  # the asker's own document

    def resolved(self, entry: Waiting, found: dict[str, Any] | None, asker: dict[str, Any]) -> bool:
        return parent_answered(asker, entry) is not False


WAIT = ParentAnswerWait()

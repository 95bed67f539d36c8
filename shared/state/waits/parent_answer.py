"""A child's blocking question to its parent (``ask_parent``): kept on the child's own document
(``parent_question``), so nothing else is read; resolved once the parent answered it, or once it is no longer the
child's question."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.state.models import Waiting, WaitKind


def parent_answered(asker: dict[str, Any], entry: Waiting) -> bool | None:
    """Whether the parent answered the question ``entry`` waits on: a child asks one question at a time (its latest
    ``parent_question``), and the parent's one answer answers every blocking question of the turn that asked it
    (sibling ``ask_parent`` calls in one turn each wait on it). None: the question is no longer the child's (a
    later turn asked another), so nothing waits on it."""
    asked = asker.get("parent_question") or {}
    if asked.get("question_id") != entry.key and asked.get("seq") != entry.seq:
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

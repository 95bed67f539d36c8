"""A child's question to its parent, the child ended: nothing to end (the question is the child's own)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.asks.waits.base import Ending
from shared.state.models import Waiting, WaitKind


@dataclass(frozen=True)
class ParentAnswerEnd:
    kind: WaitKind = WaitKind.PARENT_ANSWER

    def end(self, entry: Waiting, ending: Ending) -> list[str]:
        return []


WAIT = ParentAnswerEnd()

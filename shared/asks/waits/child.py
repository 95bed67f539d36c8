"""A blocking child whose parent ended: stopped, with its tree (its work has nobody to go to)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.asks.waits.base import Ending
from shared.state.models import Waiting, WaitKind


@dataclass(frozen=True)
class ChildEnd:
    kind: WaitKind = WaitKind.CHILD

    def end(self, entry: Waiting, ending: Ending) -> list[str]:
        return ending.stop(entry.key)


WAIT = ChildEnd()

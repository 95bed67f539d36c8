"""What every kind of wait does when the session waiting on it ends while paused (issue 23): a question is
cancelled, an approval expires or is denied, a child is stopped, a parent's answer needs nothing. One module per
kind implements it; ``shared.asks.waits`` holds them by ``WaitKind``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from shared.state.models import Waiting, WaitKind


@dataclass(frozen=True)
class Ending:
    """Why the waits end and who ended them: ``expired`` (the sweep's bound) or not (a stop: approvals are denied);
    ``stop`` stops a session's tree (``shared.asks.stopping.stop``, passed in: stopping ends waits in turn)."""

    why: str
    by: str
    expired: bool
    stop: Callable[[str], list[str]]


class EndedWait(Protocol):
    """One kind of wait's asks side."""

    @property
    def kind(self) -> WaitKind: ...

    def end(self, entry: Waiting, ending: Ending) -> list[str]:
        """End what ``entry`` (not released) waits on, its post saying why; the ids it ended (none if it had
        ended already: each end is guarded by its own transaction)."""
        ...

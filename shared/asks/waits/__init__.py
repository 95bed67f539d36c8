"""Each kind of wait's asks side (issue 23), one module per ``WaitKind``: what ends when the session waiting on it
ends while paused (``base.EndedWait``); ``shared.asks.stopping.end_waits`` ends a record through them. The stored
side of each kind is ``shared.state.waits``, the agent's (the outcome a resumed call gets) ``shared.agent.waits``.

May import ``shared.state``, ``shared.slack`` and the core modules; never ``shared.agent``.
"""

from __future__ import annotations

from types import MappingProxyType

from shared.asks.waits import approval, child, mcp_input, parent_answer, question
from shared.asks.waits.base import EndedWait, Ending
from shared.state.models import WaitKind

__all__ = ["KINDS", "EndedWait", "Ending", "of"]

KINDS: MappingProxyType[WaitKind, EndedWait] = MappingProxyType(
    {wait.kind: wait for wait in (question.WAIT, approval.WAIT, child.WAIT, parent_answer.WAIT, mcp_input.WAIT)}
)


def of(kind: WaitKind) -> EndedWait:
    """The asks side of ``kind``."""
    return KINDS[kind]

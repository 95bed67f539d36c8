"""Each kind of wait's stored side (issue 23), one module per ``WaitKind``: where the thing a paused call waits on
is stored and whether it is resolved (``base.StoredWait``). ``of`` finds a kind's; ``shared.state.waiting`` reads
a waiting record through them. The agent's side of each kind (the outcome a resumed call gets) is
``shared.agent.waits``, the asks' side (ending a wait: cancel, expire) ``shared.asks.waits``.

May import only ``shared.state``'s own modules and the core modules (config, errors, logs).
"""

from __future__ import annotations

from types import MappingProxyType

from shared.state.models import WaitKind
from shared.state.waits import approval, child, mcp_input, parent_answer, question
from shared.state.waits.base import StoredWait

KINDS: MappingProxyType[WaitKind, StoredWait] = MappingProxyType(
    {wait.kind: wait for wait in (question.WAIT, approval.WAIT, child.WAIT, parent_answer.WAIT, mcp_input.WAIT)}
)


def of(kind: WaitKind) -> StoredWait:
    """The stored side of ``kind``."""
    return KINDS[kind]

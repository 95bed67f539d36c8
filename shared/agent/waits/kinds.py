"""Each kind of wait's agent side (issue 23), one module per ``WaitKind``: what a resumed call that waited on it
gets (``base.ResumedWait``); ``shared.agent.resume`` resumes a waiting record through them. The stored side of each
kind is ``shared.state.waits``, the asks' side (ending a wait: cancel, expire) ``shared.asks.waits``."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from shared.agent.waits import approval, child, mcp_input, parent_answer, question
from shared.agent.waits.base import ResumedWait
from shared.state.models import WaitKind

KINDS: MappingProxyType[WaitKind, ResumedWait[Any]] = MappingProxyType(
    {wait.kind: wait for wait in (question.WAIT, approval.WAIT, child.WAIT, parent_answer.WAIT, mcp_input.WAIT)}
)


def of(kind: WaitKind) -> ResumedWait[Any]:
    """The agent side of ``kind``."""
    return KINDS[kind]

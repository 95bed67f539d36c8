"""An MCP server's request for input whose asker ended: cancelled as the question it is stored as."""

from __future__ import annotations

from shared.asks.waits.question import QuestionEnd
from shared.state.models import WaitKind

WAIT = QuestionEnd(WaitKind.MCP_INPUT)

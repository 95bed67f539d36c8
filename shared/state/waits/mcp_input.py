"""An MCP server's request for the operator's input: stored as a question (``mcp_input`` on it), resolved as one."""

from __future__ import annotations

from shared.state.models import WaitKind
from shared.state.waits.question import QuestionWait

WAIT = QuestionWait(WaitKind.MCP_INPUT)

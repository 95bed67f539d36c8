"""A session's budgets: model turns, tool calls and wall time, whichever runs out first; and how much of its
conversation's budget a session may use."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from shared import config
from shared.state.models import AuditType, Step
from shared.state.session_model import Session


@dataclass
class Budget:
    max_turns: int
    max_tool_calls: int
    wall_seconds: float
    started: float = field(default_factory=time.monotonic)

    def time_left(self) -> float:
        """Seconds of wall time left; checked before every tool call, not only between turns."""
        return self.wall_seconds - (time.monotonic() - self.started)

    def exhausted(self, turns: int, tool_calls: int) -> str | None:
        """Why the session must wrap up now, or None."""
        if turns >= self.max_turns:
            return f"{self.max_turns} model turns"
        if tool_calls >= self.max_tool_calls:
            return f"{self.max_tool_calls} tool calls"
        if time.monotonic() - self.started >= self.wall_seconds:
            return f"{int(self.wall_seconds)} seconds"
        return None


def conversation_allowance(session: Session, transcript: list[Step]) -> tuple[int, int]:
    """The model turns and tool calls this session may use. A child has its allotment from its tree. A top-level
    conversation (a mention and every continuation of its transcript) shares one budget, the root's part of its
    tree's: a continuation gets what the sessions before it left (a late result cannot start a fresh budget)."""
    settings = config.settings()
    if session.limits.max_turns is not None:
        return session.limits.max_turns, session.limits.max_tool_calls or 0
    turns = min(settings.session_max_turns, settings.tree_max_turns)
    calls = min(settings.session_max_tool_calls, settings.tree_max_tool_calls)
    earlier = [entry for step in transcript if step.session_id != session.session_id for entry in step.audit]
    used_turns = sum(1 for entry in earlier if entry.type == AuditType.MODEL)
    used_calls = sum(1 for entry in earlier if entry.type == AuditType.TOOL)
    return max(0, turns - used_turns), max(0, calls - used_calls)

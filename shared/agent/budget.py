"""A session's budgets: model turns, tool calls and wall time, whichever runs out first."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


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

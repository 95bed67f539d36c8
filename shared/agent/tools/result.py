"""What a tool call came to: ``ToolResult``, a value or an error (plus any other keys its response carries).

Every part of the agent passes ``ToolResult`` values: the tools, the ledger's replayed responses, the turn's
dispatcher, the resumptions and the pure resume planner. The function response's dict (``{"result": ...}`` or
``{"error": ...}``, the form stored in transcripts and the ledger) is made by ``to_dict`` only where a function
response is built for the model, stored, or recorded, and read back by ``from_dict``; the stored form is unchanged,
so transcripts written before resume as they were. No I/O, no model types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.limits import capped

RESULT = "result"
ERROR = "error"


@dataclass(frozen=True)
class ToolResult:
    """A call's result: ``value`` when it succeeded, ``error`` (what the model is told) when it failed; ``extra`` is
    any other key of the response beside ``result``/``error`` (a note, an operator's edit, a declined request)."""

    value: Any = None
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def ok(cls, value: Any, **extra: Any) -> ToolResult:
        return cls(value, None, extra)

    @classmethod
    def fail(cls, error: str, **extra: Any) -> ToolResult:
        return cls(None, error, extra)

    @property
    def failed(self) -> bool:
        return self.error is not None

    def with_extra(self, **extra: Any) -> ToolResult:
        """The same result with more keys beside its value or error."""
        return ToolResult(self.value, self.error, {**self.extra, **extra})

    def to_dict(self) -> dict[str, Any]:
        """The function response as sent, stored and recorded: ``{"result": value}`` or ``{"error": error}``."""
        main = {ERROR: self.error} if self.error is not None else {RESULT: self.value}
        return {**main, **self.extra}

    @classmethod
    def from_dict(cls, response: Mapping[str, Any]) -> ToolResult:
        """A stored function response read back (a ledger entry's, an older transcript's)."""
        extra = {key: value for key, value in response.items() if key not in (RESULT, ERROR)}
        if ERROR in response:
            error = response[ERROR]
            return cls(None, error if isinstance(error, str) else json.dumps(error, default=str), extra)
        return cls(response.get(RESULT), None, extra)

    def capped(self, limit: int) -> ToolResult:
        """The result as stored and sent: one whose response is larger than ``limit`` characters is cut (to the
        response's JSON text, under its key), saying so."""
        text = json.dumps(self.to_dict(), ensure_ascii=False, default=str)
        if len(text) <= limit:
            return self
        return ToolResult.fail(capped(text, limit)) if self.failed else ToolResult.ok(capped(text, limit))

"""The ``Tool`` protocol: what every tool the model may call offers, and what a call may return.

A tool has a name, a Gemini declaration, two facts the silent-exit gate needs (``outward``: the requester expects
a report after it runs; ``posts``: a successful call leaves a message in the thread), ``idempotent`` (calling it
twice with the same idempotency key does what calling it once does; the ledger re-runs only such tools after a
crash), ``top_level_only`` (only a session that talks to the thread may use it) and ``starts_children`` (a call
may start a delegated session: the thread's tree status is refreshed after the turn's calls ran). ``run`` returns a
``ToolResult`` (a value or an error), a ``Suspend`` (the session pauses, and the operator's answer will become the
result) or a ``Wait`` (a child's result, or the parent's answer, will).
Function tools (``shared.agent.tools.function``) implement it from typed Python callables; an MCP toolset can
implement the same protocol.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from google.genai import types

from shared import config_values
from shared.agent.tools.result import ToolResult
from shared.errors import ProductError
from shared.slack.surface import ThreadSurface
from shared.state import ids
from shared.state.models import Question
from shared.state.session_model import Session

Tier = config_values.Tier  # declared once, with the TOOL_TIERS parser; the tools name it from here


class ToolError(ProductError):
    """A tool's own refusal, sent back to the model as an error it can act on."""


@dataclass(frozen=True)
class Suspend:
    """A tool's answer "not now": the session pauses until ``question`` is answered, whose answer is the
    call's result; ``response`` is what the audit log records for the call meanwhile (not a result)."""

    question: Question
    response: dict[str, Any]


@dataclass(frozen=True)
class Wait:
    """A tool's answer "later": a blocking delegation (``key`` is the child, whose result will be the response;
    the session pauses once every call of the turn has run, until all the turn's children have ended), or a
    child's blocking question to its parent (``child=False``: ``key`` is the question, whose answer will be it).
    ``response`` is what the audit log records for the call meanwhile (not a result)."""

    key: str
    response: dict[str, Any]
    child: bool = True


Outcome = ToolResult | Suspend | Wait


@dataclass
class ToolContext:
    """What a tool may know about the call it serves; nothing of it is in the tool's signature, so the model
    cannot forge it."""

    session: Session
    seq: int  # the step of the model turn that asked for the call
    call_index: int
    call_id: str | None
    surface: ThreadSurface
    used: Mapping[str, int] = field(default_factory=dict)  # calls this session made so far, by tool name
    thread_text: str = ""  # what the thread said when the session opened (the policy reads hosts from it)
    caller_id: str = ""  # the session whose model turn made the call (a resumed approval runs in a continuation)
    post_ts: list[str] = field(default_factory=list)  # messages this call posted

    def post_key(self, suffix: str = "") -> str:
        return ids.post_key(self.session.session_id, self.seq, f"{self.call_index}{suffix}")

    @property
    def caller(self) -> str:
        """The session whose model turn made this call (an approved call runs later, in a continuation)."""
        return self.caller_id or self.session.session_id

    @property
    def idempotency_key(self) -> str:
        """Stable for this call across every re-run after a crash: pass it to a backend that de-duplicates by it."""
        return ids.call_key(self.caller, self.seq, self.call_index)


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def outward(self) -> bool: ...

    @property
    def posts(self) -> bool: ...

    @property
    def idempotent(self) -> bool: ...

    @property
    def tier(self) -> Tier: ...

    @property
    def top_level_only(self) -> bool: ...

    @property
    def starts_children(self) -> bool: ...

    def declaration(self) -> types.FunctionDeclaration: ...

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Outcome: ...


@runtime_checkable
class ResumesWithInput(Protocol):
    """A tool whose call can pause on a request for the operator's input (``Suspend`` with ``question.mcp_input``)
    and run again with the answer: the loop resumes it through this, whatever the tool is."""

    def resume_input(self, question: Question, ctx: ToolContext) -> Outcome: ...


_context: contextvars.ContextVar[ToolContext] = contextvars.ContextVar("tool_context")


def context() -> ToolContext:
    """The call being served; only valid inside a tool."""
    return _context.get()


@contextmanager
def serving(ctx: ToolContext) -> Iterator[ToolContext]:
    token = _context.set(ctx)
    try:
        yield ctx
    finally:
        _context.reset(token)


def short(value: Any, limit: int = 300) -> str:
    """A short, JSON-ish rendering for the audit log."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"

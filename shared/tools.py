"""The tool registry: typed Python functions the model may call, and how a call is run.

A tool is a function with type hints and a docstring, registered with ``@tool``.
Its Gemini declaration is derived from the function by google-genai
(``FunctionDeclaration.from_callable_with_api_option``), and its arguments are
validated by pydantic against the same signature, so the schema the model sees
and the check the call passes can never disagree. Each tool says whether it is
*outward* (the requester expects a report after it runs) or inward; the
silent-exit gate reads that from the audit log.

A tool reaches the session it runs for through ``context()``; nothing about the
session appears in its signature, so the model cannot forge it.
"""

from __future__ import annotations

import contextvars
import functools
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pydantic
from google.genai import types

from shared.models import Question, Session


@dataclass(frozen=True)
class Tool:
    name: str
    fn: Callable[..., Any]
    outward: bool
    top_level_only: bool
    posts: bool  # a successful call leaves a message in the thread

    def declaration(self) -> types.FunctionDeclaration:
        vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in {"1", "true", "yes"}
        return _declaration(self.fn, "VERTEX_AI" if vertex else "GEMINI_API")


@functools.cache
def _declaration(fn: Callable[..., Any], api_option: str) -> types.FunctionDeclaration:
    """Derived once per process: it depends only on the function and the API (measured at ~2 ms per turn)."""
    return types.FunctionDeclaration.from_callable_with_api_option(
        callable=fn,
        api_option="VERTEX_AI" if api_option == "VERTEX_AI" else "GEMINI_API",
        use_json_schema=True,
    )


REGISTRY: dict[str, Tool] = {}


def tool(*, outward: bool, top_level_only: bool = False, posts: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """Register a function as a tool under its own name."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        if not fn.__doc__:
            raise TypeError(f"tool {fn.__name__} needs a docstring: it is the model's only description of it")
        REGISTRY[fn.__name__] = Tool(fn.__name__, fn, outward, top_level_only, posts)
        return fn

    return register


class ToolError(Exception):
    """A tool's own refusal, sent back to the model as an error it can act on."""


@dataclass
class ToolContext:
    """What a tool may know about the call it serves."""

    session: Session
    seq: int  # the step of the model turn that asked for the call
    call_index: int
    call_id: str | None
    posted: dict[str, str]  # post keys Slack already has (after a crash), mapped to their ts
    post_ts: list[str] = field(default_factory=list)  # messages this call posted
    pause: Question | None = None  # set by a blocking ask_operator: the session ends paused

    def post_key(self, suffix: str = "") -> str:
        return f"{self.session.session_id}:{self.seq}:{self.call_index}{suffix}"


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


def available(*, top_level: bool) -> list[Tool]:
    """Tools this session may use; ask_operator and other top-level tools only for the top-level session."""
    return [t for t in REGISTRY.values() if top_level or not t.top_level_only]


def run(name: str, args: Any, ctx: ToolContext, allowed: set[str]) -> dict[str, Any]:
    """Run one call and return the function response: ``{"result": ...}`` or ``{"error": "..."}``.

    An unknown name, bad arguments or a failing tool never raise: the model gets
    the error and decides what to do next.
    """
    spec = REGISTRY.get(name)
    if spec is None or name not in allowed:
        return {"error": f"unknown tool {name!r}; available tools: {', '.join(sorted(allowed))}"}
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return {"error": f"arguments for {name} must be a JSON object, got {type(args).__name__}"}
    try:
        validated = pydantic.validate_call(spec.fn)
        with serving(ctx):
            result = validated(**args)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in exc.errors())
        return {"error": f"bad arguments for {name}: {problems}"}
    except ToolError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # a tool bug must not end the session: the model hears about it
        return {"error": f"{name} failed: {type(exc).__name__}: {exc}"}
    return {"result": result}


def short(value: Any, limit: int = 300) -> str:
    """A short, JSON-ish rendering for the audit log."""
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"

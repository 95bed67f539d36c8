"""Function tools: a typed Python function with a docstring becomes a ``Tool`` with ``@tool``.

Its Gemini declaration is derived from the function by google-genai
(``FunctionDeclaration.from_callable_with_api_option``), and its arguments are validated by pydantic against the
same signature, so the schema the model sees and the check the call passes can never disagree. Decorating
registers nothing: a module's tools are the ``FunctionTool`` values it defines, collected by ``tools_in``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pydantic
from google.genai import types

from shared import config
from shared.agent.tools.base import Outcome, Suspend, Tier, ToolContext, ToolError, Wait, serving
from shared.agent.tools.result import ToolResult


@dataclass(frozen=True)
class FunctionTool:
    fn: Callable[..., Any]
    outward: bool
    top_level_only: bool = False
    posts: bool = False  # a successful call leaves a message in the thread
    idempotent: bool = False  # safe to call again with the same ``context().idempotency_key`` after a crash
    declared_tier: Tier | None = None  # None: ``approve`` for an outward tool, ``safe`` for an inward one
    summary: str | None = None  # one sentence of what a call does, e.g. "Restart {name} in {environment}"
    starts_children: bool = False  # a call may start a delegated session (the thread's tree status shows it)

    @property
    def tier(self) -> Tier:
        if self.declared_tier is not None:
            return self.declared_tier
        return Tier.APPROVE if self.outward else Tier.SAFE

    @property
    def name(self) -> str:
        return self.fn.__name__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def declaration(self) -> types.FunctionDeclaration:
        vertex = config.settings().google_genai_use_vertexai
        return _declaration(self.fn, "VERTEX_AI" if vertex else "GEMINI_API")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Outcome:
        """Validate and call; bad arguments, a refusal or a bug come back as an error result, never raised."""
        try:
            validated = pydantic.validate_call(self.fn)
            with serving(ctx):
                result = validated(**args)
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or self.name}: {e['msg']}" for e in exc.errors())
            return ToolResult.fail(f"bad arguments for {self.name}: {problems}")
        except ToolError as exc:
            return ToolResult.fail(str(exc))
        except Exception as exc:  # a tool bug must not end the session: the model hears about it
            return ToolResult.fail(f"{self.name} failed: {type(exc).__name__}: {exc}")
        if isinstance(result, (Suspend, Wait)):
            return result
        return ToolResult.ok(result)


@functools.cache
def _declaration(fn: Callable[..., Any], api_option: str) -> types.FunctionDeclaration:
    """Derived once per process: it depends only on the function and the API (measured at ~2 ms per turn)."""
    return types.FunctionDeclaration.from_callable_with_api_option(
        callable=fn,
        api_option="VERTEX_AI" if api_option == "VERTEX_AI" else "GEMINI_API",
        use_json_schema=True,
    )


def tool(
    *,
    outward: bool,
    idempotent: bool = False,
    tier: Tier | str | None = None,
    top_level_only: bool = False,
    posts: bool = False,
    summary: str | None = None,
    starts_children: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]:
    """Make a typed, documented function a tool under its own name. ``tier`` defaults to ``approve`` for an outward
    tool and ``safe`` for an inward one; ``TOOL_TIERS`` overrides either. ``summary`` says in one sentence what a
    call will do, with its arguments in braces ("Restart {name} in {environment}"): an approval card opens with it
    (``shared.agent.tools.describe``)."""

    def make(fn: Callable[..., Any]) -> FunctionTool:
        if not fn.__doc__:
            raise TypeError(f"tool {fn.__name__} needs a docstring: it is the model's only description of it")
        return FunctionTool(fn, outward, top_level_only, posts, idempotent, Tier(tier) if tier else None, summary,
                            starts_children)  # fmt: skip

    return make


def tools_in(module: ModuleType) -> list[FunctionTool]:
    """The tools a module defines, in the order it defines them."""
    return [value for value in vars(module).values() if isinstance(value, FunctionTool)]

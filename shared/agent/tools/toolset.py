"""A session's toolset: the tools it may use, their declarations, and how a call is dispatched.

Built per session, not filled by import side effects: the built-in tools, the team's own tools and the configured
MCP servers' tools, minus what the session may not use (a narration gets none; ``top_level_only`` tools only for a
session that talks to the thread). ``notice`` tells the model which MCP servers could not be reached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.genai import types

from shared import config
from shared.agent.tools import builtin, policy, team
from shared.agent.tools.base import Outcome, Tier, Tool, ToolContext
from shared.agent.tools.function import tools_in
from shared.agent.tools.mcp import catalog
from shared.agent.tools.result import ToolResult
from shared.state.models import SessionKind
from shared.state.session_model import Session


class Toolset:
    def __init__(self, tools: Sequence[Tool], *, notice: str = "", withheld: dict[str, str] | None = None) -> None:
        self._tools = {t.name: t for t in tools}
        self.notice = notice  # for the system instruction: tools that should be here and are not
        self.withheld = withheld or {}  # tools this session may not use, and why (a call is told so)

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def declarations(self) -> list[types.FunctionDeclaration]:
        return [t.declaration() for t in self._tools.values()]

    def run(self, name: str, args: Any, ctx: ToolContext) -> Outcome:
        """One call's outcome; an unknown name or arguments that are not an object go back to the model."""
        found = self._tools.get(name)
        if found is None and name in self.withheld:
            return ToolResult.fail(self.withheld[name])
        if found is None:
            return ToolResult.fail(f"unknown tool {name!r}; available tools: {', '.join(sorted(self._tools))}")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return ToolResult.fail(f"arguments for {name} must be a JSON object, got {type(args).__name__}")
        refused = policy.refusal(name, policy.received(found, args), ctx)
        if refused is not None:
            return ToolResult.fail(refused)
        return found.run(args, ctx)


def all_tools() -> list[Tool]:
    return [*tools_in(builtin), *tools_in(team)]


def for_session(session: Session) -> Toolset:
    """A narration reports from the audit log only: no tools. A child reports to its parent: nothing that posts
    in the thread or asks the operator, and ``delegate`` only above the depth limit. A ``deny`` tool is never
    offered to the model."""
    if session.kind == SessionKind.RETRY:
        return Toolset([])
    remote = catalog.catalog()
    everything = [*all_tools(), *remote.tools]
    usable = [t for t in everything if session.top_level or not t.top_level_only]
    withheld: dict[str, str] = {}
    if session.reports_to_parent:
        usable = [t for t in usable if not t.posts]
        withheld |= {t.name: f"{t.name} is not available to a helper session: you see only your task and report "
                             "your result to the session that delegated it (ask it with ask_parent)"
                     for t in everything if t not in usable}  # fmt: skip
    else:
        usable = [t for t in usable if t.name != "ask_parent"]
    max_depth = config.settings().delegate_max_depth
    if session.tree.depth >= max_depth:  # it can have no children
        usable = [t for t in usable if t.name not in {"delegate", "answer_child"}]
        withheld |= {name: f"the delegation depth limit ({max_depth} level(s)) is reached: {name} is not available "
                           "at this depth; do the task yourself" for name in ("delegate", "answer_child")}  # fmt: skip
    return Toolset([t for t in usable if policy.static_tier(t) != Tier.DENY], notice=remote.notice(),
                   withheld=withheld)  # fmt: skip

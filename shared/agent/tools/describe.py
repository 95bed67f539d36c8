"""What a call will do, in words, and its arguments' schema: what an approval card needs from a tool.

A function tool says it itself (``@tool(summary="Restart {name} in {environment}")``); any other tool (an MCP
server's) gets "Run `tool` with name `x`, environment `y`", naming its required arguments. Argument values are
inserted as inert inline code (``call_view.inline``): an argument can shape the sentence's values, never its
markup.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from shared.agent.tools.base import Tool
from shared.agent.tools.function import FunctionTool
from shared.slack import call_view
from shared.slack.blocks import escaped

NAMED_ARGUMENTS = 3  # in the default sentence
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # a name no mrkdwn, link or emoji can form from


def schema(tool: Tool) -> dict[str, Any]:
    """The tool's arguments as JSON Schema (its declaration's)."""
    declared = tool.declaration()
    if isinstance(declared.parameters_json_schema, dict):
        return declared.parameters_json_schema
    if declared.parameters is not None:
        dumped: dict[str, Any] = declared.parameters.model_dump(mode="json", exclude_none=True)
        return dumped
    return {}


def summary(tool: Tool, args: Mapping[str, Any]) -> str:
    """One sentence of what this call will do."""
    template = tool.summary if isinstance(tool, FunctionTool) else None
    if template:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        if fields <= set(args):
            shown = {name: call_view.inline(args[name]) for name in fields}
            return escaped(template.replace("`", call_view.GRAVE)).format_map(shown)
    named = [k for k in call_view.order(args, schema(tool)) if k in set(schema(tool).get("required") or [])]
    named = named or sorted(args)
    parts = [f"{_name(k)} {call_view.inline(args[k])}" for k in named[:NAMED_ARGUMENTS]]
    more = len(args) - len(parts)
    if more > 0:
        parts.append(f"{more} more argument{'s' if more > 1 else ''}")
    return f"Run `{escaped(tool.name)}`" + (f" with {', '.join(parts)}" if parts else "")


def _name(argument: str) -> str:
    """An argument's name in the sentence: as itself when nothing can form from it, else as inert inline code (the
    model chooses the names of the arguments it passes: ``*now*``, a URL or a backtick would be markup)."""
    return argument if _PLAIN_NAME.fullmatch(argument) else call_view.inline(argument)

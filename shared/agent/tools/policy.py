"""Rules a call must pass before its tool runs, whatever the tool: one line per rule.

- Tiers: ``TOOL_TIERS`` (exact names, then globs like ``mcp.tickets.*``) wins over a tool's own tier; a ``deny``
  tool is never declared to the model; an ``approve`` call runs only after an operator approves that exact call.
- ``fetch_url`` to a host that appears in the thread's own messages is ``safe``; any other host needs approval.
- Egress is bounded: ``fetch_url`` may be called ``FETCH_MAX_PER_SESSION`` times per session.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from shared import config
from shared.agent.tools.base import Tier, Tool, ToolContext

Rule = Callable[[str, Mapping[str, Any], ToolContext], str | None]

_URL = re.compile(r"https?://([^/\s<>|\"')]+)", re.IGNORECASE)


def configured_tier(name: str) -> Tier | None:
    """The tier ``TOOL_TIERS`` gives this tool: an exact name first, then the first matching glob."""
    tiers = config.settings().tool_tiers
    if name in tiers:
        return Tier(tiers[name])
    for pattern, tier in tiers.items():
        if fnmatch.fnmatchcase(name, pattern):
            return Tier(tier)
    return None


def static_tier(tool: Tool) -> Tier:
    """The tier a tool has whatever its arguments: configuration, else its own declaration."""
    return configured_tier(tool.name) or tool.tier


def call_tier(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Tier:
    """The tier of one call: configuration wins; then the rules about arguments; then the tool's own."""
    configured = configured_tier(tool.name)
    if configured is not None:
        return configured
    if tool.name == "fetch_url" and _host(str(args.get("url", ""))) not in thread_hosts(ctx.thread_text):
        return Tier.APPROVE  # nobody in the thread named this host
    return tool.tier


def thread_hosts(text: str) -> set[str]:
    return {match.group(1).lower().split(":")[0] for match in _URL.finditer(text)}


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def fetch_budget(name: str, _args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    limit = config.settings().fetch_max_per_session
    if name == "fetch_url" and ctx.used.get(name, 0) >= limit:
        return f"fetch_url may be called {limit} times per session, and it was; work with what you have fetched"
    return None


RULES: tuple[Rule, ...] = (fetch_budget,)


def refusal(name: str, args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    """Why this call may not run, or None."""
    for rule in RULES:
        reason = rule(name, args, ctx)
        if reason is not None:
            return reason
    return None

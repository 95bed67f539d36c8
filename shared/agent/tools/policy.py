"""Rules a call must pass before its tool runs, whatever the tool: one line per rule.

- Tiers: ``TOOL_TIERS`` (exact names, then globs like ``mcp.tickets.*``) wins over a tool's own tier; a ``deny``
  tool is never declared to the model; an ``approve`` call runs only after an operator approves that exact call.
  A rule object may name who approves (users, user groups), how many must, and ``when`` its tier applies
  (argument values; other calls get ``otherwise``); a call its ``when`` denies is refused.
- ``fetch_url`` to a host that appears in the thread's own messages is ``safe``; any other host needs approval.
- Egress is bounded: ``fetch_url`` may be called ``FETCH_MAX_PER_SESSION`` times per session.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from shared import config
from shared.agent.tools import describe
from shared.agent.tools.base import Tier, Tool, ToolContext
from shared.config_values import TierRule, as_received

Rule = Callable[[str, Mapping[str, Any], ToolContext], str | None]

_URL = re.compile(r"https?://([^/\s<>|\"')]+)", re.IGNORECASE)


def configured_rule(name: str) -> TierRule | None:
    """The ``TOOL_TIERS`` rule for this tool: an exact name first, then the first matching glob."""
    rules = config.settings().tool_tiers
    if name in rules:
        return rules[name]
    for pattern, rule in rules.items():
        if fnmatch.fnmatchcase(name, pattern):
            return rule
    return None


def configured_tier(name: str) -> Tier | None:
    """The tier ``TOOL_TIERS`` gives this tool whatever its arguments (None: no rule, or one with ``when``)."""
    rule = configured_rule(name)
    return Tier(rule.tier) if rule is not None and not rule.when else None


def static_tier(tool: Tool) -> Tier:
    """The tier a tool has whatever its arguments: configuration, else its own declaration. A tool whose rule
    depends on its arguments is ``deny`` only when every tier the rule can give is (else it is offered)."""
    rule = configured_rule(tool.name)
    if rule is None:
        return tool.tier
    if not rule.when:
        return Tier(rule.tier)
    possible = {Tier(rule.tier), Tier(rule.otherwise) if rule.otherwise else tool.tier}
    if possible == {Tier.DENY}:
        return Tier.DENY
    return Tier.APPROVE if Tier.APPROVE in possible else Tier.SAFE


def call_tier(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Tier:
    """The tier of one call: configuration wins (its ``when`` decides between its tiers); then the rules about
    arguments; then the tool's own."""
    rule = configured_rule(tool.name)
    configured = rule.tier_for(received(tool, args)) if rule is not None else None
    if configured is not None:
        return Tier(configured)
    if tool.name == "fetch_url" and _host(str(args.get("url", ""))) not in thread_hosts(ctx.thread_text):
        return Tier.APPROVE  # nobody in the thread named this host
    return tool.tier


@dataclass(frozen=True)
class Approvers:
    """Who may decide one call and how many must approve it."""

    ids: tuple[str, ...] = ()  # users and user groups; empty: the operators
    approvals: int = 1


def received(tool: Tool, args: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments with the defaults its tool's schema declares for those it leaves out: what a rule's
    ``when`` is matched against."""
    return as_received(describe.schema(tool), args)


def approvers(name: str, args: Mapping[str, Any]) -> Approvers:
    """The approvers the tool's rule names for a call it gives the approve tier (the operators otherwise)."""
    rule = configured_rule(name)
    if rule is None or rule.tier != Tier.APPROVE.value or not rule.matches(args):
        return Approvers()  # the operators decide a call the rule's ``otherwise`` holds for approval
    return Approvers(rule.approvers, rule.approvals)


def conditions(name: str) -> str | None:
    """The tool's rule's ``when`` as JSON (argument to values; None: no ``when``): written on an approval, so that
    an operator's edit cannot move the call into the rule's other case (other approvers, or another tier)."""
    rule = configured_rule(name)
    return json.dumps(dict(rule.when)) if rule is not None and rule.when else None


def denied_by_rule(name: str, args: Mapping[str, Any], _ctx: ToolContext) -> str | None:
    """A call the rule's ``when`` makes ``deny`` (a tool always denied is never offered)."""
    rule = configured_rule(name)
    if rule is not None and rule.when and rule.tier_for(args) == Tier.DENY.value:
        return f"{name} may not be called with these arguments here (TOOL_TIERS denies it); nothing ran"
    return None


def thread_hosts(text: str) -> set[str]:
    return {match.group(1).lower().split(":")[0] for match in _URL.finditer(text)}


def _host(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def fetch_budget(name: str, _args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    limit = config.settings().fetch_max_per_session
    if name == "fetch_url" and ctx.used.get(name, 0) >= limit:
        return f"fetch_url may be called {limit} times per session, and it was; work with what you have fetched"
    return None


RULES: tuple[Rule, ...] = (denied_by_rule, fetch_budget)


def refusal(name: str, args: Mapping[str, Any], ctx: ToolContext) -> str | None:
    """Why this call may not run, or None."""
    for rule in RULES:
        reason = rule(name, args, ctx)
        if reason is not None:
            return reason
    return None

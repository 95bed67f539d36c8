"""What the agent knows about a held call that its approval card needs: the tool's sentence for it, the order its
arguments are shown in, who may approve it and how many must, and whether it can be shown at all.

A call too long to show (``call_view.MAX_SHOWN_CHARS``) is never posted: it gets an error response telling the
model to make a smaller call, and nothing runs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from shared.agent.tools import describe, policy
from shared.agent.tools.result import ToolResult
from shared.agent.tools.toolset import Toolset
from shared.asks import routing
from shared.asks.approvals import Asked, Held
from shared.slack import call_view
from shared.slack.surface import ThreadSurface
from shared.state import ids
from shared.state.session_model import Session

MAX_SCHEMA = 20_000  # characters of a tool's schema kept on its approval for the Edit modal (more: no Edit button)


def asked(tools: Toolset, held: Sequence[Held]) -> dict[int, Asked]:
    """Each held call's card facts, by call index."""
    facts: dict[int, Asked] = {}
    for index, _call_id, name, args in held:
        tool = tools.get(name)
        schema = describe.schema(tool) if tool is not None else {}
        rule = policy.approvers(name, policy.received(tool, args) if tool is not None else args)
        facts[index] = Asked(
            summary=describe.summary(tool, args) if tool is not None else None,
            shown_order=tuple(call_view.order(args, schema)),
            approvers=rule.ids,
            approvals=rule.approvals,
            schema=json.dumps(schema) if schema.get("properties") and len(json.dumps(schema)) <= MAX_SCHEMA else None,
            rule_when=policy.conditions(name),
        )
    return facts


def undecidable(session: Session, surface: ThreadSurface, seq: int, held: Sequence[Held]) -> dict[int, ToolResult]:
    """Held calls nobody can decide (a direct message, and no operator channel): each gets an error response at
    once, and the person is told in plain words, once per turn."""
    if not held or not routing.nobody_can_decide(session.origin.channel):
        return {}
    surface.post(routing.NOBODY_FOR_PERSON, key=ids.post_key(session.session_id, seq, "nobody-to-approve"))
    return {index: ToolResult.fail(routing.NOBODY_FOR_MODEL) for index, *_ in held}


def oversized(held: Sequence[Held], facts: dict[int, Asked]) -> dict[int, ToolResult]:
    """The held calls too long to show an operator, with the error response each gets instead of a card."""
    refused: dict[int, ToolResult] = {}
    for index, _call_id, name, args in held:
        shown = call_view.shown_call(name, args, facts[index].shown_order if index in facts else ())
        if not call_view.presentable(shown):
            refused[index] = ToolResult.fail(call_view.too_large_error(name, len(shown)))
    return refused

"""The stored transcript: google-genai ``Content`` objects as JSON, and what the loop needs to know of them.

Steps store each ``Content`` with pydantic's JSON dump (bytes such as thought
signatures as base64), so loading gives back objects the model accepts unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.genai import types

from shared.agent.model import estimate_tokens
from shared.state.models import Step

SHORTENED = "[older tool result shortened to fit the model's context window]"


def to_json(content: types.Content) -> dict[str, Any]:
    return content.model_dump(mode="json", exclude_none=True)


def from_json(data: dict[str, Any]) -> types.Content:
    return types.Content.model_validate(data)


def contents_of(steps: Sequence[Step]) -> list[types.Content]:
    """The conversation for the model: each step's content, with adjacent turns of one role merged.

    Merging matters after a pause: the responses of the other calls of that turn
    and the operator's answer are stored in two steps, but the model expects all
    responses to one turn's calls together.
    """
    merged: list[types.Content] = []
    for step in steps:
        if step.content is None:
            continue
        content = from_json(step.content)
        if merged and merged[-1].role == content.role:
            merged[-1] = types.Content(role=content.role, parts=[*(merged[-1].parts or []), *(content.parts or [])])
        else:
            merged.append(content)
    return merged


@dataclass(frozen=True)
class PendingTurn:
    """The last model turn's calls that no later step has answered, with where they were made: the model step's
    ``seq``, the session that wrote it, and each call's index in that turn. Question, approval and ledger ids
    come from (seq, index), so a re-run of the turn finds what its first run did."""

    seq: int
    session_id: str
    calls: list[tuple[int, types.FunctionCall]]


def pending_turn(steps: Sequence[Step]) -> PendingTurn | None:
    """The last model turn with calls still unanswered, or None."""
    for position in range(len(steps) - 1, -1, -1):
        step = steps[position]
        if step.content is None:
            continue
        turn = from_json(step.content)
        if turn.role != "model":
            continue
        calls = [p.function_call for p in turn.parts or [] if p.function_call]
        answered = [
            p.function_response
            for later in steps[position + 1 :]
            if later.content is not None
            for p in from_json(later.content).parts or []
            if p.function_response
        ]
        ids = {r.id for r in answered if r.id}
        names = [r.name for r in answered if not r.id]
        pending: list[tuple[int, types.FunctionCall]] = []
        for index, call in enumerate(calls):
            if call.id and call.id in ids:
                continue
            if not call.id and call.name in names:
                names.remove(call.name)
                continue
            pending.append((index, call))
        return PendingTurn(step.seq, step.session_id, pending) if pending else None
    return None


def pending_calls(steps: Sequence[Step]) -> list[types.FunctionCall]:
    """Function calls of the last model turn that no later step has answered."""
    turn = pending_turn(steps)
    return [call for _, call in turn.calls] if turn else []


def shorten_tool_results(contents: list[types.Content], limit_tokens: int) -> list[types.Content]:
    """Shorten the oldest tool results first until the estimate fits, keeping the latest turn whole."""
    if estimate_tokens(contents) <= limit_tokens:
        return contents
    result = [c.model_copy(deep=True) for c in contents]
    for content in result[:-1]:
        for part in content.parts or []:
            if part.function_response is not None and part.function_response.response != {"result": SHORTENED}:
                part.function_response.response = {"result": SHORTENED}
        if estimate_tokens(result) <= limit_tokens:
            break
    return result

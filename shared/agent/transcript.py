"""The stored transcript: google-genai ``Content`` objects as JSON, and what the loop needs to know of them.

Steps store each ``Content`` with pydantic's JSON dump (bytes such as thought
signatures as base64), so loading gives back objects the model accepts unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from google.genai import types

from shared.agent.model import estimate_tokens
from shared.agent.tools.result import ToolResult
from shared.state.models import CallRef, Step

SHORTENED = "[older tool result shortened to fit the model's context window]"


def to_json(content: types.Content) -> dict[str, Any]:
    return content.model_dump(mode="json", exclude_none=True)


def from_json(data: dict[str, Any]) -> types.Content:
    return types.Content.model_validate(data)


def contents_of(steps: Sequence[Step]) -> list[types.Content]:
    """The conversation for the model: each step's content, with adjacent turns of one role merged.

    Merging matters after a pause: the responses of the other calls of that turn and the ones that came later
    (an answer, a decision, a child's result) are stored in several steps, but the model expects all responses
    to one turn's calls together, in the order of the calls: each response is placed by the identity of the call
    it answers (responses stored without one keep their stored order).
    """
    merged: list[types.Content] = []
    keys: list[list[CallRef | None]] = []  # per merged content: the call each of its parts answers
    for step in steps:
        if step.content is None:
            continue
        content = from_json(step.content)
        parts = list(content.parts or [])
        refs = iter(step.answers) if step.answers is not None else None
        own = [(next(refs, None) if refs is not None else None) if p.function_response else None for p in parts]
        if merged and merged[-1].role == content.role:
            merged[-1] = types.Content(role=content.role, parts=[*(merged[-1].parts or []), *parts])
            keys[-1].extend(own)
        else:
            merged.append(types.Content(role=content.role, parts=parts))
            keys.append(own)
    return [_in_call_order(content, refs) for content, refs in zip(merged, keys, strict=True)]


def _in_call_order(content: types.Content, refs: list[CallRef | None]) -> types.Content:
    """A user turn's function responses first, in call order, then its other parts; unchanged when any response
    has no stored identity (an old transcript)."""
    parts = content.parts or []
    answering = [(ref, part) for ref, part in zip(refs, parts, strict=True) if part.function_response]
    if len(answering) < 2 or any(ref is None for ref, _ in answering):
        return content
    ordered = [part for _, part in sorted(answering, key=lambda pair: pair[0] or CallRef(0, 0))]
    return types.Content(role=content.role, parts=[*ordered, *(p for p in parts if not p.function_response)])


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
        done = answered(step.seq, calls, steps[position + 1 :])
        pending = [(index, call) for index, call in enumerate(calls) if index not in done]
        return PendingTurn(step.seq, step.session_id, pending) if pending else None
    return None


def answered(seq: int, calls: Sequence[types.FunctionCall], later: Sequence[Step]) -> set[int]:
    """The indexes of the calls of the model turn at ``seq`` that a later step answers: by the identity each
    response is stored with. Only a response stored without one (an old transcript) is matched the old way, by
    the model's id, else by tool name."""
    done: set[int] = set()
    for step in later:
        if step.content is None:
            continue
        responses = [p.function_response for p in from_json(step.content).parts or [] if p.function_response]
        if step.answers is not None:
            done |= {ref.index for ref in step.answers if ref.seq == seq and 0 <= ref.index < len(calls)}
            continue
        for response in responses:
            left = [i for i in range(len(calls)) if i not in done]
            match = next((i for i in left if response.id and calls[i].id == response.id), None)
            if match is None and not response.id:
                match = next((i for i in left if not calls[i].id and calls[i].name == response.name), None)
            if match is not None:
                done.add(match)
    return done


@dataclass
class Responses:
    """The function responses one step stores, each with the identity of the call it answers. A response echoes
    the call's ``id`` only when the model gave one."""

    parts: list[types.Part] = field(default_factory=list)
    answers: list[CallRef] = field(default_factory=list)
    texts: list[types.Part] = field(default_factory=list)

    def add(self, seq: int, index: int, call: types.FunctionCall, result: ToolResult) -> None:
        """The function response to the call at (``seq``, ``index``): the one place a result becomes the dict the
        model reads (and the transcript stores)."""
        reply = types.FunctionResponse(id=call.id, name=call.name, response=result.to_dict())
        self.parts.append(types.Part(function_response=reply))
        self.answers.append(CallRef(seq, index))

    def text(self, text: str) -> None:
        self.texts.append(types.Part(text=text))

    def __bool__(self) -> bool:
        return bool(self.parts or self.texts)

    def content(self) -> types.Content | None:
        """The step's content: the responses in the order of their calls, then any text."""
        ordered = [part for _, part in sorted(zip(self.answers, self.parts, strict=True), key=lambda p: p[0])]
        return types.Content(role="user", parts=[*ordered, *self.texts]) if self else None

    def refs(self) -> list[CallRef]:
        return sorted(self.answers)


def pending_calls(steps: Sequence[Step]) -> list[types.FunctionCall]:
    """Function calls of the last model turn that no later step has answered."""
    turn = pending_turn(steps)
    return [call for _, call in turn.calls] if turn else []


def shorten_tool_results(contents: list[types.Content], limit_tokens: int) -> list[types.Content]:
    """Shorten the oldest tool results first until the estimate fits, keeping the latest turn whole."""
    if estimate_tokens(contents) <= limit_tokens:
        return contents
    result = [c.model_copy(deep=True) for c in contents]
    shortened = ToolResult.ok(SHORTENED).to_dict()
    for content in result[:-1]:
        for part in content.parts or []:
            if part.function_response is not None and part.function_response.response != shortened:
                part.function_response.response = dict(shortened)
        if estimate_tokens(result) <= limit_tokens:
            break
    return result

"""One ``ToolResult`` type (issue 29.5): the function responses it makes are the dicts transcripts and ledger entries
stored before it existed, so a session paused before resumes as it was."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from google.genai import types

from shared.agent.tools.result import ToolResult
from shared.agent.transcript import Responses, contents_of, to_json
from shared.limits import capped
from shared.state.models import Step, StepKind

STORED: list[dict[str, Any]] = [
    {"result": {"answer": "yes", "answered_by": "U1"}},
    {"result": ""},
    {"result": None},
    {"error": "denied by <@U1>: no. It did not run; another call needs its own approval."},
    {"result": "first 4000 characters", "note": "[truncated, 9,000 characters]"},  # a ledger entry, shortened
    {"result": {"restarted": "api"}, "edited": {"by": "U1", "arguments": {"name": "api"}, "note": "edited"}},
    {"result": "deployed", "input_declined": "MCP server 'old' wanted input in the middle of the call"},
    {"error": "failed", "note": "kept beside the error"},
]


@pytest.mark.parametrize("stored", STORED, ids=[json.dumps(s)[:40] for s in STORED])
def test_a_stored_response_reads_back_and_is_written_again_unchanged(stored: dict[str, Any]) -> None:
    result = ToolResult.from_dict(stored)
    assert result.to_dict() == stored
    assert result.failed == ("error" in stored)
    assert ToolResult.from_dict(result.to_dict()) == result


def test_ok_and_fail_make_the_two_shapes_the_model_has_always_read() -> None:
    assert ToolResult.ok({"posted": True}).to_dict() == {"result": {"posted": True}}
    assert ToolResult.fail("tool budget exhausted").to_dict() == {"error": "tool budget exhausted"}
    assert not ToolResult.ok(None).failed
    assert ToolResult.fail("").failed  # an empty message is still an error
    assert ToolResult.ok("x").with_extra(note="n").to_dict() == {"result": "x", "note": "n"}


def test_a_result_too_large_is_cut_under_its_own_key_as_before() -> None:
    big = {"text": "x" * 5000}
    assert ToolResult.ok(big).capped(10_000) == ToolResult.ok(big)
    cut = ToolResult.ok(big).capped(1000)
    assert cut == ToolResult.ok(capped(json.dumps({"result": big}), 1000))
    failed = ToolResult.fail("e" * 5000).capped(1000)
    assert failed.failed
    assert failed.error == capped(json.dumps({"error": "e" * 5000}), 1000)


def test_a_function_response_is_the_dict_the_transcript_always_stored() -> None:
    call = types.FunctionCall(name="read_thread", args={}, id=None)
    responses = Responses()
    responses.add(3, 0, call, ToolResult.ok({"messages": []}))
    responses.add(3, 1, call, ToolResult.fail("bad arguments"))
    content = responses.content()
    assert content is not None
    step = Step(seq=4, session_id="s", kind=StepKind.TOOL_RESULTS, content=to_json(content), audit=[],
                at=datetime.now(UTC), answers=responses.refs())  # fmt: skip
    [read] = contents_of([step])
    sent = [p.function_response.response for p in read.parts or [] if p.function_response]
    assert sent == [{"result": {"messages": []}}, {"error": "bad arguments"}]

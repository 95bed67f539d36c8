"""A call's identity is its position (issue 23, item 1), pure: which calls of a stored turn are still pending, and
the order the model reads their responses in, for every way responses can be stored, with and without call ids."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from google.genai import types

from shared.agent.tools.result import ToolResult
from shared.agent.transcript import Responses, contents_of, pending_turn, to_json
from shared.state.models import CallRef, Step, StepKind

AT = datetime(2026, 1, 1, tzinfo=UTC)


def model_step(seq: int, *calls: tuple[str, str | None]) -> Step:
    parts = [types.Part(function_call=types.FunctionCall(name=name, id=call_id, args={})) for name, call_id in calls]
    return Step(seq, "s", StepKind.MODEL, to_json(types.Content(role="model", parts=parts)), [], AT)


def responses_step(seq: int, turn: Step, indexes: list[int]) -> Step:
    calls = [p.function_call for p in types.Content.model_validate(turn.content).parts or [] if p.function_call]
    responses = Responses()
    for index in indexes:
        call = calls[index]
        assert call is not None
        responses.add(turn.seq, index, call, ToolResult.ok(f"r{index}"))
    content = responses.content()
    assert content is not None
    return Step(seq, "s", StepKind.TOOL_RESULTS, to_json(content), [], AT, answers=responses.refs())


def legacy_step(seq: int, responses: list[tuple[str, str | None, str]]) -> Step:
    """A step stored before responses had an identity: matched by the model's id, else by name."""
    parts = [types.Part(function_response=types.FunctionResponse(name=name, id=call_id, response={"result": r}))
             for name, call_id, r in responses]  # fmt: skip
    return Step(seq, "s", StepKind.TOOL_RESULTS, to_json(types.Content(role="user", parts=parts)), [], AT)


def pending_indexes(stored: list[Step]) -> list[int]:
    turn = pending_turn(stored)
    return [index for index, _ in turn.calls] if turn else []


def results_in_order(stored: list[Step]) -> list[Any]:
    last = contents_of(stored)[-1]
    return [(p.function_response.response or {})["result"] for p in last.parts or [] if p.function_response]


def test_calls_of_one_tool_without_ids_are_answered_by_position() -> None:
    turn = model_step(0, ("delegate", None), ("delegate", None), ("delegate", None), ("delegate", None))
    # The fourth was refused at once; the first three wait. The old matching took the refusal for the first.
    assert pending_indexes([turn, responses_step(1, turn, [3])]) == [0, 1, 2]
    assert pending_indexes([turn, responses_step(1, turn, [3]), responses_step(2, turn, [2, 0, 1])]) == []


def test_responses_reach_the_model_in_call_order_whatever_order_they_were_stored_in() -> None:
    turn = model_step(0, ("delegate", None), ("delegate", None), ("ask_operator", None))
    stored = [turn, responses_step(1, turn, [1]), responses_step(2, turn, [2]), responses_step(3, turn, [0])]
    assert results_in_order(stored) == ["r0", "r1", "r2"]


def test_a_response_echoes_the_call_id_only_when_the_model_gave_one() -> None:
    turn = model_step(0, ("a", "id-a"), ("a", None))
    stored = [turn, responses_step(1, turn, [0, 1])]
    ids = [p.function_response.id for p in contents_of(stored)[-1].parts or [] if p.function_response]
    assert ids == ["id-a", None]


def test_identity_wins_over_a_colliding_id_or_name() -> None:
    """Two calls with one id (a model bug) or one name: identity still tells them apart."""
    turn = model_step(0, ("a", "same"), ("a", "same"))
    assert pending_indexes([turn, responses_step(1, turn, [1])]) == [0]


def test_an_old_transcript_is_still_matched_by_id_then_name() -> None:
    turn = model_step(0, ("a", None), ("b", "x"), ("a", None))
    assert pending_indexes([turn, legacy_step(1, [("b", "x", "r1"), ("a", None, "r0")])]) == [2]


def test_responses_to_an_older_turn_do_not_answer_a_newer_one() -> None:
    old = model_step(0, ("a", None))
    new = model_step(2, ("a", None))
    stale = responses_step(3, old, [0])  # a late response naming the older turn's call
    assert pending_indexes([old, responses_step(1, old, [0]), new, stale]) == [0]


def test_every_split_and_order_of_responses_leaves_exactly_the_unanswered_calls_pending() -> None:
    """Exhaustive over four calls of one tool without ids: every subset answered, split into steps in every order;
    what is pending is the complement, and the model reads the answered ones in call order."""
    turn = model_step(0, *(("delegate", None) for _ in range(4)))
    for size in range(5):
        for answered in itertools.combinations(range(4), size):
            for order in itertools.permutations(answered):
                for cut in range(len(order) + 1):
                    groups = [list(order[:cut]), list(order[cut:])]
                    stored = [turn] + [responses_step(1 + n, turn, g) for n, g in enumerate(groups) if g]
                    assert pending_indexes(stored) == [i for i in range(4) if i not in answered]
                    if answered:
                        assert results_in_order(stored) == [f"r{i}" for i in sorted(answered)]


def test_call_ref_round_trips_through_a_step_document() -> None:
    turn = model_step(0, ("a", None), ("a", None))
    step = responses_step(1, turn, [1, 0])
    again = Step.from_doc(step.to_doc())
    assert again.answers == [CallRef(0, 0), CallRef(0, 1)]
    assert Step.from_doc(turn.to_doc()).answers is None

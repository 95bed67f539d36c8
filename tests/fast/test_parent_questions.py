"""Each ask_parent call of a turn is its own question (flow 14): what each blocking call waits on and gets, which
question an answer is for, and how a document from before the list (one ``parent_question``) is read."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from google.genai import types

from shared.agent import prompts
from shared.agent.tools.result import ToolResult
from shared.agent.waits import kinds as agent_kinds
from shared.agent.waits.base import Resumed
from shared.asks import delegation
from shared.state import child_questions, parent_questions
from shared.state import waits as state_waits
from shared.state.firestore import now
from shared.state.models import ParentQuestion, SessionKind, SessionStatus, Waiting, WaitKind
from shared.state.session_model import Session

FIRST = ParentQuestion("pq-c-3-0", "Which cluster?", True, 3, 0)
SECOND = ParentQuestion("pq-c-3-1", "How many replicas?", True, 3, 1)
CALL = types.FunctionCall(name="ask_parent", args={})


def waits(index: int) -> Waiting:
    return Waiting(3, index, WaitKind.PARENT_ANSWER, f"pq-c-3-{index}")


def child(questions: list[ParentQuestion], *, legacy: ParentQuestion | None = None) -> Session:
    return Session.new(session_id="c", kind=SessionKind.CHILD, channel="C1", thread_ts="1.0", trigger_ts="1.0",
                       trigger_user="U1", text="look", created_at=now(), status=SessionStatus.RUNNING,
                       parent_questions=questions, parent_question=legacy)  # fmt: skip


def gets(session: Session, index: int) -> ToolResult:
    resumed = Resumed(session, cast(Any, None), cast(Any, None), [])
    return cast(ToolResult, agent_kinds.of(WaitKind.PARENT_ANSWER).outcome(resumed, waits(index), CALL, None))


def answer(text: str) -> ToolResult:
    return ToolResult.ok({"answer": text, "from": "the session that delegated your task"})


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (None, None, [False, False]),
        ("eu", None, [True, False]),
        (None, "4", [False, True]),
        ("eu", "4", [True, True]),
    ],
)
def test_each_call_waits_on_its_own_question(first: str | None, second: str | None, expected: list[bool]) -> None:
    held = [
        ParentQuestion(**{**FIRST.to_doc(), "answer": first}),
        ParentQuestion(**{**SECOND.to_doc(), "answer": second}),
    ]
    asker = {"status": "paused", "parent_questions": [q.to_doc() for q in held], "parent_question": held[1].to_doc()}
    wait = state_waits.of(WaitKind.PARENT_ANSWER)
    assert [wait.resolved(waits(i), None, asker) for i in (0, 1)] == expected


def test_each_call_gets_its_own_answer_in_call_order() -> None:
    session = child(parent_questions.answered(parent_questions.answered([FIRST, SECOND], SECOND.question_id, "4"),
                                              FIRST.question_id, "eu"))  # fmt: skip
    assert [gets(session, 0), gets(session, 1)] == [answer("eu"), answer("4")]
    released = child(parent_questions.answered([FIRST, SECOND], FIRST.question_id, "gone", released=True))
    assert gets(released, 0) == ToolResult.fail("gone")
    assert gets(released, 1) == ToolResult.fail(delegation.UNANSWERED)


def test_a_document_from_before_the_list_answers_each_call_of_its_turn_with_its_one_question() -> None:
    old = child([], legacy=ParentQuestion(**{**SECOND.to_doc(), "answer": "eu, 4."}))
    assert [gets(old, 0), gets(old, 1)] == [answer("eu, 4."), answer("eu, 4.")]
    assert parent_questions.of(old) == [old.parent_question]
    assert parent_questions.of_doc({"parent_question": SECOND.to_doc()}) == [SECOND]


def test_an_answer_is_for_the_named_open_question_or_the_oldest_open_one() -> None:
    assert parent_questions.pick([SECOND, FIRST], None) == FIRST
    assert parent_questions.pick([FIRST, SECOND], SECOND.question_id) == SECOND
    answered = parent_questions.answered([FIRST, SECOND], FIRST.question_id, "eu")
    assert parent_questions.pick(answered, FIRST.question_id) is None  # not open: refused
    assert parent_questions.pick(answered, None) == SECOND
    assert parent_questions.pick(answered, "pq-c-9-9") is None
    assert parent_questions.still_open(answered) == [SECOND]


def test_a_new_question_keeps_the_open_ones_and_its_own_turns() -> None:
    old_turn = ParentQuestion("pq-c-1-0", "old", False, 1, 0, answer="done")
    still = ParentQuestion("pq-c-2-0", "open", False, 2, 0)
    assert parent_questions.added([old_turn, still], FIRST) == [still, FIRST]
    assert parent_questions.added([still, FIRST], SECOND) == [still, FIRST, SECOND]
    assert parent_questions.added([FIRST], FIRST) == [FIRST]  # a re-run asks once
    by_call = ParentQuestion("pq-c-1-1", "answered", True, 1, 1, answer="eu", answered_by="ev-p:2:0")
    assert parent_questions.added([old_turn, by_call], FIRST) == [by_call, FIRST]  # its call's re-run finds it


def test_an_answer_without_an_id_goes_first_to_what_the_paused_turn_waits_on() -> None:
    old = ParentQuestion("pq-c-2-0", "Clean the logs too?", False, 2, 0)
    later = [
        ParentQuestion("pq-c-5-0", "Which cluster?", True, 5, 0),
        ParentQuestion("pq-c-5-1", "How many?", True, 5, 1),
    ]
    held = [old, *later]
    assert parent_questions.pick(held, None) == old  # nothing waited on: the oldest open one
    assert parent_questions.pick(held, None, ["pq-c-5-1", "pq-c-5-0"]) == later[0]  # in call order
    assert parent_questions.pick(parent_questions.answered(held, "pq-c-5-0", "eu"), None, ["pq-c-5-0", "pq-c-5-1"]) \
        == later[1]  # fmt: skip
    assert parent_questions.pick(held, old.question_id, ["pq-c-5-0"]) == old  # a named one is that one


def test_a_child_question_note_shows_its_question_id() -> None:
    for note in [*delegation.question_again(child([FIRST, SECOND])),
                 child_questions.question_note(child([]), FIRST)]:  # fmt: skip
        [line] = prompts.notes_text([note]).splitlines()[1:]
        assert json.loads(line)["question_id"] == note.question_id
        assert json.loads(line)["kind"] == "child_question"

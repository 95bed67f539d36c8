"""Daily token budgets (issue 18, flow 13): a session that crosses its requester's budget stops at the next step
boundary and asks the operators; their answer lifts it for the conversation or stops it.

The product runs in this process (ingress and agent_session, with the budget set for them) on the stack's
emulators; the tasks go to a sink and each session is delivered here, where its model requests are counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared import config
from shared.agent import daily_budget, streamed
from shared.asks import stopping
from shared.slack import blocks
from shared.state import ids, sessions, spend, steps
from shared.state import questions as stored
from shared.state.firestore import now
from shared.state.models import QuestionStatus, SessionStatus, StepKind
from tests.agent_helpers import function_responses
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack
BUDGET = 1000  # tokens: the stub's first request alone spends more


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    with counted_rig(stack, monkeypatch, USER_DAILY_TOKENS=str(BUDGET), WORKSPACE_DAILY_TOKENS="0") as rig:
        yield rig


def model_requests(rig: cost.Rig) -> list[dict[str, Any]]:
    return [r for r in rig.gemini.requests() if rig.uid in str(r["body"])]


def crossed_mid_session(rig: cost.Rig) -> tuple[str, str]:
    """A session whose first turn (a tool call) crosses the budget; returns the session and its question's id."""
    session_id = rig.start("read the thread, then answer")
    rig.script(FakeGemini.call("read_thread", limit=5), FakeGemini.text("Done reading."))
    rig.deliver(session_id)
    paused = rig.session(session_id)
    assert paused.status == SessionStatus.PAUSED
    assert len(model_requests(rig)) == 1  # stopped at the boundary: no second model turn
    assert paused.awaited_question is not None
    return session_id, paused.awaited_question


def test_a_session_that_crosses_the_budget_asks_and_an_operators_answer_lifts_it(rig: cost.Rig) -> None:
    session_id, question_id = crossed_mid_session(rig)
    question = stored.get_question(question_id)
    assert question is not None
    assert question.options == [daily_budget.LIFT, daily_budget.STOP]
    assert f"the daily budget of {BUDGET:,} tokens" in question.text
    spent = spend.spent_today(rig.session(session_id).requester, now())[0]
    assert spent == spend.counted(rig.session(session_id).limits.tokens) > BUDGET  # every token accounted for

    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "1"), reply)  # an operator: "Let it continue"
    continuation = ids.resumed_by(question_id)
    rig.deliver(continuation)
    assert rig.session(continuation).status == SessionStatus.DONE
    [after] = model_requests(rig)[1:]  # the lifted conversation took its next turn
    [answer] = [r for r in function_responses(after) if r["id"].startswith(daily_budget.CALL_PREFIX)]
    assert answer["response"]["result"]["matched_option"] == daily_budget.LIFT


def test_an_operator_may_stop_it_instead(rig: cost.Rig) -> None:
    session_id, question_id = crossed_mid_session(rig)
    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "2"), reply)  # "Stop it"
    continuation = ids.resumed_by(question_id)
    rig.deliver(continuation)
    assert rig.session(continuation).status == SessionStatus.STOPPED
    assert len(model_requests(rig)) == 1  # no model turn after the budget was spent


@pytest.fixture
def lenient(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    """Requesters may answer their own questions here: the budget question is still the operators' alone."""
    with counted_rig(stack, monkeypatch, USER_DAILY_TOKENS=str(BUDGET), WORKSPACE_DAILY_TOKENS="0",
                     ALLOW_REQUESTER_ANSWERS="true") as rig:  # fmt: skip
        yield rig


def test_the_requester_cannot_lift_their_own_budget_whatever_allow_requester_answers_says(lenient: cost.Rig) -> None:
    """Issue 24.4: with ALLOW_REQUESTER_ANSWERS=true the budget question was an ordinary question, so the person
    whose budget was spent could answer "Let it continue" (by reply or by button) and lift it."""
    rig = lenient
    session_id, question_id = crossed_mid_session(rig)
    requester = rig.session(session_id).requester
    assert requester not in config.settings().operator_user_ids
    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "1", user=requester), reply)
    assert reply == {"ok": True, "answer": "not_allowed"}
    question = stored.get_question(question_id)
    assert question is not None
    assert question.post_ts is not None
    pressed: dict[str, Any] = {}
    press = rig.press(question.channel, question.post_ts, question.thread_ts, action_id="answer_1",
                      value=blocks.question_value(question_id, 1), user=requester)  # fmt: skip
    rig.interactivity(press, pressed)
    assert pressed == {"ok": True, "answer": "not_allowed"}
    still = stored.get_question(question_id)
    assert still is not None
    assert still.status == QuestionStatus.OPEN
    assert rig.session(session_id).status == SessionStatus.PAUSED
    assert sessions.get_session(ids.resumed_by(question_id)) is None  # nothing resumed
    assert len(model_requests(rig)) == 1

    rig.ingress(rig.reply(session_id, "1"), reply)  # an operator may lift it
    assert reply == {"ok": True, "answer": "answered"}
    rig.deliver(ids.resumed_by(question_id))
    assert rig.session(ids.resumed_by(question_id)).status == SessionStatus.DONE


def test_a_lift_by_anyone_but_an_operator_is_not_read_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever reached the transcript, only an operator's answer to the budget question counts."""
    from google.genai import types

    from shared.agent.transcript import to_json
    from shared.state.models import Step, StepKind

    def answered_by(user: str) -> list[Step]:
        response = types.FunctionResponse(id=f"{daily_budget.CALL_PREFIX}3", name="ask_operator",
                                          response={"result": {"answer": "1", "answered_by": user,
                                                               "matched_option": daily_budget.LIFT}})  # fmt: skip
        content = types.Content(role="user", parts=[types.Part(function_response=response)])
        return [Step(seq=4, session_id="s", kind=StepKind.ANSWER, content=to_json(content), audit=[], at=now())]

    monkeypatch.setenv("OPERATOR_USER_IDS", "U0OPS")
    config.reset()
    try:
        assert daily_budget.answer(answered_by("U0OPS")) == daily_budget.LIFT
        assert daily_budget.answer(answered_by("U0REQUESTER")) is None
    finally:
        monkeypatch.undo()
        config.reset()


@pytest.fixture
def roomy(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    with counted_rig(stack, monkeypatch, USER_DAILY_TOKENS="1000000000", WORKSPACE_DAILY_TOKENS="0") as rig:
        yield rig


def negative_usage(text: str) -> dict[str, Any]:
    """A model reply whose usage metadata claims it cost minus five million tokens."""
    body = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": -5_000_000, "candidatesTokenCount": -7, "thoughtsTokenCount": -1,
                              "cachedContentTokenCount": -3, "totalTokenCount": -5_000_008}}  # fmt: skip
    return FakeGemini.raw(body)


def test_token_counts_are_clamped_at_zero_and_spend_never_decreases(roomy: cost.Rig) -> None:
    """Issue 24.5: a model response reporting -5,000,000 prompt tokens took a person's day to -4,999,999."""
    rig = roomy
    session_id = rig.start("read, then answer")
    rig.script(FakeGemini.call("read_thread", limit=5), negative_usage("Done."))
    rig.deliver(session_id)
    done = rig.session(session_id)
    assert done.status == SessionStatus.DONE
    [first] = [r["reply"]["usage"] for r in model_requests(rig)[:1]]
    assert done.limits.tokens["prompt"] == first["promptTokenCount"] > 0  # the bad turn added nothing
    assert min(done.limits.tokens.values()) >= 0
    spent = spend.spent_today(done.requester, now())[0]
    assert spent == spend.counted(done.limits.tokens) > 0

    # The same again from a fresh session: the day only grows.
    again = rig.start("only the bad turn")
    rig.script(negative_usage("Nothing."))
    rig.deliver(again)
    assert rig.session(again).limits.tokens == {"prompt": 0, "cached": 0, "output": 0, "thinking": 0}
    assert spend.spent_today(done.requester, now())[0] == spent


@pytest.mark.parametrize("turn", ["answer", "call"])
def test_a_turn_the_model_answered_before_a_stop_reached_its_session_is_counted(
    roomy: cost.Rig, monkeypatch: pytest.MonkeyPatch, turn: str
) -> None:
    """Defect: a Stop that reached a running session while the model answered made the turn's step commit write
    nothing (it ends at that boundary), so the turn's tokens, really spent, were counted nowhere: not in the
    person's day, not in the session's totals (nor its tree's). Now that commit records them, and nothing else."""
    rig = roomy
    session_id = rig.start("read the thread, then answer")
    rig.script(FakeGemini.call("read_thread", limit=5) if turn == "call" else FakeGemini.text("Done reading."))
    real = streamed.model_turn

    def stopped_meanwhile(*args: Any, **kwargs: Any) -> Any:
        response = real(*args, **kwargs)
        assert stopping.stop(session_id, by="<@U0STOPPER>") == [session_id]
        return response

    monkeypatch.setattr(streamed, "model_turn", stopped_meanwhile)
    rig.deliver(session_id)
    stopped = rig.session(session_id)
    assert stopped.status == SessionStatus.STOPPED
    [usage] = [r["reply"]["usage"] for r in model_requests(rig)]
    counted = usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage.get("thoughtsTokenCount", 0)
    assert counted > 0
    assert stopped.limits.tokens.get("prompt") == usage["promptTokenCount"]
    assert spend.counted(stopped.limits.tokens) == counted
    assert spend.spent_today(stopped.requester, now())[0] == counted
    assert [s.kind for s in steps.load_steps(session_id)][-1] == StepKind.END  # the turn itself was not stored
    assert not [s for s in steps.load_steps(session_id) if s.kind == StepKind.MODEL]

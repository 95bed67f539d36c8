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
from infra.fakegemini.control import FakeGemini
from infra.stack import Stack
from shared.agent import daily_budget
from shared.state import ids, spend
from shared.state import questions as stored
from shared.state.firestore import now
from shared.state.models import SessionStatus
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
    assert paused.question_id is not None
    return session_id, paused.question_id


def test_a_session_that_crosses_the_budget_asks_and_an_operators_answer_lifts_it(rig: cost.Rig) -> None:
    session_id, question_id = crossed_mid_session(rig)
    question = stored.get_question(question_id)
    assert question is not None
    assert question.options == [daily_budget.LIFT, daily_budget.STOP]
    assert f"the daily budget of {BUDGET:,} tokens" in question.text
    spent = spend.spent_today(rig.session(session_id).requester, now())[0]
    assert spent == spend.counted(rig.session(session_id).tokens) > BUDGET  # every token accounted for

    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "1"), reply)  # an operator: "Let it continue"
    continuation = ids.continuation_id(question_id)
    rig.deliver(continuation)
    assert rig.session(continuation).status == SessionStatus.DONE
    [after] = model_requests(rig)[1:]  # the lifted conversation took its next turn
    [answer] = [r for r in function_responses(after) if r["id"].startswith(daily_budget.CALL_PREFIX)]
    assert answer["response"]["result"]["matched_option"] == daily_budget.LIFT


def test_an_operator_may_stop_it_instead(rig: cost.Rig) -> None:
    session_id, question_id = crossed_mid_session(rig)
    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "2"), reply)  # "Stop it"
    continuation = ids.continuation_id(question_id)
    rig.deliver(continuation)
    assert rig.session(continuation).status == SessionStatus.STOPPED
    assert len(model_requests(rig)) == 1  # no model turn after the budget was spent

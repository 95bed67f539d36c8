"""A daily token budget spent mid-session (flow 13): the session stops at the step boundary and asks the operators,
with the product's own ``ask_operator`` call, whether it may go on; their answer lifts the budget for this
conversation, or stops it. The question is an ordinary operator question: it pauses the session, and the answer
resumes it through a continuation, hours later if need be. Only an operator may answer it, whatever
ALLOW_REQUESTER_ANSWERS says (``shared.asks.answers.may_answer``): the requester could otherwise lift their own
budget. The answer is read only from an operator, too.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from shared import config
from shared.agent.tools.result import ToolResult
from shared.agent.transcript import contents_of
from shared.slack import blocks
from shared.state import ids
from shared.state.models import Step

CALL_PREFIX = ids.DAILY_BUDGET_CALL  # the id of the product's own question call: never one the model made
LIFT = "Let it continue"
STOP = "Stop it"


def question(reason: str, seq: int) -> types.Content:
    """The turn the product writes in the model's place: one ask_operator call."""
    operators = blocks.operator_mentions(config.settings().operator_user_ids)
    text = (f"{operators}: this request has reached {reason} for today, so I stopped before the next step. "
            "Should it continue anyway?")  # fmt: skip
    call = types.FunctionCall(id=f"{CALL_PREFIX}{seq}", name="ask_operator",
                              args={"question": text, "options": [LIFT, STOP]})  # fmt: skip
    return types.Content(role="model", parts=[types.Part(function_call=call)])


def answer(transcript: list[Step]) -> str | None:
    """The operators' answer to this conversation's budget question, if one was asked and an operator answered it
    (an answer by anyone else, however it got there, lifts nothing)."""
    operators = config.settings().operator_user_ids
    found: str | None = None
    for content in contents_of(transcript):
        for part in content.parts or []:
            response = part.function_response
            if response is not None and ids.is_daily_budget_call(response.id):
                result: Any = ToolResult.from_dict(response.response or {}).value or {}
                if not isinstance(result, dict) or result.get("answered_by") not in operators:
                    continue
                found = str(result.get("matched_option") or result.get("answer") or "")
    return found

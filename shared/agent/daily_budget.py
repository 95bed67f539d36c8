"""A daily token budget spent mid-session (flow 13): the session stops at the step boundary and asks the operators,
with the product's own ``ask_operator`` call, whether it may go on; their answer lifts the budget for this
conversation, or stops it. The question is an ordinary operator question: it pauses the session, and the answer
resumes it through a continuation, hours later if need be.
"""

from __future__ import annotations

from typing import Any

from google.genai import types

from shared import config
from shared.agent.transcript import contents_of
from shared.slack import blocks
from shared.state.models import Step

CALL_PREFIX = "daily-budget-"  # the id of the product's own question call: never one the model made
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
    """The operators' answer to this conversation's budget question, if one was asked and answered."""
    found: str | None = None
    for content in contents_of(transcript):
        for part in content.parts or []:
            response = part.function_response
            if response is not None and (response.id or "").startswith(CALL_PREFIX):
                result: Any = (response.response or {}).get("result") or {}
                found = str(result.get("matched_option") or result.get("answer") or "") if isinstance(result, dict) \
                    else str(result)  # fmt: skip
    return found

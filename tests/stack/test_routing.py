"""Where operators are asked (issue 25.4), on the real stack: an approval raised in a person's DM with the app goes
to the operator channel, linked back; the DM says an operator was asked; a decision there resumes the session as
one in the thread would. With no operator channel, the session is told at once and the person reads why."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import routing
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import ids
from shared.state.models import SessionStatus
from tests.agent_helpers import HUMAN, agent_with, function_responses, wait_status
from tests.stack.test_approvals import OPERATOR, executions, resumed

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATORS = "C0OPERATORS"  # the test stack's OPERATOR_CHANNEL


def dm(fake_slack: FakeSlack, uid: str, text: str) -> tuple[str, str, str]:
    """A person writes to the app in their DM: (channel, ts, session id)."""
    channel = f"D{uid}"
    sent = fake_slack.user_message(HUMAN, channel, f"{text} [{channel}]")
    [delivery] = [d for d in sent["deliveries"] if d["type"] == "message"]
    assert delivery["status"] == 200, sent
    return channel, sent["ts"], ids.session_for_event(delivery["event_id"])


def test_an_approval_asked_in_a_dm_goes_to_the_operator_channel_and_resumes_the_dm(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=4), G.text("Scaled the api to 4."))
    channel, ts, session_id = dm(fake_slack, uid, "scale the api to 4")
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=60)
    [approval] = stored.get_approvals(paused.approval_ids)
    assert (approval.card_channel, approval.channel) == (OPERATORS, channel)
    card = next(m for m in fake_slack.messages(OPERATORS) if m["ts"] == approval.card_ts)
    assert f"/archives/{channel}/p{ts.replace('.', '')}" in json.dumps(card["blocks"])  # linked back
    assert not [m for m in fake_slack.messages(channel) if "who may decide" in json.dumps(m.get("blocks"))]
    told = [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id")]
    assert any(f"I asked the operators in <#{OPERATORS}>" in t for t in told)
    value = blocks.approval_value(approval.approval_id, approval.digest)
    assert fake_slack.click(OPERATOR, OPERATORS, approval.card_ts or "", blocks.APPROVE_ACTION, value=value)[
        "status"
    ] == 200  # fmt: skip
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(session_id)] == [4]
    assert any("Scaled the api to 4." in m["text"] for m in fake_slack.messages(channel) if m.get("bot_id"))
    decided = next(m for m in fake_slack.messages(OPERATORS) if m["ts"] == approval.card_ts)
    assert f"approved by <@{OPERATOR}>" in decided["text"]


@pytest.fixture
def no_operator_channel(stack: Stack) -> Iterator[None]:
    with agent_with(stack, {"OPERATOR_CHANNEL": ""}):
        yield


def test_without_an_operator_channel_the_session_is_told_at_once_and_the_person_sees_why(
    no_operator_channel: None, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=5), G.text("I cannot do that here."))
    channel, _ts, session_id = dm(fake_slack, uid, "scale the api to 5")
    done = wait_status(session_id, SessionStatus.DONE, timeout=60)
    assert done.approval_ids == []
    assert executions(session_id) == []
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["error"] == routing.NOBODY_FOR_MODEL
    told = [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id")]
    assert any("operators cannot see this conversation" in t for t in told)
    assert not fake_slack.messages(OPERATORS)

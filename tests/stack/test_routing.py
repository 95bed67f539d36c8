"""Where operators are asked (issue 25.4), on the real stack: an approval raised in a person's DM with the app goes
to the operator channel, linked back; the DM says an operator was asked; a decision there resumes the session as
one in the thread would. With no operator channel, the session is told at once and the person reads why."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import routing
from shared.slack import approval_card, blocks
from shared.state import approvals as stored
from shared.state import ids, questions
from shared.state.models import ApprovalStatus, Question, SessionStatus, WaitKind
from tests.agent_helpers import HUMAN, agent_with, function_responses, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import OPERATOR, executions, resumed
from tests.stack.test_crashes import restarted  # noqa: F401 - the fixture

pytestmark = [pytest.mark.stack, pytest.mark.timeout(360)]  # kills and restarts on a busy machine
G = FakeGemini
Script = Callable[..., int]
OPERATORS = "C0OPERATORS"  # the test stack's OPERATOR_CHANNEL
GUEST = "U0GUEST"  # not an operator


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
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=120)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
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
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [e["replicas"] for e in executions(session_id)] == [4]
    assert any("Scaled the api to 4." in m["text"] for m in fake_slack.messages(channel) if m.get("bot_id"))
    decided = next(m for m in fake_slack.messages(OPERATORS) if m["ts"] == approval.card_ts)
    assert f"approved by <@{OPERATOR}>" in decided["text"]


def test_the_reminder_of_a_routed_card_is_posted_under_the_card(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a routed card's reminder was posted at the top level of the operator channel, apart from its card (its
    place there has no thread), so it named no card and a reply under it denied nothing. A routed question's
    reminder goes under its post; the card's now goes under the card too."""
    from shared.asks import lifecycle

    script(G.call("scale_service", name="api", replicas=2), G.text("Scaled the api to 2."))
    _, _, session_id = dm(fake_slack, uid, "scale the api to 2")
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=120)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    assert approval.card_channel == OPERATORS
    top_level = len([m for m in fake_slack.messages(OPERATORS) if m.get("thread_ts") in (None, m["ts"])])
    assert lifecycle.Ask(approval).remind(approval.asked_at + timedelta(hours=25))
    under = [
        m["text"] for m in fake_slack.bot_replies(OPERATORS, approval.card_ts or "") if m["ts"] != approval.card_ts
    ]
    assert len(under) == 1, under
    assert "waited 25 hours for approval" in under[0]
    top = [m for m in fake_slack.messages(OPERATORS) if m.get("thread_ts") in (None, m["ts"])]
    assert len(top) == top_level  # no new message at the channel's top level


def test_an_edit_on_a_routed_card_runs_the_edited_call_in_the_dms_session(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=4), G.text("Scaled the api."))
    channel, _, session_id = dm(fake_slack, uid, "scale the api to 4")
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=120)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    value = blocks.approval_value(approval.approval_id, approval.digest)
    fake_slack.click(OPERATOR, OPERATORS, approval.card_ts or "", approval_card.EDIT_ACTION, value=value)
    [view] = wait_for(lambda: fake_slack.views(OPERATOR), timeout=60, what="the Edit modal")
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "2"})["answer"] == {}
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [e["replicas"] for e in executions(session_id)] == [2]
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["edited"]["arguments"] == {"name": "api", "replicas": 2}
    assert any("Scaled the api." in m["text"] for m in fake_slack.messages(channel) if m.get("bot_id"))
    card = next(m for m in fake_slack.messages(OPERATORS) if m["ts"] == approval.card_ts)
    assert f"Edited by <@{OPERATOR}>" in json.dumps(card["blocks"])


def test_an_operators_reply_under_a_decided_routed_card_is_no_losing_denial(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect (a review of session 8's race fix): a decision took its approval off the conversation's thread but
    not off the thread its routed card starts, and a reply there, however late, was told it lost to the decision
    (and claimed, so a mention there started nothing). The decision unlists it from both threads."""
    script(G.call("scale_service", name="api", replicas=3), G.text("Scaled the api to 3."))
    _channel, _ts, session_id = dm(fake_slack, uid, "scale the api to 3")
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=120)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    value = blocks.approval_value(approval.approval_id, approval.digest)
    assert fake_slack.click(OPERATOR, OPERATORS, approval.card_ts or "", blocks.APPROVE_ACTION, value=value)[
        "status"
    ] == 200  # fmt: skip
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert questions.thread_questions(OPERATORS, approval.card_ts or "").open_approval_ids == []
    reply = fake_slack.user_message(OPERATOR, OPERATORS, f"why 3? {uid}", thread_ts=approval.card_ts)
    assert [d["status"] for d in reply["deliveries"]] == [200]
    assert fake_slack.ephemerals(OPERATORS, user=OPERATOR) == []


def routed_posts(fake_slack: FakeSlack, text: str) -> list[dict[str, Any]]:
    """The operator channel's top-level messages whose text holds ``text``."""
    return [m for m in fake_slack.messages(OPERATORS) if text in m["text"] and m.get("thread_ts") in (None, m["ts"])]


def paused_on_question(session_id: str, *, timeout: float = 120) -> Question:
    """The question ``session_id`` pauses on, once it has."""
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=timeout)
    question = questions.get_question(paused.awaited_question or "")
    assert question is not None
    return question


def asked_in_a_dm(script: Script, fake_slack: FakeSlack, uid: str, request: str, asked: str, options: list[str],
                  then: str) -> tuple[str, str, Question]:  # fmt: skip
    """A person's ``request`` in their DM, whose session asks the operators ``asked`` (and says ``then`` once
    answered): the DM, the request's ts and the question."""
    script(G.call("ask_operator", question=asked, options=options), G.text(then))
    channel, ts, session_id = dm(fake_slack, uid, request)
    return channel, ts, paused_on_question(session_id)


def test_a_question_asked_in_a_dm_goes_to_the_operator_channel_and_a_reply_there_resumes_the_dm(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    asked = f"Which region for {uid}?"
    channel, ts, question = asked_in_a_dm(script, fake_slack, uid, "deploy it", asked, ["eu", "us"], "Deployed to eu.")
    assert (question.post_channel, question.channel) == (OPERATORS, channel)
    [post] = routed_posts(fake_slack, asked)
    assert post["ts"] == question.post_ts
    assert f"/archives/{channel}/p{ts.replace('.', '')}" in json.dumps(post["blocks"])  # linked back
    told = [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id")]
    assert any(f"I asked the operators in <#{OPERATORS}>" in t and asked in t for t in told), told
    assert not [m for m in fake_slack.messages(channel) if "answer_1" in json.dumps(m.get("blocks"))]  # no buttons

    reply = fake_slack.user_message(OPERATOR, OPERATORS, "1", thread_ts=post["ts"])  # under the post
    assert [d["status"] for d in reply["deliveries"]] == [200]
    continuation = wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE, timeout=120)
    assert (continuation.origin.channel, continuation.origin.thread_ts) == (channel, question.thread_ts)
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"]["matched_option"] == "eu"
    assert any("Deployed to eu." in m["text"] for m in fake_slack.messages(channel) if m.get("bot_id"))
    [answered] = routed_posts(fake_slack, asked)
    assert f"<@{OPERATOR}>" in answered["text"]  # the post shows the answer, its buttons gone
    assert "answer_1" not in json.dumps(answered.get("blocks"))


def test_a_button_on_a_routed_question_answers_it_and_a_non_operator_is_refused_there(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    asked = f"Which size for {uid}?"
    _channel, _ts, question = asked_in_a_dm(script, fake_slack, uid, "make it", asked, ["small", "large"],
                                            "Made it large.")  # fmt: skip
    assert question.post_ts is not None
    refused = fake_slack.user_message(GUEST, OPERATORS, "small", thread_ts=question.post_ts)
    assert [d["status"] for d in refused["deliveries"]] == [200]
    wait_for(lambda: [e for e in fake_slack.ephemerals(OPERATORS, user=GUEST) if "Only the operators" in e["text"]],
             timeout=30, what="the refusal, in the operator channel")  # fmt: skip
    pressed = fake_slack.click(OPERATOR, OPERATORS, question.post_ts, "answer_2",
                               value=blocks.question_value(question.question_id, 2))  # fmt: skip
    assert pressed["status"] == 200
    wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE, timeout=120)
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"]["matched_option"] == "large"


def test_a_denying_reply_under_a_routed_card_denies_it_as_in_the_thread(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=6), G.text("Not scaled."))
    channel, _ts, session_id = dm(fake_slack, uid, "scale the api to 6")
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=120)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    reply = fake_slack.user_message(OPERATOR, OPERATORS, f"not now {uid}", thread_ts=approval.card_ts)
    assert [d["status"] for d in reply["deliveries"]] == [200]
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    denied = stored.get_approval(approval.approval_id)
    assert denied is not None
    assert (denied.status, denied.decided_by, denied.reason) == (ApprovalStatus.DENIED, OPERATOR, f"not now {uid}")
    assert executions(session_id) == []
    [response] = function_responses(fake_gemini.requests()[-1])
    assert f"not now {uid}" in json.dumps(response["response"])
    card = next(m for m in fake_slack.messages(OPERATORS) if m["ts"] == approval.card_ts)
    assert f"denied by <@{OPERATOR}>" in card["text"]
    assert any("Not scaled." in m["text"] for m in fake_slack.messages(channel) if m.get("bot_id"))


# A SIGKILL between the record and its routed post (held while the link to the conversation is asked for), and one
# after Slack took the post but before the worker recorded it (held on the post's answer): one post either way.
ROUTED_HOLDS = [("between the record and its post", "chat.getPermalink"), ("after the post", "chat.postMessage")]


@pytest.mark.parametrize(("where", "method"), ROUTED_HOLDS, ids=[h[0] for h in ROUTED_HOLDS])
@pytest.mark.usefixtures("restarted")
def test_a_routed_question_is_posted_exactly_once_across_a_kill(
    where: str, method: str, stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    asked = f"Which zone for {uid}?"
    script(G.call("ask_operator", question=asked, options=["a", "b"]), G.text("Zone b it is."))
    match = asked if method == "chat.postMessage" else f"D{uid}"  # the routed post; the link to this DM
    fake_slack.slow(method, 60, match=match)
    channel, _ts, session_id = dm(fake_slack, uid, "pick a zone")
    kill_routed(stack, fake_slack, method, match)
    question = paused_on_question(session_id, timeout=90)
    [post] = routed_posts(fake_slack, asked)  # exactly once
    assert post["ts"] == question.post_ts
    told = [m for m in fake_slack.messages(channel) if m.get("bot_id") and "I asked the operators" in m["text"]]
    assert len(told) == 1
    fake_slack.user_message(OPERATOR, OPERATORS, "b", thread_ts=post["ts"])
    wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE, timeout=120)
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"]["matched_option"] == "b"


@pytest.mark.parametrize(("where", "method"), ROUTED_HOLDS, ids=[h[0] for h in ROUTED_HOLDS])
@pytest.mark.usefixtures("restarted")
def test_a_routed_approval_card_is_posted_exactly_once_across_a_kill(
    where: str, method: str, stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=7), G.text("Scaled."))
    match = f"archives/D{uid}" if method == "chat.postMessage" else f"D{uid}"  # the card's link; the link asked
    fake_slack.slow(method, 60, match=match)
    channel, _ts, session_id = dm(fake_slack, uid, "scale the api to 7")
    kill_routed(stack, fake_slack, method, match)
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=90)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    cards = [m for m in fake_slack.messages(OPERATORS) if approval.approval_id in json.dumps(m.get("blocks"))]
    assert [c["ts"] for c in cards] == [approval.card_ts]  # exactly once
    value = blocks.approval_value(approval.approval_id, approval.digest)
    fake_slack.click(OPERATOR, OPERATORS, approval.card_ts or "", blocks.APPROVE_ACTION, value=value)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [e["replicas"] for e in executions(session_id)] == [7]
    assert any("Scaled." in m["text"] for m in fake_slack.messages(channel) if m.get("bot_id"))


def kill_routed(stack: Stack, fake_slack: FakeSlack, method: str, match: str) -> None:
    """Wait for the worker to be held at ``method`` (its arguments holding ``match``), SIGKILL it, start anew."""
    wait_for(
        lambda: [c for c in fake_slack.calls(method) if match in json.dumps(c["args"])],
        timeout=60,
        what=f"the worker at {method}",
    )
    stack.kill_function("agent_session")
    stack.start_function("agent_session")


@pytest.fixture(scope="module")
def no_operator_channel(stack: Stack) -> Iterator[None]:
    """agent_session without an operator channel, restarted once for the two tests below (this module's last: the
    module-scoped fixture ends with the module)."""
    with agent_with(stack, {"OPERATOR_CHANNEL": ""}):
        yield


def test_without_an_operator_channel_the_session_is_told_at_once_and_the_person_sees_why(
    no_operator_channel: None, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("scale_service", name="api", replicas=5), G.text("I cannot do that here."))
    channel, _ts, session_id = dm(fake_slack, uid, "scale the api to 5")
    done = wait_status(session_id, SessionStatus.DONE, timeout=120)
    assert done.awaited(WaitKind.APPROVAL) == []
    assert executions(session_id) == []
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["error"] == routing.NOBODY_FOR_MODEL
    told = [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id")]
    assert any("operators cannot see this conversation" in t for t in told)
    assert not fake_slack.messages(OPERATORS)


def test_without_an_operator_channel_a_question_is_refused_at_once_and_the_person_sees_why(
    no_operator_channel: None, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("ask_operator", question=f"Which region for {uid}?"), G.text("I cannot ask anyone here."))
    channel, _ts, session_id = dm(fake_slack, uid, "deploy it")
    done = wait_status(session_id, SessionStatus.DONE, timeout=120)
    assert done.question_id is None
    [response] = function_responses(fake_gemini.requests()[-1])
    assert routing.NOBODY_TO_ANSWER_FOR_MODEL in response["response"]["error"]
    told = [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id")]
    assert any("operators cannot see this conversation" in t for t in told), told
    assert not routed_posts(fake_slack, uid)

"""Every session that ends marks the ORIGINAL request with its reaction, whatever kind it is (issue 26.1).

A continuation used to aim its ✅ at what resumed it: a button press's ts (Slack answers ``message_not_found``)
or the operator's reply. The request here is a reply inside an existing thread, so neither the thread's root
nor any other message can stand in for it by accident.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import ids
from shared.state.models import SessionStatus, WaitKind
from tests.agent_helpers import HUMAN, Thread, open_question, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID
DONE = "white_check_mark"


def request_in_a_thread(fake_slack: FakeSlack, channel: str, text: str) -> tuple[Thread, str]:
    """A person talks in a thread, then mentions the bot in it; the thread, and the ts of the request itself."""
    root = fake_slack.user_message(HUMAN, channel, "we need to decide a few things")["ts"]
    sent = fake_slack.user_message(HUMAN, channel, f"<@{local.BOT_USER_ID}> {text} [{channel}]", thread_ts=root)
    [delivery] = [d for d in sent["deliveries"] if d["type"] == "app_mention"]
    assert delivery["status"] == 200, sent
    return Thread(channel=channel, ts=root, session_id=ids.session_for_event(delivery["event_id"])), sent["ts"]


def marked_done(fake_slack: FakeSlack, channel: str, ts: str) -> bool:
    return DONE in fake_slack.reactions(channel, ts)


@pytest.mark.parametrize("how", ["button", "reply"])
def test_a_question_answered_marks_the_request_done(script: Script, fake_slack: FakeSlack, uid: str, how: str) -> None:
    script(G.call("ask_operator", question="Which database?", options=["sqlite", "postgres"]))
    thread, request = request_in_a_thread(fake_slack, f"C{uid}", "set up storage")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    question = open_question(thread.session_id)
    assert not marked_done(fake_slack, thread.channel, request)  # paused: not done yet
    script(G.text("Using postgres."))
    if how == "button":
        pressed = fake_slack.click(OPERATOR, thread.channel, question.post_ts or "", "answer_2",
                                   value=f"{question.question_id}|2")  # fmt: skip
        assert pressed["status"] == 200
    else:
        fake_slack.user_message(OPERATOR, thread.channel, "2", thread_ts=thread.ts)
    wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE)
    wait_for(lambda: marked_done(fake_slack, thread.channel, request), what="the ✅ on the request")
    assert not marked_done(fake_slack, thread.channel, thread.ts)  # the root was only the thread's opener


@pytest.mark.parametrize("action", [blocks.APPROVE_ACTION, blocks.DENY_ACTION])
def test_an_approval_decided_marks_the_request_done(
    script: Script, fake_slack: FakeSlack, uid: str, action: str
) -> None:
    script(G.call("scale_service", name="api", replicas=3), G.text("Handled the api."))
    thread, request = request_in_a_thread(fake_slack, f"C{uid}", "scale the api")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    value = blocks.approval_value(approval.approval_id, approval.digest)
    assert fake_slack.click(OPERATOR, thread.channel, approval.card_ts or "", action, value=value)["status"] == 200
    wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.DONE)
    wait_for(lambda: marked_done(fake_slack, thread.channel, request), what="the ✅ on the request")
    assert not marked_done(fake_slack, thread.channel, thread.ts)
    assert not marked_done(fake_slack, thread.channel, approval.card_ts or "")

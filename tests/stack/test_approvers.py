"""Who may approve (issue 25.3), on the real stack: two distinct approvers, user-group approvers, when/otherwise.

agent_session runs with rules in ``TOOL_TIERS``; the approvers a rule names are written on the approval, so the
interactivity function decides with them (reading a user group's members from the fake Slack).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.slack import blocks
from shared.state import approvals as stored
from shared.state import firestore, ids
from shared.state.models import ApprovalStatus, SessionStatus, WaitKind
from tests.agent_helpers import agent_with, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import asks_approval, executions, press, resumed
from tests.stack.test_edits import open_editor
from tests.stack.test_wait_races import abandon_cut_off, paused_on_a_question_and_a_card, posted_question

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR, OPERATOR2, GUEST = local.OPERATOR_ID, "U0OPERATOR2", "U0GUEST"
GROUP = "S0TESTAPPROVERS"
RULES = {
    "scale_service": {
        "tier": "approve",
        "approvers": [OPERATOR, OPERATOR2],
        "approvals": 2,
        "when": {"name": ["api"]},
        "otherwise": "approve",
    },
    "pin_version": {"tier": "approve", "approvers": [GROUP]},
    "restart_service": {"tier": "approve", "when": {"environment": ["production"]}, "otherwise": "safe"},
}


@pytest.fixture(scope="module")
def rules(stack: Stack) -> Iterator[None]:
    with agent_with(stack, {"TOOL_TIERS": json.dumps(RULES)}):
        yield


def card(fake_slack: FakeSlack, channel: str, ts: str, card_ts: str | None) -> dict[str, Any]:
    return next(m for m in fake_slack.messages(channel, ts) if m["ts"] == card_ts)


def test_two_different_approvers_must_approve_and_the_same_one_twice_is_refused(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_approval(
        script, fake_slack, f"C{uid}", "scale the api to 6", G.call("scale_service", name="api", replicas=6), "Scaled."
    )
    assert (approval.approvers, approval.approvals_needed) == ([OPERATOR, OPERATOR2], 2)
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)
    first = wait_for(lambda: "1 of 2" in json.dumps(card(fake_slack, thread.channel, thread.ts, approval.card_ts)),
                     timeout=30, what="the card to count one approval")  # fmt: skip
    assert any(b["type"] == "actions" for b in card(fake_slack, thread.channel, thread.ts, approval.card_ts)["blocks"])
    assert first
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)  # the same person again
    assert any("approved this call already" in e["text"] for e in fake_slack.ephemerals(thread.channel, OPERATOR))
    counted = stored.get_approval(approval.approval_id)
    assert counted is not None
    assert (counted.status, counted.approved_by) == (ApprovalStatus.PENDING, [OPERATOR])
    assert executions(thread.session_id) == []
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR2)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    [ran] = executions(thread.session_id)
    assert ran["replicas"] == 6
    done = stored.get_approval(approval.approval_id)
    assert done is not None
    assert done.approved_by == [OPERATOR, OPERATOR2]


def test_one_deny_ends_a_two_person_approval(rules: None, script: Script, fake_slack: FakeSlack, uid: str) -> None:
    thread, approval = asks_approval(
        script,
        fake_slack,
        f"C{uid}",
        "scale the api to 7",
        G.call("scale_service", name="api", replicas=7),
        "Not scaled.",
    )
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)
    press(fake_slack, approval, blocks.DENY_ACTION, user=OPERATOR2)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert executions(thread.session_id) == []
    denied = stored.get_approval(approval.approval_id)
    assert denied is not None
    assert (denied.status, denied.decided_by) == (ApprovalStatus.DENIED, OPERATOR2)


def test_only_members_of_the_approver_group_may_decide(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    fake_slack.set_usergroup(GROUP, [GUEST])  # a person who is not an operator, in the group the rule names
    thread, approval = asks_approval(
        script, fake_slack, f"C{uid}", "pin the api to 3.1", G.call("pin_version", name="api", version="3.1"), "Pinned."
    )
    assert f"members of user group `{GROUP}`" in json.dumps(card(fake_slack, thread.channel, thread.ts,
                                                                 approval.card_ts)["blocks"])  # fmt: skip
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)  # an operator, but not an approver here
    assert any("this call's approvers" in e["text"] for e in fake_slack.ephemerals(thread.channel, OPERATOR))
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert pending.status == ApprovalStatus.PENDING
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=GUEST)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    wait_for(lambda: executions(thread.session_id), timeout=30, what="the pin")
    decided = stored.get_approval(approval.approval_id)
    assert decided is not None
    assert decided.decided_by == GUEST


def test_when_and_otherwise_choose_the_tier_by_argument_value(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    script(G.call("restart_service", name="web", environment="staging"), G.text("Restarted in staging."))
    staging = mention(fake_slack, f"C{uid}", "restart web in staging")
    done = wait_status(staging.session_id, SessionStatus.DONE, timeout=60)
    assert done.awaited(WaitKind.APPROVAL) == []
    assert [e["environment"] for e in executions(staging.session_id)] == ["staging"]  # ran at once: otherwise safe
    production, approval = asks_approval(
        script,
        fake_slack,
        f"C{uid}b",
        "restart web in production",
        G.call("restart_service", name="web", environment="production"),
        "Restarted.",
    )
    assert approval.approvers == []  # no approvers named: the operators decide
    assert executions(production.session_id) == []


def test_an_edit_cannot_move_a_call_into_another_case_of_its_rule(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the rule's ``when`` was applied to the model's call only. Scaling ``web`` is the operators' to decide
    (``otherwise``); an operator's edit to ``api``, which the rule gives to two named approvers, ran on that one
    operator's approval. An edit that changes which case of its rule the call is in is refused in the modal."""
    thread, approval = asks_approval(
        script, fake_slack, f"C{uid}", "scale web to 2", G.call("scale_service", name="web", replicas=2), "Scaled."
    )
    assert (approval.approvers, approval.approvals_needed) == ([], 1)
    view = open_editor(fake_slack, approval)
    refused = fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": "api"})
    assert (refused["answer"]["response_action"], refused["open"]) == ("errors", True)
    assert "TOOL_TIERS" in json.dumps(refused["answer"]["errors"])
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert (pending.status, pending.edited_args, pending.approved_by) == (ApprovalStatus.PENDING, None, [])
    assert executions(thread.session_id) == []
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": "web", "arg:replicas": "4"})["answer"] == {}
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [(e["service"], e["replicas"]) for e in executions(thread.session_id)] == [("web", 4)]


def test_an_edit_refused_for_crossing_its_rule_names_the_field_that_crossed(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the refusal of an edit that moves a call into the other case of its rule's ``when`` was shown under
    the modal's first field (``name``), not under the field whose value crossed it (``environment``)."""
    thread, approval = asks_approval(
        script,
        fake_slack,
        f"C{uid}",
        "restart web in production",
        G.call("restart_service", name="web", environment="production"),
        "Restarted.",
    )
    view = open_editor(fake_slack, approval)
    refused = fake_slack.submit_view(view["id"], OPERATOR, {"arg:environment": "staging"})
    assert (refused["answer"]["response_action"], refused["open"]) == ("errors", True)
    assert list(refused["answer"]["errors"]) == ["arg:environment"]
    assert "TOOL_TIERS" in refused["answer"]["errors"]["arg:environment"]
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert (pending.status, pending.edited_args) == (ApprovalStatus.PENDING, None)
    assert executions(thread.session_id) == []


def test_a_double_click_and_another_approvers_deny_at_once_count_one_approval_and_end_it_denied(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Two approvers needed: the first presses Approve twice and the second Deny, all at once (three deliveries
    racing on one approval). The first counts once at most, the Deny ends it, and nothing runs."""
    thread, approval = asks_approval(
        script, fake_slack, f"C{uid}", "scale the api to 8", G.call("scale_service", name="api", replicas=8), "No."
    )
    start = threading.Barrier(3)
    answers: list[dict[str, Any]] = []

    def decide(action: str, user: str) -> None:
        start.wait()
        answers.append(press(fake_slack, approval, action, user=user))

    racers = [(blocks.APPROVE_ACTION, OPERATOR), (blocks.APPROVE_ACTION, OPERATOR), (blocks.DENY_ACTION, OPERATOR2)]
    threads = [threading.Thread(target=decide, args=racer) for racer in racers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [a["status"] for a in answers] == [200] * 3
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    decided = stored.get_approval(approval.approval_id)
    assert decided is not None
    assert (decided.status, decided.decided_by) == (ApprovalStatus.DENIED, OPERATOR2)
    assert decided.approved_by in ([], [OPERATOR])
    assert executions(thread.session_id) == []
    shown = card(fake_slack, thread.channel, thread.ts, approval.card_ts)
    assert f"denied by <@{OPERATOR2}>" in shown["text"]
    assert not [b for b in shown["blocks"] if b["type"] == "actions"]


def test_a_denying_reply_denies_only_the_calls_its_author_may_decide(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a reply was checked against the turn's first pending call only, then denied every pending call: an
    operator's reply denied a pin only the user group may decide, and a group member's reply was ignored whole."""
    fake_slack.set_usergroup(GROUP, [GUEST])
    script(G.calls(("scale_service", {"name": "api", "replicas": 2}), ("pin_version", {"name": "api", "version": "4"})),
           G.text("Neither ran."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scale the api and pin it")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    scale, pin = sorted(stored.get_approvals(paused.awaited(WaitKind.APPROVAL)), key=lambda a: a.call_index)
    fake_slack.user_message(OPERATOR, thread.channel, "no scaling today", thread_ts=thread.ts)
    wait_for(lambda: stored.get_approval(scale.approval_id).status == ApprovalStatus.DENIED,  # type: ignore[union-attr]
             timeout=30, what="the scale denied")  # fmt: skip
    still = stored.get_approval(pin.approval_id)
    assert still is not None
    assert still.status == ApprovalStatus.PENDING  # the operator is no member of the group that decides pins
    fake_slack.user_message(GUEST, thread.channel, "no pin either", thread_ts=thread.ts)
    wait_status(resumed(pin), SessionStatus.DONE, timeout=60)
    denied = stored.get_approval(pin.approval_id)
    assert denied is not None
    assert (denied.status, denied.decided_by, denied.reason) == (ApprovalStatus.DENIED, GUEST, "no pin either")
    assert executions(thread.session_id) == []


def test_a_denying_replys_twin_event_that_read_the_thread_before_the_denial_is_no_new_message(
    rules: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect (review): a reply denies the calls its author may decide, leaves pending one they may not, and claims
    its message last. Its app_mention twin, which read the thread before the denial and the approvals after it,
    found only that other call pending, took the reply for no decision at all, and went on as a message of its own
    (a note, or a session). It is now the reply's own decision, seen again."""
    from shared.asks import approvals as asked

    script(G.calls(("scale_service", {"name": "api", "replicas": 2}), ("pin_version", {"name": "api", "version": "4"})),
           G.text("Neither ran."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "scale the api and pin it")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    scale, pin = sorted(stored.get_approvals(paused.awaited(WaitKind.APPROVAL)), key=lambda a: a.call_index)
    sent = fake_slack.user_message(OPERATOR, thread.channel, "no scaling today", thread_ts=thread.ts)
    wait_for(lambda: stored.get_approval(scale.approval_id).status == ApprovalStatus.DENIED,  # type: ignore[union-attr]
             timeout=30, what="the scale denied")  # fmt: skip
    firestore.event_ref(ids.message_key(thread.channel, sent["ts"])).delete()  # the twin came before the claim
    twin = asked.deny_by_reply(open_approval_ids=[scale.approval_id, pin.approval_id], user=OPERATOR,
                               text="no scaling today", ts=sent["ts"], channel=thread.channel)  # fmt: skip
    assert twin is not None  # a decision (the reply's own), not a message to handle as any other
    assert firestore.event_ref(ids.message_key(thread.channel, sent["ts"])).get().exists  # claimed: no third event
    assert stored.get_approval(pin.approval_id).status == ApprovalStatus.PENDING  # type: ignore[union-attr]


def test_the_first_of_two_approvals_of_a_turn_whose_question_was_closed_is_refused(
    rules: None, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a turn asks a question and a call two approvers must approve; the sweep's abandon closes the question
    and is cut off before ending the session. The first approval was counted (the card said 1 of 2) though nothing
    waits on the call any more: only the asker's status was checked. Now it is refused as the last one would be,
    its approver told so, and the call ends with the turn."""
    thread, approval = paused_on_a_question_and_a_card(fake_slack, fake_gemini, uid)
    assert approval.approvals_needed == 2
    question = posted_question(ids.question_id(thread.session_id, 1, 0))
    abandon_cut_off(question, monkeypatch)
    assert press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)["status"] == 200
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, OPERATOR)]
    assert any("Nothing waits on this call any more" in text for text in told), told
    closed = stored.get_approval(approval.approval_id)
    assert closed is not None
    assert closed.approved_by == []
    assert closed.status not in {ApprovalStatus.PENDING, ApprovalStatus.APPROVED}, closed.status
    assert executions(thread.session_id) == []

"""Edits exactly once (issue 25.2), on the real stack: an Edit racing an Approve or a Deny by another operator (one
decision wins, the other is told), a press held while an edit commits, a press on the card as it was before an edit
under a rule of two approvers, a double submission with the continuation delivered in parallel, and a SIGKILL at
each step from the submission to the stored response.

agent_session runs with rules in ``TOOL_TIERS``: ``scale_service`` needs two approvers (an operator, and the
members of a user group), ``restart_service`` one operator.
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
from shared.asks.approvals import canonical, digest
from shared.slack import approval_card, blocks
from shared.state import approvals as stored
from shared.state.models import Approval, ApprovalStatus, SessionStatus, WaitKind
from tests import delivery
from tests.agent_helpers import Thread, agent_with, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import executions, press, resumed
from tests.stack.test_crashes import restarted  # noqa: F401 - the fixture

pytestmark = [pytest.mark.stack, pytest.mark.timeout(360)]  # kills and restarts on a busy machine
G = FakeGemini
Script = Callable[..., int]
OPERATOR, OPERATOR2 = local.OPERATOR_ID, "U0OPERATOR2"
GROUP = "S0EDITRACE"  # its only member is OPERATOR2: a press by them reads the group (usergroups.users.list)
RULES = {
    "scale_service": {"tier": "approve", "approvers": [OPERATOR, GROUP], "approvals": 2},
    "restart_service": {"tier": "approve"},
}


@pytest.fixture(scope="module")
def rules(stack: Stack) -> Iterator[None]:
    with agent_with(stack, {"TOOL_TIERS": json.dumps(RULES)}):
        yield


@pytest.fixture
def group(fake_slack: FakeSlack) -> None:
    fake_slack.set_usergroup(GROUP, [OPERATOR2])


def asks(script: Script, fake_slack: FakeSlack, uid: str, call: tuple[str, dict[str, Any]],
         answer: str, *, held: bool = False) -> tuple[Thread, Approval]:  # fmt: skip
    """``held``: the model's request after the call's step is answered late (its retry's at once)."""
    script(G.call(call[0], **call[1]), *([G.delayed(60, G.text(answer))] if held else []), G.text(answer))
    thread = mention(fake_slack, f"C{uid}", "please do it")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=120)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    assert approval.card_ts is not None
    return thread, approval


def editor(fake_slack: FakeSlack, approval: Approval, user: str) -> dict[str, Any]:
    assert press(fake_slack, approval, approval_card.EDIT_ACTION, user=user)["status"] == 200
    [view] = wait_for(lambda: fake_slack.views(user), timeout=30, what="the Edit modal")
    return dict(view)


def current(approval: Approval) -> Approval:
    found = stored.get_approval(approval.approval_id)
    assert found is not None
    return found


def told(fake_slack: FakeSlack, thread: Thread, user: str, text: str) -> bool:
    return any(text in e["text"] for e in fake_slack.ephemerals(thread.channel, user))


def test_an_approve_held_while_an_edit_commits_never_counts_for_the_edited_call(
    rules: None, group: None, stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the press read the approval before the edit committed, and its transaction then added its approval
    of the original arguments to the edited call's approvers: two of two, and the edited call ran with one
    approval of it. (Whichever transaction commits first, the press is not counted for the edited call: before the
    edit it is counted for the original and the edit starts the count again; after it, it is refused.)"""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = editor(fake_slack, approval, OPERATOR)
    forget_groups(stack)
    fake_slack.slow("usergroups.users.list", 8)  # OPERATOR2's press waits there, after it read the approval
    pressing = threading.Thread(target=press, args=(fake_slack, approval, blocks.APPROVE_ACTION),
                                kwargs={"user": OPERATOR2}, daemon=True)  # fmt: skip
    pressing.start()
    wait_for(lambda: fake_slack.calls("usergroups.users.list"), timeout=60, what="the press to read the group")
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "5"})["answer"] == {}  # 1 of 2
    pressing.join(120)
    held = current(approval)
    assert (held.status, held.approved_by, held.edited_by) == (ApprovalStatus.PENDING, [OPERATOR], OPERATOR)
    assert executions(thread.session_id) == []  # whichever committed first, the press never counts for the edit

    # The card as first shown, pressed again: still not counted, and told why. The card as it is now: counted.
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR2)
    assert current(approval).approved_by == [OPERATOR]
    assert told(fake_slack, thread, OPERATOR2, "edited this call after this card was shown")
    value = blocks.approval_value(approval.approval_id, held.edited_digest or "")
    assert press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR2, value=value)["status"] == 200
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [e["replicas"] for e in executions(thread.session_id)] == [5]
    assert current(approval).approved_by == [OPERATOR, OPERATOR2]


def asks_to_scale(script: Script, fake_slack: FakeSlack, uid: str) -> tuple[Thread, Approval]:
    return asks(script, fake_slack, uid, ("scale_service", {"name": "api", "replicas": 3}), "Scaled.")


def test_approvals_of_the_call_before_an_edit_do_not_count_and_a_deny_on_that_card_ends_it(
    rules: None, group: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR2)  # 1 of 2, of replicas=3
    assert current(approval).approved_by == [OPERATOR2]
    view = editor(fake_slack, approval, OPERATOR)
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "4"})["answer"] == {}
    edited = current(approval)
    assert (edited.status, edited.approved_by) == (ApprovalStatus.PENDING, [OPERATOR])  # replicas=3's approval gone
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert "1 of 2" in json.dumps(card["blocks"])
    press(fake_slack, approval, blocks.DENY_ACTION, user=OPERATOR2)  # on the card as first shown: a Deny still ends it
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    denied = current(approval)
    assert (denied.status, denied.decided_by) == (ApprovalStatus.DENIED, OPERATOR2)
    assert executions(thread.session_id) == []


RACES = [("edit against approve", blocks.APPROVE_ACTION), ("edit against deny", blocks.DENY_ACTION)]


@pytest.mark.parametrize(("race", "action"), RACES, ids=[r[0] for r in RACES])
def test_an_edit_racing_another_operators_press_makes_one_decision_and_the_other_is_told(
    race: str, action: str, rules: None, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    call = ("restart_service", {"name": "api", "environment": "production"})
    thread, approval = asks(script, fake_slack, uid, call, "Handled.")
    view = editor(fake_slack, approval, OPERATOR)
    start = threading.Barrier(2)
    answers: dict[str, Any] = {}

    def edit() -> None:
        start.wait()
        answers["edit"] = fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": "web"})

    def other() -> None:
        start.wait()
        answers["press"] = press(fake_slack, approval, action, user=OPERATOR2)

    racers = [threading.Thread(target=edit, daemon=True), threading.Thread(target=other, daemon=True)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(120)
    assert answers["press"]["status"] == 200
    decided = current(approval)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    ran = [e["service"] for e in executions(thread.session_id)]
    if decided.edited_by == OPERATOR:  # the edit won: the edited call ran once; the presser was told
        assert (decided.status, decided.decided_by, ran) == (ApprovalStatus.APPROVED, OPERATOR, ["web"])
        assert answers["edit"]["answer"] == {}
        wait_for(lambda: told(fake_slack, thread, OPERATOR2, f"already approved by <@{OPERATOR}>"), timeout=30,
                 what="the presser to be told")  # fmt: skip
    else:  # the press won: its decision stands; the editor is told in the modal, which stays open
        assert decided.decided_by == OPERATOR2
        assert ran == (["api"] if action == blocks.APPROVE_ACTION else [])
        assert answers["edit"]["answer"]["response_action"] == "errors"
        assert f"by <@{OPERATOR2}>" in json.dumps(answers["edit"]["answer"]["errors"])
    [response] = function_responses(fake_gemini.requests()[-1])
    assert ("edited" in response["response"]) == (decided.edited_by == OPERATOR)


def test_a_double_submission_with_the_continuation_delivered_in_parallel_runs_the_edit_once(
    rules: None, stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    call = ("restart_service", {"name": "api", "environment": "staging"})
    thread, approval = asks(script, fake_slack, uid, call, "Restarted.")
    view = editor(fake_slack, approval, OPERATOR)
    start = threading.Barrier(2)
    answers: list[dict[str, Any]] = []

    def submit() -> None:
        start.wait()
        answers.append(fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": "db"}))

    submitting = [threading.Thread(target=submit, daemon=True) for _ in range(2)]
    for t in submitting:
        t.start()
    for t in submitting:
        t.join(120)
    assert [a["status"] for a in answers] == [200, 200]
    attempts = delivery.deliver(stack.function_url("agent_session"), resumed(approval), task="edit", copies=4)
    assert delivery.settled(attempts, 4), attempts  # a copy whose claim gave up for contention is retried
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [(e["service"], e["environment"]) for e in executions(thread.session_id)] == [("db", "staging")]
    assert current(approval).edited_digest == digest("restart_service", canonical({"environment": "staging",
                                                                                    "name": "db"}))  # fmt: skip


# A SIGKILL at each step of an edit: (process, the Slack method it is held in, text its arguments hold). Before its
# decision, the submission is held reading the editor's user group (see the test after this one).
EDIT_KILLS = [
    ("the submission, after its decision and queueing", "slack_interactivity", "chat.update", "running it now"),
    ("inside the edited call", "agent_session", "chat.postMessage", "Restarting `web`"),
    # Its done record is written with the resumed step (issue 28.1), and the card's "it ran" update is made once that
    # step is stored: killed in that update, the takeover finds the result in the transcript.
    ("after the edited call's step, in its card's update", "agent_session", "chat.update", "it ran"),
    ("the answer, after the stored response", "agent_session", "chat.postMessage", "Restarted web."),
]


@pytest.mark.parametrize(("where", "process", "method", "match"), EDIT_KILLS, ids=[k[0] for k in EDIT_KILLS])
@pytest.mark.usefixtures("restarted")
def test_a_kill_at_each_step_of_an_edit_runs_the_edited_call_at_most_once(
    where: str, process: str, method: str, match: str, rules: None, stack: Stack, script: Script,
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str,
) -> None:  # fmt: skip
    call = ("restart_service", {"name": "api", "environment": "staging"})
    # Killed in the card's update, the run is held in the model's request it makes meanwhile (not yet answered).
    thread, approval = asks(script, fake_slack, uid, call, "Restarted web.", held="card's update" in where)
    view = editor(fake_slack, approval, OPERATOR)
    fake_slack.slow(method, 60, match=match)
    submitting = threading.Thread(target=fake_slack.submit_view, args=(view["id"], OPERATOR, {"arg:name": "web"}),
                                  daemon=True)  # fmt: skip
    submitting.start()
    kill_when(stack, fake_slack, process, method, match)
    submitting.join(120)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=180)
    ran = [e["service"] for e in executions(thread.session_id)]
    assert ran == ([] if where == "inside the edited call" else ["web"])  # never twice; killed mid-call: not again
    decided = current(approval)
    assert (decided.status, decided.edited_by, decided.approved_by) == (ApprovalStatus.APPROVED, OPERATOR,
                                                                        [OPERATOR])  # fmt: skip
    [response] = function_responses(fake_gemini.requests()[-1])
    if where.startswith("inside"):
        assert "outcome unknown" in response["response"]["error"]  # the ledger says started, never done
    else:
        assert response["response"]["result"] == {"restarted": "web", "environment": "staging"}
        assert response["response"]["edited"]["arguments"] == {"environment": "staging", "name": "web"}
    answers = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["text"] == "Restarted web."]
    assert len(answers) == 1


@pytest.mark.usefixtures("restarted")
def test_a_submission_killed_before_its_decision_records_nothing_and_a_resubmission_runs_once(
    rules: None, group: None, stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = editor(fake_slack, approval, OPERATOR2)  # a member of the rule's group
    forget_groups(stack)  # the submission reads them
    fake_slack.slow("usergroups.users.list", 60)
    submitting = threading.Thread(target=fake_slack.submit_view, args=(view["id"], OPERATOR2, {"arg:replicas": "5"}),
                                  daemon=True)  # fmt: skip
    submitting.start()
    kill_when(stack, fake_slack, "slack_interactivity", "usergroups.users.list", "")
    submitting.join(120)
    assert (current(approval).edited_args, current(approval).approved_by) == (None, [])  # nothing recorded
    assert fake_slack.submit_view(view["id"], OPERATOR2, {"arg:replicas": "5"})["answer"] == {}  # the editor again
    edited = current(approval)
    assert (edited.status, edited.approved_by) == (ApprovalStatus.PENDING, [OPERATOR2])  # 1 of 2
    value = blocks.approval_value(approval.approval_id, edited.edited_digest or "")
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR, value=value)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=180)
    assert [e["replicas"] for e in executions(thread.session_id)] == [5]


def kill_when(stack: Stack, fake_slack: FakeSlack, process: str, method: str, match: str) -> None:
    """Wait until ``process`` is held in ``method`` (arguments holding ``match``), SIGKILL it, start it again."""
    wait_for(lambda: [c for c in fake_slack.calls(method) if match in json.dumps(c["args"])], timeout=120,
             what=f"{process} held in {method}")  # fmt: skip
    try:
        stack.kill_function(process)
    finally:
        stack.start_function(process)


def forget_groups(stack: Stack) -> None:
    """A new slack_interactivity instance: no user group's members cached (the next decision by a member reads
    them from Slack)."""
    stack.stop_process("slack_interactivity")
    stack.start_function("slack_interactivity")


def test_an_edit_submitted_twice_at_once_under_a_rule_of_two_approvers_counts_its_editor_once(
    rules: None, group: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Both submissions of one edit (a double click) are the editor's one approval (1 of 2) of the edited call: both
    close the modal, and neither is told of "another edit"."""
    _, approval = asks_to_scale(script, fake_slack, uid)
    view = editor(fake_slack, approval, OPERATOR)
    start = threading.Barrier(2)
    answers: list[dict[str, Any]] = []

    def submit() -> None:
        start.wait()
        answers.append(fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "4"}))

    submitting = [threading.Thread(target=submit, daemon=True) for _ in range(2)]
    for t in submitting:
        t.start()
    for t in submitting:
        t.join(120)
    assert [a["answer"] for a in answers if a["status"] == 200] in ([{}], [{}, {}])  # a closed view: Slack's 404
    edited = current(approval)
    assert (edited.status, edited.approved_by) == (ApprovalStatus.PENDING, [OPERATOR])
    assert edited.edited_digest == digest("scale_service", canonical({"name": "api", "replicas": 4}))


def test_an_edit_back_to_the_call_the_model_asked_for_can_still_be_approved_from_the_card(
    rules: None, group: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: under a rule of two approvers, one operator edited replicas 3 to 5 and another edited it back to 3.
    The call that runs was then the model's own, its digest the approval's first one, and every Approve press on the
    card as it now stood was taken for a press on the card before an edit: refused, and the call could only wait
    for its expiry. An approval of the call that runs counts, whatever edits led back to it."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = editor(fake_slack, approval, OPERATOR)
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "5"})["answer"] == {}  # 1 of 2, of 5
    edited = current(approval)
    value = blocks.approval_value(approval.approval_id, edited.edited_digest or "")
    assert press(fake_slack, approval, approval_card.EDIT_ACTION, user=OPERATOR2, value=value)["status"] == 200
    [back] = wait_for(lambda: fake_slack.views(OPERATOR2), timeout=30, what="the second Edit modal")
    assert fake_slack.submit_view(back["id"], OPERATOR2, {"arg:replicas": "3"})["answer"] == {}  # 1 of 2, of 3
    again = current(approval)
    assert (again.status, again.approved_by, again.edited_digest) == (ApprovalStatus.PENDING, [OPERATOR2],
                                                                      approval.digest)  # fmt: skip
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    [buttons] = [b for b in card["blocks"] if b["type"] == "actions"]
    assert buttons["elements"][0]["value"] == blocks.approval_value(approval.approval_id, approval.digest)
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)  # the card as it stands now
    assert not told(fake_slack, thread, OPERATOR, "edited this call after this card was shown")
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [e["replicas"] for e in executions(thread.session_id)] == [3]
    assert current(approval).approved_by == [OPERATOR2, OPERATOR]


def test_an_editor_opened_before_other_edits_is_refused_though_they_led_back_to_its_call(
    rules: None, group: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: an Edit modal was bound only to the digest of the call it was opened on. Opened on replicas 3, then
    another approver edited the call to 5 and back to 3: the old modal's submission matched again and counted as
    its editor's approval of a call changed under it (two of two: it ran). It is refused now (the call's revision
    moved), and the card as it stands can still be approved."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    stale = editor(fake_slack, approval, OPERATOR)
    for replicas, shown in (("5", approval.digest), ("3", None)):
        edited = current(approval)
        value = blocks.approval_value(approval.approval_id, shown or edited.edited_digest or "")
        assert press(fake_slack, approval, approval_card.EDIT_ACTION, user=OPERATOR2, value=value)["status"] == 200
        [view] = wait_for(lambda: fake_slack.views(OPERATOR2), timeout=30, what="OPERATOR2's Edit modal")
        assert fake_slack.submit_view(view["id"], OPERATOR2, {"arg:replicas": replicas})["answer"] == {}
    back = current(approval)
    assert (back.status, back.approved_by, back.edited_digest) == (ApprovalStatus.PENDING, [OPERATOR2],
                                                                   approval.digest)  # fmt: skip
    answer = fake_slack.submit_view(stale["id"], OPERATOR, {})  # unchanged: OPERATOR's approval of replicas 3
    assert answer["answer"]["response_action"] == "errors"
    assert "changed since this editor opened" in json.dumps(answer["answer"]["errors"])
    assert current(approval).approved_by == [OPERATOR2]
    assert executions(thread.session_id) == []
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR)  # the card as it stands: counted
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert [e["replicas"] for e in executions(thread.session_id)] == [3]


def test_only_the_editors_opener_may_submit_it_and_only_while_an_approver(
    rules: None, group: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """An editor opened by a member of the approver group, submitted by someone outside the rule's approvers:
    refused by the rule. An editor opened by OPERATOR submitted by OPERATOR2 (an approver through the group, but
    not its opener): refused too (defect: it counted as OPERATOR2's edit). Each answered in the modal; nothing
    changed."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    theirs = editor(fake_slack, approval, OPERATOR2)
    outsider = fake_slack.submit_view(theirs["id"], "U0OUTSIDER", {"arg:replicas": "6"})
    assert "Only this call's approvers" in json.dumps(outsider["answer"]["errors"])
    mine = editor(fake_slack, approval, OPERATOR)
    other = fake_slack.submit_view(mine["id"], OPERATOR2, {"arg:replicas": "6"})
    assert "opened by someone else" in json.dumps(other["answer"]["errors"])
    found = current(approval)
    assert (found.status, found.edited_args, found.approved_by) == (ApprovalStatus.PENDING, None, [])
    assert executions(thread.session_id) == []

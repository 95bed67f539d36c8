"""Edit before approve (issue 25.2), on the real stack: the Edit button opens a modal (views.open with the press's
trigger_id), a submission is checked against the tool's schema, and a valid one is the editor's approval of the
edited call, which runs exactly once (double submissions, an Edit racing an Approve, a kill inside the tool)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
import requests

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.signing import signed_headers
from infra.stack import Stack
from shared.asks.approvals import canonical, digest
from shared.slack import approval_card, blocks
from shared.state import approvals as stored
from shared.state.models import Approval, ApprovalStatus, SessionStatus, WaitKind
from tests.agent_helpers import HUMAN, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import (
    OPERATOR,
    OPERATOR2,
    asks_approval,
    asks_to_scale,
    executions,
    press,
    resumed,
    shown_call,
)

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def open_editor(fake_slack: FakeSlack, approval: Approval, user: str = OPERATOR) -> dict[str, Any]:
    pressed = press(fake_slack, approval, approval_card.EDIT_ACTION, user=user)
    assert pressed["status"] == 200
    [view] = wait_for(lambda: fake_slack.views(user), timeout=60, what="the Edit modal")
    assert view["callback_id"] == "approval_edit"
    return view


def test_a_valid_edit_runs_the_edited_call_once_and_the_model_is_told(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    fields = {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}
    assert fields["arg:name"]["initial_value"] == "api"
    assert (fields["arg:replicas"]["type"], fields["arg:replicas"]["initial_value"]) == ("number_input", "3")
    submitted = fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "5"})
    assert (submitted["status"], submitted["answer"], submitted["open"]) == (200, {}, False)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    [ran] = executions(thread.session_id)
    assert (ran["service"], ran["replicas"]) == ("api", 5)
    edited = stored.get_approval(approval.approval_id)
    assert edited is not None
    assert (edited.status, edited.edited_by, edited.approved_by) == (ApprovalStatus.APPROVED, OPERATOR, [OPERATOR])
    assert edited.edited_digest == digest("scale_service", canonical({"name": "api", "replicas": 5}))
    assert edited.digest == approval.digest  # the original's binding is kept
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"] == {"scaled": "api", "replicas": 5}
    assert response["response"]["edited"]["arguments"] == {"name": "api", "replicas": 5}
    assert response["response"]["edited"]["by"] == OPERATOR
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    both = shown_call(card)
    assert '"replicas": 3' in both  # the original, still shown
    assert '"replicas": 5' in both  # and the edited call, which ran
    assert f"Edited by <@{OPERATOR}>" in json.dumps(card["blocks"])


def test_a_bad_value_is_answered_in_the_modal_and_changes_nothing(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    for bad in ("many", "2.5"):
        answer = fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": bad})
        assert answer["answer"]["response_action"] == "errors"
        assert "arg:replicas" in answer["answer"]["errors"]
        assert answer["open"]
    blank = fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": ""})  # a required field left empty
    assert "arg:name" in blank["answer"]["errors"]
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert (pending.status, pending.edited_args) == (ApprovalStatus.PENDING, None)
    assert executions(thread.session_id) == []
    ok = fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": "api", "arg:replicas": "4"})
    assert ok["answer"] == {}
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(thread.session_id)] == [4]


def test_a_double_submission_decides_once(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    answers: list[dict[str, Any]] = []
    start = threading.Barrier(2)

    def submit() -> None:
        start.wait()
        answers.append(fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "6"}))

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [a["status"] for a in answers] == [200, 200]
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(thread.session_id)] == [6]


def test_an_edit_racing_an_approve_loses_and_the_editor_is_told(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval, user=OPERATOR)
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR2)  # another operator approves first
    answer = fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "9"})
    assert answer["answer"]["response_action"] == "errors"
    assert f"already approved by <@{OPERATOR2}>" in json.dumps(answer["answer"]["errors"])
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(thread.session_id)] == [3]  # the original, once


def test_an_approve_press_after_an_edit_won_is_told_and_runs_nothing_more(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval, user=OPERATOR)
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "2"})["answer"] == {}
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=OPERATOR2)  # on the card as it was first shown
    assert any("already approved" in e["text"] for e in fake_slack.ephemerals(thread.channel, OPERATOR2))
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(thread.session_id)] == [2]


def test_a_kill_inside_the_edited_call_never_runs_it_twice(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    fake_slack.slow("chat.postMessage", 60, match="Scaling `api` to 8")  # inside the tool when it dies
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "8"})["answer"] == {}
    wait_for(lambda: [c for c in fake_slack.calls("chat.postMessage") if "Scaling `api` to 8" in repr(c["args"])],
             timeout=30, what="the edited call to start")  # fmt: skip
    stack.kill_function("agent_session")
    stack.start_function("agent_session")
    wait_status(resumed(approval), SessionStatus.DONE, timeout=120)
    assert executions(thread.session_id) == []  # it died before recording: not run again
    [response] = function_responses(fake_gemini.requests()[-1])
    assert "outcome unknown" in response["response"]["error"]


def test_a_whole_number_runs_as_typed_and_a_number_json_cannot_hold_is_refused(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a typed integer went through a float, so 9007199254740993 was approved and recorded as
    9007199254740992, a call the editor never typed."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    for bad in ("1e400", "NaN", "-Infinity"):
        answer = fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": bad})
        assert list(answer["answer"]["errors"]) == ["arg:replicas"], bad
    assert executions(thread.session_id) == []
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "9007199254740993"})["answer"] == {}
    edited = stored.get_approval(approval.approval_id)
    assert edited is not None
    assert edited.edited_args == canonical({"name": "api", "replicas": 9007199254740993})
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert executions(thread.session_id) == []  # the tool refuses more than 50 replicas: it never got a rounded one


def test_an_edit_submitted_unchanged_is_a_plain_approval_and_the_model_is_not_told_of_an_edit(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    assert fake_slack.submit_view(view["id"], OPERATOR, {})["answer"] == {}  # every field as it was
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(thread.session_id)] == [3]
    [response] = function_responses(fake_gemini.requests()[-1])
    assert "edited" not in response["response"]
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert "Edited by" not in json.dumps(card["blocks"])
    assert f"approved by <@{OPERATOR}>; it ran" in card["text"]


def test_a_refusal_in_the_modal_of_a_call_of_undeclared_arguments_is_shown_under_a_field_it_has(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a refusal in the modal (here: a person who may not decide) went under the field of the call's first
    argument; for a call whose arguments the schema does not name, that was no field of the modal (they share one
    JSON field), and Slack refuses errors for a block the view does not have."""
    thread, approval = asks_approval(script, fake_slack, f"C{uid}", "scale it", G.call("scale_service", size=3),
                                     "Not scaled.")  # fmt: skip
    view = open_editor(fake_slack, approval)
    fields = [b["block_id"] for b in view["blocks"] if b["type"] == "input"]
    assert fields == ["arg:name", "arg:replicas", "arg:*others"]
    refused = fake_slack.submit_view(view["id"], HUMAN, {})
    assert refused["answer"]["response_action"] == "errors"
    assert set(refused["answer"]["errors"]) <= set(fields), refused["answer"]["errors"]
    assert "Only the operators" in json.dumps(refused["answer"]["errors"])
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert (pending.status, pending.edited_args) == (ApprovalStatus.PENDING, None)
    assert executions(thread.session_id) == []


def test_a_submission_whose_metadata_names_no_approval_or_another_call_changes_nothing(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """A view submission signed as Slack signs it, its ``private_metadata`` tampered with: naming no approval, or
    this approval with the digest of another call. Each is answered in the modal, under a field the modal has."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    fields = {b["block_id"] for b in view["blocks"] if b["type"] == "input"}
    values = {"arg:name": {"value": {"type": "plain_text_input", "value": "api"}},
              "arg:replicas": {"value": {"type": "number_input", "value": "9"}}}  # fmt: skip
    for metadata in (f"a-none-{uid}|{approval.digest}", f"{approval.approval_id}|0000000000000000"):
        tampered = {**view, "private_metadata": metadata, "state": {"values": values}}
        body = urlencode({"payload": json.dumps({"type": "view_submission", "user": {"id": OPERATOR},
                                                 "trigger_id": "1.2", "view": tampered})}).encode()  # fmt: skip
        headers = signed_headers(local.SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
        answer = requests.post(stack.function_url("slack_interactivity"), data=body, headers=headers, timeout=30)
        assert answer.status_code == 200
        assert answer.json()["response_action"] == "errors"
        assert set(answer.json()["errors"]) <= fields, (metadata, answer.json())
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert (pending.status, pending.edited_args, pending.approved_by) == (ApprovalStatus.PENDING, None, [])
    assert executions(thread.session_id) == []


def _submitted(stack: Stack, view: dict[str, Any], user: str, metadata: str) -> dict[str, Any]:
    """``view`` submitted by ``user`` as Slack signs it, its ``private_metadata`` replaced by ``metadata``."""
    values = {"arg:name": {"value": {"type": "plain_text_input", "value": "api"}},
              "arg:replicas": {"value": {"type": "number_input", "value": "7"}}}  # fmt: skip
    tampered = {**view, "private_metadata": metadata, "state": {"values": values}}
    body = urlencode({"payload": json.dumps({"type": "view_submission", "user": {"id": user}, "trigger_id": "1.3",
                                             "view": tampered})}).encode()  # fmt: skip
    headers = signed_headers(local.SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
    answer = requests.post(stack.function_url("slack_interactivity"), data=body, headers=headers, timeout=30)
    assert answer.status_code == 200
    return dict(answer.json())


def _untouched(approval: Approval) -> None:
    found = stored.get_approval(approval.approval_id)
    assert found is not None
    assert (found.status, found.edited_args, found.approved_by) == (ApprovalStatus.PENDING, None, [])


def test_a_submission_whose_metadata_names_another_approval_changes_neither(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the modal's ``private_metadata`` was ``approval|digest``, bound to nothing: a submission of one
    approval's editor naming another pending approval (and its digest) edited and approved that other call, which
    its submitter never had an editor for. Refused now, as is another person's editor of the other approval."""
    script(G.call("scale_service", name="api", replicas=3), G.call("scale_service", name="api", replicas=3),
           G.text("Scaled."), G.text("Scaled."))  # fmt: skip
    threads = [mention(fake_slack, f"C{uid}{n}", "scale the api") for n in ("a", "b")]
    first, second = (stored.get_approvals(wait_status(t.session_id, SessionStatus.PAUSED, timeout=60).awaited(
        WaitKind.APPROVAL))[0] for t in threads)  # fmt: skip
    assert first.card_ts is not None
    assert second.card_ts is not None
    view = open_editor(fake_slack, first)
    fields = {b["block_id"] for b in view["blocks"] if b["type"] == "input"}
    others = open_editor(fake_slack, second, user=OPERATOR2)["private_metadata"]  # the other's, opened by OPERATOR2
    for metadata in (f"{second.approval_id}|{second.digest}", others, view["private_metadata"] + "0"):
        answer = _submitted(stack, view, OPERATOR, metadata)
        assert answer["response_action"] == "errors", (metadata, answer)
        assert set(answer["errors"]) <= fields, (metadata, answer)
    _untouched(first)
    _untouched(second)
    assert executions(threads[0].session_id) == executions(threads[1].session_id) == []


def test_an_editor_submitted_by_another_approver_than_its_opener_is_refused(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: an Edit modal counted for whoever submitted it; it is its opener's alone (Slack sends a modal's
    submission as the person it was opened for), so another person's submission, an operator's too, is refused."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval, user=OPERATOR)
    answer = fake_slack.submit_view(view["id"], OPERATOR2, {"arg:replicas": "8"})
    assert answer["answer"]["response_action"] == "errors"
    assert "opened by someone else" in json.dumps(answer["answer"]["errors"])
    _untouched(approval)
    ok = fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "4"})  # its opener's own still counts
    assert ok["answer"] == {}
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["replicas"] for e in executions(thread.session_id)] == [4]


def test_an_editor_opened_before_its_session_was_stopped_changes_nothing(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """The session that asked ended (its requester typed stop) while an operator's editor was open: the
    submission is answered in the modal, and nothing runs."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    view = open_editor(fake_slack, approval)
    fake_slack.user_message(HUMAN, thread.channel, "stop", thread_ts=thread.ts)
    wait_for(lambda: (a := stored.get_approval(approval.approval_id)) is not None
             and a.status != ApprovalStatus.PENDING, timeout=60, what="the stop to close the approval")  # fmt: skip
    answer = fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "8"})
    assert answer["answer"]["response_action"] == "errors"
    assert "nothing changed" in json.dumps(answer["answer"]["errors"])
    found = stored.get_approval(approval.approval_id)
    assert found is not None
    assert (found.edited_args, found.approved_by) == (None, [])
    assert executions(thread.session_id) == []


def test_an_edit_keeping_an_argument_the_tool_does_not_declare_is_refused_in_the_modal(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the modal checked an edit against the tool's JSON Schema only, which lets keys it does not name pass:
    an operator who filled in the declared fields of a call made with a wrong argument (``size``) and left it in the
    modal's field for the others approved a call the tool then refused to run ("bad arguments"). The modal says so
    now, under that field; cleared, the edit runs."""
    thread, approval = asks_approval(script, fake_slack, f"C{uid}", "scale it", G.call("scale_service", size=3),
                                     "Scaled.")  # fmt: skip
    view = open_editor(fake_slack, approval)
    kept = fake_slack.submit_view(view["id"], OPERATOR, {"arg:name": "api", "arg:replicas": "4"})
    assert kept["answer"]["response_action"] == "errors"
    assert "'size'" in kept["answer"]["errors"]["arg:*others"]
    pending = stored.get_approval(approval.approval_id)
    assert pending is not None
    assert (pending.status, pending.edited_args) == (ApprovalStatus.PENDING, None)
    cleared = fake_slack.submit_view(
        view["id"], OPERATOR, {"arg:name": "api", "arg:replicas": "4", "arg:*others": "{}"}
    )
    assert cleared["answer"] == {}
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [(e["service"], e["replicas"]) for e in executions(thread.session_id)] == [("api", 4)]

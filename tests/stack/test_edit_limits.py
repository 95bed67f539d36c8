"""The Edit button and Slack's limit on a text input's initial value (3,000 characters), on the real stack: a call
with a longer argument is offered Approve and Deny but no Edit (Slack would refuse its modal at ``views.open``), an
Edit press on a card shown before says so and changes nothing, and a call whose arguments all fit keeps its Edit."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack import approval_card, blocks, call_view, edit_modal
from shared.state import approvals as stored
from shared.state import firestore
from shared.state.models import Approval, ApprovalStatus, SessionStatus
from tests.agent_helpers import Thread, wait_status
from tests.poll import wait_for
from tests.stack.test_approvals import OPERATOR, asks_approval, executions, press, resumed, shown_call

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
LONG = 3_500  # over the Edit modal's field (3,000) and well within what a card shows (12,000)


def asks_with_name(script: Script, fake_slack: FakeSlack, uid: str, name: str) -> tuple[Thread, Approval]:
    thread, approval = asks_approval(script, fake_slack, f"C{uid}", "scale it", G.call("scale_service", name=name,
                                     replicas=3), "Scaled.")  # fmt: skip
    assert approval.card_ts is not None
    return thread, approval


def card(fake_slack: FakeSlack, thread: Thread, approval: Approval) -> dict[str, Any]:
    return next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)


def buttons(message: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in message.get("blocks") or [] if b["type"] == "actions" for e in b["elements"]]


def stored_doc(approval: Approval) -> dict[str, Any]:
    return firestore.db().collection("approvals").document(approval.approval_id).get().to_dict() or {}


def test_a_call_with_an_argument_over_the_editors_limit_has_no_edit_and_approving_runs_it_once(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    assert edit_modal.TEXT_MAX < LONG < call_view.MAX_SHOWN_CHARS
    name = "n" * LONG
    thread, approval = asks_with_name(script, fake_slack, uid, name)
    shown = card(fake_slack, thread, approval)
    assert buttons(shown) == [blocks.APPROVE_ACTION, blocks.DENY_ACTION]  # no Edit
    assert json.loads(shown_call(shown).split("\n", 1)[1]) == {"name": name, "replicas": 3}  # shown whole
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [(e["service"], e["replicas"]) for e in executions(thread.session_id)] == [(name, 3)]
    assert fake_slack.calls("views.open") == []


def test_an_edit_press_on_a_card_shown_before_is_told_opens_nothing_and_changes_nothing(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the card offered Edit for any call with a schema; Slack refused the modal of a 3,001-character value
    (invalid_arguments) and the editor was told to press Edit again, which failed the same way."""
    name = "n" * LONG
    thread, approval = asks_with_name(script, fake_slack, uid, name)
    before, shown = stored_doc(approval), card(fake_slack, thread, approval)
    value = blocks.approval_value(approval.approval_id, approval.digest)  # the Edit button an older card carried
    pressed = fake_slack.click(OPERATOR, approval.channel, approval.card_ts or "", approval_card.EDIT_ACTION,
                               value=value, block_id=f"approval:{approval.approval_id}")  # fmt: skip
    assert pressed["status"] == 200
    [note] = wait_for(lambda: fake_slack.ephemerals(thread.channel, OPERATOR), timeout=30, what="the private note")
    assert "cannot be edited from Slack" in note["text"]
    assert "press Edit again" not in note["text"]
    assert fake_slack.calls("views.open") == []  # not attempted
    assert fake_slack.views(OPERATOR) == []
    assert stored_doc(approval) == before  # nothing stored changed
    assert card(fake_slack, thread, approval) == shown
    assert executions(thread.session_id) == []
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200  # and it can still be approved
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [e["service"] for e in executions(thread.session_id)] == [name]
    decided = stored.get_approval(approval.approval_id)
    assert decided is not None
    assert (decided.status, decided.edited_args, decided.approved_by) == (ApprovalStatus.APPROVED, None, [OPERATOR])


def test_a_call_whose_longest_argument_is_exactly_the_limit_keeps_its_edit_and_the_modal_opens(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """The other side of the limit (tests/stack/test_edits.py presses Edit on a short call; this is the boundary)."""
    name = "n" * edit_modal.TEXT_MAX
    thread, approval = asks_with_name(script, fake_slack, uid, name)
    assert buttons(card(fake_slack, thread, approval)) == [blocks.APPROVE_ACTION, blocks.DENY_ACTION,
                                                           approval_card.EDIT_ACTION]  # fmt: skip
    assert press(fake_slack, approval, approval_card.EDIT_ACTION)["status"] == 200
    [view] = wait_for(lambda: fake_slack.views(OPERATOR), timeout=60, what="the Edit modal")
    fields = {b["block_id"]: b["element"] for b in view["blocks"] if b["type"] == "input"}
    assert fields["arg:name"]["initial_value"] == name
    assert fake_slack.submit_view(view["id"], OPERATOR, {"arg:replicas": "4"})["answer"] == {}
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    assert [(e["service"], e["replicas"]) for e in executions(thread.session_id)] == [(name, 4)]

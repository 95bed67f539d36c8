"""A ledger call's done record survives every end of its run (issue 28.1's deferred records): a run that ends after
an outward call ran and before the step that carries its result is stored still writes the call's ``done`` record.

The record rides in the run's next commit (``RunState.unrecorded``). The ends that store no step of the run were
found to drop it: an exception that leaves the run (a crash the task's retry takes over, a Slack storm that fails
the session) and a delegated child stopped between its call and that step (its end is the child's own commit). A
takeover then read ``started``: a non-idempotent call's outcome was "unknown", an idempotent one ran again.

Each test holds or breaks the run right after the call, on the real stack: a Slack method that fails or answers
late (the card's "it ran" update, the status of the turn's next call), and reads the ledger, the executions
(``demo_actions``, written by the tools) and what the model was told.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.asks import stopping
from shared.slack import blocks
from shared.state import approvals, firestore, ids, ledger, sessions
from shared.state.models import Approval, SessionStatus, WaitKind
from tests.agent_helpers import Thread, conversation_done, function_responses, mention, texts, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID
IT_RAN = f"approved by <@{OPERATOR}>; it ran"  # the card's update once the approved call ran (before its step)

# The approved call, what it returns, and how its executions are counted (``demo_actions``).
CALLS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "scale_service": ({"name": "api", "replicas": 4}, {"scaled": "api", "replicas": 4}),  # not idempotent
    "pin_version": ({"name": "api", "version": "1.4.2"}, {"pinned": "api", "version": "1.4.2"}),  # idempotent
}


def executions(session_id: str) -> int:
    """How often the tools really ran for ``session_id``: a pin counts its runs under its one key."""
    query = firestore.db().collection("demo_actions").where(filter=FieldFilter("session_id", "==", session_id))
    return sum(int((doc.to_dict() or {}).get("runs", 1)) for doc in query.stream())


def entry(session_id: str, seq: int, index: int) -> ledger.Entry:
    """The ledger entry of call ``index`` of step ``seq`` in ``session_id``'s transcript."""
    found = sessions.get_session(session_id)
    assert found is not None
    [recorded] = ledger.entries(found, seq, [index]).values()
    return recorded


def paused_on_approval(session_id: str) -> Approval:
    """The one approval ``session_id`` pauses on (its card posted)."""
    paused = wait_status(session_id, SessionStatus.PAUSED, timeout=60)
    [approval] = approvals.get_approvals(paused.awaited(WaitKind.APPROVAL))
    assert approval.card_ts is not None
    return approval


def approve(fake_slack: FakeSlack, approval: Approval) -> None:
    value = blocks.approval_value(approval.approval_id, approval.digest)
    clicked = fake_slack.click(OPERATOR, approval.channel, approval.card_ts or "", blocks.APPROVE_ACTION, value=value)
    assert clicked["status"] == 200


def told_unknown(fake_slack: FakeSlack, thread: Thread) -> bool:
    return any("cannot tell whether" in m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts))


@pytest.mark.parametrize("tool", list(CALLS))
def test_an_approved_call_whose_run_then_crashes_is_not_run_again_nor_unknown_to_the_retry(
    tool: str, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The approved call ran; the card's "it ran" update then failed (a Slack error: the attempt crashed before the
    step with the result). Defect: the done record was lost with the attempt, so the task's retry found the call
    started: scale_service's outcome was reported unknown, pin_version ran a second time."""
    args, result = CALLS[tool]
    script(G.call(tool, **args), G.text("Done."))
    fake_slack.fail("chat.update", error="fatal_error", match=IT_RAN)  # once: the retry's update goes through
    thread = mention(fake_slack, f"C{uid}", f"run {tool} on the api")
    approval = paused_on_approval(thread.session_id)
    approve(fake_slack, approval)
    resumed = wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.DONE, timeout=90)

    assert executions(thread.session_id) == 1  # it ran once, the retry reused its recorded result
    recorded = entry(resumed.session_id, approval.seq, approval.call_index)
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": result})
    [response] = function_responses(fake_gemini.requests()[-1])
    assert "error" not in response["response"], response  # not "outcome unknown"
    assert response["response"]["result"] == result
    assert not told_unknown(fake_slack, thread)
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert IT_RAN in card["text"]
    assert "failed" not in card["text"]


def test_a_slack_storm_after_an_approved_call_fails_the_session_with_the_calls_result_recorded(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The approved call ran; Slack then refused the card's "it ran" update past the session's budget (a storm: the
    session fails, storing no step of its run). Defect: the call's done record was dropped with the run, leaving a
    call that ran to its end "started" in the ledger."""
    script(G.call("scale_service", name="api", replicas=4), G.text("never asked"))
    fake_slack.fail("chat.update", status=429, retry_after=3600, match=IT_RAN)
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    approval = paused_on_approval(thread.session_id)
    before = len(fake_gemini.requests())
    approve(fake_slack, approval)
    failed = wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.FAILED, timeout=60)

    assert "wait 3600 s" in (failed.error or ""), failed.error  # the storm ended it, not a crash
    assert executions(thread.session_id) == 1
    recorded = entry(failed.session_id, approval.seq, approval.call_index)
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": {"scaled": "api",
                                                                                         "replicas": 4}})  # fmt: skip
    assert len(fake_gemini.requests()) == before  # nothing ran after the storm
    assert "could not finish" in fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"]


def test_an_approved_call_whose_session_then_crashes_on_every_attempt_fails_with_its_result_recorded(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The card's "it ran" update fails on every attempt: the third crash gives up and fails the session. The
    call ran once, on the first attempt, and its result is in the ledger (the later attempts reused it). Defect: the
    first attempt's done record was lost, and every later attempt found the call's outcome unknown."""
    script(G.call("scale_service", name="api", replicas=4), G.text("never asked"))
    fake_slack.fail("chat.update", times=3, error="fatal_error", match=IT_RAN)
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    approval = paused_on_approval(thread.session_id)
    approve(fake_slack, approval)
    failed = wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.FAILED, timeout=120)

    assert "fatal_error" in (failed.error or ""), failed.error
    assert executions(thread.session_id) == 1
    recorded = entry(failed.session_id, approval.seq, approval.call_index)
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": {"scaled": "api",
                                                                                         "replicas": 4}})  # fmt: skip
    assert not told_unknown(fake_slack, thread)
    assert len([c for c in fake_slack.calls("chat.update") if IT_RAN in repr(c["args"])]) == 3  # each attempt's


@pytest.mark.parametrize("who", ["a conversation", "a delegated child"])
def test_a_session_stopped_while_its_approved_call_runs_records_the_calls_result(
    who: str, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The stop lands after the approved call ran and before the step with its result: the step commit refuses,
    and the session ends stopped there. A conversation's end is a step of its run (the record rides in it); a
    child's end is its own commit. Defect: a stopped child dropped the done record."""
    task = f"scale the api for the launch {uid}"
    child = who == "a delegated child"
    scale = G.call("scale_service", name="api", replicas=4)
    # Held right after the call, before its step: the client gives up on an answer after 10 s and sends the update
    # again (slack-sdk's retry handler), so every send is held, about 30 s in all for the stop to land.
    fake_slack.slow("chat.update", 20, times=3, match=IT_RAN)
    if child:  # each session's replies match its own requests (the child's opening holds its task as this JSON)
        fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task)))
        fake_gemini.script(FakeGemini.matching(json.dumps({"task": task}), scale))
        fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The helper was stopped.")))
    else:
        script(scale, G.text("never asked"))
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    asker = ids.child_id(thread.session_id, 1, 0) if child else thread.session_id
    approval = paused_on_approval(asker)
    approve(fake_slack, approval)
    wait_for(lambda: [c for c in fake_slack.calls("chat.update") if IT_RAN in repr(c["args"])], timeout=60,
             what="the approved call to have run")  # fmt: skip
    running = asker if child else ids.resume_id(approval.session_id, approval.seq)
    assert running in stopping.stop(running, by=f"<@{OPERATOR}>")
    wait_status(running, SessionStatus.STOPPED, timeout=60)

    assert executions(asker) == 1
    recorded = entry(running, approval.seq, approval.call_index)
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": {"scaled": "api",
                                                                                         "replicas": 4}})  # fmt: skip
    # No model turn followed the call: the stop ended the session at that step (the first request made the call).
    mark = json.dumps({"task": task}) if child else f"[C{uid}]"
    assert len([r for r in fake_gemini.requests() if mark in texts(r)]) == 1
    if child:  # the parent heard of the stop and answered
        conversation_done(thread.session_id, timeout=60)
        assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "The helper was stopped."

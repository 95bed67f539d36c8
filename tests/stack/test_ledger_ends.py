"""A ledger call's done record survives every end of its run (issue 28.1's deferred records): a run that ends after
an outward call ran and before the step that carries its result is stored still writes the call's ``done`` record.

The record rides in the run's next commit (``RunState.unrecorded``). The ends that store no step of the run were
found to drop it: an exception that leaves the run (a crash the task's retry takes over, a Slack storm that fails
the session) and a delegated child stopped between its call and that step (its end is the child's own commit). A
takeover then read ``started``: a non-idempotent call's outcome was "unknown", an idempotent one ran again.

An approved call's card is display only: "running" is made beside its started record and its run, and "it ran"
beside what follows the step that carries its result, their failures logged; neither can end the run between the
call and that step any more (the first tests). A stop still can: the last test holds the call's own post and
stops the session there. Each reads the ledger, the executions (``demo_actions``, written by the tools) and what the
model was told, on the real stack.
"""

from __future__ import annotations

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
from tests.agent_helpers import Thread, function_responses, mention, texts, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID
IT_RAN = f"approved by <@{OPERATOR}>; it ran"  # the card's update once the approved call ran (after its step)


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


# The card's "it ran" update failing: once, in a storm (a Retry-After past the session's budget), on every attempt.
IT_RAN_FAILS: dict[str, dict[str, Any]] = {
    "an error once": {"error": "fatal_error"},
    "a storm": {"status": 429, "retry_after": 3600},
    "an error every time": {"times": 3, "error": "fatal_error"},
}


@pytest.mark.parametrize("failure", list(IT_RAN_FAILS))
def test_a_failed_it_ran_update_neither_loses_the_step_nor_runs_the_call_again(
    failure: str, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The card's "it ran" update is display only: it is made once the step that carries the call's result is
    stored, beside the model's request, and its failure is logged. The session goes on to its answer; the call ran
    once, its done record is stored, the model got its result. Defect (before: the update came before that step, and
    its failure left the run): a storm failed the session, and an error on every attempt crashed each until the
    third gave up, the model never told what the approved call did."""
    script(G.call("scale_service", name="api", replicas=4), G.text("Done."))
    fake_slack.fail("chat.update", match=IT_RAN, **IT_RAN_FAILS[failure])
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    approval = paused_on_approval(thread.session_id)
    approve(fake_slack, approval)
    ended = wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.DONE, SessionStatus.FAILED,
                        timeout=120)  # fmt: skip

    assert ended.status == SessionStatus.DONE, ended.error
    assert executions(thread.session_id) == 1
    recorded = entry(ended.session_id, approval.seq, approval.call_index)
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": {"scaled": "api",
                                                                                         "replicas": 4}})  # fmt: skip
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"] == {"scaled": "api", "replicas": 4}  # not "outcome unknown"
    assert not told_unknown(fake_slack, thread)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "Done."
    assert len([c for c in fake_slack.calls("chat.update") if IT_RAN in repr(c["args"])]) == 1  # one run, no retry


def test_a_failed_running_update_does_not_keep_the_approved_call_from_running(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Every "running it now" update of the card fails (the click's handler's and the run's): it is display only,
    made beside the call's started record, and the operator approved the call, so it runs, once, and the card then
    shows its result. Defect: the run's update came first and its failure left the run before the call, on every
    attempt, until the third crash failed the session with the approved call never run."""
    script(G.call("scale_service", name="api", replicas=4), G.text("Done."))
    fake_slack.fail("chat.update", times=4, error="fatal_error", match="running it now")
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    approval = paused_on_approval(thread.session_id)
    approve(fake_slack, approval)
    ended = wait_status(ids.resume_id(approval.session_id, approval.seq), SessionStatus.DONE, SessionStatus.FAILED,
                        timeout=120)  # fmt: skip

    assert ended.status == SessionStatus.DONE, ended.error
    assert executions(thread.session_id) == 1
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"] == {"scaled": "api", "replicas": 4}
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert IT_RAN in card["text"]
    assert "failed" not in card["text"]


def test_a_conversation_stopped_while_its_approved_call_runs_records_the_calls_result(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The stop lands while the approved call runs (its own post held, under the client's 10 s timeout so that it is
    sent once), after its started record: the step commit that would carry its result refuses, and the session ends
    stopped there, its end a step of its run that carries the call's done record. (A delegated child's call posts
    nothing: nothing holds its run between the call and that step any more, and no test stops it there.)"""
    script(G.call("scale_service", name="api", replicas=4), G.text("never asked"))
    saying = "Scaling `api` to 4 replicas"
    fake_slack.slow("chat.postMessage", 8, match=saying)
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    approval = paused_on_approval(thread.session_id)
    approve(fake_slack, approval)
    wait_for(lambda: [c for c in fake_slack.calls("chat.postMessage") if saying in repr(c["args"])], timeout=60,
             what="the approved call to be running")  # fmt: skip
    running = ids.resume_id(approval.session_id, approval.seq)
    assert running in stopping.stop(running, by=f"<@{OPERATOR}>")
    wait_status(running, SessionStatus.STOPPED, timeout=60)

    assert executions(thread.session_id) == 1
    recorded = entry(running, approval.seq, approval.call_index)
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": {"scaled": "api",
                                                                                         "replicas": 4}})  # fmt: skip
    # No model turn followed the call: the stop ended the session at that step (the first request made the call).
    assert len([r for r in fake_gemini.requests() if f"[C{uid}]" in texts(r)]) == 1

"""Approvals (issue 13): a risky tool runs only after an operator approves that exact call, and then exactly once.

On the real stack: the fake Slack presses the card's buttons as people would, executions are counted in Firestore
(``demo_actions``, written by the tool, outside the worker), and races run concurrently for real.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.signing import signed_headers
from infra.stack import Stack
from shared.slack import blocks
from shared.slack.events import Message
from shared.state import approvals as stored
from shared.state import firestore, ids, steps
from shared.state import questions as stored_questions
from shared.state.models import Approval, ApprovalStatus, AuditType, SessionStatus, WaitKind
from shared.usecases import intake
from tests import delivery
from tests.agent_helpers import HUMAN, Thread, function_responses, mention, session, texts, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR, OPERATOR2 = local.OPERATOR_ID, "U0OPERATOR2"


def asks_approval(script: Script, fake_slack: FakeSlack, channel: str, request: str, call: dict[str, Any], then: str,
                  *, timeout: float = 60) -> tuple[Thread, Approval]:  # fmt: skip
    """A mention of ``request`` in ``channel`` whose model turn is ``call`` (an approve-tier tool), then ``then``:
    the thread, and the approval its session pauses on."""
    script(call, G.text(then))
    thread = mention(fake_slack, channel, request)
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=timeout)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    return thread, approval


def asks_to_scale(script: Script, fake_slack: FakeSlack, uid: str, *, replicas: int = 3) -> tuple[Thread, Approval]:
    thread, approval = asks_approval(script, fake_slack, f"C{uid}", "scale the api",
                                     G.call("scale_service", name="api", replicas=replicas),
                                     f"Scaled api to {replicas}.", timeout=30)  # fmt: skip
    assert approval.card_ts is not None
    return thread, approval


def executions(session_id: str) -> list[dict[str, Any]]:
    query = firestore.db().collection("demo_actions").where(filter=FieldFilter("session_id", "==", session_id))
    return [doc.to_dict() or {} for doc in query.stream()]


def press(fake_slack: FakeSlack, approval: Approval, action: str, *, user: str = OPERATOR,
          value: str | None = None, message_ts: str | None = None) -> dict[str, Any]:  # fmt: skip
    value = value if value is not None else blocks.approval_value(approval.approval_id, approval.digest)
    return fake_slack.click(user, approval.channel, message_ts or approval.card_ts or "", action, value=value)


def shown_call(card: dict[str, Any]) -> str:
    """The exact call as a card shows it: its plain-text sections, joined (Slack forms no markup in plain text)."""
    sections = [b["text"] for b in card.get("blocks") or [] if b["type"] == "section"]
    sections = [s for s in sections if s["type"] == "plain_text"]
    calls = [s["text"] for s in sections if not s["text"].startswith(("Result: ", "Error: "))]
    assert all(s.get("emoji") is False for s in sections)
    return "".join(calls)


def resumed(approval: Approval) -> str:
    return ids.resume_id(approval.session_id, approval.seq)


def test_approve_runs_the_shown_call_once(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """adk-python PR 7151 (a declined tool still executes) and PR 5545 (an approval applied to another call)."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    assert executions(thread.session_id) == []  # nothing ran before the decision
    card = next(m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert shown_call(card) == 'scale_service\n{\n  "name": "api",\n  "replicas": 3\n}'  # required, in schema order
    assert card["text"].startswith(f":lock: <@{OPERATOR}>")  # the operators are notified
    assert "Scale `api` to `3` replicas" in card["text"]  # what will happen, in the tool's words
    assert approval.digest in json.dumps(card["blocks"])
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    [ran] = executions(thread.session_id)
    assert (ran["service"], ran["replicas"]) == ("api", 3)
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"] == {"scaled": "api", "replicas": 3}
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert f"approved by <@{OPERATOR}>; it ran" in card["text"]
    assert not [b for b in card["blocks"] if b["type"] == "actions"]  # the buttons are gone, the call stays
    assert shown_call(card).startswith("scale_service\n")
    results = [b["text"]["text"] for b in card["blocks"] if b["type"] == "section"]
    assert 'Result: {"scaled": "api", "replicas": 3}' in results
    audit = [e for s in steps.load_steps(thread.session_id) for e in s.audit if e.type == AuditType.APPROVAL]
    assert [(e.name, e.args, e.result, e.text) for e in audit] == [("scale_service", approval.digest, "approved",
                                                                     OPERATOR)]  # fmt: skip


def test_a_card_update_slowed_by_slacks_rate_limit_never_hides_the_calls_result(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect (a review of session 8's approve path): the click's handler queued the run, then showed the card as
    "running"; that update, held by Slack's rate limit (429, then the client's retry after Retry-After), landed after
    the run had shown the call's result, and the card said "running it now" for good. The handler's update is made
    at once or not at all (the run shows "running" itself); the run is still queued first, so that a crash of the
    handler never leaves it unqueued (tests/stack/test_edit_races.py kills it there)."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    fake_slack.fail("chat.update", status=429, retry_after=1, match="running it now")  # the first "running" update
    assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
    wait_status(resumed(approval), SessionStatus.DONE, timeout=60)
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert f"approved by <@{OPERATOR}>; it ran" in card["text"]
    results = [b["text"]["text"] for b in card["blocks"] if b["type"] == "section"]
    assert 'Result: {"scaled": "api", "replicas": 3}' in results


def test_two_alike_calls_without_ids_each_run_with_their_own_arguments(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: decided calls were matched to the transcript by call id; calls without one (older models send none)
    all matched the last, so the first approval ran nothing ("not the call that was approved")."""
    idless = [{"name": "scale_service", "args": {"name": "api", "replicas": n}, "id": None} for n in (2, 5)]
    script({"function_calls": idless}, G.text("Scaled twice."))
    thread = mention(fake_slack, f"C{uid}", "scale the api twice")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    first, second = sorted(stored.get_approvals(paused.awaited(WaitKind.APPROVAL)), key=lambda a: a.call_index)
    press(fake_slack, first, blocks.APPROVE_ACTION)
    press(fake_slack, second, blocks.APPROVE_ACTION)
    wait_status(resumed(first), SessionStatus.DONE, timeout=30)
    assert sorted(e["replicas"] for e in executions(thread.session_id)) == [2, 5]
    responses = function_responses(fake_gemini.requests()[-1])
    assert [r["response"].get("result") for r in responses] == [
        {"scaled": "api", "replicas": 2}, {"scaled": "api", "replicas": 5},
    ]  # fmt: skip


def test_deny_never_runs_it_and_the_model_hears_why(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    assert press(fake_slack, approval, blocks.DENY_ACTION)["status"] == 200
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert executions(thread.session_id) == []
    [response] = function_responses(fake_gemini.requests()[-1])
    assert "denied by" in response["response"]["error"]
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert f"denied by <@{OPERATOR}>" in card["text"]


def test_an_operator_reply_denies_with_its_text_as_the_reason(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    fake_slack.user_message(OPERATOR, thread.channel, "not prod — use staging", thread_ts=thread.ts)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert executions(thread.session_id) == []
    [response] = function_responses(fake_gemini.requests()[-1])
    assert "not prod — use staging" in response["response"]["error"]


def test_a_denying_reply_whose_approval_is_approved_between_its_two_reads_is_told_it_lost(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (the replies' race of tests/stack/test_answers.py, for approvals): an operator's reply reads its
    thread's list of pending approvals, then the approvals; an operator (here the same one, on another device)
    approved in between, so the list still named the approval but its read found it decided. The reply was taken
    for a message about nothing: told nothing, or queued as a note to the run the approval started. Here the press
    lands exactly in between."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    read_approvals = stored.get_approvals

    def pressed_first(approval_ids: list[str]) -> list[Approval]:
        monkeypatch.setattr(stored, "get_approvals", read_approvals)
        assert press(fake_slack, approval, blocks.APPROVE_ACTION)["status"] == 200
        return read_approvals(approval_ids)

    monkeypatch.setattr(stored, "get_approvals", pressed_first)
    reply = Message(event_id=f"Ev{uid}", event_type="message", channel=thread.channel, thread_ts=thread.ts,
                    ts=f"{approval.card_ts}1", user=OPERATOR, text="no, not prod", direct=False)  # fmt: skip
    routed = intake.route(reply, bot_user_id=local.BOT_USER_ID, retry_num=None)
    assert routed.detail == {"ok": True, "decision": "already_decided"}, routed
    [note] = fake_slack.ephemerals(thread.channel, user=OPERATOR)
    assert note["text"] == f"This call was already approved by <@{OPERATOR}>; nothing changed."
    again = intake.route(reply, bot_user_id=local.BOT_USER_ID, retry_num="1")  # Slack's retry: nothing more
    assert "noted" not in again.detail, again
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert len(executions(thread.session_id)) == 1
    assert len(fake_slack.ephemerals(thread.channel, user=OPERATOR)) == 1
    assert "no, not prod" not in texts(fake_gemini.requests()[-1])


def test_a_denying_reply_retried_after_a_kill_part_way_denies_every_pending_call(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the reply's first denial was keyed by the message alone, so Slack's retry after a crash between two
    denials found that key taken, denied nothing more, and the turn waited for the sweep's expiry."""
    calls = [("scale_service", {"name": "api", "replicas": n}) for n in (2, 5)]
    script(G.calls(*calls), G.text("Not scaled."))
    thread = mention(fake_slack, f"C{uid}", "scale the api twice")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    first, second = sorted(stored.get_approvals(paused.awaited(WaitKind.APPROVAL)), key=lambda a: a.call_index)
    fake_slack.slow("chat.update", 60, match="denied by")  # the ingress is held after the first denial
    # The reply's delivery waits for the ingress, which is held: send it beside the test, and kill the ingress the
    # moment the first denial's card update arrives (before the Slack client's own timeout lets it go on).
    replies: list[dict[str, Any]] = []

    def reply() -> None:
        replies.append(fake_slack.user_message(OPERATOR, thread.channel, "not today", thread_ts=thread.ts))

    sending = threading.Thread(target=reply, daemon=True)
    try:
        sending.start()
        wait_for(lambda: fake_slack.calls("chat.update"), timeout=30, what="the first denial's card update")
        stack.kill_function("slack_events")
    finally:
        stack.start_function("slack_events")
    sending.join(timeout=60)
    [sent] = replies
    decided = [a.status for a in stored.get_approvals([first.approval_id, second.approval_id])]
    assert decided == [ApprovalStatus.DENIED, ApprovalStatus.PENDING]  # killed between the two denials
    [event] = sent["deliveries"]
    assert fake_slack.redeliver(event["event_id"])["status"] == 200  # Slack's retry
    wait_status(resumed(first), SessionStatus.DONE, timeout=30)
    assert [a.status for a in stored.get_approvals([first.approval_id, second.approval_id])] == [
        ApprovalStatus.DENIED, ApprovalStatus.DENIED,
    ]  # fmt: skip
    assert executions(thread.session_id) == []
    assert all("not today" in r["response"]["error"] for r in function_responses(fake_gemini.requests()[-1]))


def test_an_answer_that_reached_the_paused_turn_moves_on_with_its_decisions(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the decision that completed the turn cleared the paused session's notes without handing them to the
    session that resumes it, so an answer to a non-blocking question that arrived during the pause was lost."""
    script(
        G.call("ask_operator", question="Which colour?", options=["red", "blue"], blocking=False),
        G.call("scale_service", name="api", replicas=3),
        G.text("Done."),
    )
    thread = mention(fake_slack, f"C{uid}", "scale the api and pick a colour")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    [question] = stored_questions.thread_questions(thread.channel, thread.ts).open
    fake_slack.click(OPERATOR, thread.channel, question.post_ts or "", "answer_1", value=f"{question.question_id}|2")
    wait_for(lambda: (session(thread.session_id) or paused).notes, timeout=30, what="the answer as a note")
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert "blue" in texts(fake_gemini.requests()[-1])
    assert len(executions(thread.session_id)) == 1


def test_refused_presses_change_nothing(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    """openai-agents-python PR 5105 (an approval applied to another call) and langchain issue 40166 (an edit that
    switches to a different tool bypasses the gate): a press is bound to its approval, card and digest."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    press(fake_slack, approval, blocks.APPROVE_ACTION, user=HUMAN)  # not an operator
    press(fake_slack, approval, blocks.APPROVE_ACTION, value=f"{approval.approval_id}|0000000000000000")  # tampered
    press(fake_slack, approval, blocks.APPROVE_ACTION, value=blocks.approval_value("a-other", approval.digest))
    other = fake_slack.user_message(OPERATOR, thread.channel, "unrelated", thread_ts=thread.ts)
    # a replayed press from another message of the thread
    fake_slack.click(OPERATOR, thread.channel, thread.ts, blocks.APPROVE_ACTION,
                     value=blocks.approval_value(approval.approval_id, approval.digest))  # fmt: skip
    _ = other
    still = stored.get_approval(approval.approval_id)
    assert still is not None
    # The operator's plain reply above was a denial with a reason; everything else was refused.
    assert still.status == ApprovalStatus.DENIED
    assert still.reason == "unrelated"
    refusals = [e["text"] for e in fake_slack.ephemerals(thread.channel)]
    assert any("Only the operators" in t for t in refusals)
    assert any("does not match the call" in t for t in refusals)
    assert sum("does not belong to an approval" in t for t in refusals) >= 2
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert executions(thread.session_id) == []


def kill_the_worker_in(stack: Stack, fake_slack: FakeSlack, method: str, match: str, *, what: str) -> None:
    """Once the worker is inside a Slack call (``method`` with ``match`` in its arguments, held slow): agent_session
    is killed and started again."""
    wait_for(lambda: [c for c in fake_slack.calls(method) if match in repr(c["args"])], timeout=30, what=what)
    stack.kill_function("agent_session")
    stack.start_function("agent_session")


@pytest.mark.parametrize("race", ["two approvals", "approve and deny", "double click", "slack retries"])
def test_racing_decisions_make_one_decision_and_at_most_one_execution(
    race: str, stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    barrier = threading.Barrier(2)
    replies: list[Any] = []

    def decide(action: str, user: str) -> None:
        barrier.wait()
        replies.append(press(fake_slack, approval, action, user=user))

    def retry(payload: dict[str, Any]) -> None:
        barrier.wait()
        body = urlencode({"payload": json.dumps(payload)}).encode()
        headers = signed_headers(local.SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
        replies.append(requests.post(stack.function_url("slack_interactivity"), data=body, headers=headers, timeout=30))

    if race == "slack retries":
        first = press(fake_slack, approval, blocks.APPROVE_ACTION)
        racers = [threading.Thread(target=retry, args=(first["payload"],)) for _ in range(2)]
    else:
        actions = {"two approvals": [(blocks.APPROVE_ACTION, OPERATOR), (blocks.APPROVE_ACTION, OPERATOR2)],
                   "approve and deny": [(blocks.APPROVE_ACTION, OPERATOR), (blocks.DENY_ACTION, OPERATOR2)],
                   "double click": [(blocks.APPROVE_ACTION, OPERATOR)] * 2}[race]  # fmt: skip
        racers = [threading.Thread(target=decide, args=a) for a in actions]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    decided = stored.get_approval(approval.approval_id)
    assert decided is not None
    assert decided.status in {ApprovalStatus.APPROVED, ApprovalStatus.DENIED}
    assert len(executions(thread.session_id)) == (1 if decided.status == ApprovalStatus.APPROVED else 0)
    continuations = (
        firestore.db()
        .collection(firestore.SESSIONS)
        .where(filter=FieldFilter("asker_session_id", "==", thread.session_id))
    )
    assert [s.id for s in continuations.stream()] == [resumed(approval)]


def test_a_worker_killed_between_approval_and_result_never_runs_the_call_twice(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """adk-python discussion 8039 (a crash after approval re-executes an approved payment) and claude-agent-sdk-python
    issue 993 (a resumed call skips the check): the ledger decides, and the approval is checked again on resume."""
    thread, approval = asks_to_scale(script, fake_slack, uid)
    fake_slack.slow("chat.postMessage", 60, match="Scaling `api`")  # the worker is inside the tool when it dies
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    kill_the_worker_in(stack, fake_slack, "chat.postMessage", "Scaling `api`", what="the tool to start")
    wait_status(resumed(approval), SessionStatus.DONE, timeout=90)
    assert executions(thread.session_id) == []  # it died before recording: it never ran, and is not re-run
    [response] = function_responses(fake_gemini.requests()[-1])
    assert "outcome unknown" in response["response"]["error"]
    card = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == approval.card_ts)
    assert "it ran and failed" in card["text"]
    assert "outcome unknown" in json.dumps(card["blocks"])  # the error, shown inertly


def test_the_sweep_reminds_then_expires_and_an_expired_card_cannot_be_approved(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    firestore.db().collection("approvals").document(approval.approval_id).update(
        {"asked_at": firestore.now() - timedelta(hours=25)}
    )
    first = requests.post(stack.function_url("sweep"), json={}, timeout=60).json()
    assert first["approvals_reminded"] >= 1
    assert any("waited 25 hours for approval" in m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts))
    firestore.db().collection("approvals").document(approval.approval_id).update(
        {"asked_at": firestore.now() - timedelta(hours=80)}
    )
    second = requests.post(stack.function_url("sweep"), json={}, timeout=60).json()
    assert second["approvals_expired"] >= 1
    expired = stored.get_approval(approval.approval_id)
    assert expired is not None
    assert expired.status == ApprovalStatus.EXPIRED
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    assert any("expired" in e["text"] for e in fake_slack.ephemerals(thread.channel))
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert executions(thread.session_id) == []


APPROVAL_HOLDS = [
    ("the card's post", "chat.postMessage", "approval needed"),
    ("inside the tool, started and not done", "chat.postMessage", "Scaling `api`"),
    # The call's done record is written with the resumed step that carries its result (issue 28.1); the card's "it
    # ran" update is made once that step is stored (beside the model's request): killed there, the result is in the
    # transcript, and the takeover neither runs the call again nor calls its outcome unknown. (Killed after the call
    # ran and before that commit, the ledger says started and the outcome is unknown; nothing holds the run there.)
    ("after its step, in the card's update", "chat.update", f"approved by <@{OPERATOR}>; it ran"),
    # Killed in the model request that follows that commit: the result is in the transcript.
    ("after the step that stores its result", "model", ""),
]


@pytest.mark.parametrize(("where", "method", "match"), APPROVAL_HOLDS, ids=[h[0] for h in APPROVAL_HOLDS])
def test_a_kill_at_each_boundary_from_card_to_result_runs_a_non_idempotent_call_at_most_once(
    where: str, method: str, match: str, stack: Stack, script: Script, fake_slack: FakeSlack,
    fake_gemini: FakeGemini, uid: str,
) -> None:  # fmt: skip
    call = G.call("scale_service", name="api", replicas=4)
    if where.startswith("after"):  # the continuation's model request (made beside the card's update) is held,
        script(call, G.delayed(60, G.text("Done.")), G.text("Done."))  # answered late; its retry's at once
    else:
        script(call, G.text("Done."))
    if method != "model":
        fake_slack.slow(method, 60, match=match)
    before = len(fake_gemini.requests())
    thread = mention(fake_slack, f"C{uid}", "scale the api to 4")
    if where == "the card's post":
        kill_the_worker_in(stack, fake_slack, method, match, what=f"the worker at {where}")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=90)
    [approval] = stored.get_approvals(paused.awaited(WaitKind.APPROVAL))
    cards = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "approval needed" in m["text"]]
    assert len(cards) == 1  # the card was not posted twice
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    if method == "model":
        fake_gemini.wait_for_requests(before + 2, timeout=60)  # the resumed step is stored before this request
        stack.kill_function("agent_session")
        stack.start_function("agent_session")
    elif where != "the card's post":
        kill_the_worker_in(stack, fake_slack, method, match, what=f"the worker at {where}")
    wait_status(resumed(approval), SessionStatus.DONE, timeout=90)
    assert len(executions(thread.session_id)) == (0 if where.startswith("inside") else 1)
    [response] = function_responses(fake_gemini.requests()[-1])
    unknown = "outcome unknown" in str(response["response"].get("error", ""))
    assert unknown == where.startswith("inside"), response
    if not unknown:
        assert response["response"]["result"] == {"scaled": "api", "replicas": 4}


def test_an_idempotent_approved_call_killed_mid_run_is_run_again_with_the_same_key(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    pin = G.call("pin_version", name="api", version="1.4.2")
    thread, approval = asks_approval(script, fake_slack, f"C{uid}", "pin the api to 1.4.2", pin, "Pinned.", timeout=30)
    fake_slack.slow("chat.postMessage", 60, match="Pinning `api`")
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    kill_the_worker_in(stack, fake_slack, "chat.postMessage", "Pinning `api`", what="the tool to start")
    wait_status(resumed(approval), SessionStatus.DONE, timeout=90)
    wait_for(lambda: executions(thread.session_id), timeout=30, what="the pin")
    [pinned] = executions(thread.session_id)  # one effect, under one key
    assert pinned["key"] == ids.call_key(thread.session_id, approval.seq, approval.call_index)
    assert pinned["version"] == "1.4.2"


def test_parallel_deliveries_of_the_resuming_task_run_the_approved_call_once(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread, approval = asks_to_scale(script, fake_slack, uid)
    press(fake_slack, approval, blocks.APPROVE_ACTION)
    attempts = delivery.deliver(stack.function_url("agent_session"), resumed(approval), task="resume", copies=4)
    # Each copy ends in a 2xx: one that met its siblings' contention (a 500 or a dropped connection on a loaded
    # machine) is retried, as Cloud Tasks retries it; the call still runs once.
    delivery.settled(attempts)  # a copy that lost the race was retried, as Cloud Tasks does
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    assert len(executions(thread.session_id)) == 1


def test_calls_decided_before_their_session_paused_run_in_place(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Both cards of one turn decided while the session is still posting them: no pause is left waiting."""
    script(
        G.calls(("scale_service", {"name": "api", "replicas": 2}), ("pin_version", {"name": "api", "version": "2.0"})),
        G.text("Scaled and pinned."),
    )
    fake_slack.slow("chat.postMessage", 4, match="pin_version")  # the second card is visible, its session held
    thread = mention(fake_slack, f"C{uid}", "scale and pin the api")

    def second_card() -> dict[str, Any] | None:
        return next((m for m in fake_slack.messages(thread.channel, thread.ts) if "Pin `api`" in m["text"]), None)

    second = wait_for(second_card, timeout=30, what="the second card")
    first_approval = stored.get_approval(ids.approval_id(thread.session_id, 1, 0))
    second_approval = stored.get_approval(ids.approval_id(thread.session_id, 1, 1))
    assert first_approval is not None
    assert second_approval is not None
    press(fake_slack, first_approval, blocks.APPROVE_ACTION)
    press(fake_slack, second_approval, blocks.APPROVE_ACTION, message_ts=str(second["ts"]))
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    assert done.awaited(WaitKind.APPROVAL) == []  # it never paused
    assert sorted(e["action"] for e in executions(thread.session_id)) == ["pin", "scale"]
    responses = function_responses(fake_gemini.requests()[-1])
    assert [r["response"].get("result") for r in responses] == [
        {"scaled": "api", "replicas": 2}, {"pinned": "api", "version": "2.0"},
    ]  # fmt: skip


def test_make_admin_lists_pending_approvals_and_decisions(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    from ops import admin
    from ops.names import Names

    thread, approval = asks_to_scale(script, fake_slack, uid)
    pending = admin.listing(firestore.now())
    assert any(approval.approval_id in line and approval.digest in line for line in pending)
    [waiting] = [line for line in pending if line.endswith(f"[{thread.session_id}]")]  # waits, and is not stuck
    assert "waiting for an approval" in waiting
    assert pending.index(waiting) < pending.index(next(line for line in pending if line.startswith("STUCK")))
    fake_slack.user_message(OPERATOR, thread.channel, "not today", thread_ts=thread.ts)
    wait_status(resumed(approval), SessionStatus.DONE, timeout=30)
    decided = admin.listing(firestore.now())
    [line] = [line for line in decided if approval.approval_id in line and "denied" in line]
    assert Names().name(OPERATOR) in line  # by name (users.info), never <@U…>
    assert "<@" not in line
    assert "not today" in line

"""Emulator restarts mid-flow (issue 19): the Firestore emulator with its data kept, the Cloud Tasks emulator
with its queue created again, each back on the same port. The product survives both: a Firestore call that fails
with UNAVAILABLE meanwhile is retried, and a task created while Cloud Tasks is down is created once it is back,
so the flow still gets its one answer."""

from __future__ import annotations

import threading
import time

import pytest
from google.cloud import firestore as google_firestore

from infra import restarts
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import BOT_USER_ID, QUEUE, Stack
from shared.state import firestore, ids, sessions
from shared.state.models import SessionStatus
from tests.agent_helpers import HUMAN, mention, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack


def test_a_mention_while_cloud_tasks_is_down_is_answered_once_it_is_back(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    fake_gemini.script(FakeGemini.matching(uid, FakeGemini.text(f"Hello from {uid}.")))
    port = stack.ports["tasks"]
    # Down for 3 s: the ingress's create_task fails with UNAVAILABLE meanwhile and is retried until it is back.
    restarting = threading.Thread(target=restarts.restart_tasks, args=(stack,), kwargs={"down_seconds": 3.0})
    restarting.start()
    try:
        time.sleep(0.5)
        # The ingress waits on Cloud Tasks at most 2 s of Slack's 3, then answers 503 (issue 24.8).
        sent = fake_slack.user_message(HUMAN, channel, f"<@{BOT_USER_ID}> say hello [{channel}]")
    finally:
        restarting.join()
    assert stack.ports["tasks"] == port
    [delivery] = [d for d in sent["deliveries"] if d["type"] == "app_mention"]
    event = delivery["event_id"]
    if delivery["status"] != 200:  # Slack delivers it again; the duplicate creates the recorded session's task
        assert delivery["status"] == 503, delivery
        status, wait = 503, 1.0
        while status != 200 and wait < 20:  # Slack's retries, minutes apart, here seconds (the ingress's channel
            time.sleep(wait)  # to Cloud Tasks reconnects with its own backoff)
            status, wait = fake_slack.redeliver(event)["status"], wait * 2
        assert status == 200
    wait_status(ids.session_for_event(event), SessionStatus.DONE, timeout=60)
    assert [m["text"] for m in fake_slack.bot_replies(channel, sent["ts"])] == [f"Hello from {uid}."]


def test_a_session_survives_a_firestore_restart_mid_flow_with_its_data(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    # The model answers 3 s late: the emulator restarts while the session waits for it, and the session's next
    # commit (the model's turn) meets a Firestore that is down, then one that is back with the data.
    fake_gemini.script(FakeGemini.delayed(3.0, FakeGemini.matching(uid, FakeGemini.text(f"Done for {uid}."))))
    port = stack.ports["firestore"]
    thread = mention(fake_slack, channel, "say hello")
    wait_for(lambda: fake_gemini.requests() and any(uid in str(r["body"]) for r in fake_gemini.requests()),
             timeout=30, what="the session's model call")  # fmt: skip
    before = sessions.get_session(thread.session_id)
    assert before is not None
    assert before.status == SessionStatus.RUNNING
    down = restarts.restart_firestore(stack, down_seconds=2.0)
    assert down >= 2.0
    assert stack.ports["firestore"] == port
    ended = wait_status(thread.session_id, SessionStatus.DONE, SessionStatus.FAILED, timeout=90)
    assert ended.status == SessionStatus.DONE, ended.error
    assert ended.started_at == before.started_at  # the same document, kept across the restart
    assert [m["text"] for m in fake_slack.bot_replies(channel, thread.ts)] == [f"Done for {uid}."]


def test_a_transaction_firestore_forgot_in_a_restart_runs_again_from_its_reads(stack: Stack, uid: str) -> None:
    """Defect: a step's transaction that read before a Firestore restart and committed after it failed with
    INVALID_ARGUMENT ("Transaction is invalid or expired"); the delivery crashed and its takeover asked the model
    again. Nothing of a forgotten transaction was applied, so it runs again from its reads."""
    ref = firestore.db().collection("restart_tests").document(uid)
    ref.set({"count": 1})
    runs: list[int] = []

    @google_firestore.transactional
    def bump(transaction: google_firestore.Transaction) -> int:
        count = int((ref.get(transaction=transaction).to_dict() or {})["count"])
        runs.append(count)
        if len(runs) == 1:
            restarts.restart_firestore(stack, down_seconds=0.5)  # between this transaction's read and its commit
        transaction.update(ref, {"count": count + 1})
        return count + 1

    assert firestore.transact(bump) == 2
    assert runs == [1, 1]
    assert (ref.get().to_dict() or {})["count"] == 2


def test_a_task_the_emulator_accepted_survives_its_restart(stack: Stack, uid: str) -> None:
    """Cloud Tasks never loses a task it accepted: one the emulator still holds (scheduled a few seconds ahead)
    when it restarts is created again, under its name, and delivered."""
    from google.protobuf import timestamp_pb2

    from infra.fakes.dispatch.client import Dispatcher
    from shared.queue import tasks

    dispatch = Dispatcher(stack.url("dispatch"))
    session_id = f"restart-{uid}"  # no such session: agent_session answers 200 and does nothing
    task = tasks.build_session_task(session_id)
    task.schedule_time = timestamp_pb2.Timestamp(seconds=int(time.time()) + 4)
    with restarts.tasks_client(stack) as client:
        client.create_task(parent=QUEUE, task=task)
    restarts.restart_tasks(stack, down_seconds=0.5)
    delivered = wait_for(lambda: dispatch.deliveries(match=session_id), timeout=30, what="the kept task's delivery")
    assert {d["task"] for d in delivered} == {task.name.rsplit("/", 1)[-1]}

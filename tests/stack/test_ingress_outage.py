"""Issue 24.8: with Cloud Tasks unreachable the ingress answers 503 within about 2 s of Slack's 3 (no traceback),
and every path that finds an answer already recorded creates the continuation's task again while it is queued.

The ingress runs here on the stack's emulators (``tests.rigs.counted_rig``), with a real Cloud Tasks client that
talks gRPC to a socket that accepts connections and never answers (or to a closed port), then to the emulator
(``tests.rigs.tasks_outage``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.handlers import slack_events, slack_interactivity
from shared.queue import tasks
from shared.slack import blocks
from shared.state import approvals as stored_approvals
from shared.state import ids, sessions
from shared.state import questions as stored
from shared.state.models import SessionStatus, WaitKind
from tests.rigs import Outage, queued_again, tasks_outage

pytestmark = pytest.mark.stack
G = FakeGemini
SLACK_GIVES_UP = 3.0


@pytest.fixture(params=["blackhole", "refused"])
def outage(rig: cost.Rig, request: pytest.FixtureRequest) -> Iterator[Outage]:
    with tasks_outage(blackhole=request.param == "blackhole") as down:
        yield down


def timed(handle: Any, request: tuple[bytes, dict[str, str]], caplog: pytest.LogCaptureFixture,
          outage: Outage) -> dict[str, Any]:  # fmt: skip
    """One request to an ingress handler while Cloud Tasks is down: a 503 within Slack's 3 s, after at most the
    ingress's 2 s of waiting on Cloud Tasks, logged without a traceback."""
    caplog.clear()
    outage.waited = outage.allowed = 0.0
    began = time.monotonic()
    with caplog.at_level(logging.INFO):
        reply, status = handle(*request)
    took = time.monotonic() - began
    assert status == 503, reply
    # What the product allowed its calls to Cloud Tasks, not the wall clock (a busy machine overshoots a deadline
    # by its scheduling: a fresh clone's CI measured 2.74 s of a 2 s deadline).
    assert 0 < outage.allowed <= tasks.INGRESS_PATIENCE_SECONDS + 0.01, f"it allowed {outage.allowed:.2f} s"
    assert outage.waited > 0
    assert took < SLACK_GIVES_UP, f"the ingress took {took:.2f} s"
    assert not [r for r in caplog.records if r.exc_info], "an outage is logged without a traceback"
    return dict(reply)


def again(request: tuple[bytes, dict[str, str]]) -> tuple[bytes, dict[str, str]]:
    """Slack's redelivery of an event it got no 2xx for."""
    body, headers = request
    return body, {**headers, "x-slack-retry-num": "1", "x-slack-retry-reason": "http_error"}


def asked(rig: cost.Rig) -> tuple[str, str]:
    """A session paused on an operator question (Cloud Tasks up); its id and the question's."""
    session_id = rig.start("pick a zone")
    rig.script(G.call("ask_operator", question="Which zone?", options=["a", "b"]), G.text("Zone chosen."))
    rig.deliver(session_id)
    paused = rig.session(session_id)
    assert paused.status == SessionStatus.PAUSED
    assert paused.awaited_question
    return session_id, paused.awaited_question


def test_a_mention_while_cloud_tasks_is_down_is_answered_503_in_time_and_queued_on_redelivery(
    rig: cost.Rig, outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    rig.start("a first request, while Cloud Tasks is up")  # the emulator's first use of a new database is slow
    mention = rig.mention("are you there?")
    outage.down = True
    timed(slack_events.handle, mention, caplog, outage)
    outage.down = False
    reply, status = slack_events.handle(*again(mention))
    assert (status, reply) == (200, {"ok": True, "duplicate": True})
    session_id = outage.created[-1]
    assert session_id == ids.session_for_event(json.loads(mention[0])["event_id"])
    assert rig.session(session_id).status == SessionStatus.QUEUED


def test_an_answer_while_cloud_tasks_is_down_is_answered_503_and_its_redelivery_queues_the_continuation(
    rig: cost.Rig, outage: Outage, caplog: pytest.LogCaptureFixture, fake_slack: FakeSlack
) -> None:
    """Defect: the reply was answered 500 after 20 s of retries; Slack's redelivery was told "duplicate" and the
    continuation stayed queued until the rescue job ran. Defect too: the redelivery took the duplicate path only, so
    the question's post kept its buttons and its 💬 and the reply never got its ✅."""
    session_id, question_id = asked(rig)
    answer = rig.reply(session_id, "a")
    reply_ts = json.loads(answer[0])["event"]["ts"]
    question = stored.get_question(question_id)
    assert question is not None
    assert question.post_ts is not None
    post_place = question.post_place()[0], question.post_ts
    outage.down = True
    timed(slack_events.handle, answer, caplog, outage)
    continuation = ids.resumed_by(question_id)
    assert rig.session(continuation).status == SessionStatus.QUEUED  # recorded, not undone

    def post() -> dict[str, Any]:
        return next(m for m in fake_slack.messages(post_place[0]) if m["ts"] == post_place[1])

    assert post().get("blocks")  # the answer is recorded, its post not updated yet
    assert "white_check_mark" not in fake_slack.reactions(question.channel, reply_ts)
    queued_again(rig, outage, slack_events.handle, again(answer), continuation,
                 reply={"ok": True, "answer": "duplicate"})  # fmt: skip
    assert not post().get("blocks")
    assert "speech_balloon" not in fake_slack.reactions(*post_place)
    assert fake_slack.reactions(question.channel, reply_ts).count("white_check_mark") == 1


def test_a_second_press_on_an_answered_question_queues_its_continuation(
    rig: cost.Rig, outage: Outage, caplog: pytest.LogCaptureFixture, fake_slack: FakeSlack
) -> None:
    """Defect too: the first press answered 503 before its acknowledgement, and the second press only queued the
    continuation: the question's post kept its buttons and its 💬 though the question was answered."""
    _, question_id = asked(rig)
    question = stored.get_question(question_id)
    assert question is not None
    assert question.post_ts is not None

    def press() -> tuple[bytes, dict[str, str]]:
        return rig.press(question.channel, question.post_ts or "", question.thread_ts, action_id="answer_2",
                         value=blocks.question_value(question_id, 2))  # fmt: skip

    outage.down = True
    timed(slack_interactivity.handle, press(), caplog, outage)
    continuation = ids.resumed_by(question_id)
    assert rig.session(continuation).status == SessionStatus.QUEUED
    post_place = question.post_place()[0], question.post_ts

    def post() -> dict[str, Any]:
        return next(m for m in fake_slack.messages(post_place[0]) if m["ts"] == post_place[1])

    assert post().get("blocks")  # the answer is recorded, its post not updated yet
    again_pressed = {"ok": True, "answer": "not_open"}  # the operator presses again
    queued_again(rig, outage, slack_interactivity.handle, press(), continuation, reply=again_pressed)
    assert not post().get("blocks")
    assert "chose: *b*" in post()["text"]
    assert "speech_balloon" not in fake_slack.reactions(*post_place)


def test_a_second_press_on_a_decided_approval_queues_its_continuation(
    rig: cost.Rig, outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    """The Approve that decided the turn found Cloud Tasks down (503, the decision recorded); the operator presses
    again: the decided approval's still-queued continuation gets its task (found by make faults: the press path's
    early "already decided" answer skipped it, and the continuation stayed queued)."""
    session_id = rig.start("scale the api")
    rig.script(G.call("scale_service", name="api", replicas=3), G.text("Scaled."))
    rig.deliver(session_id)
    paused = rig.session(session_id)
    assert paused.status == SessionStatus.PAUSED
    [approval] = stored_approvals.get_approvals(paused.awaited(WaitKind.APPROVAL))
    assert approval.card_ts

    def press() -> tuple[bytes, dict[str, str]]:
        return rig.press(
            approval.channel,
            approval.card_ts or "",
            paused.origin.thread_ts,
            action_id=blocks.APPROVE_ACTION,
            value=blocks.approval_value(approval.approval_id, approval.digest),
        )

    outage.down = True
    timed(slack_interactivity.handle, press(), caplog, outage)
    continuation = ids.resume_id(session_id, approval.seq)
    assert rig.session(continuation).status == SessionStatus.QUEUED
    queued_again(rig, outage, slack_interactivity.handle, press(), continuation)  # the operator presses again


def test_the_ingress_budget_bounds_every_task_creation_of_a_request_together() -> None:
    with tasks.within(0.0), pytest.raises(tasks.QueueUnavailable):
        tasks.enqueue_session("never-tried")
    with tasks.within(60.0), tasks.within(1.0):
        assert tasks._patience(20.0) <= 1.0  # an inner budget never extends the outer one
    with tasks.within(1.0), tasks.within(60.0):
        assert tasks._patience(20.0) <= 1.0
    assert tasks._patience(20.0) == 20.0  # agent_session and the sweep keep their patience


def test_a_note_for_a_dead_worker_whose_takeover_found_cloud_tasks_down_queues_it_on_redelivery(
    rig: cost.Rig, outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    session_id = rig.start("work on it")
    claimed = sessions.claim_session(session_id, worker="dead", task="t-dead", attempt=0, lease_seconds=0)
    assert claimed.session is not None  # running under a lease that has already run out: its worker died
    message = rig.reply(session_id, "are you still there?")
    outage.down = True
    timed(slack_events.handle, message, caplog, outage)
    outage.down = False
    before = len(outage.created)
    reply, status = slack_events.handle(*again(message))
    assert (status, reply) == (200, {"ok": True, "duplicate": True})
    assert outage.created[before:] == [session_id]  # its takeover, queued on the redelivery


def test_the_twin_of_an_answering_reply_makes_no_second_acknowledgement(rig: cost.Rig, fake_slack: FakeSlack) -> None:
    """A reply that mentions the bot comes as two events (message and app_mention), and the second takes the
    duplicate path: only Slack's retry of an event (its first delivery may have failed before the acknowledgement)
    acknowledges again; the twin, delivered without a retry header, makes no Slack call (it re-made all three)."""
    session_id, question_id = asked(rig)
    answer = rig.reply(session_id, "a")
    reply, status = slack_events.handle(*answer)
    assert (status, reply) == (200, {"ok": True, "answer": "answered"})
    acknowledging = ("chat.update", "reactions.add", "reactions.remove")
    made = {api: len(fake_slack.calls(api)) for api in acknowledging}
    assert made["chat.update"] >= 1
    reply, status = slack_events.handle(*answer)  # the twin: the same message, no retry header
    assert (status, reply) == (200, {"ok": True, "answer": "duplicate"})
    assert {api: len(fake_slack.calls(api)) for api in acknowledging} == made
    assert rig.session(ids.resumed_by(question_id)).status == SessionStatus.QUEUED

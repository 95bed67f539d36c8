"""Two retries of one task delivered together (issue 28's takeover race): each sees the lease of an earlier attempt,
and a higher retry count alone was taken as proof that the attempt before it died, so both took the session over
and both asked the model. A retry now also needs the lease to have gone a heartbeat without a renewal: the first
to claim runs, the other is asked to retry later (500) and, once the session has ended, finds nothing to do.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import requests

from infra.fakes.dispatch.headers import cloud_tasks_headers
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared import config
from shared.agent import heartbeat
from shared.state import firestore, lease, sessions
from shared.state.models import SessionKind, SessionStatus
from shared.state.session_model import Session
from shared.state.sessions import ClaimResult
from tests import delivery
from tests.agent_helpers import HUMAN, wait_status
from tests.poll import wait_for
from tests.seeded import dead_worker_session

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def post(url: str, session_id: str, *, task: str, retry: int) -> requests.Response:
    headers = {"Content-Type": "application/json", **cloud_tasks_headers(
        queue=delivery.QUEUE_ID, task=task, retry=retry, executions=retry, eta=time.time())}  # fmt: skip
    return requests.post(url, data=json.dumps({"session_id": session_id}), headers=headers, timeout=120)


def quiet(written: datetime, lease_seconds: int) -> None:
    """Until a heartbeat interval (and a renewal's slack) has passed since ``written`` (a document's update time)."""
    beat = timedelta(seconds=lease.beat_seconds(lease_seconds) * (1 + lease.RENEWAL_SLACK) + 0.5)
    wait_for(lambda: firestore.now() > written + beat, timeout=lease_seconds, what="a heartbeat without a write")


def test_two_retries_of_a_dead_attempt_delivered_together_ask_the_model_once(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Attempt 0's worker died mid-run (its lease not renewed for more than a heartbeat, not yet expired); retries
    1 and 3 of its task arrive together, 3 while 1 is inside its model call (as the CI log showed: the test's own
    redelivery and the dispatcher's). Before the fix attempt 3 took the session from attempt 1 and asked again."""
    seconds = config.settings().session_lease_seconds
    quiet_since = firestore.now() - timedelta(seconds=lease.beat_seconds(seconds) + 5)
    dead, written = dead_worker_session(fake_slack, f"race-{uid}", f"C{uid}", "check it",
                                        claimed_at=quiet_since, lease=timedelta(seconds=seconds),
                                        task=f"task-{uid}")  # fmt: skip
    channel, root = dead.origin.channel, dead.origin.thread_ts
    quiet(written, seconds)  # the dead worker's last write, a heartbeat ago by Firestore's clock
    script(G.delayed(3, G.text("Checked once.")), G.text("a second model call: the race is back"))
    url = stack.function_url("agent_session")
    replies: dict[int, requests.Response] = {}

    def deliver(retry: int) -> None:
        replies[retry] = post(url, dead.session_id, task=f"task-{uid}", retry=retry)

    first = threading.Thread(target=deliver, args=(1,))
    first.start()

    def asked() -> list[dict[str, object]]:
        return [r for r in fake_gemini.requests() if uid in json.dumps(r["body"])]

    wait_for(asked, timeout=60, what="attempt 1's model call")
    deliver(3)  # while attempt 1 is inside its model call
    first.join(120)
    assert replies[1].status_code == 200, replies[1].text
    assert replies[1].json().get("status") == "done", replies[1].text
    assert replies[3].status_code == 500, replies[3].text  # retry later: not a duplicate, not a takeover
    assert replies[3].json()["error"] == "a retry while the session's lease was renewed within a heartbeat"
    done = wait_status(dead.session_id, SessionStatus.DONE, timeout=60)
    assert len(asked()) == 1
    assert [m["text"] for m in fake_slack.bot_replies(channel, root)] == ["Checked once."]
    assert (done.lease.takeovers, done.lease.attempt) == (1, 1)
    later = post(url, dead.session_id, task=f"task-{uid}", retry=4)  # Cloud Tasks' next retry of attempt 3
    assert (later.status_code, later.json().get("skipped")) == (200, "already done")


def test_a_retry_of_a_dead_attempt_waits_at_most_a_heartbeat(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """A worker that really died is taken over by its task's retry once its lease has gone a heartbeat without a
    renewal, not a whole lease later: the retries Cloud Tasks makes within a heartbeat are refused (500), one after
    it runs the session."""
    seconds = config.settings().session_lease_seconds
    beat = lease.beat_seconds(seconds)
    # the dead worker's last beat: this very write
    dead, renewed = dead_worker_session(fake_slack, f"dead-{uid}", f"C{uid}", "check it",
                                        claimed_at=firestore.now(), lease=timedelta(seconds=seconds),
                                        task=f"task-{uid}")  # fmt: skip
    channel, root = dead.origin.channel, dead.origin.thread_ts
    script(G.text("Taken over."))
    url = stack.function_url("agent_session")
    early = post(url, dead.session_id, task=f"task-{uid}", retry=1)
    assert early.status_code == 500, early.text
    retries = iter(range(2, 1000))
    took: list[datetime] = []

    def taken_over() -> bool:
        sent = firestore.now()
        if post(url, dead.session_id, task=f"task-{uid}", retry=next(retries)).status_code != 200:
            return False
        took.append(sent)
        return True

    wait_for(taken_over, timeout=seconds, what="a retry to take the dead worker's session over")
    done = wait_status(dead.session_id, SessionStatus.DONE, timeout=60)
    assert done.lease.takeovers == 1
    assert fake_slack.bot_replies(channel, root)[-1]["text"] == "Taken over."
    # Refused until a heartbeat had passed since the last renewal; taken over by a retry, before the lease ran out.
    assert renewed + timedelta(seconds=beat) <= took[0] + timedelta(seconds=1)
    assert took[0] < renewed + timedelta(seconds=seconds)


def test_simultaneous_retries_of_one_task_take_a_quiet_lease_over_once(stack: Stack, uid: str) -> None:
    """Claims of two retries that start together, with nothing between them: exactly one takes over."""
    seconds = 12  # a heartbeat of 3 s
    for round_ in range(5):
        quiet_since = firestore.now() - timedelta(seconds=lease.beat_seconds(seconds) + 5)
        dead = Session.new(
            session_id=f"both-{uid}-{round_}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts="1.0",
            trigger_ts="1.0", trigger_user=HUMAN, text="x", created_at=quiet_since, status=SessionStatus.RUNNING,
            worker="gone", lease_task="t", lease_attempt=0, started_at=quiet_since,
            lease_until=quiet_since + timedelta(seconds=seconds), transcript_id=f"root-{uid}-{round_}",
        )  # fmt: skip
        root = Session.new(
            session_id=f"root-{uid}-{round_}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts="1.0",
            trigger_ts="1.0", trigger_user=HUMAN, text="x", created_at=quiet_since, status=SessionStatus.RESUMED,
            transcript_writer=dead.session_id,
        )  # fmt: skip
        firestore.session_ref(root.session_id).create(root.to_doc())
        quiet(firestore.session_ref(dead.session_id).create(dead.to_doc()).update_time, seconds)
        results = claimed_together(dead.session_id, seconds, attempts=(1, 15))
        assert sum(1 for r in results if isinstance(r, ClaimResult) and r.takeover) == 1, results


def claimed_together(session_id: str, lease_seconds: int, *, attempts: tuple[int, ...]) -> list[object]:
    """Claims of one task's ``attempts``, started at once in threads: each one's result, or the error it raised."""
    start = threading.Barrier(len(attempts))
    results: list[object] = []

    def claim(attempt: int) -> None:
        start.wait()
        try:
            found = sessions.claim_session(session_id, worker=f"w{attempt}", task="t", attempt=attempt,
                                           lease_seconds=lease_seconds)  # fmt: skip
            results.append(found.result)
        except Exception as exc:  # a claim that could not commit: Cloud Tasks retries it
            results.append(type(exc).__name__)

    threads = [threading.Thread(target=claim, args=(n,)) for n in attempts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def test_a_retry_never_takes_a_live_worker_over_while_its_renewal_is_on_the_wire(
    stack: Stack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live worker's beat waits a heartbeat interval after its last renewal, then reads and writes: its next write
    lands a heartbeat interval plus those round trips after the last one. A retry of its task (a copy's retry after a
    refusal, a missed dispatch deadline) whose claim read the session in that gap took the session over from the live
    worker, which was then told nothing until its next commit: an outward call it was making was reported to the
    model as "outcome unknown" by the takeover, and its answer could be posted by both."""
    seconds = 20  # a heartbeat of 5 s, and 2.5 s of slack for the claim below on a loaded machine
    at = firestore.now()
    queued = Session.new(session_id=f"alive-{uid}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts="1.0",
                         trigger_ts="1.0", trigger_user=HUMAN, text="x", created_at=at)  # fmt: skip
    firestore.session_ref(queued.session_id).create(queued.to_doc())
    live = sessions.claim_session(queued.session_id, worker="alive", task="t", attempt=0, lease_seconds=seconds)
    assert live.result == ClaimResult.CLAIMED
    assert live.session is not None
    due, landed = threading.Event(), threading.Event()
    renew = lease.renew

    def on_the_wire(session: Session, *, lease_seconds: int) -> bool:
        due.set()  # the beat is due: its read and write are on their way (as slow as the claim below)
        landed.wait(60)
        return renew(session, lease_seconds=lease_seconds)

    monkeypatch.setattr(lease, "renew", on_the_wire)
    with heartbeat.kept(live.session, lease_seconds=seconds, for_seconds=60):
        assert due.wait(30), "the heartbeat never beat"
        try:
            retry = sessions.claim_session(queued.session_id, worker="retry", task="t", attempt=1,
                                           lease_seconds=seconds)  # fmt: skip
        finally:
            landed.set()
    assert retry.result == ClaimResult.RENEWED_LATELY, retry.result
    found = sessions.get_session(queued.session_id)
    assert found is not None
    assert found.lease.worker == "alive"

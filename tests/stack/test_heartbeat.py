"""Issue 24.9 and 24.11's takeovers count: a worker renews a short lease while it works, so a model call longer
than the lease keeps its session, and a worker SIGKILLed with no redelivery from Cloud Tasks is known within one
lease: a message in its thread after that starts the takeover at once, and the takeover is counted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.slack import surface
from shared.state import firestore, sessions
from shared.state.models import SessionKind, SessionStatus
from shared.state.session_model import Session
from tests import delivery
from tests.agent_helpers import HUMAN, wait_status
from tests.poll import wait_for
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
SHORT_LEASE = 10  # long enough for a claim that is slow on a loaded machine


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    with counted_rig(stack, monkeypatch, SESSION_LEASE_SECONDS=str(SHORT_LEASE)) as rig:
        yield rig


def test_a_model_call_longer_than_the_lease_keeps_the_session(rig: cost.Rig) -> None:
    """Without the heartbeat the lease ran out during the call: any delivery could take a live worker's session."""
    session_id = rig.start("think for a while")
    rig.script(G.delayed(SHORT_LEASE * 2.5, G.text("Thought it through.")))
    delivered_keeping_its_lease(rig, session_id, "the model call in flight")
    done = rig.session(session_id)
    assert (done.status, done.lease.takeovers) == (SessionStatus.DONE, 0)


def delivered_keeping_its_lease(rig: cost.Rig, session_id: str, call: str) -> None:
    """Deliver the session's task; once its (held) model call is in flight, every look at the session until the
    delivery returns finds a live lease."""
    worker = threading.Thread(target=rig.deliver, args=(session_id,))
    worker.start()
    try:
        wait_for(lambda: [r for r in rig.gemini.requests() if rig.uid in str(r["body"])], timeout=60, what=call)
        assert_lease_kept(rig, session_id, worker)
    finally:
        worker.join(60)


def assert_lease_kept(rig: cost.Rig, session_id: str, worker: threading.Thread) -> None:
    """Every look at the session while ``worker`` delivers it finds a live lease."""
    expired: list[tuple[Session, datetime]] = []
    while worker.is_alive():
        found, at = rig.session(session_id), firestore.now()
        if found.status == SessionStatus.RUNNING and found.lease.until is not None and found.lease.until <= at:
            expired.append((found, at))
        worker.join(0.5)
    assert not expired, f"the lease ran out while the worker lived: {[(f.lease.until, at) for f, at in expired]}"


def test_a_status_slack_is_slow_to_set_again_never_delays_the_lease(
    rig: cost.Rig, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat also sets the status again during a long step (Slack removes it after two minutes): that call
    held by a slow Slack for longer than the lease must not hold the lease's renewal with it."""
    monkeypatch.setattr(surface, "STATUS_REFRESH_SECONDS", 1.0, raising=False)
    session_id = rig.start("think for a while")
    rig.script(G.delayed(SHORT_LEASE * 2.5, G.text("Thought it through.")))
    worker = threading.Thread(target=rig.deliver, args=(session_id,))
    worker.start()
    try:
        wait_for(lambda: fake_slack.calls("assistant.threads.setStatus"), timeout=60, what="the first status")
        fake_slack.slow("assistant.threads.setStatus", SHORT_LEASE * 1.5, times=1)  # the heartbeat's, held
        wait_for(lambda: len(fake_slack.calls("assistant.threads.setStatus")) >= 2, timeout=60,
                 what="the status set again while the model thinks")  # fmt: skip
        assert_lease_kept(rig, session_id, worker)
    finally:
        fake_slack.release("assistant.threads.setStatus")
        worker.join(60)
    done = rig.session(session_id)
    assert (done.status, done.lease.takeovers) == (SessionStatus.DONE, 0)


@pytest.fixture
def short_lease_worker(stack: Stack) -> Iterator[None]:
    """agent_session with a short lease, and no redelivery: this test delivers its one task itself, once."""
    saved = dict(stack.function_env.get("agent_session", {}))
    stack.function_env["agent_session"] = {**saved, "SESSION_LEASE_SECONDS": str(SHORT_LEASE)}
    stack.kill_function("agent_session")
    stack.start_function("agent_session")
    try:
        yield
    finally:
        stack.function_env["agent_session"] = saved
        if "agent_session" in stack.procs:
            stack.kill_function("agent_session")
        stack.start_function("agent_session")


@pytest.mark.usefixtures("short_lease_worker")
def test_a_killed_worker_is_known_within_a_lease_and_a_message_takes_it_over_at_once(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    root = fake_slack.user_message(HUMAN, channel, f"deploy it [{channel}]")["ts"]  # no mention: no session yet
    queued = Session.new(session_id=f"dying-{uid}", kind=SessionKind.MENTION, channel=channel, thread_ts=root,
                         trigger_ts=root, trigger_user=HUMAN, text=f"deploy it [{channel}]",
                         created_at=firestore.now())  # fmt: skip
    firestore.session_ref(queued.session_id).create(queued.to_doc())
    script(G.delayed(600, G.text("never said")), G.text("Deployed, after the takeover."))
    url = stack.function_url("agent_session")
    once = threading.Thread(target=delivery.deliver, args=(url, queued.session_id),
                            kwargs={"task": f"once-{uid}", "max_attempts": 1, "timeout": 30})  # fmt: skip
    once.start()
    fake_gemini.wait_for_requests(1, timeout=30)
    alive = wait_status(queued.session_id, SessionStatus.RUNNING)
    stack.kill_function("agent_session")  # SIGKILL mid model call; Cloud Tasks will not deliver again
    stack.start_function("agent_session")
    once.join(60)

    # Known dead within one lease of its last heartbeat: the lease is not renewed any more.
    last = alive.lease.until or firestore.now()
    wait_for(lambda: firestore.now() > last + timedelta(seconds=1), timeout=SHORT_LEASE + 5, what="the lease to end")
    dead = sessions.get_session(queued.session_id)
    assert dead is not None
    assert dead.status == SessionStatus.RUNNING
    assert dead.lease.until is not None
    assert dead.lease.until < firestore.now()
    assert dead.lease.until - last < timedelta(seconds=SHORT_LEASE)  # at most the beats before the kill

    fake_slack.user_message(HUMAN, channel, "are you still there?", thread_ts=root)  # starts the takeover at once
    done = wait_status(queued.session_id, SessionStatus.DONE, timeout=60)
    assert done.lease.takeovers == 1  # issue 24.11: counted, and kept after the takeover's progress
    assert fake_slack.bot_replies(channel, root)[-1]["text"] == "Deployed, after the takeover."


def test_a_takeover_past_the_wall_budget_keeps_its_lease_through_the_wrap_up(rig: cost.Rig) -> None:
    """Defect: the heartbeat ran for what was left of the wall budget plus a wrap-up's time, counted from the
    session's first claim; a takeover that started later than that (its worker died long ago) never renewed its
    lease, so its wrap-up turn, a model call, could outlive the lease and be taken over, and answered, twice."""
    session_id = rig.start("think for a while")
    long_ago = firestore.now() - timedelta(hours=1)  # past any wall budget (at most 1,700 s) and its wrap-up
    firestore.session_ref(session_id).update({
        "status": SessionStatus.RUNNING.value, "worker": "gone", "lease_task": "t",
        "lease_until": long_ago + timedelta(seconds=SHORT_LEASE), "started_at": long_ago,
    })  # fmt: skip
    rig.script(G.delayed(SHORT_LEASE * 1.5, G.text("Wrapped up.")))  # outlives a lease nobody renews
    delivered_keeping_its_lease(rig, session_id, "the wrap-up's model call in flight")
    done = rig.session(session_id)
    assert (done.status, done.lease.takeovers) == (SessionStatus.DONE, 1)

"""Issue 24.2: every way a session leaves ``queued`` or ``running`` takes its start back from the running counters,
exactly once.

The paths run the product's own code here (ingress, agent_session, sweep), with the limits on, on the stack's
emulators (``tests.rigs.counted_rig``); the property test drives random lifecycles through the state layer, racing
stale workers, stops and sweeps against each other, and checks the counters after every step.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.state import events, firestore, quotas, sessions, steps, stop_requests
from shared.state.models import SessionStatus
from shared.state.new_sessions import mention_session
from shared.state.session_model import Session, SessionUpdate
from tests.poll import wait_for
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack
G = FakeGemini
USER = "U0COUNTED"


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    """The product here, with two running sessions per person and per channel allowed."""
    limits = {"USER_SESSIONS_PER_HOUR": "0", "CHANNEL_SESSIONS_PER_HOUR": "0", "USER_RUNNING_SESSIONS": "2",
              "CHANNEL_RUNNING_SESSIONS": "2"}  # fmt: skip
    with counted_rig(stack, monkeypatch, **limits) as rig:
        yield rig


def counter(name: str) -> dict[str, Any]:
    return firestore.db().collection(quotas.LIMITS).document(name).get().to_dict() or {}


def running(user: str, channel: str | None = None) -> tuple[int, list[str]]:
    """The person's (or the channel's) running count and the sessions it lists."""
    found = counter(f"channel-{channel}" if channel else f"person-{user}")
    return int(found.get("running") or 0), sorted(found.get("sessions") or {})


def start(rig: cost.Rig, text: str, *, user: str = USER) -> str:
    reply: dict[str, Any] = {}
    rig.ingress(rig.mention(text, user=user), reply)
    assert "session_id" in reply, reply
    return str(reply["session_id"])


def say(rig: cost.Rig, session_id: str, text: str) -> dict[str, Any]:
    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, text), reply)
    return reply


def assert_released(rig: cost.Rig, *session_ids: str) -> None:
    """None of these sessions counts any more, for the person or for its channel (never below zero)."""
    for session_id in session_ids:
        found = rig.session(session_id)
        for count, listed in (running(USER), running(USER, found.origin.channel)):
            assert session_id not in listed
            assert count == len(listed) >= 0
        assert (firestore.session_ref(session_id).get().to_dict() or {}).get(quotas.RELEASES) == []


def test_sessions_stopped_while_queued_stop_counting(rig: cost.Rig) -> None:
    """The review's reproduction: two mention-then-"stop" pairs locked the person out ("2 requests running at
    once") until the counters' 30-minute recount."""
    stopped = []
    for n in range(2):
        session_id = start(rig, f"job {n}")
        assert say(rig, session_id, "stop") == {"ok": True, "stop": "stopped"}
        rig.expect(session_id, SessionStatus.STOPPED)
        stopped.append(session_id)
    assert running(USER) == (0, [])
    assert_released(rig, *stopped)
    admitted = [start(rig, f"after the stops {n}") for n in range(2)]  # both fit again
    assert running(USER) == (2, sorted(admitted))


def test_a_session_stopped_while_running_stops_counting_once(rig: cost.Rig) -> None:
    session_id = start(rig, "think slowly")
    rig.script(G.delayed(3, G.text("never said")))
    worker = threading.Thread(target=rig.deliver, args=(session_id,))
    worker.start()
    try:
        wait_for(lambda: rig.session(session_id).status == SessionStatus.RUNNING, what="the session running")
        assert say(rig, session_id, "stop") == {"ok": True, "stop": "stopped"}
    finally:
        worker.join(60)
    rig.expect(session_id, SessionStatus.STOPPED)
    assert_released(rig, session_id)
    assert running(USER) == (0, [])


def test_done_failed_and_paused_sessions_stop_counting(rig: cost.Rig) -> None:
    done, failed = start(rig, "answer"), start(rig, "fail")
    assert running(USER)[0] == 2
    rig.script(G.text("Done."))
    rig.deliver(done)
    rig.expect(done, SessionStatus.DONE)
    assert_released(rig, done)
    paused = start(rig, "ask")
    rig.script(G.error(503, "UNAVAILABLE", "the model is down", times=20))
    rig.deliver(failed)
    rig.expect(failed, SessionStatus.FAILED)
    assert_released(rig, failed)
    rig.gemini.reset()  # the outage's unused replies
    rig.script(G.call("ask_operator", question="Which one?", options=["a", "b"]))
    rig.deliver(paused)
    rig.expect(paused, SessionStatus.PAUSED)
    assert_released(rig, paused)
    # Abandoned by the sweep days later: it was taken back when it paused, and is not taken back again.
    rig.sweep(firestore.now() + timedelta(days=30))
    rig.expect(paused, SessionStatus.ABANDONED)
    assert running(USER) == (0, [])


def dead_worker(rig: cost.Rig, session_id: str, **fields: Any) -> None:
    """Claim ``session_id`` as a worker that dies at once: running, under a lease already expired."""
    claimed = sessions.claim_session(session_id, worker="dead", task="t-dead", attempt=0, lease_seconds=0)
    assert claimed.session is not None
    if fields:
        firestore.session_ref(session_id).update(fields)


def test_a_dead_workers_session_given_up_by_the_sweep_stops_counting(rig: cost.Rig) -> None:
    session_id = start(rig, "die")
    dead_worker(rig, session_id)
    assert running(USER) == (1, [session_id])
    rig.sweep(firestore.now() + timedelta(days=1))
    rig.expect(session_id, SessionStatus.SILENT_EXIT)
    assert_released(rig, session_id)
    rig.sweep(firestore.now() + timedelta(days=2))  # again: nothing is taken back twice
    assert running(USER) == (0, [])


def test_a_session_given_up_after_the_rescues_takeovers_stops_counting(rig: cost.Rig) -> None:
    session_id = start(rig, "die at one step every time")
    dead_worker(rig, session_id, takeovers_without_progress=3)
    rig.deliver(session_id)  # the rescue's delivery: a fourth takeover without progress is one too many
    rig.expect(session_id, SessionStatus.FAILED)
    assert_released(rig, session_id)


# --- the property: random lifecycles, raced, end with every counter at zero ---------------------------------


class Lifecycle:
    """A few sessions of one person in one channel, driven by random moves of their workers, stops and sweeps."""

    def __init__(self, seed: int, uid: str, *, size: int = 3) -> None:
        self.random = random.Random(seed)
        self.uid = f"{uid}S{seed}"
        self.user, self.channel = f"U{self.uid}", f"C{self.uid}"
        self.quota = quotas.Quota(0, 0, 100, 100, quotas.RUNNING_FOR)
        self.ids: list[str] = []
        self.workers: dict[str, list[Session]] = {}  # every claim's view, stale ones included
        for n in range(size):
            at = firestore.now()
            session = mention_session(event_id=f"Ev{self.uid}n{n}", channel=self.channel, thread_ts=f"{n}.0",
                                      ts=f"{n}.0", user=self.user, text="x", at=at)  # fmt: skip
            started = events.start_session_for_event(event_id=f"Ev{self.uid}n{n}", event_type="app_mention",
                                                     session=session, quota=self.quota)  # fmt: skip
            assert started.outcome == events.Start.STARTED
            self.ids.append(session.session_id)
            self.workers[session.session_id] = []

    def status(self, session_id: str) -> str:
        return str((firestore.session_ref(session_id).get().to_dict() or {}).get("status"))

    def move(self) -> str:
        session_id = self.random.choice(self.ids)
        move = self.random.choice(["claim", "claim", "step", "pause", "end", "end", "stop", "sweep", "abandon"])
        views = self.workers[session_id]
        view = self.random.choice(views) if views else None  # a stale view is a worker that lost its lease
        try:
            if move == "claim":
                lease = self.random.choice([0, 60])
                claim = sessions.claim_session(session_id, worker=f"w{len(views)}", task=f"t{len(views)}",
                                               attempt=0, lease_seconds=lease)  # fmt: skip
                if claim.session is not None:
                    views.append(claim.session)
            elif move in {"step", "pause", "end"} and view is not None:
                ends = [SessionStatus.DONE, SessionStatus.FAILED, SessionStatus.SILENT_EXIT, SessionStatus.STOPPED]
                status = {"step": None, "pause": SessionStatus.PAUSED, "end": self.random.choice(ends)}[move]
                fields: SessionUpdate = {"status": status} if status is not None else {}
                steps.commit_step(view, None, lease_seconds=60, fields=fields, wait_for_notes=False)
            elif move == "stop":
                stop_requests.request_stop(session_id, by="<@U0OPERATOR>")
            elif move == "sweep":  # the sweep ends a running session whose lease expired
                sessions.end_session(session_id, expect=SessionStatus.RUNNING, status=SessionStatus.SILENT_EXIT,
                                     cutoff=firestore.now() + timedelta(hours=1))  # fmt: skip
            elif move == "abandon":
                sessions.end_session(session_id, expect=SessionStatus.PAUSED, status=SessionStatus.ABANDONED)
        except steps.LeaseLost:
            pass  # a stale worker, refused: the real race
        return f"{move} {session_id[-4:]}"

    def check(self, history: list[str]) -> None:
        """The counters hold exactly the sessions still queued or running."""
        live = sorted(s for s in self.ids if self.status(s) in {"queued", "running"})
        for name in (f"person-{self.user}", f"channel-{self.channel}"):
            found = counter(name)
            listed = sorted(found.get("sessions") or {})
            assert (int(found.get("running") or 0), listed) == (len(live), live), history

    def finish(self) -> None:
        """Whatever is left: stopped, or ended by the sweep."""
        for session_id in self.ids:
            stop_requests.request_stop(session_id, by="the test")
            sessions.end_session(session_id, expect=SessionStatus.RUNNING, status=SessionStatus.SILENT_EXIT,
                                 cutoff=firestore.now() + timedelta(hours=1))  # fmt: skip


@pytest.mark.parametrize("seed", range(12))
def test_random_lifecycles_leave_every_counter_at_zero(stack: Stack, uid: str, seed: int) -> None:
    life = Lifecycle(seed, uid)
    life.check([])
    history: list[str] = []
    for _ in range(14):
        history.append(life.move())
        life.check(history)
    life.finish()
    assert all(life.status(s) not in {"queued", "running"} for s in life.ids)
    life.check([*history, "finish"])
    assert counter(f"person-{life.user}")["running"] == 0
    assert counter(f"channel-{life.channel}")["running"] == 0

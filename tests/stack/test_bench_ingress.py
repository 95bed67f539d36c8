"""The ingress benchmark's rate-limit parts (``bench/ingress.py``, ``bench/ingress_limits.py``) on the test stack's
Firestore: a run whose limits-on starts were not all counted fails, and the start commit's variants each commit."""

from __future__ import annotations

import json

import pytest

from bench import ingress, ingress_limits
from infra.stack import Stack
from shared.state import events
from shared.state.firestore import now
from shared.state.new_sessions import mention_session

pytestmark = pytest.mark.stack


def start(body: bytes) -> None:
    """Start the session of one of the benchmark's mentions as the limits-on server does, counted."""
    delivery = json.loads(body)
    event = delivery["event"]
    session = mention_session(event_id=delivery["event_id"], channel=event["channel"], thread_ts=event["ts"],
                              ts=event["ts"], user=event["user"], text=event["text"], at=now())  # fmt: skip
    started = events.start_session_for_event(
        event_id=delivery["event_id"], event_type=event["type"], session=session, quota=ingress_limits.ON
    )
    assert started.outcome == events.Start.STARTED


def test_a_limits_on_start_that_was_not_counted_fails_the_run(stack: Stack) -> None:
    for _ in range(2):  # a batch that crossed the hour is not checked: take another
        batch, counted, began = ingress.load("ours_limits", "http://127.0.0.1:9/", 3), ingress.Counted(), now()
        for _, body, _ in batch[:2]:
            start(body)
        counted.add(batch, began, now())
        if counted.sent:
            break
    assert sum(counted.sent.values()) == 3
    with pytest.raises(RuntimeError, match="counters missed starts"):
        counted.check()  # two of the three were counted
    start(batch[2][1])
    counted.check()


def test_the_start_commit_is_timed_with_the_limits_off_and_on(stack: Stack) -> None:
    costs = ingress_limits.measure(count=3, warmup=1, emulator=stack.procs["firestore"].pid)
    assert list(costs.commit) == list(ingress_limits.VARIANTS)
    assert all(ms > 0 for ms in costs.commit.values())
    assert costs.building > 0
    assert list(costs.cpu) == list(ingress_limits.VARIANTS)
    assert all(client > 0 and emulator >= 0 for client, emulator in costs.cpu.values())

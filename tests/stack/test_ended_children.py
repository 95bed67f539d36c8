"""What follows a delegated child's stored end is finished by a later delivery when its own delivery could not.

A child that fails tells its parent and stops what it delegated, after storing its end. When that part fails (a
Firestore hiccup), the delivery is retried and the retry finds the child ended: it tells the parent again (fenced,
so once) and now stops the child's own children too. Before, the retry only told the parent, and a child given up
after its last crashed attempt swallowed the failure and answered 2xx, so nothing ever stopped its children: their
results went nowhere while they ran on against the tree's budget.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from bench import cost
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.asks import delegation, stopping
from shared.handlers import agent_session
from shared.state import ids
from shared.state.firestore import now
from shared.state.models import SessionStatus
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


def _failing_child_with_a_child(rig: cost.Rig, failure: dict[str, Any] | None = None) -> tuple[str, str]:
    """A parent that delegates one non-blocking task and ends; that child delegates one of its own (queued, never
    delivered here), then its model request gets ``failure`` (by default it stays unavailable: the child fails).
    Returns the child and the grandchild."""
    tag = uuid.uuid4().hex[:10]
    task, subtask = f"check the disks [{tag}]", f"check disk one [{tag}]"
    parent = rig.start(f"check the fleet {tag}")
    rig.script(FakeGemini.call("delegate", task=task, blocking=False), FakeGemini.text("Started it."))
    rig.gemini.script(
        FakeGemini.matching(json.dumps({"task": task}), FakeGemini.call("delegate", task=subtask, blocking=False)),
        FakeGemini.matching(
            json.dumps({"task": task}), failure or FakeGemini.error(503, "UNAVAILABLE", "overloaded", times=9)
        ),
    )
    rig.deliver(parent)
    rig.expect(parent, SessionStatus.DONE)
    child = ids.child_id(parent, 1, 0)
    return child, ids.child_id(child, 1, 0)


def _stop_fails_once(monkeypatch: pytest.MonkeyPatch, child: str) -> list[str]:
    """``stop_children`` of ``child`` fails the first time (after its end is stored); the calls made."""
    stop_children = stopping.stop_children
    calls: list[str] = []

    def once(session: Any, *, by: str) -> list[str]:
        calls.append(session.session_id)
        if session.session_id == child and calls.count(child) == 1:
            raise gexc.ServiceUnavailable("firestore hiccup")  # type: ignore[no-untyped-call]
        return stop_children(session, by=by)

    monkeypatch.setattr(stopping, "stop_children", once)
    return calls


def _delivery(session_id: str, attempt: int) -> int:
    headers = {"x-cloudtasks-taskname": f"t-{session_id}", "x-cloudtasks-taskretrycount": str(attempt)}
    _, status = agent_session.handle(json.dumps({"session_id": session_id}).encode(), headers)
    return status


@pytest.mark.timeout(300)
@pytest.mark.parametrize("attempt", [0, 2], ids=["a retry left", "its last attempt: given up"])
def test_a_failed_childs_children_are_stopped_when_stopping_them_failed_after_its_end(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, attempt: int
) -> None:
    """The child's end is stored, then stopping its own child fails. With retries left, the delivery asks for one,
    and the retry stops the grandchild (before, it told the parent only). On its last attempt the crash gives the
    child up, which finds it ended: it asks for a retry too (before, it logged and answered 2xx), and that retry
    stops the grandchild."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        child, grandchild = _failing_child_with_a_child(rig)
        calls = _stop_fails_once(monkeypatch, child)
        assert _delivery(child, attempt) == 500
        rig.expect(child, SessionStatus.FAILED)
        assert rig.session(grandchild).stop_requested is None
        assert _delivery(child, attempt + 1) == 200  # Cloud Tasks' retry: it finds the child ended
        assert rig.session(grandchild).stop_requested == stopping.DELEGATOR_ENDED
        assert calls.count(child) == 2
        assert _delivery(child, attempt + 2) == 200  # a duplicate delivery changes nothing more
        rig.deliver(grandchild)  # queued again to end through a worker, as a stopped child is
        rig.expect(grandchild, SessionStatus.STOPPED)
        rig.gemini.reset()  # the late result's continuation is not delivered


@pytest.mark.timeout(300)
def test_a_child_the_sweep_fails_is_finished_by_its_delivery_when_telling_its_parent_failed(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child whose worker died for good is failed by the sweep, which then tells its parent and stops what the child
    delegated. When telling the parent fails (a Firestore hiccup), the sweep queues a delivery of the child's task,
    whose retries tell the parent and stop the grandchild. Before, the sweep logged the error and never came back
    to a child it had ended: the grandchild ran on, and the parent heard only from a later sweep's check of it."""
    with counted_rig(stack, monkeypatch, MODEL_RETRY_ATTEMPTS="1") as rig:
        # Its model's reply cannot be read as a turn: the attempt crashes and is left for a retry that never comes.
        child, grandchild = _failing_child_with_a_child(rig, FakeGemini.error(400, "INVALID_ARGUMENT", "no such thing"))
        assert _delivery(child, 0) == 500
        rig.expect(child, SessionStatus.RUNNING)
        resume_parent = delegation.resume_parent
        told: list[str] = []

        def fails_once(ended: Any, finished: Any) -> None:
            told.append(ended.session_id)
            if len(told) == 1:
                raise gexc.ServiceUnavailable("firestore hiccup")  # type: ignore[no-untyped-call]
            resume_parent(ended, finished)

        monkeypatch.setattr(delegation, "resume_parent", fails_once)
        queued = len(rig.created_tasks.order)
        summary = rig.sweep(now() + timedelta(days=1))
        rig.expect(child, SessionStatus.FAILED)
        assert summary["errors"] >= 1
        assert told == [child]
        assert rig.session(grandchild).stop_requested is None
        assert child in rig.created_tasks.order[queued:]  # its delivery, queued by the sweep
        rig.deliver(child)
        assert told == [child, child]
        assert rig.session(grandchild).stop_requested == stopping.DELEGATOR_ENDED
        rig.gemini.reset()  # the late result's continuation is not delivered

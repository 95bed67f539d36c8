"""Trees without contention (issue 28.4): what a delegated child's end costs in Firestore does not grow with its
siblings, and children ending together still leave the tree's status message showing every end.

Before, each child's end refreshed the status message by reading every member of the tree (one query returning
each sibling): a tree of 8 cost its first child 7 reads more than a tree of 1 (N children ending: N² reads).
"""

from __future__ import annotations

import threading
import uuid

import pytest

from bench import cost
from bench.firestore_ops import Ops
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.state import ids
from shared.state.models import SessionStatus
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack

ROOMY = {"TREE_MAX_TURNS": "200", "TREE_MAX_TOOL_CALLS": "400"}  # room for 8 children
TREE_MARK = ":busts_in_silhouette:"  # the status message listing a tree's delegated tasks


def _fan_out(rig: cost.Rig, children: int) -> tuple[str, list[str]]:
    """A parent whose one turn starts ``children`` non-blocking children and ends; returns it and its children."""
    tag = uuid.uuid4().hex[:10]
    tasks = [f"check part {n} [{tag}]" for n in range(children)]
    parent = rig.start(f"check every part {tag}")
    rig.script(FakeGemini.calls(*[("delegate", {"task": task, "blocking": False}) for task in tasks]),
               FakeGemini.text("Started them."))  # fmt: skip
    for n, task in enumerate(tasks):  # after the parent's replies: its second request holds the tasks too
        rig.gemini.script(FakeGemini.matching(task, FakeGemini.text(f"part {n} is fine")))
    rig.deliver(parent)
    rig.expect(parent, SessionStatus.DONE)
    started = [ids.child_id(parent, 1, n) for n in range(children)]
    assert all(rig.session(child) for child in started)
    return parent, started


def _first_child_end(rig: cost.Rig, children: int) -> Ops:
    _, child_ids = _fan_out(rig, children)
    ops = rig.delivered(child_ids[0], SessionStatus.DONE)
    for child in child_ids[1:]:
        rig.deliver(child)
    return ops


@pytest.mark.timeout(300)
def test_a_childs_end_costs_the_same_in_a_tree_of_one_and_of_eight(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        alone = _first_child_end(rig, 1)
        among_eight = _first_child_end(rig, 8)
        rig.gemini.reset()  # the late results' continuations are not delivered: their replies are not asked for
    assert among_eight.billed() == alone.billed()
    assert alone.queries == 0  # the tree is not read whole at a child's end


@pytest.mark.timeout(300)
def test_children_ending_together_leave_every_end_in_the_status_message(
    stack: Stack, fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        parent, child_ids = _fan_out(rig, 8)
        workers = [threading.Thread(target=rig.deliver_retried, args=(child,)) for child in child_ids]

        def all_at_once() -> None:
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()

        ops = rig.measure(all_at_once)
        for child in child_ids:
            rig.expect(child, SessionStatus.DONE)
        origin = rig.session(parent).origin
        rig.gemini.reset()
    [status] = [m for m in fake_slack.bot_replies(origin.channel, origin.thread_ts) if m["text"].startswith(TREE_MARK)]
    assert "(8 of 8 finished)" in status["text"]
    assert ops.rollbacks == 0  # no child's end transacts on a document a sibling writes
    assert [line.endswith("done_") for line in status["text"].splitlines()[1:]] == [True] * 8

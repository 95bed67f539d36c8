"""A wide non-blocking fan-out (issue 28.4): children ending together never contend on their parent's document.

Each non-blocking child's end writes its own document and its result record; the parent's transcript reads the
records at its step commits (``shared/state/results.py``), and a child that ends after its parent did brings its
result in a continuation. The product's code runs in this process on the emulator (a tree budget wide enough for
ten children), every child's task delivered at the same moment, twice at once, one thread each, as deployed Cloud
Tasks may: no delivery crashes, no child fails, every result reaches the parent's transcript exactly once, and the
Firestore operations of a child's deliveries do not grow with the number of its siblings.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from bench import cost
from bench.firestore_ops import Ops
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.handlers import agent_session
from shared.state import firestore, ids, sessions, steps
from shared.state.models import SessionStatus, StepKind
from tests.poll import wait_for
from tests.rigs import counted_rig

pytestmark = [pytest.mark.stack, pytest.mark.timeout(360)]  # ten children and their copies, on a busy machine
G = FakeGemini
WIDE = {"TREE_MAX_TURNS": "200", "TREE_MAX_TOOL_CALLS": "400", "SESSION_MAX_TURNS": "20",
        "SESSION_MAX_TOOL_CALLS": "40", "CHILD_MAX_TURNS": "3"}  # fmt: skip


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    with counted_rig(stack, monkeypatch, **WIDE) as rig:
        yield rig


def deliver(session_id: str, task: str, crashed: list[str]) -> None:
    """One task's delivery as Cloud Tasks makes it: again (a higher retry count) until 2xx."""
    body = json.dumps({"session_id": session_id}).encode()
    for attempt in range(8):
        headers = {"x-cloudtasks-taskname": task, "x-cloudtasks-taskretrycount": str(attempt)}
        reply, status = agent_session.handle(body, headers)
        if status == 200:
            return
        if reply.get("error") in {"session attempt failed, retry", "contended; retry"}:  # a commit aborted, say
            crashed.append(f"{session_id}: attempt {attempt} crashed")
        time.sleep(0.2 * (attempt + 1))
    crashed.append(f"{session_id}: never delivered")


def fan_out(rig: cost.Rig, children: int) -> tuple[str, list[str], Ops, list[str]]:
    """A parent that delegates ``children`` non-blocking tasks and goes on (its next reply held 3 s); every child's
    task delivered twice at once. Returns the parent, its children, the children's deliveries' operations and any
    delivery that crashed."""
    tag = rig.uid
    tasks = [f"check shard {n} of {tag}" for n in range(children)]
    rig.script(G.calls(*(("delegate", {"task": t, "blocking": False}) for t in tasks)))
    # The parent's later replies match its own conversation only: an item without a match answers any request, so
    # a child whose request came before the parent's next one took the parent's reply (a flaky "lost" result).
    ours = FakeGemini.matching(f"check every shard {tag}", G.delayed(3, G.text("Started the checks.")))
    rig.gemini.script(ours)
    for n, task in enumerate(tasks):
        rig.gemini.script(FakeGemini.matching(json.dumps({"task": task}), G.text(f"shard {n} of {tag} is clean")))
    for _ in range(children + 1):  # its later turns, however the results batch
        rig.gemini.script(FakeGemini.matching(f"check every shard {tag}", G.text("Noted.")))
    parent = rig.start(f"check every shard {tag}")
    crashed: list[str] = []
    runs = threading.Thread(target=deliver, args=(parent, f"p-{parent}", crashed))
    runs.start()
    child_ids = [ids.child_id(parent, 1, n) for n in range(children)]
    wait_for(lambda: all(sessions.get_session(c) for c in child_ids), timeout=120, what="the parent's children")
    before = rig.counter.snapshot()
    copies = [threading.Thread(target=deliver, args=(c, f"t-{c}", crashed)) for c in child_ids for _ in range(2)]
    for copy in copies:
        copy.start()
    for copy in copies:
        copy.join()
    ops = rig.counter.snapshot() - before
    runs.join()
    later = [ids.child_result_id(c) for c in child_ids]  # a late result's continuation: its task went to the sink

    def drained() -> bool:
        queued = [s for s in map(sessions.get_session, later) if s is not None and s.status == SessionStatus.QUEUED]
        for session in queued:
            deliver(session.session_id, f"l-{session.session_id}-{session.next_seq}", crashed)
        return not queued

    wait_for(drained, timeout=120, what="the late results' continuations delivered")
    return parent, child_ids, ops, crashed


def results_read(parent: str, children: int, tag: str) -> list[int]:
    """How often each child's result is among the news of the parent's transcript."""
    news = [json.dumps(s.content) for s in steps.load_steps(parent) if s.kind == StepKind.NOTES]
    return [sum(text.count(f"shard {n} of {tag} is clean") for text in news) for n in range(children)]


def test_ten_non_blocking_children_ending_together_each_reach_the_parent_once(rig: cost.Rig) -> None:
    parent, child_ids, _, crashed = fan_out(rig, 10)
    assert crashed == []
    ended = [rig.session(c) for c in child_ids]
    assert [c.status for c in ended] == [SessionStatus.DONE] * 10, [c.error for c in ended]
    assert rig.session(parent).status == SessionStatus.DONE
    late = [sessions.get_session(c) for c in (ids.child_result_id(c) for c in child_ids)]
    found = [(s.session_id, s.status.value, s.handed_to) for s in late if s is not None]
    assert results_read(parent, 10, rig.uid) == [1] * 10, (found, rig.session(parent).notes)
    root = firestore.session_ref(parent).get().to_dict() or {}
    assert not root.get("awaiting_results")
    # A late result's continuation ran (done), or ended as its result was read by the transcript already (resumed).
    assert {status for _, status, _ in found} <= {SessionStatus.DONE.value, SessionStatus.RESUMED.value}

"""Round 3's new benchmark paths (``bench/mixed_wait.py``, ``bench/trees.py``) run on the test stack: a turn waiting
on a question, a card and a child resumes once whichever is resolved last, and a blocking fan-out whose children
each ask their parent ends with every child done, each child's question answered, even when a child's first turn
crashes after its model reply (its retry asks the model again and takes the same reply: replies are scripted by
what a request holds, never by the order requests come in)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from bench import mixed_wait, trees
from infra.stack import Stack
from shared.state import sessions, steps
from shared.state.models import SessionKind, StepKind
from tests.bench_paths import each_path_once
from tests.rigs import asking_tree, counted_rig

pytestmark = pytest.mark.stack


@pytest.mark.timeout(300)
def test_each_kind_resolved_last_resumes_the_turn(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = each_path_once(stack, monkeypatch, mixed_wait.measure)
    assert set(samples) == {f"{kind}_last" for kind in mixed_wait.KINDS}


@pytest.mark.timeout(300)
def test_blocking_children_that_ask_their_parent_all_end_done(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    crashed: set[str] = set()
    lock = threading.Lock()
    commit = steps.commit_step

    def crashing_once(session: Any, step: Any, **kwargs: Any) -> Any:
        """Each child's first model turn is lost once, after the model replied and before it is stored."""
        if session.kind == SessionKind.CHILD and step is not None and step.kind == StepKind.MODEL:
            with lock:
                first = session.session_id not in crashed
                crashed.add(session.session_id)
            if first:
                raise RuntimeError("injected crash: the worker died before storing its model turn")
        return commit(session, step, **kwargs)

    monkeypatch.setattr(steps, "commit_step", crashing_once)
    # The parent may take each question and each result in a turn of its own (1 + 3 + 3): the suite's 6 turns a
    # session ran out when they arrived apart, and its last turn without tools failed the parent (a flaky failure:
    # "ended without answering"), as test_tree_contention.py found before.
    with counted_rig(stack, monkeypatch, **trees.ROOMY, SESSION_MAX_TURNS="40") as rig:
        tree = asking_tree(rig, 3)
        rig.gemini.reset()  # the plain replies scripted with room to spare
        asked = {c: s.parent_question for c in crashed if (s := sessions.get_session(c)) is not None}
        indexes = {c: s.tree.delegate_index for c in crashed if (s := sessions.get_session(c)) is not None}
    assert len(asked) == 3
    for child, question in asked.items():  # each asked once more after its crash, and had its own answer
        assert question is not None, f"{child} never asked its parent"
        assert (question.answer or "").startswith(f"shard {indexes[child]} first"), question
    assert tree.failed == 0
    assert tree.redelivered >= 3  # every child's first delivery crashed and was delivered again
    assert tree.ops.writes > 0
    assert tree.wall > trees.CHILD_MODEL_SECONDS
    assert len(crashed) == 3

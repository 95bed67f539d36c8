"""Round 3's new benchmark paths (``bench/mixed_wait.py``, ``bench/trees.py``) run on the test stack: a turn waiting
on a question, a card and a child resumes once whichever is resolved last, and a blocking fan-out whose children
each ask their parent ends with every child done."""

from __future__ import annotations

import pytest

from bench import mixed_wait, trees
from infra.stack import Stack
from tests.bench_paths import each_path_once
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


@pytest.mark.timeout(300)
def test_each_kind_resolved_last_resumes_the_turn(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    samples = each_path_once(stack, monkeypatch, mixed_wait.measure)
    assert set(samples) == {f"{kind}_last" for kind in mixed_wait.KINDS}


@pytest.mark.timeout(300)
def test_blocking_children_that_ask_their_parent_all_end_done(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    with counted_rig(stack, monkeypatch) as rig:
        tree = trees.asking(rig, 3)
        rig.gemini.reset()  # the plain replies scripted with room to spare
    assert tree.failed == 0
    assert tree.ops.writes > 0
    assert tree.wall > trees.CHILD_MODEL_SECONDS

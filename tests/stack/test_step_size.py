"""A step's tool results fit one Firestore document (1 MiB, in UTF-8) however many calls its turn made and whatever
script their text is in.

Before, the results that resumed a paused turn (its children's results, approved calls, answers) were each cut to
``MAX_TOOL_RESULT_CHARS`` but not shared out between the turn's calls as its first pass shares them, and the step's
budget was counted in characters as if each took one byte: eight blocking children each reporting 40,000 characters
of four-byte text made a step of about 1.3 MB, whose commit Firestore refused at every attempt, so the parent never
resumed.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.limits import MAX_TOOL_RESULT_CHARS, per_call_chars
from shared.state import ids
from shared.state.models import SessionStatus
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack

ROOMY = {"TREE_MAX_TURNS": "200", "TREE_MAX_TOOL_CALLS": "400"}
WIDE = "\U00020000"  # a CJK ideograph of four bytes in UTF-8


def _results(request: dict[str, Any]) -> list[str]:
    """The function responses' results of a model request, in order."""
    parts = [p for content in request["body"]["contents"] for p in content.get("parts", [])]
    return [json.dumps(p["functionResponse"]["response"], ensure_ascii=False) for p in parts if "functionResponse" in p]


@pytest.mark.timeout(300)
def test_eight_blocking_children_reporting_forty_thousand_wide_characters_each_resume_their_parent(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    children = 8
    tag = uuid.uuid4().hex[:10]
    tasks = [f"survey region {n} [{tag}-t{n}]" for n in range(children)]
    with counted_rig(stack, monkeypatch, **ROOMY) as rig:
        rig.script(FakeGemini.calls(*[("delegate", {"task": task}) for task in tasks]), FakeGemini.text("Surveyed."))
        for task in tasks:
            rig.gemini.script(FakeGemini.matching(json.dumps({"task": task}), FakeGemini.text(WIDE * 40_000)))
        parent = rig.start(f"survey every region {tag}")
        rig.deliver(parent)
        rig.expect(parent, SessionStatus.PAUSED)
        for n in range(children):
            rig.deliver(ids.child_id(parent, 1, n))
        woken = ids.resume_id(parent, 1)  # by its last child: the continuation resumes the turn with every result
        rig.deliver(woken)
        rig.expect(woken, SessionStatus.DONE)
        [resumed] = [r for r in rig.gemini.requests() if tag in json.dumps(r) and len(_results(r)) == children]
    shown = _results(resumed)
    assert all(WIDE in result for result in shown)
    assert all(len(result) <= per_call_chars(children) + 200 < MAX_TOOL_RESULT_CHARS for result in shown)

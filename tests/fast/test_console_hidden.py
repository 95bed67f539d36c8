"""The console shows a call as its approval card does: a bidi override or a zero-width character in a tool's name or
arguments is its escape, so an operator reading the console never reads a call other than the one that runs."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ops import console
from ops.names import Names
from shared.state import firestore, stale
from shared.state.models import Approval

NAMES = Names({"U0OPERATOR": "olivia"}.get)
T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
# Reads "delete ./tmp/exe.png" with the override; runs "delete ./tmp/gnp.exe".
SPOOFED = '{"path": "./tmp/\u202egnp.exe", "mode": "a\u200bll"}'


def test_a_tool_steps_name_and_arguments_show_their_hidden_characters() -> None:
    entry = {"type": "tool", "name": "delete\u2066", "args": SPOOFED, "result": "ok", "calls": None}
    shown = console._readable_audit(entry, NAMES)
    assert shown["args"] == '{"path": "./tmp/\\u202egnp.exe", "mode": "a\\u200bll"}'
    assert shown["name"] == "delete\\u2066"
    model = console._readable_audit({"type": "model", "calls": ["run\u202e"]}, NAMES)
    assert model["calls"] == ["run\\u202e"]


def test_a_pending_approvals_call_shows_its_hidden_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    pending = Approval(approval_id="a1", session_id="ev-1", transcript_id="ev-1", channel="C1", thread_ts="1.0", seq=1,
                       call_index=0, call_id=None, tool="delete\u202e", args=SPOOFED, digest="d", turn_ids=["a1"],
                       asked_at=T0, requested_by="U0OPERATOR")  # fmt: skip
    monkeypatch.setattr(firestore, "now", lambda: T0)
    monkeypatch.setattr(stale, "stale_questions", lambda *a, **k: iter(()))
    monkeypatch.setattr(stale, "stale_approvals", lambda *a, **k: iter([pending]))
    monkeypatch.setattr(stale, "sessions_created", lambda *a, **k: iter(()))
    [shown] = console.overview(NAMES)["approvals"]
    assert shown["args"] == '{"path": "./tmp/\\u202egnp.exe", "mode": "a\\u200bll"}'
    assert shown["tool"] == "delete\\u202e"

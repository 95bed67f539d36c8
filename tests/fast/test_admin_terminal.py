"""``make admin list`` prints what it read from the product's store on an operator's terminal: text written by
others (a question the model wrote from a thread, an MCP server's request for input, a denial's reason) is shown
with its control characters as escapes, so no escape sequence in it reaches the terminal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from ops import admin
from ops.names import Names

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
# Clears the screen, writes a forged line, sets the clipboard (OSC 52) and hides a link's target (OSC 8).
HOSTILE = "ok\x1b[2J\x1b[H  0h00m  nothing waits\x1b]52;c;cm0gLXJmIH4=\x07\x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\\u202e"


class _Names(Names):
    def name(self, user_id: str | None) -> str:
        return user_id or "?"


def test_text_from_the_store_reaches_the_terminal_without_control_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.state import feedback, stale

    question = SimpleNamespace(asked_at=NOW - timedelta(minutes=5), channel="C1", thread_ts="1.1", reminded_at=None,
                               text=f"MCP server `tickets` asks: {HOSTILE}", question_id="q1")  # fmt: skip
    denied = SimpleNamespace(decided_at=NOW, status=SimpleNamespace(value="denied"), decided_by="U0OPS", tool="deploy",
                             digest="abc", channel="C1", thread_ts="1.1", reason=HOSTILE, approval_id="a1")  # fmt: skip

    def none(*args: Any, **kwargs: Any) -> list[Any]:
        return []

    monkeypatch.setattr(stale, "stale_questions", lambda *a, **k: [question])
    monkeypatch.setattr(stale, "stale_approvals", none)
    monkeypatch.setattr(stale, "decided_approvals", lambda *a, **k: [denied])
    monkeypatch.setattr(stale, "stale_sessions", none)
    monkeypatch.setattr(feedback, "since", none)
    lines = admin.listing(NOW, _Names())
    shown = [line for line in lines if "q1" in line or "a1" in line]
    assert len(shown) == 2
    for line in shown:
        assert line.isprintable(), repr(line)
        assert "\\x1b" in line

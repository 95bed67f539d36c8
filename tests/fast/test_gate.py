"""The silent-exit gate, case by case, on audit logs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from shared.agent.gate import closed_loop
from shared.state.models import Audit


def model(*calls: str) -> dict[str, Any]:
    return {"type": "model", "calls": list(calls)}


def tool(name: str, *, outward: bool = False, posts: list[str] | None = None) -> dict[str, Any]:
    return {"type": "tool", "name": name, "outward": outward, "posts": posts or []}


POST = {"type": "post", "ts": "1.1"}


@pytest.mark.parametrize(
    ("name", "audit", "closed"),
    [
        ("no tools, answered", [model(), POST], True),
        ("no tools, silent", [model()], False),
        ("read-only tools, answered", [model("read_thread"), tool("read_thread"), model(), POST], True),
        ("read-only tools, silent", [model("read_thread"), tool("read_thread"), model()], False),
        ("outward work, then a post", [model("fetch_url"), tool("fetch_url", outward=True), model(), POST], True),
        ("a post, then outward work", [model(), POST, tool("fetch_url", outward=True), model()], False),
        ("ask_operator as the last call", [tool("fetch_url", outward=True), tool("ask_operator", posts=["2.2"])], True),
        (
            "an acknowledgement, then work, then silence",
            [tool("post_update", posts=["1.5"]), tool("fetch_url", outward=True), tool("read_thread"), model()],
            False,
        ),
        (
            "an update after the work closes it",
            [tool("fetch_url", outward=True), tool("post_update", posts=["3"])],
            True,
        ),
        ("nothing at all", [], False),
    ],
)
def test_gate(name: str, audit: list[dict[str, Any]], closed: bool) -> None:
    entries = [Audit.from_doc({**entry, "at": datetime(2030, 1, 1, tzinfo=UTC)}) for entry in audit]
    assert closed_loop(entries) is closed, name

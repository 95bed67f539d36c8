"""The rules a call passes before its tool runs (pure: no stack)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from shared import config
from shared.agent.tools import policy, toolset
from shared.agent.tools.base import Tier, ToolContext
from shared.agent.tools.toolset import Toolset, all_tools
from shared.slack.surface import ThreadSurface
from shared.state.models import Session, SessionKind


def context(used: dict[str, int]) -> ToolContext:
    session = Session(session_id="s", kind=SessionKind.MENTION, channel="C", thread_ts="1.0", trigger_ts="1.0",
                      trigger_user="U", text="x", created_at=datetime(2030, 1, 1, tzinfo=UTC))  # fmt: skip
    return ToolContext(session, 1, 0, "c", ThreadSurface("C", "1.0", "1.0"), used=used)


def test_fetches_are_capped_per_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FETCH_MAX_PER_SESSION", "3")
    config.reset()
    try:
        assert policy.refusal("fetch_url", {"url": "https://example.com"}, context({"fetch_url": 2})) is None
        refused = policy.refusal("fetch_url", {"url": "https://example.com"}, context({"fetch_url": 3}))
        assert refused is not None
        assert "3 times per session" in refused
        assert policy.refusal("read_thread", {}, context({"fetch_url": 3, "read_thread": 99})) is None
        # The toolset answers a refused call with the reason, without running the tool.
        response = Toolset(all_tools()).run("fetch_url", {"url": "http://127.0.0.1/"}, context({"fetch_url": 3}))
        assert response == {"error": refused}
    finally:
        config.reset()


def session_of(kind: SessionKind = SessionKind.MENTION) -> Session:
    return Session(session_id="s", kind=kind, channel="C", thread_ts="1.0", trigger_ts="1.0", trigger_user="U",
                   text="x", created_at=datetime(2030, 1, 1, tzinfo=UTC))  # fmt: skip


def test_tiers_come_from_the_decorator_and_configuration_wins_with_globs(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = {t.name: t for t in all_tools()}
    assert {n: tools[n].tier for n in ("ask_operator", "post_update", "read_thread")} == {
        "ask_operator": Tier.SAFE, "post_update": Tier.SAFE, "read_thread": Tier.SAFE,
    }  # fmt: skip
    assert tools["scale_service"].tier == Tier.APPROVE  # outward, so approve unless it says otherwise
    monkeypatch.setenv(
        "TOOL_TIERS", json.dumps({"scale_*": "safe", "restart_service": "deny", "read_thread": "approve"})
    )
    config.reset()
    try:
        assert policy.static_tier(tools["scale_service"]) == Tier.SAFE  # a glob
        assert policy.call_tier(tools["read_thread"], {}, context({})) == Tier.APPROVE  # an exact name
        declared = {d.name for d in toolset.for_session(session_of()).declarations()}
        assert "restart_service" not in declared  # a deny tool is never declared to the model
        assert "scale_service" in declared
    finally:
        config.reset()


def test_fetching_a_host_nobody_in_the_thread_named_needs_approval() -> None:
    fetch = {t.name: t for t in all_tools()}["fetch_url"]
    ctx = context({})
    ctx.thread_text = '{"from": "<@U1>", "text": "see <https://docs.example.com/page|the docs>"}'
    assert policy.call_tier(fetch, {"url": "https://docs.example.com/other"}, ctx) == Tier.SAFE
    assert policy.call_tier(fetch, {"url": "https://attacker.example/?d=secret"}, ctx) == Tier.APPROVE


def test_a_bad_tool_tiers_value_names_the_variable_and_the_tool() -> None:
    with pytest.raises(config.ConfigError, match="TOOL_TIERS: tool 'x' has tier 'maybe'"):
        _ = config.Settings({"TOOL_TIERS": '{"x": "maybe"}'}).tool_tiers

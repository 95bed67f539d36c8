"""The rules a call passes before its tool runs (pure: no stack)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import config
from shared.agent.tools import describe, policy, toolset
from shared.agent.tools.base import Tier, ToolContext
from shared.agent.tools.function import tool
from shared.agent.tools.result import ToolResult
from shared.agent.tools.toolset import Toolset, all_tools
from shared.asks import approvers
from shared.slack.surface import ThreadSurface
from shared.state.models import Approval, SessionKind
from shared.state.session_model import Session


def context(used: dict[str, int]) -> ToolContext:
    session = Session.new(session_id="s", kind=SessionKind.MENTION, channel="C", thread_ts="1.0", trigger_ts="1.0",
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
        assert response == ToolResult.fail(refused)
    finally:
        config.reset()


def session_of(kind: SessionKind = SessionKind.MENTION) -> Session:
    return Session.new(session_id="s", kind=kind, channel="C", thread_ts="1.0", trigger_ts="1.0", trigger_user="U",
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


RULED = {
    "restart_service": {"tier": "approve", "when": {"environment": ["production"]}, "otherwise": "safe"},
    "scale_*": {"tier": "approve", "approvers": ["U0LEAD", "S0ONCALL"], "approvals": 2, "when": {"name": ["api"]}},
    "pin_version": {"tier": "deny", "when": {"version": ["0.0.0"]}},
}


def test_a_rule_chooses_the_tier_and_the_approvers_by_argument_values(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = {t.name: t for t in all_tools()}
    monkeypatch.setenv("TOOL_TIERS", json.dumps(RULED))
    config.reset()
    try:
        restart, scale = tools["restart_service"], tools["scale_service"]
        assert policy.call_tier(restart, {"name": "a", "environment": "production"}, context({})) == Tier.APPROVE
        assert policy.call_tier(restart, {"name": "a", "environment": "staging"}, context({})) == Tier.SAFE
        assert policy.call_tier(restart, {"name": "a"}, context({})) == Tier.SAFE  # a listed argument is missing
        assert policy.approvers("scale_service", {"name": "api", "replicas": 2}) == policy.Approvers(
            ("U0LEAD", "S0ONCALL"), 2
        )
        # Not matched, no otherwise: the tool's own tier, and the operators decide.
        assert policy.call_tier(scale, {"name": "web", "replicas": 2}, context({})) == Tier.APPROVE
        assert policy.approvers("scale_service", {"name": "web", "replicas": 2}) == policy.Approvers()
        assert policy.approvers("restart_service", {"environment": "production"}) == policy.Approvers()
        # JSON equality: a list holding the value is not the value, 1 is not "1".
        assert not config.settings().tool_tiers["restart_service"].matches({"environment": ["production"]})
        assert not config.settings().tool_tiers["scale_*"].matches({"name": 1})
        # A call its when denies is refused; other calls of that tool are offered and run.
        assert policy.refusal("pin_version", {"name": "a", "version": "0.0.0"}, context({})) is not None
        assert policy.refusal("pin_version", {"name": "a", "version": "1.0.0"}, context({})) is None
        declared = {d.name for d in toolset.for_session(session_of()).declarations()}
        assert {"pin_version", "restart_service", "scale_service"} <= declared
    finally:
        config.reset()


@pytest.mark.parametrize(
    ("rule", "says"),
    [
        ({"tier": "aprove"}, "the rule for 'x' has tier 'aprove'"),
        ({"tier": "approve", "who": ["U1"]}, "the rule for 'x' has unknown key(s) who"),
        ({"tier": "safe", "otherwise": "approve"}, "the rule for 'x' has otherwise but no when"),
        ({"tier": "approve", "when": {"env": "prod"}}, "the rule for 'x' has when.env that is not a non-empty list"),
        ({"tier": "approve", "when": {"env": []}}, "the rule for 'x' has when.env that is not a non-empty list"),
        ({"tier": "approve", "approvers": ["riley"]}, "the rule for 'x' has approvers that are not a list"),
        ({"tier": "approve", "approvers": ["U0ONE"], "approvals": 2}, "needs 2 approvals from 1 approver(s)"),
        ({"tier": "approve", "approvals": 0}, "has approvals 0"),
        ({"tier": "safe", "approvers": ["U0ONE"]}, "but its tier is not approve"),
        (["approve"], "must be a tier (safe, approve, deny) or an object"),
    ],
)
def test_a_bad_rule_is_a_configuration_error_naming_it(rule: Any, says: str) -> None:
    with pytest.raises(config.ConfigError) as raised:
        _ = config.Settings({"TOOL_TIERS": json.dumps({"x": rule})}).tool_tiers
    assert says in str(raised.value)
    assert raised.value.variable == "TOOL_TIERS"


def test_agent_session_refuses_to_start_with_a_bad_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOL_TIERS", json.dumps({"restart_service": {"tier": "approve", "approvals": 9}}))
    config.reset()
    try:
        with pytest.raises(config.ConfigError, match="the rule for 'restart_service' has approvals 9"):
            config.check_rules(config.AGENT_SESSION)
        config.check_rules(config.SLACK_EVENTS)  # not a rule the ingress enforces
    finally:
        config.reset()


@tool(outward=True)
def deploy(name: str, environment: str = "production", version: str = "latest") -> dict[str, Any]:
    """Deploy a service (a test tool whose arguments have defaults).

    Args:
        name: The service.
        environment: Where.
        version: What.
    """
    return {"deployed": name, "environment": environment, "version": version}


def test_leaving_out_an_argument_a_rule_names_is_matched_as_the_default_the_tool_runs_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Defect: a rule's ``when`` matched only the arguments the call gave, so a call that left ``environment`` out of
    a tool defaulting it to production escaped ``{"when": {"environment": ["production"]}, "otherwise": "safe"}``
    and ran in production unapproved (and one leaving out a denied ``version`` was not refused); the edit check and
    the approvers went by the same mistake. A left-out argument counts as its schema's default now."""
    rules = {"deploy": {"tier": "approve", "approvers": ["U0LEAD"], "when": {"environment": ["production"]},
                        "otherwise": "safe"}}  # fmt: skip
    monkeypatch.setenv("TOOL_TIERS", json.dumps(rules))
    config.reset()
    try:
        assert policy.call_tier(deploy, {"name": "api"}, context({})) == Tier.APPROVE
        assert policy.call_tier(deploy, {"name": "api", "environment": "staging"}, context({})) == Tier.SAFE
        assert policy.received(deploy, {"name": "api"})["environment"] == "production"
        monkeypatch.setenv("TOOL_TIERS", json.dumps({"deploy": {"tier": "deny", "when": {"version": ["latest"]}}}))
        config.reset()
        assert "TOOL_TIERS denies it" in str(Toolset([deploy]).run("deploy", {"name": "api"}, context({})))
    finally:
        config.reset()
    schema = json.dumps(describe.schema(deploy))
    asked = {"name": "api", "environment": "staging"}
    approval = Approval(approval_id="a", session_id="s", transcript_id="s", channel="C", thread_ts="1.0", seq=1,
                        call_index=0, call_id=None, tool="deploy", args=json.dumps(asked), digest="d", turn_ids=["a"],
                        asked_at=datetime(2030, 1, 1, tzinfo=UTC), schema=schema,
                        rule_when=json.dumps({"environment": ["production"]}))  # fmt: skip
    assert approvers.crossed(approval, {"name": "api"}) == "environment"  # an edit that clears it: production

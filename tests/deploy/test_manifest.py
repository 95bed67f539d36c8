"""The Slack app manifest: minimum scopes for what the code does, and URLs filled in from Terraform."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy import manifest, restart
from tests.deploy.conftest import ROOT

EVENTS_URL = "https://us-central1-example-project.cloudfunctions.net/opagent-slack-events"
INTERACTIVITY_URL = "https://us-central1-example-project.cloudfunctions.net/opagent-slack-interactivity"

# Events the product handles, and the scope each needs (None: Slack's docs list none).
EVENT_SCOPES: dict[str, str | None] = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "app_home_opened": None,  # the Messages tab opened (agent_view)
    "app_context_changed": None,  # the feature (agent_view) is what enables it
}
# The assistant pane's events (SLACK_SURFACE=assistant), handled as well.
ASSISTANT_EVENT_SCOPES: dict[str, str | None] = {
    **{k: v for k, v in EVENT_SCOPES.items() if k not in {"app_home_opened", "app_context_changed"}},
    "assistant_thread_started": None,
    "assistant_thread_context_changed": None,
}
# Web API methods and the bot scopes they need. A method the code starts calling must be added here.
METHOD_SCOPES: dict[str, set[str]] = {
    "chat.postMessage": {"chat:write"},
    "assistant.threads.setStatus": {"chat:write"},  # chat:write since Slack's 2026-03 change (was assistant:write)
    "assistant.threads.setSuggestedPrompts": {"assistant:write"},
    "assistant.threads.setTitle": {"assistant:write"},
    "chat.update": {"chat:write"},
    "chat.postEphemeral": {"chat:write"},
    "chat.delete": {"chat:write"},
    "reactions.add": {"reactions:write"},
    "reactions.remove": {"reactions:write"},
    "reactions.get": {"reactions:read"},
    "conversations.replies": {"channels:history", "groups:history", "im:history"},
    "conversations.history": {"channels:history", "groups:history", "im:history"},
    "chat.startStream": {"chat:write"},
    "chat.appendStream": {"chat:write"},
    "chat.stopStream": {"chat:write"},
    "users.info": {"users:read"},
    "usergroups.users.list": {"usergroups:read"},
    "chat.getPermalink": set(),  # no scope of its own
    "views.open": set(),  # a modal, with a press's trigger_id: no scope of its own
    "auth.test": set(),
}


def terraform_outputs(**overrides: Any) -> dict[str, Any]:
    """What `terraform output -json` prints."""
    values = {
        "events_url": EVENTS_URL,
        "interactivity_url": INTERACTIVITY_URL,
        "function_names": {"slack_events": "opagent-slack-events", "sweep": "opagent-sweep"},
        "region": "us-central1",
        "project_id": "example-project",
        **overrides,
    }
    return {name: {"sensitive": False, "type": "string", "value": value} for name, value in values.items()}


def template() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(manifest.TEMPLATE.read_text())
    return loaded


def methods_the_code_calls() -> set[str]:
    """Slack Web API methods used through slack-sdk's WebClient anywhere in the deployed code, and in the operator
    tools (``ops/``), which call Slack with the deployed bot token (``make admin`` names people with ``users.info``).

    A method counts whether it is called (``client().chat_update(...)``) or passed on
    (``_reaction(client().reactions_add, ...)``): any attribute named like a WebClient method.
    """
    sources = [
        ROOT / "functions" / "main.py",
        *sorted((ROOT / "shared").rglob("*.py")),
        *sorted((ROOT / "ops").rglob("*.py")),
    ]
    pattern = re.compile(
        r"\.(?P<family>chat|reactions|conversations|users|views|files|pins|auth|team|bots)_(?P<name>[A-Za-z]+)\b"
    )
    api_call = re.compile(r"api_call\(\s*[\"'](?P<method>[a-z]+\.[A-Za-z.]+)[\"']")
    assistant = re.compile(r"\.assistant_threads_(?P<name>[A-Za-z]+)\b")
    groups = re.compile(r"\.usergroups_users_(?P<name>[A-Za-z]+)\b")
    found: set[str] = set()
    for path in sources:
        text = path.read_text()
        found |= {f"{m.group('family')}.{m.group('name')}" for m in pattern.finditer(text)}
        found |= {m.group("method") for m in api_call.finditer(text)}
        found |= {f"assistant.threads.{m.group('name')}" for m in assistant.finditer(text)}
        found |= {f"usergroups.users.{m.group('name')}" for m in groups.finditer(text)}
    return found


def test_the_manifest_asks_for_the_minimum_scopes() -> None:
    data = template()
    scopes = set(data["oauth_config"]["scopes"]["bot"])
    events = set(data["settings"]["event_subscriptions"]["bot_events"])
    called = methods_the_code_calls()
    unknown = called - set(METHOD_SCOPES)
    assert not unknown, f"the code calls {sorted(unknown)}: add their scopes to METHOD_SCOPES and slack/manifest.yaml"
    needed = {scope for event in events if (scope := EVENT_SCOPES[event])}
    for method in called:
        needed |= METHOD_SCOPES[method]
    assert scopes >= needed, f"missing scopes: {sorted(needed - scopes)}"
    assert scopes <= needed, f"scopes nothing uses: {sorted(scopes - needed)}"
    assert "user" not in data["oauth_config"]["scopes"], "the app acts only as its bot user"


def test_the_manifest_subscribes_to_mentions_dms_and_thread_replies() -> None:
    data = template()
    assert set(data["settings"]["event_subscriptions"]["bot_events"]) == set(EVENT_SCOPES)
    assert data["settings"]["interactivity"]["is_enabled"] is True
    assert data["settings"]["socket_mode_enabled"] is False
    assert data["features"]["bot_user"]["display_name"]
    assert data["features"]["app_home"]["messages_tab_enabled"] is True  # people can DM the bot
    # Slack's agent messaging experience: the feature app_context_changed and the assistant.threads.* methods need.
    assert data["features"]["agent_view"]["agent_description"]
    assert "assistant_view" not in data["features"]


def test_the_code_calls_the_assistant_methods_the_manifest_has_scopes_for() -> None:
    called = methods_the_code_calls()
    assistant = {"assistant.threads.setStatus", "assistant.threads.setSuggestedPrompts", "assistant.threads.setTitle"}
    assert assistant <= called
    assert "assistant:write" in template()["oauth_config"]["scopes"]["bot"]


def test_the_suggested_prompts_are_filled_in_from_terraform_outputs(tmp_path: Path) -> None:
    prompts = [{"message": "Is prod healthy?", "title": "Prod"}, {"message": "What can you do?", "title": "Help"}]
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(terraform_outputs(assistant_prompts=prompts)))
    out = tmp_path / "slack-manifest.yaml"
    assert manifest.main(["--outputs", str(outputs), "--out", str(out)]) == 0
    filled = yaml.safe_load(out.read_text())
    assert filled["features"]["agent_view"]["suggested_prompts"] == [
        {"title": "Prod", "message": "Is prod healthy?"}, {"title": "Help", "message": "What can you do?"}
    ]  # fmt: skip
    outputs.write_text(json.dumps(terraform_outputs(assistant_prompts=prompts * 3)))  # six: Slack shows four
    assert manifest.main(["--outputs", str(outputs), "--out", str(tmp_path / "m.yaml")]) == 1


def test_the_urls_are_filled_in_from_terraform_outputs(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(terraform_outputs()))
    out = tmp_path / "slack-manifest.yaml"
    assert manifest.main(["--outputs", str(outputs), "--out", str(out)]) == 0
    filled = yaml.safe_load(out.read_text())
    assert filled["settings"]["event_subscriptions"]["request_url"] == EVENTS_URL
    assert filled["settings"]["interactivity"]["request_url"] == INTERACTIVITY_URL
    # Everything else is the template's.
    original = template()
    for section in ("event_subscriptions", "interactivity"):
        filled["settings"][section]["request_url"] = original["settings"][section]["request_url"]
    assert filled == original


@pytest.mark.parametrize("bad", [None, "", "http://insecure.example/events"])
def test_a_missing_or_insecure_url_is_refused(tmp_path: Path, bad: str | None) -> None:
    outputs = terraform_outputs(events_url=bad)
    if bad is None:
        del outputs["events_url"]
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    assert manifest.main(["--outputs", str(path), "--out", str(tmp_path / "m.yaml")]) == 1
    assert not (tmp_path / "m.yaml").exists()


def test_restart_rolls_every_function_from_the_outputs() -> None:
    commands = restart.commands(terraform_outputs(), stamp=1700000000)
    assert [command[4] for command in commands] == ["opagent-slack-events", "opagent-sweep"]
    for command in commands:
        assert command[:4] == ["gcloud", "run", "services", "update"]
        assert "--region=us-central1" in command
        assert "--project=example-project" in command


def test_the_assistant_pane_manifest_is_one_switch_away(tmp_path: Path) -> None:
    """SLACK_SURFACE=assistant: the same app on the older assistant pane, its own events in place of agent view's."""
    outputs = tmp_path / "outputs.json"
    prompts = [{"title": "Status", "message": "What is the status?"}]
    outputs.write_text(json.dumps(terraform_outputs(assistant_prompts=prompts)))
    out = tmp_path / "manifest.yaml"
    assert manifest.main(["--outputs", str(outputs), "--out", str(out), "--surface", "assistant"]) == 0
    filled = yaml.safe_load(out.read_text())
    assert "agent_view" not in filled["features"]
    assert filled["features"]["assistant_view"] == {
        "assistant_description": template()["features"]["agent_view"]["agent_description"],
        "suggested_prompts": prompts,
    }
    assert set(filled["settings"]["event_subscriptions"]["bot_events"]) == set(ASSISTANT_EVENT_SCOPES)
    assert filled["oauth_config"] == template()["oauth_config"]

"""Slack's agent messaging experience (issue 27 item 1): opening the app's Messages tab (``app_home_opened``, tab
"messages") sets the suggested prompts and their title on the DM, without a thread (agent view); a DM with no
``assistant_app_thread`` root, at the top level or in a thread the person started, is a conversation with the
agent; ``app_context_changed`` is acknowledged where ``assistant_thread_context_changed`` is. The assistant pane's
events keep working (tests/stack/test_assistant.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared import config
from shared.slack.events import AssistantThread, BadEvent, Ignore, classify
from shared.state import ids
from shared.state.models import SessionStatus
from shared.usecases import assistant_pane
from tests.agent_helpers import wait_status

G = FakeGemini


def payload(event: dict[str, Any]) -> dict[str, Any]:
    return {"type": "event_callback", "event_id": "Ev2", "api_app_id": "A1", "team_id": "T1", "event": event}


def test_the_agent_view_events_are_classified() -> None:
    opened = classify(payload({"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "messages",
                               "event_ts": "1.0"}))  # fmt: skip
    assert opened == AssistantThread(event_id="Ev2", started=True, channel="D1", thread_ts=None, user="U1",
                                     context_channel=None)  # fmt: skip
    home = classify(payload({"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "home"}))
    assert isinstance(home, Ignore)
    with pytest.raises(BadEvent, match=r"event\.channel"):
        classify(payload({"type": "app_home_opened", "user": "U1", "tab": "messages"}))
    # Slack's documented example: no channel, one channel entity first among the context's entities.
    entities = [{"type": "slack#/types/canvas_id", "value": "F1"},
                {"type": "slack#/types/channel_id", "value": "C01234ABDCE", "team_id": "T0ABCDE6543"}]  # fmt: skip
    changed = classify(payload({"type": "app_context_changed", "context": {"entities": entities}}))
    assert changed == AssistantThread(event_id="Ev2", started=False, channel="", thread_ts=None, user="",
                                      context_channel="C01234ABDCE")  # fmt: skip
    empty = classify(payload({"type": "app_context_changed", "user": "U1", "channel": "D1", "context": {}}))
    assert isinstance(empty, AssistantThread)
    assert (empty.channel, empty.context_channel) == ("D1", None)
    odd = classify(payload({"type": "app_context_changed", "channel": "D1", "context": {"entities": 5}}))
    assert isinstance(odd, AssistantThread)
    assert odd.context_channel is None


def answered(fake_slack: FakeSlack, delivery: dict[str, Any]) -> dict[str, Any]:
    [record] = [d for d in fake_slack.deliveries("event") if d["event_id"] == delivery["event_id"]]
    return dict(json.loads(record["response"]))


@pytest.mark.stack
def test_opening_the_messages_tab_sets_the_prompts_and_their_title_on_the_dm(fake_slack: FakeSlack, uid: str) -> None:
    opened = fake_slack.open_app_home(f"U{uid}")
    [delivery] = opened["deliveries"]
    assert (delivery["type"], delivery["status"]) == ("app_home_opened", 200)
    channel = opened["channel"]
    shown = fake_slack.assistant_thread(channel)
    configured = config.Settings({}).assistant_prompts
    assert shown["prompts"] == [{"title": title, "message": message} for title, message in configured]
    assert shown["prompts_title"] == assistant_pane.PROMPTS_TITLE
    [call] = [c["args"] for c in fake_slack.calls("assistant.threads.setSuggestedPrompts")
              if c["args"]["channel_id"] == channel]  # fmt: skip
    assert "thread_ts" not in call  # Slack drops an agent app's call that names a thread
    assert [c for c in fake_slack.calls("assistant.threads.setTitle") if c["args"]["channel_id"] == channel] == []
    assert answered(fake_slack, delivery) == {"ok": True, "agent_dm": channel}


@pytest.mark.stack
def test_a_context_change_in_agent_view_is_acknowledged(fake_slack: FakeSlack, uid: str) -> None:
    fake_slack.open_app_home(f"U{uid}")
    before = len(fake_slack.calls())
    changed = fake_slack.change_app_context(f"U{uid}", "C0OPERATORS")
    [delivery] = changed["deliveries"]
    assert (delivery["type"], delivery["status"]) == ("app_context_changed", 200)
    assert fake_slack.calls()[before:] == []  # no Slack call, no session


@pytest.mark.stack
def test_dm_messages_without_an_assistant_root_are_conversations_with_the_agent(
    script: Callable[..., int], fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = fake_slack.open_app_home(f"U{uid}")["channel"]
    script(G.text("First answer."))
    sent = fake_slack.user_message(f"U{uid}", channel, f"what changed today? [{uid}]")
    first = wait_status(ids.session_for_event(sent["deliveries"][0]["event_id"]), SessionStatus.DONE)
    assert (first.origin.channel, first.origin.thread_ts) == (channel, sent["ts"])  # keyed by the person's own message
    top = [m["text"] for m in fake_slack.messages(channel) if m.get("bot_id") and not m.get("thread_ts")]
    assert top == ["First answer."]  # answered in the conversation (tests/stack/test_dm_conversation.py)
    # A reply in a thread of the DM is a request too (no mention in a DM), answered in that thread.
    script(G.text("Second answer."))
    again = fake_slack.user_message(f"U{uid}", channel, f"and yesterday? [{uid}]", thread_ts=sent["ts"])
    wait_status(ids.session_for_event(again["deliveries"][0]["event_id"]), SessionStatus.DONE)
    assert [m["text"] for m in fake_slack.bot_replies(channel, sent["ts"]) if m.get("thread_ts")] == ["Second answer."]
    assert [c for c in fake_slack.calls("assistant.threads.setTitle") if c["args"]["channel_id"] == channel] == []

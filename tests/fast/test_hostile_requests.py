"""Hostile and malformed requests to every entry point: each is refused with a clear 4xx (or a 2xx that drops it),
never a 500 with a traceback, and none creates a task."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest

from infra.signing import signed_headers
from infra.stack import SIGNING_SECRET
from shared.slack.edit_modal import parse
from tests.fast.conftest import RecordingTasks
from tests.function_apps import function_client as client

DEEP = b"[" * 100_000 + b"]" * 100_000
EVENT_BODIES = [
    b"[]",
    b"1",
    b'"x"',
    b"null",
    b"{}",
    DEEP,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b'{"type": "event_callback"}',
    b'{"type": "event_callback", "event": []}',
    b'{"type": "event_callback", "event": {"type": "app_mention", "text": 5, "user": [], "channel": {}, "ts": 1}}',
    b'{"type": "event_callback", "event_id": [], "event": {"type": "message", "text": "\\ud800", "user": "U1",'
    b' "channel": "C1", "ts": "1.1"}}',
    b'{"type": "url_verification", "challenge": {"x": 1}}',
    b'{"type": "event_callback", "event": {"type": "reaction_added", "item": "x", "user": "U1"}}',
    b'{"type": "event_callback", "event": {"type": "app_mention", "text": "hi", "user": "U1", "channel": "C1",'
    b' "ts": "x", "thread_ts": {}}}',
]


def mention_by(user: str, channel: str = "C0HOSTILE", event_type: str = "app_mention", **extra: Any) -> bytes:
    event = {"type": event_type, "text": "<@U0BOT> hi", "user": user, "channel": channel, "ts": "1700000000.000100",
             **extra}  # fmt: skip
    body = {"type": "event_callback", "event_id": f"Ev{abs(hash((user, channel, event_type))) % 10**9}",
            "authorizations": [{"is_bot": True, "user_id": "U0BOT"}], "event": event}  # fmt: skip
    return json.dumps(body).encode()


EVENT_BODIES += [mention_by(u) for u in ("U1/x", "U1/x/y")]
EVENT_BODIES += [mention_by("U1", event_type="message", channel_type="im", channel=c) for c in ("D1/x", "D1/x/y")]
EVENT_BODIES += [
    json.dumps(
        {
            "type": "event_callback",
            "event_id": "EvA1",
            "event": {
                "type": t,
                "assistant_thread": {
                    "user_id": u,
                    "channel_id": "D1/x/y",
                    "thread_ts": "1.1/2",
                    "context": {"channel_id": "C/1"},
                },
            },
        }
    ).encode()
    for t in ("assistant_thread_started", "assistant_thread_context_changed")
    for u in ("U1", "U1/x/y")
]


SLASHED = EVENT_BODIES[14:]  # a user or channel with a "/", which would name a Firestore document in another collection


@pytest.mark.parametrize("body", SLASHED, ids=range(len(SLASHED)))
def test_an_id_with_a_slash_is_refused_before_anything_is_written(tasks: RecordingTasks, body: bytes) -> None:
    reply = client("slack_events").post("/", data=body, headers=signed_headers(SIGNING_SECRET, body))
    assert reply.status_code == 400
    assert "is not a Slack id" in reply.get_json()["error"]


@pytest.mark.parametrize("body", EVENT_BODIES, ids=range(len(EVENT_BODIES)))
def test_signed_but_malformed_events(tasks: RecordingTasks, body: bytes) -> None:
    reply = client("slack_events").post("/", data=body, headers=signed_headers(SIGNING_SECRET, body))
    assert reply.status_code < 500, reply.get_data()
    assert tasks.created == []


PAYLOADS: list[Any] = [
    DEEP.decode(),
    "[]",
    "{}",
    '{"type": "block_actions"}',
    '{"type": "block_actions", "actions": []}',
    '{"type": "block_actions", "actions": [{}], "user": {}}',
    '{"type": "block_actions", "actions": [5], "user": {"id": "U1"}}',
    '{"type": "block_actions", "actions": [{"action_id": "approve", "value": 5}], "user": {"id": "U1"},'
    ' "channel": {"id": "C1"}, "container": {"message_ts": "1.1"}}',
    '{"type": "view_submission", "view": {"callback_id": "edit_call"}}',
    '{"type": "view_submission", "view": {"callback_id": "edit_call", "private_metadata": "x", "state": 5}}',
    '{"type": "view_submission", "view": {"callback_id": "edit_call", "private_metadata": "' + "x" * 100000 + '"}}',
]


def press(action_id: str, value: str, **extra: Any) -> str:
    payload = {
        "type": "block_actions",
        "user": {"id": "U0NOBODY"},
        "channel": {"id": "C0HOSTILE"},
        "container": {"channel_id": "C0HOSTILE", "message_ts": "1.1", "thread_ts": "1.0"},
        "actions": [{"action_id": action_id, "value": value, "action_ts": "2.2"}],
        "trigger_id": "t",
        **extra,
    }
    return json.dumps(payload)


ACTIONS = ["answer_1", "approval_approve", "approval_deny", "session_stop", "approval_edit", "answer_feedback"]
VALUES = ["a/b|1", "a/b/c/d|1", "..|1", "__x__|1", "q-x|", "|", "", "x" * 5000, "q-s-1-0|" + "9" * 50, "a/b"]
PAYLOADS += [press(a, v) for a in ACTIONS for v in VALUES]
PAYLOADS += [press("answer_1", "q-x|1", container={"channel_id": "C/1/2", "message_ts": "../..", "thread_ts": "a/b"})]


PAYLOADS += [
    '{"type": "view_submission", "view": ["approval_edit"]}',
    '{"type": "view_submission", "view": {"callback_id": "approval_edit", "state": []}, "user": "U1"}',
    '{"type": "view_submission", "view": {"callback_id": "approval_edit", "state": {"values": []}},'
    ' "user": {"id": "U1"}}',
    '{"type": "view_submission", "view": {"callback_id": "approval_edit", "private_metadata": 5}, "user": []}',
    '{"type": "block_actions", "actions": {"a": 1}, "user": {"id": "U1"}, "container": []}',
    '{"type": "block_actions", "actions": [{"action_id": "answer_1", "value": "q|1"}], "user": {"id": "U1"},'
    ' "channel": {"id": "C1"}, "container": {"message_ts": "1.1"}, "message": []}',
]
SLASHED_PRESSES = [
    press(action, "q-x|1", **{field: value})
    for action in ("answer_1", "answer_feedback", "session_stop")
    for field, value in (("user", {"id": "U1/x/y"}), ("container", {"channel_id": "C1/x/y", "message_ts": "1.1"}),
                         ("container", {"channel_id": "C1", "message_ts": "1/x/y"}),
                         ("container", {"channel_id": "C1", "message_ts": "1.1", "thread_ts": "1/x/y"}),
                         ("actions", [{"action_id": action, "value": "q-x|1", "action_ts": "2/x/y"}]))
]  # fmt: skip


SLASHED_PRESSES += [press(a, v) for a in ACTIONS for v in ("q-x|a/b/c|1", "a-x|a/b|d", "x|a/b/c/d|1", "a/b")]


@pytest.mark.parametrize("payload", SLASHED_PRESSES, ids=range(len(SLASHED_PRESSES)))
def test_a_press_whose_ids_hold_a_slash_is_refused(tasks: RecordingTasks, payload: str) -> None:
    body = urlencode({"payload": payload}).encode()
    headers = signed_headers(SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
    reply = client("slack_interactivity").post("/", data=body, headers=headers)
    assert reply.status_code == 400
    assert "is not a Slack id" in reply.get_json()["error"] or "names no record" in reply.get_json()["error"]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_signed_but_malformed_interactivity(tasks: RecordingTasks, payload: str) -> None:
    body = urlencode({"payload": payload}).encode()
    headers = signed_headers(SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
    reply = client("slack_interactivity").post("/", data=body, headers=headers)
    assert reply.status_code < 500, reply.get_data()
    assert tasks.created == []


TASK_BODIES = [
    DEEP,
    b"[]",
    b'{"session_id": 5}',
    b'{"session_id": "x", "resumes": 5}',
    b"\xff\xfe",
    b'{"session_id": "a/b"}',
    b'{"session_id": "' + b"a" * 2000 + b'"}',
    b'{"session_id": "__x__"}',
    b'{"session_id": "."}',
    b'{"session_id": ".."}',
]


@pytest.mark.parametrize("body", TASK_BODIES, ids=range(len(TASK_BODIES)))
def test_malformed_tasks(tasks: RecordingTasks, body: bytes) -> None:
    reply = client("agent_session").post("/", data=body, headers={"X-CloudTasks-TaskName": "t"})
    assert reply.status_code < 500, reply.get_data()
    assert tasks.created == []


SWEEP_BODIES = [DEEP, b"[]", b'{"job": []}', b'{"now": 5}', b"\xff"]


@pytest.mark.parametrize("body", SWEEP_BODIES, ids=range(len(SWEEP_BODIES)))
def test_malformed_sweeps(tasks: RecordingTasks, body: bytes) -> None:
    reply = client("sweep").post("/", data=body)
    assert reply.status_code < 500, reply.get_data()


def test_an_edit_field_nested_past_the_parser_is_a_field_error() -> None:
    deep = "[" * 1500 + "]" * 1500  # 3,000 characters: what Slack's text field lets an operator type
    args, errors = parse({"type": "object", "properties": {}}, {"*others": {"json": {"value": deep}}})
    assert args == {}
    assert "nested" in errors["*others"]


@pytest.mark.parametrize("text", ["<@U0BOT> hi \\ud800 there", "<@U0BOT> \\udfff", "<@U0BOT> \\ude00\\ud83d"])
def test_a_lone_surrogate_is_a_400_not_a_failed_write(tasks: RecordingTasks, text: str) -> None:
    """JSON may escape half of a UTF-16 pair; Python parses it, and Firestore's client could not encode it (a 500
    on every one of Slack's retries)."""
    raw = mention_by("U1SURROGATE").decode().replace('"<@U0BOT> hi"', f'"{text}"')
    body = raw.replace('"event_id": "Ev', f'"event_id": "EvS{len(text)}').encode()
    reply = client("slack_events").post("/", data=body, headers=signed_headers(SIGNING_SECRET, body))
    assert reply.status_code == 400
    assert "surrogate" in reply.get_json()["error"]
    assert tasks.created == []
    press_body = urlencode({"payload": press("answer_1", "q-x|1").replace('"t"', f'"{text}"')}).encode()
    headers = signed_headers(SIGNING_SECRET, press_body, content_type="application/x-www-form-urlencoded")
    refused = client("slack_interactivity").post("/", data=press_body, headers=headers)
    assert refused.status_code == 400
    assert "surrogate" in refused.get_json()["error"]


@pytest.mark.parametrize("entry_point", ["slack_events", "slack_interactivity", "agent_session", "sweep"])
def test_a_browsers_request_is_refused_before_anything_is_read(tasks: RecordingTasks, entry_point: str) -> None:
    """Locally the token is off: a page on another site could post to the loopback port (a form or a no-cors fetch
    needs no preflight), e.g. the sweep with a clock years ahead. A browser always names its page's origin."""
    body = json.dumps({"now": "2099-01-01T00:00:00+00:00", "session_id": "ev-anything"}).encode()
    for origin in ("https://evil.example", "null"):
        headers = {**signed_headers(SIGNING_SECRET, body), "Origin": origin}
        reply = client(entry_point).post("/", data=body, headers=headers)
        assert reply.status_code == 403
        assert "browser" in reply.get_json()["error"]
    assert tasks.created == []

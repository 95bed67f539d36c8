"""The fake Slack's control API under ``/_fake/``, run inside the server: its endpoints play the people in the
workspace (a message typed, a button pressed) and let a test look inside (calls received, messages stored,
deliveries made) or break things on purpose (``fail``). ``server.py`` routes ``/_fake/<name>`` to ``CONTROL``;
``client.py`` (``FakeSlack``) is how tests, tools and the chat CLI call them, over HTTP.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TypeVar
from urllib.parse import urlencode

from . import modals, usergroups
from .assistant_control import CONTROL as ASSISTANT_CONTROL
from .server import Route, chat_post_ephemeral, chat_post_message, chat_update, deliver, deliver_events
from .state import (
    CUTS,
    MENTION,
    Delay,
    Failure,
    Json,
    SlackError,
    Workspace,
    app_mention_event,
    block_actions_payload,
    buttons_in,
    message_event,
)
from .streams import STREAM_REFUSALS

T = TypeVar("T")


# -- endpoints (run inside the server) --------------------------------------------------


def _required(args: Json, *keys: str) -> list[str]:
    missing = [k for k in keys if not args.get(k)]
    if missing:
        raise SlackError(f"missing: {', '.join(missing)}")
    return [str(args[k]) for k in keys]


def ctl_config(ws: Workspace, args: Json) -> Json:
    allowed = {"events_url", "interactivity_url", "echo_bot_messages", "stream_seconds", "status_seconds"}
    if unknown := set(args) - allowed:
        raise SlackError(f"unknown settings: {sorted(unknown)}")
    config = ws.configure(**args) if args else ws.config
    return {"ok": True, **config.public(), "base_url": ws.base_url}


def ctl_reset(ws: Workspace, args: Json) -> Json:
    ws.reset()
    return {"ok": True}


def ctl_calls(ws: Workspace, args: Json) -> Json:
    with ws.lock:
        calls = [c for c in ws.calls if args.get("method") in (None, c["method"])]
    for key in ("channel", "thread_ts"):
        if args.get(key):
            calls = [c for c in calls if str(c["args"].get(key)) == args[key]]
    return {"ok": True, "calls": calls}


def ctl_messages(ws: Workspace, args: Json) -> Json:
    (channel,) = _required(args, "channel")
    with ws.lock:
        found = ws.thread(channel, args.get("thread_ts") or None)
        return {"ok": True, "messages": [{**ws.render(m), "channel": m.channel} for m in found]}


def ctl_ephemerals(ws: Workspace, args: Json) -> Json:
    with ws.lock:
        found = [e for e in ws.ephemerals if args.get("channel") in (None, e["channel"])]
        return {"ok": True, "ephemerals": [e for e in found if args.get("user") in (None, e["user"])]}


def ctl_deliveries(ws: Workspace, args: Json) -> Json:
    with ws.lock:
        return {"ok": True, "deliveries": [d for d in ws.deliveries if args.get("kind") in (None, d["kind"])]}


def ctl_fail(ws: Workspace, args: Json) -> Json:
    (method,) = _required(args, "method")
    status, error, cut = int(args.get("status") or 200), args.get("error"), args.get("cut")
    if cut is not None and cut not in CUTS:
        raise SlackError(f"cut is one of {sorted(CUTS)}")
    if status == 200 and not error and cut is None:
        raise SlackError("give an HTTP status other than 200, an error code, both, or a cut")
    retry_after = args.get("retry_after")
    if status == 429 and retry_after is None:
        retry_after = 1
    retry_after = None if retry_after is None else int(retry_after)
    after = None if args.get("applied_after") is None else float(args["applied_after"])
    ws.add_failure(method, Failure(int(args.get("times", 1)), status, error, retry_after, args.get("match"),
                                    bool(args.get("applied")), cut, after))  # fmt: skip
    return {"ok": True}


def ctl_slow(ws: Workspace, args: Json) -> Json:
    (method,) = _required(args, "method")
    ws.add_delay(method, Delay(float(args.get("seconds", 1.0)), int(args.get("times", 1)), args.get("match")))
    return {"ok": True}


def ctl_release(ws: Workspace, args: Json) -> Json:
    (method,) = _required(args, "method")
    return {"ok": True, "released": ws.release(method)}


STATUS_REFUSALS = frozenset({"missing_scope", "not_allowed_token_type", "channel_not_found", "access_denied",
                             "team_access_not_granted", "method_deprecated"})  # fmt: skip


def _refuse(refusals: dict[str, str], allowed: frozenset[str], ws: Workspace, args: Json) -> Json:
    """Make one channel refuse a method with Slack's ``error`` (no error: accept it again)."""
    (channel,) = _required(args, "channel")
    error = args.get("error") or None
    if error is not None and error not in allowed:
        raise SlackError(f"error must be one of {sorted(allowed)}")
    with ws.lock:
        if error is None:
            refusals.pop(channel, None)
        else:
            refusals[channel] = error
    return {"ok": True}


def ctl_refuse_status(ws: Workspace, args: Json) -> Json:
    """Make ``assistant.threads.setStatus`` refuse one channel with Slack's ``error`` (no error: accept it again)."""
    return _refuse(ws.status_refusals, STATUS_REFUSALS, ws, args)


def ctl_refuse_streams(ws: Workspace, args: Json) -> Json:
    """Make ``chat.startStream`` refuse one channel with Slack's ``error`` (no error: stream there again)."""
    return _refuse(ws.stream_refusals, STREAM_REFUSALS, ws, args)


def ctl_status(ws: Workspace, args: Json) -> Json:
    """The status the bot shows under one thread now ("" when none)."""
    channel, thread_ts = _required(args, "channel", "thread_ts")
    with ws.lock:
        return {"ok": True, "status": ws.status(f"{channel}/{thread_ts}")}


def ctl_user_message(ws: Workspace, args: Json) -> Json:
    """A person types in Slack: store the message, then deliver what Slack would deliver."""
    user, channel, text = _required(args, "user", "channel", "text")
    thread_ts = args.get("thread_ts") or None
    with ws.lock:
        if args.get("channel_type") in ("channel", "im"):
            ws.channel_types[channel] = args["channel_type"]
        if thread_ts is not None and ws.find(channel, thread_ts) is None:
            raise SlackError("thread_not_found")
        message = ws.post_as_user(user, channel, text, thread_ts)
        events = [message_event(ws, message)]
        mentioned = {m.group(1) for m in MENTION.finditer(text)}
        if ws.channel_type(channel) != "im" and ws.config.bot_user_id in mentioned:
            events.append(app_mention_event(ws, message))
        rendered = ws.render(message)
    deliveries = deliver_events(ws, events)  # outside the lock: the app may call back at once
    return {"ok": True, "ts": message.ts, "channel": channel, "message": rendered, "deliveries": deliveries}


def ctl_click(ws: Workspace, args: Json) -> Json:
    """A person presses a button on a stored message; Slack posts ``block_actions``."""
    user, channel, message_ts, action_id = _required(args, "user", "channel", "message_ts", "action_id")
    with ws.lock:
        message = ws.find(channel, message_ts)
        if message is None:
            raise SlackError("message_not_found")
        pressable = [b for b in buttons_in(message.blocks) if b["action_id"] == action_id]
        button = next((b for b in pressable if args.get("value") in (None, b["value"])), {})
        block_id = args.get("block_id") or button.get("block_id") or "fake"
        value = args["value"] if "value" in args else button.get("value")
        label = {"type": "plain_text", "text": button.get("text", ""), "emoji": True}
        action = {"action_id": action_id, "block_id": block_id, "text": label, "value": value,
                  "type": button.get("type", "button")}  # fmt: skip
        action["action_ts"] = f"{time.time():.6f}"
        key = uuid.uuid4().hex
        ws.response_urls[key] = {"channel": channel, "message_ts": message_ts, "user": user}
        payload = block_actions_payload(ws, message, user, action, f"{ws.base_url}/_fake/response_url/{key}")
        url = ws.config.interactivity_url
    if not url:
        return {"ok": True, "status": None, "error": "no interactivity_url configured", "payload": payload}
    body = urlencode({"payload": json.dumps(payload)})
    record = deliver(ws, url, body, content_type="application/x-www-form-urlencoded", kind="interactivity")
    return {"ok": True, "status": record["status"], "error": record["error"], "payload": payload}


def ctl_redeliver(ws: Workspace, args: Json) -> Json:
    """Deliver an earlier event again with ``X-Slack-Retry-Num``, as Slack does after a slow answer."""
    (event_id,) = _required(args, "event_id")
    with ws.lock:
        earlier = [d for d in ws.deliveries if d["event_id"] == event_id]
    if not earlier:
        raise SlackError("event_not_found")
    last = earlier[-1]
    same = {"content_type": last["content_type"], "kind": last["kind"], "event_id": event_id}
    record = deliver(ws, last["url"], last["body"], retry_num=last["retry_num"] + 1, **same)
    return {"ok": True, "status": record["status"], "error": record["error"], "retry_num": record["retry_num"]}


def ctl_response_url(ws: Workspace, args: Json) -> Json:
    """Slack's ``response_url`` for a click: replace, delete, or answer the clicked message."""
    with ws.lock:
        target = ws.response_urls.get(args.pop("key", ""))
        ws.record("response_url", args, 200 if target else 404, {"ok": bool(target)})
        if target is None:
            raise SlackError("expired_url")
        message = ws.find(target["channel"], target["message_ts"])
        bot_args = {**args, "channel": target["channel"], "ts": target["message_ts"]}
        if message is not None and args.get("delete_original"):
            ws.channels[message.channel].remove(message)
        elif message is not None and args.get("replace_original"):
            chat_update(ws, bot_args)
        elif args.get("response_type") == "in_channel":
            thread = args.get("thread_ts") or (message and (message.thread_ts or message.ts))
            chat_post_message(ws, {**bot_args, "thread_ts": thread})
        else:
            chat_post_ephemeral(ws, {**bot_args, "user": target["user"]})
    return {"ok": True}


CONTROL: dict[tuple[str, str], Route] = {
    ("GET", "health"): lambda ws, args: {"ok": True},
    ("GET", "config"): lambda ws, args: ctl_config(ws, {}),
    ("POST", "config"): ctl_config,
    ("POST", "reset"): ctl_reset,
    ("GET", "calls"): ctl_calls,
    ("GET", "messages"): ctl_messages,
    ("GET", "ephemerals"): ctl_ephemerals,
    ("GET", "deliveries"): ctl_deliveries,
    ("POST", "fail"): ctl_fail,
    ("POST", "slow"): ctl_slow,
    ("POST", "release"): ctl_release,
    ("POST", "refuse_status"): ctl_refuse_status,
    ("POST", "refuse_streams"): ctl_refuse_streams,
    ("GET", "status"): ctl_status,
    ("POST", "user_message"): ctl_user_message,
    ("POST", "click"): ctl_click,
    ("POST", "redeliver"): ctl_redeliver,
    ("POST", "response_url"): ctl_response_url,
    **ASSISTANT_CONTROL,
    **usergroups.CONTROL,
    **modals.CONTROL,
}

"""The control endpoints that play a person with the app: in the agent messaging experience (open the app's
Messages tab, look at another channel with it open) and in the older assistant pane (open it, move around with it
open), and look at what the app set there (``assistant.py`` answers the app's side)."""

from __future__ import annotations

from .people import dm_channel
from .server import deliver_events
from .state import Json, Message, SlackError, Workspace, opt, req

ROOT_TEXT = "New Assistant Thread"


def _event(ws: Workspace, kind: str, user: str, channel: str, thread_ts: str, *, viewed: str | None) -> Json:
    """``assistant_thread_started`` / ``assistant_thread_context_changed``, field for field as Slack sends them."""
    context: Json = {"team_id": ws.config.team_id, "enterprise_id": None}
    if viewed:
        context["channel_id"] = viewed
    thread = {"user_id": user, "context": context, "channel_id": channel, "thread_ts": thread_ts}
    return {"type": kind, "assistant_thread": thread, "event_ts": ws.next_ts()}


def ctl_open_assistant(ws: Workspace, args: Json) -> Json:
    """A person opens the app in the assistant pane (while viewing ``context_channel``): Slack starts a thread in
    their DM with the app and sends ``assistant_thread_started``."""
    user = req(args, "user", "user_not_found")
    context_channel = opt(args, "context_channel")
    with ws.lock:
        ws.ensure_user(user)
        channel = dm_channel(user)
        ws.channel_types[channel] = "im"
        root = ws.add_message(Message(channel, ws.next_ts(), user, ROOT_TEXT, subtype="assistant_app_thread"))
        ws.assistant_threads[f"{channel}/{root.ts}"] = {"context_channel": context_channel}
        event = _event(ws, "assistant_thread_started", user, channel, root.ts, viewed=context_channel)
    deliveries = deliver_events(ws, [event])  # outside the lock: the app calls back at once
    return {"ok": True, "channel": channel, "thread_ts": root.ts, "deliveries": deliveries}


def ctl_assistant_context(ws: Workspace, args: Json) -> Json:
    """The person moves to ``context_channel`` with the pane open: ``assistant_thread_context_changed``."""
    channel, thread_ts = req(args, "channel", "channel_not_found"), req(args, "thread_ts", "thread_not_found")
    with ws.lock:
        entry = ws.assistant_threads.get(f"{channel}/{thread_ts}")
        root = ws.find(channel, thread_ts)
        if entry is None or root is None:
            raise SlackError("thread_not_found")
        entry["context_channel"] = viewed = opt(args, "context_channel")
        event = _event(ws, "assistant_thread_context_changed", root.user, channel, thread_ts, viewed=viewed)
    return {"ok": True, "deliveries": deliver_events(ws, [event])}


def ctl_open_app_home(ws: Workspace, args: Json) -> Json:
    """A person opens the app's Messages tab (the agent messaging experience): Slack sends ``app_home_opened``
    with ``tab: "messages"`` and their DM with the app as ``channel``; no thread is started (agent view)."""
    user = req(args, "user", "user_not_found")
    with ws.lock:
        ws.ensure_user(user)
        channel = dm_channel(user)
        ws.channel_types[channel] = "im"
        ws.channels.setdefault(channel, [])
        event = {"type": "app_home_opened", "user": user, "channel": channel, "tab": "messages",
                 "event_ts": ws.next_ts()}  # fmt: skip
    return {"ok": True, "channel": channel, "deliveries": deliver_events(ws, [event])}


def ctl_app_context(ws: Workspace, args: Json) -> Json:
    """The person looks at ``context_channel`` with the app open (agent view): ``app_context_changed``, its
    context's entities the channel viewed (an empty context when none)."""
    user = req(args, "user", "user_not_found")
    viewed = opt(args, "context_channel")
    with ws.lock:
        channel = dm_channel(user)
        ws.assistant_threads.setdefault(channel, {})["context_channel"] = viewed
        entities = [{"type": "slack#/types/channel_id", "value": viewed, "team_id": ws.config.team_id}]
        event = {"type": "app_context_changed", "user": user, "channel": channel,
                 "context": {"entities": entities} if viewed else {}, "event_ts": ws.next_ts()}  # fmt: skip
    return {"ok": True, "deliveries": deliver_events(ws, [event])}


def ctl_assistant_thread(ws: Workspace, args: Json) -> Json:
    """What the pane shows for one thread (or, with no ``thread_ts``, for the DM itself in agent view): its
    title, suggested prompts and the context Slack last reported."""
    channel, thread_ts = req(args, "channel", "channel_not_found"), opt(args, "thread_ts")
    with ws.lock:
        entry = ws.assistant_threads.get(f"{channel}/{thread_ts}" if thread_ts else channel)
        if entry is None:
            raise SlackError("thread_not_found")
        return {"ok": True, "thread": dict(entry)}


CONTROL = {
    ("POST", "open_assistant"): ctl_open_assistant,
    ("POST", "assistant_context"): ctl_assistant_context,
    ("GET", "assistant_thread"): ctl_assistant_thread,
    ("POST", "open_app_home"): ctl_open_app_home,
    ("POST", "app_context"): ctl_app_context,
}

"""What the browser page needs from the fake Slack: the workspace as one snapshot, a person's reaction, and the
page's own files (``ops/web/``, served by ``ops/page.py``: the same page is the operator console's).

The page types messages and presses buttons through the same control endpoints as the terminal chat
(``user_message``, ``click``), so everything reaches the product as signed events and interactivity payloads.
It learns of changes from a server-sent event stream (``GET /_fake/stream``): each event carries only the
workspace's version, and the page then reads ``GET /_fake/snapshot`` for the person it shows.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from ops.page import serve_file

from .people import CHANNELS, directory
from .server import Route, deliver_events
from .state import Json, SlackError, Workspace, opt, req

STREAM_PATH = "/_fake/stream"
KEEPALIVE_SECONDS = 15.0


def ctl_snapshot(ws: Workspace, args: Json) -> Json:
    """Every channel's messages as Slack shows them, and the ephemerals only ``user`` may see."""
    viewer = opt(args, "user")
    with ws.lock:
        cfg = ws.config
        names = dict(CHANNELS)
        channels = {c: [{**ws.render(m), "channel": c} for m in ms] for c, ms in ws.channels.items()}
        ephemerals = [e for e in ws.ephemerals if viewer is not None and e["user"] == viewer]
        return {
            "ok": True,
            "version": ws.version,
            **directory(cfg.bot_user_id, cfg.operators),
            "extra_channels": [{"id": c, "name": names.get(c, c)} for c in channels if c not in names],
            "messages": channels,
            "ephemerals": ephemerals,
            "statuses": {key: shown for key in ws.statuses if (shown := ws.status(key))},
            # The prompts an agent-view DM offers (set without a thread when its Messages tab opens).
            "prompts": {
                key: {"prompts": entry.get("prompts") or [], "prompts_title": entry.get("prompts_title")}
                for key, entry in ws.assistant_threads.items()
                if "/" not in key and entry.get("prompts")
            },
            "connected": bool(cfg.events_url and cfg.interactivity_url),
            "notice": cfg.notice,
        }


def ctl_react(ws: Workspace, args: Json) -> Json:
    """A person adds (or, again, removes) a reaction; Slack delivers ``reaction_added`` or ``reaction_removed``."""
    user, channel, ts = req(args, "user", "user_not_found"), req(args, "channel", "channel_not_found"), opt(args, "ts")
    name = req(args, "name", "invalid_name").strip(":")
    with ws.lock:
        ws.ensure_user(user)
        message = ws.find(channel, ts or "")
        if message is None:
            raise SlackError("message_not_found")
        entry = next((r for r in message.reactions if r["name"] == name), None)
        if entry is None:
            entry = {"name": name, "users": [], "count": 0}
            message.reactions.append(entry)
        added = user not in entry["users"]
        if added:
            entry["users"].append(user)
        else:
            entry["users"].remove(user)
        entry["count"] = len(entry["users"])
        if not entry["users"]:
            message.reactions.remove(entry)
        item = {"type": "message", "channel": channel, "ts": message.ts}
        kind = "reaction_added" if added else "reaction_removed"
        event: Json = {"type": kind, "user": user, "reaction": name, "item_user": message.user, "item": item}
        event["event_ts"] = ws.next_ts()
    deliver_events(ws, [event])
    return {"ok": True, "added": added}


def serve_page(handler: BaseHTTPRequestHandler, ws: Workspace, target: str) -> bool:
    """Answer a GET of the page's files or of its event stream; False leaves the request to the API."""
    path = urlsplit(target).path
    if path == STREAM_PATH:
        _stream(handler, ws)
        return True
    return serve_file(handler, path)


def _stream(handler: BaseHTTPRequestHandler, ws: Workspace) -> None:
    """Server-sent events: the workspace's version now, then each time it changes, until the page goes away."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    handler.close_connection = True
    seen = -1
    try:
        while True:
            version = ws.wait_for_change(seen, KEEPALIVE_SECONDS)
            chunk = f"data: {json.dumps({'version': version})}\n\n" if version != seen else ": keepalive\n\n"
            handler.wfile.write(chunk.encode())
            handler.wfile.flush()
            seen = version
    except OSError:  # the page was closed or reloaded
        return


PAGE_CONTROL: dict[tuple[str, str], Route] = {
    ("GET", "snapshot"): ctl_snapshot,
    ("POST", "react"): ctl_react,
}

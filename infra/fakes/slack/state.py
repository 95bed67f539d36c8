"""The fake Slack workspace: what it holds, and how Slack shows it.

Everything here is plain data guarded by one re-entrant lock, with no I/O, so the
shapes Slack uses (a message in ``conversations.replies``, an ``event_callback``, a
``block_actions`` payload) can be read and compared with Slack's documentation in
one place. ``server.py`` answers the Web API over this data; ``control.py`` lets
tests drive it.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
import secrets
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .people import BOT_NAME, BOT_REAL_NAME, person

Json = dict[str, Any]

MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")
MAX_BLOCKS = 50
MAX_TEXT = 40_000


class SlackError(Exception):
    """A Web API error code; Slack reports it as ``{"ok": false, "error": code}``."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True)
class FakeSlackConfig:
    """Who the fake workspace's bot is and where Slack would deliver events."""

    bot_token: str
    signing_secret: str
    bot_user_id: str = "UBOT"
    team_id: str = "T0001"
    app_id: str = "A0001"
    bot_id: str = "B0001"
    events_url: str | None = None
    interactivity_url: str | None = None
    echo_bot_messages: bool = False
    operators: tuple[str, ...] = ()  # the product's operators, for the browser page to label
    notice: str = ""  # a line the browser page shows above everything (the demo model announces itself)
    delivery_seconds: float = 3.0  # how long a delivery waits for the app's answer (Slack: three seconds)
    stream_seconds: float = 300.0  # a streamed message stops taking appends this long after it started (Slack: ~5 min)
    status_seconds: float = 120.0  # a thread's status is removed this long after it was set with no message since
    verification_token: str = "fakeslack-verification-token"  # noqa: S105 - a fake's constant

    def public(self) -> Json:
        """The configuration without its secrets, for ``GET /_fake/config``."""
        data = asdict(self)
        del data["bot_token"], data["signing_secret"]
        return data


@dataclass
class Message:
    """One stored channel message; ``thread_ts`` is set only on replies."""

    channel: str
    ts: str
    user: str
    text: str
    blocks: list[Json] | None = None
    attachments: list[Json] | None = None
    thread_ts: str | None = None
    bot_id: str | None = None
    app_id: str | None = None
    client_msg_id: str | None = None
    reactions: list[Json] = field(default_factory=list)
    edited: Json | None = None
    metadata: Json | None = None  # chat.postMessage's message metadata: {event_type, event_payload}
    subtype: str | None = None  # "assistant_app_thread": the root of a thread in the app's assistant pane
    stream: Json | None = None  # a streamed message: {"until": when its stream ends (None: stopped), "tasks": {...}}


# How a failure may cut its connection instead of answering: "reset" (an RST: the client reads ConnectionResetError),
# "close" (closed without an answer: RemoteDisconnected), as a load balancer or a restarting host may, or "partial"
# (a 200 whose body is closed halfway: http.client.IncompleteRead).
CUTS = frozenset({"reset", "close", "partial"})


@dataclass
class Failure:
    """An injected failure for the next ``remaining`` calls of one method (whose arguments contain ``match``)."""

    remaining: int
    status: int = 200
    error: str | None = None
    retry_after: int | None = None
    match: str | None = None
    applied: bool = False  # the call takes effect before the failure is answered (a gateway's 502 or 504)
    cut: str | None = None  # "reset", "close" or "partial": the connection is cut instead of answered (``CUTS``)
    applied_after: float | None = None  # the call takes effect this many seconds after its failure is answered


@dataclass
class Delay:
    """A slow answer for the next ``remaining`` calls of one method whose arguments contain ``match``."""

    seconds: float
    remaining: int
    match: str | None = None
    released: threading.Event = field(default_factory=threading.Event)  # set: its calls are answered at once


def ts_key(ts: str, error: str = "invalid_ts") -> int:
    """Orders Slack timestamps ("1700000000.000100") exactly, without floats."""
    seconds, _, fraction = ts.partition(".")
    if not seconds.isdigit() or (fraction and not fraction.isdigit()):
        raise SlackError(error)
    return int(seconds) * 1_000_000 + int((fraction or "0").ljust(6, "0")[:6])


def encode_cursor(ts: str) -> str:
    """Slack's own cursor shape: base64 of ``next_ts:<digits>``."""
    return base64.b64encode(f"next_ts:{ts_key(ts)}".encode()).decode()


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.b64decode(cursor.encode(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise SlackError("invalid_cursor") from exc
    prefix, _, digits = raw.partition(":")
    if prefix != "next_ts" or not digits.isdigit():
        raise SlackError("invalid_cursor")
    return int(digits)


def rich_text_blocks(text: str) -> list[Json]:
    """The ``rich_text`` block Slack attaches to a message typed by a person."""
    elements: list[Json] = []
    position = 0
    for match in MENTION.finditer(text):
        if match.start() > position:
            elements.append({"type": "text", "text": text[position : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        position = match.end()
    if position < len(text):
        elements.append({"type": "text", "text": text[position:]})
    section = {"type": "rich_text_section", "elements": elements}
    return [{"type": "rich_text", "block_id": uuid.uuid4().hex[:5], "elements": [section]}]


def buttons_in(blocks: list[Json] | None) -> list[Json]:
    """Every button in a message's blocks, in reading order, with its block_id and label."""
    found: list[Json] = []
    for block in blocks or []:
        grouped = block.get("type") in ("actions", "context_actions")
        elements = block.get("elements") if grouped else [block.get("accessory")]
        for element in elements or []:
            if isinstance(element, dict) and element.get("type") == "button":
                label = element.get("text", {}).get("text", "")
                fields = {k: element.get(k) for k in ("action_id", "value", "style")}
                found.append({"block_id": block.get("block_id"), "text": label, "type": "button", **fields})
            elif isinstance(element, dict) and element.get("type") == "feedback_buttons":  # 👍 then 👎, one action
                for side in ("positive_button", "negative_button"):
                    button = element.get(side) or {}
                    found.append({"block_id": block.get("block_id"), "text": button.get("text", {}).get("text", ""),
                                  "type": "feedback_buttons", "action_id": element.get("action_id"),
                                  "value": button.get("value"), "style": None})  # fmt: skip
    return found


def opt(args: Json, key: str) -> str | None:
    value = args.get(key)
    return None if value is None or value == "" else str(value)


def req(args: Json, key: str, error: str) -> str:
    value = opt(args, key)
    if value is None:
        raise SlackError(error)
    return value


def flag(args: Json, key: str) -> bool:
    value = args.get(key)
    return value is True or (isinstance(value, str) and value.lower() in ("1", "true"))


def _json_arg(args: Json, key: str, error: str) -> Any:
    """An argument sent as a value (JSON bodies) or as a JSON string (form bodies); None when absent."""
    value = args.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise SlackError(error) from exc
    return value


def json_object(args: Json, key: str, error: str) -> Json | None:
    value = _json_arg(args, key, error)
    if value is not None and not isinstance(value, dict):
        raise SlackError(error)
    return value


def json_list(args: Json, key: str, error: str) -> list[Json] | None:
    """Block Kit arrives as a list (JSON bodies) or a JSON string (form bodies)."""
    value = _json_arg(args, key, error)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(b, dict) for b in value) or len(value) > MAX_BLOCKS:
        raise SlackError(error)
    if key == "blocks" and not all("type" in b for b in value):
        raise SlackError(error)
    return value


class Workspace:
    """All state of the fake Slack; every access happens under ``lock``."""

    def __init__(self, config: FakeSlackConfig) -> None:
        self.lock = threading.RLock()
        self.initial_config = config
        self.base_url = "http://127.0.0.1"
        self.version = 0  # counts changes, so the browser page knows when to look again
        self.changed = threading.Condition(self.lock)
        self.reset()

    def reset(self) -> None:
        """Forget every message, user, call and failure; restore the startup config."""
        with self.lock:
            self.config = self.initial_config
            self.channels: dict[str, list[Message]] = {}
            self.ephemerals: list[Json] = []
            self.users: dict[str, Json] = {}
            self.calls: list[Json] = []
            self.deliveries: list[Json] = []
            self.failures: dict[str, list[Failure]] = {}
            for delay in (d for queue in getattr(self, "delays", {}).values() for d in queue):
                delay.released.set()  # a call held back is answered now
            self.delays: dict[str, list[Delay]] = {}
            for timer in getattr(self, "pending", []):  # calls a failure makes take effect later (``applied_after``)
                timer.cancel()
            self.pending: list[threading.Timer] = []
            self.response_urls: dict[str, Json] = {}
            self.echoes: list[tuple[Message, Json | None]] = []
            self.channel_types: dict[str, str] = {}
            # "channel/thread_ts" -> assistant.threads.setStatus's status, and when Slack removes it (two minutes on)
            self.statuses: dict[str, tuple[str, float]] = {}
            self.status_refusals: dict[str, str] = {}  # channel -> the error assistant.threads.setStatus answers
            self.assistant_threads: dict[str, Json] = {}  # "channel/thread_ts" -> title, prompts, context_channel
            self.stream_refusals: dict[str, str] = {}  # channel -> the error chat.startStream answers
            self.usergroups: dict[str, list[str]] = {"S0ONCALL": ["U0OPERATOR"]}  # group -> members (usergroups.py)
            self.triggers: dict[str, tuple[str, float]] = {}  # a press's trigger_id -> (user, when) (modals.py)
            self.views: dict[str, Json] = {}  # open modals by view id (modals.py)
            self._last_ts = 0

    def touch(self) -> None:
        """Something may have changed: wake every page waiting in ``wait_for_change``."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """The version once it differs from ``seen``, or the same one after ``timeout`` seconds."""
        with self.changed:
            self.changed.wait_for(lambda: self.version != seen, timeout)
            return self.version

    def configure(self, **changes: Any) -> FakeSlackConfig:
        with self.lock:
            self.config = replace(self.config, **changes)
            return self.config

    def next_ts(self) -> str:
        """Unique, increasing timestamps in Slack's format, close to the wall clock."""
        with self.lock:
            self._last_ts = max(int(time.time() * 1_000_000), self._last_ts + 1)
            return f"{self._last_ts // 1_000_000}.{self._last_ts % 1_000_000:06d}"

    # -- users and messages ---------------------------------------------------

    def ensure_user(self, user_id: str) -> Json:
        """Users exist from the moment they are first mentioned, as in a live workspace."""
        if user_id[:1] not in ("U", "W"):
            raise SlackError("user_not_found")
        with self.lock:
            if user_id not in self.users:
                is_bot, team = user_id == self.config.bot_user_id, self.config.team_id
                name, real = (BOT_NAME, BOT_REAL_NAME) if is_bot else (user_id.lower(), f"User {user_id}")
                if (known := person(user_id)) is not None:
                    name, real = known.name, known.real_name
                profile = {"display_name": name, "real_name": real, "team": team}
                flags = {"deleted": False, "is_admin": False, "is_bot": is_bot, "tz": "Etc/UTC"}
                self.users[user_id] = {"id": user_id, "team_id": team, "name": name, "real_name": real, **flags}
                self.users[user_id]["profile"] = profile
            return self.users[user_id]

    def status(self, key: str) -> str:
        """The status shown under the thread ``key`` ("channel/thread_ts") now: "" once Slack's two minutes (the
        config's ``status_seconds``) have passed since it was set with no message from the app meanwhile."""
        with self.lock:
            shown, until = self.statuses.get(key, ("", 0.0))
            return shown if time.time() < until else ""

    def channel_type(self, channel: str) -> str:
        """As events report it: remembered from the first human message, else guessed from the id."""
        with self.lock:
            return self.channel_types.get(channel, "im" if channel.startswith("D") else "channel")

    def channel_name(self, channel: str) -> str:
        return "directmessage" if channel.startswith("D") else f"fake-{channel.lower()}"

    def find(self, channel: str, ts: str) -> Message | None:
        with self.lock:
            return next((m for m in self.channels.get(channel, []) if m.ts == ts), None)

    def replies(self, root: Message) -> list[Message]:
        with self.lock:
            return [m for m in self.channels.get(root.channel, []) if m.thread_ts == root.ts]

    def thread(self, channel: str, thread_ts: str | None) -> list[Message]:
        """A thread's root then its replies, or the whole channel when no thread is named."""
        with self.lock:
            messages = list(self.channels.get(channel, []))
            if thread_ts is None:
                return messages
            return [m for m in messages if thread_ts in (m.ts, m.thread_ts)]

    def add_message(self, message: Message) -> Message:
        with self.lock:
            if message.thread_ts is not None:
                root = self.find(message.channel, message.thread_ts)
                if root is not None and root.thread_ts is not None:
                    message.thread_ts = root.thread_ts  # a reply to a reply joins the root's thread
            self.channels.setdefault(message.channel, []).append(message)
            return message

    def post_as_user(self, user: str, channel: str, text: str, thread_ts: str | None) -> Message:
        self.ensure_user(user)
        message = Message(channel, self.next_ts(), user, text, rich_text_blocks(text), thread_ts=thread_ts)
        message.client_msg_id = str(uuid.uuid4())
        return self.add_message(message)

    def render(self, message: Message, *, with_metadata: bool = False) -> Json:
        """A message exactly as Slack's Web API and events show it (metadata only when asked for)."""
        with self.lock:
            team = self.config.team_id
            out: Json = {"type": "message", "user": message.user, "text": message.text, "ts": message.ts}
            out["team"] = team
            if message.subtype is not None:
                out["subtype"] = message.subtype
            if message.bot_id is not None:
                out["bot_id"], out["app_id"] = message.bot_id, message.app_id
                profile = {"id": message.bot_id, "app_id": message.app_id, "name": "fakebot", "deleted": False}
                out["bot_profile"] = {**profile, "team_id": team}
            if message.client_msg_id is not None:
                out["client_msg_id"] = message.client_msg_id
            if message.blocks is not None:
                out["blocks"] = copy.deepcopy(message.blocks)
            if message.attachments is not None:
                out["attachments"] = copy.deepcopy(message.attachments)
            if message.edited is not None:
                out["edited"] = dict(message.edited)
            if with_metadata and message.metadata is not None:
                out["metadata"] = copy.deepcopy(message.metadata)
            if message.thread_ts is not None:
                out["thread_ts"] = message.thread_ts
                root = self.find(message.channel, message.thread_ts)
                if root is not None:
                    out["parent_user_id"] = root.user
            elif replies := self.replies(message):
                users = list(dict.fromkeys(m.user for m in replies))
                out.update(thread_ts=message.ts, reply_count=len(replies), latest_reply=replies[-1].ts)
                out.update(reply_users=users, reply_users_count=len(users), is_locked=False)
            if message.reactions:
                out["reactions"] = copy.deepcopy(message.reactions)
            if message.stream is not None:  # the fake's own view of a streamed message (its task cards, its state)
                stream = message.stream
                out["stream"] = {"streaming": stream["until"] is not None and time.time() < stream["until"],
                                 "tasks": list(copy.deepcopy(stream["tasks"]).values()),
                                 "display": stream.get("display", "timeline"), "plan": stream.get("plan")}  # fmt: skip
            return out

    # -- failure injection and recording --------------------------------------

    def add_failure(self, method: str, failure: Failure) -> None:
        with self.lock:
            self.failures.setdefault(method, []).append(failure)

    def take_failure(self, method: str, args: Json | None = None) -> Failure | None:
        with self.lock:
            queue = self.failures.get(method, [])
            text = json.dumps(args or {}, default=str)
            for failure in queue:
                if failure.match is None or failure.match in text:
                    failure.remaining -= 1
                    if failure.remaining <= 0:
                        queue.remove(failure)
                    return failure
            return None

    def add_delay(self, method: str, delay: Delay) -> None:
        with self.lock:
            self.delays.setdefault(method, []).append(delay)

    def take_delay(self, method: str, args: Json) -> Delay | None:
        """The delay that holds this answer to ``method`` back (its effect is already visible), or None."""
        with self.lock:
            text = json.dumps(args, default=str)
            for delay in self.delays.get(method, []):
                if delay.remaining > 0 and (delay.match is None or delay.match in text):
                    delay.remaining -= 1
                    return delay
            return None

    def release(self, method: str) -> int:
        """Answer the calls of ``method`` held back now at once; its delays still to come are dropped."""
        with self.lock:
            delays = self.delays.pop(method, [])
        for delay in delays:
            delay.released.set()
        return len(delays)

    def record(self, method: str, args: Json, status: int, response: Json) -> None:
        with self.lock:
            self.calls.append(
                {"method": method, "args": args, "time": time.time(), "status": status, "response": response}
            )


# -- what Slack sends to the app --------------------------------------------------------

_ID_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def new_event_id() -> str:
    return "Ev" + "".join(secrets.choice(_ID_CHARS) for _ in range(10))


def envelope(config: FakeSlackConfig, event: Json) -> Json:
    """The ``event_callback`` wrapper, field for field as Slack's Events API sends it."""
    # A reaction names its message's channel in "item", an assistant thread event in "assistant_thread".
    item, thread = event.get("item") or {}, event.get("assistant_thread") or {}
    channel = event.get("channel") or item.get("channel") or thread["channel_id"]
    context = {"et": event["type"], "tid": config.team_id, "aid": config.app_id, "cid": channel}
    encoded = base64.urlsafe_b64encode(json.dumps(context).encode()).decode().rstrip("=")
    return {
        "token": config.verification_token,
        "team_id": config.team_id,
        "api_app_id": config.app_id,
        "event": event,
        "type": "event_callback",
        "event_id": new_event_id(),
        "event_time": int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": config.team_id,
                "user_id": config.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{encoded}",
    }


def message_event(ws: Workspace, message: Message) -> Json:
    event = ws.render(message)
    event.pop("reactions", None)
    event.update(channel=message.channel, event_ts=message.ts, channel_type=ws.channel_type(message.channel))
    return event


def app_mention_event(ws: Workspace, message: Message) -> Json:
    event = message_event(ws, message)
    event["type"] = "app_mention"
    del event["channel_type"]
    return event


def message_changed_event(ws: Workspace, message: Message, previous: Json) -> Json:
    """What Slack delivers after ``chat.update``: the new and the previous message, hidden."""
    edited_ts = (message.edited or {}).get("ts", message.ts)
    return {
        "type": "message",
        "subtype": "message_changed",
        "message": ws.render(message),
        "previous_message": previous,
        "channel": message.channel,
        "hidden": True,
        "ts": edited_ts,
        "event_ts": edited_ts,
        "channel_type": ws.channel_type(message.channel),
    }


def block_actions_payload(ws: Workspace, message: Message, user: str, action: Json, response_url: str) -> Json:
    """A ``block_actions`` payload for one button press, as Slack posts it to the interactivity URL."""
    cfg, profile = ws.config, ws.ensure_user(user)
    container: Json = {"type": "message", "message_ts": message.ts, "channel_id": message.channel}
    container["is_ephemeral"] = False
    if message.thread_ts is not None:
        container["thread_ts"] = message.thread_ts
    trigger_id = f"{int(time.time() * 1000)}.{secrets.randbelow(10**10)}.{uuid.uuid4().hex}"
    ws.triggers[trigger_id] = (user, time.time())  # views.open takes it once, within 3 s
    return {
        "type": "block_actions",
        "user": {"id": user, "username": profile["name"], "name": profile["name"], "team_id": cfg.team_id},
        "api_app_id": cfg.app_id,
        "token": cfg.verification_token,
        "container": container,
        "trigger_id": trigger_id,
        "team": {"id": cfg.team_id, "domain": "fake-workspace"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": message.channel, "name": ws.channel_name(message.channel)},
        "message": ws.render(message),
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [action],
    }

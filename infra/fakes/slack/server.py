"""The fake Slack's HTTP side: it answers the Web API under ``/api/`` and posts signed requests to the app.

The Web API speaks what slack-sdk's ``WebClient`` sends (form or JSON bodies, query
strings, ``Authorization: Bearer``), so the real client is exercised over real HTTP;
errors are the codes Slack documents for each method. Events and button clicks go
the other way, signed with slack-sdk's own ``SignatureVerifier`` so that the app's
verification is tested against the same code, not against a second HMAC written here.
The control endpoints under ``/_fake/`` live in ``control.py`` and are handed in.
"""

from __future__ import annotations

import contextlib
import copy
import json
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from slack_sdk.signature import SignatureVerifier

from infra.fakes.serve import LISTEN_BACKLOG

from . import assistant, modals, usergroups
from .people import BOT_NAME
from .state import (
    MAX_TEXT,
    Failure,
    Json,
    Message,
    SlackError,
    Workspace,
    decode_cursor,
    encode_cursor,
    envelope,
    flag,
    json_list,
    json_object,
    message_changed_event,
    message_event,
    opt,
    req,
    ts_key,
)
from .streams import chat_append_stream, chat_start_stream, chat_stop_stream

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
Route = Callable[[Workspace, Json], Json]


# -- Web API methods: each runs under the workspace lock; SlackError carries Slack's error code --


def _bot_message(ws: Workspace, args: Json, channel: str) -> Message:
    text = opt(args, "text") or ""
    blocks = json_list(args, "blocks", "invalid_blocks")
    attachments = json_list(args, "attachments", "invalid_attachments")
    if not text and blocks is None and attachments is None:
        raise SlackError("no_text")
    if len(text) > MAX_TEXT:
        raise SlackError("msg_too_long")
    assistant.check_markdown_blocks(blocks)
    cfg = ws.config
    thread_ts = opt(args, "thread_ts")
    message = Message(channel, ts="", user=cfg.bot_user_id, text=text, thread_ts=thread_ts, bot_id=cfg.bot_id)
    message.blocks, message.attachments, message.app_id = blocks, attachments, cfg.app_id
    metadata = json_object(args, "metadata", "invalid_metadata")
    if metadata is not None and not (isinstance(metadata.get("event_type"), str) and "event_payload" in metadata):
        raise SlackError("invalid_metadata")
    message.metadata = metadata
    return message


def _existing(ws: Workspace, args: Json, ts_arg: str, missing: str = "message_not_found") -> Message:
    channel = req(args, "channel", "channel_not_found")
    if channel not in ws.channels:
        raise SlackError("channel_not_found")
    message = ws.find(channel, req(args, ts_arg, missing))
    if message is None:
        raise SlackError(missing)
    return message


def auth_test(ws: Workspace, args: Json) -> Json:
    cfg = ws.config
    return {
        "ok": True,
        "url": "https://fake-workspace.slack.com/",
        "team": "Fake Workspace",
        "user": BOT_NAME,
        "team_id": cfg.team_id,
        "user_id": cfg.bot_user_id,
        "bot_id": cfg.bot_id,
        "is_enterprise_install": False,
    }


def chat_post_message(ws: Workspace, args: Json) -> Json:
    channel = req(args, "channel", "channel_not_found")
    message = _bot_message(ws, args, channel)
    message.ts = ws.next_ts()
    ws.add_message(message)
    ws.echoes.append((message, None))
    if message.thread_ts is not None:  # the app answered: Slack clears the thread's status
        ws.statuses.pop(f"{channel}/{message.thread_ts}", None)
    return {"ok": True, "channel": channel, "ts": message.ts, "message": ws.render(message)}


def chat_update(ws: Workspace, args: Json) -> Json:
    message = _existing(ws, args, "ts")
    if message.bot_id != ws.config.bot_id:
        raise SlackError("cant_update_message")
    previous = ws.render(message)
    text, blocks = opt(args, "text"), json_list(args, "blocks", "invalid_blocks")
    if text is None and blocks is None:
        raise SlackError("no_text")
    assistant.check_markdown_blocks(blocks)
    message.text = text if text is not None else message.text  # omitted fields are kept, as in Slack
    message.blocks = blocks if blocks is not None else message.blocks
    metadata = json_object(args, "metadata", "invalid_metadata")  # chat.update takes metadata too: it replaces
    if metadata is not None and not (isinstance(metadata.get("event_type"), str) and "event_payload" in metadata):
        raise SlackError("invalid_metadata")
    message.metadata = metadata if metadata is not None else message.metadata
    message.edited = {"user": ws.config.bot_user_id, "ts": ws.next_ts()}
    ws.echoes.append((message, previous))
    return {
        "ok": True,
        "channel": message.channel,
        "ts": message.ts,
        "text": message.text,
        "message": ws.render(message),
    }


def chat_delete(ws: Workspace, args: Json) -> Json:
    message = _existing(ws, args, "ts")
    if message.bot_id != ws.config.bot_id:
        raise SlackError("cant_delete_message")
    ws.channels[message.channel].remove(message)
    return {"ok": True, "channel": message.channel, "ts": message.ts}


def chat_post_ephemeral(ws: Workspace, args: Json) -> Json:
    channel = req(args, "channel", "channel_not_found")
    user = req(args, "user", "user_not_found")
    ws.ensure_user(user)
    message = _bot_message(ws, args, channel)
    ts = ws.next_ts()
    stored = {"channel": channel, "user": user, "ts": ts, "text": message.text, "blocks": message.blocks}
    ws.ephemerals.append({**stored, "thread_ts": message.thread_ts, "bot_id": message.bot_id})
    return {"ok": True, "message_ts": ts}


def _reaction_target(ws: Workspace, args: Json) -> tuple[Message, str]:
    if opt(args, "channel") is None or opt(args, "timestamp") is None:
        raise SlackError("no_item_specified")
    name = req(args, "name", "invalid_name").strip(":")
    return _existing(ws, args, "timestamp"), name


def reactions_add(ws: Workspace, args: Json) -> Json:
    message, name = _reaction_target(ws, args)
    entry = next((r for r in message.reactions if r["name"] == name), None)
    if entry is None:
        entry = {"name": name, "users": [], "count": 0}
        message.reactions.append(entry)
    if ws.config.bot_user_id in entry["users"]:
        raise SlackError("already_reacted")
    entry["users"].append(ws.config.bot_user_id)
    entry["count"] = len(entry["users"])
    return {"ok": True}


def reactions_remove(ws: Workspace, args: Json) -> Json:
    message, name = _reaction_target(ws, args)
    user = ws.config.bot_user_id
    entry = next((r for r in message.reactions if r["name"] == name), None)
    if entry is None or user not in entry["users"]:
        raise SlackError("no_reaction")
    entry["users"].remove(user)
    entry["count"] = len(entry["users"])
    if not entry["users"]:
        message.reactions.remove(entry)
    return {"ok": True}


def _limit(args: Json, default: int, most: int) -> int:
    """A read's ``limit`` argument, between 1 and ``most`` (Slack answers ``invalid_limit`` for a non-number)."""
    limit_arg = opt(args, "limit") or str(default)
    if not limit_arg.isdigit():
        raise SlackError("invalid_limit")
    return max(1, min(int(limit_arg), most))


def _window(args: Json) -> Callable[[Message], bool]:
    """Whether a message's ts lies between the read's ``oldest`` and ``latest`` (exclusive unless ``inclusive``)."""
    oldest = ts_key(opt(args, "oldest") or "0", "invalid_ts_oldest")
    latest = ts_key(opt(args, "latest") or "9999999999.999999", "invalid_ts_latest")
    inclusive = flag(args, "inclusive")

    def within(m: Message) -> bool:
        key = ts_key(m.ts)
        return oldest <= key <= latest if inclusive else oldest < key < latest

    return within


def _page(ws: Workspace, args: Json, items: list[Message], limit: int) -> Json:
    """One page of a read, with the cursor of the next (Slack's ``response_metadata.next_cursor``)."""
    page, rest = items[:limit], items[limit:]
    return {
        "ok": True,
        "messages": [ws.render(m, with_metadata=flag(args, "include_all_metadata")) for m in page],
        "has_more": bool(rest),
        "response_metadata": {"next_cursor": encode_cursor(rest[0].ts) if rest else ""},
    }


def conversations_replies(ws: Workspace, args: Json) -> Json:
    root = _existing(ws, args, "ts", missing="thread_not_found")
    if root.thread_ts is not None:
        root = ws.find(root.channel, root.thread_ts) or root
    limit = _limit(args, 1000, 1000)
    within = _window(args)
    replies = [m for m in ws.replies(root) if within(m)]
    cursor = opt(args, "cursor")
    if cursor is not None:  # later pages carry only replies, as Slack's do
        start = decode_cursor(cursor)
        items = [m for m in replies if ts_key(m.ts) >= start]
    else:
        items = [root, *replies]
    return _page(ws, args, items, limit)


def conversations_history(ws: Workspace, args: Json) -> Json:
    """A conversation's top-level messages (thread replies only as their roots), newest first, as Slack pages them:
    ``oldest``/``latest`` (exclusive unless ``inclusive``), ``limit`` (at most 999), ``cursor``."""
    channel = req(args, "channel", "channel_not_found")
    if channel not in ws.channels:
        raise SlackError("channel_not_found")
    limit = _limit(args, 100, 999)
    within = _window(args)

    def shown(m: Message) -> bool:
        return within(m) and (m.thread_ts is None or m.thread_ts == m.ts)

    items = sorted((m for m in ws.channels[channel] if shown(m)), key=lambda m: ts_key(m.ts), reverse=True)
    cursor = opt(args, "cursor")
    if cursor is not None:
        start = decode_cursor(cursor)
        items = [m for m in items if ts_key(m.ts) <= start]
    return _page(ws, args, items, limit)


def assistant_threads_set_status(ws: Workspace, args: Json) -> Json:
    """The "is thinking…" line under a thread (Slack's agent surface); an empty status clears it, and so does the
    app's next post in the thread, or two minutes without one (the config's ``status_seconds``). A channel the test
    made refuse statuses answers with its error."""
    channel = req(args, "channel_id", "channel_not_found")
    thread_ts = req(args, "thread_ts", "invalid_thread_ts")
    if refused := ws.status_refusals.get(channel):
        raise SlackError(refused)
    if ws.find(channel, thread_ts) is None:
        raise SlackError("invalid_thread_ts")
    if "status" not in args:
        raise SlackError("invalid_arguments")
    loading = args.get("loading_messages")
    if loading is not None and (not isinstance(loading, list) or len(loading) > 10):
        raise SlackError("invalid_arguments")
    ws.statuses[f"{channel}/{thread_ts}"] = (opt(args, "status") or "", time.time() + ws.config.status_seconds)
    return {"ok": True}


def users_info(ws: Workspace, args: Json) -> Json:
    return {"ok": True, "user": copy.deepcopy(ws.ensure_user(req(args, "user", "user_not_found")))}


API: dict[str, Route] = {
    "assistant.threads.setStatus": assistant_threads_set_status,
    "auth.test": auth_test,
    "chat.postMessage": chat_post_message,
    "chat.update": chat_update,
    "chat.delete": chat_delete,
    "chat.postEphemeral": chat_post_ephemeral,
    "chat.startStream": chat_start_stream,
    "chat.appendStream": chat_append_stream,
    "chat.stopStream": chat_stop_stream,
    "reactions.add": reactions_add,
    "reactions.remove": reactions_remove,
    "conversations.replies": conversations_replies,
    "conversations.history": conversations_history,
    "users.info": users_info,
    **assistant.API,
    **usergroups.API,
    **modals.API,
}


# -- deliveries to the app ----------------------------------------------------------------


def deliver(
    ws: Workspace, url: str, body: str, *, content_type: str, kind: str, event_id: str | None = None, retry_num: int = 0
) -> Json:
    """POST one signed request to the app and remember how it answered."""
    timestamp = str(int(time.time()))
    signature = SignatureVerifier(ws.config.signing_secret).generate_signature(timestamp=timestamp, body=body)
    headers = {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": timestamp,
        "X-Slack-Signature": signature or "",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
    }
    if retry_num:
        headers.update({"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": "http_timeout"})
    record: Json = {"kind": kind, "url": url, "event_id": event_id, "retry_num": retry_num, "time": time.time()}
    record.update(content_type=content_type, body=body, status=None, error=None)
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")  # noqa: S310
    try:
        with _NO_PROXY.open(request, timeout=ws.config.delivery_seconds) as response:
            record["status"], record["response"] = response.status, response.read(4000).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        record["status"], record["response"] = exc.code, exc.read(4000).decode(errors="replace")
    except OSError as exc:  # refused, reset, timed out: Slack would retry; here the test sees it
        record["error"] = str(exc)
    with ws.lock:
        ws.deliveries.append(record)
    return record


def deliver_events(ws: Workspace, events: list[Json]) -> list[Json]:
    """Each event in its own envelope and request, as Slack does; nothing is sent without a URL."""
    url = ws.config.events_url
    if not url:
        return []
    results = []
    for event in events:
        payload = envelope(ws.config, event)
        record = deliver(
            ws, url, json.dumps(payload), content_type="application/json", kind="event", event_id=payload["event_id"]
        )
        outcome = {"status": record["status"], "error": record["error"]}
        results.append({"event_id": payload["event_id"], "type": event["type"], **outcome})
    return results


def _echo_events(ws: Workspace) -> list[Json]:
    """The bot's own posts and edits as Slack echoes them, when the test asked for echoes."""
    with ws.lock:
        echoes, ws.echoes = ws.echoes, []
        if not ws.config.echo_bot_messages:
            return []
        return [message_event(ws, m) if old is None else message_changed_event(ws, m, old) for m, old in echoes]


def _apply_later(ws: Workspace, method: str, args: Json, seconds: float) -> None:
    """A failed call takes effect ``seconds`` from now (``Failure.applied_after``), unless the fake is reset first."""

    def apply() -> None:
        with ws.lock:
            if timer not in ws.pending:
                return
            ws.pending.remove(timer)
            with contextlib.suppress(SlackError):
                API[method](ws, args)
            echo = _echo_events(ws)
        if echo:
            deliver_events(ws, echo)
        ws.touch()

    timer = threading.Timer(seconds, apply)
    timer.daemon = True
    with ws.lock:
        ws.pending.append(timer)
    timer.start()


# -- HTTP -------------------------------------------------------------------------------


def _parse_body(raw: bytes, content_type: str) -> Json:
    """Form and JSON bodies alike become one flat dict; multipart uploads are not faked."""
    if not raw:
        return {}
    if content_type.startswith("application/json"):
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            raise SlackError("invalid_json") from exc
        if not isinstance(parsed, dict):
            raise SlackError("invalid_json")
        return parsed
    return dict(parse_qsl(raw.decode(errors="replace"), keep_blank_values=True))


MAX_BODY_BYTES = 8 * 1024 * 1024  # any page may post to /api/ (it needs the token to do anything): read at most this


def _content_length(header: str | None) -> int | None:
    """The body's declared length (0 without one); None for one that is not a whole number of bytes."""
    if header is None or header.strip() == "":
        return 0
    return int(header) if header.strip().isdigit() else None


class Handler(BaseHTTPRequestHandler):
    """One request: route, answer, log one JSON line to stderr."""

    server: FakeSlackServer
    server_version = "fakeslack/1.0"
    cut: str | None = None  # this request's answer is a cut connection (``Failure.cut``)
    partial = b""  # the answer whose first half a "partial" cut sends
    reset = False  # the connection is reset when the handler finishes (``_cut``)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def log_message(self, format: str, *args: Any) -> None:
        """Replaced by the JSON line written in ``_handle``."""

    def _handle(self, verb: str) -> None:
        started, ws = time.monotonic(), self.server.workspace
        url = urlsplit(self.path)
        if not url.path.startswith("/api/") and (refused := self._foreign()):  # the Web API needs the bot's token
            self.close_connection = True  # its body, if any, is never read
            self._send(403, {"ok": False, "error": refused}, {})
            return
        if verb == "GET" and self.server.serve_page(self, ws, self.path):
            return
        headers: dict[str, str] = {}
        log: Json = {"time": round(time.time(), 3), "verb": verb, "path": url.path}
        args: Json = dict(parse_qsl(url.query, keep_blank_values=True))
        parse_error: str | None = None
        length = _content_length(self.headers.get("Content-Length"))
        if length is None or length > MAX_BODY_BYTES:  # never read: a negative length reads until the peer closes
            self.close_connection = True
            status = 400 if length is None else 413
            self._send(status, {"ok": False, "error": "invalid_content_length" if length is None else "too_large"}, {})
            print(json.dumps({**log, "status": status}), file=sys.stderr, flush=True)
            return
        try:
            args.update(_parse_body(self.rfile.read(length), self.headers.get("Content-Type", "")))
        except SlackError as exc:
            parse_error = exc.code
        if url.path.startswith("/api/"):
            method = url.path[len("/api/") :]
            log["api"] = method
            status, body, headers = self._web_api(ws, method, args, parse_error)
        elif url.path.startswith("/_fake/"):
            status, body = self._control(ws, verb, url.path[len("/_fake/") :], args, parse_error)
        else:
            status, body = 404, {"ok": False, "error": "not_found"}
        log.update(
            status=status, ok=body.get("ok"), error=body.get("error"), ms=round((time.monotonic() - started) * 1000, 1)
        )
        cut, self.cut = self.cut, None
        if cut is None:
            self._send(status, body, headers)
        else:
            log["cut"] = cut
            self._cut(cut)
        if verb == "POST":  # every change arrives by POST: the page looks again
            ws.touch()
        print(json.dumps(log), file=sys.stderr, flush=True)

    def _foreign(self) -> str | None:
        """Why a request for the page or the control API (which acts as anyone: posts, clicks Approve as an
        operator, reads every message) is not this page's or a local tool's, if it is not: addressed to another
        name (a site that rebinds its own name to 127.0.0.1), or sent by another site's page (a form posted across
        origins needs no preflight; the browser names its origin)."""
        port = self.server.server_address[1]
        hosts = {f"{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")} | {urlsplit(self.server.url).netloc}
        host = self.headers.get("Host")
        if host not in hosts:
            return "forbidden: the local workspace answers only its loopback address"
        origin = self.headers.get("Origin")
        if origin is not None and origin != f"http://{host}":
            return "forbidden: the local workspace answers only its own page"
        return None

    def _web_api(
        self, ws: Workspace, method: str, args: Json, parse_error: str | None
    ) -> tuple[int, Json, dict[str, str]]:
        auth = self.headers.get("Authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else args.get("token")
        args.pop("token", None)  # recorded calls never hold a token
        status, headers = 200, dict[str, str]()
        with ws.lock:
            if method not in API:
                body: Json = {"ok": False, "error": "unknown_method"}
            elif token != ws.config.bot_token:
                body = {"ok": False, "error": "invalid_auth"}
            elif parse_error is not None:
                body = {"ok": False, "error": parse_error}
            elif failure := ws.take_failure(method, args):
                status, body, headers = self._failure(ws, method, args, failure)
            else:
                for key in ("blocks", "attachments", "chunks"):  # recorded parsed, however the client sent them
                    if isinstance(args.get(key), str):
                        with contextlib.suppress(ValueError):
                            args[key] = json.loads(args[key])
                try:
                    body = API[method](ws, args)
                except SlackError as exc:
                    body = {"ok": False, "error": exc.code}
            ws.record(method, args, status, body)
            echo = _echo_events(ws)
        if echo:  # after the answer, as Slack does: the app may be the one waiting for it
            threading.Thread(target=deliver_events, args=(ws, echo), daemon=True).start()
        delay = ws.take_delay(method, args)
        if delay is not None:  # a slow Slack: the call took effect, its answer is late (or released)
            delay.released.wait(delay.seconds)
        return status, body, headers

    def _control(self, ws: Workspace, verb: str, name: str, args: Json, parse_error: str | None) -> tuple[int, Json]:
        if parse_error is not None:
            return 400, {"ok": False, "error": parse_error}
        name, _, key = name.partition("/")  # response_url/<key> is the only path with a parameter
        if key:
            args["key"] = key
        try:
            handler = self.server.control.get((verb, name))
            if handler is None:
                return 404, {"ok": False, "error": f"no control endpoint {verb} /_fake/{name}"}
            return 200, handler(ws, args)
        except SlackError as exc:  # "..._not_found" is a 404, anything else a bad request
            return (404 if exc.code.endswith("_not_found") else 400), {"ok": False, "error": exc.code}
        except (TypeError, ValueError) as exc:
            return 400, {"ok": False, "error": str(exc)}

    def _failure(self, ws: Workspace, method: str, args: Json, failure: Failure) -> tuple[int, Json, dict[str, str]]:
        """The answer of an injected failure (``FakeSlack.fail``); a cut one is recorded as status 0."""
        default = {429: "ratelimited", 503: "service_unavailable"}.get(failure.status, "fatal_error")
        made: Json = {"ok": False, "error": failure.error or default}
        if failure.applied:  # the call took effect; its answer is the gateway's error (or none: a cut)
            try:
                made = API[method](ws, args)
            except SlackError as exc:
                made = {"ok": False, "error": exc.code}
        elif failure.applied_after is not None:
            _apply_later(ws, method, copy.deepcopy(args), failure.applied_after)
        if failure.cut is not None:
            self.cut, self.partial = failure.cut, json.dumps(made).encode()
            return 0, {"ok": False, "error": f"connection_{failure.cut}"}, {}
        headers = {} if failure.retry_after is None else {"Retry-After": str(failure.retry_after)}
        return failure.status, {"ok": False, "error": failure.error or default}, headers

    def _cut(self, how: str) -> None:
        """No answer: the connection is reset (an RST, SO_LINGER 0) or closed (a FIN) when this request finishes; or
        (``partial``) a 200 with the call's answer, closed halfway through its body."""
        self.close_connection = True
        if how == "partial":
            self.send_response(200)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(self.partial)))
            self.end_headers()
            self.wfile.write(self.partial[: len(self.partial) // 2])
        if how == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.reset = True

    def finish(self) -> None:
        """A reset connection is closed here, its file objects closed first (only then does it close, with the RST),
        before the server's shutdown would send a FIN."""
        super().finish()
        if self.reset:
            self.connection.close()

    def _send(self, status: int, body: Json, headers: dict[str, str]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class FakeSlackServer(ThreadingHTTPServer):
    """A threaded HTTP server that owns one ``Workspace``; ``control`` maps (verb, name) to handlers, and
    ``serve_page`` answers the browser page's own GETs (its files, its event stream, the console) first."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG  # a burst of clients connecting at once is never dropped (``serve``)

    def __init__(
        self,
        address: tuple[str, int],
        workspace: Workspace,
        control: Mapping[tuple[str, str], Route],
        serve_page: Callable[[BaseHTTPRequestHandler, Workspace, str], bool] = lambda handler, ws, target: False,
    ) -> None:
        super().__init__(address, Handler)
        self.workspace, self.control, self.serve_page = workspace, control, serve_page
        host, port = self.server_address[0], self.server_address[1]
        self.url = f"http://{host!s}:{port}"
        workspace.base_url = self.url

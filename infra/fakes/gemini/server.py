"""The HTTP face of the fake Gemini: the REST paths google-genai calls, plus ``/_stub/`` control.

It speaks the real wire protocol so the code under test keeps its real client:
``POST /{v1|v1beta|...}/models/{model}:generateContent`` (also ``streamGenerateContent``
and ``countTokens``, and the Vertex-style ``publishers/google`` and
``projects/*/locations/*`` prefixes), ``x-goog-api-key`` or ``?key=`` authentication, and
Google's ``{"error": {"code", "message", "status"}}`` envelope, which the SDK maps to
``ClientError``/``ServerError`` and retries by status code.

Every model request is journaled (the key's value redacted) and logged to stderr as one
JSON line; the key is never logged.
"""

from __future__ import annotations

import json
import re
import time
from http.server import BaseHTTPRequestHandler
from typing import IO, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from infra.fakes.serve import BROWSER_REFUSED, JsonLogServer, from_a_browser, read_body

from .demo import demo_item
from .state import Reply, Script, ScriptItemError, error_reply, estimate_tokens, stream_events

REDACTED = "[redacted]"
_SECRET_HEADERS = frozenset({"x-goog-api-key", "authorization", "cookie"})
_MODEL_PATH = re.compile(
    r"^/(?P<version>v1|v1beta|v1alpha|v1beta1)/"
    r"(?:projects/[^/]+/locations/[^/]+/)?(?:publishers/google/)?"
    r"models/(?P<model>[^/:]+):(?P<action>generateContent|streamGenerateContent|countTokens)$"
)
_KEY_IN_TEXT = re.compile(r"key=[^&\s'\"]+")
_MISSING_KEY = (
    "Method doesn't allow unregistered callers (callers without established identity). "
    "Please use API Key or other form of API consumer identity to call this API."
)
_INVALID_KEY = "API key not valid. Please pass a valid API key."


def _invalid_key_reply() -> Reply:
    """The reply Google gives for a wrong key: 400 with an ``API_KEY_INVALID`` ErrorInfo."""
    body = {
        "error": {
            "code": 400,
            "message": _INVALID_KEY,
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID",
                    "domain": "googleapis.com",
                    "metadata": {"service": "generativelanguage.googleapis.com"},
                }
            ],
        }
    }
    return Reply(400, body, source="auth")


def redact_query(query: str) -> str:
    """The query string with any ``key`` value hidden, for the journal and the log."""
    pairs = parse_qsl(query, keep_blank_values=True)
    return urlencode([(k, REDACTED if k == "key" else v) for k, v in pairs], safe="[]")


class FakeGeminiServer(JsonLogServer):
    """A threaded server whose handlers share one ``Script`` (and so one lock)."""

    def __init__(
        self,
        address: tuple[str, int],
        *,
        api_key: str | None = None,
        demo: bool = False,
        log_stream: IO[str] | None = None,
    ) -> None:
        self.script = Script()
        self.api_key = api_key
        self.demo = demo
        super().__init__(address, _Handler, log_stream)

    def check_key(self, headers: dict[str, str], query: str) -> Reply | None:
        """Refuse like Google does when a key is configured and the request's is absent or wrong."""
        if self.api_key is None:
            return None
        given = headers.get("x-goog-api-key") or dict(parse_qsl(query)).get("key")
        if not given:
            return error_reply(403, _MISSING_KEY, source="auth")
        if given != self.api_key:
            return _invalid_key_reply()
        return None


class _Handler(BaseHTTPRequestHandler):
    """Routes one request; decisions happen in ``Script`` under its lock, sleeping outside it."""

    server: FakeGeminiServer
    server_version = "fakegemini/1"
    # A connection stays open between replies, as Gemini's endpoint keeps it (a client's pool reuses it); a stream
    # ends its connection (it is not chunked), and so does a request whose body could not be read whole.
    protocol_version = "HTTP/1.1"
    _raw: bytes | None = None  # the request's body, read whole before any reply (None: its length was refused)

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        script = self.server.script
        if path == "/_stub/requests":
            self._control(200, {"requests": script.requests()})
        elif path == "/_stub/script":
            self._control(200, {"responses": script.remaining()})
        elif path == "/_stub/health":
            self._control(200, {"ok": True, "demo": self.server.demo, "remaining": len(script.remaining())})
        else:
            self._control(404, error_reply(404, f"fakegemini: no route for GET {path}", source="route").body)

    def do_POST(self) -> None:
        if from_a_browser(self):  # its body is never read: the connection ends with the answer
            self._raw, self.close_connection = None, True
            self._control(403, error_reply(403, f"fakegemini: {BROWSER_REFUSED}", source="route").body)
            return
        try:
            self._raw = read_body(self)
        except ValueError:
            self._raw, self.close_connection = None, True  # what is left of it must not be read as a request
        split = urlsplit(self.path)
        if split.path.startswith("/_stub/"):
            self._post_control(split.path)
            return
        match = _MODEL_PATH.match(split.path)
        if match is None:
            self._control(404, error_reply(404, f"fakegemini: no route for POST {split.path}", source="route").body)
            return
        self._model_request(split.query, unquote(match["model"]), match["action"], match["version"])

    def _post_control(self, path: str) -> None:
        script = self.server.script
        if path == "/_stub/reset":
            script.reset()
            self._control(200, {"ok": True})
            return
        if path != "/_stub/script":
            self._control(404, error_reply(404, f"fakegemini: no route for POST {path}", source="route").body)
            return
        try:
            payload = json.loads(self._body() or b"null")
            if not isinstance(payload, dict) or not isinstance(payload.get("responses"), list):
                raise ScriptItemError('expected {"responses": [items]}')
            remaining = script.extend(payload["responses"])
        except (ValueError, ScriptItemError) as exc:
            self._control(400, error_reply(400, f"fakegemini: {exc}", source="control").body)
            return
        self._control(200, {"queued": len(payload["responses"]), "remaining": remaining})

    def _body(self) -> bytes:
        """The request's body, read by ``do_POST``; a ``ValueError`` if its length was refused."""
        if self._raw is None:
            raise ValueError("body length out of range")
        return self._raw

    def _model_request(self, query: str, model: str, action: str, version: str) -> None:
        started = time.monotonic()
        headers = {name.lower(): value for name, value in self.headers.items()}
        entry: dict[str, Any] = {
            "time": time.time(),
            "method": "POST",
            "path": urlsplit(self.path).path,
            "query": redact_query(query),
            "api_version": version,
            "model": model,
            "action": action,
            "headers": {k: (REDACTED if k in _SECRET_HEADERS else v) for k, v in headers.items()},
            "body": None,
        }
        reply = self.server.check_key(headers, query)
        body: Any = None
        if reply is None:
            try:
                body = json.loads(self._body() or b"{}")
            except ValueError:
                reply = error_reply(400, "Invalid JSON payload received.", source="invalid")
            else:
                entry["body"] = body
                if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
                    reply = error_reply(400, "* contents: contents is not specified", source="invalid")
        if reply is not None:
            self.server.script.record(entry, reply)
        elif action == "countTokens":
            reply = Reply(200, {"totalTokens": estimate_tokens(body.get("contents"))}, source="count")
            self.server.script.record(entry, reply)
        else:
            demo = demo_item if self.server.demo else None
            reply = self.server.script.answer(entry, body, model=model, demo=demo)
        if reply.delay_seconds > 0:
            time.sleep(reply.delay_seconds)
        stream = action == "streamGenerateContent" and reply.status == 200
        try:
            if stream:
                self._send_events(stream_events(reply.body), reply.headers, reply.stream_delay_seconds)
            else:
                self._send(reply.status, reply.body, reply.headers)
        except OSError as exc:  # the client gave up (its timeout) while we slept
            self._log(reply.status, started, model=model, action=action, source=reply.source, error=str(exc))
            return
        self._log(reply.status, started, model=model, action=action, source=reply.source)

    def _control(self, status: int, body: Any) -> None:
        started = time.monotonic()
        self._send(status, body)
        self._log(status, started, source="control")

    def _send(self, status: int, body: Any, headers: tuple[tuple[str, str], ...] = ()) -> None:
        """Write the reply (a stream goes by ``_send_events``)."""
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:  # its body was not read whole: the client must not send another on it
            self.send_header("Connection", "close")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_events(self, events: list[Any], headers: tuple[tuple[str, str], ...], pause: float) -> None:
        """A stream as ``alt=sse`` carries it: one server-sent event per piece, ``pause`` seconds apart."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.close_connection = True
        for index, event in enumerate(events):
            if index and pause:
                time.sleep(pause)
            self.wfile.write(f"data: {json.dumps(event, ensure_ascii=False)}\r\n\r\n".encode())
            self.wfile.flush()

    def _log(self, status: int, started: float, **fields: Any) -> None:
        split = urlsplit(self.path)
        path = split.path + (f"?{redact_query(split.query)}" if split.query else "")
        line = {"method": self.command, "path": path, "status": status}
        line.update({k: v for k, v in fields.items() if v is not None})
        line["ms"] = round((time.monotonic() - started) * 1000, 1)
        self.server.log_json(line)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        """Silenced: ``_log`` writes the one JSON line per request instead."""

    def log_message(self, format: str, *args: Any) -> None:
        """Malformed requests and handler errors still reach stderr, as JSON like the rest."""
        message = _KEY_IN_TEXT.sub(f"key={REDACTED}", format % args)
        self.server.log_json({"ts": round(time.time(), 3), "message": message})

"""The script a test hands the fake Gemini: queued replies, the request journal, reply bodies.

Tests of an agent loop need to say "the model answers X, then calls tool Y, then the
service is down twice" and later ask "what did the loop actually send?". This module
holds both halves behind one lock, and turns a queued item into exactly the JSON the
Gemini API would return, so the real google-genai client parses it unchanged.

Items (JSON objects, validated when queued so a typo fails the test that wrote it):

* ``{"text": "..."}`` - a model turn with one text part;
* ``{"function_calls": [{"name": "...", "args": {...}, "id": "..."}], "text": "..."}`` -
  a model turn with an optional text part and one ``functionCall`` part per call. A call
  without ``"id"`` gets a generated one; ``"id": null`` sends none (older models do not);
* ``{"error": {"code": 503, "status": "UNAVAILABLE", "message": "..."}, "times": N,
  "retry_after": 2}`` - Google's error JSON with that HTTP status, N times (default 1);
* ``{"raw": {...}, "status": 200}`` - that JSON verbatim, for malformed replies;
* modifiers on any of them: ``"delay_seconds": 2.5`` (sleep before answering),
  ``"match": {"contains": "..."}`` (only answer a request whose conversation contains
  the text; the first matching item in the queue is used), and for text and call
  turns ``"finish_reason": "MAX_TOKENS"`` (default ``STOP``).
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

EXHAUSTED_MESSAGE = "fakegemini: script exhausted"
NO_MATCH_MESSAGE = "fakegemini: no scripted response matches this request"
DEFAULT_ERROR_MESSAGE = "fakegemini: scripted error"
MAX_RECORDS = 1000

# The canonical google.rpc status for each HTTP code the Gemini API returns.
STATUS_NAMES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}

_ITEM_KEYS = frozenset(
    {"text", "function_calls", "error", "times", "retry_after", "raw", "status"}
    | {"delay_seconds", "match", "finish_reason", "stream_delay_seconds"}
)
_CALL_KEYS = frozenset({"name", "args", "id"})

Item = dict[str, Any]


class ScriptItemError(ValueError):
    """A queued item is malformed; raised before anything is queued."""


@dataclass(frozen=True)
class Reply:
    """What the server sends for one request, decided under the lock, sent outside it."""

    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()
    delay_seconds: float = 0.0
    source: str = "script"
    stream_delay_seconds: float = 0.0  # streamGenerateContent: the pause between its events


def google_error(code: int, status: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Google's error envelope, which google-genai turns into ``errors.APIError``."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details:
        error["details"] = details
    return {"error": error}


def error_reply(code: int, message: str, *, source: str, status: str | None = None) -> Reply:
    """A Google-shaped error reply for the stub's own refusals (auth, bad JSON, no script)."""
    return Reply(code, google_error(code, status or STATUS_NAMES.get(code, "UNKNOWN"), message), source=source)


def _fail(index: int, problem: str) -> ScriptItemError:
    return ScriptItemError(f"script item {index}: {problem}")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _validate_calls(index: int, calls: object) -> list[dict[str, Any]]:
    if not isinstance(calls, list) or not calls:
        raise _fail(index, '"function_calls" must be a non-empty list')
    normalised = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise _fail(index, 'each function call needs a non-empty "name"')
        if set(call) - _CALL_KEYS:
            raise _fail(index, f"unknown function call keys {sorted(set(call) - _CALL_KEYS)}")
        args = call.get("args", {})
        if not isinstance(args, dict):
            raise _fail(index, '"args" must be an object (use "raw" for malformed calls)')
        if "id" in call and call["id"] is not None and not isinstance(call["id"], str):
            raise _fail(index, '"id" must be a string or null')
        entry: dict[str, Any] = {"name": call["name"], "args": args}
        if "id" in call:
            entry["id"] = call["id"]
        normalised.append(entry)
    return normalised


def _validate_error(index: int, item: Mapping[str, Any]) -> dict[str, Any]:
    error = item["error"]
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        raise _fail(index, '"error" must be an object with an integer "code"')
    code = error["code"]
    if not 400 <= code <= 599:
        raise _fail(index, '"error.code" must be an HTTP error status (400-599)')
    times = item.get("times", 1)
    if not isinstance(times, int) or isinstance(times, bool) or times < 1:
        raise _fail(index, '"times" must be a positive integer')
    retry_after = item.get("retry_after")
    if retry_after is not None and not (_is_number(retry_after) and retry_after >= 0):
        raise _fail(index, '"retry_after" must be a non-negative number of seconds')
    return {
        "code": code,
        "status": str(error.get("status") or STATUS_NAMES.get(code, "UNKNOWN")),
        "message": str(error.get("message") or DEFAULT_ERROR_MESSAGE),
        **({"details": error["details"]} if isinstance(error.get("details"), list) else {}),
    }


def _validate_modifiers(index: int, item: Mapping[str, Any]) -> Item:
    out: Item = {}
    if "delay_seconds" in item:
        if not (_is_number(item["delay_seconds"]) and item["delay_seconds"] >= 0):
            raise _fail(index, '"delay_seconds" must be a non-negative number')
        out["delay_seconds"] = float(item["delay_seconds"])
    if "stream_delay_seconds" in item:
        if not (_is_number(item["stream_delay_seconds"]) and item["stream_delay_seconds"] >= 0):
            raise _fail(index, '"stream_delay_seconds" must be a non-negative number')
        out["stream_delay_seconds"] = float(item["stream_delay_seconds"])
    if "match" in item:
        match = item["match"]
        if not isinstance(match, dict) or set(match) != {"contains"} or not isinstance(match["contains"], str):
            raise _fail(index, '"match" must be {"contains": "<text>"}')
        out["match"] = {"contains": match["contains"]}
    return out


def _validate_turn(index: int, item: Mapping[str, Any]) -> Item:
    out: Item = {}
    if "text" in item:
        if not isinstance(item["text"], str):
            raise _fail(index, '"text" must be a string')
        out["text"] = item["text"]
    if "function_calls" in item:
        out["function_calls"] = copy.deepcopy(_validate_calls(index, item["function_calls"]))
    if "finish_reason" in item:
        if not isinstance(item["finish_reason"], str):
            raise _fail(index, '"finish_reason" must be a string such as "MAX_TOKENS"')
        out["finish_reason"] = item["finish_reason"]
    return out


def validate_item(item: object, index: int = 0) -> Item:
    """Return a normalised deep copy of ``item`` or raise ``ScriptItemError``."""
    if not isinstance(item, dict):
        raise _fail(index, "must be a JSON object")
    unknown = set(item) - _ITEM_KEYS
    if unknown:
        raise _fail(index, f"unknown keys {sorted(unknown)}")
    present = {"raw": "raw" in item, "error": "error" in item, "turn": "text" in item or "function_calls" in item}
    kinds = [kind for kind, here in present.items() if here]
    if len(kinds) != 1:
        raise _fail(index, 'needs exactly one of "text"/"function_calls", "error" or "raw"')
    out = _validate_modifiers(index, item)
    if kinds == ["raw"]:
        status = item.get("status", 200)
        if not isinstance(status, int) or not 200 <= status <= 599:
            raise _fail(index, '"status" must be an HTTP status')
        out.update(raw=copy.deepcopy(item["raw"]), status=status)
    elif kinds == ["error"]:
        out.update(error=_validate_error(index, item), times=item.get("times", 1))
        if item.get("retry_after") is not None:
            out["retry_after"] = item["retry_after"]
    else:
        out.update(_validate_turn(index, item))
    given = {key for key, value in item.items() if value is not None}
    misplaced = {"times", "retry_after", "status", "finish_reason"} & given - set(out)
    if misplaced:
        raise _fail(index, f"keys {sorted(misplaced)} do not apply to this kind of item")
    return out


def collect_strings(value: object) -> list[str]:
    """Every string value nested in ``value``: the text a ``match`` and a token count see.

    A content's ``role`` is structure, not text, so it is left out.
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for key, child in value.items() if key != "role" for s in collect_strings(child)]
    if isinstance(value, list):
        return [s for child in value for s in collect_strings(child)]
    return []


def estimate_tokens(value: object) -> int:
    """Roughly four characters per token, as Google's own rule of thumb has it."""
    chars = sum(len(s) for s in collect_strings(value))
    return (chars + 3) // 4


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """The prompt side of usageMetadata: what the model would have read."""
    return estimate_tokens([body.get("contents"), body.get("systemInstruction"), body.get("tools")])


def item_matches(item: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    """An item without ``match`` answers anything; otherwise the conversation must contain the text."""
    match = item.get("match")
    if match is None:
        return True
    needle = str(match["contains"])
    return any(needle in s for s in collect_strings([body.get("contents"), body.get("systemInstruction")]))


def build_reply(
    item: Mapping[str, Any],
    *,
    model: str,
    response_id: str,
    next_call_id: Callable[[], str],
    request_body: Mapping[str, Any],
    source: str = "script",
) -> Reply:
    """Turn a validated item into the wire reply the Gemini API would have sent."""
    delay = float(item.get("delay_seconds", 0.0))
    if "raw" in item:
        return Reply(int(item.get("status", 200)), copy.deepcopy(item["raw"]), delay_seconds=delay, source=source)
    if "error" in item:
        error = item["error"]
        headers: tuple[tuple[str, str], ...] = ()
        details = list(error.get("details", []))
        if item.get("retry_after") is not None:
            seconds = item["retry_after"]
            headers = (("Retry-After", f"{seconds:g}"),)
            if error["code"] == 429 and not details:
                details = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds:g}s"}]
        body = google_error(error["code"], error["status"], error["message"], details)
        return Reply(error["code"], body, headers, delay, source)
    parts: list[dict[str, Any]] = []
    if "text" in item:
        parts.append({"text": item["text"]})
    for call in item.get("function_calls", []):
        function_call: dict[str, Any] = {"name": call["name"], "args": copy.deepcopy(call.get("args", {}))}
        call_id = call["id"] if "id" in call else next_call_id()
        if call_id is not None:
            function_call["id"] = call_id
        parts.append({"functionCall": function_call})
    prompt = prompt_tokens(request_body)
    answer = estimate_tokens(parts)
    body = {
        "candidates": [
            {
                "content": {"role": "model", "parts": parts},
                "finishReason": item.get("finish_reason", "STOP"),
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": answer,
            "totalTokenCount": prompt + answer,
        },
        "modelVersion": model,
        "responseId": response_id,
    }
    pause = float(item.get("stream_delay_seconds", 0.0))
    return Reply(200, body, delay_seconds=delay, source=source, stream_delay_seconds=pause)


def stream_events(body: Any, pieces: int = 8) -> list[Any]:
    """A reply as ``streamGenerateContent?alt=sse`` sends it: its text in up to ``pieces`` events of a few words
    each, then the function calls, the finish reason and the usage in the last event."""
    candidates = body.get("candidates") if isinstance(body, dict) else None
    if not candidates or not isinstance(candidates[0].get("content"), dict):
        return [body]
    head = candidates[0]
    events: list[Any] = []
    rest: list[Any] = []
    for part in head["content"].get("parts") or []:
        text = part.get("text") if isinstance(part, dict) and not part.get("thought") else None
        if not isinstance(text, str) or not text:
            rest.append(part)
            continue
        words = text.split(" ")
        size = max(1, -(-len(words) // pieces))
        for start in range(0, len(words), size):
            piece = " ".join(words[start : start + size]) + (" " if start + size < len(words) else "")
            events.append({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}],
                           "modelVersion": body.get("modelVersion"), "responseId": body.get("responseId")})  # fmt: skip
    last = copy.deepcopy(body)
    last["candidates"][0]["content"]["parts"] = rest
    if events and not rest:  # the last text event carries the ending
        last["candidates"][0]["content"] = events.pop()["candidates"][0]["content"]
    return [*events, last]


class Script:
    """The queue and the journal; every method is atomic under the one lock."""

    def __init__(self, *, max_records: int = MAX_RECORDS) -> None:
        self._lock = threading.Lock()
        self._items: list[Item] = []
        self._records: deque[dict[str, Any]] = deque(maxlen=max_records)
        self._seq = 0
        self._call_seq = 0

    def extend(self, items: Iterable[object]) -> int:
        """Validate all items first, so a bad batch queues nothing; return the queue length."""
        valid = [validate_item(item, index) for index, item in enumerate(items)]
        with self._lock:
            self._items.extend(valid)
            return len(self._items)

    def reset(self) -> None:
        """Forget the queue, the journal and the id counters: a fresh, deterministic stub."""
        with self._lock:
            self._items.clear()
            self._records.clear()
            self._seq = 0
            self._call_seq = 0

    def remaining(self) -> list[Item]:
        """A deep copy, so a caller cannot change the queue behind the lock's back."""
        with self._lock:
            return copy.deepcopy(self._items)

    def requests(self) -> list[dict[str, Any]]:
        """The journal, oldest first, capped at ``max_records`` so a long demo run stays small."""
        with self._lock:
            return copy.deepcopy(list(self._records))

    def record(self, entry: Mapping[str, Any], reply: Reply) -> None:
        """Journal a request that the stub answered without consulting the script."""
        with self._lock:
            self._store(entry, reply)

    def answer(
        self,
        entry: Mapping[str, Any],
        body: Mapping[str, Any],
        *,
        model: str,
        demo: Callable[[Mapping[str, Any]], Item] | None = None,
    ) -> Reply:
        """Take the first item that matches, or fall back to ``demo``, and journal the exchange.

        Taking and journaling happen in one critical section, so the journal's order is
        the order in which concurrent requests consumed the script.
        """
        with self._lock:
            index = next((i for i, item in enumerate(self._items) if item_matches(item, body)), None)
            item: Item | None = None
            source = "script"
            if index is not None:
                item = self._items[index]
                if item.get("times", 1) > 1:
                    item["times"] -= 1  # an error item stays queued until served ``times`` times
                else:
                    del self._items[index]
            elif demo is not None:
                item, source = demo(body), "demo"
            if item is None:
                message = NO_MATCH_MESSAGE if self._items else EXHAUSTED_MESSAGE
                reply = error_reply(500, message, source="exhausted")
            else:
                reply = build_reply(
                    item,
                    model=model,
                    response_id=f"fakegemini-{self._seq + 1}",
                    next_call_id=self._next_call_id,
                    request_body=body,
                    source=source,
                )
            self._store(entry, reply, (item or {}).get("match"))
            return reply

    def _next_call_id(self) -> str:
        self._call_seq += 1
        return f"fakegemini-call-{self._call_seq}"

    def _store(self, entry: Mapping[str, Any], reply: Reply, match: Mapping[str, Any] | None = None) -> None:
        self._seq += 1
        record = json.loads(json.dumps(dict(entry)))
        journal: dict[str, Any] = {"status": reply.status, "source": reply.source}
        if isinstance(reply.body, dict) and "usageMetadata" in reply.body:
            journal["usage"] = reply.body["usageMetadata"]  # what the model reported it cost
            journal["parts"] = copy.deepcopy(reply.body["candidates"][0]["content"]["parts"])  # what it answered
        if match is not None:
            journal["match"] = dict(match)  # the scripted item's condition this request met
        record.update(seq=self._seq, reply=journal)
        self._records.append(record)

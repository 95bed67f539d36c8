"""An HTTP transport that stops reading a response once it is larger than the cap (issue 24.6).

A tool's result reaches the model cut to ``MAX_TOOL_RESULT_CHARS``, but the SDK reads a JSON response whole and
parses it before anything can cut it: a 40 MB result cost the client about 390 MiB. This transport counts a
response's bytes as they arrive and raises ``TooLarge`` at the first chunk past ``MAX_RESULT_BYTES`` (at once
when the response declares a larger ``Content-Length``), so a call never holds more than about the cap. Requests
ask for no compression (``IDENTITY``) and a compressed answer is refused: its bytes on the wire say nothing of its
size once inflated. Event streams are left to the SDK's own per-event cap (``max_sse_event_size``, set to the same
number by ``connection``): a stream may carry many events, and only one is held at a time.

It also notes the requests a server answered as it answers a session id it does not know (HTTP 404: it restarted,
or ended the session), in ``SESSION_GONE`` of the calling task: such a request was not run, so ``connection`` may
send it again on a new session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextvars import ContextVar

import httpx2

from shared.errors import ProductError

MAX_RESULT_BYTES = 4 * 1024 * 1024  # room for a large structured result or an image to summarise; 100x the text kept


IDENTITY = {"Accept-Encoding": "identity"}  # the headers every client of this transport sends
SESSION_ID = "mcp-session-id"
# The JSON-RPC methods of requests the server answered 404 for their session id (a list set by the caller, or None).
SESSION_GONE: ContextVar[list[str] | None] = ContextVar("mcp_session_gone", default=None)


class TooLarge(ProductError):
    """A response was larger than the cap; the rest of it was not read."""

    def __init__(self, limit: int, why: str = "") -> None:
        super().__init__(why or f"its answer was larger than {limit // (1024 * 1024)} MiB, so it was not read")
        self.limit = limit


class CappedTransport(httpx2.AsyncBaseTransport):
    """``inner``, with every response body that is not an event stream cut off at ``limit`` bytes."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int = MAX_RESULT_BYTES) -> None:
        self.inner = inner
        self.limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self.inner.handle_async_request(request)
        if response.status_code == 404 and request.method == "POST" and request.headers.get(SESSION_ID):
            _note_gone(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in {"", "identity"}:
            await response.aclose()
            raise TooLarge(self.limit, f"it answered compressed ({encoding}), which was not asked for")
        if response.headers.get("content-type", "").lower().startswith("text/event-stream"):
            return response
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.limit:
            await response.aclose()
            raise TooLarge(self.limit)
        response.stream = CappedStream(response.stream, self.limit)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def _note_gone(request: httpx2.Request) -> None:
    """Note the JSON-RPC request (not a notification) a server refused for its unknown session id."""
    gone = SESSION_GONE.get()
    if gone is None:
        return
    try:
        body = json.loads(request.content)
    except ValueError:
        return
    if isinstance(body, dict) and "id" in body and isinstance(body.get("method"), str):
        gone.append(body["method"])


class CappedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream | httpx2.SyncByteStream, limit: int) -> None:
        self.inner = inner
        self.limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if not isinstance(self.inner, httpx2.AsyncByteStream):  # a transport always answers with an async stream
            raise TypeError("an async transport answered with a synchronous stream")
        seen = 0
        async for chunk in self.inner:
            seen += len(chunk)
            if seen > self.limit:
                raise TooLarge(self.limit)
            yield chunk

    async def aclose(self) -> None:
        if isinstance(self.inner, httpx2.AsyncByteStream):
            await self.inner.aclose()

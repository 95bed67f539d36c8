"""Talking to one MCP server: list its tools, call one, on the connections ``pool`` keeps for the instance.

The SDK's ``Client`` negotiates the protocol (the stateless 2026-07-28 revision, or the older handshake). A
listing negotiates afresh and keeps what the server chose (``list_each`` lists several servers at once, each within
its own timeout); a call adopts it (no ``server/discover`` probe) and is given the tool's entry of the cached
listing, so the session does not list again before it accepts a result (the SDK's own response cache is off:
servers mark listings uncacheable, and ``catalog`` keeps them). A server that
refuses the kept protocol, or answers that it does not know the session (HTTP 404 for its session id: it restarted
between the handshake and the request, which it did not run), is negotiated with again and asked again, once (a
request that may have run is never sent again); one that says its tools changed, or no longer knows a
tool, has its listing dropped (``pool.tools_changed``), as has one after a call of a tool not marked read-only
(its notification may be lost, and on 2026-07-28 is never heard: ``_may_change_tools_unheard``). Responses are
read under a byte cap (``capped``).

The client declares form and URL elicitation, so a server may ask for input the way the SDK teaches (a resolver
returning ``Elicit``). A call is made with ``allow_input_required`` so on the 2026-07-28 revision a server's request
for input comes back to us (to become an operator question) instead of being answered here. On the older
handshake a server asks in the middle of the call, while the request is open; nobody can answer that in time, so
it is declined (``decline_mid_call``) and the caller is told what was asked.
Every failure is an ``McpFailure`` with words fit for the model; the credential never reaches a message or a log.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.session import ClientRequestContext, ElicitationFnT, IncomingMessage, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from shared import config, deps
from shared.agent.tools.mcp import pool
from shared.agent.tools.mcp.capped import MAX_RESULT_BYTES, SESSION_GONE, TooLarge
from shared.config_values import McpServer
from shared.errors import ProductError

log = logging.getLogger(__name__)

T = TypeVar("T")
Outcome = mcp_types.CallToolResult | mcp_types.InputRequiredResult
MAX_PAGES = 20  # a server whose listing never ends is listed this far
LISTING = "list its tools"
# What a server answers a request in a protocol it no longer speaks (the kept negotiation is stale): it did not run.
REFUSED_PROTOCOL = {mcp_types.UNSUPPORTED_PROTOCOL_VERSION}
SSE_TOO_LARGE = "SSE stream failed: Server-sent event exceeded"  # the SDK's words for an event past its cap


class McpFailure(ProductError):
    """The server could not be reached, answered with a protocol error, or took too long."""

    def __init__(self, message: str, *, expired_state: bool = False, timed_out: bool = False,
                 answered: bool = False) -> None:  # fmt: skip
        super().__init__(message)
        self.expired_state = expired_state  # the server no longer accepts the request state it gave us
        self.timed_out = timed_out  # no answer (or no connection) came in time
        self.answered = answered  # the server answered (too much to read): the request ran

    def told(self) -> str:
        """The failure as a call's error: whether the call may have run, so the model does not repeat one that did
        only to get its result."""
        if self.answered:
            return f"{self}. The call did run: do not repeat it only to get a result"
        return f"{self}; the call may not have completed"


def list_tools(server: McpServer) -> list[mcp_types.Tool]:
    """Every tool the server offers, page by page, on a fresh negotiation (kept for the calls that follow)."""
    return _run(server, LISTING, _listing, negotiate=True)


def list_each(servers: Sequence[McpServer]) -> list[list[mcp_types.Tool] | McpFailure]:
    """``list_tools`` of several servers at once on the instance's loop, so a slow server costs its own timeout,
    not the sum of them: each server's tools, or why not."""

    async def listed(server: McpServer) -> list[mcp_types.Tool] | McpFailure:
        try:
            return await _attempt(server, LISTING, _listing, negotiate=True)
        except McpFailure as exc:
            return exc

    async def listing_all() -> list[list[mcp_types.Tool] | McpFailure]:
        return list(await asyncio.gather(*(listed(server) for server in servers)))

    longest = max((server.timeout_seconds for server in servers), default=0.0)
    try:
        return pool.run(listing_all, longest)
    except (Exception, BaseExceptionGroup) as exc:  # the loop did not end them in time (each has its own timeout)
        return [_failure(server, LISTING, server.timeout_seconds, exc) for server in servers]


async def _listing(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def call_tool(server: McpServer, name: str, arguments: dict[str, Any], *, listed: mcp_types.Tool | None = None,
              input_responses: dict[str, Any] | None = None, request_state: str | None = None,
              asked_mid_call: list[str] | None = None) -> Outcome:  # fmt: skip
    """One ``tools/call`` round: the result, or the server's request for input. ``listed`` is the tool's entry of
    the cached listing (``results`` checks the result against its output schema). What a server on the older
    handshake asked in the middle of the call (declined) is appended to ``asked_mid_call``."""
    responses = _responses(input_responses) if input_responses is not None else None

    async def calling(client: Client) -> Outcome:
        if listed is not None:
            _absorb(client, listed)
        outcome = await client.session.call_tool(
            name, arguments, input_responses=responses, request_state=request_state, allow_input_required=True
        )
        unknown = isinstance(outcome, mcp_types.CallToolResult) and outcome.is_error and _unknown_tool(outcome, name)
        if unknown or _may_change_tools_unheard(listed):
            pool.tools_changed(server)
        return outcome

    return _run(server, f"call {name}", calling, asked=asked_mid_call)


def _may_change_tools_unheard(listed: mcp_types.Tool | None) -> bool:
    """Whether the call may have changed the server's tools without the session hearing it: a tool not marked
    read-only. On the older handshake a server says ``notifications/tools/list_changed`` on the session's
    standalone GET stream (the SDK's ``send_tool_list_changed``), which this call's own session opens beside the
    call and closes with it: the server drops the notification when the GET is not open yet (it keeps no events),
    and the session is gone when the GET's event arrives after the call's answer. On 2026-07-28 the SDK's server
    sends it only on a ``subscriptions/listen`` stream, which this client never opens. So the listing is dropped."""
    annotations = listed.annotations if listed is not None else None
    return not (annotations is not None and annotations.read_only_hint)


def decline_mid_call(asked: list[str]) -> ElicitationFnT:
    """The elicitation callback: its presence declares form and URL elicitation. It is only called when a server
    on the older handshake asks in the middle of a call (on 2026-07-28 a request for input ends the round
    instead); the answer is "decline", and what was asked is noted for the model."""

    async def declining(context: ClientRequestContext, params: mcp_types.ElicitRequestParams) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="decline")

    return declining


def _responses(raw: dict[str, Any]) -> mcp_types.InputResponses:
    """Stored answers (plain JSON) as the SDK's input responses: an elicitation result per request key."""
    return {key: mcp_types.ElicitResult.model_validate(value) for key, value in raw.items()}


def _absorb(client: Client, listed: mcp_types.Tool) -> None:
    """Give the session the cached listing's entry of the tool, as the SDK's ``Client.list_tools`` does with a
    listing its own cache serves: the argument headers of 2026-07-28 (``x-mcp-header``). Without it a fresh session
    lists every tool again before it accepts a result. Its output schema is left out: ``results`` checks the result
    against it, since the SDK's check fails the call as if it had not run (a ``RuntimeError``, whatever the server
    did)."""
    listing = mcp_types.ListToolsResult(tools=[listed.model_copy(update={"output_schema": None})])
    client.session._absorb_tool_listing(listing, complete=False)


def _unknown_tool(result: mcp_types.CallToolResult, name: str) -> bool:
    text = " ".join(b.text for b in result.content if isinstance(b, mcp_types.TextContent))
    return f"unknown tool: {name}".lower() in text.lower()


def _run(server: McpServer, doing: str, operation: Callable[[Client], Awaitable[T]], *, negotiate: bool = False,
         asked: list[str] | None = None) -> T:  # fmt: skip
    try:
        return pool.run(lambda: _attempt(server, doing, operation, negotiate=negotiate, asked=asked),
                        server.timeout_seconds)  # fmt: skip
    except McpFailure:
        raise
    except (Exception, BaseExceptionGroup) as exc:  # the loop did not end it in time (it enforces the timeout)
        raise _failure(server, doing, server.timeout_seconds, exc) from None


async def _attempt(server: McpServer, doing: str, operation: Callable[[Client], Awaitable[T]], *, negotiate: bool,
                   asked: list[str] | None = None) -> T:  # fmt: skip
    """The operation on the instance's loop, within the server's timeout; every failure an ``McpFailure``."""
    timeout = server.timeout_seconds
    declining = decline_mid_call(asked if asked is not None else [])
    try:
        credential = config.mcp_credential(server)  # a ConfigError naming the variable if it is missing
        kept = pool.kept(server, credential, tls_context())
        if negotiate:
            kept.discovered = None
        pinned = kept.discovered is not None
        gone: list[str] = []
        SESSION_GONE.set(gone)  # this task's (each call runs in a task of its own on the loop)
        with anyio.fail_after(timeout):
            try:
                return await _session(server, kept, timeout, declining, operation)
            except (Exception, BaseExceptionGroup) as exc:
                if pinned:  # whatever failed, the next session negotiates again (the server may have changed)
                    kept.discovered = None
                inner = _first(exc) if isinstance(exc, BaseExceptionGroup) else exc
                refused = pinned and isinstance(inner, MCPError) and inner.error.code in REFUSED_PROTOCOL
                if not refused and not (gone and isinstance(inner, MCPError)):
                    raise
                if gone:
                    kept.discovered = None
                    log.info("MCP session gone (the server restarted?): a new session",
                             extra={"server": server.name, "refused": gone})  # fmt: skip
            # The server refused the kept protocol, or no longer knew the session (it restarted): the request did
            # not run, so it is sent again, once, at once, on a new negotiation.
            return await _session(server, kept, timeout, declining, operation)
    except (Exception, BaseExceptionGroup) as exc:  # every failure becomes words for the model
        if _stale_listing(exc):
            pool.tools_changed(server)
        raise _failure(server, doing, timeout, exc) from None


async def _session(server: McpServer, kept: pool.Kept, timeout: float, declining: ElicitationFnT,
                   operation: Callable[[Client], Awaitable[T]]) -> T:  # fmt: skip
    """One SDK session on the kept connections: adopting the kept negotiation, or negotiating and keeping it."""
    discovered = kept.discovered
    mode = pool.LEGACY if discovered == pool.LEGACY else "auto"
    prior = discovered if isinstance(discovered, mcp_types.DiscoverResult) else None
    if prior is not None:
        mode = kept.version
    transport = streamable_http_client(server.url, http_client=kept.http, max_sse_event_size=MAX_RESULT_BYTES)
    async with Client(transport, read_timeout_seconds=timeout, cache=None, mode=mode, prior_discover=prior,
                      elicitation_callback=declining, message_handler=_watching(server)) as client:  # fmt: skip
        if discovered is None:
            session = client.session
            kept.discovered = session.discover_result or pool.LEGACY
            kept.version = client.protocol_version
        return await operation(client)


def _watching(server: McpServer) -> MessageHandlerFnT:
    """What the session does with the server's notifications: a changed tool list drops the cached listing."""

    async def handle(message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            pool.tools_changed(server)

    return handle


def _stale_listing(exc: BaseException) -> bool:
    """Whether the server refused a call in words that say the cached listing is stale: a tool it does not know,
    or argument headers that no longer match the tool's schema (2026-07-28)."""
    inner = _first(exc) if isinstance(exc, BaseExceptionGroup) else exc
    if not isinstance(inner, MCPError):
        return False
    return inner.error.code == mcp_types.HEADER_MISMATCH or "unknown tool" in inner.error.message.lower()


def tls_context() -> ssl.SSLContext:
    """The TLS settings every connection shares, built once per instance: httpx would otherwise load the CA
    bundle for each new client, about 20 ms of every call (measured in ``make bench``, figure 7)."""
    context: ssl.SSLContext = deps.once("mcp_tls", httpx2.create_ssl_context)
    return context


def _failure(server: McpServer, doing: str, timeout: float, exc: BaseException) -> McpFailure:
    """What went wrong, in words fit for the model (the SDK's task groups wrap what failed inside them)."""
    if isinstance(exc, BaseExceptionGroup):
        exc = _first(exc)
    label = f"MCP server {server.name!r}"
    if isinstance(exc, TimeoutError):
        return McpFailure(f"{label} did not answer within {timeout:g} s when asked to {doing}", timed_out=True)
    if isinstance(exc, TooLarge) or _event_too_large(exc):
        too_large = exc if isinstance(exc, TooLarge) else TooLarge(MAX_RESULT_BYTES)
        return McpFailure(
            f"{label} was asked to {doing}, but {too_large}; the result cannot be used (ask for less)", answered=True
        )
    if isinstance(exc, MCPError):
        data = exc.error.data if isinstance(exc.error.data, dict) else {}
        expired = data.get("reason") == "invalid_request_state"
        said = exc.error.message  # the server's own words: labelled as any of its output is (``results``)
        return McpFailure(f"{label} refused to {doing} (its message, untrusted text): {said}", expired_state=expired)
    if isinstance(exc, OSError | httpx2.HTTPError):
        timed_out = isinstance(exc, httpx2.TimeoutException)  # httpx's own timeout (connecting, or reading)
        return McpFailure(f"{label} could not be reached to {doing}: {_reason(exc)}", timed_out=timed_out)
    if isinstance(exc, config.ConfigError):
        return McpFailure(f"{label} is not configured right: {exc}")
    return McpFailure(f"{label} failed to {doing}: {type(exc).__name__}: {_reason(exc)}")


def _event_too_large(exc: BaseException) -> bool:
    """Whether the SDK gave up on an event-stream answer for an event past ``max_sse_event_size``: it reports that
    as an error of the request (its own words, not the server's), having read no more than the cap."""
    return (isinstance(exc, MCPError) and exc.error.code == mcp_types.CONNECTION_CLOSED
            and exc.error.message.startswith(SSE_TOO_LARGE))  # fmt: skip


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    return inner


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"

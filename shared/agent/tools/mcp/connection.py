"""Talking to one MCP server: list its tools, call one. Each operation opens its own short connection.

The SDK's ``Client`` negotiates the protocol (the stateless 2026-07-28 revision, or the older handshake); its
own response cache is off because ``catalog`` keeps tool lists. The client declares form and URL elicitation, so a
server may ask for input the way the SDK teaches (a resolver returning ``Elicit``). A call is made with
``allow_input_required`` so on the 2026-07-28 revision a server's request for input comes back to us (to become an
operator question) instead of being answered here. On the older handshake a server asks in the middle of the
call, while the request is open; nobody can answer that in time, so it is declined (``decline_mid_call``) and the
caller is told what was asked.
Every failure is an ``McpFailure`` with words fit for the model; the credential never reaches a message or a log.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.session import ClientRequestContext, ElicitationFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from shared import config, deps
from shared.errors import ProductError
from shared.mcp_servers import McpServer

T = TypeVar("T")
Outcome = mcp_types.CallToolResult | mcp_types.InputRequiredResult
MAX_PAGES = 20  # a server whose listing never ends is listed this far


class McpFailure(ProductError):
    """The server could not be reached, answered with a protocol error, or took too long."""

    def __init__(self, message: str, *, expired_state: bool = False) -> None:
        super().__init__(message)
        self.expired_state = expired_state  # the server no longer accepts the request state it gave us


def list_tools(server: McpServer) -> list[mcp_types.Tool]:
    """Every tool the server offers, page by page."""

    async def listing(client: Client) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    return _run(server, "list its tools", listing)


def call_tool(server: McpServer, name: str, arguments: dict[str, Any], *,
              input_responses: dict[str, Any] | None = None, request_state: str | None = None,
              asked_mid_call: list[str] | None = None) -> Outcome:  # fmt: skip
    """One ``tools/call`` round: the result, or the server's request for input. What a server on the older
    handshake asked in the middle of the call (declined) is appended to ``asked_mid_call``."""
    responses = _responses(input_responses) if input_responses is not None else None

    async def calling(client: Client) -> Outcome:
        return await client.session.call_tool(
            name, arguments, input_responses=responses, request_state=request_state, allow_input_required=True
        )

    return _run(server, f"call {name}", calling, asked=asked_mid_call)


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


def _run(server: McpServer, doing: str, operation: Callable[[Client], Awaitable[T]], *,
         asked: list[str] | None = None) -> T:  # fmt: skip
    timeout = server.timeout_seconds
    declining = decline_mid_call(asked if asked is not None else [])

    async def run() -> T:
        credential = config.mcp_credential(server)  # a ConfigError naming the variable if it is missing
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        with anyio.fail_after(timeout):
            async with httpx2.AsyncClient(
                headers=headers, timeout=httpx2.Timeout(timeout), verify=tls_context()
            ) as http:
                transport = streamable_http_client(server.url, http_client=http)
                async with Client(
                    transport, read_timeout_seconds=timeout, cache=None, elicitation_callback=declining
                ) as client:
                    return await operation(client)

    try:
        return anyio.run(run)
    except (Exception, BaseExceptionGroup) as exc:  # every failure becomes words for the model
        raise _failure(server, doing, timeout, exc) from None


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
        return McpFailure(f"{label} did not answer within {timeout:g} s when asked to {doing}")
    if isinstance(exc, MCPError):
        data = exc.error.data if isinstance(exc.error.data, dict) else {}
        expired = data.get("reason") == "invalid_request_state"
        return McpFailure(f"{label} refused to {doing}: {exc.error.message}", expired_state=expired)
    if isinstance(exc, OSError | httpx2.HTTPError):
        return McpFailure(f"{label} could not be reached to {doing}: {_reason(exc)}")
    if isinstance(exc, config.ConfigError):
        return McpFailure(f"{label} is not configured right: {exc}")
    return McpFailure(f"{label} failed to {doing}: {type(exc).__name__}: {_reason(exc)}")


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    inner: BaseException = group
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    return inner


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "…"

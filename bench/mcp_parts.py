"""What one MCP tool call is made of: its parts, each timed on its own against the sample server.

How it is measured and read: ``bench/sections/mcp_parts.md`` (its text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import anyio
import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from bench.figures import median
from bench.harness import clocked
from shared.agent.tools.mcp import capped, connection, results
from shared.agent.tools.mcp.tool import McpTool

REPS = 10  # the parts explain the turn ratio; none has a target


@dataclass(frozen=True)
class Parts:
    """Median milliseconds of each part of one call, and the requests one call sends."""

    event_loop_ms: float  # anyio.run of nothing: the loop each request is run in
    client_ms: float  # the HTTP client, the transport and the SDK Client opened and closed, without a request
    ssl_ms: float  # building the TLS context (the CA bundle loaded): once per instance, shared by every client
    connect_ms: float  # a new TCP connection: a fresh client's first request minus one on its open connection
    discover_ms: float  # the server/discover round, on an open connection
    list_round_ms: float  # the tools/list round a fresh session sends to learn the output schema, on an open connection
    call_round_ms: float  # the tools/call round, on an open connection
    schema_ms: float  # the arguments checked against the tool's input schema
    convert_ms: float  # the CallToolResult turned into the function response
    requests: tuple[str, ...]  # the JSON-RPC methods one call of the product sends, in order
    version: str  # the protocol version negotiated

    @property
    def per_connection_ms(self) -> float:
        """What opening a connection and negotiating costs every call: all but the call's own round and checks."""
        return self.event_loop_ms + self.client_ms + self.connect_ms + self.discover_ms + self.list_round_ms

    @property
    def total_ms(self) -> float:
        return self.per_connection_ms + self.call_round_ms + self.schema_ms + self.convert_ms


@asynccontextmanager
async def opened(tool: McpTool, *, prior: mcp_types.DiscoverResult | None = None,
                 version: str = "") -> AsyncIterator[Client]:  # fmt: skip
    """A client as ``connection._run`` opens one (``auto`` mode), or pinned to ``version`` with ``prior`` adopted
    (no negotiation)."""
    server = tool.server
    timeout = server.timeout_seconds
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(timeout), verify=connection.tls_context()) as http:
        transport = streamable_http_client(server.url, http_client=http)
        mode = version if prior is not None else "auto"
        async with Client(transport, read_timeout_seconds=timeout, cache=None, mode=mode,
                          prior_discover=prior) as client:  # fmt: skip
            yield client


@contextmanager
def recorded(sent: list[str]) -> Iterator[None]:
    """The JSON-RPC methods the product's own connections send inside the block, appended to ``sent``."""
    real = capped.CappedTransport.handle_async_request

    async def recording(self: capped.CappedTransport, request: httpx2.Request) -> httpx2.Response:
        try:
            sent.append(str(json.loads(request.content).get("method", "?")))
        except (ValueError, AttributeError):
            sent.append(request.method)
        return await real(self, request)

    with mock.patch.object(capped.CappedTransport, "handle_async_request", recording):
        yield


def _ms(action: Callable[[], object]) -> float:
    return median(clocked(action, REPS))


def measure(tool: McpTool, args: dict[str, Any]) -> Parts:
    """Each part of one call of ``tool`` with ``args``, as ``McpTool.run`` makes it."""
    name = tool.listed.name

    async def call(client: Client) -> connection.Outcome:
        return await client.session.call_tool(name, args, allow_input_required=True)

    async def negotiated() -> tuple[mcp_types.DiscoverResult, str]:
        async with opened(tool) as client:  # exactly what one call does
            await call(client)
            found = client.session.discover_result
            assert found is not None, "the sample server speaks the stateless revision"
            return found, client.protocol_version

    prior, version = anyio.run(negotiated)

    async def nothing() -> None:
        return None

    async def bare() -> None:
        async with opened(tool, prior=prior, version=version):
            pass

    async def first_and_second() -> tuple[float, float]:
        async with opened(tool, prior=prior, version=version) as client:
            began = time.perf_counter()
            await client.session.send_discover(version)  # on a new connection
            between = time.perf_counter()
            await client.session.send_discover(version)  # on the same one
            return (between - began) * 1000, (time.perf_counter() - between) * 1000

    async def rounds(send: Callable[[Client], Awaitable[object]]) -> float:
        samples = []
        async with opened(tool, prior=prior, version=version) as client:
            await send(client)  # the connection opened
            for _ in range(REPS):
                began = time.perf_counter()
                await send(client)
                samples.append((time.perf_counter() - began) * 1000)
        return median(samples)

    pairs = [anyio.run(first_and_second) for _ in range(REPS)]
    connection.list_tools(tool.server)  # as the catalog lists: the negotiation kept
    requests: list[str] = []
    with recorded(requests):
        outcome = connection.call_tool(tool.server, name, args, listed=tool.listed)
    assert isinstance(outcome, mcp_types.CallToolResult), outcome
    return Parts(
        event_loop_ms=_ms(lambda: anyio.run(nothing)),
        client_ms=_ms(lambda: anyio.run(bare)),
        ssl_ms=_ms(httpx2.create_ssl_context),
        connect_ms=max(0.0, median([first - second for first, second in pairs])),
        discover_ms=anyio.run(rounds, lambda client: client.session.send_discover(version)),
        list_round_ms=anyio.run(rounds, lambda client: client.session.list_tools()),
        call_round_ms=anyio.run(rounds, call),  # the first, uncounted, listed the tools
        schema_ms=_ms(lambda: tool.argument_problem(args)),  # the check run() makes first
        convert_ms=_ms(lambda: results.response(tool.server.name, tool.name, outcome, tool.listed.output_schema)),
        requests=tuple(requests),
        version=version,
    )

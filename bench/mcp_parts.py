"""What one MCP tool call is made of: its parts, each timed on its own against the sample server.

``McpTool.run`` checks the arguments against the tool's schema, then ``connection.call_tool`` runs the request on
the instance's event loop (``pool``), on the server's kept HTTP client (its TCP connection open), with the SDK's
``Client`` pinned to the protocol the last listing negotiated (``prior_discover``: no ``server/discover``) and given
the cached listing's entry of the tool (so the session knows the output schema without a ``tools/list``): the
``tools/call`` round is the only request (``requests``, recorded on the product's own call). The result is then
turned into the function response. The parts that each call paid before issue 28.2 and that a listing (once a
minute) pays now are timed too, apart: an event loop of its own, a new HTTP client and SDK ``Client``, a new TCP
connection, the ``server/discover`` round and the ``tools/list`` round. Each part is timed ``REPS`` times; a part's
figure is its median. What they do not add up to is the rest (the SDK's per-request tasks, timing noise): they
were timed apart, not inside one call.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import mcp_types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from bench.figures import median
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

    def rows(self, whole_ms: float) -> list[tuple[str, float, str]]:
        """The parts as table rows (label, ms, share of ``whole_ms``), the unattributed rest last."""
        parts = [
            ("its own event loop (`anyio.run`)", self.event_loop_ms),
            ("HTTP client, transport and SDK `Client` opened and closed", self.client_ms),
            ("a new TCP connection (loopback)", self.connect_ms),
            (f"`server/discover` round (protocol negotiation, {self.version})", self.discover_ms),
            ("`tools/list` round (the fresh session learns the output schema)", self.list_round_ms),
            ("`tools/call` round", self.call_round_ms),
            ("arguments checked against the tool's JSON Schema", self.schema_ms),
            ("result turned into the function response", self.convert_ms),
        ]
        rows = [(label, ms, f"{ms / whole_ms:.0%}" if whole_ms else "—") for label, ms in parts]
        rest = whole_ms - self.total_ms
        return [*rows, ("the rest (unattributed)", rest, f"{rest / whole_ms:.0%}" if whole_ms else "—")]


@asynccontextmanager
async def opened(tool: McpTool, sent: list[str], *, prior: mcp_types.DiscoverResult | None = None,
                 version: str = "") -> AsyncIterator[Client]:  # fmt: skip
    """A client as ``connection._run`` opens one (``auto`` mode), or pinned to ``version`` with ``prior`` adopted
    (no negotiation); each request's JSON-RPC method is appended to ``sent``."""
    server = tool.server

    async def record(request: httpx2.Request) -> None:
        try:
            method = json.loads(request.content).get("method", "?")
        except (ValueError, AttributeError):
            method = request.method
        sent.append(str(method))

    timeout = server.timeout_seconds
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(timeout), event_hooks={"request": [record]},
                                  verify=connection.tls_context()) as http:  # fmt: skip
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

    capped.CappedTransport.handle_async_request = recording  # type: ignore[method-assign]
    try:
        yield
    finally:
        capped.CappedTransport.handle_async_request = real  # type: ignore[method-assign]


def _ms(samples: list[float]) -> float:
    return median(samples) * 1000


def _timed(action: Callable[[], object]) -> list[float]:
    samples = []
    for _ in range(REPS):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return samples


def measure(tool: McpTool, args: dict[str, Any]) -> Parts:
    """Each part of one call of ``tool`` with ``args``, as ``McpTool.run`` makes it."""
    name = tool.listed.name

    async def call(client: Client) -> connection.Outcome:
        return await client.session.call_tool(name, args, allow_input_required=True)

    async def negotiated() -> tuple[mcp_types.DiscoverResult, str, list[str]]:
        sent: list[str] = []
        async with opened(tool, sent) as client:  # exactly what one call does
            await call(client)
            found = client.session.discover_result
            assert found is not None, "the sample server speaks the stateless revision"
            return found, client.protocol_version, sent

    prior, version, _ = anyio.run(negotiated)

    async def nothing() -> None:
        return None

    async def bare() -> None:
        async with opened(tool, [], prior=prior, version=version):
            pass

    async def first_and_second() -> tuple[float, float]:
        async with opened(tool, [], prior=prior, version=version) as client:
            began = time.perf_counter()
            await client.session.send_discover(version)  # on a new connection
            between = time.perf_counter()
            await client.session.send_discover(version)  # on the same one
            return between - began, time.perf_counter() - between

    async def rounds(send: Callable[[Client], Awaitable[object]]) -> list[float]:
        samples = []
        async with opened(tool, [], prior=prior, version=version) as client:
            await send(client)  # the connection opened
            for _ in range(REPS):
                began = time.perf_counter()
                await send(client)
                samples.append(time.perf_counter() - began)
        return samples

    pairs = [anyio.run(first_and_second) for _ in range(REPS)]
    connection.list_tools(tool.server)  # as the catalog lists: the negotiation kept
    requests: list[str] = []
    with recorded(requests):
        outcome = connection.call_tool(tool.server, name, args, listed=tool.listed)
    assert isinstance(outcome, mcp_types.CallToolResult), outcome
    return Parts(
        event_loop_ms=_ms(_timed(lambda: anyio.run(nothing))),
        client_ms=_ms(_timed(lambda: anyio.run(bare))),
        ssl_ms=_ms(_timed(httpx2.create_ssl_context)),
        connect_ms=max(0.0, _ms([first - second for first, second in pairs])),
        discover_ms=_ms(anyio.run(rounds, lambda client: client.session.send_discover(version))),
        list_round_ms=_ms(anyio.run(rounds, lambda client: client.session.list_tools())),
        call_round_ms=_ms(anyio.run(rounds, call)),  # the first, uncounted, listed the tools
        schema_ms=_ms(_timed(lambda: tool.argument_problem(args))),  # the check run() makes first
        convert_ms=_ms(_timed(lambda: results.response(tool.server.name, tool.name, outcome))),
        requests=tuple(requests),
        version=version,
    )

"""Calls hung on an MCP server do not hold up its other calls on the instance's kept connections: a server built with
the ``mcp`` SDK's ``MCPServer`` on its default streamable HTTP app, speaking the older handshake (each call holds two
connections while it runs: its request and its session's event stream), served by uvicorn on a thread of this
process. Requests open on the server are counted by a hop in front of it; the hung tool answers once released."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any, cast

import mcp_types
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Receive, Scope, Send

from infra.fakes.mcp.server import HandshakeOnly
from infra.fakes.serve import UvicornServer, in_thread
from infra.procs import free_port
from shared.agent.tools.base import ToolContext
from shared.agent.tools.mcp import connection, pool
from shared.agent.tools.mcp.tool import McpTool
from shared.agent.tools.result import ToolResult
from shared.config_values import McpServer
from tests.poll import wait_for

pytestmark = pytest.mark.stack
NO_CONTEXT = cast(ToolContext, None)  # the tools called here never read it
READ_ONLY = mcp_types.ToolAnnotations(read_only_hint=True)


class Open:
    """Counts the HTTP requests the server is serving."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.count = 0
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.lock:
            self.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            with self.lock:
                self.count -= 1


@pytest.fixture
def hanging() -> Iterator[tuple[Open, threading.Event, McpServer]]:
    released = threading.Event()
    server = MCPServer("hanging")

    @server.tool(annotations=READ_ONLY)
    async def hang(tag: str) -> str:
        """Answers once the test releases it."""
        while not released.is_set():
            await asyncio.sleep(0.05)
        return f"released {tag}"

    @server.tool(annotations=READ_ONLY)
    def echo(tag: str) -> str:
        """Answers at once."""
        return f"echo {tag}"

    hop = Open(HandshakeOnly(server.streamable_http_app()))
    port = free_port()
    uvicorn = UvicornServer(hop, host="127.0.0.1", port=port)
    with in_thread(uvicorn, f"mcp-{port}"):
        uvicorn.wait_started()
        pool.reset()
        try:
            yield hop, released, McpServer("hanging", f"http://127.0.0.1:{port}/mcp", timeout_seconds=60)
        finally:
            released.set()
            pool.reset()


def test_a_call_goes_through_while_sixty_calls_hang_on_the_same_server(
    hanging: tuple[Open, threading.Event, McpServer],
) -> None:
    """Defect: the kept client had httpx's default cap of 100 connections. Sixty hung calls held all of them (two
    each), so a call made beside them waited for a connection until hung calls timed out (a minute here), and then
    failed or ran late. Now it runs at once, while every hung call is still waiting."""
    hop, released, mcp = hanging
    tools = {t.name: McpTool(mcp, t) for t in connection.list_tools(mcp)}
    finished: list[Any] = []
    lock = threading.Lock()

    def hung(n: int) -> None:
        outcome = tools["hang"].run({"tag": str(n)}, NO_CONTEXT)
        with lock:
            finished.append(outcome)

    threads = [threading.Thread(target=hung, args=(n,), name=f"hung-{n}") for n in range(60)]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: hop.count >= 100, what="the hung calls holding 100 connections")
        outcome = tools["echo"].run({"tag": "beside"}, NO_CONTEXT)
        with lock:
            finished_before = list(finished)
    finally:
        released.set()
        for thread in threads:
            thread.join(120)
    assert isinstance(outcome, ToolResult)
    assert outcome.error is None, outcome.error
    assert outcome.value["text"] == "echo beside"
    assert finished_before == []  # it did not wait for any hung call to end
    assert len(finished) == 60
    assert all(isinstance(o, ToolResult) and o.error is None for o in finished), finished[:1]

"""An MCP server that restarts between a session's handshake and its request, as a real deployment meets it: a server
built with the ``mcp`` SDK's ``MCPServer`` on its default streamable HTTP app, speaking the older handshake (a session
id per MCP session), served by uvicorn on a thread of this process and called as the product calls it.

A restart forgets every session: the SDK's server answers a request carrying an id it does not know with HTTP 404,
having run nothing. Here the server's own session manager answers so: a hop in front of it gives the chosen request
an id from before the restart. A request the server may have run (it answered 500 after running the tool) is never
sent again. Calls are counted on the server's side.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any, cast

import mcp_types
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from infra.fakes.mcp.server import HandshakeOnly
from infra.fakes.serve import UvicornServer, in_thread
from infra.procs import free_port
from shared.agent.tools.base import ToolContext
from shared.agent.tools.mcp import connection, pool
from shared.agent.tools.mcp.tool import McpTool
from shared.agent.tools.result import ToolResult
from shared.config_values import McpServer

pytestmark = pytest.mark.stack
NO_CONTEXT = cast(ToolContext, None)  # the tools called here never read it


class Restarts:
    """In front of the app: the ``tools/call`` of a tag in ``forgotten`` arrives with a session id the server does
    not know (it restarted since the handshake); one of a tag in ``failing`` runs, and its answer is lost (a 500)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.forgotten: set[str] = set()
        self.failing: set[str] = set()
        self.ran: list[str] = []
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        tag = self._tag(body)
        with self.lock:
            forget, fail = tag in self.forgotten, tag in self.failing
            self.forgotten.discard(tag)
            self.failing.discard(tag)
        if forget:
            headers = [(k, v) for k, v in scope["headers"] if k != b"mcp-session-id"]
            scope = {**scope, "headers": [*headers, (b"mcp-session-id", uuid.uuid4().hex.encode())]}
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        if not fail:
            await self.app(scope, replay, send)
            return

        async def lost(message: Message) -> None:
            return None

        await self.app(scope, replay, lost)
        raise RuntimeError("the answer was lost")  # uvicorn answers 500: the tool had run

    @staticmethod
    def _tag(body: bytes) -> str | None:
        try:
            parsed = json.loads(body)
        except ValueError:
            return None
        if not isinstance(parsed, dict) or parsed.get("method") != "tools/call":
            return None
        return str((parsed.get("params") or {}).get("arguments", {}).get("tag"))


@pytest.fixture(scope="module")
def restarting() -> Iterator[tuple[Restarts, McpServer]]:
    server = MCPServer("restarting")
    ran: list[str] = []

    @server.tool(annotations=mcp_types.ToolAnnotations(destructive_hint=True))
    def charge(tag: str) -> str:
        """Charge a card (not idempotent)."""
        ran.append(tag)
        return f"charged {tag}"

    hop = Restarts(HandshakeOnly(server.streamable_http_app()))
    hop.ran = ran
    port = free_port()
    uvicorn = UvicornServer(hop, host="127.0.0.1", port=port)
    with in_thread(uvicorn, f"mcp-{port}"):
        uvicorn.wait_started()
        pool.reset()
        yield hop, McpServer("restarting", f"http://127.0.0.1:{port}/mcp", timeout_seconds=10)
    pool.reset()


def charge(mcp: McpServer) -> McpTool:
    [listed] = [t for t in connection.list_tools(mcp) if t.name == "charge"]
    return McpTool(mcp, listed)


def test_a_call_the_server_refused_for_a_session_it_forgot_runs_once_on_a_new_session(
    restarting: tuple[Restarts, McpServer], uid: str
) -> None:
    """Defect: the 404 became the model's error ("refused to call charge: Session not found; the call may not have
    completed") though the server had run nothing, and the model was left to guess whether to charge again. Now the
    client initializes a new session and sends the call again, once: it runs once and its result comes back."""
    hop, mcp = restarting
    tool = charge(mcp)
    hop.forgotten.add(uid)
    outcome = tool.run({"tag": uid}, NO_CONTEXT)
    assert isinstance(outcome, ToolResult)
    assert outcome.error is None, outcome.error
    assert outcome.value["text"] == f"charged {uid}"
    assert hop.ran.count(uid) == 1
    second = tool.run({"tag": f"{uid}-2"}, NO_CONTEXT)  # and the calls after it go on as before
    assert isinstance(second, ToolResult)
    assert second.value["text"] == f"charged {uid}-2"


def test_a_call_whose_answer_was_lost_after_it_ran_is_not_sent_again(
    restarting: tuple[Restarts, McpServer], uid: str
) -> None:
    """A server that ran the call and then failed (its answer a 500) may have done the work: the call is not sent
    again, and the model hears that it may not have completed."""
    hop, mcp = restarting
    tool = charge(mcp)
    hop.failing.add(uid)
    outcome = tool.run({"tag": uid}, NO_CONTEXT)
    assert isinstance(outcome, ToolResult)
    assert outcome.error is not None
    assert "may not have completed" in outcome.error
    assert hop.ran.count(uid) == 1


def test_calls_of_many_threads_after_a_restart_each_get_their_own_result(
    restarting: tuple[Restarts, McpServer], uid: str
) -> None:
    """Sixteen calls at once on the instance's kept connections, half of them refused for a forgotten session: each
    runs once and gets its own answer (no answer reaches another call)."""
    hop, mcp = restarting
    tool = charge(mcp)
    tags = [f"{uid}-{n}" for n in range(16)]
    hop.forgotten.update(tags[::2])
    got: dict[str, Any] = {}
    lock = threading.Lock()

    def one(tag: str) -> None:
        outcome = tool.run({"tag": tag}, NO_CONTEXT)
        with lock:
            got[tag] = outcome.to_dict() if isinstance(outcome, ToolResult) else outcome

    threads = [threading.Thread(target=one, args=(tag,)) for tag in tags]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert {tag: got[tag].get("result", {}).get("text") for tag in tags} == {tag: f"charged {tag}" for tag in tags}
    assert sorted(t for t in hop.ran if t in tags) == sorted(tags)

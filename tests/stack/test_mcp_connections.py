"""MCP connections as an instance keeps them, against the sample server as a real process: a result read under its
byte cap (issue 24.6: memory measured for real, in a process of its own), one connection pool and one negotiation
per server and no listing per call (issue 28.2), under parallel calls from threads, and a stale listing dropped
when the server says a tool is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from infra.fakes.mcp.client import SampleMcp
from infra.procs import Proc, free_port, http_answers, wait_until
from shared import config
from shared.agent.tools.base import ToolContext
from shared.agent.tools.mcp import capped, catalog, connection, pool
from shared.agent.tools.mcp.tool import McpTool
from shared.agent.tools.result import ToolResult
from shared.config_values import McpServer
from tests.conftest import TEST_DIR

pytestmark = pytest.mark.stack
NO_CONTEXT = cast(ToolContext, None)  # the tools called here never read it


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    """The sample server on a free loopback port; its MCP endpoint's URL."""
    port = free_port()
    log = TEST_DIR / "logs" / "mcp_connections.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "infra.fakes.mcp", "--port", str(port)]
    proc = Proc("mcp_connections", argv, log, dict(os.environ), Path.cwd()).start()
    try:
        wait_until(lambda: http_answers(f"http://127.0.0.1:{port}/calls"), proc=proc, what="HTTP", timeout=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.stop()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The JSON-RPC methods (or HTTP verbs) the client sends, in order, counted on the wire side of its transport."""
    seen: list[str] = []
    lock = threading.Lock()
    real = capped.CappedTransport.handle_async_request

    async def recorded(self: capped.CappedTransport, request: Any) -> Any:
        body = json.loads(request.content) if request.content else {}
        with lock:
            seen.append(body.get("method", request.method) if isinstance(body, dict) else request.method)
        return await real(self, request)

    monkeypatch.setattr(capped.CappedTransport, "handle_async_request", recorded)
    pool.reset()
    yield seen
    pool.reset()


MEASURE = """
import json, sys, tracemalloc
from typing import cast
from shared.agent.tools.mcp import connection
from shared.agent.tools.mcp.tool import McpTool
from shared.config_values import McpServer

server = McpServer("big", sys.argv[1], timeout_seconds=60)
[listed] = [t for t in connection.list_tools(server) if t.name == "big_report"]
tool = McpTool(server, listed)
tool.run({"megabytes": 0.01}, cast(object, None))  # warm: imports, the loop, the connection
tracemalloc.start()
outcome = tool.run({"megabytes": 40}, cast(object, None))
_, peak = tracemalloc.get_traced_memory()
print(json.dumps({"peak": peak, "outcome": outcome.to_dict()}))
"""


def test_a_40_mb_result_is_refused_while_it_is_read_and_costs_the_client_under_20_mib(demo: str) -> None:
    """Issue 24.6: the byte cap holds while the answer arrives, not after it was read whole and parsed (which cost
    about 390 MiB for 40 MB). Measured with tracemalloc (every thread's allocations) in a process of its own."""
    measured = subprocess.run([sys.executable, "-c", MEASURE, demo], capture_output=True, text=True, timeout=120,
                              check=True)  # fmt: skip
    found = json.loads(measured.stdout.strip().splitlines()[-1])
    assert found["peak"] < 20 * 1024 * 1024, f"{found['peak'] / 2**20:.1f} MiB"
    error = found["outcome"]["error"]
    assert "larger than 4 MiB, so it was not read" in error
    assert "ask for less" in error
    ran = SampleMcp(demo.removesuffix("/mcp")).calls("big_report")
    assert [c["arguments"]["megabytes"] for c in ran][-1] == 40  # it did reach the server: the answer was refused


def test_a_result_under_the_cap_is_read_whole(demo: str) -> None:
    server = McpServer("big", demo, timeout_seconds=60)
    [listed] = [t for t in connection.list_tools(server) if t.name == "big_report"]
    outcome = McpTool(server, listed).run({"megabytes": 1}, NO_CONTEXT)
    assert isinstance(outcome, ToolResult)
    assert len(outcome.value["structured"]["result"]) == 1_000_000


def test_calls_reuse_the_negotiation_and_the_listing_so_each_sends_only_its_tools_call(
    demo: str, sent: list[str]
) -> None:
    """Issue 28.2: a listing negotiates (``server/discover``) and lists; every call after it, from many threads at
    once, is its ``tools/call`` alone: no probe, no ``tools/list`` to learn the output schema, one HTTP client."""
    server = McpServer("demo", demo)
    listed = {t.name: t for t in connection.list_tools(server)}
    assert sent == ["server/discover", "tools/list"]
    sent.clear()
    lookup = McpTool(server, listed["lookup_service"])
    outcomes: list[Any] = []
    lock = threading.Lock()

    def one(name: str) -> None:
        outcome = lookup.run({"name": name}, NO_CONTEXT)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one, args=(name,)) for name in ["api", "web"] * 8]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(outcomes) == 16
    assert sorted(o.value["structured"]["name"] for o in outcomes) == ["api"] * 8 + ["web"] * 8
    assert sent == ["tools/call"] * 16
    assert len(pool._current().kept) == 1  # one server, one kept client, whichever thread called


def test_a_tool_the_server_no_longer_knows_drops_the_cached_listing(
    demo: str, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing is kept a minute, but a call that the server answers with "unknown tool" makes the next
    session list again at once (and the failed call negotiates nothing new)."""
    server = McpServer("demo", demo)
    monkeypatch.setenv("MCP_SERVERS", json.dumps([{"name": "demo", "url": demo}]))
    config.reset()
    catalog.forget()
    first = catalog.catalog()
    assert "mcp.demo.lookup_service" in {t.name for t in first.tools}
    catalog.catalog()  # cached: nothing sent
    assert sent == ["server/discover", "tools/list"]
    [lookup] = [t for t in first.tools if t.listed.name == "lookup_service"]
    gone = McpTool(server, lookup.listed.model_copy(update={"name": "retired_tool"}))
    outcome = gone.run({"name": "api"}, NO_CONTEXT)
    assert isinstance(outcome, ToolResult)
    assert "retired_tool" in json.dumps(outcome.to_dict())
    catalog.catalog()
    assert sent == ["server/discover", "tools/list", "tools/call", "server/discover", "tools/list"]
    monkeypatch.undo()
    config.reset()
    catalog.forget()

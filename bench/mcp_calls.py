"""Figure 7: what a tool costs over MCP, in this process, against the sample MCP server on loopback.

The same work, a service lookup in a small table, is done by the sample server's read-only ``lookup_service``
through ``McpTool.run`` (its schema check, one short streamable-HTTP connection with the SDK's protocol
negotiation, the ``tools/call`` round and the result turned into the function response) and by a Python tool
(``FunctionTool.run``: pydantic's check and the call). Each is called ``CALLS`` times after one warm-up call; the
figures are medians and the ratio is MCP over Python. Listing a server's tools is measured cold (the first
listing of this process, imports of the SDK's client paths included) and warm but uncached (a fresh connection
each time, as every instance does once a minute); a cached listing (``catalog``) costs no request at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

from bench.figures import Section, at_most, info, median, prose, table
from bench.harness import Bench
from infra.mcpdemo.server import SERVICES
from shared.agent.tools.base import ToolContext
from shared.agent.tools.function import tool
from shared.agent.tools.mcp import connection
from shared.agent.tools.mcp.tool import McpTool
from shared.mcp_servers import McpServer

CALLS = 30
LISTINGS = 10
CALL_LIMIT_MS = 250.0  # one MCP call on loopback, connection included
LIST_LIMIT_MS = 1000.0  # the first listing of a process


@tool(outward=False)
def lookup_service(name: str) -> dict[str, Any]:
    """Look up a service's status and deployed version (the Python twin of the sample server's tool)."""
    return {"name": name, **SERVICES[name]}


def timed_ms(action: Callable[[], object], times: int) -> list[float]:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def run(bench: Bench) -> Section:
    section = Section("7. MCP tools")
    url = bench.stack.start_mcp_server("mcp_bench")
    try:
        server = McpServer("bench", url)
        [first_ms] = timed_ms(lambda: connection.list_tools(server), 1)
        listings = timed_ms(lambda: connection.list_tools(server), LISTINGS)
        listed = next(t for t in connection.list_tools(server) if t.name == "lookup_service")
        remote = McpTool(server, listed)
        # Neither tool reads the context for a lookup; the run methods take one.
        ctx = cast(ToolContext, None)
        args = {"name": "api"}
        remote_result, python_result = remote.run(args, ctx), lookup_service.run(args, ctx)
        assert isinstance(remote_result, dict)
        assert isinstance(python_result, dict)
        assert remote_result["result"]["structured"] == python_result["result"], "the two must do the same work"
        mcp_ms = median(timed_ms(lambda: remote.run(args, ctx), CALLS))
        python_ms = median(timed_ms(lambda: lookup_service.run(args, ctx), CALLS))
    finally:
        bench.stack.stop_process("mcp_bench")
    ratio = mcp_ms / python_ms if python_ms else float("inf")
    section.findings.append(
        "Each MCP request opens its own connection and negotiates the protocol (`server/discover`) before its one "
        "request (`shared/agent/tools/mcp/connection.py`); keeping the negotiated `DiscoverResult` per server and "
        "adopting it (the SDK's `Client(mode=<version>, prior_discover=...)`) would save a round trip per call."
    )
    section.add(
        at_most("mcp_call_ms", mcp_ms, "ms", CALL_LIMIT_MS),
        info("python_tool_call_ms", python_ms, "ms"),
        info("mcp_over_python_call_ratio", ratio, "ratio"),
        at_most("mcp_list_tools_cold_ms", first_ms, "ms", LIST_LIMIT_MS),
        info("mcp_list_tools_ms", median(listings), "ms"),
    )
    section.say(
        *prose(__doc__),
        table(
            ["what", "median (ms)"],
            [
                ("MCP tool call (lookup_service over streamable HTTP)", mcp_ms),
                ("Python tool call (the same lookup)", python_ms),
                ("ratio MCP / Python", ratio),
                ("first tools/list of the process (cold)", first_ms),
                ("tools/list on a fresh connection", median(listings)),
            ],
        ),
    )
    return section

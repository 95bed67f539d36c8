"""The configured servers' tools, listed at most once a minute per instance (``LIST_TTL_SECONDS``), and again as
soon as a server says its tools changed (``pool.tools_changed``: its notification, or a call naming a tool it no
longer has).

A server that cannot be reached or listed is logged and skipped for that session; the session's model is told
which servers' tools are unavailable. A failed listing is not cached: the next session tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import jsonschema
import mcp_types

from shared import config
from shared.agent.tools.mcp import connection, pool, schemas
from shared.agent.tools.mcp.tool import McpTool, registry_name
from shared.config_values import McpServer

log = logging.getLogger(__name__)

LIST_TTL_SECONDS = 60.0  # a server's new or changed tools reach sessions within a minute

_lock = threading.Lock()
_listed: dict[McpServer, tuple[float, int, list[mcp_types.Tool]]] = {}  # by server: when, its generation, what


@dataclass(frozen=True)
class Catalog:
    tools: list[McpTool]
    unavailable: list[str]  # "server: why", for the model

    def notice(self) -> str:
        if not self.unavailable:
            return ""
        lines = "\n".join(f"- {reason}" for reason in self.unavailable)
        return ("These MCP servers (or some of their tools) could not be used, so their tools (mcp.<server>.*) are "
                f"unavailable in this session; say so if the request needs them:\n{lines}")  # fmt: skip


def catalog() -> Catalog:
    tools: list[McpTool] = []
    unavailable: list[str] = []
    for server in config.settings().mcp_servers:
        try:
            listed = _tools_of(server)
        except connection.McpFailure as exc:
            log.warning("MCP server skipped", extra={"server": server.name, "error": str(exc)})
            unavailable.append(f"{server.name}: {exc}")
            continue
        wanted = [(registry_name(server.name, t.name), t) for t in listed if _wanted(server, t.name)]
        named: dict[str, list[str]] = {}
        for name, listed_tool in wanted:
            named.setdefault(name, []).append(listed_tool.name)
        for name, clash in named.items():
            if len(clash) > 1:  # one declaration would silently stand for several tools (or one listed twice)
                log.warning("MCP tools skipped", extra={"server": server.name, "tool": name, "error": "name clash"})
                unavailable.append(f"{server.name}: its tools {', '.join(map(repr, clash))} would all be named "
                                   f"{name!r}, so none of them is offered")  # fmt: skip
        for name, listed_tool in wanted:
            if len(named[name]) > 1:
                continue
            problem = schema_problem(listed_tool.input_schema)
            if problem is None:
                tools.append(McpTool(server, listed_tool))
            else:  # declared to Gemini, it would fail every model turn of the session
                where = {"server": server.name, "tool": listed_tool.name}
                log.warning("MCP tool skipped", extra={**where, "error": problem})
                unavailable.append(f"{server.name}: its tool {listed_tool.name!r} declares an invalid schema")
    return Catalog(tools, unavailable)


def schema_problem(schema: dict[str, Any]) -> str | None:
    """Why a tool's input schema is not a valid JSON Schema, or None (checked once per instance and schema: every
    session's toolset asks again of the cached listing)."""
    try:
        schemas.validator(schema, checked=True)
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


def _wanted(server: McpServer, tool: str) -> bool:
    return (server.include is None or tool in server.include) and tool not in server.exclude


def _tools_of(server: McpServer) -> list[mcp_types.Tool]:
    with _lock:
        cached = _listed.get(server)
    fresh = cached is not None and time.monotonic() - cached[0] < LIST_TTL_SECONDS
    if cached is not None and fresh and cached[1] == pool.generation(server):
        return cached[2]
    generation = pool.generation(server)  # read before listing: a change announced meanwhile lists again
    listed = connection.list_tools(server)
    with _lock:
        _listed[server] = (time.monotonic(), generation, listed)
    return listed


def forget() -> None:
    """Drop every cached listing (the benchmark measures a cold listing with it)."""
    with _lock:
        _listed.clear()

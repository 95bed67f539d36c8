"""The configured servers' tools, listed at most once a minute per instance (``LIST_TTL_SECONDS``), and again as
soon as a server says its tools changed (``pool.tools_changed``: its notification, or a call naming a tool it no
longer has).

The servers due a listing are listed at once (``connection.list_each``), so a slow server costs a session its own
timeout, not the sum of them. A server that cannot be reached or listed is logged and skipped for that session; the
session's model is told which servers' tools are unavailable. A listing that timed out (no answer, or no connection,
in time) is skipped at once by the sessions of the next ``TIMED_OUT_SECONDS``, with the same words for their models:
a hung server would otherwise hold every session's start for its whole timeout. Any other failed listing (the
server answered, or refused the connection at once) is not kept: a server restarting is listed by the next session.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
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
TIMED_OUT_SECONDS = 45.0  # a server whose listing timed out is not asked again for this long

_lock = threading.Lock()
_listed: dict[McpServer, tuple[float, int, list[mcp_types.Tool]]] = {}  # by server: when, its generation, what
_timed_out: dict[McpServer, tuple[float, connection.McpFailure]] = {}  # by server: when, and the failure


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
    for server, listed in _listings(config.settings().mcp_servers).items():
        if isinstance(listed, connection.McpFailure):
            log.warning("MCP server skipped", extra={"server": server.name, "error": str(listed)})
            unavailable.append(f"{server.name}: {listed}")
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


def _listings(servers: Sequence[McpServer]) -> dict[McpServer, list[mcp_types.Tool] | connection.McpFailure]:
    """Each server's tools, or why not: the cached listing, the failure of a listing that timed out lately, or
    listed now (every server due at once)."""
    # Each generation is read before listing: a change announced meanwhile lists again.
    generations = {server: pool.generation(server) for server in servers}
    now = time.monotonic()
    found: dict[McpServer, list[mcp_types.Tool] | connection.McpFailure] = {}
    with _lock:
        for server in servers:
            cached, timed_out = _listed.get(server), _timed_out.get(server)
            if timed_out is not None and now - timed_out[0] < TIMED_OUT_SECONDS:
                found[server] = timed_out[1]
            elif cached is not None and now - cached[0] < LIST_TTL_SECONDS and cached[1] == generations[server]:
                found[server] = cached[2]
    due = [server for server in servers if server not in found]
    outcomes = connection.list_each(due) if due else []
    with _lock:
        for server, outcome in zip(due, outcomes, strict=True):
            _timed_out.pop(server, None)
            if not isinstance(outcome, connection.McpFailure):
                _listed[server] = (time.monotonic(), generations[server], outcome)
            elif outcome.timed_out:
                _timed_out[server] = (time.monotonic(), outcome)
                where = {"server": server.name, "seconds": TIMED_OUT_SECONDS}
                log.warning("MCP listing timed out: sessions skip the server for a while", extra=where)
            found[server] = outcome
    return {server: found[server] for server in servers}


def forget() -> None:
    """Drop every cached listing and remembered failure (the benchmark measures a cold listing with it)."""
    with _lock:
        _listed.clear()
        _timed_out.clear()

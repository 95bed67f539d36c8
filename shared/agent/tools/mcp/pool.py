"""What an instance keeps per MCP server between calls (issue 28.2): one event loop, one HTTP connection pool per
server, and the protocol each server negotiated.

Every call used to open its own event loop, HTTP client and TCP connection and negotiate again
(``server/discover``), which made a turn calling an MCP tool about 1.5 times the same turn calling a Python tool.
Now one daemon thread runs one asyncio loop for the instance; any thread's call runs there (``run``), so the
connections of a server's ``httpx`` client are reused by every call of every session the instance serves, in
parallel. A server's negotiated ``DiscoverResult`` is kept and adopted by later calls (the SDK's
``Client(mode=<version>, prior_discover=...)``: no probe); a server on the older handshake is remembered as such
and gets ``initialize`` without the probe first.

What a server may invalidate is dropped when it says so: ``forget_discovery`` when it refuses the kept protocol,
``tools_changed`` (a ``notifications/tools/list_changed``, a call naming a tool it no longer knows, or a call
of a tool not marked read-only, whose notification may be lost or never heard) bumps the
server's generation, which ``catalog`` compares with its listing's. A new process (a fork) starts afresh.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import TypeVar

import httpx2
import mcp_types

from shared.agent.tools.mcp.capped import IDENTITY, CappedTransport
from shared.config_values import McpServer

T = TypeVar("T")
LEGACY = "legacy"  # the mode of a server that speaks only the older handshake
# No cap on open connections (each call is bounded by its timeout instead): under httpx's default of 100, calls
# hung on a server (two connections each on the older handshake: the call and its event stream) held every
# connection, and the server's other calls waited for one until their own timeouts. As many idle ones kept as before.
LIMITS = httpx2.Limits(max_connections=None, max_keepalive_connections=20)
GRACE_SECONDS = 5.0  # past a call's own timeout (which the loop enforces), the calling thread stops waiting


@dataclass
class Kept:
    """One server's state in this instance. Only the loop's thread changes ``http`` and ``discovered``."""

    http: httpx2.AsyncClient
    credential: str | None
    discovered: mcp_types.DiscoverResult | str | None = None  # the DiscoverResult, LEGACY, or None: negotiate
    version: str = ""  # the protocol version negotiated with it


@dataclass
class _Instance:
    pid: int
    loop: asyncio.AbstractEventLoop
    kept: dict[McpServer, Kept] = field(default_factory=dict)
    generations: dict[McpServer, int] = field(default_factory=dict)


_lock = threading.Lock()
_instances: dict[str, _Instance] = {}  # "current": this process's, once started


def run(make: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Run ``make()`` on the instance's loop and wait for it, from any thread but the loop's own."""
    loop = _current().loop
    future = asyncio.run_coroutine_threadsafe(_awaited(make), loop)
    try:
        return future.result(timeout + GRACE_SECONDS)
    except FutureTimeout:
        future.cancel()
        raise TimeoutError(f"no answer within {timeout:g} s") from None


async def _awaited(make: Callable[[], Awaitable[T]]) -> T:
    return await make()


def kept(server: McpServer, credential: str | None, tls: object) -> Kept:
    """The server's kept state (on the loop's thread): a new HTTP client the first time, or when its credential
    changed (the old one's connections are closed)."""
    instance = _current()
    found = instance.kept.get(server)
    if found is not None and found.credential == credential:
        return found
    if found is not None:
        instance.loop.create_task(found.http.aclose())
    headers = {**IDENTITY, **({"Authorization": f"Bearer {credential}"} if credential else {})}
    inner = httpx2.AsyncHTTPTransport(verify=tls, limits=LIMITS)  # type: ignore[arg-type]  # an SSLContext
    transport = CappedTransport(inner)
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(server.timeout_seconds), transport=transport)
    instance.kept[server] = Kept(http, credential)
    return instance.kept[server]


def forget_discovery(server: McpServer) -> None:
    """The server refused the protocol kept for it: the next call negotiates again."""
    found = _current().kept.get(server)
    if found is not None:
        found.discovered = None


def generation(server: McpServer) -> int:
    """How many times the server said its tools changed (in this instance)."""
    with _lock:
        instance = _instances.get("current")
        return instance.generations.get(server, 0) if instance is not None else 0


def tools_changed(server: McpServer) -> None:
    """The server's tool list changed (it said so, or named a tool it no longer has): listings of it are stale."""
    with _lock:
        instance = _instances.get("current")
        if instance is not None:
            instance.generations[server] = instance.generations.get(server, 0) + 1


def _current() -> _Instance:
    """The instance's loop, started on first use (importing this module starts nothing), again after a fork."""
    with _lock:
        instance = _instances.get("current")
        if instance is None or instance.pid != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="mcp-loop", daemon=True).start()
            instance = _instances["current"] = _Instance(os.getpid(), loop)
        return instance


def reset() -> None:
    """Close every kept connection and forget every negotiation (tests and the benchmark measure cold paths)."""
    with _lock:
        instance = _instances.get("current")
    if instance is None or instance.pid != os.getpid():
        return
    servers = list(instance.kept.values())
    instance.kept.clear()

    async def closing() -> None:
        for each in servers:
            await each.http.aclose()

    asyncio.run_coroutine_threadsafe(closing(), instance.loop).result(GRACE_SECONDS)

"""One whole agent turn that calls the tool, as a user pays for it: the MCP server's tool against its Python twin.

How it is measured and read: ``bench/sections/mcp_turns.md`` (its text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import functools
import json
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import mcp_types

from bench.figures import median, percentile
from bench.harness import take_turns
from bench.rig import Rig, environment, model_calls
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.mcp.server import SERVICES
from shared import deps
from shared.agent.tools import toolset
from shared.agent.tools.base import Outcome, ToolContext
from shared.agent.tools.function import tool
from shared.agent.tools.mcp import catalog, connection
from shared.agent.tools.toolset import Toolset
from shared.config_values import McpServer
from shared.state.models import SessionStatus


@tool(outward=False)
def lookup_service(name: str) -> dict[str, Any]:
    """Look up a service's status and deployed version (the Python twin of the sample server's tool)."""
    return {"name": name, **SERVICES[name]}


PAIRS = 30
WARMUP = 3
SERVER = "demo"
CALLS = {"mcp": f"mcp.{SERVER}.lookup_service", "python": lookup_service.name}
FRESH_FOR = catalog.LIST_TTL_SECONDS - 20  # list again, untimed, when the cached listing is older than this


@dataclass
class Side:
    """One side's samples, in ms, a pair at a time."""

    turn_ms: list[float] = field(default_factory=list)
    session_ms: list[float] = field(default_factory=list)
    tool_ms: list[float] = field(default_factory=list)  # the tool's run inside the turn (``Toolset.run``)

    def turn(self, q: float) -> float:
        return percentile(self.turn_ms, q)

    def session(self, q: float) -> float:
        return percentile(self.session_ms, q)


@dataclass
class Turns:
    mcp: Side
    python: Side
    relisted: int  # untimed listings between pairs, to keep the catalog cached
    listed_in_sessions: int  # listings inside the timed sessions (0: every one found the catalog cached)

    def ratio(self, q: float) -> float:
        return self.mcp.turn(q) / self.python.turn(q)

    def session_ratio(self) -> float:
        return median(self.mcp.session_ms) / median(self.python.session_ms)


@contextmanager
def twin_registered() -> Iterator[None]:
    """The Python twin in every session's toolset, for this figure only (the product's tool set is unchanged)."""
    with deps.override(tools=lambda session: Toolset([*toolset.for_session(session).tools, lookup_service])):
        yield


@contextmanager
def tool_runs() -> Iterator[list[float]]:
    """The ms of every tool run (``Toolset.run``: the policy check and the tool) inside the block."""
    timed: list[float] = []
    original = Toolset.run

    def run(self: Toolset, name: str, args: Any, ctx: ToolContext) -> Outcome:
        began = time.perf_counter()
        try:
            return original(self, name, args, ctx)
        finally:
            timed.append((time.perf_counter() - began) * 1000)

    with mock.patch.object(Toolset, "run", run):
        yield timed


def one_session(rig: Rig, tool: str) -> tuple[float, float, float]:
    """A session whose model calls ``tool`` once, then answers: the tool turn's ms, the whole delivery's and the
    tool run's."""
    session_id = rig.start("look up the api service, then answer")
    rig.script(FakeGemini.call(tool, name="api"), FakeGemini.text("The api is healthy, version 1.4.2."))
    with model_calls(time.perf_counter) as calls, tool_runs() as runs:
        began = time.perf_counter()
        rig.deliver(session_id)
        ended = time.perf_counter()
    rig.expect(session_id, SessionStatus.DONE)
    assert len(calls) == 2, f"{len(calls)} model calls"
    assert len(runs) == 1, f"{len(runs)} tool runs"
    return (calls[1] - calls[0]) * 1000, (ended - began) * 1000, runs[0]


def _check_responses(rig: Rig) -> None:
    """The last two sessions' tools answered with the lookup, not an error (the same work on both sides)."""
    found = []
    for request in rig.gemini.requests()[-4:]:
        for content in request["body"].get("contents", []):
            for part in content.get("parts", []):
                if "functionResponse" in part:
                    found.append(part["functionResponse"])
    seen = {r["name"]: json.dumps(r["response"]) for r in found}
    assert set(seen) >= set(CALLS.values()), seen
    assert all('"version": "1.4.2"' in text and '"error"' not in text for text in seen.values()), seen


def server_calls(url: str) -> int:
    """How many times the sample server ran ``lookup_service`` (its own record)."""
    base = url.removesuffix("/mcp")
    with urllib.request.urlopen(base + "/calls", timeout=10) as response:  # noqa: S310 - loopback
        recorded = json.loads(response.read())
    return sum(1 for call in recorded if call["tool"] == "lookup_service" and call["event"] == "ran")


@contextmanager
def listings() -> Iterator[list[int]]:
    """How many times the product listed a server's tools inside the block (one count per listing)."""
    counted: list[int] = []
    original = connection.list_each

    def list_each(servers: Sequence[McpServer]) -> list[list[mcp_types.Tool] | connection.McpFailure]:
        counted.extend(1 for _ in servers)
        return original(servers)

    with mock.patch.object(connection, "list_each", list_each):
        yield counted


def measure(rig: Rig, url: str, *, pairs: int = PAIRS, warmup: int = WARMUP) -> Turns:
    """``warmup`` then ``pairs`` pairs of sessions on ``rig`` (installed) against the sample server at ``url``,
    taking turns."""
    before, relisted, listed_at = server_calls(url), [], time.monotonic()

    def fresh() -> None:
        """The catalog listed again, untimed, once it is older than ``FRESH_FOR`` (a warm instance's listing)."""
        nonlocal listed_at
        if time.monotonic() - listed_at > FRESH_FOR:
            catalog.forget()
            catalog.catalog()
            listed_at = time.monotonic()
            relisted.append(1)

    def session(side: str) -> tuple[float, float, float, int]:
        """One session of ``side`` timed, and the listings made inside it."""
        listed = len(seen)
        return (*one_session(rig, CALLS[side]), len(seen) - listed)

    with environment(MCP_SERVERS=json.dumps([{"name": SERVER, "url": url}])), twin_registered(), listings() as seen:
        catalog.forget()
        catalog.catalog()  # the first listing: what every timed session finds cached
        listed_at = time.monotonic()
        taken = take_turns({side: functools.partial(session, side) for side in CALLS}, pairs, warmup, before=fresh)
        catalog.forget()  # the next figure's sessions list for themselves
    _check_responses(rig)
    rig.script_used()
    assert server_calls(url) - before == warmup + pairs, "each MCP session called the server once"
    mcp, python = (Side(*[list(column) for column in zip(*taken[side], strict=True)][:3]) for side in CALLS)
    return Turns(mcp, python, len(relisted), sum(listed for found in taken.values() for *_, listed in found))

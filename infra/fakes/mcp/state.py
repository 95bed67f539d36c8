"""What the sample MCP server keeps: the calls its tools were asked to make, in order, which tests read on the
server's side (``GET /calls``, ``infra/fakes/mcp/client.py``) instead of mocking the client."""

from __future__ import annotations

import threading
import time
from typing import Any


class Calls:
    """What the tools were asked to do, in order (thread-safe: uvicorn may run sync tools in threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[dict[str, Any]] = []

    def add(self, tool: str, event: str, arguments: dict[str, Any]) -> None:
        with self._lock:
            self._items.append({"tool": tool, "event": event, "arguments": arguments, "at": time.time()})

    def all(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

"""A typed client for the sample MCP server's control endpoint: the calls its tools recorded (``GET /calls``) and
clearing them (``DELETE /calls``). Its MCP endpoint itself is ``<base>/mcp``, for the product's MCP client."""

from __future__ import annotations

from typing import Any

from infra.fakes.control import ControlClient, ControlError


class SampleMcpError(ControlError):
    """The sample server refused a control call, or could not be reached."""


class SampleMcp(ControlClient):
    """Control of one running sample MCP server at ``base_url`` (without ``/mcp``)."""

    error_type = SampleMcpError
    name = "the sample MCP server"

    def healthy(self) -> bool:
        try:
            self.calls()
        except ControlError:
            return False
        return True

    def calls(self, tool: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
        """Every call recorded since the last clear, oldest first (``tool``, ``event``, ``arguments``, ``at``),
        only those of ``tool`` (and ``event``) when given."""
        return [c for c in self._json_list("GET", "/calls")
                if (tool is None or c["tool"] == tool) and (event is None or c["event"] == event)]  # fmt: skip

    def clear(self) -> None:
        self._json_list("DELETE", "/calls")

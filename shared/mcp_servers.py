"""The shape of ``MCP_SERVERS``: one ``McpServer`` per configured server, and the parser ``shared.config`` uses.

Kept apart from ``shared.config`` only for size: that module still reads the variable (and each server's
credential); this one reads nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from shared.errors import ProductError


class McpConfigError(ProductError):
    """``MCP_SERVERS`` is malformed; ``shared.config`` re-raises it as its ``ConfigError``."""


@dataclass(frozen=True)
class McpServer:
    """One remote MCP server (streamable HTTP) whose tools the agent may use."""

    name: str  # short, lower case: tools are named ``mcp.<name>.<tool>``
    url: str
    credential_env: str | None = None  # the variable holding its bearer token (Terraform fills it from a secret)
    include: frozenset[str] | None = None  # only these tools, when given
    exclude: frozenset[str] = frozenset()  # never these tools
    timeout_seconds: float = 30.0  # of one request: listing its tools, or one round of a call


_SERVER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,23}")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,99}")
_SERVER_FIELDS = {"name", "url", "credential_env", "include", "exclude", "timeout_seconds"}
PLACEHOLDER = "unset:"  # how Terraform's placeholder secret versions begin (terraform/secrets.tf)


def parse(name: str, value: str, *, error: type[Exception] = McpConfigError) -> tuple[McpServer, ...]:
    """A JSON list of ``{"name", "url", "credential_env"?, "include"?, "exclude"?}``; errors name server and field."""
    try:
        parsed = json.loads(value or "[]")
    except ValueError as exc:
        raise error(f"{name} must be a JSON list of servers: {exc}") from None
    if not isinstance(parsed, list):
        raise error(f"{name} must be a JSON list of servers, got {type(parsed).__name__}")
    servers: list[McpServer] = []
    for position, entry in enumerate(parsed):
        label = f"{name}: server {position + 1}"
        if not isinstance(entry, dict):
            raise error(f"{label} must be a JSON object, got {type(entry).__name__}")
        server = entry.get("name")
        if not isinstance(server, str) or not _SERVER_NAME.fullmatch(server):
            raise error(f"{label}: field 'name' must be 1-24 of a-z, 0-9, _ or -, starting with a letter, "
                              f"got {server!r}")  # fmt: skip
        label = f"{name}: server {server!r}"
        if any(s.name == server for s in servers):
            raise error(f"{label} is listed twice")
        unknown = sorted(set(entry) - _SERVER_FIELDS)
        if unknown:
            known = ", ".join(sorted(_SERVER_FIELDS))
            raise error(f"{label}: unknown field(s) {', '.join(unknown)}; the fields are {known}")
        address = entry.get("url")
        if not isinstance(address, str) or not address.startswith(("http://", "https://")):
            raise error(f"{label}: field 'url' must be an http(s) URL, got {address!r}")
        credential = entry.get("credential_env")
        if credential is not None and (not isinstance(credential, str) or not _ENV_NAME.fullmatch(credential)):
            raise error(f"{label}: field 'credential_env' must name an environment variable (A-Z, 0-9, _), "
                                 f"got {credential!r}")  # fmt: skip
        lists: dict[str, frozenset[str] | None] = {}
        for field_name in ("include", "exclude"):
            tools = entry.get(field_name)
            if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
                raise error(f"{label}: field {field_name!r} must be a list of tool names, got {tools!r}")
            lists[field_name] = frozenset(tools) if tools is not None else None
        timeout = entry.get("timeout_seconds", 30)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 600:
            raise error(f"{label}: field 'timeout_seconds' must be a number of seconds, 0 to 600, "
                                 f"got {timeout!r}")  # fmt: skip
        servers.append(McpServer(server, address, credential, lists["include"], lists["exclude"] or frozenset(),
                                 float(timeout)))  # fmt: skip
    return tuple(servers)


def credential(server: McpServer, environ: Mapping[str, str], *,
               error: type[Exception] = McpConfigError) -> str | None:  # fmt: skip
    """The server's bearer token, from the variable its ``credential_env`` names; ``error`` if it is unusable."""
    if server.credential_env is None:
        return None
    value = environ.get(server.credential_env, "").strip()
    where = f"MCP_SERVERS: server {server.name!r}: field 'credential_env' names {server.credential_env}"
    if not value:
        raise error(f"{where}, which is not set")
    if value.startswith(PLACEHOLDER):
        raise error(f"{where}, which still holds Terraform's placeholder: put the real credential in its Secret "
                    "Manager secret (README, MCP servers)")  # fmt: skip
    return value

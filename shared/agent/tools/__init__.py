"""Tools the model may call: the ``Tool`` protocol and tiers (``base``), what a call came to (``result``: one
``ToolResult``), function tools built from typed callables (``function``), the per-session toolset (``toolset``),
the rules a call passes (``policy``), what a call will do in words (``describe``), the built-in tools
(``builtin``), the team's own tools (``team``), the SSRF-safe fetcher (``fetch``) and MCP servers' tools (``mcp``).

May import ``shared.asks``, ``shared.slack``, ``shared.state`` and the core modules; nothing else of
``shared.agent`` (not the runner), never ``shared.queue``, ``shared.usecases`` or ``shared.handlers``.
"""

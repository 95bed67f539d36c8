"""MCP servers' tools (flow 11): configured servers are listed, their tools join a session's toolset under
``mcp.<server>.<tool>``, and a call goes through the same tiers, ledger and audit log as any tool.

``connection`` speaks to a server (the official ``mcp`` SDK over streamable HTTP) on one kept connection pool per
server and instance (``pool``), every response capped in size (``capped``); ``catalog`` keeps each server's tool
list for a short while, ``tool`` is one MCP tool as the registry sees it, ``results`` turns a tool's result into a
function response (``schemas`` compiles the tools' JSON Schemas once per instance), and ``inputs`` turns a
server's request for input into an operator question and the operator's answer back into the input the server
asked for.

May import the rest of ``shared.agent.tools``, ``shared.asks``, ``shared.state`` and the core modules, and the
``mcp`` SDK. Only the agent path imports this package: the Slack ingress never does (import-linter).
"""

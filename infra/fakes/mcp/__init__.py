"""A sample MCP server for `make dev` and the tests: a read-only tool, a destructive one, one that asks for input.

``server.py`` serves it (the official ``mcp`` SDK under uvicorn), ``state.py`` keeps the calls its tools were
asked to make, ``client.py`` is the control client tests drive it with; ``python -m infra.fakes.mcp`` runs it.

Imports the ``mcp`` SDK, ``infra.fakes.serve`` and ``infra.fakes.control``; never ``shared/``.
"""

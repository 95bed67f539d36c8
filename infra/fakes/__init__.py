"""The local stand-ins for the services the product talks to, one package each, each a ``server.py`` (what it
serves), a ``state.py`` (what it keeps) and a ``client.py`` (the control client tests and tools drive it with):
``slack`` (the Slack Web API, its events and the workspace page), ``gemini`` (the scripted Gemini REST stub and
the offline demo model), ``dispatch`` (Cloud Tasks' parallel delivery in front of the Tasks emulator) and ``mcp``
(the sample MCP server). Each runs as ``python -m infra.fakes.<name>`` (its ``__main__.py``, its command line) under
the one serve loop (``serve.py``: ``--host``/``--port``, the ready line, SIGTERM), and each client builds on the
one control client (``control.py``). Each imports the standard library, its own libraries (``slack_sdk``,
``mcp``), ``serve.py`` and ``control.py``, and never ``shared/`` itself (a fake plays the service, not the
product; import-linter); the fake Slack serves ``ops/``'s page and console. Never imported by ``shared/`` or
``ops/``.
"""

"""Tools the model may call: the ``Tool`` protocol, function tools built from typed callables, the
per-session toolset, the built-in tools, the team's own tools and the SSRF-safe fetcher.

May import ``shared.asks``, ``shared.slack``, ``shared.state`` and the core modules; not the runner.
"""

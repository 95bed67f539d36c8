"""HTTP only: one module per Cloud Functions entry point.

Each handler verifies the request (Slack signature or OIDC), parses it, calls one use case and maps the
outcome to an HTTP status. Handlers may import the use cases (``shared.agent``, ``shared.asks``), ``shared.slack``
for signature checks and request parsing, ``shared.state`` and the core modules; never each other's internals.
"""

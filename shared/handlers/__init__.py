"""HTTP only: one module per Cloud Functions entry point.

Each handler verifies the request (Slack signature, or OIDC through ``shared.auth``), parses it, calls one use case
(``shared.usecases``, or a press's ``shared.asks``) and maps the outcome to an HTTP status. Handlers may import
anything below them (``shared.usecases``, ``shared.asks``, ``shared.queue``, ``shared.auth``, ``shared.slack`` for
signature checks and request parsing, ``shared.state`` and the core modules); never each other, and the Slack
ingress never ``shared.agent``.
"""

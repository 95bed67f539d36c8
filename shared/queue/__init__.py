"""The task queue: a session's work is enqueued on Cloud Tasks (``tasks``), with the typed ``tasks_v2``
constructors, names derived from the session id and a bounded patience for an outage.

May import ``shared.state`` (for the deterministic ids) and the core modules; nothing in ``shared.state`` imports it.
"""

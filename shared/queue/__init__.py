"""The task queue: a session's work is enqueued on Cloud Tasks (``tasks``), with the typed ``tasks_v2``
constructors, names derived from the session id and a bounded patience for an outage.

May import ``shared.state`` (the deterministic ids; the session whose waiting record a continuation's task names)
and the core modules; nothing in ``shared.state`` imports it.
"""

"""Delivering tasks to ``agent_session`` the way deployed Cloud Tasks does, for tests and ``make dev``.

The local Cloud Tasks emulator dispatches one task at a time, waits for each, retries at once and has no
deadline, so the races of production (a continuation delivered while its asker still runs, two deliveries of
one task, children of one parent ending together) never happen locally. Pointed between the emulator and
``agent_session``, this dispatcher answers the emulator at once and delivers each task from a pool: up to 20 of
a queue in flight, Cloud Tasks' ``X-CloudTasks-*`` headers, retried on any non-2xx, connection error or missed
deadline with exponential backoff. Its control API lets a test duplicate, hold, release and delay deliveries
and read every attempt.

Run it with ``python -m infra.fakes.dispatch --port P --target URL`` (or ``Stack(parallel_tasks=True)``, or
``TASKS_DELIVERY=parallel make dev``) and drive it through ``Dispatcher`` (``infra.fakes.dispatch.client``).

Imports the standard library and ``infra.fakes.serve`` / ``infra.fakes.control`` only.
"""

from .client import Dispatcher, DispatcherError

__all__ = ["Dispatcher", "DispatcherError"]

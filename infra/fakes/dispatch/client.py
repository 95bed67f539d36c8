"""A typed client for the dispatcher's control API, for tests and tools (standard library only).

    dispatch = Dispatcher(stack.url("dispatch"))
    dispatch.reset()
    dispatch.duplicate(session_id, copies=2)      # its next task goes out twice at once
    with dispatch.holding("cont-"):               # continuations wait here...
        ...                                       # ...while the test opens its race window
        dispatch.wait_held(1)
    dispatch.wait_idle()
    attempts = dispatch.deliveries(session_id)

Rules match a substring of the session id in a task's body (of the task name when the body names none);
an empty ``match`` matches every task.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from infra.fakes.control import ControlClient, ControlError, Json


class DispatcherError(ControlError):
    """The dispatcher refused a control call, or could not be reached."""


class Dispatcher(ControlClient):
    """Control of one running dispatcher at ``base_url``."""

    error_type = DispatcherError
    name = "dispatcher"

    # -- reading -----------------------------------------------------------------------------

    def health(self) -> Json:
        """The target and the policy (deadline, backoff, attempts, concurrency)."""
        return self._call("GET", "/health")

    def deliveries(self, match: str | None = None) -> list[Json]:
        """Every attempt since the last reset, in the order they started.

        Each has ``task``, ``session_id``, ``delivery`` (one per copy), ``copy``, ``duplicate``, ``attempt`` (the
        X-CloudTasks-TaskRetryCount it carried), ``status`` (0 for no answer, None while in flight), ``outcome``
        (ok, http_error, deadline, connection_error), ``error``, ``started``/``ended`` (epoch seconds),
        ``held_seconds``, ``delay`` and ``source`` (tasks: from the emulator; deliver: asked for here).
        """
        path = "/deliveries" + (f"?match={quote(match)}" if match is not None else "")
        return list(self._call("GET", path)["deliveries"])

    def status(self) -> Json:
        """``idle``, how many deliveries are ``active`` and ``in_flight``, the ``held`` ones, the ``rules``."""
        return self._call("GET", "/idle")

    def idle(self) -> bool:
        return bool(self.status()["idle"])

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until no delivery is in flight or pending (held, delayed, backing off)."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status()
            if status["idle"]:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"dispatcher not idle after {timeout:g}s: {status}")
            time.sleep(0.05)

    def wait_held(self, count: int = 1, match: str | None = None, timeout: float = 15.0) -> list[Json]:
        """Until at least ``count`` deliveries (whose session id contains ``match``) are being held; returns them."""
        deadline = time.monotonic() + timeout
        while True:
            held = [
                d
                for d in self.status()["held"]
                if match is None or match in (d["session_id"] if d["session_id"] is not None else d["task"])
            ]
            if len(held) >= count:
                return held
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected {count} held deliveries, got {held} after {timeout:g}s")
            time.sleep(0.05)

    def wait_for_deliveries(
        self, count: int, match: str | None = None, *, ok: bool = False, timeout: float = 30.0
    ) -> list[Json]:
        """Until at least ``count`` finished attempts (successful ones only with ``ok``) match; returns them all."""
        deadline = time.monotonic() + timeout
        while True:
            attempts = self.deliveries(match)
            ended = [a for a in attempts if a["ended"] is not None and (not ok or a["outcome"] == "ok")]
            if len(ended) >= count:
                return attempts
            if time.monotonic() >= deadline:
                raise TimeoutError(f"expected {count} attempts matching {match!r}, got {attempts} in {timeout:g}s")
            time.sleep(0.05)

    # -- rules -----------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the log and every rule; deliveries not yet in flight are dropped."""
        self._call("POST", "/reset", {})

    def duplicate(self, match: str, *, copies: int = 2, tasks: int | None = 1, stagger: float = 0.0) -> Json:
        """The next ``tasks`` tasks matching ``match`` (None: every one) are each delivered ``copies`` times at once.

        The copies start together (``stagger`` seconds apart if set) and retry independently, as two
        deliveries of one task by Cloud Tasks would.
        """
        return self._call("POST", "/duplicate", {"match": match, "copies": copies, "tasks": tasks, "stagger": stagger})

    def hold(self, match: str) -> Json:
        """Keep every delivery of a matching task back (before any attempt, retries too) until released."""
        return self._call("POST", "/hold", {"match": match})

    def release(self, match: str | None = None) -> int:
        """Lift the hold on ``match`` (every hold when None); returns how many held deliveries went out."""
        return int(self._call("POST", "/release", {"match": match})["released"])

    @contextlib.contextmanager
    def holding(self, match: str) -> Iterator[None]:
        """Hold ``match`` inside the block; release it on the way out, however the block ends."""
        self.hold(match)
        try:
            yield
        finally:
            self.release(match)

    def delay(self, match: str, seconds: float, *, tasks: int | None = None) -> Json:
        """Matching tasks (the next ``tasks``, or every one) go out ``seconds`` late; others go out meanwhile."""
        return self._call("POST", "/delay", {"match": match, "seconds": seconds, "tasks": tasks})

    def deliver(
        self,
        *,
        session_id: str | None = None,
        body: Any = None,
        task: str | None = None,
        headers: Mapping[str, str] | None = None,
        copies: int = 1,
        queue: str | None = None,
        wait: bool = False,
        timeout: float = 60.0,
    ) -> Json:
        """An extra delivery now, outside the emulator: ``body`` (JSON value or text) or ``{"session_id": ...}``.

        Holds and delays apply; duplicate rules do not (``copies`` says how many at once). With ``wait`` the
        answer also carries the ``attempts`` once every copy is finished (``finished`` False after ``timeout``).
        """
        payload: Json = {"copies": copies, "wait": wait, "timeout": timeout}
        for key, value in (("session_id", session_id), ("body", body), ("task", task), ("queue", queue)):
            if value is not None:
                payload[key] = value
        if headers is not None:
            payload["headers"] = dict(headers)
        return self._call("POST", "/deliver", payload, timeout=timeout + self.timeout if wait else None)

    # -- transport ---------------------------------------------------------------------------

"""One hard deadline for a whole fetch, enforced by a timer that shuts down the fetch's sockets.

A socket timeout alone cannot bound a fetch: it restarts with every byte received, so a
server that sends one byte a second keeps a read going for as long as it likes. Here a
``threading.Timer`` fires once at the deadline and shuts down every socket the fetch has
open (through a duplicate of its descriptor, which the timer alone owns, so it can never
touch a descriptor the fetch has closed and the system has reused). Whatever the fetch was
blocked in (the TLS handshake, the status line, a header, the body) returns at once, and the
fetch reports the deadline instead of whatever error or short read that caused. Name
lookups, which cannot be interrupted, are waited for only until the deadline.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TypeVar

from shared.agent.tools.fetch.errors import FetchError

T = TypeVar("T")


class Deadline:
    """``with Deadline(seconds) as deadline:`` starts the timer; leaving the block stops it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._ends = time.monotonic() + seconds
        self._lock = threading.Lock()
        self._watched: list[socket.socket] = []  # duplicates owned by this object
        self._fired = False
        self._stopped = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.name = "fetch-deadline"

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._timer.cancel()
        with self._lock:
            self._stopped = True
            for dup in self._watched:
                dup.close()
            self._watched.clear()

    @property
    def expired(self) -> bool:
        return self._fired or time.monotonic() >= self._ends

    def error(self) -> FetchError:
        return FetchError(f"timed out after {self.seconds:g} s")

    def check(self) -> None:
        if self.expired:
            raise self.error()

    def remaining(self) -> float:
        """Seconds left, for a blocking call that cannot be interrupted (a connect); raises once none are."""
        left = self._ends - time.monotonic()
        if left <= 0 or self._fired:
            raise self.error()
        return left

    @contextlib.contextmanager
    def watching(self, sock: socket.socket) -> Iterator[None]:
        """Shut ``sock`` down if the deadline passes while the block runs (also if it already has)."""
        dup = sock.dup()
        with self._lock:
            self._watched.append(dup)
            fired = self._fired
        if fired:
            _shut(dup)
        try:
            yield
        finally:
            with self._lock:
                if dup in self._watched:
                    self._watched.remove(dup)
                    dup.close()

    def call(self, function: Callable[[], T], name: str) -> T:
        """``function()`` in a daemon thread, waited for until the deadline; for calls that cannot be interrupted."""
        outcome: list[T] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                outcome.append(function())
            except BaseException as exc:  # handed to the caller's thread below
                failure.append(exc)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        thread.join(self.remaining())
        if thread.is_alive():
            raise self.error()
        if failure:
            raise failure[0]
        return outcome[0]

    def _fire(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._fired = True
            for dup in self._watched:
                _shut(dup)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed by the peer, or never connected
        sock.shutdown(socket.SHUT_RDWR)

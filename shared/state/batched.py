"""Documents read together: one batched read (``get_all``) of the documents a step needs, by path, and work run
beside the caller's (a read that need not wait for another: the Firestore client is thread-safe)."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from google.cloud import firestore

from shared.state.firestore import db

T = TypeVar("T")
U = TypeVar("U")

# Documents by path: their data, or None for one that does not exist.
Docs = Mapping[str, dict[str, Any] | None]


def read(refs: list[firestore.DocumentReference], *, known: Docs | None = None) -> dict[str, dict[str, Any] | None]:
    """The documents of ``refs`` by path (None: it does not exist), those in ``known`` as given there and the rest in
    one batched read; no read at all when nothing is left to read."""
    known = known or {}
    found: dict[str, dict[str, Any] | None] = {r.path: known[r.path] for r in refs if r.path in known}
    wanted = list({r.path: r for r in refs if r.path not in found}.values())
    if wanted:
        for snap in db().get_all(wanted):
            found[snap.reference.path] = snap.to_dict() if snap.exists else None
    return found


class Beside(Generic[T]):
    """``work()`` started now on a thread of its own (with the caller's context: its logs keep the session and
    trace); ``result()`` waits for it and returns what it returned, or raises what it raised."""

    def __init__(self, work: Callable[[], T]) -> None:
        self._result: T | None = None
        self._error: BaseException | None = None
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._run, work), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], T]) -> None:
        try:
            self._result = work()
        except BaseException as exc:  # raised again in the caller's thread by result()
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]

    def wait(self) -> None:
        """Wait for it to end, whatever it came to (nothing is left running)."""
        self._thread.join()


def together(*works: Callable[[], object]) -> None:
    """Every one of ``works`` at the same time (all but the last on threads of their own), each run to its end
    whatever the others came to; then the first error any of them raised, if one did."""
    if not works:
        return
    beside = [Beside(work) for work in works[:-1]]
    try:
        works[-1]()
    finally:
        for started in beside:
            started.wait()
    for started in beside:
        started.result()


def both(first: Callable[[], T], second: Callable[[], U]) -> tuple[T, U]:
    """``first()`` and ``second()`` at the same time (``first`` on a thread of its own); both results."""
    beside = Beside(first)
    try:
        other = second()
    finally:
        beside.wait()
    return beside.result(), other

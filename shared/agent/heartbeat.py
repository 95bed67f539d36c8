"""A worker's heartbeat (Temporal's activity heartbeat): while a session runs, a thread renews its short lease, so a
model call or a tool that takes minutes keeps it alive, and a dead worker's session is known within one lease
(SESSION_LEASE_SECONDS), not after the longest thing a step can do.

The beat is every quarter of the lease (a beat or two may be lost to a slow Firestore), and it stops when the
session is no longer this worker's (paused, ended, taken over), when the block ends, and at the latest when the
session's wall budget and its wrap-up are past: a worker stuck for ever is not kept alive for ever.

What else must be kept alive while the run works joins the beat (``also``): the thread's status line, which Slack
removes two minutes after it was set when the app posted nothing meanwhile (a model turn or a tool taking minutes).
It runs beside the beat (a slow Slack never delays a renewal) and stops with it, so nothing is kept after the run.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shared.state import lease
from shared.state.session_model import Session

log = logging.getLogger(__name__)

# What the running session's beat also does, each beat (``also``); None outside a heartbeat.
_ALSO: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar("heartbeat_also", default=None)


def also(work: Callable[[], None]) -> None:
    """Have the heartbeat of the session this thread runs call ``work`` at each beat while it lasts (its failure
    logged); outside a heartbeat, nothing."""
    kept_too = _ALSO.get()
    if kept_too is not None:
        kept_too.append(work)


@contextmanager
def kept(session: Session, *, lease_seconds: int, for_seconds: float) -> Iterator[None]:
    """Renew ``session``'s lease every ``lease_seconds / 4`` while the block runs, for at most ``for_seconds``."""
    stop = threading.Event()
    kept_too: list[Callable[[], None]] = []
    token = _ALSO.set(kept_too)
    every = lease.beat_seconds(lease_seconds)
    until = time.monotonic() + for_seconds
    beside: list[threading.Thread | None] = [None]  # the thread running what joined the beat (``also``), if any

    def beat() -> None:
        # The first beat a quarter of a lease after the claim (a short session costs no Firestore operation more).
        while not stop.wait(every):
            if time.monotonic() > until:
                log.warning("the session outlived its wall budget; its lease is no longer renewed")
                return
            try:
                if not lease.renew(session, lease_seconds=lease_seconds):
                    return  # not this worker's any more: nothing to keep
            except Exception:  # a Firestore hiccup: the next beat tries again, within the lease
                log.warning("could not renew the session's lease", exc_info=True)
            if kept_too and (beside[0] is None or not beside[0].is_alive()):  # one at a time, never the lease's
                helper = threading.Thread(target=contextvars.copy_context().run, args=(also_kept,), daemon=True,
                                          name=f"heartbeat-also-{session.session_id}")  # fmt: skip
                beside[0] = helper
                helper.start()

    def also_kept() -> None:
        """What joined the beat, on a thread of its own: a slow Slack never delays the lease's renewal."""
        for work in list(kept_too):
            if stop.is_set():
                return  # the run is over: what it showed is not kept
            try:
                work()
            except Exception:
                log.warning("a heartbeat's display update failed", exc_info=True)

    context = contextvars.copy_context()  # the beat logs under the session and its trace
    thread = threading.Thread(target=context.run, args=(beat,), name=f"heartbeat-{session.session_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        _ALSO.reset(token)
        thread.join(timeout=every + 10)
        if beside[0] is not None:
            beside[0].join(timeout=every + 10)

"""A worker's heartbeat (Temporal's activity heartbeat): while a session runs, a thread renews its short lease, so a
model call or a tool that takes minutes keeps it alive, and a dead worker's session is known within one lease
(SESSION_LEASE_SECONDS), not after the longest thing a step can do.

The beat is every quarter of the lease (a beat or two may be lost to a slow Firestore), and it stops when the
session is no longer this worker's (paused, ended, taken over), when the block ends, and at the latest when the
session's wall budget and its wrap-up are past: a worker stuck for ever is not kept alive for ever.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from shared.state import lease
from shared.state.session_model import Session

log = logging.getLogger(__name__)


@contextmanager
def kept(session: Session, *, lease_seconds: int, for_seconds: float) -> Iterator[None]:
    """Renew ``session``'s lease every ``lease_seconds / 4`` while the block runs, for at most ``for_seconds``."""
    stop = threading.Event()
    every = lease.beat_seconds(lease_seconds)
    until = time.monotonic() + for_seconds

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

    context = contextvars.copy_context()  # the beat logs under the session and its trace
    thread = threading.Thread(target=context.run, args=(beat,), name=f"heartbeat-{session.session_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=every + 10)

"""What every handler shares: the reply type, the one body-size check, the Slack entry points' admission (size, then
signature) and patience with Cloud Tasks."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from shared.errors import Contended, ShowLater
from shared.queue import tasks
from shared.slack.verify import verify

log = logging.getLogger(__name__)

Reply = tuple[dict[str, Any], int]
Handler = Callable[[bytes, Mapping[str, str]], Reply]

SLACK_MAX_BODY_BYTES = 1024 * 1024  # Slack events and interactivity payloads
INTERNAL_MAX_BODY_BYTES = 64 * 1024  # Cloud Tasks and Cloud Scheduler bodies


def too_large(body: bytes, limit: int) -> Reply | None:
    """The 413 for a body over ``limit`` (entry points read at most ``limit + 1`` bytes), else None."""
    if len(body) > limit:
        return {"error": "body too large"}, 413
    return None


def queue_unavailable(exc: Exception) -> Reply:
    """Cloud Tasks stayed down for the part of Slack's 3 s the ingress may wait: a 503, so Slack delivers again
    (what was recorded is kept, and the redelivery's duplicate path creates the task). Logged without a
    traceback: an outage of a service, not a bug."""
    log.warning("Cloud Tasks is unavailable; asking Slack to deliver again", extra={"reason": str(exc)})
    return {"error": "the task queue is unavailable; retry"}, 503


def try_again(exc: Contended, *, status: int = 503) -> Reply:
    """A Firestore transaction gave up for contention (nothing of it was written): a 503 (``status``), which Cloud
    Scheduler and Slack each deliver again (Cloud Tasks is answered 500: a 503 would slow its whole queue). One
    WARNING line (under the session's id when one is in context), no traceback: a busy document, not a bug."""
    log.warning(
        "a Firestore transaction gave up for contention; asking for a later delivery", extra={"reason": str(exc)}
    )
    return {"error": "contended; retry"}, status


def retry_contended(answer: Handler) -> Handler:
    """``answer``, with a ``Contended`` it raises answered by ``try_again``."""

    @functools.wraps(answer)
    def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
        try:
            return answer(body, headers)
        except Contended as exc:
            return try_again(exc)

    return handle


def slack_entry_point(answer: Handler) -> Handler:
    """A Slack entry point's ``handle``: a body over SLACK_MAX_BODY_BYTES is a 413 and one without a valid Slack
    signature a 401, before ``answer`` reads anything. Slack waits 3 s, so every task creation of one request
    together waits at most INGRESS_PATIENCE_SECONDS for Cloud Tasks, then the answer is a 503 (Slack delivers
    again; what was recorded is kept), as it is for a transaction that gave up for contention."""

    @retry_contended
    @functools.wraps(answer)
    def handle(body: bytes, headers: Mapping[str, str]) -> Reply:
        refused = too_large(body, SLACK_MAX_BODY_BYTES)
        if refused:
            return refused
        if not verify(body, headers):
            log.warning("rejected request with a missing or invalid Slack signature")
            return {"error": "invalid signature"}, 401
        with tasks.within(tasks.INGRESS_PATIENCE_SECONDS):
            try:
                return answer(body, headers)
            except tasks.QueueUnavailable as exc:
                return queue_unavailable(exc)
            except ShowLater as exc:  # recorded and queued; Slack's redelivery shows it (a warning, no traceback)
                log.warning("Slack would not show what was recorded; asking Slack to deliver again",
                            extra={"reason": str(exc)})  # fmt: skip
                return {"error": "recorded; Slack would not show it now; retry"}, 503

    return handle

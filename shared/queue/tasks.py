"""Enqueueing agent sessions on Cloud Tasks, with the typed ``tasks_v2`` constructors.

Task names are derived from the session id, so Cloud Tasks itself refuses a
second task for the same cause. The local emulator does not enforce that,
which is why correctness never depends on it: the session claim does.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc
from google.api_core import retry as retries
from google.cloud import tasks_v2
from google.protobuf import duration_pb2

from shared import config, deps, logs
from shared.errors import ProductError
from shared.state import ids
from shared.state.models import Waiting
from shared.state.session_model import Session

log = logging.getLogger(__name__)

# How long a task's creation is retried while Cloud Tasks is unavailable. The client library never retries
# create_task itself (an unnamed task created twice would run twice); ours are named, so a retry that follows an
# attempt which did get through is refused with AlreadyExists, which counts as enqueued. In agent_session and the
# sweep, waiting beats losing the work: a session's follow-up (a continuation, a child, a narration) is never left
# for the rescue job to find, and a worker has minutes.
ENQUEUE_PATIENCE_SECONDS = 20.0
# The Slack ingress has Slack's 3 s in all: its task creations together wait at most this long (``within``), then
# it answers 503 and Slack delivers the event again, whose duplicate path creates the task again (same name).
INGRESS_PATIENCE_SECONDS = 2.0
_TRANSIENT_ERRORS = (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.TooManyRequests)
TRANSIENT = retries.if_exception_type(*_TRANSIENT_ERRORS)


class QueueUnavailable(ProductError):
    """Cloud Tasks could not be reached in the time this request may wait for it: nothing was enqueued."""


@dataclass
class _Budget:
    """Seconds a request may still spend waiting on Cloud Tasks (a nested budget spends its outer one's too)."""

    remaining: float
    outer: _Budget | None = None

    def left(self) -> float:
        return min(self.remaining, self.outer.left()) if self.outer is not None else self.remaining

    def spend(self, seconds: float) -> None:
        self.remaining -= seconds
        if self.outer is not None:
            self.outer.spend(seconds)


_budget: ContextVar[_Budget | None] = ContextVar("enqueue_budget", default=None)


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Inside, the task creations together wait at most ``seconds`` for Cloud Tasks (only the time spent creating
    tasks counts, not the rest of the request); once it is spent, ``enqueue_session`` raises ``QueueUnavailable``
    without trying again."""
    token = _budget.set(_Budget(seconds, _budget.get()))
    try:
        yield
    finally:
        _budget.reset(token)


def _patience(patience: float) -> float:
    budget = _budget.get()
    return patience if budget is None else min(patience, budget.left())


# A continuation's task names the waiting record it resumes (``resumes``), so its claim reads what the record came to
# in its own batched read (issue 28.1), and its transcript's first free step id (``transcript_next``), so the same
# read has the transcript's steps. Hints only: the claim checks the record against the session's own, and uses the
# steps only if that id is still free. A record longer than this is not named (the body stays small, and the claim's
# read with it), nor a transcript of more steps than this (the run queries it after the claim).
MAX_RESUMES_NAMED = 16
MAX_STEPS_NAMED = 32  # read in the claim's transaction, which holds the session meanwhile


def build_session_task(session_id: str, *, attempt: str = "", resumes: Sequence[Waiting] = (),
                       transcript_next: int = 0) -> tasks_v2.Task:  # fmt: skip
    """The HTTP task that runs ``session_id`` on agent_session, with an OIDC token when deployed; ``resumes``: the
    waiting record a continuation resumes, named in the body (``resumes_named``) with ``transcript_next``, its
    transcript's first free step id (``transcript_next_named``; 0: not named)."""
    settings = config.settings()
    queue = tasks_v2.CloudTasksClient.parse_queue_path(settings.tasks_queue)
    name = tasks_v2.CloudTasksClient.task_path(
        queue["project"], queue["location"], queue["queue"], ids.task_id(session_id, attempt)
    )
    oidc = None
    if settings.tasks_service_account:
        oidc = tasks_v2.OidcToken(
            service_account_email=settings.tasks_service_account, audience=settings.tasks_target_url
        )
    return tasks_v2.Task(
        name=name,
        http_request=tasks_v2.HttpRequest(
            http_method=tasks_v2.HttpMethod.POST,
            url=settings.tasks_target_url,
            headers=_headers(),
            body=json.dumps(_body(session_id, resumes, transcript_next)).encode(),
            oidc_token=oidc,
        ),
        dispatch_deadline=duration_pb2.Duration(seconds=settings.tasks_dispatch_deadline_seconds),
    )


def _body(session_id: str, resumes: Sequence[Waiting], transcript_next: int) -> dict[str, Any]:
    body: dict[str, Any] = {"session_id": session_id}
    if resumes and len(resumes) <= MAX_RESUMES_NAMED:
        body["resumes"] = [entry.to_doc() for entry in resumes]
        if _nameable(transcript_next):
            body["transcript_next"] = transcript_next
    return body


def resumes_named(payload: Mapping[str, Any]) -> list[Waiting] | None:
    """The waiting record a task's body names (None: it names none, or not in the form ``build_session_task``
    writes, which is read as naming none: the hint is never needed to run the session)."""
    named = payload.get("resumes")
    if not isinstance(named, list) or not named or len(named) > MAX_RESUMES_NAMED:
        return None
    if not all(isinstance(entry, dict) for entry in named):
        return None
    try:
        record = [Waiting.from_doc(entry) for entry in named]
    except (TypeError, ValueError):  # a missing field, an unknown kind
        return None
    fields_ok = all(isinstance(w.seq, int) and isinstance(w.index, int) and _document_id(w.key) for w in record)
    unique = len({w.key for w in record}) == len(record)
    return record if fields_ok and unique else None


def transcript_next_named(payload: Mapping[str, Any]) -> int | None:
    """The first free step id of the continued transcript a task's body names (None: none, or not as ``_body``
    writes it)."""
    named = payload.get("transcript_next")
    return named if isinstance(named, int) and not isinstance(named, bool) and _nameable(named) else None


def _nameable(transcript_next: int) -> bool:
    """A step id a task may name: one the claim reads every step before (``MAX_STEPS_NAMED``)."""
    return 0 < transcript_next <= MAX_STEPS_NAMED


def _document_id(key: object) -> bool:
    """Whether ``key`` can name a document of its kind's collection (the claim reads it): a Firestore document id,
    not a path, nor a name Firestore reserves."""
    return (isinstance(key, str) and 0 < len(key.encode()) <= 1500 and "/" not in key and key not in {".", ".."}
            and not (key.startswith("__") and key.endswith("__")))  # fmt: skip


def _headers() -> dict[str, str]:
    """JSON, and the current trace passed on, so the session's delivery logs under the same trace."""
    headers = {"Content-Type": "application/json"}
    trace = logs.current_trace()
    if trace:
        headers["traceparent"] = logs.traceparent(trace)
    return headers


def enqueue_session(session_id: str, *, attempt: str = "", patience: float = ENQUEUE_PATIENCE_SECONDS,
                    resumes: Sequence[Waiting] = (), transcript_next: int = 0) -> str:  # fmt: skip
    """Create the task for ``session_id``, retried with backoff for ``patience`` seconds (or what is left of the
    caller's ``within``) while Cloud Tasks is unavailable; a task that already exists counts as enqueued. Raises
    ``QueueUnavailable`` when that time runs out. ``resumes``: the waiting record a continuation resumes (a hint its
    claim reads with, and ``transcript_next``: ``build_session_task``)."""
    task = build_session_task(session_id, attempt=attempt, resumes=resumes, transcript_next=transcript_next)
    wait = _patience(patience)
    if wait <= 0.05:
        raise QueueUnavailable(f"no time left to create the task of {session_id}")
    initial = 0.25 if wait > 5 else 0.1  # a short budget tries a few times in it, not once
    retry = retries.Retry(predicate=TRANSIENT, initial=initial, maximum=4.0, multiplier=2.0, timeout=wait)
    began = time.monotonic()
    try:
        # The timeout is a deadline for every attempt together (api_core's TimeToDeadlineTimeout).
        created = deps.tasks().create_task(
            parent=config.settings().tasks_queue, task=task, retry=retry, timeout=min(10.0, wait)
        )
    except gexc.AlreadyExists:
        log.info("task already exists", extra={"task": task.name, "session_id": session_id})
        return str(task.name)
    except (gexc.RetryError, *_TRANSIENT_ERRORS) as exc:
        raise QueueUnavailable(f"Cloud Tasks unavailable for {wait:.1f} s: {exc}") from exc
    finally:
        budget = _budget.get()
        if budget is not None:
            budget.spend(time.monotonic() - began)
    log.info("task enqueued", extra={"task": created.name, "session_id": session_id})
    return str(created.name)


def enqueue_continuation(continuation: Session, *, attempt: str = "") -> str:
    """``enqueue_session`` for a queued continuation (or a session that resumes itself): its task names the waiting
    record it resumes, so its claim reads what the record came to (the answers, the decisions and their calls' ledger
    entries) in its own batched read, with its transcript (a continuation starts at the first free step id of its
    asker's transcript, ``waiting.wake``)."""
    return enqueue_session(continuation.session_id, attempt=attempt, resumes=continuation.waiting,
                           transcript_next=continuation.next_seq)  # fmt: skip

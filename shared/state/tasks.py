"""Enqueueing agent sessions on Cloud Tasks, with the typed ``tasks_v2`` constructors.

Task names are derived from the session id, so Cloud Tasks itself refuses a
second task for the same cause. The local emulator does not enforce that,
which is why correctness never depends on it: the session claim does.
"""

from __future__ import annotations

import json
import logging

from google.api_core import exceptions as gexc
from google.api_core import retry as retries
from google.cloud import tasks_v2
from google.protobuf import duration_pb2

from shared import config, deps, logs
from shared.state import ids

log = logging.getLogger(__name__)

# How long a task's creation is retried while Cloud Tasks is unavailable. The client library never retries
# create_task itself (an unnamed task created twice would run twice); ours are named, so a retry that follows an
# attempt which did get through is refused with AlreadyExists, which counts as enqueued. Waiting beats losing the
# work: the ingress answers Slack late rather than not at all (Slack's retry of a slow delivery is de-duplicated),
# and a session's follow-up (a continuation, a child, a narration) is never left for the rescue job to find.
ENQUEUE_PATIENCE_SECONDS = 20.0
TRANSIENT = retries.if_exception_type(
    gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.TooManyRequests
)


def build_session_task(session_id: str, *, attempt: str = "") -> tasks_v2.Task:
    """The HTTP task that runs ``session_id`` on agent_session, with an OIDC token when deployed."""
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
            body=json.dumps({"session_id": session_id}).encode(),
            oidc_token=oidc,
        ),
        dispatch_deadline=duration_pb2.Duration(seconds=settings.tasks_dispatch_deadline_seconds),
    )


def _headers() -> dict[str, str]:
    """JSON, and the current trace passed on, so the session's delivery logs under the same trace."""
    headers = {"Content-Type": "application/json"}
    trace = logs.current_trace()
    if trace:
        headers["traceparent"] = logs.traceparent(trace)
    return headers


def enqueue_session(session_id: str, *, attempt: str = "", patience: float = ENQUEUE_PATIENCE_SECONDS) -> str:
    """Create the task for ``session_id``, retried with backoff for ``patience`` seconds while Cloud Tasks is
    unavailable; a task that already exists counts as enqueued."""
    task = build_session_task(session_id, attempt=attempt)
    retry = retries.Retry(predicate=TRANSIENT, initial=0.25, maximum=4.0, multiplier=2.0, timeout=patience)
    try:
        created = deps.tasks().create_task(
            parent=config.settings().tasks_queue, task=task, retry=retry, timeout=min(10.0, patience)
        )
    except gexc.AlreadyExists:
        log.info("task already exists", extra={"task": task.name, "session_id": session_id})
        return str(task.name)
    log.info("task enqueued", extra={"task": created.name, "session_id": session_id})
    return str(created.name)

"""The collaborators every use case needs, built lazily once per instance: Firestore, Slack, Cloud Tasks, the
model client and the clock.

Importing this module builds nothing. The first use of a collaborator builds it from configuration and keeps it
for the life of the instance (the functions-framework "lazy globals" pattern, in one place). Tests and benchmarks
hand in their own (a counting Firestore client, a fixed clock) with ``override``; they never reach into another
module's private globals.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from shared import config

if TYPE_CHECKING:
    from google.cloud import firestore as firestore_module
    from google.cloud import tasks_v2
    from slack_sdk import WebClient


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Deps:
    """The instance's collaborators; ``None`` means "build on first use"."""

    firestore: Any = None  # google.cloud.firestore.Client
    slack: Any = None  # slack_sdk.WebClient
    tasks: Any = None  # google.cloud.tasks_v2.CloudTasksClient
    model: Any = None  # google.genai.Client, built by shared.agent.model (the ingress never imports it)
    tools: Any = None  # a session's toolset, ``(session) -> Toolset``; None means shared.agent.tools.toolset's own
    clock: Callable[[], datetime] = field(default=utc_now)

    def built(self) -> list[str]:
        """Which clients exist so far (importing the product must build none)."""
        return [name for name in ("firestore", "slack", "tasks", "model") if getattr(self, name) is not None]


_current: Deps | None = None


def get() -> Deps:
    """This instance's collaborators."""
    global _current  # noqa: PLW0603 - the one lazy global of the product
    if _current is None:
        _current = Deps()
    return _current


@contextmanager
def override(**collaborators: Any) -> Iterator[Deps]:
    """Use these collaborators (e.g. ``firestore=CountingClient(...)``, ``clock=lambda: t``) inside the block."""
    global _current  # noqa: PLW0603
    saved = get()
    _current = replace(saved, **collaborators)
    try:
        yield _current
    finally:
        _current = saved


def reset() -> None:
    """Forget every built client (tests that change the environment)."""
    global _current  # noqa: PLW0603
    _current = None


def now() -> datetime:
    return get().clock()


def firestore() -> firestore_module.Client:
    """The Firestore client; it honours FIRESTORE_EMULATOR_HOST itself."""
    deps = get()
    if deps.firestore is None:
        from google.cloud import firestore as firestore_module

        settings = config.settings()
        deps.firestore = firestore_module.Client(
            project=settings.google_cloud_project, database=settings.firestore_database
        )
    client: firestore_module.Client = deps.firestore
    return client


def slack() -> WebClient:
    """The Slack Web API client, with slack-sdk's own retry handlers for rate limits, connection errors and 5xx."""
    deps = get()
    if deps.slack is None:
        from slack_sdk import WebClient
        from slack_sdk.http_retry.builtin_handlers import (
            ConnectionErrorRetryHandler,
            RateLimitErrorRetryHandler,
            ServerErrorRetryHandler,
        )

        settings = config.settings()
        deps.slack = WebClient(
            token=settings.slack_bot_token,
            base_url=settings.slack_api_base_url,
            timeout=10,
            retry_handlers=[
                RateLimitErrorRetryHandler(max_retry_count=2),
                ConnectionErrorRetryHandler(max_retry_count=2),
                ServerErrorRetryHandler(max_retry_count=2),
            ],
        )
    client: WebClient = deps.slack
    return client


def tasks() -> tasks_v2.CloudTasksClient:
    """The Cloud Tasks client; an insecure channel to the emulator when TASKS_EMULATOR_HOST is set."""
    deps = get()
    if deps.tasks is None:
        from google.cloud import tasks_v2

        emulator = config.settings().tasks_emulator_host
        if emulator:
            import grpc
            from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

            deps.tasks = tasks_v2.CloudTasksClient(
                transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(emulator))
            )
        else:
            deps.tasks = tasks_v2.CloudTasksClient()
    client: tasks_v2.CloudTasksClient = deps.tasks
    return client

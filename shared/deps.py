"""The collaborators every use case needs, built lazily once per instance: Firestore, Slack, Cloud Tasks, the
model client and the clock.

Importing this module builds nothing. The first use of a collaborator builds it from configuration and keeps it
for the life of the instance (the functions-framework "lazy globals" pattern, in one place). Building holds a
lock: an instance serves parallel requests, and a second client built meanwhile would replace the first while a
request still uses it (its connections closed under it: "Bad file descriptor"). Tests and benchmarks
hand in their own (a counting Firestore client, a fixed clock) with ``override``; they never reach into another
module's private globals.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from shared import config

if TYPE_CHECKING:
    from google.cloud import firestore as firestore_module
    from google.cloud import tasks_v2


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Deps:
    """The instance's collaborators; ``None`` means "build on first use"."""

    firestore: Any = None  # google.cloud.firestore.Client
    slack: Any = None  # slack_sdk.WebClient, built by shared.slack.client with its retry handlers
    tasks: Any = None  # google.cloud.tasks_v2.CloudTasksClient
    model: Any = None  # google.genai.Client, built by shared.agent.model (the ingress never imports it)
    mcp_tls: Any = None  # ssl.SSLContext for MCP servers, built once by shared.agent.tools.mcp.connection
    tools: Any = None  # a session's toolset, ``(session) -> Toolset``; None means shared.agent.tools.toolset's own
    clock: Callable[[], datetime] = field(default=utc_now)

    def built(self) -> list[str]:
        """Which clients exist so far (importing the product must build none)."""
        return [name for name in ("firestore", "slack", "tasks", "model") if getattr(self, name) is not None]


_current: Deps | None = None
_building = threading.RLock()
T = TypeVar("T")


def get() -> Deps:
    """This instance's collaborators."""
    global _current  # noqa: PLW0603 - the one lazy global of the product
    if _current is None:
        with _building:
            if _current is None:
                _current = Deps()
    return _current


def once(name: str, build: Callable[[], T]) -> T:
    """The collaborator ``name``, built by ``build`` on first use, once however many requests ask at that moment."""
    deps = get()
    value = getattr(deps, name)
    if value is None:
        with _building:
            value = getattr(deps, name)
            if value is None:
                value = build()
                setattr(deps, name, value)
    built: T = value
    return built


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
    return once("firestore", _build_firestore)


def _build_firestore() -> firestore_module.Client:
    from google.cloud import firestore as firestore_module

    settings = config.settings()
    return firestore_module.Client(project=settings.google_cloud_project, database=settings.firestore_database)


def tasks() -> tasks_v2.CloudTasksClient:
    """The Cloud Tasks client; an insecure channel to the emulator when TASKS_EMULATOR_HOST is set."""
    return once("tasks", _build_tasks)


def _build_tasks() -> tasks_v2.CloudTasksClient:
    from google.cloud import tasks_v2

    emulator = config.settings().tasks_emulator_host
    if not emulator:
        return tasks_v2.CloudTasksClient()
    import grpc
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=grpc.insecure_channel(emulator)))

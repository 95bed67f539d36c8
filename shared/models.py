"""The shapes of what is stored in Firestore, named once so every module spells them the same."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class SessionKind(StrEnum):
    MENTION = "mention"
    CONTINUATION = "continuation"
    RETRY = "retry"
    SCHEDULED = "scheduled"


class SessionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    DONE = "done"
    FAILED = "failed"
    SILENT_EXIT = "silent_exit"
    ABANDONED = "abandoned"


TERMINAL_STATUSES = frozenset(
    {SessionStatus.DONE, SessionStatus.FAILED, SessionStatus.SILENT_EXIT, SessionStatus.ABANDONED}
)


@dataclass
class Session:
    """A ``sessions/{session_id}`` document: one bounded run of the agent in one Slack thread."""

    session_id: str
    kind: SessionKind
    channel: str
    thread_ts: str
    trigger_ts: str
    trigger_user: str
    text: str
    created_at: datetime
    status: SessionStatus = SessionStatus.QUEUED
    event_id: str | None = None
    parent_session_id: str | None = None
    question_id: str | None = None
    lease_until: datetime | None = None
    turns: int = 0
    tool_calls: int = 0
    closed_loop: bool | None = None
    updated_at: datetime | None = None

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["kind"] = self.kind.value
        doc["status"] = self.status.value
        doc["updated_at"] = self.updated_at or self.created_at
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Session:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in doc.items() if k in known}
        values["kind"] = SessionKind(values["kind"])
        values["status"] = SessionStatus(values["status"])
        return cls(**values)

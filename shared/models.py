"""The shapes of what is stored in Firestore, named once so every module spells them the same."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any


class SessionKind(StrEnum):
    MENTION = "mention"
    CONTINUATION = "continuation"
    RETRY = "retry"
    SCHEDULED = "scheduled"


class QuestionStatus(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"


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
    # The session whose transcript this one continues (itself for a mention); steps live under it.
    transcript_id: str | None = None
    next_seq: int = 0
    worker: str | None = None
    lease_task: str | None = None
    lease_attempt: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    # Notes queued while the session runs: answers to its non-blocking questions, messages in its thread.
    notes: list[dict[str, Any]] = field(default_factory=list)
    # A silent exit is followed up once: narrated by a retry, or escalated to the operators.
    followed_up: bool = False
    retry_reason: str | None = None

    @property
    def transcript(self) -> str:
        return self.transcript_id or self.session_id

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


@dataclass
class Step:
    """One durable step of a transcript: ``sessions/{transcript}/steps/{seq}``.

    ``content`` is a google-genai ``Content`` as JSON (None for a step that only
    records something, like a failure); ``audit`` holds the records the silent-exit
    gate and narrations read: model turns, tool calls (outward or inward) and posts.
    """

    seq: int
    session_id: str
    kind: str
    content: dict[str, Any] | None
    audit: list[dict[str, Any]]
    at: datetime

    def to_doc(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Step:
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})


@dataclass
class Question:
    """A ``questions/{question_id}`` document: one question asked of the operator in a thread."""

    question_id: str
    session_id: str
    transcript_id: str
    channel: str
    thread_ts: str
    text: str
    options: list[str]
    blocking: bool
    call_id: str | None
    asked_at: datetime
    post_ts: str | None = None
    status: QuestionStatus = QuestionStatus.OPEN
    requester: str | None = None
    reminded_at: datetime | None = None
    answer: str | None = None
    answered_by: str | None = None
    answered_at: datetime | None = None
    answer_ts: str | None = None  # the Slack message (or button click) that answered
    matched_option: str | None = None
    continuation_id: str | None = None

    def to_doc(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["status"] = self.status.value
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Question:
        values = {k: v for k, v in doc.items() if k in cls.__dataclass_fields__}
        values["status"] = QuestionStatus(values["status"])
        return cls(**values)

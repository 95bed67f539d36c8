"""A ``sessions/{session_id}`` document: ``Session``, grouped into typed parts (where its request came from,
its lease, what it used and may use, its place in a delegation tree, its messages), and the typed updates
a commit takes. The stored document keeps one flat field per value (``PARTS`` maps them), so sessions stored
before the parts load, and Firestore queries and transactions use the flat field paths."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, TypedDict, Unpack

from shared.state import legacy_waits
from shared.state.models import (
    Note,
    ParentQuestion,
    SessionKind,
    SessionStatus,
    Stored,
    Waiting,
    WaitKind,
    stored_value,
)


@dataclass
class Origin:
    """Where a session's request came from and for whom it works: its thread, the message that triggered it.
    Stored flat on the session's document."""

    channel: str
    thread_ts: str
    trigger_ts: str
    trigger_user: str
    event_id: str | None = None
    requested_by: str | None = None  # who asked for the work, when another person's answer or click started this
    # The request message the whole conversation started from, copied down every continuation, retry and child,
    # so each marks it (👀, ✅) without reading its chain; None on sessions stored before it was kept.
    request_ts: str | None = None


@dataclass
class Lease:
    """Which worker runs the session now, until when, for which task delivery; and how often it was taken over.
    Stored flat on the session's document."""

    until: datetime | None = None
    worker: str | None = None
    task: str | None = None
    attempt: int = 0
    takeovers: int = 0  # how often another delivery took it over from a dead worker (never reset)
    # Takeovers since the last step was stored: a session killed at one step every time is failed, not retried.
    takeovers_without_progress: int = 0


@dataclass
class Limits:
    """What the session has used (turns, tool calls, tokens) and, for a child, what it was allotted. Stored flat
    on the session's document."""

    turns: int = 0
    tool_calls: int = 0
    tokens: dict[str, int] = field(default_factory=dict)  # running totals of every model turn: prompt, cached, ...
    max_turns: int | None = None  # a child: its allotment (None: the per-session budget); and its tool calls:
    max_tool_calls: int | None = None


@dataclass
class Tree:
    """The session's place in a delegation tree (flow 10): its root and parent, the delegate call that started
    it, and, on the root, the tree's budget and status message. Stored flat on the session's document."""

    parent_id: str | None = None
    parent_transcript: str | None = None  # the parent's transcript: whichever of its sessions writes it now
    depth: int = 0
    delegate_seq: int | None = None  # the parent's model step holding the delegate call
    delegate_index: int | None = None  # the call's position in that step
    delegate_blocking: bool = True
    sibling_ids: list[str] = field(default_factory=list)  # the blocking children of the same parent turn
    # A delegation tree's budget is kept on its root: each child is allotted turns and tool calls when it starts.
    root_id: str | None = None  # a child: the root of its tree
    reserved: dict[str, int] = field(default_factory=dict)  # the root: turns and tool_calls allotted now
    tokens: dict[str, int] = field(default_factory=dict)  # the root: the tokens its ended children used
    status_ts: str | None = None  # the root: the thread message listing the tree's children and their state


@dataclass
class Stream:
    """The session's messages in the thread: the one it streams into now, and its final answer's last message.
    Stored flat on the session's document."""

    answer_ts: str | None = None  # a top-level session that ended: its final answer's last message (feedback)
    ts: str | None = None  # its latest streamed message, recorded before any text: a takeover replaces it


class SessionChanges(TypedDict, total=False):
    """A typed update of a session's fields other than its status: stored (flat) names and their types."""

    event_id: str | None
    asker_session_id: str | None
    narrated_session_id: str | None
    question_id: str | None
    lease_until: datetime | None
    turns: int
    tool_calls: int
    tokens: dict[str, int]
    closed_loop: bool | None
    updated_at: datetime | None
    transcript_id: str | None
    transcript_writer: str | None
    next_seq: int
    worker: str | None
    lease_task: str | None
    lease_attempt: int
    takeovers: int
    takeovers_without_progress: int
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    notes: list[Note]
    followed_up: bool
    retry_reason: str | None
    trace_id: str | None
    handed_to: str | None
    parent_session_id: str | None
    parent_transcript: str | None
    depth: int
    delegate_seq: int | None
    delegate_index: int | None
    delegate_blocking: bool
    sibling_ids: list[str]
    result: str | None
    parent_question: ParentQuestion | None
    parent_questions: list[ParentQuestion]
    stop_requested: str | None
    late_note: Note | None
    root_session_id: str | None
    max_turns: int | None
    max_tool_calls: int | None
    tree_reserved: dict[str, int]
    tree_tokens: dict[str, int]
    tree_status_ts: str | None
    requested_by: str | None
    answer_ts: str | None
    stream_ts: str | None
    request_ts: str | None
    waiting: list[Waiting]


class SessionUpdate(SessionChanges, total=False):
    """A commit's typed update of a session: stored (flat) field names and their types.

    ``stored(update)`` is the Firestore map; ``Session.apply`` brings a copy in line with it.
    """

    status: SessionStatus


@dataclass
class Session:
    """A ``sessions/{session_id}`` document: one bounded run of the agent in one Slack thread."""

    session_id: str
    kind: SessionKind
    origin: Origin
    text: str
    created_at: datetime
    status: SessionStatus = SessionStatus.QUEUED
    asker_session_id: str | None = None  # a continuation: the session that asked the question it answers
    narrated_session_id: str | None = None  # a retry: the silent session it narrates
    question_id: str | None = None  # a continuation of a late answer (its asker had ended): the question answered
    lease: Lease = field(default_factory=Lease)
    limits: Limits = field(default_factory=Limits)
    closed_loop: bool | None = None
    updated_at: datetime | None = None
    # The session whose transcript this one continues (itself for a mention); steps live under it.
    transcript_id: str | None = None
    # On a transcript's first session only: the one session that may write its steps now. A continuation takes
    # it over when it is claimed, and only from an asker that has stopped.
    transcript_writer: str | None = None
    next_seq: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    # Notes queued while the session runs: answers to its non-blocking questions, messages in its thread.
    notes: list[Note] = field(default_factory=list)
    # A silent exit is followed up once: narrated by a retry, or escalated to the operators.
    followed_up: bool = False
    retry_reason: str | None = None
    trace_id: str | None = None  # one trace for a session and every session that continues it (Cloud Logging)
    # A late answer's continuation that found another session writing its transcript: its answer went there.
    handed_to: str | None = None
    # Delegation (flow 10). A child knows its parent, its depth, the call that started it and that call's siblings
    # (a parent waits on its children through its waiting record).
    tree: Tree = field(default_factory=Tree)
    result: str | None = None  # a child's final text (or why it failed)
    # A child's latest question to its parent, blocking or not, and its answer: the question itself (the sweep ages
    # it, the parent's answer is written on it); a blocking one's pause is an entry of the waiting record.
    parent_question: ParentQuestion | None = None
    # Every question of the child still open, and those of its latest asking turn (one per ask_parent call of a
    # turn, each with its own answer). A document written before the list kept only ``parent_question``.
    parent_questions: list[ParentQuestion] = field(default_factory=list)
    stop_requested: str | None = None  # who asked a running session to stop: it ends at its next step boundary
    late_note: Note | None = None  # a continuation that opens with news (a child's result after its parent ended)
    stream: Stream = field(default_factory=Stream)
    # The paused turn's waiting record (every pause, of one kind of thing or several): what each call without a
    # response waits on. Every wake-up consults it; the session resumes once when everything in it is resolved, and
    # the session that resumes the turn (a continuation, or a child itself) carries it.
    waiting: list[Waiting] = field(default_factory=list)

    # Each part's fields are stored flat, under these names: the document keeps one field per value.
    PARTS: ClassVar[dict[str, tuple[str, str]]] = {
        "channel": ("origin", "channel"),
        "thread_ts": ("origin", "thread_ts"),
        "trigger_ts": ("origin", "trigger_ts"),
        "trigger_user": ("origin", "trigger_user"),
        "event_id": ("origin", "event_id"),
        "requested_by": ("origin", "requested_by"),
        "request_ts": ("origin", "request_ts"),
        "worker": ("lease", "worker"),
        "lease_until": ("lease", "until"),
        "lease_task": ("lease", "task"),
        "lease_attempt": ("lease", "attempt"),
        "takeovers": ("lease", "takeovers"),
        "takeovers_without_progress": ("lease", "takeovers_without_progress"),
        "turns": ("limits", "turns"),
        "tool_calls": ("limits", "tool_calls"),
        "tokens": ("limits", "tokens"),
        "max_turns": ("limits", "max_turns"),
        "max_tool_calls": ("limits", "max_tool_calls"),
        "root_session_id": ("tree", "root_id"),
        "parent_session_id": ("tree", "parent_id"),
        "parent_transcript": ("tree", "parent_transcript"),
        "depth": ("tree", "depth"),
        "delegate_seq": ("tree", "delegate_seq"),
        "delegate_index": ("tree", "delegate_index"),
        "delegate_blocking": ("tree", "delegate_blocking"),
        "sibling_ids": ("tree", "sibling_ids"),
        "tree_reserved": ("tree", "reserved"),
        "tree_tokens": ("tree", "tokens"),
        "tree_status_ts": ("tree", "status_ts"),
        "stream_ts": ("stream", "ts"),
        "answer_ts": ("stream", "answer_ts"),
    }
    PART_NAMES: ClassVar[frozenset[str]] = frozenset(["lease", "limits", "origin", "stream", "tree"])
    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {"kind": SessionKind, "status": SessionStatus}
    NESTED: ClassVar[dict[str, type[Stored]]] = {
        "notes": Note,
        "parent_question": ParentQuestion,
        "parent_questions": ParentQuestion,
        "late_note": Note,
        "waiting": Waiting,
    }
    LISTS: ClassVar[frozenset[str]] = frozenset({"notes", "waiting", "parent_questions"})

    @classmethod
    def new(
        cls,
        *,
        session_id: str,
        kind: SessionKind,
        channel: str,
        thread_ts: str,
        trigger_ts: str,
        trigger_user: str,
        text: str,
        created_at: datetime,
        **fields: Unpack[SessionUpdate],
    ) -> Session:
        """A session from its stored (flat) field names, each typed: how the factories build one."""
        return cls._grouped(
            {
                "session_id": session_id,
                "kind": kind,
                "channel": channel,
                "thread_ts": thread_ts,
                "trigger_ts": trigger_ts,
                "trigger_user": trigger_user,
                "text": text,
                "created_at": created_at,
                **fields,
            }
        )

    @classmethod
    def _grouped(cls, values: Mapping[str, Any]) -> Session:
        parts: dict[str, dict[str, Any]] = {name: {} for name in ["lease", "limits", "origin", "stream", "tree"]}
        own: dict[str, Any] = {}
        for key, value in values.items():
            if key in cls.PARTS:
                part, name = cls.PARTS[key]
                parts[part][name] = value
            else:
                own[key] = value
        return cls(
            origin=Origin(**parts["origin"]),
            lease=Lease(**parts["lease"]),
            limits=Limits(**parts["limits"]),
            tree=Tree(**parts["tree"]),
            stream=Stream(**parts["stream"]),
            **own,
        )

    def flat(self) -> dict[str, Any]:
        """Every field under its stored name (the parts' fields too), as Python values."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in self.PART_NAMES}
        for key, (part, name) in self.PARTS.items():
            values[key] = getattr(getattr(self, part), name)
        return values

    def to_doc(self) -> dict[str, Any]:
        doc = {key: stored_value(value) for key, value in self.flat().items()}
        doc["updated_at"] = self.updated_at or self.created_at
        return doc

    @classmethod
    def _read(cls, key: str, value: Any) -> Any:
        """A stored value as the field's Python value (enums, notes, waiting entries...)."""
        if key in cls.ENUMS and value is not None:
            return cls.ENUMS[key](value)
        nested = cls.NESTED.get(key)
        if nested is None:
            return value
        if key in cls.LISTS:
            return [nested.from_doc(v) if isinstance(v, dict) else v for v in value or []]
        return nested.from_doc(value) if isinstance(value, dict) and value else value

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Session:
        doc = legacy_waits.upgraded(doc)  # a session stored paused under the old pause markers
        return cls._grouped({key: cls._read(key, value) for key, value in doc.items() if key in SESSION_FIELDS})

    def apply(self, updates: Mapping[str, Any]) -> None:
        """Bring this copy in line with what a commit wrote: every stored field, whatever its name.

        Firestore transforms (ArrayRemove, Increment) have no value of their own here and are skipped; the
        caller refreshes those fields from what its transaction read.
        """
        for key, value in updates.items():
            if key not in SESSION_FIELDS or type(value).__module__.startswith("google.cloud"):
                continue
            if key in self.PARTS:
                part, name = self.PARTS[key]
                setattr(getattr(self, part), name, self._read(key, value))
            else:
                setattr(self, key, self._read(key, value))

    def awaited(self, kind: WaitKind) -> list[str]:
        """The ids of what its waiting record waits on of ``kind`` (its approvals, its children...), in call order."""
        return [w.key for w in sorted(self.waiting, key=lambda w: w.index) if w.kind == kind and not w.released]

    @property
    def awaited_question(self) -> str | None:
        """The operator question (or MCP server's request for input) its waiting record waits on, if any."""
        asked = self.awaited(WaitKind.QUESTION) + self.awaited(WaitKind.MCP_INPUT)
        return asked[0] if asked else None

    @property
    def requester(self) -> str:
        """The person whose request this session works on (its tokens count against their daily budget)."""
        return self.origin.requested_by or self.origin.trigger_user

    @property
    def request_message(self) -> str | None:
        """The ts of the request this conversation started from, when the session knows it without a read."""
        return self.origin.request_ts or (self.origin.trigger_ts if self.kind == SessionKind.MENTION else None)

    @property
    def transcript(self) -> str:
        return self.transcript_id or self.session_id

    @property
    def tree_root(self) -> str:
        """The session whose document keeps this tree's budget and status message."""
        return self.tree.root_id or self.transcript

    @property
    def top_level(self) -> bool:
        """Talks to the thread itself (not a narration, not a delegated child)."""
        return self.kind in {SessionKind.MENTION, SessionKind.CONTINUATION}

    @property
    def reports_to_parent(self) -> bool:
        """A delegated child: its final text is its parent's result, never a post."""
        return self.kind == SessionKind.CHILD


# The stored (flat) field names of a session document.
SESSION_FIELDS = frozenset({f.name for f in fields(Session) if f.name not in Session.PART_NAMES} | Session.PARTS.keys())


def stored(update: SessionChanges) -> dict[str, Any]:
    """A typed session update as the flat map a Firestore write takes: enums as values, records as maps."""
    return {key: stored_value(value) for key, value in update.items()}

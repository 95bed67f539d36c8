"""The shapes of what is stored in Firestore, named once so every module spells them the same.

Every stored shape is a dataclass with ``to_doc`` / ``from_doc``; every closed set of values is an enum. Each
kind of session is built by its factory in ``shared.state.new_sessions``, never field by field elsewhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar, Self


class SessionKind(StrEnum):
    MENTION = "mention"
    CONTINUATION = "continuation"
    RETRY = "retry"
    CHILD = "child"  # delegated by another session: it reports to that parent, never to the thread


class QuestionStatus(StrEnum):
    OPEN = "open"
    ANSWERED = "answered"
    CANCELLED = "cancelled"
    ABANDONED = "abandoned"


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class SessionStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    RESUMED = "resumed"  # paused, then answered: its continuation carries on (or a late answer handed on)
    DONE = "done"
    FAILED = "failed"
    SILENT_EXIT = "silent_exit"
    ABANDONED = "abandoned"
    STOPPED = "stopped"  # a person stopped it (or the tree it belongs to)


class StepKind(StrEnum):
    """What a stored step records."""

    PROMPT = "prompt"  # the opening user turn (thread and request, or a narration's audit log)
    ANSWER = "answer"  # a continuation's opening: the operator's answer
    MODEL = "model"  # a model turn
    TOOL_RESULTS = "tool_results"  # the function responses of a turn's calls
    NOTES = "notes"  # notes folded in between turns
    MALFORMED = "malformed"  # a model reply that could not be read, and what the model was told
    WRAP_UP = "wrap_up"  # a budget ran out: the instruction to summarise
    TOO_LONG = "too_long"  # the context overflowed: the instruction to answer briefly
    END = "end"  # the session ended (its posts recorded)
    FAILED = "failed"  # the session failed (its failure post recorded)


class AuditType(StrEnum):
    APPROVAL = "approval"  # an operator's decision on a risky call: name, args (its digest), result, text (who)
    MODEL = "model"
    TOOL = "tool"
    POST = "post"
    NOTES = "notes"
    ANSWER = "answer"
    FAILURE = "failure"
    WRAP_UP = "wrap_up"
    TOO_LONG = "too_long"
    RESULT = "result"  # a child's final text, handed to its parent: text


def _doc(obj: Any) -> dict[str, Any]:
    """A dataclass as a Firestore map without empty optional fields (so equal records compare equal)."""
    return {key: value for key, value in asdict(obj).items() if value is not None}


def _known(cls: type, doc: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {key: value for key, value in doc.items() if key in names}


def stored_value(value: Any) -> Any:
    """A Python value as Firestore stores it: enums as their values, stored shapes as maps, in lists and maps too."""
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Stored):
        return value.to_doc()
    if isinstance(value, list):
        return [stored_value(v) for v in value]
    if isinstance(value, dict):
        return {k: stored_value(v) for k, v in value.items()}
    return value


class Stored:
    """A dataclass stored as a Firestore map: its enum fields as their values, unknown keys ignored on reading."""

    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {}
    DROP_EMPTY: ClassVar[bool] = False  # leave out None fields (so equal records compare equal)

    def to_doc(self) -> dict[str, Any]:
        doc = _doc(self) if self.DROP_EMPTY else asdict(self)  # type: ignore[call-overload]
        for name in self.ENUMS:
            if doc.get(name) is not None:
                doc[name] = doc[name].value
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Self:
        values = _known(cls, doc)
        for name, enum in cls.ENUMS.items():
            if values.get(name) is not None:
                values[name] = enum(values[name])
        return cls(**values)


@dataclass(frozen=True)
class Audit(Stored):
    """One audit record: what the silent-exit gate, narrations and the admin read as the ground truth."""

    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {"type": AuditType}
    DROP_EMPTY: ClassVar[bool] = True

    type: AuditType
    at: datetime
    text: str | None = None  # model: its text, shortened
    calls: list[str] | None = None  # model: the tools it called
    error: str | None = None  # model (malformed) or failure: what went wrong
    name: str | None = None  # tool: its name
    args: str | None = None  # tool: its arguments, shortened
    result: str | None = None  # tool: its response, shortened
    outward: bool | None = None  # tool: the requester expects a report after it
    posts: list[str] | None = None  # tool: the messages it posted
    ts: str | None = None  # post: the first message's ts
    parts: int | None = None  # post: how many messages
    count: int | None = None  # notes: how many were folded in
    tokens: dict[str, int] | None = None  # model: what the turn cost (prompt, cached, output, thinking)


class NoteKind(StrEnum):
    ANSWER = "answer"  # an operator's answer to a non-blocking question of a running session
    DECISION = "decision"  # an approval of the running session's turn was decided before it paused
    STEER = "steer"  # a message written in the thread while the session worked
    CHILD_RESULT = "child_result"  # what a child delegated without waiting ended with
    CHILD_QUESTION = "child_question"  # a child asks its parent (``ask_parent``): user is the child's id
    PARENT_ANSWER = "parent_answer"  # the parent's answer to the child's question (``answer_child``)


@dataclass(frozen=True)
class Note(Stored):
    """Something that reached a running session between its turns; it is read at the next turn."""

    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {"kind": NoteKind}
    DROP_EMPTY: ClassVar[bool] = True

    kind: NoteKind
    text: str
    user: str  # the Slack user id from the signed event: the real speaker
    ts: str
    question_id: str | None = None
    question: str | None = None
    matched_option: str | None = None
    starts_session: bool | None = None  # a mention or a DM: if its session ends unread, it starts one of its own


@dataclass(frozen=True)
class ParentQuestion(Stored):
    """A child's question to its parent (``ask_parent``): asked by the call at (seq, index) of the child's turn."""

    question_id: str
    text: str
    blocking: bool
    seq: int
    index: int
    answer: str | None = None
    released: bool = False  # not answered: the conversation it asked ended (``answer`` says so, as an error)
    asked_at: datetime | None = None  # the sweep bounds a blocking question's wait from here
    reminded_at: datetime | None = None  # the sweep delivered it to the parent again (once)
    answered_at: datetime | None = None  # the sweep ages the questions still open from the latest answer too
    answered_by: str | None = None  # the parent's answer_child call that answered it (its idempotency key)
    answered_as: str | None = None  # what that answer did (an AnswerOutcome): a re-run of that call says it again


class WaitKind(StrEnum):
    """What a call of a paused turn waits on (issue 23): one kind per way a session waits."""

    QUESTION = "question"  # an operator question (ask_operator)
    APPROVAL = "approval"  # an operator's decision on an approve-tier call
    CHILD = "child"  # a delegated child's end (a blocking delegate)
    PARENT_ANSWER = "parent_answer"  # a child's blocking question to its parent (ask_parent)
    MCP_INPUT = "mcp_input"  # an MCP server's request for the operator's input


@dataclass(frozen=True)
class Waiting(Stored):
    """One entry of a paused session's waiting record: the call at (seq, index) of its paused turn has no response
    yet and waits on ``kind`` ``key`` (the question, approval, child session or parent question id).
    ``released``: it no longer waits (a child of a waiting turn asked its parent): the call gets "still running"."""

    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {"kind": WaitKind}

    seq: int
    index: int
    kind: WaitKind
    key: str
    released: bool = False


@dataclass(frozen=True, order=True)
class CallRef(Stored):
    """A function call's identity: its position, (the model step's seq, the call's index in that turn). Fixed when
    the model turn is stored; never the model's optional ``id``, never the tool's name."""

    seq: int
    index: int


@dataclass
class Step:
    """One durable step of a transcript: ``sessions/{transcript}/steps/{seq}``.

    ``content`` is a google-genai ``Content`` as JSON (None for a step that only records something, like a
    failure); ``audit`` holds the records the silent-exit gate and narrations read. ``answers`` names, for each
    function response in ``content`` (in order), the call it answers (None on steps stored before calls had an
    identity: those are matched the old way, by id or name).
    """

    seq: int
    session_id: str
    kind: StepKind
    content: dict[str, Any] | None
    audit: list[Audit]
    at: datetime
    answers: list[CallRef] | None = None

    def to_doc(self) -> dict[str, Any]:
        doc = {
            "seq": self.seq,
            "session_id": self.session_id,
            "kind": self.kind.value,
            "content": self.content,
            "audit": [entry.to_doc() for entry in self.audit],
            "at": self.at,
        }
        if self.answers is not None:
            doc["answers"] = [ref.to_doc() for ref in self.answers]
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Step:
        answers = doc.get("answers")
        return cls(
            seq=doc["seq"],
            session_id=doc["session_id"],
            kind=StepKind(doc["kind"]),
            content=doc.get("content"),
            audit=[Audit.from_doc(entry) for entry in doc.get("audit") or []],
            at=doc["at"],
            answers=[CallRef.from_doc(ref) for ref in answers] if answers is not None else None,
        )


@dataclass
class Question(Stored):
    """A ``questions/{question_id}`` document: one question asked of the operator in a thread."""

    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {"status": QuestionStatus}

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
    answer_ts: str | None = None  # the Slack message (or button press) that answered
    answer_pressed: bool = False  # answered with a button (``answer`` is then the option's label)
    matched_option: str | None = None
    continuation_id: str | None = None
    # An MCP server's request for input that this question stands for: the answer resumes that call
    # (``shared.agent.tools.mcp.inputs.Pending``).
    mcp_input: dict[str, Any] | None = None
    # The call that asked: its model step and its index there (None on questions stored before calls had one).
    seq: int | None = None
    call_index: int | None = None
    request_ts: str | None = None  # the asking conversation's request message (its continuation marks it)
    post_channel: str | None = None  # the operator channel, when the question went there (its conversation is a DM)
    link: str | None = None  # a URL the question shows as a link button (an MCP server's URL-mode request)

    def post_place(self) -> tuple[str, str | None]:
        """Where the question's post is: the operator channel (top level), or the session's thread."""
        return (self.post_channel, None) if self.post_channel else (self.channel, self.thread_ts)


@dataclass
class Approval(Stored):
    """An ``approvals/{approval_id}`` document: one risky call waiting for an operator's decision.

    ``digest`` binds it to the exact call (tool name and canonical arguments): an approval can only ever run
    the call it was shown for.
    """

    ENUMS: ClassVar[dict[str, type[StrEnum]]] = {"status": ApprovalStatus}

    approval_id: str
    session_id: str  # the session whose model turn made the call
    transcript_id: str
    channel: str
    thread_ts: str
    seq: int  # the step of that model turn
    call_index: int
    call_id: str | None
    tool: str
    args: str  # canonical JSON: sorted keys
    digest: str
    turn_ids: list[str]  # every approval of that turn: the session resumes once all are decided
    asked_at: datetime
    requested_by: str | None = None
    request_ts: str | None = None  # the asking conversation's request message (the resumed session marks it)
    label: str | None = None  # what the card says about who asks (a child's task, later)
    card_ts: str | None = None
    status: ApprovalStatus = ApprovalStatus.PENDING
    reminded_at: datetime | None = None
    decided_by: str | None = None
    decided_at: datetime | None = None
    reason: str | None = None
    decision_ts: str | None = None  # the press or message that decided
    continuation_id: str | None = None
    summary: str | None = None  # the card's one sentence of what will happen (inert mrkdwn, from the tool)
    shown_order: list[str] = field(default_factory=list)  # the arguments in the order the card shows them
    expires_at: datetime | None = None  # when the sweep expires it (shown on the card)
    approvers: list[str] = field(default_factory=list)  # user and user-group ids who may decide; empty: operators
    approvals_needed: int = 1  # distinct approvers who must approve before it runs
    approved_by: list[str] = field(default_factory=list)  # who approved so far, in order
    schema: str | None = None  # the tool's arguments as JSON Schema (the Edit modal's fields); None: not editable
    rule_when: str | None = None  # its rule's ``when`` (JSON: argument to values): an edit may not cross it
    edited_args: str | None = None  # canonical JSON of the call an operator's edit made: it runs instead
    edited_digest: str | None = None  # its digest (tool name + edited canonical arguments)
    edited_by: str | None = None
    revision: int = 0  # how many edits changed the call: an Edit modal counts only for the revision it opened on
    card_channel: str | None = None  # the operator channel, when the card went there (its conversation is a DM)
    asked_in: str | None = None  # a mrkdwn link to that conversation, shown on the card

    def card_place(self) -> tuple[str, str | None]:
        """Where the card is: the operator channel (top level), or the session's thread."""
        return (self.card_channel, None) if self.card_channel else (self.channel, self.thread_ts)

    def reminder_place(self) -> tuple[str, str | None]:
        """Where its reminder goes: the card's thread (a routed card's is under the card, as a routed question's is
        under its post)."""
        return (self.card_channel, self.card_ts) if self.card_channel else (self.channel, self.thread_ts)

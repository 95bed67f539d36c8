"""What every kind of wait does in the agent (issue 23): what starts when a turn pauses on it (``pausing``), what
the record's waits of that kind came to on resume (``refs`` names the documents it is read from, ``found`` takes
them: the resumption reads every kind's documents in one batched read, ``shared.agent.waits.outcomes``), and the
outcome the call that waited gets (``outcome``: a response, or a new wait for an MCP server's input). One module
per kind implements it; ``shared.agent.waits.kinds`` holds them by ``WaitKind``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from google.cloud import firestore
from google.genai import types

from shared.agent.tools.base import Outcome
from shared.agent.tools.result import ToolResult
from shared.state.batched import Docs
from shared.state.models import Audit, Note, Waiting, WaitKind
from shared.state.session_model import Session

if TYPE_CHECKING:
    from shared.agent.calls import ToolCalls
    from shared.agent.tools.toolset import Toolset

Found = TypeVar("Found")


@dataclass(frozen=True)
class Resumed:
    """The resuming run, as a kind sees it: its session, its tools and the runner of single calls, the audit the
    resumption's step stores (a kind appends its records), and the display updates made once that step's commit
    is made (``after_step``: Slack only, beside what the run does next, a failure logged; an approved call's card
    showing its result)."""

    session: Session
    calls: ToolCalls
    tools: Toolset
    audit: list[Audit]
    after_step: list[tuple[str, Callable[[], object]]] = field(default_factory=list)


class ResumedWait(Protocol[Found]):
    """One kind of wait's agent side."""

    @property
    def kind(self) -> WaitKind: ...

    @property
    def shown_in_tree(self) -> bool:
        """Whether resolving it changes the thread's delegation tree message (refreshed after the resumption)."""
        ...

    def pausing(self, entries: list[Waiting]) -> None:
        """What starts once a turn pauses on ``entries`` of this kind (none: nothing), before its pause is stored."""
        ...

    def refs(self, session: Session, seq: int, entries: list[Waiting]) -> list[firestore.DocumentReference]:
        """The documents what the live ``entries`` of this kind (the turn at ``seq``) came to is read from (none:
        nothing to read), read with every other kind's in one batched read."""
        ...

    def found(self, session: Session, seq: int, entries: list[Waiting], docs: Docs) -> Found:
        """What the live ``entries`` came to, from ``docs`` (what ``refs`` named, by path; None: not stored)."""
        ...

    def outcome(self, resumed: Resumed, entry: Waiting, call: types.FunctionCall, found: Found) -> Outcome:
        """What the ``call`` that waited on ``entry`` gets (its audit appended to ``resumed.audit``)."""
        ...

    def news(self, entries: list[Waiting]) -> list[Note]:
        """What ``entries`` came to, as news: their turn's calls were answered long ago (a child that waited for its
        own children before reporting)."""
        ...


def cannot_wait(name: str) -> ToolResult:
    """A resumed call that tried to wait again where it cannot (an approved call, a call resumed with input)."""
    return ToolResult.fail(f"{name} cannot wait here")

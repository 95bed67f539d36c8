"""What a delegated child's end writes besides its session: its result (or its question record's end), and its
allotment given back and its tokens, with its line, in its tree's view; in its ending transaction, or, when its own
run ends it with nothing to read, as writes for one fenced commit (``step_fence``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.state import child_questions, results, tree_view
from shared.state.models import SessionStatus, Step
from shared.state.session_model import Session
from shared.state.updates import session_update


@dataclass(frozen=True)
class End:
    """A child's end. Its own run's end is written in one commit fenced on nothing having written its session (or
    its transcript's root) since its claim saw them settled and its own step commits since were made so
    (``step_fence``): it reads nothing then, since what its transaction would read is as the run knows it (no notes,
    no results or questions of its own children to collect, its turns, tool calls and tokens, whether it blocks its
    parent: a sibling's question that releases it writes its document). Otherwise ``children.finish``'s transaction
    reads them and writes ``updates`` with what it read."""

    child: Session
    status: SessionStatus
    result: str
    error: str | None
    when: datetime

    @property
    def blocking(self) -> bool:
        return self.child.tree.delegate_blocking

    def updates(self, step: Step | None) -> dict[str, Any]:
        """The session's fields its end writes."""
        ending: dict[str, Any] = session_update(
            status=self.status, result=self.result, error=self.error, lease_until=None, ended_at=self.when,
            updated_at=self.when, notes=[],
        )  # fmt: skip
        return ending | (session_update(next_seq=step.seq + 1) if step is not None else {})

    def apply(self, batch: Any) -> None:
        """Its end's other writes as the run knows them (its fenced commit)."""
        limits = self.child.limits
        self.write(batch, blocking=self.blocking, turns=limits.turns, tool_calls=limits.tool_calls,
                   tokens=limits.tokens)  # fmt: skip

    def write(self, writes: Any, *, blocking: bool, turns: int, tool_calls: int, tokens: dict[str, int]) -> None:
        """Among ``writes`` (its ending transaction, with what it read, or the batch of its fenced end): its result
        record (or, ``blocking``, its question record's end), and its line in its tree's view with what it gives back
        to its tree and the tokens it used (one write that reads nothing; the root is not written)."""
        child = self.child
        if not blocking:  # its result record: its parent's transcript reads it, its parent's document is untouched
            results.record(writes, child, results.result_note(child, result=self.result, status=self.status),
                           self.when)  # fmt: skip
        else:  # it will not ask again: its parent's transcript stops reading its question record
            child_questions.ended(writes, child)
        returned = {}
        if child.limits.max_turns is not None:
            returned = {"turns": max(0, child.limits.max_turns - turns),
                        "tool_calls": max(0, (child.limits.max_tool_calls or 0) - tool_calls)}  # fmt: skip
        tree_view.ended(writes, child, status=self.status, error=self.error, returned=returned, tokens=tokens)

"""What a delegated child's end writes besides its session: its allotment given back and its tokens, with its line,
in its tree's view; and, when its own run ends it with nothing to read, the whole end as writes for one fenced
commit (``step_fence``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.state import child_questions, results, tree_view
from shared.state.models import SessionStatus, Step
from shared.state.session_model import Session
from shared.state.updates import session_update


def settle_allotment(writes: Any, child: Session, *, status: SessionStatus, error: str | None, turns: int,
                     tool_calls: int, tokens: dict[str, int]) -> None:  # fmt: skip
    """An ended child gives its tree back what it did not use and adds the tokens it used to the tree's, in its
    tree's view with its line as it ends (one write that reads nothing; the root is not written), among ``writes``
    (its ending transaction, or the batch of its fenced end)."""
    returned = {}
    if child.limits.max_turns is not None:
        returned = {"turns": max(0, child.limits.max_turns - turns),
                    "tool_calls": max(0, (child.limits.max_tool_calls or 0) - tool_calls)}  # fmt: skip
    tree_view.ended(writes, child, status=status, error=error, returned=returned, tokens=tokens)


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
        """Its result record (or, blocking, its question record's end) and its line and returns in the tree's view."""
        child, limits = self.child, self.child.limits
        if not self.blocking:
            results.record(batch, child, results.result_note(child, result=self.result, status=self.status), self.when)
        else:
            child_questions.ended(batch, child)
        settle_allotment(batch, child, status=self.status, error=self.error, turns=limits.turns,
                         tool_calls=limits.tool_calls, tokens=limits.tokens)  # fmt: skip

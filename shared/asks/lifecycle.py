"""One lifecycle for everything the operators are asked (issue 23): an operator question and an approval are both
an *ask* — a post with buttons that a paused turn waits on — and age and end the same way.

- **ask**: recorded, then posted (``shared.asks.questions.ask``, ``shared.asks.approvals.request``);
- **remind**: once, QUESTION_REMIND_HOURS after it was asked, where it was asked;
- **expire**: QUESTION_ABANDON_HOURS later the sweep stops waiting for it: a question is abandoned (its paused
  session closed, everything else its turn waited on ended with it), an approval expires (the call never runs; its
  turn resumes with the call told so once nothing else is waited on);
- **cancel**: its session stopped, or ended while paused: a question is cancelled and an approval denied or expired
  (never run), its post saying why.

The sweep ages every ask through ``age``; a stop and a paused session's end cancel through
``shared.asks.cancelling`` (below the question module, which ends a turn's other asks when it abandons one). Each
step is guarded by its own transaction on the ask's current state, so doing it twice changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from typing import Any

from shared.asks import approvals, questions
from shared.state.models import Approval, Question
from shared.state.stale import stale_approvals, stale_questions


@dataclass(frozen=True)
class _Steps:
    """One kind of ask's steps, and what the sweep counts for each (the names its summary has always had)."""

    kind: str
    reminded: str
    expired: str
    remind: Callable[[Any, datetime], bool]
    expire: Callable[[Any, datetime], bool]


_STEPS: dict[type, _Steps] = {
    Question: _Steps("questions", "reminded", "abandoned", questions.remind, questions.abandon),
    Approval: _Steps("approvals", "approvals_reminded", "approvals_expired", approvals.remind, approvals.expire),
}


@dataclass(frozen=True)
class Ask:
    """One thing asked of the operators, as the lifecycle sees it: a question or an approval."""

    item: Question | Approval

    @property
    def _steps(self) -> _Steps:
        return _STEPS[type(self.item)]

    @property
    def kind(self) -> str:
        return self._steps.kind

    @property
    def asked_at(self) -> datetime:
        return self.item.asked_at

    @property
    def reminded_at(self) -> datetime | None:
        return self.item.reminded_at

    @property
    def session_id(self) -> str:
        return self.item.session_id

    @property
    def reminded(self) -> str:
        return self._steps.reminded

    @property
    def expired(self) -> str:
        return self._steps.expired

    def remind(self, at: datetime) -> bool:
        return self._steps.remind(self.item, at)

    def expire(self, at: datetime) -> bool:
        return self._steps.expire(self.item, at)


def stale(cutoff: datetime, *, page_size: int) -> Iterator[Ask]:
    """Every open question and pending approval asked at or before ``cutoff`` (indexed queries, read by pages)."""
    found: Iterator[Question | Approval] = chain(stale_questions(cutoff, page_size=page_size),
                                                 stale_approvals(cutoff, page_size=page_size))  # fmt: skip
    return (Ask(item) for item in found)


def age(ask: Ask, at: datetime, expire_after: timedelta) -> str:
    """The one aging rule: past ``expire_after`` it expires; otherwise it is reminded once. Returns what it did (the
    sweep's count name, or ``unchanged``)."""
    if ask.asked_at <= at - expire_after:
        return ask.expired if ask.expire(at) else "unchanged"
    if ask.reminded_at is None:
        return ask.reminded if ask.remind(at) else "unchanged"
    return "unchanged"

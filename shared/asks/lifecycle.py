"""One lifecycle for everything the operators are asked (issue 23): an operator question and an approval are both
an *ask* — a post with buttons that a paused turn waits on — and age and end the same way.

- **ask**: recorded, then posted (``shared.asks.questions.ask``, ``shared.asks.approvals.request``);
- **remind**: once, QUESTION_REMIND_HOURS after it was asked, where it was asked;
- **expire**: QUESTION_ABANDON_HOURS later the sweep stops waiting for it: a question is abandoned (its paused
  session closed, everything else its turn waited on ended with it), an approval expires (the call never runs; its
  turn resumes with the call told so once nothing else is waited on);
- **cancel**: its session stopped, or ended while paused: a question is cancelled and an approval denied or expired
  (never run), its post saying why.

Each kind of ask is one entry of one table of these steps. The sweep ages every ask through ``age``; a stop
(``shared.asks.stopping.close_waits``) and a paused session's end (``shared.asks.waits``: its record's questions and
approvals) cancel through ``cancel``. Each step is guarded by its own transaction on the ask's current state, so
doing it twice changes nothing.

*Asking* is the one step the two kinds do not share an entry point for: a question is asked by its call while the
turn runs (``questions.ask``: the ``ask_operator`` tool, or an MCP server's request for input, posts it before the
turn's later calls run), while a turn's approvals are asked together once every call of the turn has run
(``approvals.request``: one atomic create of the whole turn's records, then one card each), so that a decision can
only arrive for a complete turn. Both record first, then post, then note the post on the record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from typing import Any, Protocol

from shared.asks import approvals, cancelling, notices, questions
from shared.state import approvals as stored_approvals
from shared.state import questions as stored_questions
from shared.state.models import Approval, Question
from shared.state.notices import Notice
from shared.state.stale import stale_approvals, stale_questions

# How long a reminder's claim holds off a sweep running beside the one posting it (longer than its post takes).
REMIND_HOLD = notices.HOLD


class _Cancel(Protocol):
    def __call__(self, item: Any, /, *, why: str, by: str, expired: bool) -> bool: ...


@dataclass(frozen=True)
class _Steps:
    """One kind of ask's steps, and what the sweep counts for each (the names its summary has always had)."""

    kind: str
    reminded: str
    expired: str
    reminder: Callable[[Any, datetime], Notice | None]  # its one reminder (None: reminded, or closed)
    mark_reminded: Callable[[str, datetime], bool]  # by its id
    expire: Callable[[Any, datetime], bool]
    cancel: _Cancel
    current: Callable[[str], Any]


_STEPS: dict[type, _Steps] = {
    Question: _Steps(
        "questions",
        "reminded",
        "abandoned",
        questions.reminder,
        stored_questions.mark_reminded,
        questions.abandon,
        cancelling.cancel_question,
        stored_questions.get_question,
    ),
    Approval: _Steps(
        "approvals",
        "approvals_reminded",
        "approvals_expired",
        approvals.reminder,
        stored_approvals.mark_reminded,
        approvals.expire,
        cancelling.cancel_approval,
        stored_approvals.get_approval,
    ),
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
        """Its one reminder, posted once (``shared.asks.notices``): two sweeps at once (Cloud Scheduler may run it
        twice) both read it not reminded, and each posted it; a sweep killed after posting it, or answered by an
        error after Slack took it, left it to be posted again. A post Slack refused is tried again by the next sweep
        (its ask still open and not reminded); a posted one is never posted again, even if marking it failed. Never
        in a stopped thread: a session a killed Stop left stopped has it closed now, as that Stop would have (a
        question cancelled, a call denied: ``stopping.close_stopped``). Read again once claimed: one answered,
        decided or closed since the sweep's page read it is not reminded (the thread would be told it still
        waits)."""
        from shared.asks import stopping  # (stopping closes asks through this module)

        if stopping.close_stopped(self.session_id) is not None:
            return False
        notice = self._steps.reminder(self.item, at)
        if notice is None or notices.post(notice, still_wanted=lambda: _owed_ask(notice, at) is not None) is None:
            return False
        # Posted: never again, though its mark below fail (a sweep re-run after it, or whose page was read before
        # this reminder, would post it a second time).
        return self._steps.mark_reminded(self.item_id, at)

    @property
    def item_id(self) -> str:
        return self.item.question_id if isinstance(self.item, Question) else self.item.approval_id

    def expire(self, at: datetime) -> bool:
        return self._steps.expire(self.item, at)

    def cancel(self, *, why: str, by: str, expired: bool = False) -> bool:
        return self._steps.cancel(self.item, why=why, by=by, expired=expired)


def cancel(item: Question | Approval, *, why: str, by: str, expired: bool = False) -> bool:
    """Cancel an ask its session no longer waits on (it stopped, or ended while paused): never answered or run, its
    post saying why (``expired``: an approval expires instead of being denied). False if it had ended already."""
    return Ask(item).cancel(why=why, by=by, expired=expired)


def _owed_ask(notice: Notice, at: datetime) -> Ask | None:
    """The ask a reminder (``notice.about``) is about, as it is now, if it is still open and not reminded."""
    kind, _, item_id = (notice.about or "").partition("/")
    steps = next((steps for steps in _STEPS.values() if steps.kind == kind), None)
    current = steps.current(item_id) if steps is not None else None
    return Ask(current) if steps is not None and current is not None and steps.reminder(current, at) else None


def remind_owed(notice: Notice, at: datetime) -> str:
    """A reminder still owed (Slack refused it, or its poster died) posted through its ask's ``remind`` while the ask
    is open and not reminded, so it waits for no daily sweep; given up once it is not (answered, decided or ended
    meanwhile: never posted). Returns the sweep's count name."""
    ask = _owed_ask(notice, at)
    if ask is None:
        notices.give_up(notice, "no longer wanted")
        return "unchanged"
    return ask.reminded if ask.remind(at) else "unchanged"


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

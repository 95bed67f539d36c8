"""Questions and approvals age and end through one lifecycle (issue 23): each kind of ask is one entry of its table,
with the step functions it always had (remind, expire, cancel) and the names the sweep's summary has always counted;
the sweep ages and a stop cancels both kinds through it (pure: no stack)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from shared.asks import approvals, cancelling, lifecycle, questions, stopping
from shared.state.models import Approval, Question, SessionKind, SessionStatus
from shared.state.questions import ThreadQuestions
from shared.state.session_model import Session

AT = datetime(2030, 1, 1, tzinfo=UTC)


def question(asked_at: datetime, reminded_at: datetime | None = None) -> Question:
    return Question(question_id="q-1", session_id="s1", transcript_id="s1", channel="C1", thread_ts="1.0",
                    text="which?", options=[], blocking=True, call_id=None, asked_at=asked_at,
                    reminded_at=reminded_at)  # fmt: skip


def approval(asked_at: datetime) -> Approval:
    return Approval(approval_id="a-1", session_id="s2", transcript_id="s2", channel="C1", thread_ts="1.0", seq=3,
                    call_index=0, call_id=None, tool="deploy", args="{}", digest="d", turn_ids=["a-1"],
                    asked_at=asked_at)  # fmt: skip


def test_each_kind_of_ask_is_one_entry_with_its_steps_and_counts() -> None:
    asked = lifecycle.Ask(question(AT))
    assert (asked.kind, asked.reminded, asked.expired, asked.session_id) == ("questions", "reminded", "abandoned", "s1")
    decided = lifecycle.Ask(approval(AT))
    assert (decided.kind, decided.reminded, decided.expired, decided.session_id) == (
        "approvals", "approvals_reminded", "approvals_expired", "s2")  # fmt: skip
    steps = {kind: (s.reminder, s.expire) for kind, s in lifecycle._STEPS.items()}
    assert steps == {Question: (questions.reminder, questions.abandon),
                     Approval: (approvals.reminder, approvals.expire)}  # fmt: skip


def test_one_aging_rule_reminds_once_then_expires() -> None:
    done: list[str] = []

    class Fake(lifecycle.Ask):
        def remind(self, at: datetime) -> bool:
            done.append("remind")
            return True

        def expire(self, at: datetime) -> bool:
            done.append("expire")
            return False  # already ended by someone else

    after = timedelta(hours=24)
    assert lifecycle.age(Fake(question(AT)), AT + timedelta(hours=1), after) == "reminded"
    assert lifecycle.age(Fake(question(AT, reminded_at=AT)), AT + timedelta(hours=2), after) == "unchanged"
    assert lifecycle.age(Fake(approval(AT)), AT + after, after) == "unchanged"
    assert done == ["remind", "expire"]


def test_each_kind_of_ask_cancels_through_its_entry() -> None:
    """Cancel is a step of the one table too: a question is cancelled, an approval denied (or expired)."""
    steps: dict[type, object] = {kind: s.cancel for kind, s in lifecycle._STEPS.items()}
    assert steps == {Question: cancelling.cancel_question, Approval: cancelling.cancel_approval}


def test_a_stop_cancels_the_sessions_questions_and_approvals_through_the_one_lifecycle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stop's cancel (``stopping.close_waits``) is the lifecycle's cancel step for both kinds of ask: the thread's
    open questions and pending approvals of the stopped session's conversation (asked by it, or by an earlier session
    of its transcript), not another conversation's; then its record's waits."""
    other = replace(question(AT), question_id="q-2", session_id="s9", transcript_id="s9")
    mine = replace(question(AT), question_id="q-1", session_id="s2", transcript_id="s2")
    earlier = replace(question(AT), question_id="q-0", session_id="s0", transcript_id="s2")
    theirs = replace(approval(AT), approval_id="a-9", session_id="s9", transcript_id="s9")
    monkeypatch.setattr("shared.asks.stopping.stored_questions.thread_questions",
                        lambda channel, ts: ThreadQuestions([mine, other, earlier], None, ["a-1", "a-9"]))  # fmt: skip
    monkeypatch.setattr("shared.asks.stopping.stored_approvals.pending", lambda ids: [approval(AT), theirs])
    cancelled: list[tuple[str, str, str, bool]] = []

    def cancel(item: Question | Approval, *, why: str, by: str, expired: bool) -> bool:
        key = item.question_id if isinstance(item, Question) else item.approval_id
        cancelled.append((key, why, by, expired))
        return True

    for kind in (Question, Approval):
        monkeypatch.setitem(lifecycle._STEPS, kind, replace(lifecycle._STEPS[kind], cancel=cancel))
    ended: list[tuple[str, str, bool]] = []

    def end_waits(session: Session, *, why: str, by: str, expired: bool) -> list[str]:
        ended.append((session.session_id, by, expired))
        return []

    monkeypatch.setattr(stopping, "end_waits", end_waits)
    session = Session.new(session_id="s2", kind=SessionKind.MENTION, channel="C1", thread_ts="1.0", trigger_ts="1.0",
                          trigger_user="U1", text="go", created_at=AT, status=SessionStatus.PAUSED)  # fmt: skip
    stopping.close_waits(session, by="U7")
    why = "the session was stopped by U7"
    assert cancelled == [("q-1", why, "U7", False), ("q-0", why, "U7", False), ("a-1", why, "U7", False)]
    assert ended == [("s2", "U7", False)]

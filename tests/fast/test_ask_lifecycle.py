"""Questions and approvals age through one lifecycle (issue 23): each kind of ask is one entry of its table, with
the step functions it always had and the names the sweep's summary has always counted (pure: no stack)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.asks import approvals, lifecycle, questions
from shared.state.models import Approval, Question

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
    steps = {kind: (s.remind, s.expire) for kind, s in lifecycle._STEPS.items()}
    assert steps == {Question: (questions.remind, questions.abandon), Approval: (approvals.remind, approvals.expire)}


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

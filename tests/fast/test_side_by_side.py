"""Independent work made at the same time: ``batched.together``, and the answered question's Slack acknowledgements,
which the click's handler makes before it answers Slack (issue 28.1: the handler's time)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from shared.asks import answers
from shared.slack import client as slack
from shared.state import batched
from shared.state.models import Question, QuestionStatus

WAIT = 30.0  # a barrier no sequential run can pass; generous for a busy machine


def meeting(parties: int) -> tuple[threading.Barrier, list[str]]:
    return threading.Barrier(parties, timeout=WAIT), []


def test_together_runs_every_work_at_once() -> None:
    barrier, seen = meeting(3)

    def work(name: str) -> None:
        barrier.wait()  # only passes once all three are running at the same time
        seen.append(name)

    batched.together(lambda: work("a"), lambda: work("b"), lambda: work("c"))
    assert sorted(seen) == ["a", "b", "c"]


def test_together_runs_every_work_to_its_end_then_raises_the_first_error() -> None:
    ended: list[str] = []

    def fails() -> None:
        raise ValueError("first")

    def slow() -> None:
        ended.append("slow")

    with pytest.raises(ValueError, match="first"):
        batched.together(fails, slow, lambda: ended.append("last"))
    assert sorted(ended) == ["last", "slow"]
    batched.together()  # nothing to do


def test_an_answered_questions_acknowledgements_are_made_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    barrier, calls = meeting(3)

    def slack_call(name: str) -> object:
        def call(*args: object, **kwargs: object) -> bool:
            barrier.wait()  # the three Slack calls must be in flight together
            calls.append(name)
            return True

        return call

    for name in ("unreact", "update", "react"):
        monkeypatch.setattr(slack, name, slack_call(name))
    question = Question(question_id="q1", session_id="s1", transcript_id="s1", channel="C1", thread_ts="1.0",
                        text="sqlite or postgres?", options=["sqlite", "postgres"], blocking=True, call_id=None,
                        asked_at=datetime.now(UTC), post_ts="2.0", status=QuestionStatus.ANSWERED,
                        answer="postgres", answered_by="U1")  # fmt: skip
    answers._acknowledge(question, "3.0", pressed=False, channel="C1")
    assert sorted(calls) == ["react", "unreact", "update"]

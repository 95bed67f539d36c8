"""An answer (or a decision) whose transaction the client gives up on for contention (the emulator's lock timeouts
with three answers racing at once; Firestore's aborts under load), after its fenced commit failed: when a racing
answer closed the question (or a racing decision settled the approval) meanwhile, the loser is told so, as if its
transaction had read it, instead of an error (a button press answered with a 500 shows the operator a failure);
while it is still open the error stands, for the sender's retry. Pure: the transaction and the read are stand-ins."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from shared.errors import Contended
from shared.state import approvals, fenced, questions
from shared.state.models import Approval, ApprovalStatus, Question, QuestionStatus
from shared.state.questions import AnswerRecord, Resolution

OPEN = Question(question_id="q-ev-1-1-0", session_id="ev-1", transcript_id="ev-1", channel="C1", thread_ts="1.0",
                text="which?", options=["a", "b"], blocking=True, call_id=None,
                asked_at=datetime(2030, 1, 1, tzinfo=UTC))  # fmt: skip
ANSWERED = replace(OPEN, status=QuestionStatus.ANSWERED, answer="a", answered_by="U1")
RECORD = AnswerRecord(answer="b", answered_by="U2", matched_option="b", answer_ts="2.0", text="b")


def _gives_up(*_: object, **__: object) -> object:
    """The fenced commit failed its precondition, then the transaction's client gave up on its commit (what
    ``contended`` raises for the client's ``ValueError``)."""
    raise Contended("a Firestore transaction gave up for contention: Failed to commit transaction in 8 attempts.")


Record = AnswerRecord | Callable[[Question], AnswerRecord | None]


def _answer(
    monkeypatch: pytest.MonkeyPatch, now_stored: Question | None, record: Record = RECORD
) -> questions.Answered:
    monkeypatch.setattr(questions, "question_ref", lambda question_id: None)  # no client: nothing is read here
    monkeypatch.setattr(questions, "session_ref", lambda session_id: None)
    monkeypatch.setattr(fenced, "resolve", _gives_up)
    monkeypatch.setattr(questions, "get_question", lambda question_id: now_stored)
    return questions.answer_question(OPEN.question_id, record, lambda q, a: Resolution())


def test_a_loser_of_a_contended_race_finds_the_question_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    lost = _answer(monkeypatch, ANSWERED)
    assert lost.question == ANSWERED
    assert lost.continuation is None
    assert (lost.noted, lost.repeated, lost.refused) == (False, False, False)


def test_a_press_refused_by_its_check_stays_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _answer(monkeypatch, ANSWERED, lambda q: None).refused


@pytest.mark.parametrize("still", [OPEN, None], ids=["still_open", "gone"])
def test_a_question_still_open_keeps_the_error_for_the_senders_retry(
    monkeypatch: pytest.MonkeyPatch, still: Question | None
) -> None:
    with pytest.raises(Contended, match="Failed to commit"):
        _answer(monkeypatch, still)


PENDING = Approval(approval_id="a-ev-1-2-0", session_id="ev-1", transcript_id="ev-1", channel="C1", thread_ts="1.0",
                   seq=2, call_index=0, call_id=None, tool="deploy", args="{}", digest="d", turn_ids=["a-ev-1-2-0"],
                   asked_at=datetime(2030, 1, 1, tzinfo=UTC))  # fmt: skip
DENIED = replace(PENDING, status=ApprovalStatus.DENIED, decided_by="U1")
DECISION = approvals.Decision(ApprovalStatus.APPROVED, "U2", None, "2.0")


def _decide(monkeypatch: pytest.MonkeyPatch, now_stored: Approval | None,
            admit: Callable[[Approval], bool] | None = None) -> approvals.Decided:  # fmt: skip
    monkeypatch.setattr(approvals, "_ref", lambda approval_id: None)  # no client: nothing is read here
    monkeypatch.setattr(approvals, "session_ref", lambda session_id: None)
    monkeypatch.setattr(fenced, "resolve", _gives_up)
    monkeypatch.setattr(approvals, "get_approval", lambda approval_id: now_stored)
    return approvals.decide(PENDING.approval_id, DECISION, lambda a, s, t: None, admit)


def test_a_decision_that_loses_a_contended_race_finds_the_approval_decided(monkeypatch: pytest.MonkeyPatch) -> None:
    lost = _decide(monkeypatch, DENIED)
    assert lost.approval == DENIED
    assert (lost.won, lost.continuation, lost.repeated, lost.refused) == (False, None, False, False)
    assert _decide(monkeypatch, DENIED, admit=lambda a: False).refused


@pytest.mark.parametrize("still", [PENDING, None], ids=["still_pending", "gone"])
def test_an_approval_still_pending_keeps_the_error_for_the_senders_retry(
    monkeypatch: pytest.MonkeyPatch, still: Approval | None
) -> None:
    with pytest.raises(Contended, match="Failed to commit"):
        _decide(monkeypatch, still)


def test_only_a_transaction_that_gave_up_for_contention_is_contended() -> None:
    """The client's ``ValueError`` from an aborted last commit, or an ``Aborted``, is ``Contended``; any other error
    (a bug's ``ValueError``) stays itself, for the caller to raise."""
    from google.api_core import exceptions as gexc

    from shared.state.firestore import gave_up

    aborted = gexc.Aborted("lock timeout")  # type: ignore[no-untyped-call]
    exhausted = ValueError("Failed to commit transaction in 8 attempts.")
    exhausted.__cause__ = aborted
    for exc in (aborted, exhausted):
        with pytest.raises(Contended) as raised:
            gave_up(exc)
        assert raised.value.__cause__ is exc
    gave_up(ValueError("a bug"))  # not contention: nothing raised here
    gave_up(gexc.InvalidArgument("bad field"))  # type: ignore[no-untyped-call]


def test_a_sweep_item_that_gave_up_for_contention_is_a_warning_counted_as_contended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Left to the next sweep: one WARNING line, no traceback, and the sweep goes on."""
    import logging

    from shared.usecases import sweep

    def action(item: object) -> str:
        raise Contended("a Firestore transaction gave up for contention")

    with caplog.at_level(logging.WARNING, logger="shared.usecases.sweep"):
        assert sweep._guarded(action, object()) == "contended"
    assert [(r.levelname, r.exc_info) for r in caplog.records] == [("WARNING", None)]

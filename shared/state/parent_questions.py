"""A child's questions to its parent (flow 10, flow 14): each ``ask_parent`` call of a turn is its own question, with
its own answer. Pure functions over the stored questions (``parent_questions``; a document written before that list
kept one question, ``parent_question``, read as a list of one)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.state.models import ParentQuestion
from shared.state.session_model import Session


def of_doc(doc: dict[str, Any]) -> list[ParentQuestion]:
    """The questions a stored child document holds, in call order."""
    stored = doc.get("parent_questions")
    if stored:
        return [ParentQuestion.from_doc(q) for q in stored if isinstance(q, dict)]
    legacy = doc.get("parent_question")
    return [ParentQuestion.from_doc(legacy)] if isinstance(legacy, dict) and legacy else []


def of(session: Session) -> list[ParentQuestion]:
    """The questions a child holds, in call order."""
    if session.parent_questions:
        return list(session.parent_questions)
    return [session.parent_question] if session.parent_question is not None else []


def still_open(questions: list[ParentQuestion]) -> list[ParentQuestion]:
    """The questions not answered (nor released), oldest first."""
    return sorted((q for q in questions if q.answer is None), key=lambda q: (q.seq, q.index))


def pick(
    questions: list[ParentQuestion], question_id: str | None, waited: list[str] | None = None
) -> ParentQuestion | None:
    """The open question an answer is for: the one named, or else the first the child's paused turn waits on
    (``waited``: its record's keys, in call order), or else the oldest open one (None: no such open question)."""
    waiting = still_open(questions)
    if question_id is None:
        first = [q for q in waiting if q.question_id in (waited or [])]
        return next(iter(first or waiting), None)
    return next((q for q in waiting if q.question_id == question_id), None)


def answered_by(questions: list[ParentQuestion], call: str | None) -> ParentQuestion | None:
    """The question the parent's call ``call`` answered already (a re-run of that call after a crash), if any."""
    return next((q for q in questions if call and q.answered_by == call), None)


def last_answered(questions: list[ParentQuestion]) -> datetime | None:
    """When the latest of these questions was answered (None: none was, or before answers were timed)."""
    return max((q.answered_at for q in questions if q.answered_at is not None), default=None)


def added(questions: list[ParentQuestion], question: ParentQuestion) -> list[ParentQuestion]:
    """The questions once ``question`` is asked: the open ones, those of its turn and those a parent's call answered
    are kept (a re-run of that call after a crash finds its answer there; a child's tool calls bound them); other
    answered questions of earlier turns are dropped: no call waits on them any more."""
    kept = [q for q in questions if q.question_id != question.question_id
            and (q.answer is None or q.seq == question.seq or q.answered_by is not None)]  # fmt: skip
    return sorted([*kept, question], key=lambda q: (q.seq, q.index))


def answered(questions: list[ParentQuestion], question_id: str, answer: str, *, released: bool = False,
             at: datetime | None = None, by: str | None = None,
             outcome: str | None = None) -> list[ParentQuestion]:  # fmt: skip
    """The questions with this one answered (``released``: the answer is an error, nobody answered), ``at`` that
    time, by the parent's call ``by`` (its idempotency key), with ``outcome``."""
    done = {"answer": answer, "released": released, "answered_at": at, "answered_by": by, "answered_as": outcome}
    return [ParentQuestion(**{**q.to_doc(), **done}) if q.question_id == question_id else q for q in questions]


def for_call(questions: list[ParentQuestion], key: str, seq: int) -> ParentQuestion | None:
    """The question a blocking ``ask_parent`` call (waiting on ``key``, in turn ``seq``) asked. A document from before
    the list holds only its turn's latest question, which then answers each call of that turn (as it did); None:
    nothing of that turn is held any more."""
    found = next((q for q in questions if q.question_id == key), None)
    if found is not None:
        return found
    if len(questions) == 1 and questions[0].seq == seq:
        return questions[0]  # read-compat: one question kept for the whole turn
    return None


def to_docs(questions: list[ParentQuestion]) -> list[dict[str, Any]]:
    return [q.to_doc() for q in questions]

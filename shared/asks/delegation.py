"""Delegation (flow 10): a session hands a task to a child session, which reports back to it, never to the thread.

A blocking child is created while its parent's turn runs and started only once the turn knows all its blocking
children (``launch``), so no child can end before its siblings are recorded. A non-blocking child starts at once.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from shared import config
from shared.asks import tree_status
from shared.errors import Refused
from shared.queue import tasks
from shared.state import children, parent_asks, parent_questions, sessions
from shared.state.children import AnswerOutcome, Finished
from shared.state.firestore import now
from shared.state.models import AuditType, Note, NoteKind, ParentQuestion, SessionStatus, Step
from shared.state.parent_asks import AskOutcome
from shared.state.session_model import Session
from shared.state.steps import LeaseLost

log = logging.getLogger(__name__)


class DelegationRefused(Refused):
    """A delegation the product will not start: the model hears why."""


def start(parent: Session, *, seq: int, index: int, task: str, blocking: bool) -> Session:
    """Create the child of this call once (its id comes from the call); a non-blocking one is queued at once."""
    max_depth = config.settings().delegate_max_depth
    if parent.tree.depth >= max_depth:
        raise DelegationRefused(f"delegation is limited to {max_depth} level(s); do this task yourself")
    if not task.strip():
        raise DelegationRefused("the task is empty")
    settings = config.settings()
    budget = children.TreeBudget(
        turns=settings.tree_max_turns, tool_calls=settings.tree_max_tool_calls,
        root_turns=settings.session_max_turns, root_tool_calls=settings.session_max_tool_calls,
        child_turns=settings.child_max_turns, child_tool_calls=settings.child_max_tool_calls,
    )  # fmt: skip
    task = task.strip()
    new = children.child_session(parent, seq=seq, index=index, task=task, blocking=blocking, siblings=[], at=now())
    try:
        child = children.create_child(new, budget)
    except children.TreeBudgetSpent as exc:
        raise DelegationRefused(f"{exc}; do this task yourself or wrap up") from exc
    if not blocking:
        tasks.enqueue_session(child.session_id)
    log.info("child session created", extra={"child": child.session_id, "blocking": blocking})
    return child


def resume_parent(child: Session, finished: Finished) -> None:
    """Queue what a child's end started: a continuation of its parent's transcript (a late result), or the parent
    itself once every child of its turn has ended."""
    if finished.started is not None:
        tasks.enqueue_session(finished.started.session_id, attempt=f"after-{finished.started.next_seq}")
        log.info("child's result resumes its parent's transcript", extra={"resumed": finished.started.session_id})
    if finished.blocking:
        wake_parent(child)


def wake_parent(child: Session) -> None:
    """Queue the parent of this ended blocking child if its turn's children have all ended. The task name carries
    the parent's step count: endings that find the turn done at once queue one task, and each turn its own. The
    task names the record it resumes (and the transcript's first free step id), as every continuation's does."""
    parent = children.parent_to_wake(child)
    if parent is not None:
        tasks.enqueue_continuation(parent, attempt=f"after-{parent.next_seq}")
        log.info("the children's ends resume their parent", extra={"resumed": parent.session_id})


def launch(child_ids: list[str]) -> None:
    """Start the blocking children of one turn, each knowing the others (a re-run turn starts them again: their
    task names are fixed, so nothing runs twice)."""
    children.set_siblings(child_ids)
    for child_id in child_ids:
        tasks.enqueue_session(child_id)


def ask_parent(child: Session, *, seq: int, index: int, question: str, blocking: bool) -> str:
    """A child's question, delivered to its parent exactly once; returns the question's id."""
    if not question.strip():
        raise DelegationRefused("the question is empty")
    asked = ParentQuestion(question_id=f"pq-{child.session_id}-{seq}-{index}", text=question.strip(),
                           blocking=blocking, seq=seq, index=index, asked_at=now())  # fmt: skip
    outcome, woken = parent_asks.ask_parent(child, asked, unanswered=UNANSWERED)
    if outcome == AskOutcome.NO_PARENT:
        raise DelegationRefused("the session that delegated this task has ended; decide yourself and say so")
    if woken is not None:  # it waited for its children: it reads the question now
        tasks.enqueue_session(woken, attempt=f"asked-{asked.question_id}")
    log.info("question to the parent delivered", extra={"question": asked.question_id, "outcome": outcome.value})
    return asked.question_id


def answer_child(parent: Session, *, child_id: str, answer: str, released: bool = False,
                 question_id: str | None = None, by: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The parent's answer to its child's open question ``question_id``, or else the first its paused turn waits on,
    or else its oldest open one (``released``: no answer, an error for the child's model: the conversation it asked
    ended; ``by``: the parent's call answering, whose re-run finds its own answer); returns what happened, for the
    model: the question answered and the child's questions that still wait for an answer."""
    done = children.answer_child(parent, child_id, answer, released=released, question_id=question_id, by=by)
    if done.outcome == AnswerOutcome.NOT_ASKED:
        if question_id is not None and done.child is not None:
            waiting = [q.question_id for q in done.still_open]
            raise DelegationRefused(f"{question_id} is not an open question of {child_id}; its open questions: "
                                    f"{', '.join(waiting) or 'none'}")  # fmt: skip
        raise DelegationRefused(f"{child_id} is not a child of this session with an open question")
    if done.outcome == AnswerOutcome.ENDED:
        raise DelegationRefused(f"{child_id} has ended; it no longer needs the answer")
    assert done.question is not None
    if done.outcome == AnswerOutcome.RESUMED:
        tasks.enqueue_session(child_id, attempt=f"answered-{done.question.question_id}")
    log.info("answer sent to the child", extra={"child": child_id, "outcome": done.outcome.value,
                                                "question": done.question.question_id})  # fmt: skip
    return {
        "outcome": done.outcome.value,
        "question_id": done.question.question_id,
        "question": done.question.text,
        "still_waiting": [{"question_id": q.question_id, "question": q.text} for q in done.still_open],
    }


def abandon_asking(child: Session, at: datetime) -> bool:
    """A child paused on its question to its parent past the sweep's bound is ended (abandoned), and its parent's
    conversation, where it asked, hears so as the child's result. False if it was answered or ended meanwhile."""
    waiting = [q for q in parent_questions.still_open(parent_questions.of(child)) if q.blocking]
    if not waiting:
        return False
    asked = waiting[0]
    hours = int((at - (asked.asked_at or child.updated_at or child.created_at)).total_seconds() // 3600)
    result = (f"the helper stopped waiting: its question to you went unanswered for {hours} hours, so it ended "
              f"without finishing its task. Its question: {asked.text}")  # fmt: skip
    try:
        finished = children.finish(child, None, status=SessionStatus.ABANDONED, result=result, error=result,
                                   wait_for_notes=False, asking=asked.question_id)  # fmt: skip
    except LeaseLost:
        return False
    try:
        resume_parent(child, finished)
    finally:  # every line stored is shown by its writer: a sibling's update may have been left to this one
        tree_status.show_ended(child)
    log.info("a child's unanswered question ended it", extra={"child": child.session_id, "hours": hours})
    return True


def fail_unwaited(child: Session, before: datetime, why: str) -> bool:
    """A child the sweep found paused since ``before`` with nothing open and nothing to resume it from
    (``shared.state.waiting.settle_unwaited``) fails as a child whose worker died does: its parent hears ``why`` as
    its result (and is woken if it waited for it), the children asking its conversation are released; it posts
    nothing. False if it changed meanwhile (woken, or ended): fenced by its still being paused since ``before``."""
    try:
        finished = children.finish(child, None, status=SessionStatus.FAILED, result=why, error=why,
                                   wait_for_notes=False, paused_before=before)  # fmt: skip
    except LeaseLost:
        return False
    try:
        resume_parent(child, finished)
    finally:
        tree_status.show_ended(child)
    release_askers(child)
    log.warning("a paused child nothing could resume failed", extra={"child": child.session_id})
    return True


UNANSWERED = "The session that delegated your task ended without answering; decide yourself and say so in your result."


STARTS_CHILDREN = "delegate"  # the tool whose calls start children (they may then ask this conversation)


def delegated_in(transcript: list[Step]) -> bool:
    """Whether a conversation started children, read from its stored steps (no Firestore read)."""
    return any(entry.type == AuditType.TOOL and entry.name == STARTS_CHILDREN for step in transcript
               for entry in step.audit)  # fmt: skip


def _tree_started(session: Session) -> bool:
    """Whether any child was ever created in this session's tree: its root keeps the tree's allotments (a point
    read, only when ``session`` is not the root itself)."""
    root = session if session.session_id == session.tree_root else sessions.get_session(session.tree_root)
    return root is not None and bool(root.tree.reserved)


def release_askers(ended: Session, *, delegated: bool | None = None) -> list[str]:
    """A conversation ended, in any status, without answering its children's questions: each one still open is
    released at once with an error its model sees (it would otherwise wait for an answer nobody will give).
    ``delegated``: whether the conversation started children, if the caller knows (from its steps); otherwise
    its tree's root says. Returns the children released."""
    if not (_tree_started(ended) if delegated is None else delegated):
        return []
    released = []
    for child in sessions.tree_members(ended.tree_root):
        if child.tree.parent_transcript != ended.transcript:
            continue
        for asked in parent_questions.still_open(parent_questions.of(child)):
            try:
                answer_child(ended, child_id=child.session_id, answer=UNANSWERED, released=True,
                             question_id=asked.question_id)  # fmt: skip
            except DelegationRefused:
                continue  # it ended, or another session answered it first
            if child.session_id not in released:
                released.append(child.session_id)
    if released:
        log.info("children asking an ended conversation released", extra={"children": released})
    return released


def question_again(child: Session) -> list[Note]:
    """A child's open questions to its parent, again: the parent wanted to end without answering them."""
    return [Note(kind=NoteKind.CHILD_QUESTION, text=f"{asked.text} (still waiting for your answer_child)",
                 user=child.session_id, ts=f"{asked.question_id}:again", question_id=asked.question_id,
                 question=child.text) for asked in parent_questions.still_open(parent_questions.of(child))]  # fmt: skip

"""Every deterministic id: each retry of the same cause lands on the same document, task name or post key.

Slack retries an event with the same ``event_id``; a continuation is caused by one question; a question by one
call of one step. Deriving ids from the cause is what makes every write idempotent.
"""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def _clean(text: str) -> str:
    """Keep only characters valid in both Firestore document ids and Cloud Tasks task ids."""
    return _SAFE.sub("_", text)[:200]


def session_for_event(event_id: str) -> str:
    return f"ev-{_clean(event_id)}"


def continuation_id(question_id: str) -> str:
    return f"answer-{question_id}"


def retry_id(session_id: str) -> str:
    return f"retry-{session_id}"


_ROUND = re.compile(r"-r\d+$")  # a later round's question (``question_id``)


def question_id(session_id: str, seq: int, call_index: int, round: int = 1) -> str:
    """Derived from the step that asked, so a retried step finds the question it already wrote. ``round``: an MCP
    server's later request for input in the same call (2, 3, ...), which the same session may ask (its answer to the
    round before resumed the call in place, before the session paused): a question of its own."""
    return f"q-{session_id}-{seq}-{call_index}" + (f"-r{round}" if round > 1 else "")


def _named_session(prefix: str, derived_id: str) -> str | None:
    """The session a ``question_id`` or ``approval_id`` was derived from (None if ``derived_id`` is not one)."""
    if not derived_id.startswith(prefix):
        return None
    session_id, _, rest = _ROUND.sub("", derived_id[len(prefix) :]).rpartition("-")
    session_id, _, seq = session_id.rpartition("-")
    return session_id if session_id and seq.isdigit() and rest.isdigit() else None


def asker_of_question(question_id: str) -> str | None:
    """The session that asked ``question_id``, read from the id (a hint: the question's own field decides)."""
    return _named_session("q-", question_id)


def asker_of_approval(approval_id: str) -> str | None:
    """The session that asked for ``approval_id``, read from the id (a hint: the approval's own field decides)."""
    return _named_session("a-", approval_id)


def approval_id(session_id: str, seq: int, call_index: int) -> str:
    """Derived from the call it asks about, so a retried step finds the approval it already wrote."""
    return f"a-{session_id}-{seq}-{call_index}"


def resume_id(session_id: str, seq: int) -> str:
    """The continuation that resumes one turn's decided approvals."""
    return f"resume-{session_id}-{seq}"


def resumed_by(question_id: str) -> str:
    """The continuation that resumes the turn whose call asked ``question_id`` (a top-level session's pause: every
    pause is on the turn's waiting record, resumed under ``resume_id``)."""
    asker = asker_of_question(question_id) or ""
    seq = question_id[len(f"q-{asker}-") :].partition("-")[0]
    return resume_id(asker, int(seq)) if asker and seq.isdigit() else continuation_id(question_id)


def resume_hint(derived_id: str) -> str | None:
    """The continuation that would resume the turn whose call asked ``derived_id`` (a question's or an approval's
    id), read from the id: a hint a resolution's transaction reads with what it reads first (None: the id names no
    top-level asker; a delegated child is queued again as itself, never resumed in a continuation)."""
    prefix = derived_id[:2]
    asker = _named_session(prefix, derived_id) if prefix in {"q-", "a-"} else None
    if not asker or asker.startswith("child-"):
        return None
    seq = derived_id[len(f"{prefix}{asker}-") :].partition("-")[0]
    return resume_id(asker, int(seq)) if seq.isdigit() else None


def child_id(parent_id: str, seq: int, call_index: int) -> str:
    """A delegated child, derived from the parent's call, so a retried turn finds the child it started."""
    return f"child-{parent_id}-{seq}-{call_index}"


def child_result_id(child_id: str) -> str:
    """The continuation a non-blocking child's result starts when its parent has already ended."""
    return f"result-{child_id}"


def message_key(channel: str, ts: str) -> str:
    """The de-duplication record of one Slack message (or button press), whatever events carried it."""
    return f"msg-{channel}-{ts}"


def press_key(action_ts: str) -> str:
    """Stands for the message a button press does not have: unique per press, the same on Slack's retries."""
    return f"press-{action_ts}"


def thread_doc(channel: str, thread_ts: str) -> str:
    """The ``threads/`` document of one Slack thread."""
    return f"{channel}-{thread_ts}"


def step_doc(seq: int) -> str:
    """A step's document id: zero-padded, so ids sort like sequence numbers."""
    return f"{seq:06d}"


def post_key(session_id: str, seq: int, suffix: str) -> str:
    """The Slack metadata key of a post made by step ``seq`` of a session (``suffix`` names the post)."""
    return f"{session_id}:{seq}:{suffix}"


def call_key(session_id: str, seq: int, call_index: int) -> str:
    """The idempotency key of one tool call: the same for every re-run of that call, after any crash."""
    return f"call-{session_id}-{seq}-{call_index}"


def call_doc(seq: int, call_index: int) -> str:
    """A ledger entry's document id: the step and the call's place in it."""
    return f"{seq:06d}-{call_index:02d}"


def task_id(session_id: str, attempt: str = "") -> str:
    """A task id for a session; a short hash prefix spreads names across Cloud Tasks' key space."""
    base = f"{session_id}-{attempt}" if attempt else session_id
    prefix = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{prefix}-{_clean(base)}"


def spend_doc(day: str, user: str) -> str:
    """One person's token spend on one day."""
    return f"{day}-{_clean(user)}"


# The call id of the product's own daily-budget question (``shared.agent.daily_budget``): never one the model made.
DAILY_BUDGET_CALL = "daily-budget-"


def is_daily_budget_call(call_id: str | None) -> bool:
    """Whether a question stands for the product's daily-budget question, which only operators may answer."""
    return bool(call_id) and str(call_id).startswith(DAILY_BUDGET_CALL)

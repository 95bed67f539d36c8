"""The daily sweep: nothing asked, and no piece of work, is silently forgotten.

- An open question older than QUESTION_REMIND_HOURS gets one reminder in its thread, mentioning the operators.
- Still open QUESTION_ABANDON_HOURS later, it is abandoned: 💬 off, the post updated, the thread told how to
  start again, and the paused session closed as ``abandoned``.
- A silent exit that was neither narrated nor escalated is followed up (a narration retry, or an alert).
- A ``running`` session whose lease expired STALE_LEASE_MINUTES ago lost its worker for good (its task ran out
  of retries): it becomes a silent exit and is narrated from its audit log, or escalated.
- A ``queued`` session whose task was never created (the ingress crashed in between) is enqueued again.

Every action is guarded by a transaction on the document's current state, so a second run right after the
first changes nothing. Each query is indexed on status and time and read by pages, so a run reads the stale
documents only, however large the database grows.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from slack_sdk.errors import SlackApiError

from shared import auth, config, followup, slack, store, tasks
from shared.models import Question, QuestionStatus, Session, SessionStatus

log = logging.getLogger(__name__)

QUESTION_REACTION = "speech_balloon"
QUEUED_GRACE = timedelta(minutes=15)
MAX_BODY_BYTES = 64 * 1024


def run(now: datetime | None = None) -> dict[str, Any]:
    """One sweep at ``now`` (injected by tests; the real clock otherwise). Returns counts per action."""
    settings = config.settings()
    at = now or store.now()
    remind_after = timedelta(hours=settings.question_remind_hours)
    abandon_after = remind_after + timedelta(hours=settings.question_abandon_hours)
    page = settings.sweep_page_size
    counts: Counter[str] = Counter()

    for question in store.stale_questions(at - remind_after, page_size=page):
        counts["questions_read"] += 1
        counts[_guarded(_question_action, question, at, abandon_after)] += 1

    silent_cutoff = at - QUEUED_GRACE
    for session in store.stale_sessions(
        SessionStatus.SILENT_EXIT, "updated_at", silent_cutoff, page_size=page, not_followed_up=True
    ):
        counts["sessions_read"] += 1
        counts[_guarded(_silent_action, session)] += 1

    lease_cutoff = at - timedelta(minutes=settings.stale_lease_minutes)
    for session in store.stale_sessions(SessionStatus.RUNNING, "lease_until", lease_cutoff, page_size=page):
        counts["sessions_read"] += 1
        counts[_guarded(_dead_action, session, lease_cutoff)] += 1

    for session in store.stale_sessions(SessionStatus.QUEUED, "updated_at", at - QUEUED_GRACE, page_size=page):
        counts["sessions_read"] += 1
        counts[_guarded(_requeue_action, session, at)] += 1

    summary = {action: counts.get(action, 0) for action in (
        "reminded", "abandoned", "narrated", "escalated", "settled", "requeued", "unchanged", "errors",
        "questions_read", "sessions_read",
    )}  # fmt: skip
    log.info("sweep finished", extra={"summary": summary})
    return summary


def _guarded(action: Callable[..., str], *args: Any) -> str:
    """One item's action; a failure is logged and counted, and the sweep goes on with the next item."""
    try:
        return action(*args)
    except Exception:
        log.exception("sweep action failed", extra={"action": action.__name__})
        return "errors"


def _question_action(question: Question, at: datetime, abandon_after: timedelta) -> str:
    if question.asked_at <= at - abandon_after:
        return "abandoned" if _abandon(question, at) else "unchanged"
    if question.reminded_at is None:
        return "reminded" if _remind(question, at) else "unchanged"
    return "unchanged"


def _silent_action(session: Session) -> str:
    retry = store.get_session(store.retry_id(session.session_id))
    if retry is not None and retry.status in {SessionStatus.QUEUED, SessionStatus.RUNNING}:
        return "unchanged"  # its narration is still under way
    if retry is not None and retry.status == SessionStatus.DONE:
        store.mark_followed_up(session.session_id)  # narrated; the record just missed it
        return "settled"
    if retry is not None:
        followup.alert(session, reason="its narration never reported back")
        return "escalated"
    return followup.after_silent_exit(session, reason="no narration was ever started")


def _dead_action(session: Session, lease_cutoff: datetime) -> str:
    dead = store.end_session(
        session.session_id,
        expect=SessionStatus.RUNNING,
        status=SessionStatus.SILENT_EXIT,
        cutoff=lease_cutoff,
        closed_loop=False,
        error="its worker died and the task ran out of retries",
    )
    if dead is None:
        return "unchanged"
    return followup.after_silent_exit(dead, reason="its worker died before it reported back")


def _requeue_action(session: Session, at: datetime) -> str:
    # A fresh task name per sweep: Cloud Tasks keeps a used name reserved for a while after its task ran.
    tasks.enqueue_session(session.session_id, attempt=f"requeue-{at:%Y%m%d%H%M}")
    return "requeued"


def handle(body: bytes, headers: Mapping[str, str]) -> tuple[dict[str, Any], int]:
    """The ``sweep`` function: Cloud Scheduler's OIDC token checked, then one run; the summary is the reply.

    Locally (REQUIRE_OIDC=false) a JSON body ``{"now": "<ISO time>"}`` may set the clock, so the sweep can be
    tried against old questions without waiting a day; deployed, the clock is always the real one.
    """
    settings = config.settings()
    denied = auth.check(headers, audience=settings.oidc_audience, service_account=settings.scheduler_service_account)
    if denied:
        return denied
    now = None
    if body.strip() and not settings.require_oidc:
        try:
            payload = json.loads(body)
            now = datetime.fromisoformat(payload["now"]) if isinstance(payload, dict) and "now" in payload else None
        except (ValueError, TypeError) as exc:
            return {"error": f"bad body: {exc}"}, 400
        if now is not None and now.tzinfo is None:
            return {"error": "bad body: now needs a time zone"}, 400
    return run(now), 200


def _remind(question: Question, at: datetime) -> bool:
    if not store.mark_reminded(question.question_id, at):
        return False
    operators = " ".join(f"<@{user}>" for user in sorted(config.settings().operator_user_ids)) or "Operators"
    hours = int((at - question.asked_at).total_seconds() // 3600)
    text = f":alarm_clock: {operators}: this question has waited {hours} hours for an answer:\n>{question.text}"
    slack.post(question.channel, question.thread_ts, text, key=f"{question.question_id}:reminder")
    return True


def _abandon(question: Question, at: datetime) -> bool:
    if not store.close_question(question.question_id, QuestionStatus.ABANDONED):
        return False
    hours = int((at - question.asked_at).total_seconds() // 3600)
    if question.post_ts:
        slack.unreact(question.channel, question.post_ts, QUESTION_REACTION)
        try:
            slack.update(
                question.channel, question.post_ts, f":hourglass: ~{question.text}~\n_Abandoned after {hours} hours._"
            )
        except SlackApiError as exc:  # the thread is told below either way
            log.warning("could not update the abandoned question", extra={"error": exc.response.get("error")})
    slack.post(
        question.channel,
        question.thread_ts,
        f"Nobody answered this question for {hours} hours, so I have stopped waiting. "
        "To start again, mention me in this thread with what you would like.",
        key=f"{question.question_id}:abandoned",
    )
    store.end_session(question.session_id, expect=SessionStatus.PAUSED, status=SessionStatus.ABANDONED)
    return True

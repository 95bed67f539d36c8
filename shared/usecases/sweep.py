"""The daily sweep: nothing asked, and no piece of work, is silently forgotten.

- An open question or a pending approval (one lifecycle: ``shared.asks.lifecycle``) older than
  QUESTION_REMIND_HOURS gets one reminder, mentioning the operators.
- Still open QUESTION_ABANDON_HOURS later, a question is abandoned: 💬 off, the post updated, the thread told how
  to start again, the paused session closed as ``abandoned`` and everything else its turn waited on ended; an
  approval expires (never runs) and its turn resumes with the call told so.
- A silent exit that was neither narrated nor escalated is followed up (a narration retry, or an alert).
- A ``running`` session whose lease expired STALE_LEASE_MINUTES ago lost its worker for good (its task ran out
  of retries): it becomes a silent exit and is narrated from its audit log, or escalated.
- A delegated child in that state fails instead, and its parent hears it (the parent never waits for ever). A child
  the sweep ends (failed, or abandoned below) stops what it delegated, as a child failing in its run does: a
  child's result after its end goes nowhere. When what follows a child's end fails here, a delivery of its task is
  queued, which finishes it (retried by Cloud Tasks until it has: ``shared.usecases.worker``).
- A child paused on its blocking question to its parent (``ask_parent``) ages as a question does: the parent's
  conversation is asked again once, and QUESTION_ABANDON_HOURS later the child is ended (abandoned), the parent's
  conversation told why as the child's result.
- A ``queued`` session whose task was never created (the ingress crashed in between) is enqueued again.
- A notice of the sweep's (a reminder, an abandon's, an alert) that Slack refused or whose poster died is posted now,
  at most once in all (``shared.asks.notices``: looked for first when an earlier attempt may have made it): by every
  sweep, and by the rescue every few minutes, so a Slack that failed briefly delays it by minutes.
- A session still ``paused`` QUESTION_REMIND_HOURS after its last update, whose waiting record has nothing open
  any more and whose turn nothing resumed (a path closed its last wait without resuming or ending it: a worker,
  handler or sweep killed between the two), is resumed as that last resolution would have resumed it: a top-level
  session's continuation is created and queued, a delegated child is queued again (the calls get what their waits
  came to). One that cannot resume (no record to resume from, or an operator question of its turn cancelled or
  abandoned, which was meant to end it) ends instead: a top-level session as ``abandoned``, what its record names
  ending with it and its thread told; a child fails as one whose worker died does, its parent told (it never posts).

Every action is guarded by a transaction on the document's current state, so a second run right after the
first changes nothing. Each query is indexed on status and time and read by pages, so a run reads the stale
documents only, however large the database grows (paused sessions are one query: a child's ask to its parent
ages, any other paused session's record is read only once it is stale and not found asking in the same run).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from shared import config
from shared.agent import followup
from shared.asks import delegation, lifecycle, notices, questions, stopping, tree_status
from shared.asks.stopping import DELEGATOR_ENDED
from shared.errors import Contended
from shared.logs import session_context
from shared.queue import tasks
from shared.state import children, ids, parent_questions, sessions, steps, waiting
from shared.state import feedback as stored_feedback
from shared.state import questions as stored_questions
from shared.state.firestore import now
from shared.state.models import ParentQuestion, SessionStatus
from shared.state.notices import Notice
from shared.state.session_model import Session
from shared.state.stale import stale_sessions

log = logging.getLogger(__name__)

QUEUED_GRACE = timedelta(minutes=15)


def run(when: datetime | None = None) -> dict[str, Any]:
    """One sweep at ``when`` (injected by tests; the clock otherwise). Returns counts per action."""
    settings = config.settings()
    at = (when or now()).astimezone(UTC)  # a clock given in another zone: days and task names are UTC's
    remind_after = timedelta(hours=settings.question_remind_hours)
    abandon_after = remind_after + timedelta(hours=settings.question_abandon_hours)
    page = settings.sweep_page_size
    counts: Counter[str] = Counter()

    _post_owed(counts, at, page)  # first: what a sweep before this one could not post

    asking: set[str] = set()  # the sessions found asking: they still wait (their record needs no read here)
    for ask in lifecycle.stale(at - remind_after, page_size=page):  # questions and approvals: one lifecycle
        counts[f"{ask.kind}_read"] += 1
        asking.add(ask.item.session_id)
        counts[_guarded(lifecycle.age, ask, at, abandon_after)] += 1

    for session in stale_sessions(SessionStatus.PAUSED, "updated_at", at - remind_after, page_size=page):
        counts["sessions_read"] += 1
        if _asks_parent(session):
            counts[_guarded(_asking_action, session, at, remind_after, abandon_after)] += 1
        elif session.session_id in asking:  # aged above: its ask's own path resumes or ends it
            counts["unchanged"] += 1
        else:
            counts[_guarded(_unwaited_action, session, at, at - remind_after)] += 1

    silent_cutoff = at - QUEUED_GRACE
    for session in stale_sessions(
        SessionStatus.SILENT_EXIT, "updated_at", silent_cutoff, page_size=page, not_followed_up=True
    ):
        counts["sessions_read"] += 1
        counts[_guarded(_silent_action, session)] += 1

    lease_cutoff = at - timedelta(minutes=settings.stale_lease_minutes)
    for session in stale_sessions(SessionStatus.RUNNING, "lease_until", lease_cutoff, page_size=page):
        counts["sessions_read"] += 1
        counts[_guarded(_dead_action, session, lease_cutoff)] += 1

    for session in stale_sessions(SessionStatus.QUEUED, "updated_at", at - QUEUED_GRACE, page_size=page):
        counts["sessions_read"] += 1
        counts[_guarded(_requeue_action, session, at)] += 1

    feedback_summary(at - timedelta(days=1))

    summary = {action: counts.get(action, 0) for action in (
        "reminded", "abandoned", "narrated", "escalated", "settled", "requeued", "children_failed", "unchanged",
        "errors", "questions_read", "sessions_read", "approvals_reminded", "approvals_expired", "approvals_read",
        "parents_reminded", "children_abandoned", "unwaited_resumed", "unwaited_ended", "notices_posted",
        "notices_read",
    )}  # fmt: skip
    log.info("sweep finished", extra={"summary": summary})
    return summary


def _post_owed(counts: Counter[str], at: datetime, page: int) -> None:
    """The notices an earlier sweep (or a path the sweep runs) could not post, posted now, once each
    (``shared.asks.notices``): Slack refused them, or their poster died."""
    for notice in notices.pending(page_size=page):
        counts["notices_read"] += 1
        counts[_guarded(_owed_action, notice, at)] += 1


def _owed_action(notice: Notice, at: datetime) -> str:
    """A notice still owed, posted (a reminder through its ask's remind, which gives it up once the ask is closed)."""
    if notice.about is not None:
        return lifecycle.remind_owed(notice, at)
    return "notices_posted" if notices.post(notice) is not None else "unchanged"


def feedback_summary(day: datetime) -> dict[str, Any]:
    """The 👍/👎 first given on ``day`` (UTC), logged: the sweep logs the last whole day at every run."""
    day = day.astimezone(UTC)  # feedback is stored by its UTC day
    given = stored_feedback.on_day(f"{day:%Y-%m-%d}")
    ratings = Counter(f.rating for f in given)
    summary = {"day": f"{day:%Y-%m-%d}", "positive": ratings["positive"], "negative": ratings["negative"],
               "sessions": len({f.session_id for f in given})}  # fmt: skip
    log.info("feedback per day", extra={"feedback": summary})
    return summary


def _guarded(action: Callable[..., str], *args: Any) -> str:
    """One item's action, logged under its session and trace; a failure is logged and counted, and the sweep goes on
    with the next item (a transaction that gave up for contention: a warning, counted as contended)."""
    item = args[0] if args else None
    session_id = getattr(item, "session_id", None)
    try:
        with session_context(session_id, trace=getattr(item, "trace_id", None)):
            try:
                return action(*args)
            except Contended as exc:  # the next sweep tries it again
                log.warning("sweep action contended; left to the next sweep", extra={"reason": str(exc)})
                return "contended"
    except Exception:
        log.exception("sweep action failed", extra={"action": action.__name__})
        return "errors"


def _asks_parent(session: Session) -> bool:
    """A delegated child whose blocking question to its parent is unanswered (a paused one waits on it)."""
    return session.reports_to_parent and _oldest_blocking(session) is not None


def _oldest_blocking(session: Session) -> ParentQuestion | None:
    """The child's oldest blocking question to its parent still unanswered (the sweep ages its wait from it)."""
    return next((q for q in parent_questions.still_open(parent_questions.of(session)) if q.blocking), None)


def _asking_action(child: Session, at: datetime, remind_after: timedelta, abandon_after: timedelta) -> str:
    """A child paused on its question to its parent ages as a question does: its parent's conversation is reminded
    once, and the child ends past the same bound, its parent told (nothing waits for ever)."""
    asked = _oldest_blocking(child)
    if asked is None or not _asks_parent(child):
        return "unchanged"
    since = asked.asked_at or child.updated_at or child.created_at
    answered = parent_questions.last_answered(parent_questions.of(child))
    since = max(since, answered) if answered is not None else since  # a later question waits from the last answer
    if since <= at - abandon_after:
        with _finished_by_its_delivery(child):
            if not delegation.abandon_asking(child, at):
                return "unchanged"
            stopping.end_waits(child, why="its session stopped waiting: its question to its parent went unanswered")
            stopping.stop_children(child, by=DELEGATOR_ENDED)  # its non-blocking ones too: a child reports only once
        return "children_abandoned"
    if asked.reminded_at is None and since <= at - remind_after:
        return "parents_reminded" if children.remind_parent(child, at) else "unchanged"
    return "unchanged"


def _unwaited_action(session: Session, at: datetime, before: datetime) -> str:
    """A session paused since ``before`` or earlier with nothing open left to age: resumed if its record is complete
    and nothing resumed it (a top-level session's continuation, or a child queued again: a fresh task name, the
    sweep's own), else ended (a top-level session abandoned, its thread told; a child failed, its parent told);
    unchanged while anything is still waited on (its questions and approvals age on their own, its children end or
    are failed, a child's question to its parent ages above)."""
    settled = waiting.settle_unwaited(session.session_id, before=before, at=at, grace=QUEUED_GRACE)
    if settled.found == waiting.Unwaited.WOKEN and settled.woken is not None:
        tasks.enqueue_continuation(settled.woken, attempt=f"unwaited-{at:%Y%m%d%H%M}")
        log.warning("a paused session nothing resumed was resumed", extra={"resumed": settled.woken.session_id})
        return "unwaited_resumed"
    if settled.found != waiting.Unwaited.ENDS:
        return "unchanged"
    if session.reports_to_parent:
        with _finished_by_its_delivery(session):
            failed = delegation.fail_unwaited(session, before, f"it stopped waiting: {stopping.UNWAITED}")
            if failed:
                stopping.stop_children(session, by=DELEGATOR_ENDED)
        return "unwaited_ended" if failed else "unchanged"
    shown = _closed_shown(settled.closed, at) if settled.closed else None
    return "unwaited_ended" if stopping.end_unwaited(session, shown=shown) else "unchanged"


def _closed_shown(closed: dict[str, str], at: datetime) -> Callable[[Session], None]:
    """How the thread of a session ended on its turn's closed questions is told, as the paths that closed them
    would have told it, had they not stopped before the session ended: an abandoned question's post updated and the
    thread told once; a question a newer one replaced shown so, the thread told nothing (it has that one to
    answer)."""

    def shown(_ended: Session) -> None:
        questions.show_closed(list(stored_questions.get_questions(list(closed)).values()), at)  # one batched read

    return shown


def _silent_action(session: Session) -> str:
    retry = sessions.get_session(ids.retry_id(session.session_id))
    if retry is not None and retry.status in {SessionStatus.QUEUED, SessionStatus.RUNNING}:
        return "unchanged"  # its narration is still under way
    if retry is not None and retry.status == SessionStatus.DONE:
        sessions.mark_followed_up(session.session_id)  # narrated; the record just missed it
        return "settled"
    if retry is not None:
        # A narration itself silent (its end's alert cut off) is read by this sweep too: escalated through it, once
        # for both (one claim, both marked), as its end would have.
        followup.alert(retry if retry.status == SessionStatus.SILENT_EXIT else session,
                       reason="its narration never reported back")  # fmt: skip
        return "escalated"
    return followup.after_silent_exit(session, reason="no narration was ever started")


def _dead_action(session: Session, lease_cutoff: datetime) -> str:
    if session.reports_to_parent:
        return _dead_child(session)
    dead = sessions.end_session(
        session.session_id,
        expect=SessionStatus.RUNNING,
        status=SessionStatus.SILENT_EXIT,
        cutoff=lease_cutoff,
        closed_loop=False,
        error="its worker died and the task ran out of retries",
    )
    if dead is None:
        return "unchanged"
    delegation.release_askers(dead)
    return followup.after_silent_exit(dead, reason="its worker died before it reported back")


def _dead_child(child: Session) -> str:
    """A delegated child whose worker died for good fails and tells its parent, which would otherwise wait for it
    for ever (a child never posts, so there is nothing to narrate)."""
    reason = "its worker died and the task ran out of retries"
    try:
        finished = children.finish(child, None, status=SessionStatus.FAILED, result=reason, error=reason,
                                   wait_for_notes=False)  # fmt: skip
    except steps.LeaseLost:
        return "unchanged"  # taken over meanwhile
    with _finished_by_its_delivery(child):
        try:
            delegation.resume_parent(child, finished)
            stopping.stop_children(child, by=DELEGATOR_ENDED)  # as a child failing in its run: their work has nobody
        finally:  # every line stored is shown by its writer: a sibling's update may have been left to this one
            tree_status.show_ended(child)
    return "children_failed"


@contextmanager
def _finished_by_its_delivery(child: Session) -> Iterator[None]:
    """A child the sweep ends: if what follows its end fails here (its parent told, what it delegated stopped), a
    delivery of its task is queued, which finishes it, retried by Cloud Tasks until it has (an ended child's
    delivery: ``shared.usecases.worker``); the sweep does not come back to a child it ended. A delivery of a child
    whose end was not stored (a paused one's end failed) does nothing: it is still paused."""
    try:
        yield
    except Exception:
        tasks.enqueue_session(child.session_id, attempt=f"ended-{now():%Y%m%d%H%M%S}")
        raise


def _requeue_action(session: Session, at: datetime) -> str:
    # A fresh task name per sweep: Cloud Tasks keeps a used name reserved for a while after its task ran.
    tasks.enqueue_session(session.session_id, attempt=f"requeue-{at:%Y%m%d%H%M}")
    return "requeued"


# --- the rescue: every few minutes, nothing waits for the daily sweep ------------------------------------

RESCUE_AFTER = timedelta(minutes=1)


def rescue(when: datetime | None = None) -> dict[str, Any]:
    """Queue again what would otherwise wait for the daily sweep: sessions left ``queued`` for over a minute (their
    task was never created, or was lost) and ``running`` sessions whose lease expired over a minute ago (their
    worker died and Cloud Tasks will not deliver again). Task names are fixed per minute, so two runs in the same
    minute queue one task; a takeover's claim makes any extra delivery a no-op."""
    settings = config.settings()
    at = (when or now()).astimezone(UTC)  # task names fixed per UTC minute, whatever zone the clock was given in
    counts: Counter[str] = Counter()
    _post_owed(counts, at, settings.sweep_page_size)  # nothing Slack refused waits for the daily sweep either
    attempt = f"rescue-{at:%Y%m%d%H%M}"
    dead_after = at - timedelta(minutes=settings.stale_lease_minutes)
    page = settings.sweep_page_size
    for session in stale_sessions(SessionStatus.QUEUED, "updated_at", at - RESCUE_AFTER, page_size=page):
        counts["sessions_read"] += 1
        counts[_guarded(_enqueue, session, attempt, "requeued")] += 1
    for session in stale_sessions(SessionStatus.RUNNING, "lease_until", at - RESCUE_AFTER, page_size=page):
        counts["sessions_read"] += 1
        if session.lease.until is not None and session.lease.until <= dead_after:
            counts["unchanged"] += 1  # long dead: the daily sweep narrates it from its audit log
            continue
        counts[_guarded(_enqueue, session, attempt, "taken_over")] += 1
    summary = {key: counts.get(key, 0) for key in ("requeued", "taken_over", "unchanged", "errors", "sessions_read",
                                                   "notices_posted", "reminded", "approvals_reminded",
                                                   "notices_read")}  # fmt: skip
    log.info("rescue finished", extra={"summary": summary})
    return summary


def _enqueue(session: Session, attempt: str, action: str) -> str:
    tasks.enqueue_session(session.session_id, attempt=attempt)
    return action

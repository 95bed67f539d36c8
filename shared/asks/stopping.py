"""Stopping a session stops its whole tree (flow 10): nothing it started waits for ever.

A queued or paused member ends at once, its open questions and pending approvals cancelled with their posts
updated; a running one ends at its next step boundary (it reads the request with every step it stores). A person's
Stop (its button, or "stop" typed in its thread) is the use case ``shared.usecases.stop``; a session that fails or
runs out of budget stops what it delegated through here too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shared.asks import delegation, lifecycle, notices, waits
from shared.queue import tasks
from shared.slack import client as slack
from shared.slack import placement
from shared.slack.surface import Reaction
from shared.state import approvals as stored_approvals
from shared.state import notices as stored_notices
from shared.state import origin, sessions, stop_requests, waiting
from shared.state import questions as stored_questions
from shared.state.firestore import now
from shared.state.models import Approval, ApprovalStatus, Note, NoteKind, Question, SessionStatus
from shared.state.notices import Notice
from shared.state.session_model import Session

log = logging.getLogger(__name__)


def stopped_text(by: str) -> str:
    """The one public message a stop leaves in the thread (the runner's, or this module's for a waiting session)."""
    return f":octagonal_sign: Stopped by {by}. Nothing more will happen unless someone asks again."


def stop(session_id: str, *, by: str) -> list[str]:
    """Stop ``session_id`` and every session it delegated to, down the tree; the ids stopped or asked to stop.

    Every member is marked first, then each one's waits are closed: closing a parent's waits answers the children
    asking it, and a child already marked is not woken by that answer (it would run on, then end failed)."""
    requested = [(current, request) for current in _tree(session_id)
                 if (request := stop_requests.request_stop(current, by=by)) is not None]  # fmt: skip
    for number, (current, request) in enumerate(requested, start=1):
        if request.was == SessionStatus.PAUSED:
            found = sessions.get_session(current)
            if found is not None:
                _close_paused(found, by=by)
        elif request.was == SessionStatus.QUEUED and not request.run_to_stop:  # ended before it ever ran
            found = sessions.get_session(current)
            if found is not None and found.top_level:
                _tell_stopped(found, by=by)  # (a continuation an answer just queued: nobody else would say so)
        if request.run_to_stop:
            tasks.enqueue_session(current, attempt=f"stop-{number}-{request.was.value}")
    stopped = [current for current, _ in requested]
    log.info("stopped a session tree", extra={"root": session_id, "stopped": stopped, "by": by})
    return stopped


def _tree(session_id: str) -> list[str]:
    """``session_id`` and every session it delegated to, down the tree, parents before their children; for a
    continuation, the children of the sessions it continues too."""
    members: list[str] = []
    waiting, seen = [session_id], set()
    while waiting:
        current = waiting.pop()
        if current in seen:
            continue
        seen.add(current)
        members.append(current)
        waiting.extend(child.session_id for child in sessions.children_of(current))
        if current == session_id:  # a continuation: the children of the sessions it continues are its tree too
            found = sessions.get_session(current)
            earlier = {found.transcript, found.asker_session_id} - {None, current} if found is not None else set()
            waiting.extend(child.session_id for parent in earlier if parent
                           for child in sessions.children_of(parent))  # fmt: skip
    return members


def _close_paused(found: Session, *, by: str) -> None:
    """A paused member, now stopped: what it waited on ends, the children asking it are released, and a top-level
    one tells its thread (nobody else will)."""
    close_waits(found, by=by)
    delegation.release_askers(found)  # children of earlier sessions of its conversation
    if found.top_level:
        _tell_stopped(found, by=by)


def _tell_stopped(found: Session, *, by: str) -> None:
    """A top-level session that ended at once (it waited): its thread told, once."""
    asked = origin.request_ts(found)
    slack.post(
        found.origin.channel,
        placement.reply_ts(found.origin.channel, found.origin.thread_ts, asked),
        stopped_text(by),
        key=f"{found.session_id}:stopped",
    )
    slack.react(found.origin.channel, asked, Reaction.STOPPED)


def stopped_by(session: Session) -> str:
    """Who stopped a stopped session, as its end recorded it."""
    return (session.error or "").removeprefix("stopped by ") or "someone"


def close_stopped(session_id: str) -> Session | None:
    """A session stopped whose Stop was cut off (killed after marking it, before closing what it waited on: Slack's
    retry of the Stop then finds it ended and closes nothing) has its waits closed now, as that Stop would have:
    its open questions cancelled and its approvals denied, their posts saying so, the children asking it released.
    The thread is told nothing here (a Stop still under way says so, once). Returns the stopped session (None: it
    is not stopped); each close is guarded by its own transaction, so a second call (or the Stop's) closes nothing
    more."""
    found = sessions.get_session(session_id)
    if found is None or found.status != SessionStatus.STOPPED:
        return None
    close_waits(found, by=stopped_by(found))
    delegation.release_askers(found)
    return found


CLOSED_UNANSWERED = "a question of its turn was closed unanswered"


def close_unwaited(session_id: str) -> Session | None:
    """What a refused answer or decision (nothing waits on it: its session ended, or is ending) leaves behind, closed
    as the end would have: a stopped session's (``close_stopped``); a failed one's (``close_failed``: its failure was
    killed, or Slack refused, before it closed them); an abandoned one's, whose end was cut off before
    it ended its waits (killed, or a Slack error, after committing the end); a paused one's whose turn had a question
    closed unanswered (a newer question replaced it, the sweep abandoned it) by a path cut off before it ended the
    session: it ends abandoned here, as that path would have ended it. Each end is guarded by its own transaction, so
    a second call (or the cut-off path's retry) ends nothing more. Returns the session it closed (None: nothing)."""
    stopped = close_stopped(session_id)
    if stopped is not None:
        return stopped
    found = sessions.get_session(session_id)
    if found is not None and found.status == SessionStatus.FAILED:  # its failure was cut off before it closed them
        close_failed(found)
        return found
    if found is not None and found.status == SessionStatus.PAUSED and not found.reports_to_parent:
        closed = _closed_unanswered(found)
        why = _why_closed(closed)
        ended = sessions.end_session(session_id, expect=SessionStatus.PAUSED, status=SessionStatus.ABANDONED,
                                     error=why) if why else None  # fmt: skip
        if ended is not None:  # ended here: the thread shown what the cut-off path would have shown, once
            _show_closed(ended, closed)
            return ended
        found = sessions.get_session(session_id)
    if found is None or found.status != SessionStatus.ABANDONED:
        return None
    _end_abandoned(found)
    return found


def _end_abandoned(ended: Session) -> None:
    """What an abandoned session (ended on its turn's closed questions) still names ends, and the children asking
    it are released, for the reason its end recorded."""
    end_abandoned(ended, why=ended.error or f"its session stopped waiting: {CLOSED_UNANSWERED}")


def end_abandoned(ended: Session, *, why: str, by: str = "sweep") -> None:
    """A conversation abandoned while paused ends for good: what its waiting record names ends (``end_waits``), what
    else it asked and left open (a non-blocking question it went on past) is closed with it, and the children asking
    it are released. Its thread was told to mention it again: nothing of it may still look answerable."""
    end_waits(ended, why=why, by=by)
    close_asks(ended, why=why, by=by, expired=True)
    delegation.release_askers(ended)


def _show_closed(ended: Session, closed: list[Question]) -> None:
    """``ended`` (abandoned here on ``closed``, its turn's questions closed unanswered) shown as the paths that
    closed them would have shown it (``shared.asks.questions.show_closed``), first: a process killed in the rest
    has told the thread, and a failure there still ends the rest."""
    from shared.asks import questions  # (it asks this module to end what a replaced question's turn waited on)

    try:
        questions.show_closed(closed, now())
    finally:
        _end_abandoned(ended)


def _closed_unanswered(paused: Session) -> list[Question]:
    """The questions ``paused``'s turn waits on that were closed unanswered (cancelled or abandoned)."""
    asked = waiting.asked(paused.waiting)
    found = stored_questions.get_questions(asked) if asked else {}
    closed = waiting.closed_unanswered(paused.waiting, {key: q.status.value for key, q in found.items()})
    return [found[key] for key in closed]


def _why_closed(closed: list[Question]) -> str | None:
    """Why a paused session whose turn had ``closed`` can never resume (None: nothing was closed)."""
    from shared.asks import questions  # (as in ``_show_closed``)

    return questions.why_closed([q.status.value for q in closed], unanswered=CLOSED_UNANSWERED) if closed else None


# Who stops what an ended child had delegated (a child's result after its end goes nowhere: it reported).
DELEGATOR_ENDED = "the session that delegated it ended"


def stop_children(session: Session, *, by: str) -> list[str]:
    """Stop what ``session`` delegated (it failed or was stopped itself)."""
    return [s for child in sessions.children_of(session.session_id) for s in stop(child.session_id, by=by)]


def close_waits(session: Session, *, by: str) -> None:
    """A stopped session's open questions are cancelled and its pending approvals denied, their posts updated: those
    its thread lists, and whatever its waiting record names elsewhere (a routed card, a mixed turn's children)."""
    why = f"the session was stopped by {by}"
    close_asks(session, why=why, by=by)
    end_waits(session, why=why, by=by, expired=False)


def close_asks(session: Session, *, why: str, by: str, expired: bool = False) -> list[str]:
    """The open questions and pending approvals of ``session``'s conversation that its thread lists (blocking or
    not; asked by it, or by an earlier session of its transcript: a non-blocking question it went on past), cancelled
    (``expired``: approvals expire instead of being denied), their posts saying ``why`` without buttons, 💬 off: an
    answer or a decision after its end finds them closed. Returns the ids it closed; each close is guarded by its own
    transaction, so a second call (or a racing answer, which then wins) closes nothing more."""
    thread = stored_questions.thread_questions(session.origin.channel, session.origin.thread_ts)
    asked: list[Question | Approval] = [*thread.open, *stored_approvals.pending(thread.open_approval_ids)]
    ours = {session.session_id, session.transcript}
    closed = []
    for ask in asked:  # questions and approvals: one lifecycle, one cancel step
        if {ask.session_id, ask.transcript_id} & ours and lifecycle.cancel(ask, why=why, by=by, expired=expired):
            closed.append(ask.question_id if isinstance(ask, Question) else ask.approval_id)
    return closed


FAILED = "the session failed"


def close_failed(session: Session, unread: list[Note] | None = None) -> list[str]:
    """A failed session's open asks closed (``close_asks``): nothing it asked can resume it, and its thread was told
    to mention it again. Its approvals expire (nobody decided them). ``unread``: the notes it failed before reading,
    whose approved calls never run (``show_unrun``)."""
    closed = close_asks(session, why=FAILED, by="failure", expired=True) + show_unrun(unread or [], why=FAILED)
    if closed:
        log.info("a failed session's open asks closed", extra={"closed": closed})
    return closed


def show_unrun(notes: list[Note], *, why: str) -> list[str]:
    """Approvals decided while their session still ran (noted for it to read at its pause) that it ended without
    reading: their calls never run, so a card that says "approved; running it now" says they did not, and why."""
    from shared.asks import approvals  # (it asks this module to close what a refused decision leaves)

    decided = [note.question_id for note in notes if note.kind == NoteKind.DECISION and note.question_id]
    unrun = (
        [a for a in stored_approvals.get_approvals(decided) if a.status == ApprovalStatus.APPROVED] if decided else []
    )
    for approval in unrun:
        approvals.update_card(approval, f":octagonal_sign: not run: {why}")
    return [approval.approval_id for approval in unrun]


def end_waits(ended: Session, *, why: str, by: str = "sweep", expired: bool = True) -> list[str]:
    """A session ended while paused (abandoned, stopped): everything its waiting record still names ends too, so
    nothing is left waiting for a turn that will never resume: its open questions are cancelled and their posts
    say why, its pending approvals expire (``expired``; else are denied: a stop) and never run, their cards saying
    why, the blocking children it waited on are stopped (their work has nobody to go to). A parent's answer it
    waited on needs nothing (the question is its own). Returns the ids of what it ended; each end is guarded by its
    own transaction, so a second call ends nothing more."""
    ending = waits.Ending(why, by, expired, stop=lambda session_id: stop(session_id, by=by))
    done = [key for entry in ended.waiting if not entry.released for key in waits.of(entry.kind).end(entry, ending)]
    if done:
        log.info("an ended session's waits ended", extra={"ended_waits": done, "why": why})
    return done


UNWAITED = "nothing it waited on can resume it any more"


def end_unwaited(session: Session, *, shown: Callable[[Session], None] | None = None) -> bool:
    """A paused top-level session the sweep found with nothing open and nothing to resume it (``shared.state.
    waiting.settle_unwaited``): it ends (abandoned), its thread is told (``shown``; by default how to start again,
    as nobody else will), whatever its record still names ends with it and the children asking it are released.
    The thread hears it first: a process killed in the rest has told it, and a failure there still ends the rest.
    The default notice is claimed before the end: a sweep killed right after the end (the session no longer paused:
    no later sweep reads it) leaves it owed to the next sweep (``shared.asks.notices``). False if it changed
    meanwhile (ended, or resumed): guarded by its own transaction, so a second sweep ends nothing more."""
    notice = unwaited_notice(session) if shown is None else None
    claimed = stored_notices.claim(notice, hold=notices.HOLD) if notice is not None else None
    try:
        ended = sessions.end_session(session.session_id, expect=SessionStatus.PAUSED, status=SessionStatus.ABANDONED,
                                     error=f"it stopped waiting: {UNWAITED}")  # fmt: skip
        found = sessions.get_session(session.session_id) if ended is None and claimed is not None else None
    except Exception:
        if notice is not None and claimed is not None and not claimed.look_first:
            stored_notices.release(notice.claim)  # nothing was posted: the next sweep ends it and tells the thread
        raise
    if ended is None:
        if notice is not None and claimed is not None:
            # Another sweep ended it as this one claimed its notice (its own claim found this one's), or it resumed.
            if found is not None and found.status == SessionStatus.ABANDONED and UNWAITED in (found.error or ""):
                notices.deliver(notice, claimed)
            else:
                notices.give_up(notice, "its session did not end here")
        return False
    try:
        if shown is not None:
            shown(ended)
        elif notice is not None and claimed is not None:
            notices.deliver(notice, claimed)
    finally:
        end_abandoned(ended, why=f"its session stopped waiting: {UNWAITED}")
    log.info("a paused session nothing could resume ended", extra={"session": ended.session_id})
    return True


def unwaited_notice(ended: Session) -> Notice:
    """The thread of a session the sweep ended told how to start again."""
    where = placement.reply_ts(ended.origin.channel, ended.origin.thread_ts, origin.request_ts(ended))
    text = ("I have stopped waiting here: nothing I was waiting for can reach me any more. "
            "To start again, mention me in this thread with what you would like.")  # fmt: skip
    key = f"{ended.session_id}:unwaited"
    return Notice(f"notice-{key}", "notice", ended.origin.channel, where, text, key)

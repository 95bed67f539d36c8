"""The thread's view of a delegation tree (flow 10): one message, updated in place, listing every delegated task
and its state. The top-level session posts it when it first delegates; after that any session of the tree
refreshes it (a child never posts a message of its own, it only edits this one). Best effort: a refusal by Slack or
Firestore is logged, and the next refresh shows the state again.

A session that delegates, or resumes on its children, reads the whole tree (``refresh``); a child that starts only
stores its own line and reads the others' from the tree's view document (``show``, ``shared/state/tree_view.py``),
and a child that ended stored its line in its ending transaction and only reads the view, so its cost does not grow
with its siblings (issue 28.4). A child whose line a sibling stored after it leaves the update to that sibling, whose
read of the view follows both writes: children ending together make a few updates, not one each (a tree of 32 made
39 chat.update calls on one message within a second, where Slack allows that method about 50 a minute).
"""

from __future__ import annotations

import logging

from google.api_core import exceptions as gexc
from slack_sdk.errors import SlackApiError

from shared.errors import Contended
from shared.slack import backpressure, blocks
from shared.slack import client as slack
from shared.slack.surface import ThreadSurface
from shared.state import sessions, tree_view
from shared.state.models import SessionStatus
from shared.state.session_model import Session
from shared.state.tree_view import Line, View

log = logging.getLogger(__name__)

# What a refresh of the message may meet and only logs: Slack refusing or out of reach, Firestore failing (or its
# transaction giving up for contention).
_MISSED: tuple[type[Exception], ...] = (SlackApiError, gexc.GoogleAPIError, Contended,
                                        *backpressure.CONNECTION_ERRORS)  # fmt: skip

state_of = tree_view.state_of  # a child's state as the thread shows it
line_of = tree_view.line_of  # a task's line, from its session as stored


def in_tree_order(lines: list[Line]) -> list[Line]:
    """Each child after its parent, siblings in the order of the calls that started them."""
    by_parent: dict[str | None, list[Line]] = {}
    ids = {line.child_id for line in lines}
    for line in lines:
        parent = line.parent_id if line.parent_id in ids else None
        by_parent.setdefault(parent, []).append(line)
    ordered: list[Line] = []

    def visit(parent: str | None) -> None:
        for child in sorted(by_parent.get(parent, []), key=lambda c: (c.seq, c.index)):
            ordered.append(child)
            visit(child.child_id)

    visit(None)
    return ordered


def refresh(session: Session, surface: ThreadSurface) -> None:
    """Show the current state of ``session``'s tree in its status message, read whole (posting it if a top-level
    session has not yet)."""
    try:
        _refresh(session, surface)
    except _MISSED as exc:
        log.warning("could not refresh the delegated tasks' status message", extra={"error": str(exc)})


def show(child: Session, surface: ThreadSurface) -> None:
    """Show a delegated child's current state in its tree's status message: its own line stored, the others read
    from the tree's view (the whole tree read only if no full read stored the view yet)."""
    try:
        _show(child, surface)
    except _MISSED as exc:
        log.warning("could not refresh the delegated tasks' status message", extra={"error": str(exc)})


def show_ended(child: Session) -> None:
    """Show the end of a child that something other than its own run ended (the sweep: a question to its parent
    that went unanswered, a worker that died for good; a crash or a Slack storm after its run; a delivery after its
    end, whose worker may have died before showing it): its line is stored with its end, and the status message must
    say so too, or it would show the child working for ever (and a sibling may have left its update to it)."""
    if child.status not in _ENDED_LINES:
        return
    origin = child.origin
    show(child, ThreadSurface(origin.channel, origin.thread_ts, origin.trigger_ts, quiet=True))


def _refresh(session: Session, surface: ThreadSurface) -> None:
    root_id = session.tree_root
    found = tree_view.tree_members_at(root_id)
    if not found:
        return
    root = session if session.session_id == root_id else None
    first = root is not None and not root.tree.status_ts  # the root's first delegation: no view stored yet
    view = tree_view.merge(root_id, [line_of(member, at) for member, at in found], first=first)
    _present(session, surface, view, root)


# The ends ``children.finish`` stores, the child's line with them (``tree_view.ended``): nothing to write after.
_ENDED_LINES = {SessionStatus.DONE, SessionStatus.FAILED, SessionStatus.STOPPED, SessionStatus.ABANDONED}


def _show(child: Session, surface: ThreadSurface) -> None:
    if child.status in _ENDED_LINES:  # its end is stored, its line with it: read the view
        view = tree_view.read(child.tree_root)
    else:
        stored = tree_view.own(child.session_id)
        if stored is None:
            return
        view = tree_view.put(child.tree_root, line_of(*stored))
    if view.complete:
        if view.stored_after(child.session_id):  # every writer of a line shows it: the later one shows this too
            log.debug("a later line of the tree's view shows this child's; its writer updates the message")
            return
        _present(child, surface, view, None)
    elif view.status_ts is None and not tree_view.root_status_ts(child.tree_root):
        # The tree's root has not shown it yet: its first refresh reads the whole tree after this line was stored
        # (had it stored its view before, this read would have found it complete), and shows it. Read here too,
        # every child that ended before that refresh read the whole tree, which had nowhere to show it (a child
        # posts no message): 32 children, 32 reads of 33 sessions (issue 28.4).
        log.debug("the tree's status message is not posted yet; its root's refresh shows this child")
    else:  # a tree whose view no full read has stored (stored before views were kept)
        _refresh(child, surface)


def _present(session: Session, surface: ThreadSurface, view: View, root: Session | None) -> None:
    """Show ``view`` in the tree's status message. Updates from several sessions reach Slack in any order (real
    latency): one made from an older view may land after a sibling's that showed every task ended, and leave the
    tree shown working for good. So a session that will not show the tree again (its own line ended, or the root's
    refresh) and showed tasks still working reads the view once more after its update, and shows it again only if
    every task has ended since: the last update then shows the tree finished, and a tree still working is shown
    again by the end still to come. One point read more for such an end, and at most one update more per session."""
    shown = _show_view(session, surface, view, root)
    if shown is None or _all_ended(view) or not _wont_show_again(session, view):
        return
    again = tree_view.read(session.tree_root)
    if _all_ended(again) and _shown(again) != shown:
        _show_view(session, surface, again, root)


def _all_ended(view: View) -> bool:
    return all(line.ended for line in view.lines)


def _wont_show_again(session: Session, view: View) -> bool:
    """Whether ``session``'s own line, if it has one, shows it ended (else it updates the message again itself)."""
    own = next((line for line in view.lines if line.child_id == session.session_id), None)
    return own is None or own.ended


def _shown(view: View) -> list[tuple[str, str, bool]]:
    return [(line.child_id, line.text + line.state, line.ended) for line in in_tree_order(view.lines)]


def _show_view(session: Session, surface: ThreadSurface, view: View,
               root: Session | None) -> list[tuple[str, str, bool]] | None:  # fmt: skip
    """One update (or the first post) of the status message; what it showed if it was an update (None: posted, or
    nowhere to show it)."""
    root_id = session.tree_root
    lines = in_tree_order(view.lines)
    shown_lines = [(line.depth, line.text, line.state) for line in lines]
    done = sum(1 for line in lines if line.ended)
    running = done < len(lines)  # while tasks run, the message carries the tree's Stop button
    text, shown = blocks.tree_status(shown_lines, done=done, total=len(lines), stop=root_id if running else None)
    ts = view.status_ts or (root or sessions.get_session(root_id) or session).tree.status_ts
    if ts:
        slack.update(session.origin.channel, ts, text, blocks=shown)
        return _shown(view)
    if not surface.quiet:
        ts = surface.post(text, key=f"{root_id}:tree", blocks=shown)
        tree_view.set_status_ts(root_id, ts)
        if session.session_id == root_id:
            session.tree.status_ts = ts
        # Children that stored their lines before the message's ts was found it missing and showed nothing (a
        # sibling after them may have left its update to them): read once more, and show what changed.
        again = tree_view.read(root_id)
        if _shown(again) != _shown(view):
            return _show_view(session, surface, again, root)
    return None

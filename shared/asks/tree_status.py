"""The thread's view of a delegation tree (flow 10): one message, updated in place, listing every delegated task
and its state. The top-level session posts it when it first delegates; after that any session of the tree
refreshes it (a child never posts a message of its own, it only edits this one). Best effort: a refusal by Slack or
Firestore is logged, and the next refresh shows the state again.
"""

from __future__ import annotations

import logging

from google.api_core import exceptions as gexc
from slack_sdk.errors import SlackApiError

from shared.slack import blocks
from shared.slack import client as slack
from shared.slack.surface import ThreadSurface
from shared.state import sessions
from shared.state.models import SessionStatus, WaitKind
from shared.state.session_model import Session

log = logging.getLogger(__name__)

_ENDED = {
    SessionStatus.DONE: ":white_check_mark: done",
    SessionStatus.FAILED: ":x: failed",
    SessionStatus.STOPPED: ":octagonal_sign: stopped",
}


def state_of(child: Session) -> str:
    """A child's state as the thread shows it."""
    if child.status == SessionStatus.DONE and child.error:
        return ":warning: ended early: " + child.error
    if child.status in _ENDED:
        return _ENDED[child.status]
    if child.status == SessionStatus.PAUSED:
        kinds = {w.kind for w in child.waiting if not w.released}
        if WaitKind.APPROVAL in kinds:
            return ":lock: waiting for an approval"
        if WaitKind.CHILD in kinds:
            return ":hourglass: waiting for its own delegated tasks"
        if WaitKind.PARENT_ANSWER in kinds:
            return ":raising_hand: waiting for the parent's answer"
        return ":double_vertical_bar: paused"
    return ":gear: working"  # queued or running: its task is on its way


def in_tree_order(members: list[Session]) -> list[Session]:
    """Each child after its parent, siblings in the order of the calls that started them."""
    by_parent: dict[str | None, list[Session]] = {}
    ids = {m.session_id for m in members}
    for member in members:
        parent = member.tree.parent_id if member.tree.parent_id in ids else None
        by_parent.setdefault(parent, []).append(member)
    ordered: list[Session] = []

    def visit(parent: str | None) -> None:
        for child in sorted(
            by_parent.get(parent, []), key=lambda c: (c.tree.delegate_seq or 0, c.tree.delegate_index or 0)
        ):
            ordered.append(child)
            visit(child.session_id)

    visit(None)
    return ordered


def refresh(session: Session, surface: ThreadSurface) -> None:
    """Show the current state of ``session``'s tree in its status message (posting it if a top-level session has
    not yet)."""
    try:
        _refresh(session, surface)
    except (SlackApiError, gexc.GoogleAPICallError) as exc:
        log.warning("could not refresh the delegated tasks' status message", extra={"error": str(exc)})


def _refresh(session: Session, surface: ThreadSurface) -> None:
    root_id = session.tree_root
    members = in_tree_order(sessions.tree_members(root_id))
    if not members:
        return
    lines = [(member.tree.depth, member.text, state_of(member)) for member in members]
    done = sum(1 for member in members if member.status in _ENDED)
    running = done < len(members)  # while tasks run, the message carries the tree's Stop button
    text, shown = blocks.tree_status(lines, done=done, total=len(members), stop=root_id if running else None)
    root = session if session.session_id == root_id else sessions.get_session(root_id)
    ts = root.tree.status_ts if root is not None else None
    if ts:
        slack.update(session.origin.channel, ts, text, blocks=shown)
    elif not surface.quiet:
        ts = surface.post(text, key=f"{root_id}:tree", blocks=shown)
        sessions.set_tree_status_ts(root_id, ts)
        if session.session_id == root_id:
            session.tree.status_ts = ts

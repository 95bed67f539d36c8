"""The console's rows: one per conversation (a request and every session that worked on it), with its state.

A request's continuations (an answer's ``answer-q-…``, the decisions' ``resume-…``, a late child result's
``result-child-…``), narration retries and delegated children belong to the mention they lead back to
(``shared.state.origin``). Its state is what a person needs to know: who it waits for, that it works, or how it
ended. Pure functions of stored records, so they are tested without a stack.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from shared.state.models import Approval, Question, SessionKind, SessionStatus, WaitKind
from shared.state.origin import origin_of
from shared.state.session_model import Session

Json = dict[str, Any]
UNFINISHED = {SessionStatus.QUEUED, SessionStatus.RUNNING, SessionStatus.PAUSED}


def role(session: Session) -> str:
    """What a session is to its conversation, in words."""
    if session.kind == SessionKind.MENTION:
        return "the request"
    if session.kind == SessionKind.CHILD:
        return "a delegated task"
    if session.kind == SessionKind.RETRY:
        return "a retry that reports what happened"
    kinds = {w.kind for w in session.waiting}
    if WaitKind.APPROVAL in kinds:
        return "resumed after the decisions"
    if session.question_id or kinds & {WaitKind.QUESTION, WaitKind.MCP_INPUT}:
        return "resumed by an answer"
    if session.late_note is not None:
        return "resumed by a task's late result"
    return "a continuation"


def root_of(session: Session, by_id: dict[str, Session]) -> Session:
    """The mention a session leads back to among ``by_id`` (itself when the chain leaves the listing)."""
    current, seen = session, {session.session_id}
    while (origin := origin_of(current)) and origin in by_id and origin not in seen:
        seen.add(origin)
        current = by_id[origin]
    return current


def state(members: Sequence[Session], questions: Sequence[Question], approvals: Sequence[Approval],
          name: Callable[[str | None], str]) -> tuple[str, str]:  # fmt: skip
    """``(kind, label)``: kind is waiting, working, done, failed or stopped, for the page's colour."""
    ids = {m.session_id for m in members}
    asked = [q for q in questions if q.session_id in ids]
    pending = [a for a in approvals if a.session_id in ids]
    if pending:
        return "waiting", "waiting for an approval" + ("s" if len(pending) > 1 else "") + f" ({pending[0].tool})"
    if asked:
        who = name(asked[0].requester) if asked[0].requester else "an operator"
        return "waiting", f"waiting for an operator's answer (asked for {who})"
    live = [m for m in members if m.status in UNFINISHED]
    if any(m.status in {SessionStatus.RUNNING, SessionStatus.QUEUED} for m in live):
        return "working", "working"
    if live:
        waiting_on_children = any(m.awaited(WaitKind.CHILD) for m in live)
        return "waiting", "waiting for its delegated tasks" if waiting_on_children else "paused"
    top = [m for m in members if m.kind != SessionKind.CHILD] or list(members)
    last = max(top, key=lambda m: (m.ended_at or m.created_at, m.created_at))
    status = last.status.value if last.status != SessionStatus.SILENT_EXIT else "failed"
    label = {"done": "done", "failed": "failed", "stopped": "stopped"}.get(status, status)
    if status == "failed" and last.error:
        label = f"failed: {last.error[:80]}"
    return (status if status in {"done", "failed", "stopped"} else "done"), label


def group(sessions: Sequence[Session], questions: Sequence[Question], approvals: Sequence[Approval],
          name: Callable[[str | None], str], readable: Callable[[str], str]) -> list[Json]:  # fmt: skip
    """One row per conversation, newest first, each with its sessions in the order they started."""
    by_id = {s.session_id: s for s in sessions}
    members: dict[str, list[Session]] = {}
    for session in sessions:
        members.setdefault(root_of(session, by_id).session_id, []).append(session)
    rows: list[tuple[datetime, Json]] = []
    for root_id, group_members in members.items():
        root = by_id[root_id]
        group_members.sort(key=lambda s: (s.created_at, s.tree.depth))
        kind, label = state(group_members, questions, approvals, name)
        tokens: dict[str, int] = {}
        for member in group_members:
            for key, value in (member.limits.tokens or {}).items():
                tokens[key] = tokens.get(key, 0) + int(value)
        rows.append((root.created_at, {
            "id": root_id,
            "request": readable(root.text)[:300],
            "user": root.origin.trigger_user,
            "who": name(root.requester),
            "channel": root.origin.channel,
            "thread_ts": root.origin.thread_ts,
            "ts": root.origin.trigger_ts,
            "created_at": root.created_at,
            "state": kind,
            "label": label,
            "tokens": tokens,
            "sessions": [
                {"id": m.session_id, "role": role(m), "status": m.status.value, "depth": m.tree.depth,
                 "parent": m.tree.parent_id, "text": readable(m.text)[:200], "created_at": m.created_at,
                 "tokens": m.limits.tokens, "transcript": m.transcript}
                for m in group_members
            ],
        }))  # fmt: skip
    rows.sort(key=lambda row: row[0], reverse=True)
    return [row for _, row in rows]

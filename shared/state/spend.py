"""Daily token budgets (flow 13): the tokens each person's sessions spent today, and the workspace's.

One document per person and day, ``spend/{day}-{user}``, gets every model turn's tokens added in the commit that
stores the turn (a blind increment: no read, and only that person's sessions write it). Before each model turn a
session reads its person's document and the day's total (one aggregation query), so a session that would cross a
budget stops at that step boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared import config
from shared.state import ids
from shared.state.firestore import db
from shared.state.session_model import Session
from shared.state.updates import spend_added

SPEND = "spend"
COUNTED = ("prompt", "output", "thinking")  # cached tokens are part of the prompt's


def day_of(at: datetime) -> str:
    return at.strftime("%Y-%m-%d")


def spend_ref(day: str, user: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(SPEND).document(ids.spend_doc(day, user))
    return ref


@dataclass(frozen=True)
class Budgets:
    """Tokens a person's sessions, and the whole workspace's, may spend in a day (UTC); 0 turns one off."""

    user: int
    workspace: int

    @property
    def on(self) -> bool:
        return bool(self.user or self.workspace)


def in_force() -> Budgets:
    current = config.settings()
    return Budgets(current.user_daily_tokens, current.workspace_daily_tokens)


def counted(tokens: dict[str, int]) -> int:
    """The tokens of a turn's (or a session's) counts that a budget counts, each clamped at zero."""
    return sum(max(0, int(tokens.get(kind) or 0)) for kind in COUNTED)


def record(transaction: firestore.Transaction, session: Session, tokens: int, at: datetime) -> None:
    """Add one turn's tokens to its person's day, in the transaction that stores the turn. Recorded spend never
    decreases: a count below zero (a session's stored totals from a bad report) adds nothing."""
    if tokens <= 0:
        return
    day = day_of(at)
    transaction.set(spend_ref(day, session.requester), spend_added(day=day, user=session.requester, tokens=tokens),
                    merge=True)  # fmt: skip


def spent_today(user: str, at: datetime) -> tuple[int, int]:
    """Tokens this person's sessions, and the workspace's, spent on ``at``'s day."""
    day = day_of(at)
    mine = int((spend_ref(day, user).get().to_dict() or {}).get("tokens") or 0)
    return mine, day_total(day)


def day_total(day: str) -> int:
    """Tokens all sessions spent on ``day`` (one aggregation query: one row of one result)."""
    query: Any = db().collection(SPEND).where(filter=FieldFilter("day", "==", day))
    return sum(int(result.value or 0) for row in query.sum("tokens", alias="tokens").get() for result in row)


def over(session: Session, at: datetime, budgets: Budgets) -> str | None:
    """Which daily budget this session's person, or the workspace, has spent, if one is."""
    mine, total = spent_today(session.requester, at)
    if budgets.user and mine >= budgets.user:
        return f"the daily budget of {budgets.user:,} tokens for <@{session.requester}>'s requests"
    if budgets.workspace and total >= budgets.workspace:
        return f"the workspace's daily budget of {budgets.workspace:,} tokens"
    return None

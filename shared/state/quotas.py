"""Ingress rate limits (flow 13): how many sessions a person and a channel may start per hour, and run at once.

Each person and each channel has a document of its own, ``limits/person-{user}`` and ``limits/channel-{channel}``:
the current hour's starts and the sessions that run now. The ingress reads the two (one request) in the transaction
that creates a session and writes them in the same commit. Starts by different people in different channels touch
different documents, so a busy workspace's starts do not wait for each other; only one person's (or one
channel's) burst is serialised, which is what a limit on it means. A scope whose limits are both 0 has no document.

A session stops counting as running when it first pauses or ends (its step commit removes it, without a read); an
entry older than a session can live (its worker died, the sweep ends it) no longer counts either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore

from shared import config
from shared.state.firestore import db

LIMITS = "limits"
# Longer than any session can run (SESSION_WALL_SECONDS is at most 1700 s): an older entry is a dead worker's.
RUNNING_FOR = timedelta(minutes=30)


@dataclass(frozen=True)
class Scope:
    """One person's or one channel's limits, and the document that counts against them."""

    kind: str  # "person" or "channel": the words of the refusal
    key: str  # the Slack user or channel id
    per_hour: int
    running: int

    @property
    def ref(self) -> firestore.DocumentReference:
        ref: firestore.DocumentReference = db().collection(LIMITS).document(f"{self.kind}-{self.key}")
        return ref

    def refused(self, doc: dict[str, Any], *, at: datetime, running_for: timedelta) -> Refusal | None:
        """Why this scope refuses one more start, or None."""
        where = "per person" if self.kind == "person" else "in this channel"
        if self.per_hour and started_this_hour(doc, at) >= self.per_hour:
            next_hour = at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            return Refusal(f"{self.per_hour} requests per hour {where}", next_hour)
        if self.running and len(live(doc, at=at, running_for=running_for)) >= self.running:
            return Refusal(f"{self.running} requests running at once {where}", None)
        return None

    def admitted(self, doc: dict[str, Any], *, session_id: str, at: datetime, running_for: timedelta) -> dict[str, Any]:
        """The document after this start: this hour's count one higher, the session running (while a limit reads
        it), dead workers' entries dropped."""
        running = live(doc, at=at, running_for=running_for)
        if self.running:
            running[session_id] = at
        return {"hour": hour_of(at), "started": started_this_hour(doc, at) + 1, "running": running}


@dataclass(frozen=True)
class Quota:
    """The limits in force; 0 turns one off."""

    user_per_hour: int
    channel_per_hour: int
    user_running: int
    channel_running: int
    running_for: timedelta  # the longest a session can run: an older entry is a dead worker's

    @property
    def on(self) -> bool:
        return any((self.user_per_hour, self.channel_per_hour, self.user_running, self.channel_running))

    def scopes(self, *, user: str, channel: str) -> list[Scope]:
        """The person's and the channel's limits, those with any limit on."""
        both = [Scope("person", user, self.user_per_hour, self.user_running),
                Scope("channel", channel, self.channel_per_hour, self.channel_running)]  # fmt: skip
        return [scope for scope in both if scope.per_hour or scope.running]


@dataclass(frozen=True)
class Refusal:
    """Which limit a start would cross, and when it frees up (None: when a running session ends or pauses)."""

    limit: str
    resets: datetime | None


def in_force() -> Quota:
    """The limits configuration sets."""
    current = config.settings()
    return Quota(current.user_sessions_per_hour, current.channel_sessions_per_hour, current.user_running_sessions,
                 current.channel_running_sessions, RUNNING_FOR)  # fmt: skip


def hour_of(at: datetime) -> str:
    return at.strftime("%Y%m%d%H")


def started_this_hour(doc: dict[str, Any], at: datetime) -> int:
    return int(doc.get("started") or 0) if doc.get("hour") == hour_of(at) else 0


def live(doc: dict[str, Any], *, at: datetime, running_for: timedelta) -> dict[str, datetime]:
    """The sessions that still count as running (entries of dead workers left out)."""
    oldest = at - running_for
    running = doc.get("running") or {}
    return {sid: started for sid, started in running.items() if isinstance(started, datetime) and started > oldest}


def read(transaction: firestore.Transaction, scopes: list[Scope]) -> list[dict[str, Any]]:
    """The scopes' documents, in their order, read in one request."""
    by_path = {snap.reference.path: snap.to_dict() or {} for snap in transaction.get_all([s.ref for s in scopes])}
    return [by_path.get(scope.ref.path, {}) for scope in scopes]


def release(transaction: firestore.Transaction, session_id: str, *, user: str, channel: str) -> None:
    """This session no longer runs (it paused or ended): blind writes, in the commit that says so."""
    for scope in in_force().scopes(user=user, channel=channel):
        if scope.running:
            transaction.set(scope.ref, {"running": {session_id: firestore.DELETE_FIELD}}, merge=True)

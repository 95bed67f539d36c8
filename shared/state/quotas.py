"""Ingress rate limits (flow 13): how many sessions a person and a channel may start per hour, and run at once.

One document, ``limits/ingress``, holds the current hour's starts per user and per channel and the sessions that
run now. The ingress reads it in the transaction that creates a session and writes it in the same commit: one
read and one write more per mention, whatever the number of users. A session stops counting as running when it
first pauses or ends (its step commit removes it, without a read); an entry older than a session can live (its
worker died, the sweep ends it) no longer counts either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore

from shared import config
from shared.state.firestore import db

LIMITS = "limits"
INGRESS = "ingress"
# Longer than any session can run (SESSION_WALL_SECONDS is at most 1700 s): an older entry is a dead worker's.
RUNNING_FOR = timedelta(minutes=30)


def ingress_ref() -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(LIMITS).document(INGRESS)
    return ref


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


def refusal(doc: dict[str, Any], *, user: str, channel: str, at: datetime, quota: Quota) -> Refusal | None:
    """Why this start is refused, or None."""
    this_hour = doc.get("hour") == hour_of(at)
    users = (doc.get("users") or {}) if this_hour else {}
    channels = (doc.get("channels") or {}) if this_hour else {}
    next_hour = at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if quota.user_per_hour and users.get(user, 0) >= quota.user_per_hour:
        return Refusal(f"{quota.user_per_hour} requests per hour per person", next_hour)
    if quota.channel_per_hour and channels.get(channel, 0) >= quota.channel_per_hour:
        return Refusal(f"{quota.channel_per_hour} requests per hour in this channel", next_hour)
    running = live(doc, at=at, quota=quota)
    if quota.user_running and sum(1 for r in running.values() if r.get("user") == user) >= quota.user_running:
        return Refusal(f"{quota.user_running} requests running at once per person", None)
    if quota.channel_running and sum(1 for r in running.values() if r.get("channel") == channel) >= (
        quota.channel_running
    ):
        return Refusal(f"{quota.channel_running} requests running at once in this channel", None)
    return None


def live(doc: dict[str, Any], *, at: datetime, quota: Quota) -> dict[str, dict[str, Any]]:
    """The sessions that still count as running (entries of dead workers left out)."""
    oldest = at - quota.running_for
    return {sid: r for sid, r in (doc.get("running") or {}).items() if isinstance(r, dict) and r.get("at", at) > oldest}


def admitted(doc: dict[str, Any], *, session_id: str, user: str, channel: str, at: datetime,
             quota: Quota) -> dict[str, Any]:  # fmt: skip
    """The document after this start: this hour's counts one higher, the session running."""
    this_hour = doc.get("hour") == hour_of(at)
    users = dict((doc.get("users") or {}) if this_hour else {})
    channels = dict((doc.get("channels") or {}) if this_hour else {})
    users[user] = users.get(user, 0) + 1
    channels[channel] = channels.get(channel, 0) + 1
    running = live(doc, at=at, quota=quota)
    if quota.user_running or quota.channel_running:  # kept only while a limit reads it
        running[session_id] = {"user": user, "channel": channel, "at": at}
    return {"hour": hour_of(at), "users": users, "channels": channels, "running": running}


def release(transaction: firestore.Transaction, session_id: str) -> None:
    """This session no longer runs (it paused or ended): a blind write, in the commit that says so."""
    transaction.set(ingress_ref(), {"running": {session_id: firestore.DELETE_FIELD}}, merge=True)

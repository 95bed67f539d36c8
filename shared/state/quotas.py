"""Ingress rate limits (flow 13): how many sessions a person and a channel may start per hour, and run at once.

Counted without reading, in the commit that creates the session (no transaction): each person and each channel
with a limit on has a counter of the hour's starts, time-bucketed, ``limits/person-{user}-h{YYYYMMDDHH}`` (a new
document every hour, removed by TTL), and a running counter with the sessions that run, ``limits/person-{user}``
(``channel-{channel}`` likewise). The commit adds to them with Firestore's server-side ``Increment``, and its answer
carries the counts after it, so a start learns at once whether it fit: a simultaneous burst is cut exactly at the
limit, whatever the concurrency. A start past a limit is taken back (its counts, its session) before anything else
sees it. A write more per counter, no read, no round trip more.

A session stops counting as running when it first leaves ``queued`` or ``running`` for anything else: it pauses or
ends (its step commit), is stopped while queued or paused, is ended by the sweep or handed over. Every such write
goes through ``released`` in its own transaction: blind writes to the counters the session document lists, and the
list cleared in the same commit, so each start is taken back exactly once, whichever path ends it and however often
those paths race or repeat. One whose worker died is still counted until the sweep ends it or a start is refused
on it: the refusal recounts the running sessions from their start times (an entry older than a session can live
is a dead worker's) and corrects the counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore

from shared import config
from shared.state.firestore import EVENT_EXPIRES_FIELD, db, transact
from shared.state.updates import running_recounted, running_released

LIMITS = "limits"
# Longer than any session can run (SESSION_WALL_SECONDS is at most 1700 s): an older entry is a dead worker's.
RUNNING_FOR = timedelta(minutes=30)
KEPT_FOR = timedelta(days=2)  # a counter nobody wrote for this long is deleted by TTL


@dataclass(frozen=True)
class Refusal:
    """Which limit a start would cross, and when it frees up (None: when a running session ends or pauses)."""

    limit: str
    resets: datetime | None


@dataclass(frozen=True)
class Scope:
    """One person's or one channel's limits, and the documents that count against them."""

    kind: str  # "person" or "channel": the words of the refusal
    key: str  # the Slack user or channel id
    per_hour: int
    running: int

    @property
    def ref(self) -> firestore.DocumentReference:
        """The running counter, with the sessions it counts."""
        ref: firestore.DocumentReference = db().collection(LIMITS).document(f"{self.kind}-{self.key}")
        return ref

    def hour_ref(self, at: datetime) -> firestore.DocumentReference:
        """The counter of the starts in ``at``'s hour (a document per hour: nothing to reset, TTL removes it)."""
        ref: firestore.DocumentReference = db().collection(LIMITS).document(f"{self.kind}-{self.key}-h{hour_of(at)}")
        return ref

    def count(self, batch: firestore.WriteBatch, session_id: str, at: datetime, by: int = 1) -> list[str]:
        """Add ``by`` (-1 takes a start back) to this scope's counters in ``batch``, a write each; their names, in
        the order of the writes (each write's one transform result is its counter's value after the commit)."""
        expires = {EVENT_EXPIRES_FIELD: at + KEPT_FOR}
        counted = []
        if self.per_hour:
            batch.set(self.hour_ref(at), {"started": firestore.Increment(by), **expires}, merge=True)
            counted.append("hour")
        if self.running:
            entry = at if by > 0 else firestore.DELETE_FIELD
            batch.set(self.ref, {"running": firestore.Increment(by), "sessions": {session_id: entry}, **expires},
                      merge=True)  # fmt: skip
            counted.append("running")
        return counted

    def refused(self, counts: dict[str, int], at: datetime) -> Refusal | None:
        """Why this scope refuses the start that brought its counters to ``counts``, or None."""
        where = "per person" if self.kind == "person" else "in this channel"
        if self.per_hour and counts["hour"] > self.per_hour:
            next_hour = at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            return Refusal(f"{self.per_hour} requests per hour {where}", next_hour)
        if self.running and counts["running"] > self.running:
            return Refusal(f"{self.running} requests running at once {where}", None)
        return None


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


def in_force() -> Quota:
    """The limits configuration sets."""
    current = config.settings()
    return Quota(current.user_sessions_per_hour, current.channel_sessions_per_hour, current.user_running_sessions,
                 current.channel_running_sessions, RUNNING_FOR)  # fmt: skip


def hour_of(at: datetime) -> str:
    return at.strftime("%Y%m%d%H")


def counted(result: Any) -> int:
    """The value a committed counter write left (its one transform result: the ``Increment``)."""
    values = list(getattr(result, "transform_results", None) or [])
    if len(values) != 1:
        raise ValueError(f"expected one count from a counter write, got {len(values)}")
    return int(values[0].integer_value)


def recount(scope: Scope, *, at: datetime, running_for: timedelta) -> int:
    """A refused start's second look at ``scope``'s running sessions: entries older than a session can live are
    dead workers' (dropped), and the counter is set to what remains. Returns that count (this start included)."""
    ref = scope.ref

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> int:
        doc = ref.get(transaction=transaction).to_dict() or {}
        oldest = at - running_for
        sessions = doc.get("sessions") or {}
        live = {sid: began for sid, began in sessions.items() if isinstance(began, datetime) and began > oldest}
        if len(live) != len(sessions) or int(doc.get("running") or 0) != len(live):
            transaction.update(ref, running_recounted(running=len(live), sessions=live))
        return len(live)

    counted: int = transact(run)
    return counted


RELEASES = "limits_counted"  # the session document's list of running counters its start counted against


def released(transaction: firestore.Transaction, session_id: str, current: dict[str, Any]) -> dict[str, Any]:
    """The session whose document ``current`` was just read in ``transaction`` leaves ``queued`` or ``running``:
    its start's running counters are taken back in that transaction, and the returned fields (to add to the
    transaction's update of the session) clear its list of them, so no later path takes them back again. Callers
    read ``RELEASES`` with the session; reading it is enough, whatever the session's status."""
    counters = list(current.get(RELEASES) or [])
    if not counters:
        return {}
    release(transaction, session_id, counters)
    return {RELEASES: []}


def release(transaction: firestore.Transaction, session_id: str, counters: list[str]) -> None:
    """Blind writes to the running counters ``counters`` (a session's ``RELEASES``): it no longer runs."""
    for name in counters:
        ref = db().collection(LIMITS).document(name)
        transaction.set(ref, running_released(session_id), merge=True)

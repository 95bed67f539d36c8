"""Every composite index a query of the product needs; Terraform must declare each one (checked by a test)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.state.firestore import APPROVALS, QUESTIONS, SESSIONS


@dataclass(frozen=True)
class Index:
    collection: str
    fields: tuple[tuple[str, str], ...]  # (field path, "ASCENDING" | "DESCENDING"), in order


INDEXES: tuple[Index, ...] = (
    # The sweep: open questions by age.
    Index(QUESTIONS, (("status", "ASCENDING"), ("asked_at", "ASCENDING"))),
    # The sweep: pending approvals by age.
    Index(APPROVALS, (("status", "ASCENDING"), ("asked_at", "ASCENDING"))),
    # The sweep: sessions queued too long (their task was never created), or paused (a child on its question to its
    # parent, a top-level session on what its waiting record names), oldest first.
    Index(SESSIONS, (("status", "ASCENDING"), ("updated_at", "ASCENDING"))),
    # The sweep: silent exits not yet narrated or escalated.
    Index(SESSIONS, (("status", "ASCENDING"), ("followed_up", "ASCENDING"), ("updated_at", "ASCENDING"))),
    # The sweep: running sessions whose lease expired long ago (their task ran out of retries).
    Index(SESSIONS, (("status", "ASCENDING"), ("lease_until", "ASCENDING"))),
    # Messages during a running session: the running session of a thread.
    Index(SESSIONS, (("channel", "ASCENDING"), ("thread_ts", "ASCENDING"), ("status", "ASCENDING"))),
)

"""An operator's decision on an approve-tier call: its approval document, resolved once it is no longer pending
(approved, denied, expired)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.cloud import firestore

from shared.state.firestore import APPROVALS, db
from shared.state.models import ApprovalStatus, Waiting, WaitKind


@dataclass(frozen=True)
class ApprovalWait:
    kind: WaitKind = WaitKind.APPROVAL

    def ref(self, entry: Waiting) -> firestore.DocumentReference:
        ref: firestore.DocumentReference = db().collection(APPROVALS).document(entry.key)
        return ref

    def resolved(self, entry: Waiting, found: dict[str, Any] | None, asker: dict[str, Any]) -> bool:
        return (found or {}).get("status") != ApprovalStatus.PENDING.value


WAIT = ApprovalWait()

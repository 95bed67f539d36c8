"""A blocking ``delegate``: the child session's document, resolved once the child has ended (a missing child never
will, so it counts as ended)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from google.cloud import firestore

from shared.state.firestore import session_ref
from shared.state.models import Waiting, WaitKind
from shared.state.sessions import UNFINISHED


@dataclass(frozen=True)
class ChildWait:
    kind: WaitKind = WaitKind.CHILD

    def ref(self, entry: Waiting) -> firestore.DocumentReference:
        return session_ref(entry.key)

    def resolved(self, entry: Waiting, found: dict[str, Any] | None, asker: dict[str, Any]) -> bool:
        return (found or {}).get("status") not in UNFINISHED


WAIT = ChildWait()

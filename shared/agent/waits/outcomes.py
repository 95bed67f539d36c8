"""What a waiting record came to, read once for its resumption (issue 28.1): every kind names the documents its
live entries' outcomes are in (``refs``), the resumption reads them all in ONE batched read (none when nothing is
to be read: a record of a parent's answer reads nothing), and each kind takes its own from that read (``found``).

A run reads them as it starts, beside its transcript's query when its claim did not read either (``RunState``): both
only after its claim, so what they read is final (a record is resumed once everything in it is resolved, and the
approved call's ledger entries are written only under the lease this run now holds)."""

from __future__ import annotations

from typing import Any

from google.cloud import firestore

from shared.agent.waits import kinds
from shared.state import batched
from shared.state.batched import Docs
from shared.state.models import Waiting, WaitKind
from shared.state.session_model import Session


def live(record: list[Waiting]) -> list[Waiting]:
    """The entries whose outcomes are read (a released one no longer waits: its result comes as a note)."""
    return [w for w in record if not w.released]


def refs(session: Session, record: list[Waiting]) -> list[firestore.DocumentReference]:
    """Every document the outcomes of ``record``'s live entries are read from, all kinds together."""
    if not record:
        return []
    seq, entries = record[0].seq, live(record)
    return [ref for kind, wait in kinds.KINDS.items() for ref in wait.refs(session, seq, _of_kind(entries, kind))]


def found(session: Session, record: list[Waiting], docs: Docs) -> dict[WaitKind, Any]:
    """What each kind's live entries of ``record`` came to, from ``docs`` (as ``refs`` named them)."""
    seq, entries = (record[0].seq if record else 0), live(record)
    return {kind: wait.found(session, seq, _of_kind(entries, kind), docs) for kind, wait in kinds.KINDS.items()}


def read(session: Session, record: list[Waiting], *, known: Docs | None = None) -> dict[WaitKind, Any]:
    """What ``record`` came to: the documents not in ``known`` (read already) in one batched read, if any."""
    return found(session, record, batched.read(refs(session, record), known=known))


def _of_kind(record: list[Waiting], kind: WaitKind) -> list[Waiting]:
    return [w for w in record if w.kind == kind]

"""What a resumed turn's waiting record came to, read in one round trip (issue 28.1).

A paused turn resumes once everything its record waits on is resolved: the answered questions (an operator's, an
MCP server's request), the decided approvals, the ended children, and the ledger entries of the approved calls
(a takeover's re-run finds a call already started or done). All of them are named by the record and the
transcript, so one batched read gets them all, where reading each kind apart took a round trip per kind. The
worker makes that read beside the transcript's query, right after its claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shared.state import ledger
from shared.state.firestore import db
from shared.state.models import Approval, Question, Waiting, WaitKind
from shared.state.session_model import Session
from shared.state.waiting import waited_ref

_ASKED = frozenset({WaitKind.QUESTION, WaitKind.MCP_INPUT})


@dataclass(frozen=True)
class Outcomes:
    """What ``record`` came to: each live entry's document by kind (a missing one is left out), and the ledger
    entries of its approval calls by call index."""

    record: tuple[Waiting, ...]
    questions: dict[str, Question] = field(default_factory=dict)
    approvals: dict[str, Approval] = field(default_factory=dict)
    children: dict[str, Session] = field(default_factory=dict)
    ledgered: dict[int, ledger.Entry] = field(default_factory=dict)

    def of(self, record: list[Waiting]) -> bool:
        """Whether these are the outcomes of ``record`` (read for it)."""
        return tuple(record) == self.record


def read(record: list[Waiting], session: Session) -> Outcomes:
    """The outcomes of ``record`` (a paused turn of ``session``'s transcript), in one batched read: nothing is read
    for a released entry or a parent's answer (the session's own document holds it)."""
    live = [w for w in record if not w.released and w.kind != WaitKind.PARENT_ANSWER]
    seq = record[0].seq if record else 0  # the paused turn's
    calls = [w.index for w in record if w.kind == WaitKind.APPROVAL]
    refs = [waited_ref(w) for w in live] + [ledger.call_ref(session, seq, index) for index in calls]
    snaps: dict[str, dict[str, Any]] = {}
    if refs:
        found = db().get_all(refs)
        snaps = {snap.reference.path: data for snap in found if snap.exists and (data := snap.to_dict()) is not None}
    outcomes = Outcomes(tuple(record))
    for entry in live:
        data = snaps.get(waited_ref(entry).path)
        if data is None:
            continue
        if entry.kind in _ASKED:
            outcomes.questions[entry.key] = Question.from_doc(data)
        elif entry.kind == WaitKind.APPROVAL:
            outcomes.approvals[entry.key] = Approval.from_doc(data)
        else:
            outcomes.children[entry.key] = Session.from_doc(data)
    for index in calls:
        data = snaps.get(ledger.call_ref(session, seq, index).path)
        if data is not None:
            outcomes.ledgered[int(data["index"])] = ledger.entry_of(data)
    return outcomes

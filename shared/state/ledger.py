"""The tool-call ledger (flow 8): a call of an outward or non-idempotent tool is recorded ``started`` before it runs
and ``done`` after, each fenced by the session's lease.

The ``started`` record is committed before the call, in a commit of its own (``start``): nothing commits between
the moment the run decides to make the call and the call itself, and a record written any earlier (the claim, the
click's decision, the model step that asks for the call) would outlive a crash before the call ran and make a call
that never ran look as if it may have. Only the ``done`` records of the run's earlier calls ride in it.

The ``done`` record (``finished``) is not committed on its own: it is written with the run's next commit, the one
that stores the step carrying the call's result as its function response (``steps.commit_step``), or the next
ledger call's ``started`` record, whichever comes first (a call outside the ledger runs only once every earlier
call's result is recorded: ``record``). A run that ends before that commit other than by dying commits them with
``record`` first, under its lease (``shared.agent.runner``: an exception that leaves the run, a crash its retry
takes over or a Slack storm that fails it; ``shared.agent.ending``: a child's stop or failure, whose end is not a
step of the run). A worker killed after the call ran and before that commit leaves ``started`` without ``done``,
which a takeover reads as it always has: the outcome is unknown. A crash after it finds the result stored with the
step (the turn is no longer pending) or in the ledger (the next call had started, or the run recorded it as it
ended).

The fence costs no read when it can (issue 28.1): a ``started`` record is committed with a touch of the session's
document preconditioned on the update time this worker's own last write gave it (``lease.last_written``), which
holds only if nobody wrote the document since, so the session is still running under this worker's lease. When
anything else wrote it meanwhile (a heartbeat, a note), the precondition fails, nothing is written, and the record
is committed in a transaction that reads the session first. A step commit reads the session in its transaction,
except while every step commit since a claim that saw the session settled was one commit fenced as a started
record is (``step_fence``): an approved call's done record rides in that one commit.

``sessions/{transcript}/calls/{seq}-{index}``. After a takeover the runner reads the entries of the turn it
re-runs: a ``done`` call is not run again (its stored response is reused); a ``started`` one may or may not have
happened, and only an idempotent tool is called again (with the same idempotency key).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.state import lease
from shared.state.firestore import db, ledger_ref, now, session_ref, transact
from shared.state.models import SessionStatus
from shared.state.session_model import Session
from shared.state.steps import LeaseLost
from shared.state.updates import session_update

MAX_STORED_RESPONSE = 100_000  # characters of a call's response kept in the ledger


class CallStatus(StrEnum):
    STARTED = "started"
    DONE = "done"


@dataclass(frozen=True)
class Entry:
    key: str
    name: str
    status: CallStatus
    response: dict[str, Any] | None = None


def _ref(session: Session, seq: int, index: int, part: str = "") -> firestore.DocumentReference:
    return ledger_ref(session.transcript, seq, index, part)


def call_ref(session: Session, seq: int, index: int) -> firestore.DocumentReference:
    """The ledger entry of call ``index`` of step ``seq`` (its first round), for a read batched with others."""
    return _ref(session, seq, index)


def entry_of(data: dict[str, Any]) -> Entry:
    """A ledger entry as stored."""
    response = json.loads(data["response"]) if data.get("response") else None
    return Entry(data["key"], data["name"], CallStatus(data["status"]), response)


def entries(session: Session, seq: int, indices: list[int], *, part: str = "") -> dict[int, Entry]:
    """The ledger entries of the calls ``indices`` of step ``seq``, by call index (point reads). ``part`` names a
    later round of the same call (an MCP call resumed with the operator's input is ``-r1``, ``-r2``, …)."""
    if not indices:
        return {}
    found: dict[int, Entry] = {}
    for snap in db().get_all([_ref(session, seq, index, part) for index in indices]):
        data = snap.to_dict() if snap.exists else None
        if data is not None:
            found[int(data["index"])] = entry_of(data)
    return found


@dataclass(frozen=True)
class Done:
    """A call's ``done`` record, not written yet: it goes in the run's next fenced commit (``apply``)."""

    ref: firestore.DocumentReference
    fields: dict[str, Any]

    def apply(self, transaction: firestore.Transaction | firestore.WriteBatch) -> None:
        transaction.update(self.ref, self.fields)  # the entry exists: its ``started`` record was committed


def _fenced(session: Session, write: Callable[[Any], None]) -> None:
    """Run ``write(transaction)`` only while this worker still holds the session: in one commit preconditioned on
    its own last write of the session's document if it can, else in a transaction that reads the session."""
    ref = session_ref(session.session_id)
    known = lease.last_written(session)
    if known is not None:
        batch = db().batch()
        write(batch)  # the records first: the session's touch is the commit's last write
        batch.update(ref, session_update(updated_at=now()), option=db().write_option(last_update_time=known))
        try:
            written = batch.commit()
        except (gexc.FailedPrecondition, gexc.Aborted):
            pass  # the document changed since this worker wrote it (nothing was written): read it, as below
        else:
            lease.wrote(session, written[-1].update_time)
            return

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> None:
        current = ref.get(transaction=transaction, field_paths=["worker", "status"]).to_dict() or {}
        if current.get("worker") != session.lease.worker or current.get("status") != SessionStatus.RUNNING.value:
            raise LeaseLost(f"session is now {current.get('status')} under worker {current.get('worker')}")
        write(transaction)

    transact(run)


def start(session: Session, *, seq: int, index: int, key: str, name: str, args: str, part: str = "",
          done: Sequence[Done] = ()) -> None:  # fmt: skip
    """Record that the call is about to run (``create()``: a call starts once), with the ``done`` records of the
    run's earlier calls not written yet (they ran to the end before this call starts)."""
    doc = {"key": key, "name": name, "args": args, "seq": seq, "index": index, "status": CallStatus.STARTED.value,
           "session_id": session.session_id, "started_at": now()}  # fmt: skip

    def write(transaction: Any) -> None:
        for each in done:
            each.apply(transaction)
        transaction.create(_ref(session, seq, index, part), doc)

    _fenced(session, write)


def finished(session: Session, *, seq: int, index: int, response: dict[str, Any], part: str = "") -> Done:
    """The call's ``done`` record with its response, to be written with the run's next fenced commit."""
    text = json.dumps(response, default=str, ensure_ascii=False)
    if len(text) > MAX_STORED_RESPONSE:
        shortened = {"result": text[:MAX_STORED_RESPONSE], "note": f"[truncated, {len(text):,} characters]"}
        text = json.dumps(shortened, ensure_ascii=False)
    fields = {"status": CallStatus.DONE.value, "response": text, "done_at": now()}
    return Done(_ref(session, seq, index, part), fields)


def record(session: Session, done: Sequence[Done]) -> None:
    """The ``done`` records in a fenced commit of their own (when something other than a step or a ledger call
    comes next)."""
    if not done:
        return

    def write(transaction: Any) -> None:
        for each in done:
            each.apply(transaction)

    _fenced(session, write)

"""The Firestore base every aggregate module builds on: the client, the clock, collection names, references.

Collections: ``events`` (Slack de-duplication, with a TTL field), ``sessions`` (with their ``steps``),
``questions``, ``threads`` (per Slack thread: its open questions). The client comes from ``shared.deps``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared import deps
from shared.errors import Contended
from shared.state import ids

EVENTS = "events"
THREADS = "threads"
STEPS = "steps"  # subcollection of a session: its transcript and audit log
CALLS = "calls"  # subcollection of a transcript's first session: its tool calls' ledger
SESSIONS = "sessions"
QUESTIONS = "questions"
APPROVALS = "approvals"
FEEDBACK = "feedback"  # one document per (session, person): their 👍 or 👎 on its final answer
DM_CONVERSATIONS = "dm_conversations"  # one document per DM: its latest conversation at the top level

# The field Firestore's TTL policy on ``events`` deletes by (declared in Terraform).
EVENT_EXPIRES_FIELD = "expires_at"

# What a ``create()`` of an existing document raises (the emulator and production differ).
ALREADY_EXISTS = (gexc.AlreadyExists, gexc.Conflict)


T = TypeVar("T")

# How many times ``contended`` runs the client's whole round of commit attempts before it gives up for contention.
COMMIT_ROUNDS = 3


def contended(run: Callable[[firestore.Transaction], T], *, attempts: int = 8, rounds: int = COMMIT_ROUNDS) -> T:
    """Run a ``@firestore.transactional`` function on a document many transactions want at once (the children of
    one parent ending together, racing answers to one question): its commit is retried more often than the client's
    default of 5, and the whole transaction again (with jittered backoff) when a read is aborted, which the client
    does not retry (a read times out waiting for another transaction's lock), or when the client's commit attempts
    ran out: it retries at once, with no backoff, so transactions aborting each other on the emulator can stay in
    step through all of them (``rounds`` of them in all). ``Contended`` when it gives up for contention."""
    rounds_left = rounds
    for attempt in range(attempts):
        try:
            return run(db().transaction(max_attempts=attempts))
        except (gexc.Aborted, gexc.InvalidArgument) as exc:
            if attempt == attempts - 1 or not (isinstance(exc, gexc.Aborted) or forgotten(exc)):
                gave_up(exc)
                raise
        except ValueError as exc:
            rounds_left -= 1
            if attempt == attempts - 1 or rounds_left <= 0 or not isinstance(exc.__cause__, gexc.Aborted):
                gave_up(exc)
                raise
        time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # noqa: S311 - jitter, not secrecy
    raise AssertionError("unreachable")


def gave_up(exc: Exception) -> None:
    """``Contended`` (from ``exc``) if a transaction's ``exc`` says it gave up for contention: an ``Aborted``, or the
    ``ValueError`` the client's ``transactional`` raises from the ``Aborted`` of its last commit attempt. Any other
    error is the caller's to raise."""
    if isinstance(exc, gexc.Aborted) or (isinstance(exc, ValueError) and isinstance(exc.__cause__, gexc.Aborted)):
        raise Contended(f"a Firestore transaction gave up for contention: {exc}") from exc


def forgotten(exc: BaseException) -> bool:
    """Whether Firestore refused a transaction it no longer knows (its server restarted, or it expired): nothing of
    it was applied, so it may run again from its reads. The emulator says INVALID_ARGUMENT, Firestore may say so or
    ABORTED (which the client library retries itself)."""
    return isinstance(exc, gexc.InvalidArgument) and "transaction" in str(exc).lower()


def transact(run: Callable[[firestore.Transaction], T], *, attempts: int = 3) -> T:
    """Run a ``@firestore.transactional`` function; again, from its reads, if Firestore forgot the transaction
    meanwhile (an outage between its reads and its commit); ``Contended`` if its commit kept aborting. Any other
    error is the caller's."""
    for attempt in range(attempts):
        try:
            return run(db().transaction())
        except gexc.InvalidArgument as exc:
            if not forgotten(exc) or attempt == attempts - 1:
                raise
        except (gexc.Aborted, ValueError) as exc:
            gave_up(exc)
            raise
    raise AssertionError("unreachable")


def remind_once(ref: firestore.DocumentReference, open_status: str, reminded: dict[str, Any]) -> bool:
    """Write ``reminded`` (a question's or an approval's one reminder) on the record at ``ref`` while it is still
    ``open_status`` and not reminded yet, in a transaction; False if it was reminded already or is not open."""

    @firestore.transactional
    def mark(transaction: firestore.Transaction) -> bool:
        current = ref.get(transaction=transaction, field_paths=["status", "reminded_at"]).to_dict() or {}
        if current.get("status") != open_status or current.get("reminded_at") is not None:
            return False
        transaction.update(ref, reminded)
        return True

    marked: bool = transact(mark)
    return marked


def db() -> firestore.Client:
    return deps.firestore()


def now() -> datetime:
    return deps.now()


def session_ref(session_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(SESSIONS).document(session_id)
    return ref


def step_ref(transcript_id: str, seq: int) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = session_ref(transcript_id).collection(STEPS).document(ids.step_doc(seq))
    return ref


def ledger_ref(transcript_id: str, seq: int, index: int, part: str = "") -> firestore.DocumentReference:
    """The ledger entry of call ``index`` of step ``seq`` in a transcript (``part``: a later round's)."""
    ref: firestore.DocumentReference = (
        session_ref(transcript_id).collection(CALLS).document(ids.call_doc(seq, index) + part)
    )
    return ref


def question_ref(question_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(QUESTIONS).document(question_id)
    return ref


def thread_ref(channel: str, thread_ts: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(THREADS).document(ids.thread_doc(channel, thread_ts))
    return ref


def event_ref(event_id: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(EVENTS).document(event_id)
    return ref

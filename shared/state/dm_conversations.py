"""Which conversation the top level of a DM is in: ``dm_conversations/{channel}``, the thread key (the ts of the
request that opened it) of the latest conversation started by a message typed at the DM's top level.

Such a conversation is answered at the top level (shared/slack/placement.py), so the person's next top-level
message may be its reply (an answer to its question, a note to its running session, "stop"); the ingress looks the
conversation up here and then treats that message as a reply in the conversation's thread. Only ever moved forward
(a later request's ts): two requests typed at once leave the later one current, whatever order they are recorded in.
"""

from __future__ import annotations

from google.cloud import firestore

from shared.state.firestore import DM_CONVERSATIONS, db, now, transact
from shared.state.updates import dm_conversation_update


def _ref(channel: str) -> firestore.DocumentReference:
    ref: firestore.DocumentReference = db().collection(DM_CONVERSATIONS).document(channel)
    return ref


def current(channel: str) -> str | None:
    """The thread key of the DM's latest top-level conversation; None if none was recorded."""
    doc = _ref(channel).get(field_paths=["thread_ts"]).to_dict() or {}
    found = doc.get("thread_ts")
    return found if isinstance(found, str) else None


def started(channel: str, thread_ts: str) -> bool:
    """A conversation opened at the DM's top level with the request ``thread_ts``: it becomes the current one unless
    a later one already is. True if it did."""
    ref = _ref(channel)

    @firestore.transactional
    def move(transaction: firestore.Transaction) -> bool:
        stored = (ref.get(transaction=transaction, field_paths=["thread_ts"]).to_dict() or {}).get("thread_ts")
        if isinstance(stored, str) and _ts(stored) >= _ts(thread_ts):
            return False
        transaction.set(ref, dm_conversation_update(thread_ts=thread_ts, updated_at=now()))
        return True

    moved: bool = transact(move)
    return moved


def _ts(ts: str) -> tuple[int, int]:
    """A Slack ts as a number that orders like time ("1712345678.000200"); anything else orders first."""
    seconds, _, micros = ts.partition(".")
    if not (seconds.isdigit() and (micros.isdigit() or not micros)):
        return (-1, 0)
    return int(seconds), int((micros or "0").ljust(6, "0")[:6])

"""The record of a notice the sweep posts (a reminder, an abandon, an alert): claimed by one poster, kept pending while
Slack refuses it, finished once posted or given up.

Stored in ``events/{claim}`` beside the other de-duplication records (the claim ids the sweep has always used, so a
claim made before these records is read as one): a claim holds off other posters for ``hold`` (two sweeps at once:
one posts); ``sending`` says an attempt was under way or ended not knowing whether Slack took the post (killed, a
500, a timeout), so the next attempt looks for it by its key before posting; ``notice`` is ``pending`` while the post
is still owed (the sweep's query of what to post again), ``posted`` or ``given_up`` once it is not. A pending record
carries what to post. Records expire by the events' TTL, counted from the last attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.events import record
from shared.state.firestore import EVENTS, db, event_ref, now, transact

log = logging.getLogger(__name__)

PENDING, POSTED, GIVEN_UP = "pending", "posted", "given_up"


@dataclass(frozen=True)
class Notice:
    """One notice: where it goes, what it says, the key its post carries (``shared.slack.client.post``), the id of
    its record (``claim``), and, for a reminder, the ask it reminds of (``about``: ``questions/<id>``)."""

    claim: str
    kind: str
    channel: str
    thread_ts: str | None
    text: str
    key: str
    about: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {"channel": self.channel, "thread_ts": self.thread_ts, "text": self.text, "key": self.key}

    @classmethod
    def from_record(cls, claim: str, data: dict[str, Any]) -> Notice:
        post = data["post"]
        return cls(claim=claim, kind=str(data.get("type") or "notice"), channel=str(post["channel"]),
                   thread_ts=post.get("thread_ts"), text=str(post["text"]), key=str(post["key"]),
                   about=data.get("about"))  # fmt: skip


@dataclass(frozen=True)
class Claimed:
    """A claim taken: ``look_first`` if an earlier attempt may have posted it (its post looked for from ``since``)."""

    look_first: bool
    since: datetime


def claim(notice: Notice, *, hold: timedelta) -> Claimed | None:
    """Claim ``notice`` for one poster (created pending on first use); None if it was posted or given up, or another
    poster claimed it less than ``hold`` ago (a refused attempt shortens its hold: ``refused``)."""
    ref = event_ref(notice.claim)

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> Claimed | None:
        fields = ["received_at", "acted", "sending", "first_at", "attempts"]
        found = ref.get(transaction=transaction, field_paths=fields).to_dict()
        at = now()
        if found is not None and (found.get("acted") or (found.get("received_at") or at - hold) > at - hold):
            return None
        since = (found or {}).get("first_at") or (found or {}).get("received_at") or at
        # A claim of old (no "sending") was taken and never marked acted on: its poster may have posted it.
        look_first = found is not None and bool(found.get("sending", True))
        transaction.set(ref, {**record(notice.kind, "", at), "notice": PENDING, "sending": True, "first_at": since,
                              "attempts": int((found or {}).get("attempts") or 0) + 1, "post": notice.to_doc(),
                              "about": notice.about})  # fmt: skip
        return Claimed(look_first, since)

    claimed: Claimed | None = transact(run)
    return claimed


def posted(claim_id: str, ts: str) -> None:
    """The notice is in Slack (posted now, or found posted by an earlier attempt): never posted again."""
    event_ref(claim_id).update({"acted": True, "notice": POSTED, "sending": False, "ts": ts})


def refused(claim_id: str, error: str, *, maybe_posted: bool, hold: timedelta, retry_in: timedelta) -> None:
    """Slack refused an attempt (or may have taken it: ``maybe_posted``, then the next attempt looks for it first):
    the claim holds ``retry_in`` more, then the next poster (the sweep's ``pending`` query) tries again."""
    event_ref(claim_id).update({"sending": maybe_posted, "error": error, "received_at": now() - hold + retry_in})


def given_up(claim_id: str, error: str) -> None:
    """Never to be posted: Slack will not take it (the channel gone, the app not in it), or it is no longer wanted
    (``error`` says which)."""
    event_ref(claim_id).update({"acted": True, "notice": GIVEN_UP, "sending": False, "error": error})


def release(claim_id: str) -> None:
    """Forget a claim taken before anything was posted (its poster failed first): the next poster starts afresh."""
    event_ref(claim_id).delete()


def pending(*, page_size: int) -> Iterator[Notice]:
    """Every notice still owed (a refused post, or one whose poster died): an equality on one field, by pages (no
    composite index: ordered by document id)."""
    query: Any = db().collection(EVENTS).where(filter=FieldFilter("notice", "==", PENDING)).limit(page_size)
    last = None
    while True:
        page = list((query.start_after(last) if last is not None else query).stream())
        for snap in page:
            try:
                yield Notice.from_record(snap.id, snap.to_dict() or {})
            except (
                KeyError,
                TypeError,
                AttributeError,
            ):  # not a notice's record: passed over, never stopping the sweep
                log.exception("an owed notice could not be read; passed over", extra={"document": snap.reference.path})
        if len(page) < page_size:
            return
        last = page[-1]

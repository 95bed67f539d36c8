"""A resolution recorded in one commit without a transaction (issue 28.1): an operator's answer or decision.

A transaction costs three sequential round trips (begin, read, commit). A click's common case needs two: one batched
read outside any transaction, then one commit in which every update of a document read carries the update time it
was read at as its precondition (``last_update_time``), and every document that must not exist yet is written with
``create()``. Anything that wrote a document the decision read since (a racing answer, a decision, a stop, a claim)
or created one it read as missing makes the whole commit fail (nothing is written), and the caller decides again in
its transaction, as before. A decision that rests on a document a precondition cannot fence (read but not written,
or read beyond the first batch: the other waits of a mixed turn) is not committed here either
(``Unfenceable``): the transaction decides it.

Nothing else may be assumed of the documents read: the batched read is not a snapshot. Soundness comes from the
fences alone: every document the decision depends on is either updated under its read update time or created, so
the commit lands only if each is still exactly as read, as if read and written at the commit's instant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.base_document import BaseDocumentReference

from shared.errors import ProductError
from shared.state.firestore import contended, db

log = logging.getLogger(__name__)

T = TypeVar("T")

# What a failed fence raises: an update time that moved (FailedPrecondition), a document gone (NotFound), or a
# create of a document that exists (the emulator's Conflict, Firestore's AlreadyExists); and a commit aborted by
# lock contention (Aborted: Firestore's advice is to try again, which the transaction does after reading again).
FENCE_FAILED = (gexc.FailedPrecondition, gexc.NotFound, gexc.AlreadyExists, gexc.Conflict, gexc.Aborted)


class Unfenceable(ProductError):
    """The decision rests on something no precondition of the commit can hold: decide it in a transaction."""


class FencedBatch(firestore.WriteBatch):
    """A ``WriteBatch`` standing in for a transaction whose reads were made before it, outside it (``read``: those
    snapshots, by path). Updates of a document read are preconditioned on its read update time; a ``set`` of a
    document read, or an update of one not read (or read missing), is refused (``Unfenceable``): it would write
    unfenced. ``settle`` commits."""

    def __init__(self, read: Mapping[str, Any]) -> None:
        super().__init__(db())
        self._read = dict(read)
        self._fenced: set[str] = set()

    def create(self, reference: BaseDocumentReference, document_data: dict[str, Any]) -> None:
        super().create(reference, document_data)
        self._fenced.add(reference.path)

    def update(self, reference: BaseDocumentReference, field_updates: dict[str, Any],
               option: _helpers.WriteOption | None = None) -> None:  # fmt: skip
        snap = self._read.get(reference.path)
        if snap is None or not snap.exists or snap.update_time is None:
            raise Unfenceable(f"an update of {reference.path}, not read as existing")
        fence = self._client.write_option(last_update_time=snap.update_time)
        if option is not None and option != fence:
            raise Unfenceable(f"an update of {reference.path} under another precondition")
        super().update(reference, field_updates, option=fence)
        self._fenced.add(reference.path)

    def set(self, reference: BaseDocumentReference, document_data: dict[str, Any],
            merge: bool | list[str] = False) -> None:  # fmt: skip
        if reference.path in self._read:
            raise Unfenceable(f"a set of {reference.path}, which was read: only an update is fenced")
        super().set(reference, document_data, merge=merge)  # a blind write the decision does not read (a thread)

    def delete(self, reference: BaseDocumentReference, option: _helpers.WriteOption | None = None) -> None:
        raise Unfenceable(f"a delete of {reference.path}")

    def settle(self, depends: Iterable[firestore.DocumentReference]) -> bool:
        """Commit the writes, all or none. ``depends``: the documents the decision rests on (each, and every document
        read as existing, must have been updated or created here, else ``Unfenceable``). True: committed (or nothing
        to write: a decision that reads one document and changes nothing); False: a fence failed, nothing written."""
        if not self._write_pbs:
            return True
        existing = {path for path, snap in self._read.items() if snap.exists}
        unfenced = sorted(({ref.path for ref in depends} | existing) - self._fenced)
        if unfenced:
            raise Unfenceable(f"the decision rests on {unfenced}, which it does not write")
        try:
            self.commit()  # one retried after it landed unseen fails its own fences: the transaction then reads it
        except FENCE_FAILED:
            return False
        return True


Read = dict[str, Any]  # DocumentSnapshots by path


def first(refs: list[firestore.DocumentReference],
          decide: Callable[[Read, firestore.WriteBatch, firestore.Transaction | None], T],
          depends: Iterable[firestore.DocumentReference]) -> T | None:  # fmt: skip
    """Decide once from one batched read of ``refs`` and commit it fenced (``decide`` gets the snapshots by path,
    the batch to write in, and no transaction: it may read nothing more, else ``Unfenceable``). ``depends``: the
    documents the decision rests on besides those read as existing (see ``FencedBatch.settle``). None: not
    committed (a fence failed, or the decision could not be fenced): the caller decides in its transaction."""
    read = {snap.reference.path: snap for snap in db().get_all(refs)}
    batch = FencedBatch(read)
    try:
        decided = decide(read, batch, None)
        if batch.settle(depends):
            return decided
        log.info("a racing write moved what the decision read: deciding in a transaction")
    except Unfenceable as exc:
        log.info("the decision cannot be fenced: deciding in a transaction", extra={"why": str(exc)})
    return None


def resolve(refs: list[firestore.DocumentReference],
            decide: Callable[[Read, firestore.WriteBatch, firestore.Transaction | None], T],
            depends: Iterable[firestore.DocumentReference]) -> T:  # fmt: skip
    """``first``; if that commits nothing, the same decision in a transaction (contended: the client's commit retried
    more often, an aborted read again), from the same reads of ``refs`` made in it, writing in it, reading more in
    it. Its errors are the caller's, as a transaction's are."""
    decided = first(refs, decide, depends)
    if decided is not None:
        return decided

    @firestore.transactional
    def in_transaction(transaction: firestore.Transaction) -> T:
        read = {snap.reference.path: snap for snap in db().get_all(refs, transaction=transaction)}
        return decide(read, transaction, transaction)

    decided_in_transaction: T = contended(in_transaction)
    return decided_in_transaction

"""A continuation's transcript, queried beside its claim (issue 28.1): a delivery whose session id names the
transcript it continues (``claim_reads.transcript_hint``: an answer's or a resumption's continuation) starts that
query on a thread of its own as the claim's transaction starts, and the run uses what it returned only if it is
provably the whole transcript as the claim left it; else it is dropped and the run queries again after the claim.

Why a query read before the claim commits can be the transcript as the claim leaves it. The query reads the steps
at one time T (its read time). The claim reads, in its transaction, the session, its transcript's root and the
transcript's writer (the session the root names, the root itself if none), and the run takes the query only if the
claim ran the session, the session's transcript is the root queried, and every document the claim read was last
updated before T (``Claim.settled``). Two facts of the store make that enough:

- every transaction that stores a step also writes the document of the session storing it (``steps.commit_step``,
  ``children.finish``), and only the transcript's writer may store one (the commit reads the root in the same
  transaction and refuses anyone else);
- the claim's reads hold until it commits (a serializable transaction), and what it writes (the root's writer, or
  the session's worker when it already writes the transcript) makes every other session's later step commit refuse.

So take a step stored after T, before the claim committed, by session W. If the root still named W when the claim
read it, the claim read W's document (W is the root, the writer it read, or the session itself), updated by that
commit, after T: refused. If the root named another writer by then, that writership was taken after the step, so
after T, by a claim that wrote the root: the root's update time is after T: refused. A step committing between the
claim's reads and its commit conflicts with those reads (it writes W's document, which the claim read): it waits,
and is refused by what the claim wrote. After the claim, only this run stores steps. An empty result has no read
time and is dropped too (a continuation's transcript is never empty).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from shared.state import claim_reads
from shared.state.batched import Beside
from shared.state.firestore import STEPS, session_ref
from shared.state.models import Step
from shared.state.sessions import Claim

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Read:
    """A transcript's steps, in order, and the time the query read them at (None: nothing was found)."""

    steps: list[Step]
    read_at: datetime | None


def read_steps(transcript_id: str) -> Read:
    """Every step of a transcript, in order, with the query's read time: one query (as ``steps.load_steps``)."""
    snaps = list(session_ref(transcript_id).collection(STEPS).order_by("seq").stream())
    times = [snap.read_time for snap in snaps if snap.read_time is not None]
    read_at = min(times, key=claim_reads.stamp) if len(times) == len(snaps) and times else None
    return Read([Step.from_doc(snap.to_dict() or {}) for snap in snaps], read_at)


class Ahead:
    """The query of the transcript a delivery's session id names, running beside its claim."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._query = Beside(lambda: read_steps(root))

    def usable(self, claim: Claim) -> list[Step] | None:
        """The steps it read, if they are the transcript as ``claim`` left it (see the module's docstring); None:
        dropped (the run queries again)."""
        session = claim.session
        return self.as_of(session.transcript, claim.settled) if session is not None else None

    def as_of(self, transcript: str, settled: datetime | None, *, within: float | None = None) -> list[Step] | None:
        """The steps it read, if they are ``transcript`` as a claim that read nothing updated after ``settled``
        leaves it (waiting for the query; also from inside that claim's transaction, once its reads are done: there
        at most ``within`` seconds, as the claim holds its documents meanwhile, and None if the query is not done)."""
        if within is not None and not self._query.done(within):
            log.info("the transcript's query beside the claim is not done: the step waits for the claim")
            return None
        try:
            read = self._query.result()
        except Exception:  # the run's own query after the claim reads it, or fails as it would have
            log.warning("the transcript's query beside the claim failed; querying again", exc_info=True)
            return None
        if transcript != self.root or settled is None or read.read_at is None:
            return None
        if not claim_reads.stamp(settled) < claim_reads.stamp(read.read_at):
            log.info("the transcript changed around its claim: querying it again", extra={"root": self.root})
            return None
        return read.steps

    def wait(self) -> None:
        self._query.wait()


@contextmanager
def beside_claim(session_id: str) -> Iterator[Ahead | None]:
    """The transcript's query started now if ``session_id`` names the transcript it continues (None: it does not:
    a mention or a child may have no steps yet, and a query for nothing would cost a read); waited for on leaving,
    so nothing is left running."""
    root = claim_reads.transcript_hint(session_id)
    ahead = Ahead(root) if root != session_id else None
    try:
        yield ahead
    finally:
        if ahead is not None:
            ahead.wait()

"""A resumed turn's first step stored in its claim's own commit (issue 28.1): the agent makes it from what the claim
read (``FirstStep``: the waiting record's outcomes and the transcript's steps read in the claim's batch), and
the claim creates it with its update of the session, which takes the lease and the transcript's writership. That
fences it as a step commit is fenced: no other worker holds the session and no other session writes the transcript
once the claim commits, and the claim's reads hold until then (a serializable transaction)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.cloud import firestore

from shared.state.claim_reads import ClaimReads
from shared.state.firestore import step_ref
from shared.state.models import Step
from shared.state.session_model import Session
from shared.state.updates import session_update

# The resumed turn's first step, made from what the claim read (None: the run writes it after the claim, as before).
FirstStep = Callable[[Session, ClaimReads], Step | None]


def created(transaction: firestore.Transaction, session: Session, step: Step | None) -> dict[str, Any]:
    """``step`` created in the claim's ``transaction``; the session's fields its own commit would have written with
    it (its progress; the waiting record it resolves, cleared), for the claim's update (none without a step)."""
    if step is None:
        return {}
    transaction.create(step_ref(session.transcript, step.seq), step.to_doc())
    return session_update(next_seq=step.seq + 1, takeovers_without_progress=0, waiting=[])

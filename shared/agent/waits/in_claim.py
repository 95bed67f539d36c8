"""A resumed turn's first step made from what its claim read, so the claim stores it in its own commit (issue 28.1):
a turn that waited only on operator questions, resumed by the continuation the answer queued, whose task names that
waiting record (``shared.queue.tasks``). The claim read the questions and the transcript's steps in its batch
(``claim_reads``); the step is what the ``Resumer`` would store after the claim, one function response per call in
call order (``Resuming``), with the same audit.

Anything else is left to the run, as before (None): another kind of wait (an approved call runs through the ledger,
an MCP request's call runs again, a child's result may still change its tree's records), a record other than the
one the task named, a transcript the claim did not read whole, a root with children's results or questions to
collect (a step commit reads them), a session asked to stop, or a pending turn that is not the record's.
"""

from __future__ import annotations

from shared.agent.transcript import pending_turn, to_json
from shared.agent.waits import question
from shared.agent.waits.mcp_input import questions_in
from shared.agent.waits.resuming import Resuming, WaitOn
from shared.limits import TOO_LARGE_REQUEST_CHARS
from shared.state.claim_reads import ClaimReads
from shared.state.claim_step import FirstStep
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, SessionKind, Step, StepKind, Waiting, WaitKind
from shared.state.session_model import Session


def for_claim(resumes: list[Waiting] | None) -> FirstStep | None:
    """What makes the resumed step inside the claim of a delivery whose task names ``resumes`` (None: nothing can be
    made there: a record not only of operator questions)."""
    if not resumes or any(w.kind != WaitKind.QUESTION or w.released for w in resumes):
        return None
    return resumed_step


def resumed_step(session: Session, reads: ClaimReads) -> Step | None:
    """The step resuming ``session``'s paused turn, from what its claim read (None: the run makes it after the
    claim, as the module's docstring says)."""
    record = session.waiting
    docs = reads.outcomes(record)  # only the record the task named, its questions read in the claim's batch
    if docs is None or session.kind != SessionKind.CONTINUATION or session.stop_requested or session.late_note:
        return None
    if len(session.text) > TOO_LARGE_REQUEST_CHARS:  # the opening refuses it without the model (``Starter``)
        return None
    if reads.quiet_root(session.transcript) is None:
        return None
    transcript = reads.steps(session.transcript)
    seq = record[0].seq
    turn = pending_turn(transcript or [])
    if transcript is None or turn is None or turn.seq != seq:
        return None
    resuming = Resuming(turn, seq, {w.index: WaitOn(w.kind, w.key) for w in record})
    asked = questions_in(docs, [w.key for w in record])
    audit: list[Audit] = []
    for entry in sorted(record, key=lambda w: w.index):
        result = question.result_of(asked.get(entry.key))
        if result is None or resuming.call_for(WaitOn(entry.kind, entry.key)) is None:
            return None  # an MCP request's answer (its call runs again), or a call no longer pending
        resuming.arrive(WaitOn(entry.kind, entry.key), result)
        audit.append(Audit(AuditType.ANSWER, now()))
    responses = resuming.responses
    content = responses.content()
    return Step(
        seq=max(session.next_seq, transcript[-1].seq + 1),
        session_id=session.session_id,
        kind=StepKind.ANSWER,
        content=to_json(content) if content is not None else None,
        audit=audit,
        at=now(),
        answers=responses.refs(),
    )

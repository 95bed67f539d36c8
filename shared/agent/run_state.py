"""One run's shared state, and the one way it stores a step.

``RunState`` holds what every part of a run reads: the claimed session, its transcript so far (``steps``), the
thread surface, the toolset, the budget, the calls made so far by tool, and the notes queued for the next model
turn. ``commit`` persists a step (with the lease renewed, the day's spend counted, the notes that arrived read
back, and the ledger's ``done`` records of the calls run since: ``unrecorded``); ``keep_lease`` renews the lease
during a long turn. The parts of a run (``Starter``, ``ToolTurn``, ``Pauses``, ``Resumer``, ``Ender``) are given
this state and change it only through it.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Unpack

from google.genai import types

from shared import config, deps
from shared.agent import heartbeat, streamed
from shared.agent import model as gemini
from shared.agent.budget import Budget, conversation_allowance
from shared.agent.tools import toolset
from shared.agent.transcript import PendingTurn, Responses, contents_of, to_json
from shared.agent.waits import outcomes
from shared.state import batched, ledger, spend, steps
from shared.state.batched import Docs
from shared.state.firestore import now
from shared.state.models import Audit, AuditType, Note, Question, SessionKind, Step, StepKind, Waiting
from shared.state.session_model import Session, SessionUpdate

log = logging.getLogger(__name__)


class RunState:
    """What one run of a claimed session shares: its session, transcript, surface, tools, budget and notes."""

    def __init__(self, session: Session, *, takeover: bool, started_at: datetime | None = None,
                 question: Question | None = None, transcript: list[Step] | None = None,
                 claimed_outcomes: Docs | None = None) -> None:  # fmt: skip
        settings = config.settings()
        self.session = session
        self.takeover = takeover
        self.lease = settings.session_lease_seconds
        elapsed = (now() - started_at).total_seconds() if started_at else 0.0
        # A mention or a child on its first claim has no steps yet (next_seq moves with every step): skip the query.
        fresh = session.kind in {SessionKind.MENTION, SessionKind.CHILD} and not takeover and session.next_seq == 0
        # What its paused turn waited on came to (if it resumes one), read beside the transcript's query: both wait
        # only for the claim, which is over (``shared.agent.waits.outcomes``); the query is skipped if the claim read
        # the transcript already (``transcript``: its task named it, ``shared.state.claim_reads``), and what the claim
        # read of the outcomes is not read again (``claimed_outcomes``: its task named the record, ``claim_reads``).
        record = [] if session.stop_requested else list(session.waiting)  # (one queued only to end resumes nothing)
        wanted = [ref for ref in outcomes.refs(session, record) if ref.path not in (claimed_outcomes or {})]
        if fresh or transcript is not None:
            self.steps: list[Step] = list(transcript or [])
            docs = batched.read(wanted)
        elif not wanted:
            self.steps, docs = steps.load_steps(session.transcript), {}
        else:
            self.steps, docs = batched.both(lambda: steps.load_steps(session.transcript), lambda: batched.read(wanted))
        docs = {**(claimed_outcomes or {}), **docs}
        self._outcomes: tuple[list[Waiting], Docs] | None = (record, docs) if record else None
        self.budget = Budget(  # a delegated child has its allotment from its tree's budget
            *conversation_allowance(session, self.steps),
            settings.session_wall_seconds,
            started=time.monotonic() - max(0.0, elapsed),
        )
        # A continuation appends to its asker's transcript: its first step follows the last stored one.
        session.next_seq = max(session.next_seq, self.steps[-1].seq + 1 if self.steps else 0)
        self.surface = streamed.surface_for(session, takeover=takeover)  # a takeover reads what Slack has
        self.surface.beside = self.show_beside  # its status is set beside the model's request (``shown`` waits)
        heartbeat.also(self.surface.keep_shown)  # a step longer than Slack keeps a status: the beat sets it again
        self.tools = (deps.get().tools or toolset.for_session)(session)
        # Calls made so far, by tool (the policy bounds some of them per session).
        self.used = Counter(
            entry.name for s in self.steps if s.session_id == session.session_id for entry in s.audit
            if entry.type == AuditType.TOOL and entry.name
        )  # fmt: skip
        self.notes: list[Note] = list(session.notes)  # queued for the next model turn
        self.committed = time.monotonic()  # the claim took the lease just now
        # The ledger's ``done`` records of the calls that ran since the last commit: written with the next one.
        self.unrecorded: list[ledger.Done] = []
        # A continuation's question as its claim read it (None: not read there; its opening reads it).
        self.question = question if question is not None and question.question_id == session.question_id else None
        # Display updates made beside the run's work (an approved call's card), and those the next step waits for.
        self.showing: list[Future[None]] = []
        self.shown_by_next_step: list[Future[None]] = []

    def commit(
        self,
        kind: StepKind,
        content: types.Content | Responses | None,
        audit: list[Audit],
        *,
        consumed: list[Note] | None = None,
        wait_for_notes: bool = True,
        pausing_on_record: list[Waiting] | None = None,
        **fields: Unpack[SessionUpdate],
    ) -> Step:
        """Store the next step (and the session ``fields`` with it); the notes that arrived meanwhile are read. The
        display updates of the last step are made first (``show_beside``)."""
        waited, self.shown_by_next_step = self.shown_by_next_step, []
        for showing in waited:
            showing.result()
        answers = content.refs() if isinstance(content, Responses) else None  # the calls its responses answer
        if isinstance(content, Responses):
            content = content.content()
        step = Step(
            seq=self.session.next_seq,
            session_id=self.session.session_id,
            kind=kind,
            content=to_json(content) if content is not None else None,
            audit=audit,
            at=now(),
            answers=answers,
        )
        totals = fields.get("tokens")  # a model turn: what it spent counts against the daily budgets
        spent = spend.counted(totals) - spend.counted(self.session.limits.tokens) if isinstance(totals, dict) else 0
        self.notes = steps.commit_step(
            self.session,
            step,
            lease_seconds=self.lease,
            fields=fields,
            consumed_notes=consumed,
            wait_for_notes=wait_for_notes,
            pausing_on_record=pausing_on_record,
            spent=spent,
            fenced=self.unrecorded,
        )
        self.unrecorded = []
        self.steps.append(step)
        self.committed = time.monotonic()
        return step

    def outcomes_read(self, record: list[Waiting]) -> Docs | None:
        """The documents of ``record``'s outcomes as the run read them when it started (once: a second resumption
        of a record reads them again, as a call the first one ran has written its ledger entry since)."""
        read, self._outcomes = self._outcomes, None
        return read[1] if read is not None and read[0] == record else None

    def keep_lease(self) -> None:
        """Renew the lease during a long turn (a slow tool, several slow calls), so no takeover starts meanwhile."""
        if time.monotonic() - self.committed > self.lease / 3:
            self.notes = steps.commit_step(self.session, None, lease_seconds=self.lease, fenced=self.unrecorded)
            self.unrecorded = []
            self.committed = time.monotonic()

    def record_calls(self) -> None:
        """Commit the ledger's ``done`` records not written yet, before anything but a step or a ledger call (and
        before an end that is not a step of this run: a child's end, a failure)."""
        if self.unrecorded:
            ledger.record(self.session, self.unrecorded)
            self.unrecorded = []

    def record_calls_left(self) -> None:
        """A run that an exception ends (a crash the task's retry takes over, a Slack storm that fails the session)
        still commits the ``done`` records of the calls that ran, under its lease: the takeover then reuses their
        results instead of calling their outcome unknown (or running an idempotent call again). Best effort: the
        exception that ended the run is what the worker reports."""
        try:
            self.record_calls()
        except Exception:
            log.warning("the results of the calls that ran could not be recorded", exc_info=True,
                        extra={"calls": len(self.unrecorded)})  # fmt: skip

    def show_beside(self, what: str, update: Callable[[], object], *, by_next_step: bool = False
                    ) -> Future[None]:  # fmt: skip
        """A display update (Slack only: nothing the run stores or decides depends on it) made beside what the run
        does next, on the process's display threads (kept warm: starting a thread per update held the run back
        longer than the update); its failure is logged, never raised. ``shown`` (the run's end) waits for it, and so
        does the run's next step if ``by_next_step`` (a card that shows the result the last step stored, before the
        run goes on past the model's request); so may the caller (``result()``)."""
        context = contextvars.copy_context()  # its logs keep the session and trace
        showing = _display_threads().submit(context.run, displayed, what, update)
        self.showing.append(showing)
        if by_next_step:
            self.shown_by_next_step.append(showing)
        return showing

    def shown(self) -> None:
        """Wait for the display updates still being made (the run's end)."""
        showing, self.showing = self.showing, []
        for update in showing:
            update.result()

    def tokens_after(self, spent: dict[str, int]) -> dict[str, int]:
        """The session's running token totals with one more turn (written with that turn's step)."""
        return {kind: self.session.limits.tokens.get(kind, 0) + spent.get(kind, 0) for kind in gemini.TOKEN_KINDS}

    def owns(self, turn: PendingTurn) -> bool:
        """Pending calls are this session's to run only if it made them: another session's are a pause it did not
        take over (whatever this session wrote since)."""
        return turn.session_id == self.session.session_id

    def has_written(self) -> bool:
        """This session has stored a step of its own (else its run starts with its first step)."""
        return any(s.session_id == self.session.session_id for s in self.steps)

    def replaying(self) -> bool:
        """True once per run, for the first turn a takeover runs tools for (the one the dead worker was in)."""
        replaying, self.takeover = self.takeover, False
        return replaying

    def thread_text(self) -> str:
        """What the thread said when the transcript opened (its first prompt), for the policy's host rule."""
        first = next((s for s in self.steps if s.kind == StepKind.PROMPT and s.content), None)
        return text_of(contents_of([first])[0]) if first else ""


_DISPLAY_THREADS: list[ThreadPoolExecutor] = []  # made at the first display update, kept by the process
_DISPLAY_LOCK = threading.Lock()


def _display_threads() -> ThreadPoolExecutor:
    with _DISPLAY_LOCK:
        if not _DISPLAY_THREADS:
            _DISPLAY_THREADS.append(ThreadPoolExecutor(max_workers=4, thread_name_prefix="display"))
        return _DISPLAY_THREADS[0]


def displayed(what: str, update: Callable[[], object]) -> None:
    """Make a display update; its failure (whatever Slack or the connection did) is logged, never raised."""
    try:
        update()
    except Exception as exc:
        log.warning("a display update failed", extra={"update": what, "error": repr(exc)})


def text_of(content: types.Content) -> str:
    """The visible text of a model turn (thoughts left out)."""
    return "".join(p.text or "" for p in content.parts or [] if p.text and not p.thought)

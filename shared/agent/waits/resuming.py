"""A paused turn resumed through the planner (``plan``): the stored turn's pending calls at the positions of the
waits being resolved, the outcomes received one by one (an accepted one becomes the function response of the call
that waited for it, by position), and whether the turn is complete or still waits.

An outcome for a call that is no longer pending (a re-run after a crash stored its response already) or for a
wait nothing has is refused by the planner and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from google.genai import types

from shared.agent.transcript import PendingTurn, Responses
from shared.agent.waits.plan import Arrival, Call, Plan, Response, WaitKind, WaitOn, receive, start
from shared.state.models import CallRef

log = logging.getLogger(__name__)

__all__ = ["Resuming", "WaitKind", "WaitOn"]


class Resuming:
    """The resumption of the turn at ``seq``: ``waits`` maps a call's index to what it waits on."""

    def __init__(self, turn: PendingTurn | None, seq: int, waits: Mapping[int, WaitOn]) -> None:
        self.seq = seq
        self.pending = dict(turn.calls) if turn is not None and turn.seq == seq else {}
        calls = [
            Call(CallRef(seq, index), call.name or "", call.id, waits=on)
            for index, on in waits.items()
            if (call := self.pending.get(index)) is not None
        ]
        self.plan: Plan = start(calls)
        self.responses = Responses()

    def call_for(self, on: WaitOn) -> tuple[int, types.FunctionCall] | None:
        """The pending call that waits on ``on`` (its index and call); None when nothing does."""
        planned = next((call for call in self.plan.calls if call.waits == on), None)
        return (planned.ref.index, self.pending[planned.ref.index]) if planned is not None else None

    def arrive(self, on: WaitOn, response: Response | None = None, *, then: WaitOn | None = None) -> bool:
        """One outcome: the response of the call that waits on ``on`` (or, with ``then``, its new wait). False, and
        nothing changed, when the planner refuses it."""
        waiting = self.call_for(on)
        receipt = receive(self.plan, Arrival(on, response, then))
        self.plan = receipt.plan
        if not receipt.accepted or waiting is None:
            log.info("an outcome nothing waits on changed nothing", extra={"wait": on.key, "reason": receipt.reason})
            return False
        if response is not None:
            self.responses.add(self.seq, waiting[0], waiting[1], response)
        return True

    @property
    def complete(self) -> bool:
        """Every call resolved here has its response: the turn goes on (else it waits again)."""
        return self.plan.complete

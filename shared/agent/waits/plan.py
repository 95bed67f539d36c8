"""What each call of a paused turn gets on resume: a pure function of the stored turn, what each of its calls waits
on, and the outcomes that have arrived (issue 23). No I/O, no Firestore, no model types.

A turn's calls are known by position (``CallRef``: the model step's seq, the call's index). Each call either has
its response already (it ran when the turn ran, or was refused) or waits on one thing: an operator question, an
approval, a child, its parent's answer, or an MCP server's input request, named by that thing's id. An outcome
arrives for a waited thing (by kind and id) and is either the waiting call's response, or a new wait for that call
(an approved MCP call whose server asks for input; an MCP server that asks again). An outcome for anything not
waited on, or already resolved, changes nothing and is reported as refused. The turn is complete, and resumes,
exactly once: on the arrival that gives its last waiting call a response.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from shared.agent.tools.result import ToolResult
from shared.errors import ProductError
from shared.state.models import CallRef, WaitKind

__all__ = ["Arrival", "BadTurn", "Call", "Plan", "Receipt", "RefusedArrival", "Response", "WaitKind", "WaitOn"]

Response = ToolResult  # a call's result (the function response is made from it when the turn is stored)


@dataclass(frozen=True, order=True)
class WaitOn:
    """One waited thing: its kind and its id (question, approval, child session or parent question id)."""

    kind: WaitKind
    key: str


@dataclass(frozen=True)
class Call:
    """One call of the paused turn: exactly one of ``response`` (it has its response) and ``waits``."""

    ref: CallRef
    name: str
    call_id: str | None = None  # the model's optional id: echoed back, never used to match
    response: Response | None = None
    waits: WaitOn | None = None


@dataclass(frozen=True)
class Arrival:
    """An outcome for one waited thing: the waiting call's ``response``, or (``then``) a new wait for that call."""

    on: WaitOn
    response: Response | None = None
    then: WaitOn | None = None


@dataclass(frozen=True)
class RefusedArrival:
    """An arrival the plan refused (nothing waited on it, or it was already resolved), and why."""

    arrival: Arrival
    reason: str


@dataclass(frozen=True)
class Plan:
    """The turn after the arrivals so far: each call in call order with its response or what it still waits on."""

    calls: tuple[Call, ...]
    resolved: frozenset[WaitOn] = frozenset()
    refused: tuple[RefusedArrival, ...] = ()

    @property
    def complete(self) -> bool:
        """Every call has its response: the turn resumes (once: nothing is waited on any more)."""
        return all(call.waits is None for call in self.calls)

    @property
    def waiting(self) -> tuple[WaitOn, ...]:
        """What the turn still waits on, in call order."""
        return tuple(call.waits for call in self.calls if call.waits is not None)

    def responses(self) -> list[tuple[Call, Response]]:
        """The calls that have a response, each with it, in call order."""
        return [(call, call.response) for call in self.calls if call.response is not None]


@dataclass(frozen=True)
class Receipt:
    """One arrival received: the plan after it, whether it was accepted, and whether it completed the turn."""

    plan: Plan
    accepted: bool
    resumes: bool
    reason: str = ""


class BadTurn(ProductError):
    """A turn the planner cannot plan: calls of several turns, a position twice, a call with both or neither of a
    response and a wait, or one thing waited on by two calls."""


def start(calls: Iterable[Call]) -> Plan:
    """The plan of a turn as it paused (calls in any order; the plan keeps them in call order)."""
    ordered = tuple(sorted(calls, key=lambda call: call.ref))
    if len({call.ref.seq for call in ordered}) > 1:
        raise BadTurn("the calls belong to more than one model turn")
    if len({call.ref for call in ordered}) != len(ordered):
        raise BadTurn("two calls have the same position")
    for call in ordered:
        if (call.response is None) == (call.waits is None):
            raise BadTurn(f"call {call.ref.seq}.{call.ref.index} needs exactly one of a response and a wait")
    waits = [call.waits for call in ordered if call.waits is not None]
    if len(set(waits)) != len(waits):
        raise BadTurn("one thing is waited on by two calls")
    return Plan(ordered)


def receive(plan: Plan, arrival: Arrival) -> Receipt:
    """The plan after one arrival. Refused, and the plan unchanged, when nothing waits on what it is for."""
    if (arrival.response is None) == (arrival.then is None):
        return _refuse(plan, arrival, "an outcome is either a response or a new wait")
    position = next((i for i, call in enumerate(plan.calls) if call.waits == arrival.on), None)
    if position is None:
        known = arrival.on in plan.resolved
        reason = "it was already resolved" if known else "nothing in this turn waits on it"
        return _refuse(plan, arrival, f"{arrival.on.kind.value} {arrival.on.key}: {reason}")
    if arrival.then is not None and (arrival.then in plan.resolved or arrival.then in plan.waiting):
        return _refuse(plan, arrival, f"{arrival.then.kind.value} {arrival.then.key} is already waited on")
    calls = list(plan.calls)
    calls[position] = replace(calls[position], response=arrival.response, waits=arrival.then)
    after = Plan(tuple(calls), plan.resolved | {arrival.on}, plan.refused)
    return Receipt(after, accepted=True, resumes=after.complete)


def plan_of(calls: Iterable[Call], arrivals: Sequence[Arrival]) -> Plan:
    """The plan after every arrival in order (the refused ones listed in ``refused``)."""
    plan = start(calls)
    for arrival in arrivals:
        plan = receive(plan, arrival).plan
    return plan


def _refuse(plan: Plan, arrival: Arrival, reason: str) -> Receipt:
    after = Plan(plan.calls, plan.resolved, (*plan.refused, RefusedArrival(arrival, reason)))
    return Receipt(after, accepted=False, resumes=False, reason=reason)

"""What each pending call gets on resume is a pure function of the stored turn, its waits and the outcomes so far
(issue 23): every pair of wait kinds in one turn and all five at once, with call ids and without, in every order
the outcomes can arrive, with duplicates and strays; each call gets exactly one response, in call order, and the
turn resumes exactly once."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from shared.agent.tools.result import ToolResult
from shared.agent.waits.plan import Arrival, BadTurn, Call, Plan, WaitKind, WaitOn, plan_of, receive, start
from shared.state.models import CallRef

SEQ = 7
KINDS = list(WaitKind)
NAMES = {WaitKind.QUESTION: "ask_operator", WaitKind.APPROVAL: "deploy", WaitKind.CHILD: "delegate",
         WaitKind.PARENT_ANSWER: "ask_parent", WaitKind.MCP_INPUT: "tickets__create"}  # fmt: skip


def turn_of(kinds: Sequence[WaitKind], *, ids: bool, same_name: bool = False, answered_at: int = 1) -> list[Call]:
    """A turn whose calls wait on ``kinds`` in order, with one call that has its response already at
    ``answered_at`` (a refused or safe call of the same turn)."""
    calls: list[Call] = []
    slots: list[WaitKind | None] = list(kinds)
    slots.insert(min(answered_at, len(slots)), None)
    for index, kind in enumerate(slots):
        name = "tool" if same_name else (NAMES[kind] if kind else "read_page")
        call_id = f"id-{index}" if ids else None
        ref = CallRef(SEQ, index)
        if kind is None:
            calls.append(Call(ref, name, call_id, response=ToolResult.ok("ran at once")))
        else:
            calls.append(Call(ref, name, call_id, waits=WaitOn(kind, f"{kind.value}-{index}")))
    return calls


def outcome(on: WaitOn) -> Arrival:
    return Arrival(on, response=ToolResult.ok(f"outcome of {on.key}"))


def check_plan(calls: list[Call], arrivals: Sequence[Arrival]) -> None:
    """Receive the arrivals one by one: exactly one resumes (the one that answers the last waiting call), every
    other is either an answer to a still-waiting call or refused, and each call ends with exactly its own
    response, in call order, echoing its id."""
    plan = start(calls)
    resumed = 0
    accepted: list[WaitOn] = []
    for arrival in arrivals:
        before = plan
        receipt = receive(plan, arrival)
        plan = receipt.plan
        if receipt.accepted:
            assert arrival.on in before.waiting
            assert arrival.on not in plan.waiting
            accepted.append(arrival.on)
        else:
            assert plan.calls == before.calls
            assert plan.resolved == before.resolved
            assert receipt.reason
            assert plan.refused[-1].reason == receipt.reason
        if receipt.resumes:
            resumed += 1
            assert plan.complete
            assert not before.complete
        assert receipt.resumes == (receipt.accepted and plan.complete)
    waited = [c.waits for c in calls if c.waits is not None]
    assert sorted(accepted) == sorted(waited)  # each waited thing accepted exactly once
    assert resumed == 1
    assert plan.complete
    assert plan.waiting == ()
    assert [c.ref for c in plan.calls] == sorted(c.ref for c in calls)  # call order
    responses = plan.responses()
    assert [c.ref for c, _ in responses] == [c.ref for c in plan.calls]  # one response per call
    for original, (planned, response) in zip(calls, responses, strict=True):
        assert planned.call_id == original.call_id
        assert planned.name == original.name
        expected = original.response if original.waits is None else outcome(original.waits).response
        assert response == expected


PAIRS = list(itertools.combinations_with_replacement(KINDS, 2))


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
@pytest.mark.parametrize("kinds", PAIRS, ids=["+".join(k.value for k in pair) for pair in PAIRS])
def test_every_pair_in_every_order(kinds: tuple[WaitKind, WaitKind], ids: bool) -> None:
    for answered_at in range(3):
        for same_name in (False, True):
            calls = turn_of(kinds, ids=ids, same_name=same_name, answered_at=answered_at)
            waits = [c.waits for c in calls if c.waits is not None]
            for order in itertools.permutations(waits):
                check_plan(calls, [outcome(on) for on in order])


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
def test_all_five_in_every_order_with_duplicates_and_strays(ids: bool) -> None:
    calls = turn_of(KINDS, ids=ids, answered_at=2)
    waits = [c.waits for c in calls if c.waits is not None]
    assert len(waits) == 5
    stray = outcome(WaitOn(WaitKind.CHILD, "a-child-of-another-turn"))
    wrong_kind = outcome(WaitOn(WaitKind.APPROVAL, waits[0].key))  # a question's id as an approval
    for order in itertools.permutations(waits):
        arrivals = [outcome(on) for on in order]
        check_plan(calls, arrivals)
        # every outcome delivered twice in a row (a retried task), with strays in between, and again after the end
        doubled = [a for arrival in arrivals for a in (arrival, arrival, stray)]
        check_plan(calls, [wrong_kind, *doubled, *arrivals])


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
def test_all_five_same_name_calls_without_ids_get_their_own(ids: bool) -> None:
    """Calls alike in name (and without ids) are still told apart: by position."""
    calls = turn_of(KINDS, ids=ids, same_name=True, answered_at=0)
    waits = [c.waits for c in calls if c.waits is not None]
    for order in itertools.permutations(waits):
        check_plan(calls, [outcome(on) for on in order])


def test_a_decision_for_a_resolved_wait_is_a_no_op() -> None:
    calls = turn_of([WaitKind.APPROVAL, WaitKind.APPROVAL], ids=False)
    first, second = (c.waits for c in calls if c.waits is not None)
    assert first is not None
    assert second is not None
    plan = receive(start(calls), Arrival(first, response=ToolResult.fail("denied"))).plan
    again = receive(plan, Arrival(first, response=ToolResult.ok("approved after all")))
    assert not again.accepted
    assert not again.resumes
    assert "already resolved" in again.reason
    assert again.plan.calls == plan.calls
    done = receive(again.plan, outcome(second))
    assert done.resumes
    late = receive(done.plan, outcome(second))
    assert not late.accepted
    assert not late.resumes
    assert late.plan.calls == done.plan.calls
    assert [r for _, r in late.plan.responses()] == [ToolResult.fail("denied"), ToolResult.ok("ran at once"),
                                                     outcome(second).response]  # fmt: skip


def test_an_outcome_nothing_waits_on_is_refused_plainly() -> None:
    calls = turn_of([WaitKind.QUESTION], ids=True)
    receipt = receive(start(calls), outcome(WaitOn(WaitKind.QUESTION, "someone-else")))
    assert not receipt.accepted
    assert receipt.reason == "question someone-else: nothing in this turn waits on it"
    malformed = receive(start(calls), Arrival(calls[0].waits or WaitOn(WaitKind.QUESTION, "")))
    assert not malformed.accepted
    assert "either a response or a new wait" in malformed.reason


def chain_arrivals(calls: list[Call]) -> tuple[list[Arrival], list[tuple[int, int]]]:
    """Outcomes where an approved MCP call asks for input and an MCP server asks twice: each call's first outcome
    is a new wait, the next its response. Returns the arrivals and which must come before which."""
    arrivals: list[Arrival] = []
    before: list[tuple[int, int]] = []
    for call in calls:
        if call.waits is None:
            continue
        if call.waits.kind in {WaitKind.APPROVAL, WaitKind.MCP_INPUT}:
            then = WaitOn(WaitKind.MCP_INPUT, f"{call.waits.key}-round-2")
            arrivals.append(Arrival(call.waits, then=then))
            arrivals.append(Arrival(then, response=ToolResult.ok(f"outcome of {call.waits.key}")))
            before.append((len(arrivals) - 2, len(arrivals) - 1))
        else:
            arrivals.append(outcome(call.waits))
    return arrivals, before


@pytest.mark.parametrize("ids", [True, False], ids=["with-ids", "without-ids"])
def test_a_call_that_waits_again_resumes_once_in_every_order(ids: bool) -> None:
    calls = turn_of(KINDS, ids=ids)
    arrivals, before = chain_arrivals(calls)
    for order in itertools.permutations(range(len(arrivals))):
        sequence = [arrivals[i] for i in order]
        plan = start(calls)
        resumed: list[bool] = []
        for arrival in [*sequence, *sequence]:  # everything delivered again (a retried task)
            receipt = receive(plan, arrival)
            plan = receipt.plan
            resumed.append(receipt.resumes)
        early = any(order.index(a) > order.index(b) for a, b in before)  # a round 2 before its request: refused
        assert resumed.count(True) == 1
        assert plan.complete
        assert (resumed.index(True) >= len(sequence)) == early  # resumes on the first pass unless it could not
        for call, response in plan.responses():
            original = next(c for c in calls if c.ref == call.ref)
            expected = original.response or ToolResult.ok(f"outcome of {original.waits and original.waits.key}")
            assert response == expected


@pytest.mark.parametrize(
    "calls",
    [
        [Call(CallRef(1, 0), "a", response=ToolResult.ok({})), Call(CallRef(2, 0), "b", response=ToolResult.ok({}))],
        [Call(CallRef(1, 0), "a", response=ToolResult.ok({})), Call(CallRef(1, 0), "b", response=ToolResult.ok({}))],
        [Call(CallRef(1, 0), "a")],
        [Call(CallRef(1, 0), "a", response=ToolResult.ok({}), waits=WaitOn(WaitKind.CHILD, "c"))],
        [Call(CallRef(1, 0), "a", waits=WaitOn(WaitKind.CHILD, "c")),
         Call(CallRef(1, 1), "a", waits=WaitOn(WaitKind.CHILD, "c"))],
    ],
    ids=["two-turns", "one-position-twice", "neither", "both", "one-wait-twice"],
)  # fmt: skip
def test_a_turn_that_cannot_be_planned_is_a_clear_error(calls: list[Call]) -> None:
    with pytest.raises(BadTurn):
        start(calls)


def test_the_plan_is_the_same_whatever_the_order() -> None:
    calls = turn_of(KINDS, ids=False)
    waits = [c.waits for c in calls if c.waits is not None]
    plans: list[Plan] = []
    for order in itertools.permutations(waits):
        plan = plan_of(calls, [outcome(on) for on in order])
        plans.append(Plan(plan.calls, plan.resolved))
    assert all(plan == plans[0] for plan in plans)
    assert plans[0].complete

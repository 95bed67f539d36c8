"""A call's identity is its position (issue 23, item 1): (model step, call index), fixed when the model turn is
stored. Every function response is stored with the identity of the call it answers, so a model that sends no call
ids (Gemini before 3, other endpoints) never gets one call's result for another, and no call runs twice.

On the real stack, tasks delivered in parallel by the dispatcher; the model never sends a call id here.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.state import ids, steps
from shared.state.models import SessionStatus, StepKind
from tests.agent_helpers import conversation_done, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_crashes import Hold, kill_at, restarted  # noqa: F401 - the fixture
from tests.stack.test_delegation import answers, child_requests, children_of, for_child, requests_for

pytestmark = pytest.mark.stack
G = FakeGemini


def idless(*calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A model turn whose calls carry no id, as Gemini 2.x and other endpoints send them."""
    return {"function_calls": [{"name": name, "args": args, "id": None} for name, args in calls]}


@pytest.mark.parametrize("fourth", ["refused", "non-blocking"])
def test_three_blocking_delegates_and_a_fourth_without_ids_each_get_their_own_result(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, fourth: str
) -> None:
    """Defect: the fourth call's response (a refusal, or "started") was taken for the first delegate's, so the
    first child's result was dropped and the fourth call ran again."""
    tasks = [f"weigh crate {n} {uid}" for n in range(3)]
    last = ("delegate", {"task": "  "}) if fourth == "refused" else ("delegate", {"task": f"label {uid}",
                                                                                  "blocking": False})  # fmt: skip
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", idless(*(("delegate", {"task": t}) for t in tasks), last)))
    for n, (task, delay) in enumerate(zip(tasks, (1.5, 1.0, 0.5), strict=True)):  # they end in reverse order
        for_child(fake_gemini, task, G.delayed(delay, G.text(f"crate {n}: {n + 10} kg")))
    for_child(fake_gemini, f"label {uid}", G.text("labels printed"))
    fake_gemini.script(*(FakeGemini.matching(f"[C{uid}]", G.text("Weighed.")) for _ in range(3)))
    thread = mention(fake_slack, f"C{uid}", "weigh the crates")
    conversation_done(thread.session_id, timeout=90)

    children = children_of(thread.session_id)
    assert len(children) == (3 if fourth == "refused" else 4)  # nothing started twice, nothing left out
    assert all(len(child_requests(fake_gemini, t)) == 1 for t in tasks)
    resumed = next(r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r))
    responses = [r["response"] for r in function_responses(resumed)]
    assert [r.get("result") for r in responses[:3]] == ["crate 0: 10 kg", "crate 1: 11 kg", "crate 2: 12 kg"]
    assert len(responses) == 4  # one response per call, in call order
    if fourth == "refused":
        assert "the task is empty" in responses[3]["error"]
    else:
        assert responses[3]["result"]["status"] == "started"
        wait_status(ids.child_id(thread.session_id, 1, 3), SessionStatus.DONE, timeout=30)
        assert len(child_requests(fake_gemini, f"label {uid}")) == 1
    stored = steps.load_steps(thread.session_id)
    assert len([s for s in stored if s.kind == StepKind.ANSWER]) == 1  # resumed exactly once
    assert answers(fake_slack, thread)[0]["text"] == "Weighed."


def test_a_blocking_and_a_non_blocking_delegate_without_ids_each_run_once_and_report(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the non-blocking call's "started" answered the blocking one, so the blocking child's result never
    reached the parent and the non-blocking call ran again."""
    waited, side = f"count the boxes {uid}", f"sweep the floor {uid}"
    fake_gemini.script(
        FakeGemini.matching(
            f"[C{uid}]", idless(("delegate", {"task": waited}), ("delegate", {"task": side, "blocking": False}))
        )
    )
    for_child(fake_gemini, waited, G.delayed(2, G.text("12 boxes")))
    for_child(fake_gemini, side, G.text("the floor is clean"))
    fake_gemini.script(*(FakeGemini.matching(f"[C{uid}]", G.text("12 boxes; the floor is clean.")) for _ in range(3)))
    thread = mention(fake_slack, f"C{uid}", "count and sweep")
    conversation_done(thread.session_id, timeout=90)
    wait_for(lambda: len(children_of(thread.session_id)) == 2, timeout=60, what="two children")
    assert {c["status"] for c in children_of(thread.session_id)} == {SessionStatus.DONE.value}
    assert len(child_requests(fake_gemini, side)) == 1  # started once
    assert len(child_requests(fake_gemini, waited)) == 1
    resumed = [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)]
    responses = [r["response"] for r in function_responses(resumed[-1])]
    assert responses[0] == {"result": "12 boxes"}  # the blocking child's result, as its call's response
    assert responses[1]["result"]["status"] == "started"
    assert len(responses) == 2
    assert "the floor is clean" in str(requests_for(fake_gemini, f"[C{uid}]")[-1]["body"])
    stored = steps.load_steps(thread.session_id)
    assert len([s for s in stored if s.kind == StepKind.ANSWER]) == 1


@pytest.mark.usefixtures("restarted")
def test_a_turn_without_ids_killed_before_it_is_stored_still_answers_each_call_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The SIGKILL variant: the worker dies after the turn's calls ran and before their responses are stored (held
    at the tasks' status message); the takeover runs the turn again from the stored model step. Nothing starts
    twice, and each call still gets its own response."""
    tasks = [f"weigh crate {n} {uid}" for n in range(2)]
    calls = [("delegate", {"task": tasks[0]}), ("delegate", {"task": "  "}), ("delegate", {"task": tasks[1]})]
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", idless(*calls)),
        *(FakeGemini.matching(f"[C{uid}]", G.text("Weighed.")) for _ in range(3)),
    )
    for n, task in enumerate(tasks):
        for_child(fake_gemini, task, G.text(f"crate {n}: {n + 10} kg"))
    fake_slack.slow("chat.postMessage", 60, match=":busts_in_silhouette:")
    thread = mention(fake_slack, f"C{uid}", "weigh the crates")
    kill_at(Hold("the status message's post", "chat.postMessage", match=":busts_in_silhouette:"), stack,
            fake_slack, fake_gemini, 0)  # fmt: skip
    conversation_done(thread.session_id, timeout=120)
    assert len(children_of(thread.session_id)) == 2
    assert all(len(child_requests(fake_gemini, t)) == 1 for t in tasks)
    resumed = next(r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r))
    responses = [r["response"] for r in function_responses(resumed)]
    assert [responses[0].get("result"), responses[2].get("result")] == ["crate 0: 10 kg", "crate 1: 11 kg"]
    assert "the task is empty" in responses[1]["error"]
    assert len(responses) == 3
    assert len([s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]) == 1

"""Delegation (issue 14, flow 10): children on their own tasks, delivered in parallel, reporting to their parent.

On the real stack: children's tasks go through the parallel dispatcher, each child's model replies are scripted to
match its own task text, and every count (resumptions, results, posts) is read from Firestore and the fakes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud.firestore_v1.base_query import FieldFilter

from bench.rig import DirectTasks
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import OPERATOR_ID, Stack
from shared import deps
from shared.asks import delegation, stopping
from shared.errors import Contended
from shared.slack import blocks
from shared.state import approvals, firestore, ids, sessions, steps, tree_view
from shared.state import children as stored_children
from shared.state import questions as stored_questions
from shared.state.models import Question, SessionKind, SessionStatus, StepKind, WaitKind
from shared.state.new_sessions import mention_session
from shared.state.session_model import Session
from shared.usecases import worker
from tests import delivery
from tests.agent_helpers import (
    HUMAN,
    Thread,
    conversation_done,
    function_responses,
    mention,
    session,
    texts,
    wait_status,
)
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def for_child(fake_gemini: FakeGemini, task: str, *items: dict[str, Any]) -> None:
    """Model replies only the child whose task is ``task`` receives (its opening holds the task as this JSON;
    the parent's requests hold the task text too, but never so)."""
    fake_gemini.script(*(FakeGemini.matching(json.dumps({"task": task}), item) for item in items))


def parent_answers(fake_gemini: FakeGemini, uid: str, answer_child: dict[str, Any], report: str) -> None:
    """The parent's next three turns (its requests name the channel ``C{uid}``): the model turn ``answer_child``
    (its answer_child call), then it says it answered the helper, then ``report`` once the helper's result is in."""
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", answer_child),
        FakeGemini.matching(f"[C{uid}]", G.text("I answered the helper; it will report.")),
        FakeGemini.matching(f"[C{uid}]", G.text(report)),
    )


def delegating(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, task: str, request: str) -> tuple[Thread, str]:
    """A mention of ``request`` in ``C{uid}`` whose parent's first turn delegates ``task``: the parent's thread and the
    child's id (the child's own turns are the caller's to script)."""
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task)))
    thread = mention(fake_slack, f"C{uid}", request)
    return thread, ids.child_id(thread.session_id, 1, 0)


def delegated_asking(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, task: str, request: str, question: str,
                     result: str) -> tuple[Thread, str]:  # fmt: skip
    """A mention of ``request`` whose parent delegates ``task`` to a child that asks it ``question`` (blocking), then
    says ``result``; the parent's thread and the child's id."""
    thread, child_id = delegating(fake_slack, fake_gemini, uid, task, request)
    for_child(fake_gemini, task, G.call("ask_parent", question=question, blocking=True), G.text(result))
    return thread, child_id


def children_of(parent_id: str) -> list[dict[str, Any]]:
    query = (
        firestore.db().collection(firestore.SESSIONS).where(filter=FieldFilter("parent_session_id", "==", parent_id))
    )
    return [doc.to_dict() or {} for doc in query.stream()]


def child_requests(fake_gemini: FakeGemini, task: str) -> list[dict[str, Any]]:
    """The requests of the child whose task is ``task`` (its opening text holds the task as this JSON)."""
    return [r for r in fake_gemini.requests() if json.dumps({"task": task}) in texts(r)]


TREE_MARK = ":busts_in_silhouette:"  # the status message listing a tree's delegated tasks


def answers(fake_slack: FakeSlack, thread: Thread) -> list[dict[str, Any]]:
    """The bot's posts in the thread but the status message of its delegated tasks."""
    return [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if not m["text"].startswith(TREE_MARK)]


def tree_message(fake_slack: FakeSlack, thread: Thread) -> list[dict[str, Any]]:
    """The status messages of the thread's delegated tasks (one, if any)."""
    return [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["text"].startswith(TREE_MARK)]


def declared(request: dict[str, Any]) -> set[str]:
    return {d["name"] for tool in request["body"].get("tools", []) for d in tool.get("functionDeclarations", [])}


def requests_for(fake_gemini: FakeGemini, text: str) -> list[dict[str, Any]]:
    return [r for r in fake_gemini.requests() if text in json.dumps(r["body"])]


def test_a_blocking_fan_out_resumes_the_parent_once_with_every_result_in_call_order(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    tasks = [f"count the {fruit} in crate {uid}" for fruit in ("apples", "pears", "plums")]
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.calls(*(("delegate", {"task": t}) for t in tasks))))
    for task, count, delay in zip(tasks, (3, 5, 7), (1.5, 1.0, 0.5), strict=True):  # they end in reverse order
        for_child(fake_gemini, task, G.delayed(delay, G.text(f"{count} in the crate")))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("3 apples, 5 pears, 7 plums.")))
    thread = mention(fake_slack, f"C{uid}", "count the fruit")
    done = conversation_done(thread.session_id, timeout=60)

    children = children_of(thread.session_id)
    assert len(children) == 3
    assert {c["kind"] for c in children} == {SessionKind.CHILD.value}
    assert {c["status"] for c in children} == {SessionStatus.DONE.value}
    assert all(c["depth"] == 1 for c in children)
    final = requests_for(fake_gemini, f"[C{uid}]")[-1]
    results = [r["response"].get("result") for r in function_responses(final)]
    assert results == ["3 in the crate", "5 in the crate", "7 in the crate"]  # the order of the calls
    resumed = [s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]
    assert len(resumed) == 1  # resumed exactly once
    assert done.awaited(WaitKind.CHILD) == []
    # Children post nothing: the thread holds the parent's answer only.
    assert [m["text"] for m in answers(fake_slack, thread)] == ["3 apples, 5 pears, 7 plums."]
    [status] = tree_message(fake_slack, thread)  # one message, updated in place as the children ended
    assert "(3 of 3 finished)" in status["text"]
    assert [line.endswith("done_") for line in status["text"].splitlines()[1:]] == [True, True, True]
    assert all(task in status["text"] for task in tasks)
    child_request = requests_for(fake_gemini, tasks[0])[0]
    assert "delegate" in declared(child_request)  # depth 1 of 2: it may delegate once more
    assert not {"ask_operator", "post_update"} & declared(child_request)


def test_a_tree_budget_refuses_the_child_that_would_exceed_it_and_gets_back_what_children_did_not_use(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The stack's tree budget is 26 turns: the root keeps its own 6, each child gets 5. Four children fit and a
    fifth is refused with an error result; what the four did not use comes back when they end, so a later turn may
    delegate again. The tree's tokens add up on its root."""
    tasks = [f"probe shard {n} {uid}" for n in range(6)]
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.calls(*(("delegate", {"task": t}) for t in tasks[:5]))))
    for n, task in enumerate(tasks):
        for_child(fake_gemini, task, G.text(f"shard {n} ok"))
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=tasks[5])),
        FakeGemini.matching(f"[C{uid}]", G.text("Shards 0 to 3 and 5 are ok; 4 was not probed.")),
    )
    thread = mention(fake_slack, f"C{uid}", "probe the shards")
    conversation_done(thread.session_id, timeout=60)
    first = next(r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r))
    responses = [r["response"] for r in function_responses(first)]
    assert [r["result"] for r in responses if "result" in r] == [f"shard {n} ok" for n in range(4)]
    [refused] = [r["error"] for r in responses if "error" in r]
    assert "all 26 model turns of this task's tree are allotted" in refused
    # The later delegate call is the continuation's (the turn that waited on the first children resumed in it).
    children = children_of(thread.session_id) + children_of(ids.resume_id(thread.session_id, 1))
    assert sorted(c["text"] for c in children) == sorted(tasks[:4] + tasks[5:])  # the refused one never existed
    assert {c["max_turns"] for c in children} == {5}
    root = firestore.session_ref(thread.session_id).get().to_dict() or {}
    view = tree_view.view_ref(thread.session_id).get().to_dict()
    # Each child used one turn: 5 children x 5 allotted (on the root), 5 x 4 given back (in the tree's view).
    assert tree_view.reserved(root, view) == {"turns": 5, "tool_calls": 0}  # no child made a tool call
    totals = {kind: sum(c["tokens"].get(kind, 0) for c in children) for kind in ("prompt", "output")}
    assert totals["prompt"] > 0
    assert {kind: tree_view.tokens(thread.session_id).get(kind, 0) for kind in totals} == totals


def test_a_failed_child_is_an_error_result_never_silence(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    task = f"check the flaky build {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task)))
    for_child(fake_gemini, task, G.error(503, "UNAVAILABLE", "overloaded", times=3))  # each attempt of its request
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The helper failed; I will look myself.")))
    thread = mention(fake_slack, f"C{uid}", "check the build")
    conversation_done(thread.session_id, timeout=90)
    [child] = children_of(thread.session_id)
    assert child["status"] == SessionStatus.FAILED.value
    [response] = function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1])
    assert "did not finish" in response["response"]["error"]
    assert "unavailable" in response["response"]["error"]


def test_non_blocking_results_arrive_as_notes_or_resume_an_ended_parent(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    task = f"summarise the incident log {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task, blocking=False)))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("Started a helper; I will report its summary.")))
    for_child(fake_gemini, task, G.delayed(4, G.text("Disk filled at 03:10; rotated logs.")))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("Summary: the disk filled at 03:10.")))
    thread = mention(fake_slack, f"C{uid}", "summarise the incident")
    parent = wait_status(thread.session_id, SessionStatus.DONE, timeout=30)  # it did not wait for the child
    [child] = children_of(parent.session_id)
    later = wait_status(ids.child_result_id(child["session_id"]), SessionStatus.DONE, timeout=30)
    assert later.transcript == parent.session_id
    assert "Disk filled at 03:10" in texts(requests_for(fake_gemini, f"[C{uid}]")[-1])
    replies = [m["text"] for m in answers(fake_slack, thread)]
    assert replies == ["Started a helper; I will report its summary.", "Summary: the disk filled at 03:10."]


def test_delegation_stops_at_the_depth_limit(fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> None:
    """Depth 2 (the default): a grandchild is not offered delegate, and its call is refused saying the depth limit
    is reached (issue 24.11: not "unknown tool")."""
    child_task, grandchild_task = f"plan the migration {uid}", f"list the tables {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=child_task)))
    for_child(fake_gemini, child_task, G.call("delegate", task=grandchild_task))
    for_child(fake_gemini, grandchild_task, G.call("delegate", task=f"deeper {uid}"), G.text("users, orders"))
    for_child(fake_gemini, child_task, G.text("Plan: copy users, then orders."))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("Plan: copy users, then orders.")))
    thread = mention(fake_slack, f"C{uid}", "plan the migration")
    conversation_done(thread.session_id, timeout=60)
    [child] = children_of(thread.session_id)
    [grandchild] = children_of(child["session_id"])
    assert (child["depth"], grandchild["depth"]) == (1, 2)
    assert children_of(grandchild["session_id"]) == []
    grandchild_request = child_requests(fake_gemini, grandchild_task)[0]
    assert "delegate" not in declared(grandchild_request)
    refused = function_responses(requests_for(fake_gemini, f"deeper {uid}")[-1])
    assert any("delegation depth limit (2 level(s)) is reached" in str(r["response"].get("error")) for r in refused)
    assert not any("unknown tool" in str(r["response"].get("error")) for r in refused)
    # The grandchild's result reached its parent, and that parent's result reached the top (never empty).
    assert grandchild["result"] == "users, orders"
    assert child["result"] == "Plan: copy users, then orders."


def test_children_ending_together_and_delivered_twice_resume_the_parent_once(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    tasks = [f"ping host {n} {uid}" for n in range(4)]
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.calls(*(("delegate", {"task": t}) for t in tasks))))
    for task in tasks:
        for_child(fake_gemini, task, G.delayed(1, G.text(f"{task}: up")))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("All four hosts are up.")))
    thread = mention(fake_slack, f"C{uid}", "ping the hosts")
    child_ids = [ids.child_id(thread.session_id, 1, n) for n in range(4)]
    wait_status(child_ids[0], SessionStatus.RUNNING, SessionStatus.DONE, timeout=30)
    url = stack.function_url("agent_session")
    # The parent's task delivered again and again, two copies at once, while its children end and it resumes.
    parent_done = threading.Event()

    def redeliver_parent() -> None:
        n = 0
        while not parent_done.is_set():
            delivery.deliver(url, thread.session_id, task=f"dup-{thread.session_id}-{n}", copies=2)
            n += 1
            time.sleep(0.05)

    duplicates = threading.Thread(target=redeliver_parent)
    duplicates.start()
    try:
        for child_id in child_ids:  # Cloud Tasks may deliver each child's task again, in parallel
            delivery.deliver(url, child_id, task=f"again-{child_id}", copies=2)
        conversation_done(thread.session_id, timeout=60)
    finally:
        parent_done.set()
        duplicates.join()
    resumed = [s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]
    assert len(resumed) == 1
    assert len([r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)]) == 1
    assert sorted(len(requests_for(fake_gemini, t)) for t in tasks) == [2, 2, 2, 2]  # each child ran once
    final = requests_for(fake_gemini, f"[C{uid}]")[-1]
    assert [r["response"]["result"] for r in function_responses(final)] == [f"{t}: up" for t in tasks]
    assert [m["text"] for m in answers(fake_slack, thread)] == ["All four hosts are up."]


def test_a_risky_call_in_a_child_raises_a_card_and_runs_once_approved(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Never silently denied (claude-code issues 21474, 86126): the card names the child's task, the decision
    resumes only that child, and its result reaches the parent."""
    task = f"scale the api for the launch {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task)))
    for_child(fake_gemini, task, G.call("scale_service", name="api", replicas=6), G.text("Scaled api to 6."))
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The api runs 6 replicas now.")))
    thread = mention(fake_slack, f"C{uid}", "get ready for the launch")
    child_id = ids.child_id(thread.session_id, 1, 0)
    paused = wait_status(child_id, SessionStatus.PAUSED, timeout=30)
    [approval] = approvals.get_approvals(paused.awaited(WaitKind.APPROVAL))
    card = next(m for m in answers(fake_slack, thread) if m["ts"] == approval.card_ts)
    assert "delegated task" in card["text"]
    assert "scale the api for the launch" in card["text"]
    value = blocks.approval_value(approval.approval_id, approval.digest)
    fake_slack.click(OPERATOR_ID, thread.channel, approval.card_ts or "", blocks.APPROVE_ACTION, value=value)
    conversation_done(thread.session_id, timeout=60)
    ran = firestore.db().collection("demo_actions").where(filter=FieldFilter("session_id", "==", child_id))
    assert [(d.to_dict() or {}).get("replicas") for d in ran.stream()] == [6]
    [response] = function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1])
    assert response["response"]["result"] == "Scaled api to 6."
    replies = [m["text"] for m in answers(fake_slack, thread) if m["ts"] != approval.card_ts]
    assert replies == ["The api runs 6 replicas now."]


def test_a_childs_blocking_question_is_answered_by_its_parent_exactly_once(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The parent waits for the child; the child's question interrupts that wait (the delegate call gets a "still
    running" response), the parent answers with answer_child, the answer resumes exactly that child, and the
    child's result then reaches the parent's thread."""
    task = f"migrate the orders table {uid}"
    thread, child_id = delegated_asking(fake_slack, fake_gemini, uid, task, "migrate the orders", "Which database?",
                                        "Migrated the orders table to postgres.")  # fmt: skip
    parent_answers(
        fake_gemini,
        uid,
        G.call("answer_child", child_id=child_id, answer="postgres"),
        "The helper migrated the orders table to postgres.",
    )
    wait_for(lambda: thread_ends_with(fake_slack, thread, "to postgres."), timeout=60, what="the helper's report")
    child = wait_status(child_id, SessionStatus.DONE, timeout=30)
    assert child.result == "Migrated the orders table to postgres."
    asked_by_child = child_requests(fake_gemini, task)
    assert len(asked_by_child) == 2
    [answer] = [r["response"]["result"] for r in function_responses(asked_by_child[-1])]
    assert answer["answer"] == "postgres"
    parent_requests = requests_for(fake_gemini, f"[C{uid}]")
    asked = [r for r in parent_requests if "Which database?" in texts(r)]
    assert asked  # the question reached the parent
    released = function_responses(asked[0])
    assert [r["response"]["result"]["status"] for r in released] == ["still running"]
    replies = [m["text"] for m in answers(fake_slack, thread)]
    assert replies == ["I answered the helper; it will report.", "The helper migrated the orders table to postgres."]


def test_a_childs_question_escalated_to_the_operator_reaches_that_child(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The parent cannot answer: it asks the operator, and the session that resumes it answers the child."""
    task = f"rotate the signing key {uid}"
    thread, child_id = delegated_asking(
        fake_slack, fake_gemini, uid, task, "rotate the key", "May I revoke the old key now?",
        "Rotated; the old key is revoked.",
    )  # fmt: skip
    fake_gemini.script(
        FakeGemini.matching("May I revoke the old key now?", G.call("ask_operator", question="Revoke the old key?")),
        FakeGemini.matching(f"[C{uid}]", G.call("answer_child", child_id=child_id, answer="yes, revoke it")),
        FakeGemini.matching(f"[C{uid}]", G.text("Told the helper to go ahead.")),
        FakeGemini.matching(f"[C{uid}]", G.text("The key is rotated and the old one revoked.")),
    )
    question = wait_for(lambda: open_question_of(thread.session_id), timeout=60, what="the operator question")
    fake_slack.user_message(OPERATOR_ID, thread.channel, "yes", thread_ts=thread.ts)
    wait_for(lambda: thread_ends_with(fake_slack, thread, "old one revoked."), timeout=60, what="the final report")
    child = wait_status(child_id, SessionStatus.DONE, timeout=30)
    assert child.parent_question is not None
    assert child.parent_question.answer == "yes, revoke it"
    [answer] = function_responses(child_requests(fake_gemini, task)[-1])
    assert answer["response"]["result"]["answer"] == "yes, revoke it"
    assert question.text == "Revoke the old key?"


def thread_ends_with(fake_slack: FakeSlack, thread: Thread, tail: str) -> bool:
    replies = answers(fake_slack, thread)
    return bool(replies) and str(replies[-1]["text"]).endswith(tail)


def open_question_of(session_id: str) -> Question | None:
    query = firestore.db().collection(firestore.QUESTIONS).where(filter=FieldFilter("status", "==", "open"))
    found = [Question.from_doc(d.to_dict() or {}) for d in query.stream()]
    return next((q for q in found if q.transcript_id == session_id), None)


def test_stopping_a_session_stops_its_tree_running_paused_and_asking(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The parent waits on the operator, one child runs (a slow model reply), the other waits for its parent's
    answer: a stop ends all three, cancels the open question (its post says so) and nothing reports afterwards."""
    slow, asking = f"scan every bucket {uid}", f"pick the region {uid}"
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.calls(("delegate", {"task": slow}),
                                                                ("delegate", {"task": asking}))))  # fmt: skip
    for_child(fake_gemini, slow, G.delayed(6, G.text("Scanned.")))
    for_child(fake_gemini, asking, G.call("ask_parent", question="Which region?", blocking=True))
    fake_gemini.script(FakeGemini.matching("Which region?", G.call("ask_operator", question="Region for the scan?")))
    thread = mention(fake_slack, f"C{uid}", "scan the buckets")
    question = wait_for(lambda: open_question_of(thread.session_id), timeout=60, what="the operator question")
    # The child's question released the turn's children: the turn resumed (its continuation), which asked.
    writer = wait_status(ids.resume_id(thread.session_id, 1), SessionStatus.PAUSED, timeout=30).session_id
    slow_child, asking_child = (ids.child_id(thread.session_id, 1, n) for n in (0, 1))
    wait_status(asking_child, SessionStatus.PAUSED, timeout=30)
    running = session(slow_child)
    assert running is not None
    assert running.status == SessionStatus.RUNNING  # its model reply is still on its way

    stopped = stopping.stop(writer, by="<@U0OPERATOR>")
    assert set(stopped) == {writer, slow_child, asking_child}
    for member in (writer, asking_child, slow_child):
        wait_status(member, SessionStatus.STOPPED, timeout=30)
    # The asking child was stopped before its parent's waits were closed: it was not answered (an answer would have
    # queued it to run on, and it could end failed rather than stopped).
    asker = session(asking_child)
    assert asker is not None
    assert asker.parent_question is not None
    assert asker.parent_question.answer is None
    closed = stored_questions.get_question(question.question_id)
    assert closed is not None
    assert closed.status.value == "cancelled"
    post = next(m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == closed.post_ts)
    assert "stopped" in post["text"]
    assert answers(fake_slack, thread)[-1]["text"].startswith(":octagonal_sign: Stopped by")
    time.sleep(2)  # nothing reports after the stop: no continuation, no new post
    assert session(ids.child_result_id(slow_child)) is None
    assert answers(fake_slack, thread)[-1]["text"].startswith(":octagonal_sign: Stopped by")


def test_a_depth_3_chain_whose_grandchild_asks_never_hands_an_empty_result_up(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """adk-python issue 7245: the grandchild's question releases the child, which answers it and then tries to
    report before the grandchild has finished. The child waits for it instead, reads its result, and only then
    reports; the top-level session gets a result that includes the grandchild's work."""
    child_task, grandchild_task = f"plan the copy of the shop database {uid}", f"copy the first table {uid}"
    thread, child_id = delegating(fake_slack, fake_gemini, uid, child_task, "copy the shop database")
    grandchild_id = ids.child_id(child_id, 1, 0)
    for_child(fake_gemini, grandchild_task, G.call("ask_parent", question="Which table first?", blocking=True),
              G.delayed(2, G.text("Copied the users table.")))  # fmt: skip
    for_child(
        fake_gemini, child_task,
        G.call("delegate", task=grandchild_task),
        G.call("answer_child", child_id=grandchild_id, answer="users"),
        G.text("Answered the helper."),  # an early result: the grandchild still works
        G.text("The users table is copied; orders next."),
    )  # fmt: skip
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The helper copied the users table.")))
    conversation_done(thread.session_id, timeout=60)
    child = session(child_id)
    grandchild = session(grandchild_id)
    assert child is not None
    assert grandchild is not None
    assert grandchild.result == "Copied the users table."
    assert child.result == "The users table is copied; orders next."  # not the early one, not empty
    assert "Copied the users table." in texts(child_requests(fake_gemini, child_task)[-1])
    [response] = function_responses(requests_for(fake_gemini, f"[C{uid}]")[-1])
    assert response["response"]["result"] == "The users table is copied; orders next."
    assert grandchild.parent_question is not None
    assert grandchild.parent_question.answer == "users"
    [status] = tree_message(fake_slack, thread)
    assert "(2 of 2 finished)" in status["text"]


def test_a_grandchild_that_asks_after_its_parent_waits_for_it_is_never_reported_as_failed(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a child reported early, so it waited for its still-running grandchild; the grandchild then asked it a
    question, which released that wait and woke the child. Resuming, the child was handed a result note for every
    child its wait had named, the released grandchild's too: "failed", "(error: the helper ended without a result)"
    while it ran, and its real result came later as a second note. Now the released grandchild's result reaches the
    child once, when it ends."""
    child_task, grandchild_task = f"plan the copy of the shop database {uid}", f"copy the first table {uid}"
    thread, child_id = delegating(fake_slack, fake_gemini, uid, child_task, "copy the shop database")
    grandchild_id = ids.child_id(child_id, 1, 0)
    for_child(fake_gemini, grandchild_task,
              G.delayed(3, G.call("ask_parent", question="Which table first?", blocking=True)),  # once the child waits
              G.text("Copied the users table."))  # fmt: skip
    for_child(
        fake_gemini, child_task,
        G.call("delegate", task=grandchild_task, blocking=False),
        G.text("Started the copy."),  # an early result: it waits for the grandchild, which has not asked yet
        G.call("answer_child", child_id=grandchild_id, answer="users"),
        G.text("Answered the helper."),
        G.text("The users table is copied."),
    )  # fmt: skip
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The helper copied the users table.")))
    conversation_done(thread.session_id, timeout=90)
    child = wait_status(child_id, SessionStatus.DONE, timeout=30)
    assert child.result == "The users table is copied."
    requests = child_requests(fake_gemini, child_task)
    assert "Which table first?" in texts(requests[2])  # the question woke it
    last = json.dumps(requests[-1]["body"]["contents"])
    assert NO_RESULT_NOTE not in last  # never told the running grandchild ended without a result
    assert last.count("Copied the users table.") == 1  # its result, once


NO_RESULT_NOTE = stored_children.NO_RESULT


BACKUP_DONE = "Last night's backup is complete."  # the grandchild's result: only the child's requests hold it
BACKUP_REPORT = "Last night's backup in backups-eu is complete."  # the child's result, once it has read it


def reminded_child(fake_gemini: FakeGemini, child_task: str, grandchild_task: str, grandchild_id: str) -> None:
    """A child that delegates ``grandchild_task``, whose grandchild asks it "Which bucket?"; the child first tries to
    report without answering, then answers (after the reminder), and reports once it has the grandchild's result.

    Each reply is chosen by what the request holds (the stub takes the first queued item whose text the request
    holds), never by the order of the requests, so whenever the grandchild's result reaches the child, the request
    that holds it takes the report: one holding the result takes it; one holding the answer (``backups-eu``, the
    child's call) waits for the helper; one holding the reminder answers; one holding the question ignores it; any
    other delegates. Each is scripted once: a request asked again with nothing new finds no reply."""
    # The grandchild's first: its requests hold "Which bucket?" and "backups-eu" too (the parent's are queued before).
    for_child(fake_gemini, grandchild_task, G.call("ask_parent", question="Which bucket?", blocking=True),
              G.text(BACKUP_DONE))  # fmt: skip
    fake_gemini.script(
        FakeGemini.matching(BACKUP_DONE, G.text(BACKUP_REPORT)),
        FakeGemini.matching("backups-eu", G.text("Waiting for the helper.")),
        FakeGemini.matching("(still waiting for your answer_child)",
                            G.call("answer_child", child_id=grandchild_id, answer="backups-eu")),
        FakeGemini.matching("Which bucket?", G.text("Backups look fine.")),  # ignores the question
        FakeGemini.matching(json.dumps({"task": child_task}), G.call("delegate", task=grandchild_task)),
    )  # fmt: skip


def assert_reported_after_reading_the_result(fake_gemini: FakeGemini, child_id: str, child_task: str) -> None:
    """The child was reminded of the question once, answered it, and reported once it had read the grandchild's
    result: never asked its model again with nothing new (a request ending with its own last turn)."""
    child = session(child_id)
    assert child is not None
    assert (child.status, child.result) == (SessionStatus.DONE, BACKUP_REPORT), (child.status, child.error)
    requests = child_requests(fake_gemini, child_task)
    assert [r["body"]["contents"][-1]["role"] for r in requests] == ["user"] * len(requests)
    assert "still waiting for your answer_child" in texts(requests[2])
    # Its result reached it with its fourth request (it had ended as the answer was stored) or its fifth (after the
    # child said it waits for the helper): the request that holds it is the last.
    holding = [n for n, r in enumerate(requests) if BACKUP_DONE in texts(r)]
    assert holding == [len(requests) - 1], [texts(r)[-300:] for r in requests]
    assert len(requests) in (4, 5), [texts(r)[-300:] for r in requests]


def parent_here(fake_slack: FakeSlack, uid: str, text: str) -> tuple[str, Session]:
    """A thread's top-level session for ``text``, stored as its mention's would be but run by the test in this
    process (the message has no mention, so nothing else starts it); its channel and the session."""
    channel = f"C{uid}"
    root = fake_slack.user_message(HUMAN, channel, f"{text} [{channel}]")["ts"]
    parent = sessions.create_session(mention_session(
        event_id=f"Ev{uid}", channel=channel, thread_ts=root, ts=root, user=HUMAN, text=f"{text} [{channel}]",
        at=firestore.now(),
    ))  # fmt: skip
    return channel, parent


def test_a_child_that_tries_to_report_before_answering_its_childs_question_is_reminded(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Waiting for a grandchild that waits for an answer would wait for ever: the child hears the question again
    instead, answers it, and then waits for the grandchild's result, however late it comes."""
    child_task, grandchild_task = f"check the backups {uid}", f"check last night's backup {uid}"
    thread, child_id = delegating(fake_slack, fake_gemini, uid, child_task, "check the backups")
    fake_gemini.script(FakeGemini.matching(f"[C{uid}]", G.text("The backups are fine.")))  # before the child's
    reminded_child(fake_gemini, child_task, grandchild_task, ids.child_id(child_id, 1, 0))
    conversation_done(thread.session_id, timeout=60)
    assert_reported_after_reading_the_result(fake_gemini, child_id, child_task)


def test_a_grandchild_that_ends_while_its_parent_settles_is_read_before_its_next_model_turn(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (a fresh-clone CI run of the test above, its grandchild's reply late): the child said it waits for the
    helper; it read its unfinished children, and the grandchild ended before it made them blocking again; it found
    none left to wait for and asked its model again at once, its conversation ending with its own last turn, the
    grandchild's result not read yet (a record its next step commit reads). That spent a turn of its five: the one
    after it read the result and could not report (no turn left, the wrap-up). Now it reports again, and its end
    reads the result first. Here every task is delivered in this process, and the grandchild's answered delivery is
    held until the child has read its unfinished children."""
    child_task, grandchild_task = f"check the backups {uid}", f"check last night's backup {uid}"
    channel, parent = parent_here(fake_slack, uid, "check the backups")
    child_id = ids.child_id(parent.session_id, 1, 0)
    grandchild_id = ids.child_id(child_id, 1, 0)
    fake_gemini.script(FakeGemini.matching(f"[{channel}]", G.call("delegate", task=child_task)),
                       FakeGemini.matching(f"[{channel}]", G.text("The backups are fine.")))  # fmt: skip
    reminded_child(fake_gemini, child_task, grandchild_task, grandchild_id)
    answered = threading.Event()  # the child read its unfinished children after answering: the grandchild may end
    deliveries: list[str] = []

    def deliver(session_id: str, name: str, attempts: list[str]) -> None:
        deliveries.append(session_id)
        if session_id == grandchild_id and deliveries.count(session_id) > 1:  # resumed by the child's answer
            assert answered.wait(timeout=60), "the child never read its unfinished children after answering"
        for attempt in range(8):  # as Cloud Tasks delivers: again, backing off, while the session asks for it
            attempts.append(session_id)
            try:
                if not worker.run_delivery(session_id, task=name, attempt=attempt).retry:
                    return
            except Contended:  # its handler would ask for a retry (a transaction gave up for contention)
                pass
            time.sleep(min(2.0, 0.1 * 2**attempt))

    unfinished_of = stored_children.unfinished_of
    held: list[str] = []

    def then_the_grandchild_ends(parent_id: str) -> list[str]:
        found = unfinished_of(parent_id)
        asked = (session(grandchild_id) or parent).parent_question
        if parent_id == child_id and grandchild_id in found and asked and asked.answer and not answered.is_set():
            held.extend(found)
            answered.set()
            wait_status(grandchild_id, SessionStatus.DONE, timeout=60)
        return found

    monkeypatch.setattr(stored_children, "unfinished_of", then_the_grandchild_ends)
    tasks = DirectTasks(send=deliver)
    with deps.override(tasks=tasks):
        tasks.dispatch(parent.session_id, f"in-process-{uid}")
        conversation_done(parent.session_id, timeout=90)
        while live := [t for t in tasks.threads if t.is_alive()]:
            live[0].join(60)
            assert not live[0].is_alive(), "a delivery did not end"
    assert held == [grandchild_id]  # the timing held: it ended after the child read it unfinished
    assert_reported_after_reading_the_result(fake_gemini, child_id, child_task)
    assert len(child_requests(fake_gemini, child_task)) == 5


def test_a_question_left_unanswered_by_an_ended_session_tells_the_child_to_decide(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A non-blocking child asks; its parent reads the question and ends without answering: the child is told to
    decide itself (instead of waiting for ever), and its result resumes the thread's transcript."""
    task = f"pick a region for the replica {uid}"
    fake_gemini.script(
        FakeGemini.matching(f"[C{uid}]", G.call("delegate", task=task, blocking=False)),
        FakeGemini.matching(f"[C{uid}]", G.delayed(3, G.text("A helper is on it."))),
        FakeGemini.matching(f"[C{uid}]", G.text("The helper will decide the region.")),
        FakeGemini.matching(f"[C{uid}]", G.text("The replica goes to europe-west1.")),
    )
    for_child(fake_gemini, task, G.call("ask_parent", question="Which region?", blocking=True),
              G.text("Decided myself: europe-west1."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "add a replica")
    child_id = ids.child_id(thread.session_id, 1, 0)
    wait_status(ids.child_result_id(child_id), SessionStatus.DONE, timeout=60)
    child = session(child_id)
    assert child is not None
    assert child.parent_question is not None
    assert child.parent_question.answer == delegation.UNANSWERED
    # The parent reads the question with its delegate call's results, or (its first answer held 3 s) at its next
    # turn, whichever the child's ask reaches first (a loaded machine starts the child late or early); either way
    # it ends without answering, and the child's result resumes the transcript in one more turn.
    requests = requests_for(fake_gemini, f"[C{uid}]")
    asked = next(n for n, request in enumerate(requests) if "Which region?" in texts(request))
    assert asked in (1, 2), asked
    assert len(requests) == asked + 2
    assert "Decided myself: europe-west1." in texts(requests[-1])
    replies = [m["text"] for m in answers(fake_slack, thread)]
    in_turn = ["A helper is on it.", "The helper will decide the region.", "The replica goes to europe-west1."]
    assert replies == in_turn[: len(requests) - 1]


def test_a_question_that_reaches_the_parent_before_it_pauses_is_read_not_waited_on(
    fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a blocking child asked its blocking question while its parent was between starting it and pausing;
    the question became a note, the parent paused on its children all the same, and each waited for the other for
    ever. Here the parent runs in this process and its launch returns only once the child has asked."""
    task = f"index the orders table {uid}"
    channel, parent = parent_here(fake_slack, uid, "index the table")
    child_id = ids.child_id(parent.session_id, 1, 0)
    fake_gemini.script(*(FakeGemini.matching(f"[{channel}]", item) for item in (
        G.call("delegate", task=task),
        G.call("answer_child", child_id=child_id, answer="created_at"),
        G.text("I told the helper which column."),
        G.text("The orders table is indexed on created_at."),
    )))  # fmt: skip
    for_child(fake_gemini, task, G.call("ask_parent", question="Which column?", blocking=True),
              G.text("Indexed created_at."))  # fmt: skip
    launch = delegation.launch

    def launch_then_wait_for_the_question(child_ids: list[str]) -> None:
        launch(child_ids)
        wait_for(lambda: (session(child_id) or parent).parent_question, timeout=30, what="the child's question")

    monkeypatch.setattr(delegation, "launch", launch_then_wait_for_the_question)
    worker.run_delivery(parent.session_id, task=f"in-process-{uid}", attempt=0)

    child = wait_status(child_id, SessionStatus.DONE, timeout=60)
    assert child.result == "Indexed created_at."
    assert "Which column?" in texts(requests_for(fake_gemini, f"[{channel}]")[1])
    thread = Thread(channel=channel, ts=parent.origin.thread_ts, session_id=parent.session_id)
    wait_for(lambda: thread_ends_with(fake_slack, thread, "indexed on created_at."), timeout=60, what="the report")
    released = function_responses(requests_for(fake_gemini, f"[{channel}]")[1])
    assert [r["response"]["result"]["status"] for r in released] == ["still running"]

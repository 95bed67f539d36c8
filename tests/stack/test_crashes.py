"""A worker SIGKILLed at every step boundary of an ask → answer → continuation flow and of a turn with several
outward calls (issue 11): 0 lost answers, 0 duplicate continuations, 0 duplicate posts, and no non-idempotent
tool run twice.

Each case holds the worker at one boundary (a slow fake Slack answer, or a slow model reply), SIGKILLs the
agent_session process group there, starts a new one, and lets the task's redelivery take the session over. The
evidence is read from Firestore, the fake Slack's messages and the Gemini stub's requests.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from google.cloud.firestore_v1.base_query import FieldFilter
from google.genai import types

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.agent.transcript import to_json
from shared.slack import client as slack
from shared.state import firestore, ids
from shared.state import questions as stored
from shared.state.models import Note, NoteKind, Question, QuestionStatus, SessionKind, SessionStatus, Step, StepKind
from shared.state.session_model import Session
from shared.state.steps import load_steps
from tests import delivery
from tests.agent_helpers import HUMAN, conversation_done, function_responses, mention, wait_status
from tests.agent_helpers import texts as texts_of
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID


@dataclass(frozen=True)
class Hold:
    """Where the worker is held when it is killed."""

    name: str
    method: str  # "model" (a slow model reply), or a Slack method answered slowly
    match: str = ""  # for a Slack method: text its arguments contain
    nth_model_request: int = 1  # for "model": hold the worker inside this model call (1-based, per test)
    after_answer: bool = False  # the hold is in the continuation, after the operator's answer


def kill_at(hold: Hold, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, before: int) -> None:
    """Wait until the worker is held at ``hold``, then SIGKILL it and start a fresh agent_session."""
    if hold.method == "model":
        fake_gemini.wait_for_requests(before + hold.nth_model_request, timeout=30)
    else:
        wait_for(
            lambda: [c for c in fake_slack.calls(hold.method) if hold.match in repr(c["args"])],
            timeout=30,
            what=f"the worker to reach {hold.name}",
        )
    stack.kill_function("agent_session")
    stack.start_function("agent_session")


@pytest.fixture
def restarted(stack: Stack) -> Iterator[None]:
    """Whatever a case does to agent_session, the next test finds it running."""
    yield
    if "agent_session" not in stack.procs:
        stack.start_function("agent_session")


ASK_FLOW = [
    Hold("the model call that asks", "model", nth_model_request=1),
    Hold("the question's post", "chat.postMessage", match="Which region?"),
    Hold("the question's reaction", "reactions.add", match="speech_balloon"),
    Hold("the continuation's model call", "model", nth_model_request=2, after_answer=True),
    Hold("the continuation's answer post", "chat.postMessage", match="Deployed to europe-west1", after_answer=True),
]


@pytest.mark.parametrize("hold", ASK_FLOW, ids=[h.name for h in ASK_FLOW])
@pytest.mark.usefixtures("restarted")
def test_ask_answer_continue_survives_a_kill(
    hold: Hold, script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    asks = G.call("ask_operator", question="Which region?", options=["us-central1", "europe-west1"])
    answers = G.text("Deployed to europe-west1.")
    if hold.method == "model":
        slow = G.delayed(60, asks if hold.nth_model_request == 1 else answers)
        script(*([slow, asks, answers] if hold.nth_model_request == 1 else [asks, slow, answers]))
    else:
        fake_slack.slow(hold.method, 60, match=hold.match)
        script(asks, answers)
    before = len(fake_gemini.requests())
    thread = mention(fake_slack, f"C{uid}", "deploy it")
    if not hold.after_answer:
        kill_at(hold, stack, fake_slack, fake_gemini, before)
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    question = stored.get_question(paused.awaited_question or "")
    assert question is not None
    assert question.post_ts is not None
    reply = fake_slack.user_message(OPERATOR, thread.channel, "2", thread_ts=thread.ts)
    assert [d["status"] for d in reply["deliveries"]] == [200]
    if hold.after_answer:
        kill_at(hold, stack, fake_slack, fake_gemini, before)
    continuation = wait_status(ids.resumed_by(question.question_id), SessionStatus.DONE, timeout=90)

    # 0 lost answers: the answer reached the model as the ask's function response.
    answered = stored.get_question(question.question_id)
    assert answered is not None
    assert answered.status == QuestionStatus.ANSWERED
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"]["matched_option"] == "europe-west1"
    # 0 duplicate continuations.
    query = (
        firestore.db()
        .collection(firestore.SESSIONS)
        .where(filter=FieldFilter("asker_session_id", "==", question.session_id))  # the paused session resumes once
    )
    assert [s.id for s in query.stream() if (s.to_dict() or {}).get("kind") == "continuation"] == [
        continuation.session_id
    ]
    # 0 duplicate posts: one question, one answer.
    texts = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert sum("Which region?" in t for t in texts) == 1, texts
    assert texts.count("Deployed to europe-west1.") == 1, texts


def executions(session_id: str) -> Counter[str]:
    """How often restart_service really ran, per service (counted in Firestore, outside the worker)."""
    query = firestore.db().collection("demo_actions").where(filter=FieldFilter("session_id", "==", session_id))
    return Counter(str((doc.to_dict() or {})["service"]) for doc in query.stream())


TOOL_TURN = [
    Hold("the model call that makes the calls", "model"),
    Hold("inside the first restart (started, not done)", "chat.postMessage", match="Restarting `api`"),
    Hold("between the first restart's end and the second's", "chat.postMessage", match="Restarting `web`"),
    # Each restart's done record rides in the next commit (issue 28.1): the second's start, the step with both results.
    Hold("after the step that stores both results", "model", nth_model_request=2),
    Hold("the answer post", "chat.postMessage", match="Both restarted."),
]


@pytest.mark.parametrize("hold", TOOL_TURN, ids=[h.name for h in TOOL_TURN])
@pytest.mark.usefixtures("restarted")
def test_a_turn_of_outward_calls_never_runs_a_non_idempotent_tool_twice(
    hold: Hold, script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    turn = G.calls(
        ("restart_service", {"name": "api", "environment": "staging"}),
        ("restart_service", {"name": "web", "environment": "staging"}),
    )
    if hold.method == "model":
        answer = G.text("Both restarted.")
        slow = G.delayed(60, turn if hold.nth_model_request == 1 else answer)
        script(*([slow, turn, answer] if hold.nth_model_request == 1 else [turn, slow, answer]))
    else:
        fake_slack.slow(hold.method, 60, match=hold.match)
        script(turn, G.text("Both restarted."))
    before = len(fake_gemini.requests())
    thread = mention(fake_slack, f"C{uid}", "restart api and web in staging")
    kill_at(hold, stack, fake_slack, fake_gemini, before)
    wait_status(thread.session_id, SessionStatus.DONE, timeout=90)

    ran = executions(thread.session_id)
    assert all(count <= 1 for count in ran.values()), ran  # no non-idempotent tool run twice
    responses: list[dict[str, Any]] = function_responses(fake_gemini.requests()[-1])
    unknown = [r for r in responses if "outcome unknown" in str(r["response"].get("error", ""))]
    if hold.name.startswith("inside the first"):
        assert ran == Counter({"web": 1})
        assert len(unknown) == 1  # the model is told, and so are the operators:
        assert any("cannot tell whether" in m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts))
    elif hold.name.startswith("between"):
        assert ran == Counter({"api": 1})
        assert len(unknown) == 1
    else:
        assert ran == Counter({"api": 1, "web": 1})
        assert unknown == []
    texts = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert len(texts) == len(set(texts)), texts  # no post twice
    assert texts[-1] == "Both restarted."


@pytest.mark.parametrize("held", ["after the inward call ran", "after the step that stores the results"])
@pytest.mark.usefixtures("restarted")
def test_a_call_outside_the_ledger_runs_only_once_the_results_before_it_are_recorded(
    held: str, script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A restart's done record waits for the run's next commit (issue 28.1), but a call outside the ledger (the
    thread's read here) runs only after it: killed once the read ran (the next call held by the read's status,
    which Slack answers late), the first restart's result was recorded before the read and is reused; killed in the
    model request after the step, every result is stored with it. Either way each restart ran once and no outcome
    is unknown."""
    turn = G.calls(
        ("restart_service", {"name": "api", "environment": "staging"}),
        ("read_thread", {"limit": 5}),
        ("restart_service", {"name": "web", "environment": "staging"}),
    )
    answer = G.text("Both restarted.")
    if held.startswith("after the inward"):
        # the next call waits (three times: slack-sdk gives up on a call after 10 s and sends it again)
        fake_slack.slow("assistant.threads.setStatus", 60, times=3, match="is reading the thread")
        script(turn, answer)
    else:
        script(turn, G.delayed(60, answer), answer)
    before = len(fake_gemini.requests())
    thread = mention(fake_slack, f"C{uid}", "restart api and web in staging")
    if held.startswith("after the inward"):
        asked = fake_gemini.wait_for_requests(before + 1, timeout=30)[before]["time"]  # after the opening's read
        wait_for(lambda: [c for c in fake_slack.calls("conversations.replies", channel=thread.channel)
                          if c["time"] > asked], timeout=30, what="the thread's read")  # fmt: skip
        stack.kill_function("agent_session")
        stack.start_function("agent_session")
        fake_slack.release("assistant.threads.setStatus")  # the takeover's statuses are answered at once
    else:
        kill_at(Hold(held, "model", nth_model_request=2), stack, fake_slack, fake_gemini, before)
    wait_status(thread.session_id, SessionStatus.DONE, timeout=90)

    assert executions(thread.session_id) == Counter({"api": 1, "web": 1})
    responses: list[dict[str, Any]] = function_responses(fake_gemini.requests()[-1])
    assert [r for r in responses if "outcome unknown" in str(r["response"].get("error", ""))] == [], responses
    texts = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert len(texts) == len(set(texts)), texts  # no post twice


def test_a_worker_killed_after_its_ask_was_answered_meanwhile_resumes_with_that_answer(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the answer reached the asker while it finished its ask (``AnsweredMeanwhile``); it stored the turn's
    other responses, then was killed before storing the answer. The takeover took the ask's ids from the last step
    and its position among the still-pending calls, so it asked a second, new question and paused on it.

    The kill lands between two Firestore commits with no call to hold on, so the test writes the state that kill
    leaves (what each commit had written) and lets a redelivery take the session over.
    """
    channel = f"C{uid}"
    root = fake_slack.user_message(HUMAN, channel, f"deploy it [{channel}]")["ts"]  # no mention: no session
    session_id = f"killed-{uid}"
    long_ago = firestore.now() - timedelta(seconds=90)  # within the wall budget, its lease expired
    question_id = ids.question_id(session_id, 1, 1)
    post_ts = slack.post(channel, root, "Question: Which region?", key=ids.post_key(session_id, 1, "1:question"))
    turn = types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(id="c0", name="post_update", args={"text": "Starting."})),
        types.Part(function_call=types.FunctionCall(id="c1", name="ask_operator", args={"question": "Which region?"})),
    ])  # fmt: skip
    results = types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(
        id="c0", name="post_update", response={"posted": True}))])  # fmt: skip
    opening = types.Content(role="user", parts=[types.Part(text=f"deploy it [{channel}]")])
    for seq, kind, content in [(0, StepKind.PROMPT, opening), (1, StepKind.MODEL, turn),
                               (2, StepKind.TOOL_RESULTS, results)]:  # fmt: skip
        step = Step(seq=seq, session_id=session_id, kind=kind, content=to_json(content), audit=[], at=long_ago)
        firestore.step_ref(session_id, seq).create(step.to_doc())
    answer = Note(kind=NoteKind.ANSWER, text="europe-west1", user=OPERATOR, ts="9.1", question_id=question_id,
                  question="Which region?")  # fmt: skip
    dead = Session.new(
        session_id=session_id, kind=SessionKind.MENTION, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=HUMAN, text=f"deploy it [{channel}]", created_at=long_ago, status=SessionStatus.RUNNING,
        worker="gone", lease_task="t", lease_until=long_ago + timedelta(seconds=60), started_at=long_ago, next_seq=3,
        turns=1, tool_calls=2, notes=[answer],
    )  # fmt: skip
    firestore.session_ref(session_id).create(dead.to_doc())
    firestore.question_ref(question_id).create(Question(
        question_id=question_id, session_id=session_id, transcript_id=session_id, channel=channel, thread_ts=root,
        text="Which region?", options=[], blocking=True, call_id="c1", asked_at=long_ago, post_ts=post_ts,
        status=QuestionStatus.ANSWERED, answer="europe-west1", answered_by=OPERATOR, answer_ts="9.1",
        continuation_id=session_id,
    ).to_doc())  # fmt: skip
    script(G.text("Deploying to europe-west1."))

    attempts = delivery.deliver(stack.function_url("agent_session"), session_id, task=f"takeover-{uid}")
    assert [a.status for a in attempts] == [200], attempts
    wait_status(session_id, SessionStatus.DONE, timeout=30)
    asked = firestore.db().collection(firestore.QUESTIONS).where(filter=FieldFilter("session_id", "==", session_id))
    assert [q.id for q in asked.stream()] == [question_id]  # no second question
    responses = {r["id"]: r["response"] for r in function_responses(fake_gemini.requests()[-1])}
    assert responses["c1"].get("result", {}).get("answer") == "europe-west1", responses
    assert responses["c0"] == {"posted": True}
    texts = [m["text"] for m in fake_slack.bot_replies(channel, root)]
    assert sum("Which region?" in t for t in texts) == 1, texts


TREE = [
    Hold("a child's model call", "child"),
    Hold("the status message's post, before the parent pauses", "chat.postMessage", match=":busts_in_silhouette:"),
    Hold("a child's end, as it updates the status message", "chat.update", match="orders — _:white_check_mark: done"),
    Hold("the parent's model call after its children", "model"),
]


@pytest.mark.parametrize("hold", TREE, ids=[h.name for h in TREE])
@pytest.mark.usefixtures("restarted")
def test_a_delegation_tree_survives_a_kill_at_every_boundary(
    hold: Hold, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Two blocking children; the worker is killed with every session it runs at the boundary. The tree still
    completes: each child's result reaches the parent once, the parent resumes once, and the thread holds one
    status message and one answer."""
    tasks = [f"{uid}: count the rows of orders", f"{uid}: count the rows of users"]
    child_items = {tasks[0]: G.text("orders: 10 rows"), tasks[1]: G.text("users: 20 rows")}
    final = G.text("orders has 10 rows and users 20.")
    parent = [G.calls(*(("delegate", {"task": t}) for t in tasks))]
    parent += [G.delayed(60, final), final] if hold.method == "model" else [final]
    fake_gemini.script(*(FakeGemini.matching(f"[C{uid}]", item) for item in parent))
    for task, item in child_items.items():
        slow = [G.delayed(60, item)] if hold.method == "child" and task == tasks[0] else []
        fake_gemini.script(*(FakeGemini.matching(json.dumps({"task": task}), i) for i in [*slow, item]))
    if hold.method.startswith("chat."):
        fake_slack.slow(hold.method, 60, match=hold.match)
    thread = mention(fake_slack, f"C{uid}", "count the rows")
    if hold.method != "chat.postMessage":
        # The other child ends first: a worker killed inside a Firestore transaction leaves its locks until they
        # expire (a minute and more on the emulator), which would only slow this test down.
        wait_status(ids.child_id(thread.session_id, 1, 1), SessionStatus.DONE, timeout=60)
    if hold.method == "child":
        wait_for(lambda: requests_with(fake_gemini, json.dumps({"task": tasks[0]})), timeout=30, what="child's call")
        stack.kill_function("agent_session")
        stack.start_function("agent_session")
    elif hold.method == "model":
        wait_for(lambda: len(requests_with(fake_gemini, f"[C{uid}]")) >= 2, timeout=30, what="the resumed parent")
        stack.kill_function("agent_session")
        stack.start_function("agent_session")
    else:
        if hold.method == "chat.update":  # the resumed parent runs meanwhile: let it end outside a transaction
            conversation_done(thread.session_id, timeout=60)
        kill_at(hold, stack, fake_slack, fake_gemini, 0)
    conversation_done(thread.session_id, timeout=120)

    resumed = [s for s in load_steps(thread.session_id) if s.kind == StepKind.ANSWER]
    assert len(resumed) == 1  # the parent resumed once
    final_request = requests_with(fake_gemini, f"[C{uid}]")[-1]
    assert [r["response"]["result"] for r in function_responses(final_request)] == ["orders: 10 rows", "users: 20 rows"]
    for n in range(2):
        child = firestore.session_ref(ids.child_id(thread.session_id, 1, n)).get().to_dict() or {}
        assert child["status"] == SessionStatus.DONE.value
    replies = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)]
    status = [t for t in replies if t.startswith(":busts_in_silhouette:")]
    assert len(status) == 1, replies  # one status message, however often it was posted
    assert "(2 of 2 finished)" in status[0]
    assert [t for t in replies if t not in status] == ["orders has 10 rows and users 20."]


def requests_with(fake_gemini: FakeGemini, text: str) -> list[dict[str, Any]]:
    return [r for r in fake_gemini.requests() if text in texts_of(r)]

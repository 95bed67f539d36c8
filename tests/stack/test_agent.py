"""The agent session end to end: fake Slack → slack_events → Cloud Tasks emulator → agent_session → Gemini stub."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import requests

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks.answers import decide
from shared.queue import tasks
from shared.slack import blocks
from shared.state import firestore, ids, questions, sessions, steps
from shared.state.models import QuestionStatus, SessionStatus
from shared.state.questions import AnswerRecord
from shared.state.sessions import ClaimResult
from tests.agent_helpers import function_responses, mention, open_question, texts, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def reaction_calls(fake_slack: FakeSlack, ts: str) -> list[str]:
    """The reaction changes on one message, in order: '+eyes', '-eyes', '+white_check_mark'."""
    calls = [c for c in fake_slack.calls() if c["method"] in {"reactions.add", "reactions.remove"}]
    return [
        ("+" if c["method"] == "reactions.add" else "-") + c["args"]["name"]
        for c in calls
        if c["args"].get("timestamp") == ts
    ]


def answer(question_id: str, text: str, *, option: str | None = None) -> str:
    """An operator's answer, as the answers path records it: the question closes, a continuation is queued."""
    answer_ts = f"{time.time():.6f}"  # each answer is its own Slack message
    record = AnswerRecord(
        answer=text, answered_by=local.OPERATOR_ID, matched_option=option, answer_ts=answer_ts, text=text
    )
    result = questions.answer_question(question_id, record, lambda q, asker: decide(record, q, asker))
    continuation = result.continuation
    assert continuation is not None
    tasks.enqueue_session(continuation.session_id)
    return continuation.session_id


def test_mention_gets_a_final_reply_with_reactions_in_order(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.text("Hello **there**. See [the docs](https://example.com/a_b)."))
    thread = mention(fake_slack, f"C{uid}", "say hello")
    done = wait_status(thread.session_id, SessionStatus.DONE)
    [reply] = fake_slack.bot_replies(thread.channel, thread.ts)
    assert reply["text"] == "Hello *there*. See <https://example.com/a_b|the docs>."
    # The status is committed first, then the reactions change: wait for them.
    # Slack's status shows the work and is cleared at the end; the reaction that stays marks how it ended.
    wait_for(lambda: reaction_calls(fake_slack, thread.ts) == ["+white_check_mark"], what="the reactions")
    assert fake_slack.statuses(thread.channel, thread.ts) == ["is thinking…", ""]
    assert done.limits.turns == 1
    [request] = fake_gemini.requests()
    assert "say hello" in texts(request)
    assert request["body"]["systemInstruction"]["parts"][0]["text"].startswith("You are a helpful")
    declared = {d["name"] for tool in request["body"]["tools"] for d in tool["functionDeclarations"]}
    assert {"ask_operator", "post_update", "read_thread", "fetch_url"} <= declared


def test_a_follow_up_shows_the_model_its_own_earlier_answer_as_its_own(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """The opening names a thread message "you (the assistant)" only when this app's bot user wrote it (auth.test):
    a follow-up mention's model reads the earlier answer as its own, and the person's words as theirs."""
    script(G.text("The answer is 42."))
    thread = mention(fake_slack, f"C{uid}", "what is the answer")
    wait_status(thread.session_id, SessionStatus.DONE)
    script(G.text("Still 42."))
    sent = fake_slack.user_message(
        "U0HUMAN", thread.channel, f"<@{local.BOT_USER_ID}> are you sure? [{thread.channel}]", thread_ts=thread.ts
    )
    [delivery] = [d for d in sent["deliveries"] if d["type"] == "app_mention"]
    wait_status(ids.session_for_event(delivery["event_id"]), SessionStatus.DONE)
    shown = texts(fake_gemini.requests()[-1])
    assert '"from": "you (the assistant)", "text": "The answer is 42."' in shown, shown
    assert "another app" not in shown


def test_long_answers_are_split_into_several_messages(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    paragraphs = "\n\n".join(f"Paragraph {i}: " + "word " * 400 for i in range(12))
    script(G.text(paragraphs))
    thread = mention(fake_slack, f"C{uid}", "write a lot")
    wait_status(thread.session_id, SessionStatus.DONE)
    replies = fake_slack.bot_replies(thread.channel, thread.ts)
    assert len(replies) >= 3
    # Each message's markdown block holds a part within the limit the split leaves room for (Slack's is 12,000).
    assert all(len(r["blocks"][0]["text"]) <= blocks.ANSWER_CHARS for r in replies)
    assert "Paragraph 11" in replies[-1]["text"]


def test_ask_operator_pauses_and_the_answer_resumes(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("ask_operator", question="sqlite or postgres?", options=["sqlite", "postgres"]))
    thread = mention(fake_slack, f"C{uid}", "set up the database")
    paused = wait_status(thread.session_id, SessionStatus.PAUSED)

    question = open_question(paused.session_id)
    assert question.status == QuestionStatus.OPEN
    assert question.options == ["sqlite", "postgres"]
    [post] = fake_slack.bot_replies(thread.channel, thread.ts)
    assert post["ts"] == question.post_ts
    assert "sqlite or postgres?" in post["text"]
    assert "1. sqlite" in post["text"]
    assert "2. postgres" in post["text"]
    buttons = [e for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [b["value"] for b in buttons] == [f"{question.question_id}|1", f"{question.question_id}|2"]
    assert fake_slack.reactions(thread.channel, post["ts"]) == ["speech_balloon"]
    # The status is committed first, then the reactions change: wait for them.
    wait_for(lambda: fake_slack.statuses(thread.channel, thread.ts)[-1:] == [""], what="the status cleared")
    assert fake_slack.statuses(thread.channel, thread.ts) == ["is thinking…", "is asking the operator", ""]
    assert reaction_calls(fake_slack, thread.ts) == []

    script(G.text("Going with postgres."))
    continuation = answer(question.question_id, "postgres", option="postgres")
    wait_status(continuation, SessionStatus.DONE)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "Going with postgres."

    second = fake_gemini.requests()[1]
    [response] = function_responses(second)
    assert response["name"] == "ask_operator"
    assert response["response"]["result"]["answer"] == "postgres"
    assert response["response"]["result"]["matched_option"] == "postgres"
    model_turns = [c for c in second["body"]["contents"] if c["role"] == "model"]
    assert model_turns[-1]["parts"][0]["functionCall"]["id"] == response["id"]


def test_ask_answer_ask_answer_done(script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str) -> None:
    script(G.call("ask_operator", question="Which region?"))
    thread = mention(fake_slack, f"C{uid}", "deploy it")
    first = open_question(wait_status(thread.session_id, SessionStatus.PAUSED).session_id)

    script(G.call("ask_operator", question="May I restart prod?", options=["yes", "no"]))
    second_session = answer(first.question_id, "europe-west1")
    second = open_question(wait_status(second_session, SessionStatus.PAUSED).session_id)
    assert second.question_id != first.question_id

    script(G.text("Deployed to europe-west1 and restarted."))
    third_session = answer(second.question_id, "yes", option="yes")
    wait_status(third_session, SessionStatus.DONE)

    replies = [r["text"] for r in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert len(replies) == 3
    assert "Which region?" in replies[0]
    assert "May I restart prod?" in replies[1]
    assert replies[2] == "Deployed to europe-west1 and restarted."
    last = fake_gemini.requests()[-1]
    answers = [r["response"]["result"]["answer"] for r in function_responses(last)]
    assert answers == ["europe-west1", "yes"]


def test_a_duplicate_task_delivery_does_nothing(
    script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.text("done once"))
    thread = mention(fake_slack, f"C{uid}", "once please")
    wait_status(thread.session_id, SessionStatus.DONE)
    # A second delivery, as Cloud Tasks makes one: its reply says it did nothing.
    reply = requests.post(
        stack.function_url("agent_session"),
        json={"session_id": thread.session_id},
        headers={"X-CloudTasks-TaskName": "duplicate", "X-CloudTasks-TaskRetryCount": "0"},
        timeout=30,
    )
    assert (reply.status_code, reply.json()) == (200, {"ok": True, "skipped": "already done"})
    assert len(fake_gemini.requests()) == 1
    assert len(fake_slack.bot_replies(thread.channel, thread.ts)) == 1


def test_a_live_lease_is_not_taken_by_another_task(fake_slack: FakeSlack, uid: str) -> None:
    from shared.state.models import SessionKind
    from shared.state.session_model import Session

    session = Session.new(
        session_id=f"lease-{uid}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts="1.0", trigger_ts="1.0",
        trigger_user="U1", text="x", created_at=firestore.now(),
    )  # fmt: skip
    firestore.db().collection(firestore.SESSIONS).document(session.session_id).create(session.to_doc())
    first = sessions.claim_session(session.session_id, worker="w1", task="t1", attempt=0, lease_seconds=60)
    assert first.session is not None
    assert first.result == ClaimResult.CLAIMED
    for task, attempt in (("t2", 0), ("t1", 0)):
        again = sessions.claim_session(session.session_id, worker="w2", task=task, attempt=attempt, lease_seconds=60)
        assert again.session is None
        assert again.result == ClaimResult.LIVE_LEASE
    # A retry while the lease was renewed within a heartbeat (15 s of a 60 s lease) and a renewal's slack (7.5 s):
    # attempt 0 may be alive.
    early = sessions.claim_session(session.session_id, worker="w3", task="t1", attempt=1, lease_seconds=60)
    assert (early.result, early.session) == (ClaimResult.RENEWED_LATELY, None)
    quiet = firestore.now() + timedelta(seconds=23.5)
    claim = sessions.claim_session(session.session_id, worker="w3", task="t1", attempt=1, lease_seconds=60, at=quiet)
    redelivered = claim.session
    assert redelivered is not None
    assert claim.result == ClaimResult.TOOK_OVER_RETRY
    later = firestore.now().replace(year=firestore.now().year + 1)
    expired = sessions.claim_session(session.session_id, worker="w4", task="t9", attempt=0, lease_seconds=60, at=later)
    assert expired.session is not None
    assert expired.result == ClaimResult.TOOK_OVER_EXPIRED
    with pytest.raises(steps.LeaseLost):
        steps.commit_step(redelivered, None, lease_seconds=60)


def test_a_copy_of_a_delivery_that_loses_the_claim_for_contention_is_a_duplicate(
    uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parallel copies of one task delivery all want the session document: one that cannot commit its claim after
    the retries, while a copy of the same delivery holds a live lease, is a duplicate (200), not a failure (500);
    one that loses to anything else still fails, for Cloud Tasks to retry."""
    from shared.errors import Contended
    from shared.state.models import SessionKind
    from shared.state.session_model import Session

    session = Session.new(
        session_id=f"copy-{uid}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts="1.0", trigger_ts="1.0",
        trigger_user="U1", text="x", created_at=firestore.now(),
    )  # fmt: skip
    firestore.db().collection(firestore.SESSIONS).document(session.session_id).create(session.to_doc())
    assert sessions.claim_session(session.session_id, worker="w1", task="t1", attempt=2, lease_seconds=60).session

    def contended(*_: object, **__: object) -> object:
        raise Contended("a Firestore transaction gave up for contention: Failed to commit transaction in 8 attempts.")

    monkeypatch.setattr(sessions, "contended", contended)
    copy = sessions.claim_session(session.session_id, worker="w2", task="t1", attempt=2, lease_seconds=60)
    assert (copy.result, copy.session) == (ClaimResult.LIVE_LEASE, None)
    for task, attempt in (("t1", 3), ("t2", 0)):  # a later attempt, or another task: not a copy of the winner
        with pytest.raises(Contended, match="Failed to commit"):
            sessions.claim_session(session.session_id, worker="w3", task=task, attempt=attempt, lease_seconds=60)


def test_a_killed_worker_is_taken_over_without_posting_twice(
    script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(
        G.call("post_update", text="Working on it."),
        G.delayed(30, G.text("this answer is lost with the killed worker")),
        G.text("All done after the restart."),
    )
    thread = mention(fake_slack, f"C{uid}", "a long job")
    fake_gemini.wait_for_requests(2, timeout=30)  # the worker is now inside its second model call
    stack.kill_function("agent_session")
    stack.start_function("agent_session")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    replies = [r["text"] for r in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert replies == ["Working on it.", "All done after the restart."]
    assert done.lease.attempt >= 1
    assert len(fake_gemini.requests()) == 3


def test_tools_forever_ends_with_a_wrap_up_inside_the_budget(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(*[G.call("read_thread", limit=5) for _ in range(6)], G.text("Summary: I read a lot."))
    thread = mention(fake_slack, f"C{uid}", "loop forever")
    done = wait_status(thread.session_id, SessionStatus.DONE)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "Summary: I read a lot."
    requests = fake_gemini.requests()
    assert len(requests) == 7
    assert "tools" not in requests[-1]["body"]
    assert "budget" in texts(requests[-1])
    assert done.limits.turns == 7
    assert done.limits.tool_calls == 6


def test_a_429_or_503_then_success_gives_one_session(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.error(503, "UNAVAILABLE", "overloaded", times=1), G.error(429, "RESOURCE_EXHAUSTED", "slow"))
    script(G.text("made it"))
    thread = mention(fake_slack, f"C{uid}", "try hard")
    wait_status(thread.session_id, SessionStatus.DONE)
    assert [r["text"] for r in fake_slack.bot_replies(thread.channel, thread.ts)] == ["made it"]
    assert len(fake_gemini.requests()) == 3


def test_a_model_that_stays_down_fails_and_says_so(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.error(503, "UNAVAILABLE", "the model is down", times=20))
    thread = mention(fake_slack, f"C{uid}", "anyone there?")
    failed = wait_status(thread.session_id, SessionStatus.FAILED)
    [reply] = fake_slack.bot_replies(thread.channel, thread.ts)
    assert "could not finish" in reply["text"]
    assert "unavailable" in reply["text"]
    # The status is committed first, then the reactions change: wait for them.
    wait_for(lambda: reaction_calls(fake_slack, thread.ts) == ["+warning"], what="the reactions")
    assert fake_slack.statuses(thread.channel, thread.ts) == ["is thinking…", ""]
    assert failed.error
    stored = steps.load_steps(thread.session_id)
    assert stored[-1].kind == "failed"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (G.call("ask_operator"), "bad arguments for ask_operator: question: Missing required argument"),
        (G.call("read_thread", limit="lots"), "bad arguments for read_thread: limit"),
        (G.call("no_such_tool", x=1), "unknown tool 'no_such_tool'"),
        (G.call("fetch_url", url="http://169.254.169.254/computeMetadata/v1/"), "refus"),
    ],
)
def test_bad_calls_go_back_to_the_model_as_errors(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, call: dict[str, Any], error: str
) -> None:
    script(call, G.text("ok, I recovered"))
    # A URL named in the thread may be fetched without an approval (and is then refused as private).
    url = str(call["function_calls"][0]["args"].get("url", "")) if "function_calls" in call else ""
    thread = mention(fake_slack, f"C{uid}", f"break a tool {url}")
    wait_status(thread.session_id, SessionStatus.DONE)
    [response] = function_responses(fake_gemini.requests()[1])
    assert error in response["response"]["error"], json.dumps(response)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "ok, I recovered"


def test_the_stored_transcript_round_trips_into_content(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    from shared.agent.transcript import contents_of

    script(G.call("read_thread", limit=3), G.text("read it"))
    thread = mention(fake_slack, f"C{uid}", "read the thread")
    wait_status(thread.session_id, SessionStatus.DONE)
    contents = contents_of(steps.load_steps(thread.session_id))
    assert [c.role for c in contents] == ["user", "model", "user", "model"]
    assert contents[1].parts[0].function_call.name == "read_thread"  # type: ignore[index,union-attr]
    assert contents[2].parts[0].function_response.name == "read_thread"  # type: ignore[index,union-attr]


def test_malformed_function_call_arguments_go_back_to_the_model(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    malformed = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"functionCall": {"name": "read_thread", "args": "lots"}}]},
                "finishReason": "STOP",
            }
        ]
    }
    script(G.raw(malformed), G.text("recovered from a bad reply"))
    thread = mention(fake_slack, f"C{uid}", "send garbage")
    wait_status(thread.session_id, SessionStatus.DONE)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "recovered from a bad reply"
    assert "could not be read" in texts(fake_gemini.requests()[-1])


def test_a_context_the_model_rejects_falls_back_to_one_reply_without_tools(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("read_thread", limit=5), G.context_overflow(), G.text("A short answer from what I know."))
    thread = mention(fake_slack, f"C{uid}", "summarise everything")
    wait_status(thread.session_id, SessionStatus.DONE)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"] == "A short answer from what I know."
    last = fake_gemini.requests()[-1]
    assert "tools" not in last["body"]
    assert "too long" in texts(last)
    assert function_responses(last) == []  # only the request and the instruction are sent


def test_older_tool_results_are_shortened_first() -> None:
    from google.genai import types

    from shared.agent.transcript import SHORTENED, shorten_tool_results

    def result(n: int) -> types.Content:
        response = types.FunctionResponse(id=f"c{n}", name="fetch_url", response={"result": "x" * 4000})
        return types.Content(role="user", parts=[types.Part(function_response=response)])

    contents = [result(n) for n in range(5)]
    shortened = shorten_tool_results(contents, limit_tokens=2500)
    responses = [c.parts[0].function_response.response for c in shortened]  # type: ignore[index,union-attr]
    assert responses[0] == {"result": SHORTENED}
    assert responses[-1] == {"result": "x" * 4000}  # the latest turn stays whole
    assert responses.count({"result": SHORTENED}) < 4  # it stops as soon as the estimate fits
    assert contents[0].parts[0].function_response.response == {"result": "x" * 4000}  # type: ignore[index,union-attr]

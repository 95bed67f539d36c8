"""Exactly once, for real (issue 11): answers that race the ask, one message per answer, nothing waits for the
daily sweep. Each test opens the race window on the real stack (a slow fake Slack, a delayed model reply) and
reads the evidence from the stores and the fakes' records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

import pytest
import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import answers
from shared.queue import tasks
from shared.slack.events import Message
from shared.state import firestore, ids, ledger, sessions, steps
from shared.state import questions as stored
from shared.state.models import Question, QuestionStatus, SessionKind, SessionStatus, Step, StepKind, Waiting
from shared.state.new_sessions import continuation_session, mention_session
from shared.state.session_model import Session
from shared.state.sessions import ClaimResult
from shared.usecases import intake
from tests import delivery
from tests.agent_helpers import HUMAN, function_responses, mention, texts, wait_status
from tests.poll import wait_for
from tests.seeded import dead_worker_session

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID


def question_post(fake_slack: FakeSlack, channel: str, thread_ts: str) -> dict[str, object]:
    def posted() -> dict[str, object] | None:
        return next((m for m in fake_slack.bot_replies(channel, thread_ts) if "Question" in m["text"]), None)

    return wait_for(posted, what="the question post")


def test_a_reply_while_the_asker_finishes_its_ask_is_its_answer_and_makes_no_continuation(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the answer created a continuation at once, and both wrote the one transcript."""
    script(
        G.call("ask_operator", question="Which database?", options=["sqlite", "postgres"]), G.text("Postgres it is.")
    )
    fake_slack.slow("reactions.add", 3, match="speech_balloon")  # the asker is held right after posting
    thread = mention(fake_slack, f"C{uid}", "set up storage")
    post = question_post(fake_slack, thread.channel, thread.ts)
    reply = fake_slack.user_message(OPERATOR, thread.channel, "2", thread_ts=thread.ts)
    assert [d["status"] for d in reply["deliveries"]] == [200]
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=30)
    question = stored.get_question(done.question_id or ids.question_id(thread.session_id, 1, 0))
    assert question is not None
    assert (question.status, question.matched_option, question.post_ts) == (
        QuestionStatus.ANSWERED, "postgres", post["ts"],
    )  # fmt: skip
    assert sessions.get_session(ids.resumed_by(question.question_id)) is None
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"]["answer"] == "2"
    replies = [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)]
    assert replies[-1] == "Postgres it is."
    assert len(replies) == 2
    assert "answered: 2" in replies[0]  # the question post shows its answer, buttons gone


def test_a_press_before_the_post_is_recorded_answers_the_question(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a fast press was refused as "does not belong to an open question"."""
    script(G.call("ask_operator", question="Restart?", options=["yes", "no"]), G.text("Restarted."))
    fake_slack.slow("chat.postMessage", 3, match="Restart?")  # visible at once, its ts known to the asker late
    thread = mention(fake_slack, f"C{uid}", "restart it")
    post = question_post(fake_slack, thread.channel, thread.ts)
    qid = ids.question_id(thread.session_id, 1, 0)
    assert stored.get_question(qid) is not None  # the record exists before the post is visible
    clicked = fake_slack.click(OPERATOR, thread.channel, str(post["ts"]), "answer_1", value=f"{qid}|1")
    assert clicked["status"] == 200
    wait_status(thread.session_id, SessionStatus.DONE, timeout=30)
    assert fake_slack.ephemerals(thread.channel) == []
    question = stored.get_question(qid)
    assert question is not None
    assert (question.status, question.answer, question.answer_pressed) == (QuestionStatus.ANSWERED, "yes", True)
    assert sessions.get_session(ids.resumed_by(qid)) is None
    assert [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)][-1] == "Restarted."


def test_a_note_during_a_turn_that_ends_in_a_blocking_ask_moves_to_the_continuation(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the pause commit raised NotesPending; every retry re-ran the turn and the session failed."""
    script(G.delayed(2, G.call("ask_operator", question="Which region?")), G.text("Deployed in europe-west1."))
    thread = mention(fake_slack, f"C{uid}", "deploy it")
    fake_gemini.wait_for_requests(1, timeout=30)
    steer = fake_slack.user_message(HUMAN, thread.channel, "also keep the old one running", thread_ts=thread.ts)
    assert [d["status"] for d in steer["deliveries"]] == [200]
    paused = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    assert [n.text for n in paused.notes] == ["also keep the old one running"]
    fake_slack.user_message(OPERATOR, thread.channel, "europe-west1", thread_ts=thread.ts)
    question_id = paused.awaited_question or ""
    continuation = wait_status(ids.resumed_by(question_id), SessionStatus.DONE, timeout=30)
    assert continuation.notes == []
    assert sessions.get_session(thread.session_id).status == SessionStatus.RESUMED  # type: ignore[union-attr]
    last = fake_gemini.requests()[-1]
    assert [r["response"]["result"]["answer"] for r in function_responses(last)] == ["europe-west1"]
    assert "also keep the old one running" in texts(last)


@pytest.mark.parametrize("pauses_before", ["running_read", "note"])
def test_a_reply_while_its_session_pauses_on_a_question_answers_it(
    script: Script,
    fake_slack: FakeSlack,
    fake_gemini: FakeGemini,
    uid: str,
    monkeypatch: pytest.MonkeyPatch,
    pauses_before: str,
) -> None:
    """Defect: a reply read its thread (nothing open: the session was still running), then looked for the thread's
    running session; the session asked its question and paused in between, before that read ("running_read") or
    before the note's transaction ("note"). The reply was neither an answer nor a note: dropped, its sender told
    nothing, the question left waiting. Now it answers the question that opened meanwhile. The session's model turn
    (its ask) is held until the reply has read the thread; the reply's next read waits for the pause. The running
    session is looked up as the thread was read, so a pause before that lookup finds it running all the same (its
    note's transaction then finds it paused)."""
    script(G.delayed(10, G.call("ask_operator", question="Which region?")), G.text("Deployed in europe-west1."))
    thread = mention(fake_slack, f"C{uid}", "deploy it")
    fake_gemini.wait_for_requests(1, timeout=30)  # running, its turn (the ask) on its way
    question_id = ids.question_id(thread.session_id, 1, 0)
    read_thread, read_running = stored.thread_questions, sessions.steered_session_in_thread

    def before_the_ask(channel: str, thread_ts: str) -> stored.ThreadQuestions:
        monkeypatch.setattr(stored, "thread_questions", read_thread)
        found = read_thread(channel, thread_ts)
        assert found.open == []
        assert stored.get_question(question_id) is None
        return found

    def paused_meanwhile(channel: str, thread_ts: str, *, as_of: datetime | None = None) -> Session | None:
        monkeypatch.setattr(sessions, "steered_session_in_thread", read_running)
        if pauses_before == "running_read":
            wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
        found = read_running(channel, thread_ts, as_of=as_of)
        assert found is not None
        assert found.status == SessionStatus.RUNNING  # as the thread was read
        wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
        return found

    monkeypatch.setattr(stored, "thread_questions", before_the_ask)
    monkeypatch.setattr(sessions, "steered_session_in_thread", paused_meanwhile)
    reply = Message(event_id=f"Ev{uid}", event_type="message", channel=thread.channel, thread_ts=thread.ts,
                    ts=f"{thread.ts}1", user=OPERATOR, text="europe-west1", direct=False)  # fmt: skip
    routed = intake.route(reply, bot_user_id=local.BOT_USER_ID, retry_num=None)
    assert routed.detail == {"ok": True, "answer": "answered"}, routed
    wait_status(ids.resumed_by(question_id), SessionStatus.DONE, timeout=30)
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["response"]["result"]["answer"] == "europe-west1"


def test_one_message_answers_at_most_one_question(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a reply's app_mention twin (or Slack's redelivery) answered the next open question too."""
    script(
        G.call("ask_operator", question="First?", blocking=False),
        G.call("ask_operator", question="Second?", blocking=False),
        G.text("I will carry on when you answer."),
        G.text("Thanks."),
    )
    thread = mention(fake_slack, f"C{uid}", "two things")
    wait_status(thread.session_id, SessionStatus.DONE, timeout=30)
    before = stored.thread_questions(thread.channel, thread.ts).open
    assert [q.text for q in before] == ["Second?", "First?"]
    sent = fake_slack.user_message(OPERATOR, thread.channel, f"<@{local.BOT_USER_ID}> yes", thread_ts=thread.ts)
    assert sorted(d["type"] for d in sent["deliveries"]) == ["app_mention", "message"]
    for event in sent["deliveries"]:
        fake_slack.redeliver(event["event_id"])  # Slack retries both
    still_open = stored.thread_questions(thread.channel, thread.ts).open
    assert [q.text for q in still_open] == ["First?"]
    continuation = wait_status(ids.continuation_id(before[0].question_id), SessionStatus.DONE, timeout=30)
    assert continuation.kind == SessionKind.CONTINUATION
    assert sessions.get_session(ids.continuation_id(before[1].question_id)) is None


def test_a_message_for_a_session_whose_worker_died_resumes_it_at_once(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the message was queued as a note for a dead worker and waited for the daily sweep."""
    dead, _ = dead_worker_session(fake_slack, f"dead-{uid}", f"C{uid}", "check the build",
                                  claimed_at=firestore.now() - timedelta(minutes=10),
                                  lease=timedelta(minutes=4))  # fmt: skip
    channel, root = dead.origin.channel, dead.origin.thread_ts
    script(G.text("The build is green."))
    sent = fake_slack.user_message(HUMAN, channel, "any news?", thread_ts=root)
    assert [d["status"] for d in sent["deliveries"]] == [200]
    wait_status(dead.session_id, SessionStatus.DONE, timeout=30)
    assert "any news?" in texts(fake_gemini.requests()[-1])


def test_the_rescue_queues_a_session_left_queued(
    script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a session whose task was never created waited for the daily sweep."""
    channel = f"C{uid}"
    root = fake_slack.user_message(HUMAN, channel, f"hello [{channel}]")["ts"]
    lost = Session.new(
        session_id=f"lost-{uid}", kind=SessionKind.MENTION, channel=channel, thread_ts=root,
        trigger_ts=root, trigger_user=HUMAN, text=f"hello [{channel}]",
        created_at=firestore.now() - timedelta(minutes=3),
    )  # fmt: skip
    firestore.session_ref(lost.session_id).create(lost.to_doc())
    script(G.text("Hello."))
    reply = requests.post(stack.function_url("sweep"), json={"job": "rescue"}, timeout=60)
    assert reply.status_code == 200
    assert reply.json()["requeued"] >= 1
    wait_status(lost.session_id, SessionStatus.DONE, timeout=30)


def test_a_failed_outward_call_still_needs_a_report(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: the silent-exit gate ignored an outward call that failed, so an update then silence counted as done."""
    script(
        G.call("post_update", text="Checking the metadata server."),
        G.call("fetch_url", url="http://169.254.169.254/computeMetadata/v1/"),
        G.text(""),
        G.text("I could not reach it: the address is refused."),
    )
    thread = mention(fake_slack, f"C{uid}", "check the metadata server http://169.254.169.254/computeMetadata/v1/")
    silent = wait_status(thread.session_id, SessionStatus.SILENT_EXIT, timeout=30)
    assert silent.closed_loop is False
    wait_status(ids.retry_id(thread.session_id), SessionStatus.DONE, timeout=30)


def test_two_sessions_never_write_one_transcript(stack: Stack, uid: str) -> None:
    """A continuation is claimed only once its asker stopped, and from then on only it may add steps."""
    at = firestore.now()
    asker = mention_session(event_id=f"Ev{uid}", channel=f"C{uid}", thread_ts="1.0", ts="1.0", user=HUMAN, text="x",
                            at=at)  # fmt: skip
    firestore.session_ref(asker.session_id).create(asker.to_doc())
    running = sessions.claim_session(asker.session_id, worker="w1", task="t1", attempt=0, lease_seconds=60).session
    assert running is not None
    question = Question(
        question_id=f"q-{uid}", session_id=asker.session_id, transcript_id=asker.session_id, channel=f"C{uid}",
        thread_ts="1.0", text="?", options=[], blocking=True, call_id="c1", asked_at=at,
    )  # fmt: skip
    continuation = continuation_session(question, answer_ts="2.0", user=OPERATOR, text="yes", at=at)
    firestore.session_ref(continuation.session_id).create(continuation.to_doc())

    busy = sessions.claim_session(continuation.session_id, worker="w2", task="t2", attempt=0, lease_seconds=60)
    assert (busy.result, busy.session) == (ClaimResult.TRANSCRIPT_BUSY, None)

    firestore.session_ref(asker.session_id).update({"status": SessionStatus.PAUSED.value})
    claimed = sessions.claim_session(continuation.session_id, worker="w2", task="t2", attempt=0, lease_seconds=60)
    assert claimed.result == ClaimResult.CLAIMED
    # A stale asker that believes it still runs cannot add a step any more.
    firestore.session_ref(asker.session_id).update({"status": SessionStatus.RUNNING.value})
    with pytest.raises(steps.LeaseLost, match="writes this transcript"):
        steps.commit_step(running, None, lease_seconds=60)


def test_a_calls_done_record_is_written_with_its_step_and_only_under_the_lease(stack: Stack, uid: str) -> None:
    """Issue 28.1: the ledger's done record rides in the commit of the step that carries the call's result. A worker
    that lost its session writes neither (the entry stays started: a takeover says the outcome is unknown); the
    worker that holds it writes both at once."""
    at = firestore.now()
    mentioned = mention_session(event_id=f"Ev{uid}", channel=f"C{uid}", thread_ts="1.0", ts="1.0", user=HUMAN,
                                text="x", at=at)  # fmt: skip
    firestore.session_ref(mentioned.session_id).create(mentioned.to_doc())
    running = sessions.claim_session(mentioned.session_id, worker="w1", task="t1", attempt=0, lease_seconds=60).session
    assert running is not None
    ledger.start(running, seq=0, index=0, key="k0", name="restart_service", args="{}")
    done = ledger.finished(running, seq=0, index=0, response={"result": {"restarted": "api"}})
    step = Step(seq=running.next_seq, session_id=running.session_id, kind=StepKind.TOOL_RESULTS, content=None,
                audit=[], at=at)  # fmt: skip
    stored_step = firestore.step_ref(running.transcript, step.seq)

    firestore.session_ref(running.session_id).update({"worker": "w2"})  # taken over meanwhile
    with pytest.raises(steps.LeaseLost):
        steps.commit_step(running, step, lease_seconds=60, fenced=[done])
    assert ledger.entries(running, 0, [0])[0].status == ledger.CallStatus.STARTED
    assert not stored_step.get().exists

    firestore.session_ref(running.session_id).update({"worker": "w1"})
    steps.commit_step(running, step, lease_seconds=60, fenced=[done])
    recorded = ledger.entries(running, 0, [0])[0]
    assert (recorded.status, recorded.response) == (ledger.CallStatus.DONE, {"result": {"restarted": "api"}})
    assert stored_step.get().exists


def test_parallel_deliveries_of_a_running_session_run_it_once(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Cloud Tasks may deliver a task again while its first delivery runs: every copy but one does nothing."""
    script(G.delayed(2, G.text("Once.")))
    thread = mention(fake_slack, f"C{uid}", "do it once")
    fake_gemini.wait_for_requests(len(fake_gemini.requests()) + 1, timeout=30)
    attempts = delivery.deliver(stack.function_url("agent_session"), thread.session_id, task="dup", copies=4)
    assert all(a.body.get("skipped") for a in delivery.settled(attempts))
    wait_status(thread.session_id, SessionStatus.DONE, timeout=30)
    assert [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)] == ["Once."]


def test_parallel_copies_of_a_continuation_naming_its_record_store_its_step_once(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A continuation's task names the waiting record it resumes, and its claim then stores the resumed step in its
    own commit (``shared/agent/waits/in_claim.py``): three copies of that delivery at once, as Cloud Tasks may make,
    all answer 2xx, one step answers the question, and the model is asked once. The answer is recorded here, with
    its task's body kept instead of queued, so that only these copies deliver it."""
    script(G.call("ask_operator", question="Which zone?"), G.text("Zone b it is."))
    thread = mention(fake_slack, f"C{uid}", "pick a zone")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    kept: list[dict[str, object]] = []

    def keep(session_id: str, *, resumes: Sequence[Waiting] = (), **_: object) -> str:
        kept.append({"session_id": session_id, "resumes": [entry.to_doc() for entry in resumes]})
        return session_id

    monkeypatch.setattr(tasks, "enqueue_session", keep)
    answered = answers.answer_reply(channel=thread.channel, thread_ts=thread.ts, user=OPERATOR, text="b", ts="9.1",
                                    bot_user_id=local.BOT_USER_ID)  # fmt: skip
    assert answered.result == answers.AnswerOutcome.ANSWERED, answered
    [body] = kept
    assert body["resumes"], body  # the record it resumes is named
    continuation = str(body["session_id"])
    asked = len(fake_gemini.requests())
    attempts = delivery.deliver(stack.function_url("agent_session"), continuation, task=f"copies-{uid}", copies=3,
                                body=body)  # fmt: skip
    delivery.settled(attempts)
    wait_status(continuation, SessionStatus.DONE, timeout=60)
    answered_steps = [s for s in steps.load_steps(thread.session_id) if s.kind == StepKind.ANSWER]
    assert len(answered_steps) == 1, answered_steps
    assert len(fake_gemini.requests()) == asked + 1  # the continuation's one model turn
    assert [m["text"] for m in fake_slack.bot_replies(thread.channel, thread.ts)].count("Zone b it is.") == 1


def test_a_continuation_delivered_in_parallel_while_its_asker_runs_waits_for_it(
    stack: Stack, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a continuation and its still-running asker both wrote one transcript (a duplicate step, a crash, a
    takeover, an extra post). The continuation's deliveries are refused (Cloud Tasks retries them) until the asker
    has stopped; then exactly one runs."""
    script(G.delayed(3, G.call("ask_operator", question="Which zone?")), G.text("Zone b it is."))
    thread = mention(fake_slack, f"C{uid}", "pick a zone")
    fake_gemini.wait_for_requests(len(fake_gemini.requests()) + 1, timeout=30)
    # A continuation that exists while its asker still runs (a legacy or a racing writer).
    question = Question(
        question_id=ids.question_id(thread.session_id, 1, 0), session_id=thread.session_id,
        transcript_id=thread.session_id, channel=thread.channel, thread_ts=thread.ts, text="Which zone?", options=[],
        blocking=True, call_id=None, asked_at=firestore.now(),
    )  # fmt: skip
    early = continuation_session(question, answer_ts="9.9", user=OPERATOR, text="b", at=firestore.now())
    firestore.session_ref(early.session_id).create(early.to_doc())
    attempts = delivery.deliver(stack.function_url("agent_session"), early.session_id, task="early", copies=3,
                                max_attempts=8, min_backoff=0.5)  # fmt: skip
    refused = [a for a in attempts if a.status == 500]
    assert refused, attempts  # it was held off while the asker ran
    assert refused[0].body.get("error") == "its transcript is still being written by another session"
    ran = [a for a in attempts if a.status == 200 and a.body.get("status")]
    assert len(ran) <= 1, attempts
    steps_written = steps.load_steps(thread.session_id)
    assert len({s.seq for s in steps_written}) == len(steps_written)  # no step number written twice


def test_a_late_answer_while_another_session_holds_the_transcript_goes_to_that_session(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Defect: a non-blocking answer's continuation, created after its asker had handed the transcript on, ran
    while the transcript's writer was paused on its own question: it took the transcript over and re-ran that
    session's pending ask as its own (a second question, a session the answer never reached)."""
    colour = {"question": "Colour?", "options": ["red", "blue"], "blocking": False}
    script(
        G.calls(("ask_operator", colour), ("ask_operator", {"question": "Region?", "options": ["us", "eu"]})),
        G.call("ask_operator", question="Zone?"),
        G.text("Zone b, in blue."),
    )
    thread = mention(fake_slack, f"C{uid}", "set it up")
    asker = wait_status(thread.session_id, SessionStatus.PAUSED, timeout=30)
    late, region = (stored.get_question(ids.question_id(asker.session_id, 1, i)) for i in (0, 1))
    assert late is not None
    assert region is not None
    assert region.question_id == asker.awaited_question
    fake_slack.click(OPERATOR, thread.channel, region.post_ts or "", "answer_1", value=f"{region.question_id}|2")
    writer = wait_status(ids.resumed_by(region.question_id), SessionStatus.PAUSED, timeout=30)

    fake_slack.click(OPERATOR, thread.channel, late.post_ts or "", "answer_1", value=f"{late.question_id}|2")
    handed = wait_status(ids.continuation_id(late.question_id), SessionStatus.RESUMED, timeout=30)
    assert handed.handed_to == writer.session_id
    assert [n.text for n in sessions.get_session(writer.session_id).notes] == ["blue"]  # type: ignore[union-attr]
    own = (
        firestore.db().collection(firestore.QUESTIONS).where(filter=FieldFilter("session_id", "==", handed.session_id))
    )
    assert list(own.stream()) == []  # it asked nothing of its own

    fake_slack.user_message(OPERATOR, thread.channel, "zone b", thread_ts=thread.ts)
    wait_status(ids.resumed_by(writer.awaited_question or ""), SessionStatus.DONE, timeout=30)
    last = fake_gemini.requests()[-1]
    assert "zone b" in [r["response"]["result"].get("answer") for r in function_responses(last)]
    assert "blue" in texts(last)


@pytest.mark.parametrize("takeovers", [2, 3])
def test_a_session_killed_at_one_step_every_time_is_failed_not_rescued_for_ever(
    stack: Stack, script: Script, fake_slack: FakeSlack, uid: str, takeovers: int
) -> None:
    """Defect: a worker killed at the same point on every attempt (out of memory, a timeout) raises nothing, so the
    session stayed `running` and the rescue queued its takeover again every few minutes, for ever. A takeover now
    counts; past three in a row without a stored step the session fails and the thread is told. Any stored step
    starts the count again."""
    dead, _ = dead_worker_session(fake_slack, f"looping-{uid}", f"C{uid}", "build it",
                                  claimed_at=firestore.now() - timedelta(seconds=90),
                                  lease=timedelta(seconds=60), takeovers_without_progress=takeovers)  # fmt: skip
    channel, root = dead.origin.channel, dead.origin.thread_ts
    script(G.text("Built."))
    attempts = delivery.deliver(stack.function_url("agent_session"), dead.session_id, task=f"rescue-{uid}")
    assert [a.status for a in attempts] == [200], attempts
    if takeovers < 3:  # the fourth in a row is one too many; this one runs, and its first step resets the count
        done = wait_status(dead.session_id, SessionStatus.DONE, timeout=30)
        assert (done.lease.takeovers_without_progress, done.lease.takeovers) == (0, 1)  # counted, then progress
        return
    failed = wait_status(dead.session_id, SessionStatus.FAILED, timeout=30)
    assert "stopped 4 times in a row" in (failed.error or "")
    assert "could not finish" in fake_slack.bot_replies(channel, root)[-1]["text"]


def test_a_reply_steers_the_threads_own_session_not_a_child_running_in_its_thread(
    fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the thread's running session was looked up with ``limit(1)`` over every session in the thread, and a
    delegated child runs in its parent's thread: a person's reply could become a note to the child (which never
    talks to the thread), not to the session the person is talking to."""
    channel, at = f"C{uid}", firestore.now()
    top, _ = dead_worker_session(fake_slack, f"Z-{uid}", channel, "watch the deploy", claimed_at=at,
                                 lease=timedelta(hours=1))  # fmt: skip
    # A child of it, running in the same thread, whose id a query returns first (documents come in id order).
    child = Session.new(session_id=f"A-{uid}", kind=SessionKind.CHILD, channel=channel, thread_ts=top.origin.thread_ts,
                        trigger_ts=top.origin.thread_ts, trigger_user=HUMAN, text="check part 1", created_at=at,
                        status=SessionStatus.RUNNING, worker="w", lease_task="t", lease_until=at + timedelta(hours=1),
                        parent_session_id=top.session_id)  # fmt: skip
    firestore.session_ref(child.session_id).create(child.to_doc())
    sent = fake_slack.user_message(HUMAN, channel, "also check the canary", thread_ts=top.origin.thread_ts)
    assert [d["status"] for d in sent["deliveries"]] == [200]
    assert [n.text for n in sessions.get_session(top.session_id).notes] == ["also check the canary"]  # type: ignore[union-attr]
    assert sessions.get_session(child.session_id).notes == []  # type: ignore[union-attr]

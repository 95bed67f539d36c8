"""Streamed answers (issue 16, items 2 and 7): the answer streams into one message after its tool steps' task
cards; a SIGKILL mid-stream leaves exactly one answer; every stream error Slack reports falls back to
chat.postMessage / chat.update with the whole text delivered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from slack_sdk import WebClient

from infra.chat import STOP_ACTION as chat_stop_action
from infra.chat import ChatSession, streamed_lines
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack import FakeSlackConfig, running
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared import deps
from shared.agent.activity import task
from shared.slack import backpressure, blocks
from shared.slack import client as slack
from shared.slack.stream import CUT_OFF, AnswerStream
from shared.slack.surface import ThreadSurface
from shared.state import feedback, ids, sessions
from shared.state.firestore import now
from shared.state.models import SessionStatus
from tests.agent_helpers import HUMAN, function_responses, mention, wait_status
from tests.poll import wait_for
from tests.stack.test_crashes import Hold, executions, kill_at
from tests.stack.test_surface import answered_beside_a_held_status
from tests.surfaces import TOKEN, slack_thread

G = FakeGemini
Script = Callable[..., int]
ANSWER = (
    "The deploy finished: api and web run version 42 in europe-west1, the health checks pass, and the "
    "error rate is back under one in ten thousand requests since the rollout ended an hour ago."
)


def streamed(text: str, pause: float = 0.0) -> dict[str, Any]:
    """A model turn whose text the stub streams in eight pieces, ``pause`` seconds apart."""
    return {"text": text, "stream_delay_seconds": pause}


def answers(fake_slack: FakeSlack, channel: str, thread_ts: str) -> list[dict[str, Any]]:
    return fake_slack.bot_replies(channel, thread_ts)


def calls(fake_slack: FakeSlack, method: str, channel: str) -> list[dict[str, Any]]:
    return [c for c in fake_slack.calls(method) if c["args"].get("channel") == channel]


def test_a_fetch_is_a_task_with_its_page_as_source() -> None:
    assert task("fetch_url", {"url": "https://example.com/a"}) == (
        "Fetching example.com", [("https://example.com/a", "example.com")]
    )  # fmt: skip
    assert task("read_thread", {}) == ("Reading the thread", [])
    assert task("ask_operator", {"question": "?"}) is None  # its question is its post


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
def test_a_streamed_answer_arrives_complete_after_its_steps(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("read_thread"), streamed(ANSWER))
    thread = mention(fake_slack, f"C{uid}", "how did the deploy go?")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)

    [reply] = answers(fake_slack, thread.channel, thread.ts)
    assert reply["text"] == ANSWER
    assert done.stream.answer_ts == reply["ts"] == done.stream.ts
    assert len(calls(fake_slack, "chat.startStream", thread.channel)) == 1
    chunks = [ch for c in calls(fake_slack, "chat.appendStream", thread.channel) for ch in c["args"]["chunks"]]
    tasks = [(ch["title"], ch["status"]) for ch in chunks if ch["type"] == "task_update"]
    assert tasks == [("Reading the thread", "in_progress"), ("Reading the thread", "complete")]
    assert len([ch for ch in chunks if ch["type"] == "markdown_text"]) >= 3  # it streamed, in pieces
    [stop] = calls(fake_slack, "chat.stopStream", thread.channel)
    key = ids.post_key(thread.session_id, done.next_seq - 2, "answer") + ":0"
    assert stop["args"]["metadata"]["event_payload"]["key"] == key
    assert [b["type"] for b in stop["args"]["blocks"]] == ["context_actions"]  # the feedback buttons
    assert slack.posted_keys(thread.channel, thread.ts) == {key: reply["ts"]}
    assert calls(fake_slack, "chat.postMessage", thread.channel) == []
    # The feedback buttons under the streamed answer count: it is the session's recorded answer.
    good = blocks.feedback_value(thread.session_id, "positive")
    fake_slack.click(HUMAN, thread.channel, reply["ts"], blocks.FEEDBACK_ACTION, value=good)
    rated = [f for f in feedback.on_day(f"{now():%Y-%m-%d}") if f.session_id == thread.session_id]
    assert [(f.user, f.rating) for f in rated] == [(HUMAN, "positive")]


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
@pytest.mark.parametrize("refused", [False, True], ids=["shown", "refused"])
def test_the_stream_starts_after_the_status_set_beside_the_models_request(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, refused: bool
) -> None:
    """The status is set beside the model's request; the answer's stream waits for it (and, where Slack refuses a
    status, for the 👀 reaction that replaces it), so Slack sees them in the order it always did."""
    script(G.text("Done."))
    answered_beside_a_held_status(fake_slack, fake_gemini, uid, refused=refused, answered_by="chat.startStream")


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
def test_steps_come_before_what_the_session_posts_and_end_in_the_answer(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("read_thread"), G.call("post_update", text="half way"), G.call("read_thread"), streamed(ANSWER))
    thread = mention(fake_slack, f"C{uid}", "how did the deploy go?")
    wait_status(thread.session_id, SessionStatus.DONE, timeout=60)

    # The first steps' stream showed only task cards: it is deleted before the update is posted, and its cards
    # open the answer's stream, done.
    assert [m["text"] for m in answers(fake_slack, thread.channel, thread.ts)] == ["half way", ANSWER]
    [deleted] = calls(fake_slack, "chat.delete", thread.channel)
    first, second = calls(fake_slack, "chat.startStream", thread.channel)
    assert deleted["args"]["ts"] == first["response"]["ts"]
    later = [c for c in calls(fake_slack, "chat.appendStream", thread.channel) if c["args"]["ts"] == second[
        "response"]["ts"]]  # fmt: skip
    cards = [(ch["id"], ch["status"]) for c in later for ch in c["args"]["chunks"] if ch["type"] == "task_update"]
    assert cards[0][1] == "complete"  # the first step, replayed done
    assert {status for _, status in cards} == {"complete", "in_progress"}
    assert len({card_id for card_id, _ in cards}) == 2  # the two read_thread calls (post_update posts itself)


KILLS = ["mid-stream", "at the answer's stopStream"]


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
@pytest.mark.parametrize("where", KILLS)
def test_a_worker_killed_while_streaming_leaves_exactly_one_answer(
    where: str, script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    if where == "mid-stream":  # the model is still sending its text: the takeover asks it again
        script(G.call("read_thread"), streamed("Half of this answer is shown before the worker dies " * 4, pause=30),
               streamed(ANSWER))  # fmt: skip
        held = "chat.appendStream"
    else:  # Slack has the finished answer (its key), but its answer never reached the worker
        fake_slack.slow("chat.stopStream", 60)
        script(G.call("read_thread"), streamed(ANSWER))
        held = "chat.stopStream"
    thread = mention(fake_slack, f"C{uid}", "tell me everything")
    wait_for(lambda: [c for c in calls(fake_slack, held, thread.channel) if "markdown_text" in repr(c["args"])
                      or held == "chat.stopStream"], timeout=30, what=f"the worker to reach {held}")  # fmt: skip
    stack.kill_function("agent_session")
    stack.start_function("agent_session")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=120)

    [reply] = answers(fake_slack, thread.channel, thread.ts)
    assert reply["text"] == ANSWER
    assert reply["ts"] == done.stream.answer_ts
    assert list(slack.posted_keys(thread.channel, thread.ts).values()) == [reply["ts"]]
    model_calls = [r for r in fake_gemini.requests() if uid in repr(r["body"])]
    assert len(model_calls) == (3 if where == "mid-stream" else 2)  # a finished answer is not asked for again


@pytest.mark.usefixtures("streaming")
def test_a_restart_whose_worker_died_before_its_done_record_is_reported_unknown_and_not_run_again(
    script: Script, stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A restart's done record waits for the run's next commit (issue 28.1): killed after the first restart ran and
    before that commit, as the thread's read starts (its task card waits for its status, which Slack answers late),
    the takeover finds the restart started and not done, reports its outcome unknown and does not run it again."""
    fake_slack.slow("assistant.threads.setStatus", 60, times=3, match="is reading the thread")
    restarts = [("restart_service", {"name": name, "environment": "staging"}) for name in ("api", "web")]
    script(G.calls(restarts[0], ("read_thread", {"limit": 5}), restarts[1]), G.text("Both restarted."))
    before = len(fake_gemini.requests())
    thread = mention(fake_slack, f"C{uid}", "restart api and web in staging")
    kill_at(Hold("as the read starts", "assistant.threads.setStatus", match="is reading the thread"), stack,
            fake_slack, fake_gemini, before)  # fmt: skip
    fake_slack.release("assistant.threads.setStatus")
    wait_status(thread.session_id, SessionStatus.DONE, timeout=90)
    assert executions(thread.session_id) == Counter({"api": 1, "web": 1})
    responses = function_responses(fake_gemini.requests()[-1])
    unknown = [r for r in responses if "outcome unknown" in str(r["response"].get("error", ""))]
    assert [r["name"] for r in unknown] == ["restart_service"], responses


FALLBACKS = ["msg_too_long", "missing_recipient_user_id", "channel_type_not_supported"]


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
@pytest.mark.parametrize("error", FALLBACKS)
def test_every_stream_error_falls_back_with_the_whole_text(
    error: str, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    if error == "msg_too_long":
        fake_slack.fail("chat.appendStream", times=2, error="msg_too_long")
    elif error == "missing_recipient_user_id":
        fake_slack.fail("chat.startStream", error="missing_recipient_user_id")
    else:
        fake_slack.refuse_streams(channel, error)
    script(G.call("read_thread"), G.call("read_thread"), streamed(ANSWER))
    thread = mention(fake_slack, channel, "how did the deploy go?")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)

    [reply] = answers(fake_slack, thread.channel, thread.ts)
    assert reply["text"] == ANSWER  # the whole text, in one message
    assert reply["ts"] == done.stream.answer_ts
    assert list(slack.posted_keys(thread.channel, thread.ts).values()) == [reply["ts"]]
    failed = [c for c in fake_slack.calls() if str(c["method"]).endswith("Stream") and not c["response"]["ok"]]
    assert failed, "Slack refused the stream"
    if error in {"missing_recipient_user_id", "channel_type_not_supported"}:
        # Refused once: not asked again at the next steps of the session.
        assert len(calls(fake_slack, "chat.startStream", channel)) == 1
        assert len(calls(fake_slack, "chat.postMessage", channel)) == 1
    else:
        assert calls(fake_slack, "chat.update", channel)  # the stream's message was replaced
    stored = sessions.get_session(thread.session_id)
    assert stored is not None
    assert stored.status == SessionStatus.DONE


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
def test_a_stream_slack_closes_mid_answer_goes_on_in_a_new_message_with_its_cards(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """Slack ends streams after FAKESLACK_STREAM_SECONDS (1 s here) while the answer still streams: the session
    rolls over to new streamed messages in the thread, each opening with the run's task cards, and the answer's
    text arrives whole across them, nothing replaced with chat.update."""
    fake_slack.configure(stream_seconds=1.0)
    try:
        script(G.call("read_thread"), streamed(ANSWER, 0.4))
        thread = mention(fake_slack, f"C{uid}", "how did the deploy go?")
        done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    finally:
        fake_slack.configure(stream_seconds=300)
    replies = answers(fake_slack, thread.channel, thread.ts)
    assert len(replies) >= 2
    assert "".join(r["text"] for r in replies) == ANSWER
    assert replies[-1]["ts"] == done.stream.answer_ts == done.stream.ts
    assert calls(fake_slack, "chat.update", thread.channel) == []
    for reply in replies[1:]:  # every new message carries the run's card
        first = next(c for c in calls(fake_slack, "chat.appendStream", thread.channel) if c["args"]["ts"] == reply[
            "ts"] and c["response"]["ok"])  # fmt: skip
        assert ("Reading the thread", "complete") in [(ch["title"], ch["status"]) for ch in first["args"]["chunks"]
                                                      if ch["type"] == "task_update"]  # fmt: skip


def test_the_terminal_chat_shows_task_cards_and_streamed_text_as_they_come() -> None:
    shown: dict[str, str] = {}
    card = {"id": "3.0", "title": "Fetching example.com", "status": "in_progress",
            "sources": [{"type": "url", "url": "https://example.com/", "text": "example.com"}]}  # fmt: skip
    message = {"ts": "1.0", "text": "The page", "stream": {"streaming": True, "tasks": [card]}}
    assert streamed_lines(message, "", shown) == [
        "[task: Fetching example.com — in_progress (https://example.com/)]", "bot…> The page",
    ]  # fmt: skip
    done = {**card, "status": "complete"}
    message = {"ts": "1.0", "text": "The page says hello.", "stream": {"streaming": True, "tasks": [done]}}
    assert streamed_lines(message, "The page", shown) == [
        "[task: Fetching example.com — complete (https://example.com/)]", "bot…>  says hello.",
    ]  # fmt: skip
    finished = {**message, "stream": {"streaming": False, "tasks": [done]}}
    assert streamed_lines(finished, "The page says hello.", shown) == []  # printed whole, as any message


# --- the Slack side alone, against the fake Slack in this process ---------------------------------------------


@pytest.fixture
def surface() -> Iterator[tuple[ThreadSurface, FakeSlack, list[str]]]:
    """A thread surface with an answer stream, its Slack the fake in this process; the streams it recorded."""
    with slack_thread() as (thread, fake):
        recorded: list[str] = []
        root = thread.thread_ts
        thread.stream = AnswerStream("C1", root, recipient=HUMAN, on_open=recorded.append, buffer_chars=10)
        yield thread, fake, recorded


def stream_text(thread: ThreadSurface, text: str, *, answered: bool = True) -> None:
    assert thread.stream is not None
    thread.stream.begin_turn()
    for start in range(0, len(text), 7):  # as the model sends it: a few characters at a time
        thread.stream.text(text[start : start + 7])
    thread.stream.end_turn(answered=answered)


def test_a_streamed_answer_is_recorded_before_its_text_and_finished_with_its_key(
    surface: tuple[ThreadSurface, FakeSlack, list[str]],
) -> None:
    thread, fake, recorded = surface
    stream_text(thread, "All green now. ")
    [ts] = thread.answer("All green now. ", key="s:3:answer", feedback="s")
    assert recorded == [ts]  # recorded when the stream opened, before any text
    first_text = next(c for c in fake.calls("chat.appendStream"))
    assert fake.calls("chat.startStream")[0]["time"] <= first_text["time"]
    assert "markdown_text" not in fake.calls("chat.startStream")[0]["args"]
    assert slack.posted_keys("C1", thread.thread_ts) == {"s:3:answer:0": ts}


def test_a_later_answer_never_replaces_a_finished_one(surface: tuple[ThreadSurface, FakeSlack, list[str]]) -> None:
    thread, fake, _ = surface
    stream_text(thread, "First answer. ")
    [first] = thread.answer("First answer. ", key="s:3:answer", feedback="s")
    # Notes arrived as it finished: a wrap-up answer, not streamed, is posted, the first answer left alone.
    [second] = thread.answer("Second answer.", key="s:6:answer", feedback="s")
    assert first != second
    assert [m["text"] for m in fake.bot_replies("C1", thread.thread_ts)] == ["First answer. ", "Second answer."]
    assert fake.calls("chat.update") == []
    # The same after an answer that replaced its stream's message (the stream had failed).
    stream_text(thread, "Third, streamed. ")
    fake.fail("chat.stopStream", error="message_not_in_streaming_state")
    [third] = thread.answer("Third, streamed. ", key="s:9:answer", feedback="s")
    [fourth] = thread.answer("Fourth.", key="s:12:answer", feedback="s")
    texts = [m["text"] for m in fake.bot_replies("C1", thread.thread_ts)]
    assert texts == ["First answer. ", "Second answer.", "Third, streamed.", "Fourth."]  # replaced: as posted
    assert len({first, second, third, fourth}) == 4


def test_a_failed_model_turn_takes_its_text_back_and_the_retry_replaces_it(
    surface: tuple[ThreadSurface, FakeSlack, list[str]],
) -> None:
    thread, fake, _ = surface
    assert thread.stream is not None
    thread.stream.begin_turn()
    thread.stream.text("Half an ans")
    thread.stream.retract()
    assert [m["text"] for m in fake.bot_replies("C1", thread.thread_ts)] == [CUT_OFF]
    assert not thread.stream.streaming  # the turn tried again is not streamed in this run
    [ts] = thread.answer("The whole answer.", key="s:5:answer", feedback="s")
    assert [m["text"] for m in fake.bot_replies("C1", thread.thread_ts)] == ["The whole answer."]
    assert slack.posted_keys("C1", thread.thread_ts) == {"s:5:answer:0": ts}


@pytest.mark.parametrize("failure", ["late", 500, 502, 504, "reset", "close", "partial"])
def test_a_stream_call_slack_took_but_did_not_answer_is_never_sent_twice(
    surface: tuple[ThreadSurface, FakeSlack, list[str]], failure: str | int
) -> None:
    """Slack takes an append, then its answer is lost: it comes after the client gave up (a read timeout), Slack
    answers 500 (its ``internal_error``: some of the call may have succeeded) or the gateway in front 502 or 504
    (slack-sdk's 5xx handler), or the connection is reset or closed without an answer (its connection handler). Sent
    again, its text showed twice (an answer cut halfway, ``IncompleteRead``, was raised out of the stream). It is
    not; the stream stops appending and the answer replaces its message, whole, once."""
    thread, fake, _ = surface
    web = WebClient(token=TOKEN, base_url=f"{fake.base_url}/api/", timeout=1,
                    retry_handlers=backpressure.retry_handlers())  # fmt: skip
    with deps.override(slack=web):
        if failure == "late":
            fake.slow("chat.appendStream", 1.5)  # the first append takes effect, its answer comes too late
        elif isinstance(failure, int):
            fake.fail("chat.appendStream", status=failure, applied=True)
        else:
            fake.fail("chat.appendStream", cut=failure, applied=True)
        stream_text(thread, ANSWER)
        [ts] = thread.answer(ANSWER, key="s:3:answer", feedback="s")
    [reply] = fake.bot_replies("C1", thread.thread_ts)
    assert (reply["ts"], reply["text"]) == (ts, ANSWER)
    assert len(fake.calls("chat.appendStream")) == 1
    assert slack.posted_keys("C1", thread.thread_ts) == {"s:3:answer:0": ts}


def test_a_long_answer_streams_whole_into_one_message(surface: tuple[ThreadSurface, FakeSlack, list[str]]) -> None:
    thread, fake, _ = surface
    long = " ".join(f"word{n}" for n in range(3000))  # about 25,000 characters
    stream_text(thread, long)
    [ts] = thread.answer(long, key="s:3:answer", feedback="s")
    [reply] = fake.bot_replies("C1", thread.thread_ts)
    assert reply["ts"] == ts
    assert reply["text"] == long
    assert fake.calls("chat.update") == []


def test_the_terminal_chats_stop_presses_the_sessions_stop_button() -> None:
    with running(FakeSlackConfig(bot_token="xoxb-stream", signing_secret="s")) as server:
        fake = FakeSlack(server.url)
        said: list[str] = []
        chat = ChatSession(fake, user=HUMAN, channel="C2", bot_user_id="UBOT", out=said.append)
        chat.handle("/stop")
        assert said[-1] == "[no Stop button in this thread: nothing is working here now]"
        chat.say("deploy it")
        assert chat.thread_ts is not None
        web = WebClient(token="xoxb-stream", base_url=f"{server.url}/api/")
        stop = [blocks.stop_block("s1").to_dict()]
        web.chat_postMessage(channel="C2", thread_ts=chat.thread_ts, text="Working on it", blocks=stop)
        chat.handle("/stop")
        assert said[-1] == "[pressed Stop: no interactivity_url configured]"  # no app listening here
        [pressed] = [c for c in fake.calls() if c["method"] == "chat.postMessage"]
        assert pressed["args"]["blocks"][0]["elements"][0]["action_id"] == blocks.STOP_ACTION == chat_stop_action


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
def test_a_model_endpoint_without_the_streaming_call_is_asked_for_the_turn_whole(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """An endpoint that answers ``streamGenerateContent`` with 404 (no such method there) still answers: the turn
    is asked again with ``generateContent``, and its text still goes out in the thread's stream."""
    script(G.error(404, "NOT_FOUND", "streamGenerateContent is not offered here"), G.text(ANSWER))
    thread = mention(fake_slack, f"C{uid}", "how did the deploy go?")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)

    [reply] = answers(fake_slack, thread.channel, thread.ts)
    assert reply["text"] == ANSWER
    assert reply["ts"] == done.stream.answer_ts
    asked = [r["path"].rsplit(":", 1)[-1] for r in fake_gemini.requests() if uid in repr(r["body"])]
    assert asked == ["streamGenerateContent", "generateContent"]

"""Streams as Slack limits them (issue 27 item 2): at most 12,000 characters of ``markdown_text`` and 50 chunks per
call; a session that streams longer than a stream may stay open, or more than a message holds, rolls over to a new
streamed message in the same thread carrying its task cards and text; a stream Slack closes mid-answer loses no
text. The answer stream against the fake Slack served in this process, through slack-sdk's ``WebClient``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.fakes.slack.client import FakeSlack
from shared.slack import client as slack
from shared.slack.stream import MARKDOWN_CHARS, MESSAGE_CHARS, AnswerStream
from shared.slack.surface import ThreadSurface
from tests.agent_helpers import HUMAN
from tests.surfaces import slack_thread


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def rig() -> Iterator[tuple[ThreadSurface, FakeSlack, Clock, list[str]]]:
    with slack_thread() as (surface, fake):
        clock, opened = Clock(), list[str]()
        surface.stream = AnswerStream("C1", surface.thread_ts, recipient=HUMAN, on_open=opened.append,
                                      buffer_chars=50, stream_seconds=300, clock=clock)  # fmt: skip
        yield surface, fake, clock, opened


def stream(surface: ThreadSurface, text: str, *, piece: int = 500) -> None:
    assert surface.stream is not None
    surface.stream.begin_turn()
    for start in range(0, len(text), piece):
        surface.stream.text(text[start : start + piece])
    surface.stream.end_turn(answered=True)


def appends(fake: FakeSlack) -> list[dict[str, Any]]:
    return [c["args"] for c in fake.calls("chat.appendStream") if c["response"]["ok"]]


def shown_text(fake: FakeSlack) -> str:
    """Every streamed message's text, in the order they were posted."""
    return "".join(m["text"] for m in fake.bot_replies("C1", fake.calls("chat.startStream")[0]["args"]["thread_ts"]))


def test_no_call_carries_more_than_slack_takes(rig: tuple[ThreadSurface, FakeSlack, Clock, list[str]]) -> None:
    surface, fake, _, _ = rig
    assert surface.stream is not None
    for n in range(60):  # more task cards than one call may carry, all still open when the stream closes
        surface.step(f"1.{n}", f"Step {n}")
    surface.stream.close()
    long = " ".join(f"word{n}" for n in range(4000))  # about 35,000 characters, most of it in one wrap-up append
    surface.stream.begin_turn()
    surface.stream.text(long[:100])
    [ts] = surface.answer(long, key="s:3:answer", feedback="s")
    for call in [*appends(fake), *(c["args"] for c in fake.calls("chat.stopStream"))]:
        chunks = call.get("chunks") or []
        assert len(chunks) <= 50
        assert sum(len(ch.get("text") or "") for ch in chunks) <= MARKDOWN_CHARS  # a call's markdown_text
        assert len(call.get("blocks") or []) <= 50
    [message] = [m for m in fake.bot_replies("C1", surface.thread_ts) if m["ts"] == ts]
    assert message["text"] == long  # one message, streamed whole in several appends
    assert fake.calls("chat.update") == []


def test_a_stream_older_than_slack_allows_rolls_over_with_its_cards_and_text(
    rig: tuple[ThreadSurface, FakeSlack, Clock, list[str]],
) -> None:
    surface, fake, clock, opened = rig
    assert surface.stream is not None
    surface.step("1.0", "Reading the thread")
    surface.step_done("1.0", failed=False)
    surface.step("2.0", "Fetching example.com")  # still running when the stream grows old
    surface.stream.begin_turn()
    surface.stream.text("First half of the answer, ")
    clock.now += 280  # past five minutes less the margin: Slack would close it soon
    surface.step("3.0", "Fetching example.org")
    surface.stream.text("and the second half after the roll-over.")
    surface.step_done("2.0", failed=False)
    surface.step_done("3.0", failed=False)
    text = "First half of the answer, and the second half after the roll-over."
    [ts] = surface.answer(text, key="s:5:answer", feedback="s")

    first, second = opened
    assert ts == second != first
    messages = {m["ts"]: m for m in fake.bot_replies("C1", surface.thread_ts)}
    assert messages[first]["text"] + messages[second]["text"] == text  # no text lost, none twice
    assert [c["args"]["ts"] for c in fake.calls("chat.stopStream")] == [first, second]
    assert fake.calls("chat.update") == []
    # The new message opens with every card the old one showed, as they stood, then the running one finishes.
    new = [ch for a in appends(fake) if a["ts"] == second for ch in a["chunks"] if ch["type"] == "task_update"]
    assert [(c["id"], c["status"]) for c in new[:3]] == [("1.0", "complete"), ("2.0", "in_progress"),
                                                         ("3.0", "in_progress")]  # fmt: skip
    assert [(c["id"], c["status"]) for c in new[-2:]] == [("2.0", "complete"), ("3.0", "complete")]
    assert slack.posted_keys("C1", surface.thread_ts)["s:5:answer:0"] == second


def test_a_stream_slack_closes_mid_answer_loses_no_text(rig: tuple[ThreadSurface, FakeSlack, Clock, list[str]]) -> None:
    surface, fake, _, opened = rig
    assert surface.stream is not None
    surface.step("1.0", "Reading the thread")
    surface.step_done("1.0", failed=False)
    text = "".join(f"Sentence {n} of a long answer. " for n in range(40))
    surface.stream.begin_turn()
    surface.stream.text(text[:300])
    fake.fail("chat.appendStream", error="message_not_in_streaming_state")  # Slack ended it early
    surface.stream.text(text[300:])
    [ts] = surface.answer(text, key="s:3:answer", feedback="s")
    assert len(opened) == 2
    assert ts == opened[1]
    assert "".join(m["text"] for m in fake.bot_replies("C1", surface.thread_ts)) == text
    assert fake.calls("chat.update") == []
    replayed = [ch for a in appends(fake) if a["ts"] == ts for ch in a["chunks"] if ch["type"] == "task_update"]
    assert [(c["id"], c["status"]) for c in replayed] == [("1.0", "complete")]


def test_a_message_full_of_text_rolls_over(rig: tuple[ThreadSurface, FakeSlack, Clock, list[str]]) -> None:
    surface, fake, _, opened = rig
    long = " ".join(f"w{n}" for n in range(20_000))  # about 110,000 characters
    stream(surface, long, piece=3000)
    [ts] = surface.answer(long, key="s:3:answer", feedback="s")
    replies = fake.bot_replies("C1", surface.thread_ts)
    assert "".join(m["text"] for m in replies) == long
    assert all(len(m["text"]) <= MESSAGE_CHARS for m in replies)
    assert len(opened) == len(replies) >= 4
    assert ts == opened[-1]

"""Feedback on final answers: the 👍/👎 buttons, stored once per person and session, refused anywhere else."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from ops import admin
from ops.names import Names
from shared.slack import blocks
from shared.state import feedback
from shared.state.firestore import now
from shared.state.models import SessionStatus
from shared.usecases import sweep
from tests.agent_helpers import HUMAN, mention, wait_status

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]


def feedback_values(message: dict[str, Any]) -> list[str]:
    return [e[side]["value"] for b in message.get("blocks") or [] if b["type"] == "context_actions"
            for e in b["elements"] for side in ("positive_button", "negative_button")]  # fmt: skip


def stored(session_id: str) -> list[feedback.Feedback]:
    return [f for f in feedback.on_day(f"{now():%Y-%m-%d}") if f.session_id == session_id]


def test_a_press_on_the_final_answer_is_stored_once_and_acknowledged(
    script: Script, fake_slack: FakeSlack, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    script(G.call("post_update", text="Looking"), G.text("The answer is **42**."))
    thread = mention(fake_slack, f"C{uid}", "what is the answer?")
    wait_status(thread.session_id, SessionStatus.DONE)
    update, answer = fake_slack.bot_replies(thread.channel, thread.ts)
    assert feedback_values(update) == []  # a progress update is not an answer
    good, bad = (blocks.feedback_value(thread.session_id, rating) for rating in ("positive", "negative"))
    assert feedback_values(answer) == [good, bad]
    # Slack renders the model's Markdown itself (a markdown block); the text fallback is mrkdwn.
    assert answer["blocks"][0] == {"type": "markdown", "text": "The answer is **42**."}
    assert answer["text"] == "The answer is *42*."
    before = sweep.feedback_summary(now())

    fake_slack.click(HUMAN, thread.channel, answer["ts"], blocks.FEEDBACK_ACTION, value=good)
    fake_slack.click(HUMAN, thread.channel, answer["ts"], blocks.FEEDBACK_ACTION, value=good)  # again: no change
    [mine] = stored(thread.session_id)
    assert (mine.user, mine.rating, mine.channel, mine.thread_ts) == (HUMAN, "positive", thread.channel, thread.ts)
    assert [e["text"] for e in fake_slack.ephemerals(thread.channel, HUMAN)] == ["Thanks: noted that this helped."]
    fake_slack.click("U0OTHER", thread.channel, answer["ts"], blocks.FEEDBACK_ACTION, value=bad)
    assert sorted(f.rating for f in stored(thread.session_id)) == ["negative", "positive"]

    # The per-day summary the sweep logs, and the operators' listing.
    with caplog.at_level(logging.INFO, logger="shared.usecases.sweep"):
        after = sweep.feedback_summary(now())
    assert (after["positive"], after["negative"]) == (before["positive"] + 1, before["negative"] + 1)
    assert any(getattr(r, "feedback", None) == after for r in caplog.records)
    listed = [line for line in admin.listing(now()) if thread.session_id in line]
    names = Names()
    assert any("👍" in line and names.name(HUMAN) in line for line in listed)
    assert any("👎" in line and names.name("U0OTHER") in line for line in listed)
    assert not any("<@" in line for line in listed)

    # Changing one's mind changes the one document.
    fake_slack.click(HUMAN, thread.channel, answer["ts"], blocks.FEEDBACK_ACTION, value=bad)
    assert [f.rating for f in stored(thread.session_id) if f.user == HUMAN] == ["negative"]


def test_a_press_on_a_message_that_is_not_a_final_answer_is_refused(
    script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    script(G.call("post_update", text="Looking"), G.text("Found it."))
    thread = mention(fake_slack, f"C{uid}", "find it")
    wait_status(thread.session_id, SessionStatus.DONE)
    update, answer = fake_slack.bot_replies(thread.channel, thread.ts)
    claim = blocks.feedback_value(thread.session_id, "positive")
    fake_slack.click(HUMAN, thread.channel, update["ts"], blocks.FEEDBACK_ACTION, value=claim)  # a progress update
    fake_slack.click(HUMAN, thread.channel, thread.ts, blocks.FEEDBACK_ACTION, value=claim)  # the request itself
    fake_slack.click(HUMAN, thread.channel, answer["ts"], blocks.FEEDBACK_ACTION, value="nonsense")  # a bad value
    assert stored(thread.session_id) == []
    assert [e["text"] for e in fake_slack.ephemerals(thread.channel, HUMAN)] == [
        "Feedback is taken on my final answers only."
    ] * 3

"""The plan display (issue 27 item 2): a multi-step session that states its plan (show_plan) gets Slack's
``task_display_mode: "plan"``: the plan's title and steps as the plan block's tasks, updated as steps finish. A
stream already open in the timeline mode rolls over to one in plan mode, its cards and text carried on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from shared.slack.stream import AnswerStream
from shared.slack.surface import ThreadSurface
from shared.state.models import SessionStatus
from tests.agent_helpers import HUMAN, mention, wait_status
from tests.surfaces import slack_thread

G = FakeGemini
STEPS = ["Read the deploy log", "Check the error rate", "Summarise"]


@pytest.fixture
def surface() -> Iterator[tuple[ThreadSurface, FakeSlack]]:
    with slack_thread() as (thread, fake):
        root = thread.thread_ts
        thread.stream = AnswerStream("C1", root, recipient=HUMAN, on_open=lambda _: None, buffer_chars=10)
        yield thread, fake


def chunks_of(fake: FakeSlack, ts: str) -> list[dict[str, Any]]:
    return [ch for c in fake.calls("chat.appendStream") if c["args"]["ts"] == ts and c["response"]["ok"]
            for ch in c["args"]["chunks"]]  # fmt: skip


def test_a_stated_plan_rolls_a_timeline_stream_over_to_the_plan_display(
    surface: tuple[ThreadSurface, FakeSlack],
) -> None:
    thread, fake = surface
    assert thread.stream is not None
    thread.step("1.0", "Reading the thread")
    thread.step_done("1.0", failed=False)
    assert thread.plan("Checking the deploy", STEPS, 0)
    thread.plan("Checking the deploy", STEPS, 2)
    [ts] = thread.answer("All green.", key="s:4:answer", feedback="s")

    first, second = fake.calls("chat.startStream")
    assert first["args"]["task_display_mode"] == "timeline"
    assert second["args"]["task_display_mode"] == "plan"
    assert ts == second["response"]["ts"]
    shown = chunks_of(fake, ts)
    assert shown[0] == {"type": "plan_update", "title": "Checking the deploy"}
    assert (shown[1]["id"], shown[1]["status"]) == ("1.0", "complete")  # the timeline's card, carried on
    steps = [(c["title"], c["status"]) for c in shown if c["type"] == "task_update" and c["id"].startswith("plan.")]
    assert steps[:3] == [(STEPS[0], "in_progress"), (STEPS[1], "pending"), (STEPS[2], "pending")]
    assert steps[3:] == [(STEPS[0], "complete"), (STEPS[1], "complete"), (STEPS[2], "in_progress")]
    message = next(m for m in fake.bot_replies("C1", thread.thread_ts) if m["ts"] == ts)
    assert message["text"] == "All green."


def test_a_plan_where_nothing_streams_is_not_shown(surface: tuple[ThreadSurface, FakeSlack]) -> None:
    thread, fake = surface
    thread.stream = None
    assert not thread.plan("Plan", STEPS, 0)
    assert fake.calls("chat.startStream") == []


@pytest.mark.stack
@pytest.mark.usefixtures("streaming")
def test_a_session_that_states_its_plan_streams_in_the_plan_display(
    script: Callable[..., int], fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.calls(("show_plan", {"steps": STEPS, "title": "Checking the deploy"}), ("read_thread", {})),
           G.call("show_plan", steps=STEPS, done=3, title="Checking the deploy"), G.text("All green."))  # fmt: skip
    thread = mention(fake_slack, f"C{uid}", "check the deploy")
    done = wait_status(thread.session_id, SessionStatus.DONE, timeout=60)
    [start] = [c for c in fake_slack.calls("chat.startStream") if c["args"]["channel"] == thread.channel]
    assert start["args"]["task_display_mode"] == "plan"
    assert done.stream.answer_ts == start["response"]["ts"]
    shown = chunks_of(fake_slack, start["response"]["ts"])
    assert {"type": "plan_update", "title": "Checking the deploy"} in shown
    final = {c["id"]: c["status"] for c in shown if c["type"] == "task_update"}
    assert [final[f"plan.{n}"] for n in range(3)] == ["complete"] * 3
    assert "Reading the thread" in [c.get("title") for c in shown]  # the tool step, in the plan block


def test_a_plans_title_and_steps_ping_nobody(surface: tuple[ThreadSurface, FakeSlack]) -> None:
    """Defect: the plan's title and steps (the model's words, which may repeat what it read) reached Slack's plan
    block as written: ``<!channel>`` or a user group's mention there was left live. Now they are quieted as every
    other text of a post is."""
    thread, fake = surface
    assert thread.plan("<!channel> deploy plan", ["Tell <!here>", "Ask <!subteam^S0ONCALL|@oncall>", "@everyone"], 1)
    [ts] = thread.answer("Done.", key="s:4:answer", feedback="s")
    titles = [c["title"] for c in chunks_of(fake, ts) if c["type"] in {"plan_update", "task_update"}]
    assert len(titles) == 4, titles
    for title in titles:
        assert not any(token in title for token in ("<!channel>", "<!here>", "<!subteam", "@everyone")), titles

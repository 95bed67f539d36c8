"""Ingress rate limits (issue 18, flow 13): a burst is cut at the limit with one ephemeral each and nothing created.

The ingress runs in this process (the slack_events handler, with the limits turned on for it) on the stack's
Firestore and fake Slack; the tasks it creates go to a sink, so the sessions stay queued, counting as running,
until a test runs one here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any
from unittest.mock import ANY

import pytest
from google.cloud.firestore import DocumentReference

from bench import cost
from infra import slack_payloads as events
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.state import firestore, quotas, sessions
from shared.state.models import SessionStatus
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    """The ingress here, with the limits on: 3 starts per person per hour, 2 running at once per person."""
    limits = {"USER_SESSIONS_PER_HOUR": "3", "CHANNEL_SESSIONS_PER_HOUR": "100", "USER_RUNNING_SESSIONS": "2",
              "CHANNEL_RUNNING_SESSIONS": "100"}  # fmt: skip
    with counted_rig(stack, monkeypatch, **limits) as rig:
        yield rig


def mention_as(rig: cost.Rig, user: str, text: str) -> tuple[dict[str, Any], str, str]:
    """A signed mention by ``user`` in a new thread, through the ingress; its reply, channel and ts."""
    text = f"{text} [{rig.uid}]"
    channel, ts = rig.new_thread(text)
    event = events.mention(channel=channel, ts=ts, text=text, user=user)
    reply: dict[str, Any] = {}
    rig.ingress(events.signed(event, event_id=f"Ev{rig.uid}{channel}"), reply)
    return reply, channel, ts


def person_limits(user: str) -> DocumentReference:
    ref: DocumentReference = firestore.db().collection(quotas.LIMITS).document(f"person-{user}")
    return ref


def started_this_hour(user: str) -> int:
    """The person's counter of this hour's starts."""
    counter = quotas.Scope("person", user, per_hour=1, running=0).hour_ref(firestore.now())
    return int((counter.get().to_dict() or {}).get("started", 0))


def mentions_at_once(rig: cost.Rig, users: list[str]) -> list[dict[str, Any]]:
    """One mention per entry of ``users``, each in a thread of its own, all through the ingress at once."""
    requests = []
    for n, user in enumerate(users):
        text = f"at once {n} [{rig.uid}]"
        channel, ts = rig.new_thread(text)
        requests.append(events.signed(events.mention(channel=channel, ts=ts, text=text, user=user),
                                      event_id=f"Ev{rig.uid}{channel}"))  # fmt: skip
    replies: list[dict[str, Any]] = [{} for _ in requests]
    gate = threading.Barrier(len(requests))

    def send(n: int) -> None:
        gate.wait()
        rig.ingress(requests[n], replies[n])

    with ThreadPoolExecutor(len(requests)) as pool:
        list(pool.map(send, range(len(requests))))
    return replies


def test_a_burst_from_one_person_is_cut_at_the_limit_and_another_person_is_unaffected(
    rig: cost.Rig, fake_slack: FakeSlack
) -> None:
    started = []
    for n in range(2):
        reply, _, _ = mention_as(rig, "U0BURST", f"job {n}")
        started.append(reply["session_id"])
    assert all(rig.session(s).status == SessionStatus.QUEUED for s in started)  # queued: both count as running
    reply, channel, ts = mention_as(rig, "U0BURST", "one more")
    assert reply == {"ok": True, "limited": "2 requests running at once per person"}
    [note] = fake_slack.ephemerals(channel, "U0BURST")
    assert "2 requests running at once per person" in note["text"]
    assert "when one of the running requests ends" in note["text"]
    assert sessions.steered_session_in_thread(channel, ts) is None
    assert firestore.event_ref(f"Ev{rig.uid}{channel}").get().exists is False  # nothing created for it
    # Another person is unaffected.
    other, _, _ = mention_as(rig, "U0OTHER", "mine")
    assert "session_id" in other

    # A session that ends no longer runs: the next start is admitted, and the hour's limit (3) cuts the one after.
    rig.script(FakeGemini.text("Done."))
    rig.deliver(started[0])
    assert rig.session(started[0]).status == SessionStatus.DONE
    third, _, _ = mention_as(rig, "U0BURST", "now it fits")
    assert "session_id" in third
    rig.script(FakeGemini.text("Done."))
    rig.deliver(started[1])
    fourth, channel, _ = mention_as(rig, "U0BURST", "past the hour's limit")
    assert fourth == {"ok": True, "limited": "3 requests per hour per person"}
    [note] = fake_slack.ephemerals(channel, "U0BURST")
    assert "UTC" in note["text"]


def test_a_refused_message_is_refused_once_whatever_carried_it(rig: cost.Rig, fake_slack: FakeSlack) -> None:
    """Slack's retry of a refused mention, and its message twin, post no second ephemeral."""
    for n in range(2):
        mention_as(rig, "U0TWICE", f"job {n}")
    text = f"again [{rig.uid}]"
    channel, ts = rig.new_thread(text)
    event = events.mention(channel=channel, ts=ts, text=text, user="U0TWICE")
    for _ in range(2):  # the same event delivered twice
        reply: dict[str, Any] = {}
        rig.ingress(events.signed(event, event_id=f"Ev{rig.uid}again"), reply)
    assert len(fake_slack.ephemerals(channel, "U0TWICE")) == 1


def test_a_dead_workers_session_stops_counting_once_no_session_can_live_that_long(rig: cost.Rig) -> None:
    for n in range(2):
        mention_as(rig, "U0DEAD", f"job {n}")
    person = person_limits("U0DEAD")
    stale = firestore.now() - quotas.RUNNING_FOR - timedelta(minutes=1)
    running = dict.fromkeys((person.get().to_dict() or {})["sessions"], stale)
    assert len(running) == 2
    person.set({"sessions": running}, merge=True)  # as a worker that died 31 minutes ago leaves them
    reply, _, _ = mention_as(rig, "U0DEAD", "after the crash")
    assert "session_id" in reply
    assert person.get().to_dict() == {  # counted again from the live sessions: only the new one
        "running": 1, "sessions": {reply["session_id"]: ANY}, "expires_at": ANY,
    }  # fmt: skip
    assert started_this_hour("U0DEAD") == 3


def test_a_session_that_pauses_no_longer_counts_as_running(rig: cost.Rig) -> None:
    first, _, _ = mention_as(rig, "U0PAUSE", "decide for me")
    mention_as(rig, "U0PAUSE", "another job")
    refused, _, _ = mention_as(rig, "U0PAUSE", "a third")
    assert refused == {"ok": True, "limited": "2 requests running at once per person"}
    rig.script(FakeGemini.call("ask_operator", question="Which one?", options=["a", "b"]))
    rig.deliver(first["session_id"])  # it asks and pauses: waiting for an operator is not running
    assert rig.session(first["session_id"]).status == SessionStatus.PAUSED
    person = person_limits("U0PAUSE").get().to_dict() or {}
    assert person["running"] == 1
    assert first["session_id"] not in person["sessions"]
    admitted, _, _ = mention_as(rig, "U0PAUSE", "now it fits")
    assert "session_id" in admitted


def test_starts_by_many_people_at_once_are_all_counted(rig: cost.Rig, caplog: pytest.LogCaptureFixture) -> None:
    """Different people in different channels touch different counters: a burst of starts across a workspace
    neither waits on one document nor slips through uncounted (one workspace-wide document, read and written in a
    transaction, made 74 of 75 such starts fail their transaction in the ingress benchmark)."""
    users = [f"U0MANY{n}" for n in range(12)]
    with caplog.at_level(logging.WARNING):
        replies = mentions_at_once(rig, users)
    assert all("session_id" in reply for reply in replies), replies
    assert not [r for r in caplog.records if "contended" in r.getMessage()]
    for user, reply in zip(users, replies, strict=True):
        person = person_limits(user).get().to_dict() or {}
        assert (person["running"], list(person["sessions"])) == (1, [reply["session_id"]])
        assert started_this_hour(user) == 1


def test_one_persons_starts_at_once_are_cut_at_the_limit_exactly(rig: cost.Rig) -> None:
    """Eight mentions by one person at the same moment: each commit's answer says what the counters reached, so
    exactly the two the running limit allows are admitted, the rest are refused, and their counts are taken back."""
    replies = mentions_at_once(rig, ["U0RUSH"] * 8)
    admitted = [reply for reply in replies if "session_id" in reply]
    assert len(admitted) == 2, replies
    limits = {"2 requests running at once per person", "3 requests per hour per person"}
    assert all(r["limited"] in limits for r in replies if r not in admitted), replies
    person = person_limits("U0RUSH").get().to_dict() or {}
    assert person["running"] == 2
    assert sorted(person["sessions"]) == sorted(r["session_id"] for r in admitted)
    assert started_this_hour("U0RUSH") == 2

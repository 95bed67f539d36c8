"""Where the rate limits' time goes at the ingress: the start's commit with the limits off and on, timed in the
benchmark's own process against the benchmark stack's emulator.

The product's commit with the limits on (``shared/state/events.py``) adds to two counter documents (the person's
and the channel's hour, ``quotas.Scope.count``). Building those two counter writes in the client (no round trip) is
timed on its own.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bench.figures import percentile
from bench.harness import clocked, take_turns
from shared.state import events, quotas
from shared.state.firestore import db, now
from shared.state.new_sessions import mention_session
from shared.state.session_model import Session

ON = quotas.Quota(100_000, 100_000, 0, 0, quotas.RUNNING_FOR)  # the hourly limits, as the limits-on server has them
VARIANTS = ("limits off", "limits on")


@dataclass(frozen=True)
class Costs:
    """p50 (ms) of each variant's start commit, and of building the two counter writes in the client."""

    commit: dict[str, float]
    building: float


def start(tag: str, n: int) -> tuple[str, Session]:
    event_id = f"EvL{tag}{n:05d}"
    session = mention_session(
        event_id=event_id, channel=f"CL{tag}", thread_ts=f"1.{n:06d}", ts=f"1.{n:06d}", user=f"UL{tag}",
        text="status please", at=now(),
    )  # fmt: skip
    return event_id, session


def measure(count: int = 200, warmup: int = 20) -> Costs:
    """``count`` starts of each variant after ``warmup``, taking turns in a new random order at every step (seeded);
    each variant with its own person and channel, one start after another, as the ingress does one request."""
    commits = {"limits off": off, "limits on": on}

    def timed(name: str) -> Callable[[], float]:
        tag, numbers = uuid.uuid4().hex[:8].upper(), itertools.count()
        return lambda: clocked(lambda: commits[name](*start(tag, next(numbers))))[0]

    times = take_turns({name: timed(name) for name in VARIANTS}, count, warmup, seed=7)
    return Costs({name: percentile(ms, 50) for name, ms in times.items()}, building(count))


def off(event_id: str, session: Session) -> None:
    events.start_session_for_event(event_id=event_id, event_type="app_mention", session=session)


def on(event_id: str, session: Session) -> None:
    started = events.start_session_for_event(event_id=event_id, event_type="app_mention", session=session, quota=ON)
    if started.outcome != events.Start.STARTED:
        raise RuntimeError(f"a limits-on start was {started.outcome}, not started")


def building(count: int) -> float:
    """p50 (ms) of building the two counter writes in the client (``Scope.count``), with nothing sent."""
    scopes = ON.scopes(user="UBUILD", channel="CBUILD")
    at: datetime = now()
    times = []
    for n in range(count):
        batch = db().batch()
        began = time.perf_counter()
        for scope in scopes:
            scope.count(batch, f"s{n}", at)
        times.append((time.perf_counter() - began) * 1000)
    return percentile(times, 50)

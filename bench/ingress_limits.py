"""Where the rate limits' time goes at the ingress: the start's commit with the limits off and on, timed in the
benchmark's own process against the benchmark stack's emulator.

The product's commit with the limits on (``shared/state/events.py``) adds to two counter documents (the person's
and the channel's hour, ``quotas.Scope.count``). Building those two counter writes in the client (no round trip) is
timed on its own. So is the CPU a commit costs, one after another: in this process (the client) and in the
emulator's processes (from ``/proc``), which at concurrency 16 share the machine's cores with the servers.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

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
    """p50 (ms) of each variant's start commit, and of building the two counter writes in the client; the CPU (ms)
    each variant's commit costs the client and the emulator (none without the emulator's process group)."""

    commit: dict[str, float]
    building: float
    cpu: dict[str, tuple[float, float]]


def start(tag: str, n: int) -> tuple[str, Session]:
    event_id = f"EvL{tag}{n:05d}"
    session = mention_session(
        event_id=event_id, channel=f"CL{tag}", thread_ts=f"1.{n:06d}", ts=f"1.{n:06d}", user=f"UL{tag}",
        text="status please", at=now(),
    )  # fmt: skip
    return event_id, session


def measure(count: int = 200, warmup: int = 20, emulator: int | None = None) -> Costs:
    """``count`` starts of each variant after ``warmup``, taking turns in a new random order at every step (seeded);
    each variant with its own person and channel, one start after another, as the ingress does one request. With
    ``emulator`` (its process group), the CPU of ``3 * count`` more of each, in blocks taking turns."""
    commits = {"limits off": off, "limits on": on}

    def timed(name: str) -> Callable[[], float]:
        tag, numbers = uuid.uuid4().hex[:8].upper(), itertools.count()
        return lambda: clocked(lambda: commits[name](*start(tag, next(numbers))))[0]

    times = take_turns({name: timed(name) for name in VARIANTS}, count, warmup, seed=7)
    cpu = cpu_per_commit(commits, count, emulator) if emulator is not None else {}
    return Costs({name: percentile(ms, 50) for name, ms in times.items()}, building(count), cpu)


def cpu_per_commit(commits: Mapping[str, Callable[[str, Session], object]], count: int, emulator: int,
                   rounds: int = 3) -> dict[str, tuple[float, float]]:  # fmt: skip
    """The CPU (ms) a start commit of each variant costs this process and the emulator's process group: blocks of
    ``count`` starts, one after another, the variants taking turns (the order reversed every round)."""
    spent = {name: [0.0, 0.0] for name in commits}
    for round_no in range(rounds):
        for name in VARIANTS if round_no % 2 == 0 else tuple(reversed(VARIANTS)):
            tag = uuid.uuid4().hex[:8].upper()
            starts = [start(tag, n) for n in range(count)]
            client, server = time.process_time(), group_cpu(emulator)
            for event_id, session in starts:
                commits[name](event_id, session)
            spent[name][0] += time.process_time() - client
            spent[name][1] += group_cpu(emulator) - server
    return {name: (client * 1000 / (count * rounds), server * 1000 / (count * rounds))
            for name, (client, server) in spent.items()}  # fmt: skip


def group_cpu(group: int) -> float:
    """The CPU seconds (user and system) the living processes of process group ``group`` have used."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[2]) == group:  # the fields after the name: state, ppid, pgrp, ..., utime (12th), stime
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


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

"""Timing paths side by side: the shared harness of the figures that time an operator's (or a child's) event to the
first model request it leads to (figures 10, 15 and 16).

A figure declares its paths, each a function that sets up what it needs uncounted and returns one ``Sample``;
``take_turns`` runs them in rotating order, repetition by repetition (``harness.take_turns``), so that drift on the
shared machine falls on all; ``report`` adds each path's p50/p95 and the table; a target on two paths' percentiles
is ``figures.paired_ratio``, judged with a 95% interval over the repetitions, as every ratio of the benchmarks is.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from bench import harness
from bench.figures import Section, info, median, percentile
from bench.firestore_ops import OpCounter, Ops
from bench.harness import Bench
from bench.rig import Rig, model_calls
from shared.state.models import SessionStatus

Request = tuple[bytes, dict[str, str]]  # a signed body and its headers
Handler = Callable[[bytes, dict[str, str]], Any]
Path = Callable[[Rig], "Sample"]  # one run of a path: its setup uncounted, then timed


@dataclass(frozen=True)
class Sample:
    """One path, timed: ms to the first model request, ms of it in the first handler, and the Firestore operations
    and RPCs before that request."""

    ms: float
    handler_ms: float
    ops: Ops
    call_ms: float = 0.0  # of ``ms``, the approved call's own work, where the path runs one (figure 10)


def model_requests(counter: OpCounter) -> AbstractContextManager[list[tuple[float, Ops]]]:
    """The moments (perf_counter) the product hands a request to google-genai, with the Firestore operations counted
    then."""
    return model_calls(lambda: (time.perf_counter(), counter.snapshot()))


def timed(rig: Rig, handler: Handler, request: Request, session_of: Callable[[Any], str]) -> Sample:
    """From ``handler`` receiving ``request`` to the first model request of the session it queued. Its task is
    delivered as soon as the handler creates it, as Cloud Tasks dispatches one: what the handler does after that (its
    Slack acknowledgements) runs beside the session, as it would on another instance. The Cloud Tasks hop itself is
    left out. A handler that creates no task has its session delivered once it returns."""
    rig.counter.reset()
    tasks, handled_all = rig.created_tasks, threading.Event()
    mark = tasks.mark()

    def deliver_when_created() -> str | None:
        created = tasks.first_after(mark, unless=handled_all)
        if created is not None:
            rig.deliver(created)
        return created

    with model_requests(rig.counter) as calls, ThreadPoolExecutor(1) as pool:
        started = time.perf_counter()
        early = pool.submit(deliver_when_created)
        try:
            reply, status = handler(*request)
        finally:
            tasks.stop_waiting(handled_all)
        handled = time.perf_counter()
        assert status == 200, reply
        session_id = session_of(reply)
        delivered = early.result()
        if delivered is None:
            rig.deliver(session_id)
        assert delivered in (None, session_id), f"the handler queued {delivered}, not {session_id}"
    assert calls, f"{session_id} made no model request"
    rig.expect(session_id, SessionStatus.DONE)
    at, ops = calls[0]
    return Sample((at - started) * 1000, (handled - started) * 1000, ops)


def take_turns(rig: Rig, paths: Mapping[str, Path], reps: int, warmup: int) -> dict[str, list[Sample]]:
    """Every path ``reps`` times, in rotating order, after ``warmup`` runs of each."""
    return harness.take_turns({name: functools.partial(path, rig) for name, path in paths.items()}, reps, warmup)


def on_stack(bench: Bench, measure: Callable[[Rig], dict[str, list[Sample]]]) -> dict[str, list[Sample]]:
    """``measure`` on a counted rig of its own on the benchmark's stack (``harness.on_rig``)."""
    with harness.on_rig(bench) as rig:
        return measure(rig)


def ms_of(samples: Mapping[str, Sequence[Sample]]) -> dict[str, list[float]]:
    return {path: [sample.ms for sample in found] for path, found in samples.items()}


def report(
    section: Section, samples: Mapping[str, Sequence[Sample]], name: Callable[[str, int], str]
) -> list[tuple[Any, ...]]:
    """Each path's p50 and p95 as figures named ``name(path, q)``; returns the rows of the paths' table: path,
    repetitions, p50, p95, the first handler's median ms, the Firestore RPCs before the model."""
    rows = []
    for path, found in samples.items():
        ms = [sample.ms for sample in found]
        p50, p95 = percentile(ms, 50), percentile(ms, 95)
        section.add(info(name(path, 50), p50, "ms"), info(name(path, 95), p95, "ms"))
        rows.append((path, len(ms), p50, p95, median([s.handler_ms for s in found]), found[-1].ops.rpcs))
    return rows


HEADER = ["path", "repetitions", "p50 ms", "p95 ms", "first handler ms (median)", "Firestore RPCs before the model"]

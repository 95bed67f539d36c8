"""Delivering tasks to agent_session the way Cloud Tasks does: in parallel, with its headers, retried on non-2xx.

The local Cloud Tasks emulator dispatches one task at a time; deployed Cloud Tasks dispatches many of a queue at
once and may deliver one task more than once. Race tests use this to deliver the same task (or several) in
parallel, for real, over HTTP, alongside whatever the emulator delivers.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

import requests

from infra import stack as local
from infra.fakes.dispatch.headers import cloud_tasks_headers


@dataclass(frozen=True)
class Attempt:
    task: str
    copy: int
    attempt: int
    status: int
    body: dict[str, object]


QUEUE_ID = local.QUEUE.rsplit("/", 1)[-1]


def deliver(url: str, session_id: str, *, task: str, copies: int = 1, max_attempts: int = 5,
            min_backoff: float = 0.1, max_backoff: float = 2.0, timeout: float = 120.0,
            body: dict[str, object] | None = None) -> list[Attempt]:  # fmt: skip
    """Deliver one task ``copies`` times at once; each copy retries on non-2xx with doubling backoff, as Cloud Tasks
    retries a failed attempt. Returns every attempt, in the order they ended. ``body``: the task's body as the
    product created it (a continuation's names the record it resumes); by default one naming the session alone."""
    payload = json.dumps(body if body is not None else {"session_id": session_id})
    attempts: list[Attempt] = []
    lock = threading.Lock()
    start = threading.Barrier(copies)

    def one_copy(copy: int) -> None:
        start.wait()
        backoff = min_backoff
        for attempt in range(max_attempts):
            sent = cloud_tasks_headers(queue=QUEUE_ID, task=task, retry=attempt, executions=attempt, eta=time.time())
            headers = {"Content-Type": "application/json", **sent}
            try:
                reply = requests.post(url, data=payload, headers=headers, timeout=timeout)
                status, body = reply.status_code, reply.json() if reply.content else {}
            except requests.RequestException as exc:
                status, body = 0, {"error": type(exc).__name__}
            with lock:
                attempts.append(Attempt(task, copy, attempt, status, body))
            if 200 <= status < 300:
                return
            time.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)

    threads = [threading.Thread(target=one_copy, args=(n,)) for n in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout * max_attempts)
    return attempts


def settled(attempts: list[Attempt]) -> list[Attempt]:
    """Each copy's last attempt, the one Cloud Tasks acts on, once every copy ended in a 2xx (AssertionError if one
    did not): a copy's earlier non-2xx (a 503 for a contended transaction, a 500 for a claim that lost its race) was
    retried, as Cloud Tasks retries, so a race test asserts on what the copies achieved, not on their first try."""
    last: dict[int, Attempt] = {}
    for attempt in attempts:
        if attempt.copy not in last or attempt.attempt > last[attempt.copy].attempt:
            last[attempt.copy] = attempt
    assert all(200 <= a.status < 300 for a in last.values()), attempts
    return [last[copy] for copy in sorted(last)]

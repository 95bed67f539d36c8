"""Delivering tasks the way Cloud Tasks does: many at once, with its headers, retried with backoff.

``Deliveries`` takes a task (what the Cloud Tasks emulator dispatched to us, or an extra delivery asked for
over the control API) and delivers it to the target from a thread of its own: up to ``max_concurrent``
requests of one queue in flight at a time, ``X-CloudTasks-*`` headers set per attempt, any non-2xx answer, a
connection error or a missed dispatch deadline retried after Cloud Tasks' backoff, until ``max_attempts`` were made
and ``max_retry_duration`` has passed since the first (Cloud Tasks stops only once both hold).

The rules a test sets (duplicate, hold, delay) are decided here under one lock; every wait (a hold, a delay,
a backoff, a free slot) happens outside it. ``reset`` starts a new generation: deliveries of an older one stop
before their next attempt (an attempt already in flight finishes, unlogged).
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit

from infra.fakes.dispatch.headers import cloud_tasks_headers

Json = dict[str, Any]

USER_AGENT = "Google-Cloud-Tasks"
# Headers about the hop from the emulator to us, not about the task: never passed on.
_HOP_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "accept-encoding",
        "user-agent",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
    }
)
# Headers Cloud Tasks sets itself; whatever the emulator put there is replaced.
_OWN_PREFIXES = ("x-cloudtasks-", "x-appengine-")


@dataclass(frozen=True)
class Policy:
    """The queue's rate limit and retry config, and the task's dispatch deadline (all in seconds)."""

    max_concurrent: int = 20  # rate_limits.max_concurrent_dispatches, per queue
    max_attempts: int = 5  # retry_config.max_attempts, the first attempt included; 0 or less: unlimited
    # retry_config.max_retry_duration: retries go on until it has passed since the first attempt, however many were
    # made (backoffs here are short, so a target restarting for a few seconds is still reached); 0: attempts alone.
    max_retry_duration: float = 60.0
    min_backoff: float = 0.1
    max_backoff: float = 2.0
    max_doublings: int = 16
    deadline: float = 600.0  # dispatch_deadline: how long one attempt is waited for

    def __post_init__(self) -> None:
        if self.max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if self.min_backoff < 0 or self.max_backoff < self.min_backoff:
            raise ValueError("backoff must satisfy 0 <= min_backoff <= max_backoff")
        if self.max_doublings < 0:
            raise ValueError("max_doublings must be >= 0")
        if self.deadline <= 0:
            raise ValueError("deadline must be positive")
        if self.max_retry_duration < 0:
            raise ValueError("max_retry_duration must be >= 0")

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 is the first retry), as Cloud Tasks computes it.

        The interval doubles from ``min_backoff`` ``max_doublings`` times, then grows linearly by the last doubled
        step, and never exceeds ``max_backoff`` (min 10, max 300, doublings 3: 10, 20, 40, 80, 160, 240, 300).
        """
        k = min(max(retry - 1, 0), 64)
        doublings = min(self.max_doublings, 64)
        if k <= doublings:
            wait = self.min_backoff * 2.0**k
        else:
            wait = self.min_backoff * 2.0**doublings * (1 + k - doublings)
        return float(min(wait, self.max_backoff))

    def public(self) -> Json:
        return {
            "max_concurrent": self.max_concurrent,
            "max_attempts": self.max_attempts,
            "max_retry_duration": self.max_retry_duration,
            "min_backoff": self.min_backoff,
            "max_backoff": self.max_backoff,
            "max_doublings": self.max_doublings,
            "deadline": self.deadline,
        }


def session_id_of(body: bytes) -> str | None:
    """The ``session_id`` a task's JSON body names, if any."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    found = payload.get("session_id") if isinstance(payload, dict) else None
    return found if isinstance(found, str) and found else None


def task_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The task's own headers among those of a request (Content-Type, traceparent, ...), without hop or
    Cloud Tasks headers."""
    return [
        (name, value)
        for name, value in headers
        if name.lower() not in _HOP_HEADERS and not name.lower().startswith(_OWN_PREFIXES)
    ]


@dataclass(frozen=True)
class Task:
    """One task to deliver: its short name and queue name, body, own headers and schedule time."""

    name: str
    queue: str
    body: bytes
    headers: tuple[tuple[str, str], ...]
    eta: float
    session_id: str | None
    source: str  # "tasks": dispatched by the emulator; "deliver": asked for over the control API

    def matches(self, needle: str) -> bool:
        """Rules match a substring of the session id (of the task name when the body names no session)."""
        return needle in (self.session_id if self.session_id is not None else self.name)


@dataclass
class Delivery:
    """One copy of a task on its way: a task duplicated K times is K deliveries, each retried on its own."""

    id: int
    task: Task
    copy: int
    generation: int
    delay: float = 0.0
    stagger: float = 0.0
    state: str = "pending"  # pending, delayed, held, backoff, waiting_slot, in_flight

    def public(self) -> Json:
        return {
            "delivery": self.id,
            "task": self.task.name,
            "session_id": self.task.session_id,
            "copy": self.copy,
            "state": self.state,
        }


@dataclass
class _Duplicate:
    match: str
    copies: int
    tasks: int | None  # how many more tasks it applies to; None: every matching task
    stagger: float

    def public(self) -> Json:
        return {"match": self.match, "copies": self.copies, "tasks": self.tasks, "stagger": self.stagger}


@dataclass
class _Delay:
    match: str
    seconds: float
    tasks: int | None

    def public(self) -> Json:
        return {"match": self.match, "seconds": self.seconds, "tasks": self.tasks}


@dataclass
class _Rules:
    duplicates: list[_Duplicate] = field(default_factory=list)
    delays: list[_Delay] = field(default_factory=list)
    holds: list[str] = field(default_factory=list)

    def public(self) -> Json:
        return {
            "duplicates": [d.public() for d in self.duplicates],
            "delays": [d.public() for d in self.delays],
            "holds": list(self.holds),
        }


_Rule = TypeVar("_Rule", _Duplicate, _Delay)


class Deliveries:
    """Every delivery in progress, the log of attempts, and the rules tests set."""

    def __init__(self, target: str, policy: Policy, *, log: Callable[[Json], None] | None = None) -> None:
        split = urlsplit(target)
        if split.scheme not in ("http", "https") or not split.hostname:
            raise ValueError(f"target must be an http(s) URL, got {target!r}")
        self.target = target
        self.policy = policy
        self._split = split
        self._path = (split.path or "/") + (f"?{split.query}" if split.query else "")
        self._log = log or (lambda line: None)
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._record_ids = itertools.count(1)
        self._generation = 0
        self._closed = False
        self._active: dict[int, Delivery] = {}
        self._records: list[Json] = []
        self._rules = _Rules()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._received = 0
        # Cloud Tasks refuses a second task with a name it has seen (ALREADY_EXISTS); the emulator accepts it, so
        # its duplicate is dropped here. Names are kept for the dispatcher's lifetime (Cloud Tasks: about an hour).
        self._names: set[tuple[str, str]] = set()

    # -- rules ---------------------------------------------------------------------------

    def duplicate(self, match: str, *, copies: int, tasks: int | None, stagger: float) -> Json:
        if copies < 1:
            raise ValueError("copies must be at least 1")
        if tasks is not None and tasks < 1:
            raise ValueError("tasks must be at least 1 (or null for every matching task)")
        if stagger < 0:
            raise ValueError("stagger must be >= 0")
        with self._cond:
            self._rules.duplicates.append(_Duplicate(match, copies, tasks, stagger))
            return self._rules.public()

    def delay(self, match: str, *, seconds: float, tasks: int | None) -> Json:
        if seconds < 0:
            raise ValueError("seconds must be >= 0")
        if tasks is not None and tasks < 1:
            raise ValueError("tasks must be at least 1 (or null for every matching task)")
        with self._cond:
            self._rules.delays.append(_Delay(match, seconds, tasks))
            return self._rules.public()

    def hold(self, match: str) -> Json:
        with self._cond:
            if match not in self._rules.holds:
                self._rules.holds.append(match)
            return self._rules.public()

    def release(self, match: str | None) -> Json:
        """Lift the hold on ``match`` (every hold when None); the deliveries it held go out at once."""
        with self._cond:
            before = [d for d in self._active.values() if d.state == "held"]
            if match is None:
                self._rules.holds.clear()
            elif match in self._rules.holds:
                self._rules.holds.remove(match)
            released = [d for d in before if not self._held_by_rule(d)]
            self._cond.notify_all()
            return {"released": len(released), **self._rules.public()}

    def reset(self) -> None:
        """Forget the log and every rule; drop deliveries not yet in flight (their attempts end unlogged)."""
        with self._cond:
            self._generation += 1
            self._records = []
            self._rules = _Rules()
            self._received = 0
            self._cond.notify_all()

    # -- reading ---------------------------------------------------------------------------

    def attempts(self, match: str | None = None) -> list[Json]:
        """Every attempt of this generation in the order they started (in-flight ones have no status yet)."""
        with self._cond:
            records = [dict(r) for r in self._records]
        if match is None:
            return records
        return [r for r in records if match in (r["session_id"] if r["session_id"] is not None else r["task"])]

    def status(self) -> Json:
        with self._cond:
            active = list(self._active.values())
            states: dict[str, int] = {}
            for delivery in active:
                states[delivery.state] = states.get(delivery.state, 0) + 1
            return {
                "idle": not active,
                "active": len(active),
                "in_flight": states.get("in_flight", 0),
                "states": states,
                "held": [d.public() for d in active if d.state == "held"],
                "received": self._received,
                "rules": self._rules.public(),
            }

    def wait(self, ids: list[int], timeout: float) -> bool:
        """Block until none of ``ids`` is in progress; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while any(i in self._active for i in ids):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    # -- delivering ---------------------------------------------------------------------------

    def accept(self, task: Task, *, copies: int | None = None) -> list[int]:
        """Start delivering ``task``: ``copies`` deliveries at once, or as many as a duplicate rule says."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the dispatcher is shutting down")
            self._received += 1
            if task.source == "tasks":
                if (task.queue, task.name) in self._names:
                    self._log({"event": "duplicate_name", "task": task.name, "session_id": task.session_id})
                    return []
                self._names.add((task.queue, task.name))
            stagger = 0.0
            if copies is None:
                copies = 1
                rule = _take(self._rules.duplicates, task)
                if rule is not None:
                    copies, stagger = rule.copies, rule.stagger
            delay_rule = _take(self._rules.delays, task)
            delay = delay_rule.seconds if delay_rule is not None else 0.0
            deliveries = [
                Delivery(next(self._ids), task, copy, self._generation, delay=delay, stagger=stagger * copy)
                for copy in range(copies)
            ]
            for delivery in deliveries:
                self._active[delivery.id] = delivery
        self._log(
            {"event": "task", "task": task.name, "session_id": task.session_id, "source": task.source}
            | {"deliveries": [d.id for d in deliveries], "delay": delay}
        )
        start = threading.Barrier(len(deliveries)) if len(deliveries) > 1 else None
        for delivery in deliveries:
            threading.Thread(
                target=self._run, args=(delivery, start), name=f"delivery-{delivery.id}", daemon=True
            ).start()
        return [d.id for d in deliveries]

    def close(self) -> None:
        """Stop every wait (holds, delays, backoffs); attempts in flight are left to end on their own."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self, delivery: Delivery, start: threading.Barrier | None) -> None:
        try:
            self._deliver(delivery, start)
        except Exception as exc:  # a bug here must not pass silently: the delivery would just vanish
            self._log({"event": "crash", "delivery": delivery.id, "error": f"{type(exc).__name__}: {exc}"})
        finally:
            if start is not None:
                start.abort()  # never leave a copy waiting for one that is gone
            with self._cond:
                self._active.pop(delivery.id, None)
                self._cond.notify_all()

    def _deliver(self, delivery: Delivery, start: threading.Barrier | None) -> None:
        if not self._sleep(delivery, delivery.delay, "delayed"):
            return
        eta = delivery.task.eta
        executions = 0  # earlier attempts the handler answered with other than 5xx (Cloud Tasks' definition)
        previous: int | None = None
        retry = 0
        first = time.monotonic()
        while True:
            held = self._wait_hold(delivery)
            if held is None:
                return
            if retry == 0 and start is not None:
                with contextlib.suppress(threading.BrokenBarrierError):  # a sibling copy was dropped: go alone
                    start.wait(timeout=self.policy.deadline)
            if retry == 0 and not self._sleep(delivery, delivery.stagger, "delayed"):
                return
            record = self._attempt(delivery, retry, eta=eta, executions=executions, previous=previous, held=held)
            if record is None:
                return
            if record["outcome"] == "ok":
                return
            status = int(record["status"] or 0)
            if status and not 500 <= status < 600:
                executions += 1
            previous = status or None
            retry += 1
            retrying = time.monotonic() - first < self.policy.max_retry_duration
            if 0 < self.policy.max_attempts <= retry and not retrying:
                self._log({"event": "gave_up", "delivery": delivery.id, "task": delivery.task.name, "attempts": retry})
                return
            wait = self.policy.backoff(retry)
            eta = time.time() + wait
            if not self._sleep(delivery, wait, "backoff"):
                return

    def _attempt(
        self, delivery: Delivery, retry: int, *, eta: float, executions: int, previous: int | None, held: float
    ) -> Json | None:
        task = delivery.task
        headers: dict[str, str] = dict(task.headers)
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/octet-stream"  # what Cloud Tasks sends for a body without one
        headers["User-Agent"] = USER_AGENT
        headers.update(
            cloud_tasks_headers(queue=task.queue, task=task.name, retry=retry, executions=executions, eta=eta)
        )
        if previous is not None:
            headers["X-CloudTasks-TaskPreviousResponse"] = str(previous)
        slot = self._slot(task.queue)
        with self._cond:
            if self._dropped(delivery):
                return None
            delivery.state = "waiting_slot"
        with slot:
            with self._cond:
                if self._dropped(delivery):
                    return None
                delivery.state = "in_flight"
                record: Json = {
                    "id": next(self._record_ids),
                    "delivery": delivery.id,
                    "task": task.name,
                    "queue": task.queue,
                    "session_id": task.session_id,
                    "source": task.source,
                    "copy": delivery.copy,
                    "duplicate": delivery.copy > 0,
                    "attempt": retry,
                    "execution_count": executions,
                    "status": None,
                    "outcome": None,
                    "error": None,
                    "started": time.time(),
                    "ended": None,
                    "held_seconds": round(held, 3),
                    "delay": delivery.delay + delivery.stagger,
                }
                self._records.append(record)
            status, error, outcome = self._post(task.body, headers)
            with self._cond:
                record.update(status=status, error=error, outcome=outcome, ended=time.time())
                delivery.state = "pending"
                result = dict(record)
        self._log({"event": "attempt", **{k: v for k, v in result.items() if v is not None}})
        return result

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[int, str | None, str]:
        """One attempt: (status, error, outcome); status 0 when no answer came in time or at all."""
        deadline = self.policy.deadline
        began = time.monotonic()

        def left() -> float:
            remaining = deadline - (time.monotonic() - began)
            if remaining <= 0:
                raise TimeoutError("dispatch deadline exceeded")
            return remaining

        split = self._split
        connection_type = http.client.HTTPSConnection if split.scheme == "https" else http.client.HTTPConnection
        connection = connection_type(split.hostname or "127.0.0.1", split.port, timeout=deadline)
        try:
            connection.request("POST", self._path, body=body, headers=headers)
            sock = connection.sock  # kept: the response reads from it even after the connection lets go of it
            if sock is not None:
                sock.settimeout(left())
            response = connection.getresponse()
            if sock is not None:
                sock.settimeout(left())
            response.read()
            status = response.status
        except TimeoutError:
            return 0, f"no answer within the dispatch deadline ({deadline:g}s)", "deadline"
        except (OSError, http.client.HTTPException) as exc:
            return 0, f"{type(exc).__name__}: {exc}", "connection_error"
        finally:
            connection.close()
        return status, None, "ok" if 200 <= status < 300 else "http_error"

    # -- waiting ---------------------------------------------------------------------------

    def _slot(self, queue: str) -> threading.BoundedSemaphore:
        with self._cond:
            slot = self._slots.get(queue)
            if slot is None:
                slot = self._slots[queue] = threading.BoundedSemaphore(self.policy.max_concurrent)
            return slot

    def _dropped(self, delivery: Delivery) -> bool:
        return self._closed or delivery.generation != self._generation

    def _held_by_rule(self, delivery: Delivery) -> bool:
        return any(delivery.task.matches(match) for match in self._rules.holds)

    def _wait_hold(self, delivery: Delivery) -> float | None:
        """Wait while a hold matches; how long it waited, or None if the delivery was dropped meanwhile."""
        began: float | None = None
        with self._cond:
            while not self._dropped(delivery) and self._held_by_rule(delivery):
                if began is None:
                    began = time.monotonic()
                    delivery.state = "held"
                    self._log({"event": "held", **delivery.public()})
                self._cond.wait(1.0)
            if self._dropped(delivery):
                return None
            delivery.state = "pending"
        return 0.0 if began is None else time.monotonic() - began

    def _sleep(self, delivery: Delivery, seconds: float, state: str) -> bool:
        """Wait ``seconds`` (a delay or a backoff); False if the delivery was dropped meanwhile."""
        deadline = time.monotonic() + seconds
        with self._cond:
            if seconds > 0:
                delivery.state = state
            while not self._dropped(delivery):
                left = deadline - time.monotonic()
                if left <= 0:
                    delivery.state = "pending"
                    return True
                self._cond.wait(left)
            return False


def _take(rules: list[_Rule], task: Task) -> _Rule | None:
    """The first rule that matches ``task``, used once (and removed when used up)."""
    for rule in rules:
        if task.matches(rule.match):
            if rule.tasks is not None:
                rule.tasks -= 1
                if rule.tasks <= 0:
                    rules.remove(rule)
            return rule
    return None

"""The faults, each injected through the real processes: the fakes' control APIs, signals, HTTP deliveries."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import requests

from infra import restarts
from infra import stack as local
from infra.fakes.dispatch.headers import cloud_tasks_headers
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack

# Every kind of fault this run can inject, in the order the table lists them.
KINDS = (
    "agent_session SIGKILL",
    "duplicate parallel task delivery",
    "Slack event retry",
    "duplicated button click",
    "Gemini 429 burst",
    "Gemini 503 burst",
    "Gemini slow reply",
    "Gemini malformed function call",
    "Slack 429 ratelimited (Retry-After)",
    "Slack 503",
    "Slack slow reply",
    "Slack 429 on another method",
    "Slack 5xx on another method",
    "Slack storm outlasting the session's budget",
    "Firestore emulator restart",
    "Cloud Tasks emulator restart",
    "Cloud Tasks outage during an answer",
    "agent_session SIGKILL, Cloud Tasks not retrying",
)
RESTARTS = ("Firestore emulator restart", "Cloud Tasks emulator restart")
# The Web API methods besides chat.postMessage that a flow of each kind makes in its own channel (a storm on one
# of them is aimed at that flow's channel, so it hits that flow).
OTHER_METHODS = ("assistant.threads.setStatus", "reactions.add", "conversations.replies")
MORE_METHODS = {"approve": ("chat.update",), "ask": ("reactions.remove",), "mcp_input": ("reactions.remove",),
                "mcp_elicit": ("reactions.remove",)}  # fmt: skip
SERVER_ERRORS = (500, 502, 503, 504)
SLOW_SECONDS = 2.0
# A function call whose arguments are not an object, as a model sometimes sends.
MALFORMED = {
    "candidates": [
        {"content": {"role": "model", "parts": [{"functionCall": {"name": "read_thread", "args": "lots"}}]},
         "finishReason": "STOP"}
    ]
}  # fmt: skip
HELD_SECONDS = 60.0  # a model reply held this long: the worker is inside the call when it is killed
OUTAGE_SECONDS = 1.0  # Cloud Tasks stays down at least this long, and until the request made meanwhile is answered
T = TypeVar("T")


@dataclass
class Injector:
    """Injects faults, chosen with each flow's own seeded RNG; counts what it really injected."""

    stack: Stack
    gemini: FakeGemini
    slack: FakeSlack
    injected: Counter[str] = field(default_factory=Counter)
    _kill_lock: threading.Lock = field(default_factory=threading.Lock)
    _count_lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, kind: str) -> None:
        with self._count_lock:
            self.injected[kind] += 1

    # -- Gemini ----------------------------------------------------------------------------
    @staticmethod
    def choose_model_fault(rng: random.Random, *, may_kill: bool) -> str:
        """The fault a flow's first model reply gets: none, a Gemini burst or slow reply, or a SIGKILL while held."""
        choices = [
            "none",
            "Gemini 429 burst",
            "Gemini 503 burst",
            "Gemini slow reply",
            "Gemini malformed function call",
        ]
        return rng.choice([*choices, "agent_session SIGKILL"] if may_kill else choices)

    @staticmethod
    def model_fault(rng: random.Random, kind: str, marker: str, first: dict[str, Any]) -> list[dict[str, Any]]:
        """What to queue, matching ``marker``, in place of a flow's first reply ``first`` for fault ``kind``."""
        first = FakeGemini.matching(marker, first)
        if kind == "Gemini 429 burst":
            error = FakeGemini.error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", times=rng.randint(1, 2))
            return [FakeGemini.matching(marker, error), first]
        if kind == "Gemini 503 burst":
            error = FakeGemini.error(503, "UNAVAILABLE", "The model is overloaded", times=rng.randint(1, 2))
            return [FakeGemini.matching(marker, error), first]
        if kind == "Gemini slow reply":
            return [FakeGemini.delayed(SLOW_SECONDS, first)]
        if kind == "Gemini malformed function call":  # the product tells the model, which then replies as scripted
            return [FakeGemini.matching(marker, FakeGemini.raw(MALFORMED)), first]
        if kind == "agent_session SIGKILL":  # held, then killed: the takeover's request gets ``first`` itself
            return [FakeGemini.delayed(HELD_SECONDS, first), first]
        return [first]

    def model_injected(self, kind: str, marker: str, before: int) -> None:
        """Once the flow has started: count a Gemini fault, or kill the worker held inside the model call."""
        if kind == "agent_session SIGKILL":
            self.kill_when_held(marker, before)
        elif kind != "none":
            self.count(kind)

    def kill_when_held(self, marker: str, before: int, kind: str = "agent_session SIGKILL") -> None:
        """Wait until the flow's held model request arrives, SIGKILL agent_session, start it again at once."""
        deadline = time.monotonic() + 60
        while requests_with(self.gemini, marker) <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the flow {marker} never reached its held model call")
            time.sleep(0.1)
        with self._kill_lock:
            self.stack.kill_function("agent_session")
            self.stack.start_function("agent_session")
        self.count(kind)

    # -- Slack -----------------------------------------------------------------------------
    def slack_storm(self, rng: random.Random, marker: str) -> None:
        """Perhaps a storm on chat.postMessage: the next one or two calls (of any flow) fail, or this flow's is slow."""
        kind = rng.choice(["none", "none", "Slack 429 ratelimited (Retry-After)", "Slack 503", "Slack slow reply"])
        times = rng.randint(1, 2)
        if kind == "Slack 429 ratelimited (Retry-After)":
            self.slack.fail("chat.postMessage", times, status=429, error="ratelimited", retry_after=1)
        elif kind == "Slack 503":
            self.slack.fail("chat.postMessage", times, status=503, error="service_unavailable")
        elif kind == "Slack slow reply":
            self.slack.slow("chat.postMessage", SLOW_SECONDS, match=marker)
        if kind != "none":
            self.count(kind)

    def other_storm(self, rng: random.Random, flow_kind: str, channel: str) -> tuple[str, str] | None:
        """Perhaps a storm on another method this flow calls, in its channel: one or two 429s (Retry-After 1 s) or
        5xx answers. Returns ``(kind, method)``; it is counted once the flow's calls show it really hit."""
        kind = rng.choice(["none", "Slack 429 on another method", "Slack 5xx on another method"])
        method = rng.choice(OTHER_METHODS + MORE_METHODS.get(flow_kind, ()))
        times, channel = rng.randint(1, 2), json.dumps(channel)  # quoted: C…X3 must not match C…X30
        if kind == "Slack 429 on another method":
            self.slack.fail(method, times, status=429, error="ratelimited", retry_after=1, match=channel)
        elif kind == "Slack 5xx on another method":
            self.slack.fail(method, times, status=rng.choice(SERVER_ERRORS), match=channel)
        return None if kind == "none" else (kind, method)

    def outlasting_storm(self, channel: str, times: int) -> None:
        """Every chat.postMessage and chat.startStream in ``channel`` (``times`` of each) refused with a Retry-After
        of an hour: longer than any session's budget, so the session must end failed at once, saying why, instead of
        sleeping (a streamed answer is refused as a posted one is)."""
        for method in ("chat.postMessage", "chat.startStream"):
            self.slack.fail(method, times, status=429, error="ratelimited", retry_after=3600, match=json.dumps(channel))
        self.count("Slack storm outlasting the session's budget")

    # -- the emulators ---------------------------------------------------------------------
    def restart(self, kind: str) -> None:
        """Restart an emulator on its port (``infra.restarts``); never while a worker is being killed."""
        with self._kill_lock:
            restart = restarts.restart_firestore if kind == "Firestore emulator restart" else restarts.restart_tasks
            down = restart(self.stack)
        print(f"  {kind}: unreachable for {down:.1f} s", flush=True)
        self.count(kind)

    def tasks_down_while(self, action: Callable[[], T]) -> T:
        """``action`` run while the Cloud Tasks emulator is down (stopped, then started again on its port with the
        tasks it held, as ``restart``): a Cloud Tasks outage during one request."""
        stopped = threading.Event()
        done = threading.Event()

        def outage() -> None:
            with self._kill_lock:
                restarts.restart_tasks(self.stack, down_seconds=OUTAGE_SECONDS, stopped=stopped, until=done)

        restarting = threading.Thread(target=outage, daemon=True)
        restarting.start()
        if not stopped.wait(60):
            raise TimeoutError("the Cloud Tasks emulator was never stopped")
        try:
            result = action()
        finally:
            done.set()
            restarting.join(120)
        self.count("Cloud Tasks outage during an answer")
        return result

    def event_retry(self, rng: random.Random, event_id: str) -> None:
        """Perhaps Slack delivers the mention's signed event again (``X-Slack-Retry-Num``)."""
        if rng.random() < 0.5:
            self.slack.redeliver(event_id)
            self.count("Slack event retry")

    def clicks(self, rng: random.Random) -> int:
        """How many times the operator's button is pressed at once: twice when the click is duplicated."""
        if rng.random() < 0.5:
            self.count("duplicated button click")
            return 2
        return 1

    # -- Cloud Tasks -----------------------------------------------------------------------
    def duplicate_delivery(self, rng: random.Random, session_id: str) -> None:
        """Perhaps deliver the session's task twice more, in parallel, as Cloud Tasks may, with its headers."""
        if not rng.random() < 0.5:
            return
        task = f"faults-dup-{session_id}-{rng.randrange(10**6)}"
        # Each copy is a delivery chain of its own (its own task name and retry count): a retry of one copy after
        # a failed attempt is not a retry of the other, which may still run (the product takes a session over from
        # a task whose own earlier attempt failed, as Cloud Tasks retries only after one has).
        threads = [threading.Thread(target=deliver, args=(self.stack, session_id, f"{task}-{n}", n)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.count("duplicate parallel task delivery")


def deliver(stack: Stack, session_id: str, task: str, copy: int, max_attempts: int = 8) -> None:
    """One copy of a session's task delivered to agent_session with Cloud Tasks' headers, retried on a non-2xx
    answer or a cut connection (a SIGKILL) with the attempt counted up and doubling backoff, as Cloud Tasks does."""
    url = stack.function_url("agent_session")
    backoff = 0.5
    for attempt in range(max_attempts):
        queue = local.QUEUE.rsplit("/", 1)[-1]
        sent = cloud_tasks_headers(queue=queue, task=task, retry=attempt, executions=attempt, eta=time.time())
        headers = {"Content-Type": "application/json", "X-Faults-Copy": str(copy), **sent}
        try:
            reply = requests.post(url, data=json.dumps({"session_id": session_id}), headers=headers, timeout=600)
            if 200 <= reply.status_code < 300:
                return
        except requests.RequestException:
            pass
        time.sleep(backoff)
        backoff = min(backoff * 2, 4.0)


def requests_with(gemini: FakeGemini, marker: str) -> int:
    """How many model requests so far carry ``marker`` in their conversation's text."""
    return sum(marker in texts_of(r) for r in gemini.requests())


def texts_of(request: dict[str, Any]) -> str:
    """The text parts of a recorded model request (a delegate call's arguments are not among them)."""
    contents = request["body"].get("contents", [])
    return "\n".join(str(part.get("text", "")) for content in contents for part in content.get("parts", []))

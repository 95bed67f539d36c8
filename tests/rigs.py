"""The product's code run in the test process on the stack's emulators, its tasks going to a sink (so every session
runs here, once, where it is counted), with environment variables of the test's choosing; and Cloud Tasks down for
that code: a real Cloud Tasks client that talks gRPC to a socket that accepts connections and never answers (or to a
closed port), then, once it is back up, to the stack's emulator."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

from bench import cost
from bench.sink import Sink
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared import config, deps
from shared.state import ids
from shared.state.models import SessionStatus
from tests.poll import wait_for


@contextmanager
def counted_rig(stack: Stack, monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[cost.Rig]:
    """Counted Firestore; tasks go to a sink; ``env`` set for the product code this process runs (on the product's
    default lease unless ``env`` sets one)."""
    FakeGemini(stack.url("fake_gemini")).reset()
    with Sink() as sink:
        monkeypatch.setenv("TASKS_TARGET_URL", sink.url)
        # The product's lease (the suite's stack shortens it), so a heartbeat counts as often as deployed.
        lease = config.Settings.session_lease_seconds
        for name, value in {lease.name: str(lease.default), **env}.items():
            monkeypatch.setenv(name, value)
        config.reset()
        rig = cost.Rig(stack)
        try:
            with rig.installed():
                yield rig
            # Close the sink only once the emulator has delivered every task, or it would retry them.
            wait_for(lambda: sink.count >= rig.created_tasks.created, timeout=60, what="the tasks to reach the sink")
        finally:
            monkeypatch.undo()
            config.reset()


Handle = Callable[..., tuple[Any, int]]


class Outage:
    """Cloud Tasks as the product sees it: down, or the stack's emulator; the sessions of the tasks created."""

    def __init__(self, up: Any, *, blackhole: bool) -> None:
        self.up = up
        self.down = False
        self.created: list[str] = []
        self.waited = 0.0  # seconds spent in calls to the unreachable Cloud Tasks
        self.allowed = 0.0  # seconds the product allowed those calls in all (each call's retry deadline)
        self.listener = socket.create_server(("127.0.0.1", 0))
        port = self.listener.getsockname()[1]
        if not blackhole:  # nothing listens there: every attempt is refused at once
            self.listener.close()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.unreachable = tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))

    def create_task(self, *, parent: str, task: tasks_v2.Task, retry: Any = None, timeout: Any = None) -> Any:
        if self.down:
            self.allowed += retry.timeout if retry is not None and retry.timeout is not None else float(timeout or 0)
            began = time.monotonic()
            try:
                return self.unreachable.create_task(parent=parent, task=task, retry=retry, timeout=timeout)
            finally:
                self.waited += time.monotonic() - began
        created = self.up.create_task(parent=parent, task=task, retry=retry, timeout=timeout)
        self.created.append(json.loads(task.http_request.body)["session_id"])
        return created

    def close(self) -> None:
        self.listener.close()


@contextmanager
def tasks_outage(*, blackhole: bool) -> Iterator[Outage]:
    """The product's Cloud Tasks replaced by an ``Outage`` (up until the test sets ``down``)."""
    down = Outage(deps.tasks(), blackhole=blackhole)
    try:
        with deps.override(tasks=down):
            yield down
    finally:
        down.close()


def queued_again(rig: cost.Rig, outage: Outage, handle: Handle, request: tuple[bytes, dict[str, str]],
                 continuation: str, *, status: int = 200, reply: Any = None) -> None:  # fmt: skip
    """Cloud Tasks back up, ``request`` handled again (Slack's redelivery, or the operator's second press or
    submission) answers ``status`` (and ``reply``, when given) and creates the task of the still-queued
    ``continuation``, and no other; the continuation then runs to its end."""
    outage.down = False
    before = len(outage.created)
    answered, got = handle(*request)
    assert got == status, answered
    if reply is not None:
        assert answered == reply
    assert outage.created[before:] == [continuation]
    rig.deliver(continuation)
    assert rig.session(continuation).status == SessionStatus.DONE


def asking_tree(rig: cost.Rig, children: int) -> Any:
    """``bench.trees.asking`` for a test, which fails, showing them, if any request of the tree matched none of the
    Gemini stub's scripted replies (the stub answered 500): the conversation of each, the scripted items whose text
    it holds, each earlier request of the tree with the item it took, and the items never taken. (Such a request
    was a child told that its parent had ended without answering, when the parent's answer reached it before its
    turn paused: ``shared.agent.pausing``, ``tests/stack/test_parent_asks.py``.)"""
    from bench import trees

    before = max((int(r.get("seq") or 0) for r in rig.gemini.requests()), default=0)  # the stub keeps the last 1000
    scripted: list[dict[str, Any]] = []
    script = rig.gemini.script

    def noted(*items: Any) -> int:
        scripted.extend(items)
        return script(*items)

    rig.gemini.script = noted  # type: ignore[method-assign]
    try:
        tree = trees.asking(rig, children)
    finally:
        del rig.gemini.script  # the class's own again
    since = [r for r in rig.gemini.requests() if int(r.get("seq") or 0) > before]
    unscripted = [r for r in since if (r.get("reply") or {}).get("source") == "exhausted"]
    if unscripted:
        needles = {(item.get("match") or {}).get("contains") for item in scripted}
        left = [item for item in rig.gemini.remaining() if (item.get("match") or {}).get("contains") in needles]
        shown = "\n\n".join(unmatched(r, scripted, since) for r in unscripted)
        shown += "\nscripted items never taken:\n" + "\n".join(json.dumps(item) for item in left)
        pytest.fail(f"the Gemini stub's script did not foresee {len(unscripted)} request(s) of this tree:\n{shown}")
    return tree


def _part(part: dict[str, Any]) -> str:
    if "text" in part:
        return f"text {part['text']!r}"
    if "functionCall" in part:
        call = part["functionCall"]
        return f"call {call.get('name')} {json.dumps(call.get('args'))}"
    if "functionResponse" in part:
        answer = part["functionResponse"]
        return f"response {answer.get('name')} {json.dumps(answer.get('response'))}"
    return json.dumps(part)


def unmatched(request: dict[str, Any], scripted: list[dict[str, Any]], journal: list[dict[str, Any]]) -> str:
    """One request the stub could not answer: its conversation (every content, the last in full), each scripted
    item whose text it holds (all of them taken by then), and the replies the journal shows before it."""
    contents = (request.get("body") or {}).get("contents") or []
    lines = [f"request seq {request.get('seq')} ({len(contents)} contents):"]
    for n, content in enumerate(contents):
        lines.append(f"  [{n}] {content.get('role')}: " + " | ".join(_part(p) for p in content.get("parts") or []))
    text = json.dumps(request.get("body"))
    close = [item for item in scripted if (item.get("match") or {}).get("contains", "\0") in text]
    lines.append("  scripted items it holds the text of (each taken by an earlier request):")
    lines.extend(f"    {json.dumps(item)}" for item in close)
    answered = [r for r in journal if int(r.get("seq") or 0) < int(request.get("seq") or 0)]
    lines.append(f"  {len(answered)} requests of the tree before it; their last contents and the item each took:")
    for r in answered:
        last = ((r.get("body") or {}).get("contents") or [{}])[-1]
        parts = " | ".join(_part(p) for p in last.get("parts") or [])
        took = (r["reply"].get("match") or {}).get("contains")
        answered_with = " | ".join(_part(p) for p in r["reply"].get("parts") or [])
        size = len((r.get("body") or {}).get("contents") or [])
        lines.append(f"    seq {r.get('seq')} ({size} contents) {last.get('role')}: {parts[:240]}")
        lines.append(f"      {r['reply'].get('source')}: took the item matching {took!r}: {answered_with[:200]}")
    return "\n".join(lines)


def asked_and_answered(rig: cost.Rig, asks: dict[str, Any] | None = None, *,
                       text: str = "set up the database") -> tuple[str, str]:  # fmt: skip
    """A mention of ``text`` whose session pauses on an operator question (its model's turn: ``asks``), answered by
    a thread reply: its id and its queued continuation's."""
    asks = asks or FakeGemini.call("ask_operator", question="sqlite or postgres?", options=["sqlite", "postgres"])
    session_id = rig.paused(text, asks)
    question_id = rig.session(session_id).awaited_question
    assert question_id
    reply: dict[str, Any] = {}
    rig.ingress(rig.reply(session_id, "2"), reply)
    assert reply.get("answer") == "answered", reply
    continuation = ids.resumed_by(question_id)
    rig.expect(continuation, SessionStatus.QUEUED)
    return session_id, continuation

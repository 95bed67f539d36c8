"""The product run in the benchmark's own process: its store pointed at a counted database of its own, its handlers
called as the functions call them, its tasks delivered as Cloud Tasks delivers them.

``Rig`` is what the in-process figures (3, 5, 7, 8, 10, 11, 14, 15, 16) and the stack tests' counted rigs are made
of; ``environment`` sets product settings for a block; ``model_calls`` marks each request the product hands to
google-genai; ``deliver`` is one task's delivery, retried as Cloud Tasks retries it; ``DirectTasks`` is Cloud
Tasks as deployed dispatches, every task created delivered at once on a thread of its own.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

import grpc
from google.api_core import exceptions as gexc
from slack_sdk import WebClient

from bench.firestore_ops import CountingClient, OpCounter, Ops, wipe
from infra import slack_payloads as events
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from shared import config, deps
from shared.agent import model as gemini
from shared.handlers import agent_session as worker
from shared.handlers import slack_events as ingress
from shared.state import sessions
from shared.state.models import Approval, Question, SessionStatus
from shared.state.session_model import Session

M = TypeVar("M")
RETRIES = 6


def _short_id() -> str:
    return uuid.uuid4().hex[:8].upper()


class TaskCount(grpc.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Counts the tasks created through a Cloud Tasks channel, so a caller can wait until all were delivered, and
    keeps the body of the last task created for each session (what Cloud Tasks would deliver: ``Rig.deliver``)."""

    def __init__(self) -> None:
        self.created = 0
        self.bodies: dict[str, bytes] = {}
        self.order: list[str] = []  # the session of each task created, in order
        self.changed = threading.Condition()

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        method = details.method.decode() if isinstance(details.method, bytes) else str(details.method)
        if not method.endswith("/CreateTask"):
            return continuation(details, request)
        answer = continuation(details, request)
        if answer.exception() is not None:  # refused: its error is the caller's, and no task was created
            return answer
        body = bytes(request.task.http_request.body)
        session_id = str(json.loads(body)["session_id"])
        with self.changed:
            self.created += 1
            self.bodies[session_id] = body
            self.order.append(session_id)
            self.changed.notify_all()
        return answer

    def mark(self) -> int:
        """Where the tasks created from now on begin in ``order``."""
        with self.changed:
            return len(self.order)

    def first_after(self, mark: int, *, unless: threading.Event) -> str | None:
        """The session of the first task created after ``mark``, once it is; None if ``unless`` is set first."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.order) > mark or unless.is_set())
            return self.order[mark] if len(self.order) > mark else None

    def stop_waiting(self, event: threading.Event) -> None:
        """Set ``event`` and wake ``first_after``."""
        with self.changed:
            event.set()
            self.changed.notify_all()


@dataclass
class Rig:
    """The product's store pointed at a counted database of its own on the emulator of ``stack``."""

    stack: local.Stack
    database: str = field(default_factory=lambda: f"cost-{_short_id().lower()}")
    counter: OpCounter = field(default_factory=OpCounter)
    created_tasks: TaskCount = field(default_factory=TaskCount)
    client: CountingClient = field(init=False)
    uid: str = field(default_factory=_short_id)
    _ts: int = 0

    def __post_init__(self) -> None:
        self.client = CountingClient(counter=self.counter, project=local.PROJECT, database=self.database)
        self.gemini = FakeGemini(self.stack.url("fake_gemini"))
        self.slack = WebClient(token=local.BOT_TOKEN, base_url=self.stack.url("fake_slack") + "/api/")

    @contextmanager
    def installed(self) -> Iterator[Rig]:
        """Inside, the product uses the counted Firestore client and a Cloud Tasks client that counts created tasks.

        The database is wiped on the way out.
        """
        from google.cloud import tasks_v2
        from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

        channel = grpc.intercept_channel(grpc.insecure_channel(self.stack.tasks_host), self.created_tasks)
        counting_tasks = tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
        try:
            with deps.override(firestore=self.client, tasks=counting_tasks):
                yield self
        finally:
            channel.close()
            self.wipe()

    def wipe(self) -> None:
        """Delete every document of this rig's database."""
        wipe(self.stack.firestore_host, local.PROJECT, self.database)

    # --- the pieces a scenario is made of ----------------------------------------------------------
    def measure(self, work: Callable[[], object]) -> Ops:
        return self.counter.measure(work)

    def script(self, *items: dict[str, Any]) -> None:
        """Gemini stub replies that only this rig's conversations receive."""
        self.gemini.script(*(FakeGemini.matching(self.uid, item) for item in items))

    def new_thread(self, text: str) -> tuple[str, str]:
        """A channel and the ts of a message that starts a thread in the fake Slack."""
        channel = f"C{self.uid}{self._next()}"
        posted = self.slack.chat_postMessage(channel=channel, text=text)
        return channel, str(posted["ts"])

    def _next(self) -> int:
        self._ts += 1
        return self._ts

    def mention(self, text: str = "what is the status?", *, user: str = "U0HUMAN") -> tuple[bytes, dict[str, str]]:
        """A signed app_mention from ``user`` that starts a new thread, ready for the ingress."""
        text = f"{text} [{self.uid}]"
        channel, ts = self.new_thread(text)
        event = events.mention(channel=channel, ts=ts, text=text, user=user)
        return events.signed(event, event_id=f"Ev{self.uid}{self._next()}")

    def reply(self, session_id: str, text: str, *, user: str = local.OPERATOR_ID) -> tuple[bytes, dict[str, str]]:
        """A person's signed reply in the session's thread, ready for the ingress."""
        session = self.session(session_id)
        ts = str(
            self.slack.chat_postMessage(channel=session.origin.channel, thread_ts=session.origin.thread_ts, text=text)[
                "ts"
            ]
        )
        event = events.message(
            channel=session.origin.channel, ts=ts, thread_ts=session.origin.thread_ts, text=text, user=user
        )
        return events.signed(event, event_id=f"Ev{self.uid}{self._next()}")

    @staticmethod
    def press(channel: str, message_ts: str, thread_ts: str, *, action_id: str, value: str,
              user: str = local.OPERATOR_ID) -> tuple[bytes, dict[str, str]]:  # fmt: skip
        """A signed ``block_actions`` request for one press of a button on a bot message, as Slack sends it."""
        container = {"type": "message", "channel_id": channel, "message_ts": message_ts, "thread_ts": thread_ts}
        action = {"action_id": action_id, "value": value, "action_ts": f"{time.time():.6f}"}
        return Rig.form({"type": "block_actions", "user": {"id": user}, "channel": {"id": channel},
                         "container": container, "actions": [action]})  # fmt: skip

    @staticmethod
    def form(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        """An interactivity ``payload``, form-encoded and signed as Slack sends it."""
        from infra.signing import signed_headers

        body = urlencode({"payload": json.dumps(payload)}).encode()
        signed = signed_headers(local.SIGNING_SECRET, body, content_type="application/x-www-form-urlencoded")
        return body, {k.lower(): v for k, v in signed.items()}

    def answer_press(self, question: Question) -> tuple[bytes, dict[str, str]]:
        """The operator's press of the second option of ``question`` (posted)."""
        from shared.slack import blocks

        assert question.post_ts, "the question was not posted"
        value = blocks.question_value(question.question_id, 2)
        return self.press(question.channel, question.post_ts, question.thread_ts, action_id="answer_2", value=value)

    def approve_press(self, approval: Approval, thread_ts: str) -> tuple[bytes, dict[str, str]]:
        """The operator's Approve on ``approval``'s card (posted) in the thread ``thread_ts``."""
        from shared.slack import blocks

        assert approval.card_ts, "the approval card was not posted"
        value = blocks.approval_value(approval.approval_id, approval.digest)
        return self.press(approval.channel, approval.card_ts, thread_ts, action_id=blocks.APPROVE_ACTION, value=value)

    def paused(self, text: str, *replies: dict[str, Any]) -> str:
        """A mention of ``text`` whose session, the model replying ``replies``, pauses; uncounted."""
        session_id = self.start(text)
        self.script(*replies)
        self.deliver(session_id)
        self.expect(session_id, SessionStatus.PAUSED)
        return session_id

    @staticmethod
    def interactivity(request: tuple[bytes, dict[str, str]], into: dict[str, Any]) -> None:
        """The slack_interactivity handler, as the function calls it; its reply lands in ``into``."""
        from shared.handlers import slack_interactivity

        reply, status = slack_interactivity.handle(*request)
        assert status == 200, reply
        into.update(reply)

    @staticmethod
    def ingress(request: tuple[bytes, dict[str, str]], into: dict[str, Any]) -> None:
        """The ingress handler, as slack_events calls it; its reply lands in ``into``."""
        reply, status = ingress.handle(*request)
        assert status == 200, reply
        into.update(reply)

    def deliver(self, session_id: str) -> None:
        """The agent_session handler for one task delivery, as the function calls it: with the body of the task the
        product created for the session (a continuation's names the record it resumes), or one naming it alone."""
        body = self.created_tasks.bodies.get(session_id) or json.dumps({"session_id": session_id}).encode()
        reply, status = worker.handle(body, {})
        assert status == 200, reply

    @staticmethod
    def deliver_retried(session_id: str, attempts: list[str] | None = None) -> None:
        """One delivery retried as Cloud Tasks retries it (``deliver`` below); it must end in a 2xx."""
        assert deliver(session_id, attempts), f"{session_id} was not delivered in {RETRIES} attempts"

    def script_used(self) -> None:
        """Every model reply scripted for this rig was asked for: a reply left over would answer the next scenario's
        session and shift its counts."""
        left = [item for item in self.gemini.remaining() if self.uid in json.dumps(item)]
        assert not left, f"scripted model replies never asked for: {left}"

    def expect(self, session_id: str, status: SessionStatus) -> None:
        found = self.session(session_id).status
        assert found == status, f"session {session_id} is {found}, expected {status}"

    def delivered(self, session_id: str, status: SessionStatus, *, then: str | None = None) -> Ops:
        """The operations of one delivery of ``session_id``'s task, after which session ``then`` (``session_id``
        unless given) is ``status``."""
        ops = self.measure(lambda: self.deliver(session_id))
        self.expect(then or session_id, status)
        return ops

    def session(self, session_id: str) -> Session:
        found = sessions.get_session(session_id)
        assert found is not None, session_id
        return found

    def start(self, text: str = "what is the status?") -> str:
        """A mention through the ingress, uncounted; returns the session it queued."""
        reply: dict[str, Any] = {}
        self.ingress(self.mention(text), reply)
        return str(reply["session_id"])

    def sweep(self, at: datetime) -> dict[str, Any]:
        from shared.usecases import sweep

        return sweep.run(at)


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """These environment variables, read again by ``shared.config``, for the block only."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    config.reset()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        config.reset()


@contextmanager
def model_calls(mark: Callable[[], M]) -> Iterator[list[M]]:
    """What ``mark`` said each time the product handed a request to google-genai (whole or streamed), in order."""
    calls: list[M] = []
    original, streamed = gemini.generate, gemini.generate_stream

    def generate(*args: Any, **kwargs: Any) -> Any:
        calls.append(mark())
        return original(*args, **kwargs)

    def generate_stream(*args: Any, **kwargs: Any) -> Any:  # an answer streamed into Slack (SLACK_STREAM)
        calls.append(mark())
        return streamed(*args, **kwargs)

    gemini.generate, gemini.generate_stream = generate, generate_stream
    try:
        yield calls
    finally:
        gemini.generate, gemini.generate_stream = original, streamed


def deliver(session_id: str, attempts: list[str] | None = None, *, task: str = "") -> bool:
    """One task's delivery to the agent_session handler as Cloud Tasks makes it: retried (the same task name, a
    higher retry count, backing off) until it answers 2xx; each attempt is noted in ``attempts``. False when it
    never did."""
    body = json.dumps({"session_id": session_id}).encode()
    task = task or f"bench-{uuid.uuid4().hex[:8]}-{session_id}"
    for attempt in range(RETRIES):
        if attempts is not None:
            attempts.append(session_id)
        headers = {"x-cloudtasks-taskname": task, "x-cloudtasks-taskretrycount": str(attempt)}
        _, status = worker.handle(body, headers)
        if status == 200:
            return True
        time.sleep(0.1 * 2**attempt)
    return False


class DirectTasks:
    """Cloud Tasks as deployed dispatches, for ``deps.override(tasks=...)``: each task created is delivered at once,
    on a thread of its own, by ``send(session_id, task_name, attempts)`` (by default to the agent_session handler in
    this process, retried until 2xx); a name created twice is refused with ``AlreadyExists``, as Cloud Tasks refuses
    it. Every in-process attempt is noted in ``attempts``."""

    def __init__(self, send: Callable[[str, str, list[str]], object] | None = None) -> None:
        self.send = send or (lambda session_id, name, attempts: deliver(session_id, attempts, task=name))
        self.attempts: list[str] = []
        self.names: set[str] = set()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def create_task(self, *, parent: str, task: Any, retry: Any = None, timeout: Any = None) -> Any:
        name = str(task.name).rsplit("/", 1)[-1]
        with self.lock:
            if name in self.names:
                raise gexc.AlreadyExists(f"task {name} exists")  # type: ignore[no-untyped-call]
            self.names.add(name)
        self.dispatch(str(json.loads(bytes(task.http_request.body))["session_id"]), name)
        return task

    def dispatch(self, session_id: str, name: str) -> None:
        """Deliver ``session_id``'s task now, on a thread of its own."""
        thread = threading.Thread(target=self.send, args=(session_id, name, self.attempts), daemon=True)
        with self.lock:
            self.threads.append(thread)
            self.names.add(name)
        thread.start()

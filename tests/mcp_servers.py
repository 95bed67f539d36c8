"""What the MCP tests share: sample MCP servers run as processes beside the stack, the model's function responses,
an operator's thread reply (and a server's question asked and answered), and Cloud Tasks' retry of a killed
worker's task."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import requests

from infra import stack as local
from infra.fakes.dispatch.headers import cloud_tasks_headers
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.state import ids, sessions
from shared.state.models import Question, SessionStatus
from shared.state.session_model import Session
from tests import delivery
from tests.agent_helpers import Thread, function_responses, mention, open_question, wait_status
from tests.poll import wait_for


@contextmanager
def mcp_servers(stack: Stack, **servers: Sequence[str]) -> Iterator[dict[str, str]]:
    """Start sample MCP servers (``python -m infra.fakes.mcp`` with each one's flags) as the stack's processes of
    those names; their MCP endpoints by name. Stopped afterwards."""
    try:
        yield {name: stack.start_mcp_server(name, *args) for name, args in servers.items()}
    finally:
        for name in servers:
            if name in stack.procs:
                stack.stop_process(name)


def responses_of(fake_gemini: FakeGemini, name: str) -> list[dict[str, Any]]:
    """The function responses for tool ``name`` in the model's latest request."""
    return [r["response"] for r in function_responses(fake_gemini.requests()[-1]) if r["name"] == name]


def reply(fake_slack: FakeSlack, channel: str, thread_ts: str, text: str) -> None:
    """An operator replies in the thread."""
    sent = fake_slack.user_message(local.OPERATOR_ID, channel, text, thread_ts=thread_ts)
    assert all(d["status"] == 200 for d in sent["deliveries"]), sent


def asked_by_a_server(script: Callable[..., int], fake_slack: FakeSlack, uid: str, call: dict[str, Any], said: str,
                      request: str) -> tuple[Thread, Question]:  # fmt: skip
    """A mention of ``request`` in channel ``C{uid}`` whose model turn is ``call`` (then says ``said``), to a server
    that asks for input: the session pauses (it exits, like a blocking ask_operator) on the question it asked."""
    script(call, FakeGemini.text(said))
    thread = mention(fake_slack, f"C{uid}", request)
    wait_status(thread.session_id, SessionStatus.PAUSED)
    return thread, open_question(thread.session_id)


def answered(fake_slack: FakeSlack, thread: Thread, question: Question, text: str,
             status: SessionStatus = SessionStatus.DONE) -> Session:  # fmt: skip
    """An operator replies ``text`` in the thread to ``question``; its continuation, once it reaches ``status``."""
    reply(fake_slack, thread.channel, thread.ts, text)
    return wait_status(ids.resumed_by(question.question_id), status)


def retried_by_cloud_tasks(stack: Stack, session_id: str) -> None:
    """Deliver the killed worker's task again, as Cloud Tasks retries a failed attempt after its backoff, if the
    dispatcher's own retries (for a minute) have not taken the session over: a restart on a busy machine may outlast
    them. A retry of the same task takes the session over once its lease has gone a heartbeat without a write.

    The dispatcher is given its minute first: a retry of ours beside one of its own would be two claim
    transactions waiting on each other's locks, and the Firestore emulator may let both commit after its lock
    timeout (firebase-tools#1628), which Firestore itself never does."""
    session = sessions.get_session(session_id)
    assert session is not None
    if session.status != SessionStatus.RUNNING or session.lease.task is None:
        return
    killed = (session.lease.worker, session.lease.attempt)

    def moved() -> bool:
        found = sessions.get_session(session_id)
        return (
            found is None
            or found.status != SessionStatus.RUNNING
            or (found.lease.worker, found.lease.attempt) != killed
        )

    try:
        wait_for(moved, timeout=90, what="the dispatcher's retry to take the session over")
        return
    except AssertionError:
        pass  # the dispatcher gave up: deliver it ourselves
    retry = session.lease.attempt + 1
    headers = {"Content-Type": "application/json", **cloud_tasks_headers(
        queue=delivery.QUEUE_ID, task=session.lease.task, retry=retry, executions=retry, eta=time.time())}  # fmt: skip
    body = json.dumps({"session_id": session_id})
    url = stack.function_url("agent_session")

    def answered() -> bool:
        try:
            return requests.post(url, data=body, headers=headers, timeout=120).status_code == 200
        except requests.ConnectionError:  # still starting
            return False

    wait_for(answered, timeout=150, what=f"a retry of {session_id}'s task to be answered")

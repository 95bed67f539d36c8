"""Driving whole conversations through the local stack, as a person in Slack would."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from infra import stack as local
from infra.fakes.slack.client import FakeSlack
from shared.state import ids, questions, sessions
from shared.state.models import Question, SessionStatus
from shared.state.session_model import Session
from tests.poll import wait_for

HUMAN = "U0HUMAN"


@dataclass
class Thread:
    channel: str
    ts: str
    session_id: str


def mention(fake_slack: FakeSlack, channel: str, text: str, *, user: str = HUMAN) -> Thread:
    """A person mentions the bot in a new thread; the fake Slack delivers the signed events."""
    # The channel id (unique per test) is in the text, so the test's scripted replies match only this thread.
    sent = fake_slack.user_message(user, channel, f"<@{local.BOT_USER_ID}> {text} [{channel}]")
    [delivery] = [d for d in sent["deliveries"] if d["type"] == "app_mention"]
    assert delivery["status"] == 200, sent
    return Thread(channel=channel, ts=sent["ts"], session_id=ids.session_for_event(delivery["event_id"]))


def session(session_id: str) -> Session | None:
    return sessions.get_session(session_id)


def wait_status(session_id: str, *statuses: SessionStatus, timeout: float = 30.0) -> Session:
    def reached() -> Session | None:
        found = sessions.get_session(session_id)
        return found if found and found.status in statuses else None

    return wait_for(reached, timeout=timeout, what=f"session {session_id} to become {statuses}")


def conversation_done(session_id: str, *, timeout: float = 30.0) -> Session:
    """The session that writes ``session_id``'s transcript, once it is done: the session itself, or the continuation
    that resumed a turn it paused on (every paused turn resumes under the turn's ``ids.resume_id``)."""

    def reached() -> Session | None:
        root = sessions.get_session(session_id)
        writer = sessions.get_session(root.transcript_writer or session_id) if root is not None else None
        return writer if writer is not None and writer.status == SessionStatus.DONE else None

    return wait_for(reached, timeout=timeout, what=f"the conversation of {session_id} to be done")


def open_question(session_id: str) -> Question:
    found = session(session_id)
    assert found is not None
    assert found.awaited_question, f"session {session_id} has no question"
    question = questions.get_question(found.awaited_question)
    assert question is not None
    return question


def function_responses(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every functionResponse part in a recorded generateContent request body."""
    found = []
    for content in request["body"].get("contents", []):
        for part in content.get("parts", []):
            response = part.get("functionResponse") or part.get("function_response")
            if response:
                found.append(response)
    return found


def texts(request: dict[str, Any]) -> str:
    return "\n".join(
        part.get("text", "") for content in request["body"].get("contents", []) for part in content.get("parts", [])
    )


def restart_agent(stack: local.Stack) -> None:
    """Stop agent_session (if it runs) and start it again with the stack's ``function_env`` for it."""
    if "agent_session" in stack.procs:
        stack.stop_process("agent_session")
    stack.start_function("agent_session")


@contextmanager
def agent_with(stack: local.Stack, env: Mapping[str, str]) -> Iterator[None]:
    """agent_session restarted with ``env`` on top of the product's environment; restarted without it afterwards
    (also when the test killed it)."""
    stack.function_env["agent_session"] = dict(env)
    restart_agent(stack)
    try:
        yield
    finally:
        stack.function_env.pop("agent_session", None)
        restart_agent(stack)

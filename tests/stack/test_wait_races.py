"""Resolutions racing the end of the turn they resolve (round 3, flow 14): an operator's answer or decision that
arrives while the session waiting on it is being stopped (a person's Stop) or abandoned (the sweep), a resolution
delivered both as a button press and as a text reply, and a turn that waits on several kinds of thing at once
(questions, twin approve-tier calls, a child) whose last resolutions land together. Whatever the order, a turn
resumes at most once, a stopped or abandoned turn never resumes, and no call runs twice.

On the real stack: the fake Slack delivers the presses and replies to the functions (in threads released together
where the test says so), the resuming task is delivered as Cloud Tasks may (twice at once, retried on non-2xx), and
the end being raced is run here, in the test process, with the answer arriving inside it.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.asks import stopping
from shared.state import ids, sessions
from shared.state import questions as stored_questions
from shared.state.models import QuestionStatus, SessionStatus
from shared.state.session_model import Session
from tests.agent_helpers import function_responses, wait_status
from tests.stack.test_delegation import requests_for
from tests.stack.test_twin_calls import pick, twin_questions

pytestmark = pytest.mark.stack
OPERATOR = local.OPERATOR_ID


def test_an_answer_that_arrives_while_its_session_is_being_stopped_resumes_nothing(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Stop marks the paused session stopped, then cancels its questions. An operator's press on one of its
    questions in between (the question still open, its session stopped) must not resume the stopped turn."""
    thread, asked = twin_questions(fake_slack, fake_gemini, uid)
    wait_status(thread.session_id, SessionStatus.PAUSED, timeout=60)
    pressed: list[dict[str, Any]] = []
    real = stopping._close_paused

    def answered_first(found: Session, *, by: str) -> None:
        if found.session_id == thread.session_id and not pressed:
            pressed.append(pick(fake_slack, thread, asked[1], 1))  # handled by the stack's own function
        real(found, by=by)

    monkeypatch.setattr(stopping, "_close_paused", answered_first)
    assert stopping.stop(thread.session_id, by=f"<@{OPERATOR}>") == [thread.session_id]
    assert [p["status"] for p in pressed] == [200]
    stopped = sessions.get_session(thread.session_id)
    assert stopped is not None
    assert stopped.status == SessionStatus.STOPPED
    resumed = [ids.continuation_id(q) for q in asked] + [ids.resume_id(thread.session_id, 1)]
    assert [s for s in resumed if sessions.get_session(s) is not None] == []  # nothing resumes the stopped turn
    found = [stored_questions.get_question(q) for q in asked]
    assert [q.status if q else None for q in found] == [QuestionStatus.CANCELLED, QuestionStatus.CANCELLED]
    assert [r for r in requests_for(fake_gemini, f"[C{uid}]") if function_responses(r)] == []
    told = [e["text"] for e in fake_slack.ephemerals(thread.channel, user=OPERATOR)]
    assert any("Nothing waits on this question any more" in text for text in told), told

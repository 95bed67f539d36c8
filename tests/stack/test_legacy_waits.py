"""Sessions stored paused before every pause was one waiting record (issue 23): a deploy while sessions wait. A
document with the old single-kind pause marker (``question_id`` on a paused session) is read as the waiting record
it meant, so its answer resumes it, once, under the turn's resume id."""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.genai import types

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.agent.transcript import to_json
from shared.state import firestore, ids, sessions, steps
from shared.state import questions as stored
from shared.state.models import Question, SessionKind, SessionStatus, Step, StepKind, WaitKind
from shared.state.session_model import Session
from tests.agent_helpers import function_responses, wait_status

pytestmark = pytest.mark.stack
G = FakeGemini
OPERATOR = local.OPERATOR_ID


@pytest.mark.timeout(180)
def test_a_session_stored_paused_on_a_question_under_the_old_marker_resumes_on_its_answer(
    stack: Stack, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    channel = f"C{uid}"
    root = fake_slack.user_message(OPERATOR, channel, f"pick a region [{channel}]")["ts"]  # no mention: no session
    asked_at = firestore.now() - timedelta(minutes=5)
    session_id = f"ev-legacy-{uid}"
    question_id = ids.question_id(session_id, 1, 0)
    ask = types.FunctionCall(name="ask_operator", args={"question": "Which region?"})  # no call id
    opening = types.Content(role="user", parts=[types.Part(text=f"pick a region [{channel}]")])
    turn = types.Content(role="model", parts=[types.Part(function_call=ask)])
    for seq, kind, content in [(0, StepKind.PROMPT, opening), (1, StepKind.MODEL, turn),
                               (2, StepKind.TOOL_RESULTS, None)]:  # fmt: skip
        step = Step(seq=seq, session_id=session_id, kind=kind, content=to_json(content) if content else None,
                    audit=[], at=asked_at)  # fmt: skip
        firestore.step_ref(session_id, seq).create(step.to_doc())
    paused = Session.new(
        session_id=session_id, kind=SessionKind.MENTION, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=f"pick a region [{channel}]", created_at=asked_at, status=SessionStatus.PAUSED,
        transcript_writer=session_id, next_seq=3, turns=1, tool_calls=1,
    )  # fmt: skip
    # The old shape: the pause marker, and no waiting record.
    firestore.session_ref(session_id).create({**paused.to_doc(), "question_id": question_id, "waiting": []})
    stored.create_question(Question(
        question_id=question_id, session_id=session_id, transcript_id=session_id, channel=channel, thread_ts=root,
        text="Which region?", options=[], blocking=True, call_id=None, asked_at=asked_at, requester=OPERATOR,
        seq=1, call_index=0,
    ))  # fmt: skip
    read = sessions.get_session(session_id)
    assert read is not None
    assert [(w.seq, w.index, w.kind, w.key) for w in read.waiting] == [(1, 0, WaitKind.QUESTION, question_id)]
    fake_gemini.script(FakeGemini.matching(f"[{channel}]", G.text("eu-west it is.")))

    sent = fake_slack.user_message(OPERATOR, channel, "eu-west", thread_ts=root)
    assert all(d["status"] == 200 for d in sent["deliveries"]), sent

    resumed = ids.resume_id(session_id, 1)
    wait_status(resumed, SessionStatus.DONE, timeout=90)
    asker = sessions.get_session(session_id)
    assert asker is not None
    assert asker.status == SessionStatus.RESUMED
    [response] = function_responses(fake_gemini.requests()[-1])
    assert response["name"] == "ask_operator"
    assert response["response"]["result"]["answer"] == "eu-west"
    answered = [s for s in steps.load_steps(session_id) if s.kind == StepKind.ANSWER]
    assert len(answered) == 1  # resumed exactly once
    assert [(r.seq, r.index) for r in answered[0].answers or []] == [(1, 0)]

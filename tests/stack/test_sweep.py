"""The silent-exit follow-ups and the daily sweep, through the real functions on the emulators.

The clock is injected: question and lease times are written into the documents, or the sweep is given a
``now``; nothing sleeps for a day.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import requests
from google.genai import types

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared import config, deps
from shared.agent.transcript import to_json
from shared.asks import delegation, lifecycle
from shared.asks import questions as asking
from shared.queue import tasks
from shared.slack import client as slack
from shared.slack.surface import Reaction
from shared.state import feedback, firestore, ids, results, sessions, tree_view
from shared.state import questions as stored
from shared.state.models import (
    Audit,
    Note,
    NoteKind,
    ParentQuestion,
    Question,
    QuestionStatus,
    SessionKind,
    SessionStatus,
    Step,
    StepKind,
    Waiting,
    WaitKind,
)
from shared.state.new_sessions import retry_session
from shared.state.origin import asked_by
from shared.state.session_model import Session
from shared.usecases import sweep as sweeping
from tests.agent_helpers import Thread, function_responses, mention, open_question, texts, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATOR = local.OPERATOR_ID


def sweep(stack: Stack, now: datetime | None = None) -> dict[str, Any]:
    body = {"now": now.isoformat()} if now else {}
    response = requests.post(stack.function_url("sweep"), json=body, timeout=60)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture
def empty_db(stack: Stack) -> None:
    """The sweep reads the whole database: these tests start from an empty one (the emulator's reset endpoint)."""
    url = f"http://{stack.firestore_host}/emulator/v1/projects/{local.PROJECT}/databases/(default)/documents"
    assert requests.delete(url, timeout=30).status_code == 200


def paused_with_question(script: Script, fake_slack: FakeSlack, channel: str, question: str) -> Thread:
    script(G.call("ask_operator", question=question, options=["yes", "no"]))
    thread = mention(fake_slack, channel, f"please decide {question}")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    return thread


def age_question(question_id: str, hours: float) -> datetime:
    asked = firestore.now() - timedelta(hours=hours)
    firestore.db().collection(firestore.QUESTIONS).document(question_id).update({"asked_at": asked})
    return asked


def test_questions_aged_23_25_and_73_hours(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    threads = {
        hours: paused_with_question(script, fake_slack, f"C{uid}{hours}", f"q{hours}?") for hours in (23, 25, 73)
    }
    questions = {hours: open_question(t.session_id) for hours, t in threads.items()}
    for hours, question in questions.items():
        age_question(question.question_id, hours)

    summary = sweep(stack)
    assert (summary["reminded"], summary["abandoned"], summary["questions_read"]) == (1, 1, 2)

    young = stored.get_question(questions[23].question_id)
    assert young is not None
    assert (young.status, young.reminded_at) == (QuestionStatus.OPEN, None)
    assert len(fake_slack.bot_replies(threads[23].channel, threads[23].ts)) == 1  # only the question itself

    reminded = stored.get_question(questions[25].question_id)
    assert reminded is not None
    assert reminded.status == QuestionStatus.OPEN
    assert reminded.reminded_at is not None
    reminder = fake_slack.bot_replies(threads[25].channel, threads[25].ts)[-1]["text"]
    assert f"<@{OPERATOR}>" in reminder
    assert "q25?" in reminder

    gone = stored.get_question(questions[73].question_id)
    assert gone is not None
    assert gone.status == QuestionStatus.ABANDONED
    replies = fake_slack.bot_replies(threads[73].channel, threads[73].ts)
    post = next(m for m in replies if m["ts"] == gone.post_ts)
    assert "Abandoned" in post["text"]
    assert "speech_balloon" not in fake_slack.reactions(threads[73].channel, post["ts"])
    assert "mention me in this thread" in replies[-1]["text"]
    assert sessions.get_session(threads[73].session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]

    posts_before = len(fake_slack.calls("chat.postMessage"))
    again = sweep(stack)
    assert (again["reminded"], again["abandoned"], again["narrated"], again["escalated"]) == (0, 0, 0, 0)
    assert len(fake_slack.calls("chat.postMessage")) == posts_before


def test_the_sweep_reads_only_stale_documents(stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str) -> None:
    now = firestore.now()
    batch = firestore.db().batch()
    for n in range(3000):
        fresh = {"question_id": f"fresh-{n}", "status": "open", "asked_at": now - timedelta(hours=1),
                 "channel": f"C{uid}", "thread_ts": f"{n}.0"}  # fmt: skip
        batch.set(firestore.db().collection(firestore.QUESTIONS).document(f"fresh-{n}"), fresh)
        done = Session.new(
            session_id=f"done-{uid}-{n}",
            kind=SessionKind.MENTION,
            channel=f"C{uid}",
            thread_ts=f"{n}.0",
            trigger_ts=f"{n}.0",
            trigger_user="U1",
            text="x",
            created_at=now - timedelta(days=30),
            status=SessionStatus.DONE,
        )
        batch.set(firestore.db().collection(firestore.SESSIONS).document(done.session_id), done.to_doc())
        if n % 200 == 199:
            batch.commit()
            batch = firestore.db().batch()
    batch.commit()
    for n in range(5):
        stale = {"question_id": f"stale-{n}", "status": "open", "asked_at": now - timedelta(hours=30),
                 "channel": f"C{uid}", "thread_ts": f"stale{n}", "text": "old?", "options": [], "blocking": True,
                 "session_id": f"s-{n}", "transcript_id": f"s-{n}", "call_id": None}  # fmt: skip
        firestore.db().collection(firestore.QUESTIONS).document(f"stale-{n}").set(stale)

    summary = sweep(stack)
    assert summary["questions_read"] == 5
    assert summary["sessions_read"] == 0
    assert summary["reminded"] == 5

    # Counted on the wire by a gRPC interceptor on the real client: a second, in-process sweep reads
    # the 5 stale questions, one empty page of each other query (and of yesterday's feedback, for its per-day
    # summary; and of the notices still owed: the 5 reminders posted are not), and nothing of the 6,000 fresh
    # documents.
    from bench.firestore_ops import CountingClient, OpCounter
    from shared.usecases import sweep as daily

    counter = OpCounter()
    counted = CountingClient(counter=counter, project=local.PROJECT)
    with deps.override(firestore=counted):
        again = counter.measure(daily.run)
    assert again.queries == 8  # paused sessions too: a child waiting on its parent's answer is bounded
    assert again.reads == 5 + 7  # 5 stale questions (already reminded: no writes), 7 empty pages
    assert again.writes == 0


def dead_session(uid: str, *, kind: SessionKind = SessionKind.MENTION, audit: list[dict[str, Any]]) -> Session:
    """A session whose worker died long ago, leaving an audit log of outward work and no report."""
    channel = f"C{uid}"
    session = Session.new(
        session_id=f"dead-{uid}", kind=kind, channel=channel, thread_ts="1700000000.000100",
        trigger_ts="1700000000.000100", trigger_user="U0HUMAN", text=f"deploy the service [{channel}]",
        created_at=firestore.now() - timedelta(hours=5), status=SessionStatus.RUNNING, worker="gone",
        lease_until=firestore.now() - timedelta(hours=3),
        narrated_session_id="ev-original" if kind == SessionKind.RETRY else None,
    )  # fmt: skip
    firestore.db().collection(firestore.SESSIONS).document(session.session_id).set(session.to_doc())
    entries = [Audit.from_doc({**entry, "at": firestore.now()}) for entry in audit]
    step = Step(
        seq=0, session_id=session.session_id, kind=StepKind.TOOL_RESULTS, content=None, audit=entries,
        at=firestore.now(),
    )  # fmt: skip
    firestore.db().collection(firestore.SESSIONS).document(session.session_id).collection(firestore.STEPS).document(
        "000000"
    ).set(step.to_doc())
    return session


WORK: list[dict[str, Any]] = [
    {"type": "model", "text": "", "calls": ["fetch_url"]},
    {"type": "tool", "name": "fetch_url", "args": '{"url": "https://status.example.com"}',
     "result": '{"result": {"status": 200}}', "outward": True, "posts": []},
]  # fmt: skip


def test_a_dead_worker_is_narrated_from_its_audit_log(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    session = dead_session(uid, audit=WORK)
    script(G.text("I checked https://status.example.com (HTTP 200) but never reported back. Nothing else was done."))
    summary = sweep(stack)
    assert summary["narrated"] == 1
    wait_status(ids.retry_id(session.session_id), SessionStatus.DONE)
    [reply] = fake_slack.bot_replies(session.origin.channel, session.origin.thread_ts)
    assert "status.example.com" in reply["text"]
    request = fake_gemini.requests()[-1]
    assert "status.example.com" in texts(request)  # the narration was given the audit log
    assert "tools" not in request["body"]

    # The narration marks its session followed up just after it ends.
    def followed_up() -> Session | None:
        found = sessions.get_session(session.session_id)
        return found if found is not None and found.followed_up else None

    dead = wait_for(followed_up, timeout=60, what="the dead session marked followed up")
    assert dead.status == SessionStatus.SILENT_EXIT
    assert sweep(stack)["narrated"] == 0


def test_a_dead_retry_alerts_the_operators_instead_of_retrying(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    session = dead_session(uid, kind=SessionKind.RETRY, audit=WORK)
    summary = sweep(stack)
    assert (summary["escalated"], summary["narrated"]) == (1, 0)
    [alert] = fake_slack.bot_replies(session.origin.channel, session.origin.thread_ts)
    assert alert["text"].startswith(f":warning: <@{OPERATOR}>")
    assert any("could not be narrated" in m["text"] for m in fake_slack.messages("C0OPERATORS"))
    assert sessions.get_session(ids.retry_id(session.session_id)) is None
    assert sweep(stack)["escalated"] == 0


def test_a_silent_session_whose_narration_was_silent_too_is_escalated_once(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a narration that ended silent, its worker killed before its own alert, left both sessions silent and
    not followed up: the sweep alerted for the session (its narration never reported back) and again for the
    narration (a silent retry), two alerts for one piece of unreported work."""
    session = dead_session(uid, audit=WORK)
    firestore.session_ref(session.session_id).update(
        {"status": SessionStatus.SILENT_EXIT.value, "updated_at": firestore.now() - timedelta(hours=3)}
    )
    retry = retry_session(session, reason="the session ended without reporting back",
                          at=firestore.now() - timedelta(hours=3))  # fmt: skip
    retry.status = SessionStatus.SILENT_EXIT
    firestore.session_ref(retry.session_id).create(
        {**retry.to_doc(), "updated_at": firestore.now() - timedelta(hours=2)}
    )
    assert sweep(stack)["escalated"] >= 1
    alerts = [m for m in fake_slack.bot_replies(session.origin.channel, session.origin.thread_ts)
              if m["text"].startswith(":warning:")]  # fmt: skip
    assert len(alerts) == 1, alerts
    assert session.session_id in alerts[0]["text"]
    for followed in (session.session_id, retry.session_id):
        assert sessions.get_session(followed).followed_up  # type: ignore[union-attr]
    assert sweep(stack)["escalated"] == 0


def two_sweeps_at_once(stack: Stack) -> list[dict[str, Any]]:
    """Two sweeps run at the same time, as Cloud Scheduler may run it: their summaries."""
    summaries: list[dict[str, Any]] = []
    sweeps = [threading.Thread(target=lambda: summaries.append(sweep(stack))) for _ in range(2)]
    for each in sweeps:
        each.start()
    for each in sweeps:
        each.join(90)
    return summaries


def test_two_sweeps_at_once_alert_the_operators_of_a_silent_retry_once(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Cloud Scheduler may run the sweep twice at once: both read a silent narration not followed up yet, and each
    posted its alert (in the thread and in the operator channel), the session marked only after the posts. The alert
    is now claimed first: one of the two posts it."""
    session = dead_session(uid, kind=SessionKind.RETRY, audit=WORK)
    firestore.session_ref(session.session_id).update(
        {"status": SessionStatus.SILENT_EXIT.value, "updated_at": firestore.now() - timedelta(hours=2)}
    )
    fake_slack.slow("chat.postMessage", 3, match=":warning:")  # real Slack latency: the first alert answered late
    summaries = two_sweeps_at_once(stack)
    assert len(summaries) == 2
    assert [m["text"][:9] for m in fake_slack.bot_replies(session.origin.channel, session.origin.thread_ts)] == [
        ":warning:"
    ]
    assert len([m for m in fake_slack.messages("C0OPERATORS") if "could not be narrated" in m["text"]]) == 1
    followed = sessions.get_session(session.session_id)
    assert followed is not None
    assert followed.followed_up


def test_a_silent_session_is_narrated_at_once(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    script(G.call("read_thread", limit=1), G.text(""), G.text("Summary: I read the thread and found nothing to do."))
    thread = mention(fake_slack, f"C{uid}", "look around")
    silent = wait_status(thread.session_id, SessionStatus.SILENT_EXIT)
    assert silent.closed_loop is False
    wait_status(ids.retry_id(thread.session_id), SessionStatus.DONE)
    assert fake_slack.bot_replies(thread.channel, thread.ts)[-1]["text"].startswith("Summary:")
    assert "read_thread" in texts(fake_gemini.requests()[-1])
    # The retry marks the session it narrated once its own end is stored: wait for that write, not the status.
    wait_for(
        lambda: (s := sessions.get_session(thread.session_id)) and s.followed_up, what="the narrated session settled"
    )


def test_a_retry_that_is_itself_silent_raises_an_alert(script: Script, fake_slack: FakeSlack, uid: str) -> None:
    script(G.text(""), G.text(""))
    thread = mention(fake_slack, f"C{uid}", "say nothing")
    wait_status(ids.retry_id(thread.session_id), SessionStatus.SILENT_EXIT)
    alert = wait_for(lambda: fake_slack.bot_replies(thread.channel, thread.ts), what="the alert")[-1]
    assert f"<@{OPERATOR}>" in alert["text"]
    assert sessions.get_session(ids.retry_id(ids.retry_id(thread.session_id))) is None


def test_narration_wins_over_resumption(
    script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    thread = paused_with_question(script, fake_slack, f"C{uid}", "continue?")
    question = open_question(thread.session_id)
    paused = sessions.get_session(thread.session_id)
    assert paused is not None
    retry = sessions.create_session(retry_session(paused, reason="test", at=firestore.now()))
    firestore.db().collection(firestore.SESSIONS).document(retry.session_id).update(
        {"question_id": question.question_id}
    )
    script(G.text("Narrated, not resumed."))
    tasks.enqueue_session(retry.session_id)
    wait_status(retry.session_id, SessionStatus.DONE)
    request = fake_gemini.requests()[-1]
    assert "never reported back" in texts(request)
    assert "functionResponse" not in json.dumps(request["body"])
    assert stored.get_question(question.question_id).status == QuestionStatus.OPEN  # type: ignore[union-attr]


def test_a_session_whose_task_was_never_created_is_requeued(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    queued = Session.new(
        session_id=f"lost-{uid}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts="1.0", trigger_ts="1.0",
        trigger_user="U0HUMAN", text=f"hello [C{uid}]", created_at=firestore.now() - timedelta(hours=1),
    )  # fmt: skip
    doc = queued.to_doc() | {"updated_at": firestore.now() - timedelta(hours=1)}
    firestore.db().collection(firestore.SESSIONS).document(queued.session_id).set(doc)
    script(G.text("Sorry for the wait."))
    assert sweep(stack)["requeued"] == 1
    wait_status(queued.session_id, SessionStatus.DONE)


def test_the_admin_cli_lists_open_questions_and_runs_the_sweep(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    import subprocess
    import sys

    thread = paused_with_question(script, fake_slack, f"C{uid}", "which cloud?")
    run = [sys.executable, "-m", "ops.admin", "--stack-file", str(stack.stack_file)]
    listed = subprocess.run([*run, "list"], capture_output=True, text=True, timeout=60, check=True, cwd=local.ROOT)
    assert "which cloud?" in listed.stdout
    # The paused session waits for an operator: listed as waiting, not as stuck.
    waiting, stuck = listed.stdout.split("STUCK SESSIONS")
    assert f"waiting for an operator's answer  [{thread.session_id}]" in waiting
    assert thread.session_id not in stuck
    later = (firestore.now() + timedelta(hours=25)).isoformat()
    swept = subprocess.run([*run, "sweep", "--now", later], capture_output=True, text=True, timeout=60, check=True,
                           cwd=local.ROOT)  # fmt: skip
    assert "reminded the operators of 1 open question" in swept.stdout  # sentences, not a JSON of counters
    assert "{" not in swept.stdout
    nope = subprocess.run([*run, "stop", f"nope-{uid}"], capture_output=True, text=True, timeout=60, check=False,
                          cwd=local.ROOT)  # fmt: skip
    assert nope.returncode == 1
    assert f"There is no session nope-{uid}" in nope.stderr


def test_a_reminder_is_marked_sent_only_once_its_post_succeeded(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the sweep marked the reminder sent before posting it, so a failed post was never retried."""
    thread = paused_with_question(script, fake_slack, f"C{uid}", "deploy on friday?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 25)
    fake_slack.fail("chat.postMessage", times=1, error="fatal_error")
    failed = sweep(stack)
    assert (failed["reminded"], failed["errors"]) == (0, 1)
    assert stored.get_question(question.question_id).reminded_at is None  # type: ignore[union-attr]
    again = sweep(stack)
    assert again["reminded"] == 1
    assert stored.get_question(question.question_id).reminded_at is not None  # type: ignore[union-attr]


def test_two_sweeps_at_once_remind_a_question_once(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Cloud Scheduler may run the sweep twice at once: both read the question not reminded yet (it is marked only
    once its post succeeded), and each posted the reminder. It is now claimed first: one of the two posts it."""
    thread = paused_with_question(script, fake_slack, f"C{uid}", "deploy on friday?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 25)
    fake_slack.slow("chat.postMessage", 3, match=":alarm_clock:")  # real Slack latency: the first answered late
    summaries = two_sweeps_at_once(stack)
    assert sorted(s["reminded"] for s in summaries) == [0, 1]
    replies = fake_slack.bot_replies(thread.channel, thread.ts)
    assert len([m for m in replies if m["text"].startswith(":alarm_clock:")]) == 1


def test_a_sweep_that_reaches_a_question_after_anothers_reminder_and_its_hold_does_not_remind_again(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """A sweep reads its page of stale questions, then reaches one long after another sweep reminded it (a large
    backlog): the reminder's claim is older than its hold, and the page says it was never reminded. The claim is
    marked acted on once the reminder is posted, so it is never taken again."""
    thread = paused_with_question(script, fake_slack, f"C{uid}", "deploy on monday?")
    age_question(thread_question := open_question(thread.session_id).question_id, 25)
    paged = stored.get_question(thread_question)  # as the late sweep's page holds it: not reminded
    assert paged is not None
    assert paged.reminded_at is None
    assert sweep(stack)["reminded"] == 1
    claim = firestore.event_ref(f"{thread_question}:reminder")
    claim.update({"received_at": firestore.now() - lifecycle.REMIND_HOLD - timedelta(minutes=1)})
    assert lifecycle.Ask(paged).remind(firestore.now()) is False
    replies = fake_slack.bot_replies(thread.channel, thread.ts)
    assert len([m for m in replies if m["text"].startswith(":alarm_clock:")]) == 1


def test_a_reminder_posted_whose_mark_failed_is_not_posted_again(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a reminder posted, then its mark failed (Firestore refused the write), gave its claim up as a failed
    post does: the next sweep posted it again. A posted reminder is never posted again."""
    thread = paused_with_question(script, fake_slack, f"C{uid}", "deploy on wednesday?")
    age_question(question_id := open_question(thread.session_id).question_id, 25)
    paged = stored.get_question(question_id)
    assert paged is not None

    def refused(*_: Any) -> bool:
        raise RuntimeError("firestore refused the write")

    with monkeypatch.context() as patched:
        patched.setattr(stored, "remind_once", refused)
        with pytest.raises(RuntimeError):
            lifecycle.Ask(paged).remind(firestore.now())
    assert lifecycle.Ask(paged).remind(firestore.now()) is False  # the next sweep
    replies = fake_slack.bot_replies(thread.channel, thread.ts)
    assert len([m for m in replies if m["text"].startswith(":alarm_clock:")]) == 1


def test_a_question_answered_after_the_sweeps_page_read_it_is_not_reminded(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the reminder went by the sweep's page, read before the operator answered (a large backlog, or a
    reply racing the sweep): the answered question was reminded, the thread told it still waited for an answer. It
    is read again once claimed."""
    thread = paused_with_question(script, fake_slack, f"C{uid}", "deploy on tuesday?")
    age_question(question_id := open_question(thread.session_id).question_id, 25)
    paged = stored.get_question(question_id)  # as the sweep's page holds it: open, not reminded
    assert paged is not None
    assert paged.status == QuestionStatus.OPEN
    script(G.text("Deploying on tuesday."))
    fake_slack.user_message(OPERATOR, thread.channel, "yes", thread_ts=thread.ts)
    wait_for(lambda: (q := stored.get_question(question_id)) and q.status == QuestionStatus.ANSWERED,
             what="the answer")  # fmt: skip
    assert lifecycle.Ask(paged).remind(firestore.now()) is False
    replies = fake_slack.bot_replies(thread.channel, thread.ts)
    assert not [m for m in replies if m["text"].startswith(":alarm_clock:")]


def test_a_sweep_given_its_clock_in_another_zone_sums_up_the_last_utc_day(
    stack: Stack, empty_db: None, uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect: the sweep named the day it sums up (and its tasks) in the zone its clock was given in, while feedback
    is stored by its UTC day: a clock in another zone summed up the wrong day."""
    at = firestore.now().astimezone(UTC)
    yesterday = at - timedelta(days=1)
    given = feedback.Feedback(f"s-{uid}", OPERATOR, "positive", f"C{uid}", "1.0", at=yesterday, updated_at=yesterday,
                              day=f"{yesterday:%Y-%m-%d}")  # fmt: skip
    firestore.db().collection(firestore.FEEDBACK).document(f"s-{uid}-{OPERATOR}").create(given.to_doc())
    zone = timezone(timedelta(hours=-12 if at.hour < 12 else 12))  # a zone whose date differs from UTC's now
    assert f"{at.astimezone(zone):%Y-%m-%d}" != f"{at:%Y-%m-%d}"
    with caplog.at_level(logging.INFO, logger="shared.usecases.sweep"):
        sweeping.run(at.astimezone(zone))
    [summed] = [r.feedback for r in caplog.records if hasattr(r, "feedback")]
    assert (summed["day"], summed["positive"]) == (f"{yesterday:%Y-%m-%d}", 1)


def parent_paused_on_a_dead_child(fake_slack: FakeSlack, uid: str, *, legacy: bool = False) -> tuple[Session, str]:
    """A top-level session paused on its one blocking child, whose worker died for good hours ago (its lease long
    expired): the parent and the child's id. ``legacy``: the parent stored as paused before every pause was a
    waiting record (``child_ids``), read as its record."""
    channel = f"C{uid}"
    root = fake_slack.user_message(OPERATOR, channel, f"check the disks [{channel}]")["ts"]  # no mention: no session
    long_ago = firestore.now() - timedelta(hours=5)
    parent_id, task = f"parent-{uid}", "check the disks of db-1"
    child_id = ids.child_id(parent_id, 1, 0)
    delegate = types.FunctionCall(id="d0", name="delegate", args={"task": task})
    opening = types.Content(role="user", parts=[types.Part(text=f"check the disks [{channel}]")])
    turn = types.Content(role="model", parts=[types.Part(function_call=delegate)])
    for seq, kind, content in [(0, StepKind.PROMPT, opening), (1, StepKind.MODEL, turn),
                               (2, StepKind.TOOL_RESULTS, None)]:  # fmt: skip
        step = Step(seq=seq, session_id=parent_id, kind=kind, content=to_json(content) if content else None, audit=[],
                    at=long_ago)  # fmt: skip
        firestore.step_ref(parent_id, seq).create(step.to_doc())
    parent = Session.new(
        session_id=parent_id, kind=SessionKind.MENTION, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=f"check the disks [{channel}]", created_at=long_ago, status=SessionStatus.PAUSED,
        transcript_writer=parent_id, next_seq=3, turns=1, tool_calls=1, tree_status_ts=tree_message(channel, root),
    )  # fmt: skip
    child = Session.new(
        session_id=child_id, kind=SessionKind.CHILD, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=task, created_at=long_ago, status=SessionStatus.RUNNING, worker="gone",
        lease_until=long_ago + timedelta(minutes=4), transcript_writer=child_id, parent_session_id=parent_id,
        parent_transcript=parent_id, depth=1, delegate_seq=1, delegate_index=0, sibling_ids=[child_id],
        root_session_id=parent_id,
    )  # fmt: skip
    if legacy:
        firestore.session_ref(parent_id).create({**parent.to_doc(), "child_ids": [child_id]})
    else:
        parent.waiting = [Waiting(1, 0, WaitKind.CHILD, child_id)]
        firestore.session_ref(parent_id).create(parent.to_doc())
    firestore.session_ref(child_id).create(child.to_doc())
    return parent, child_id


def test_a_child_whose_worker_died_for_good_fails_and_its_parent_resumes(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A child never posts, so there is nothing to narrate: the sweep fails it, and its parent, paused on it, hears
    that as the delegate call's error and goes on (it would otherwise wait for ever)."""
    parent, child_id = parent_paused_on_a_dead_child(fake_slack, uid, legacy=True)
    parent_id, channel = parent.session_id, parent.origin.channel
    fake_gemini.script(FakeGemini.matching(f"[{channel}]", G.text("The disk check could not finish; I will retry.")))

    summary = sweep(stack)
    assert summary["children_failed"] == 1
    wait_status(ids.resume_id(parent_id, 1), SessionStatus.DONE, timeout=30)  # the continuation of its paused turn
    failed = sessions.get_session(child_id)
    assert failed is not None
    assert failed.status == SessionStatus.FAILED
    [response] = [r["response"] for r in function_responses(fake_gemini.requests()[-1])]
    assert "did not finish (failed)" in response["error"]
    assert "worker died" in response["error"]
    shows_ended(fake_slack, channel, parent.tree.status_ts or "", ":x: failed")
    assert sweep(stack)["children_failed"] == 0


def test_a_child_whose_worker_died_for_good_stops_what_it_delegated(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A child the sweep fails (its worker died for good) ends as a child that fails in its run does: what it
    delegated is stopped. Its non-blocking grandchild ran on, spending the tree's budget on work whose result goes
    nowhere (a child that ended has reported), and kept the tree's status message showing a task working."""
    parent, child_id = parent_paused_on_a_dead_child(fake_slack, uid)
    channel, child = parent.origin.channel, sessions.get_session(child_id)
    assert child is not None
    fake_gemini.script(FakeGemini.matching(f"[{channel}]", G.text("The disk check could not finish; I will retry.")))
    grandchild = Session.new(
        session_id=ids.child_id(child_id, 1, 0), kind=SessionKind.CHILD, channel=channel,
        thread_ts=child.origin.thread_ts, trigger_ts=child.origin.trigger_ts, trigger_user=OPERATOR,
        text="list the disks", created_at=firestore.now(), status=SessionStatus.RUNNING, worker="alive",
        lease_until=firestore.now() + timedelta(minutes=5), transcript_writer=ids.child_id(child_id, 1, 0),
        parent_session_id=child_id, parent_transcript=child_id, depth=2, delegate_seq=1, delegate_index=0,
        delegate_blocking=False, root_session_id=parent.session_id,
    )  # fmt: skip
    firestore.session_ref(grandchild.session_id).create(grandchild.to_doc())

    assert sweep(stack)["children_failed"] == 1
    stopped = sessions.get_session(grandchild.session_id)
    assert stopped is not None
    assert stopped.stop_requested  # it ends at its next step, its result going nowhere


def tree_message(channel: str, root: str) -> str:
    """A tree's status message in the thread, as its root posts it when it first delegates; returns its ts."""
    return slack.post(channel, root, ":busts_in_silhouette: *Delegated tasks*", key=f"{channel}:{root}:tree")


def shows_ended(fake_slack: FakeSlack, channel: str, ts: str, state: str) -> None:
    """The tree's status message shows its one child ended, in ``state``: not working for ever."""
    shown = wait_for(lambda: next((m["text"] for m in fake_slack.messages(channel) if m["ts"] == ts
                                   and "(1 of 1 finished)" in m["text"]), None), timeout=30,
                     what="the tree's status message to show the child ended")  # fmt: skip
    assert state in shown


def asking_child(uid: str, parent: Session, asked_at: datetime) -> Session:
    """A child paused on its blocking question to ``parent`` since ``asked_at`` (its allotment reserved)."""
    child_id = ids.child_id(parent.session_id, 1, 0)
    question = ParentQuestion(question_id=f"pq-{child_id}-1-0", text="Which region?", blocking=True, seq=1, index=0,
                              asked_at=asked_at)  # fmt: skip
    child = Session.new(
        session_id=child_id, kind=SessionKind.CHILD, channel=parent.origin.channel, thread_ts=parent.origin.thread_ts,
        trigger_ts=parent.origin.trigger_ts, trigger_user=OPERATOR, text="rotate the keys", created_at=asked_at,
        status=SessionStatus.PAUSED, transcript_writer=child_id, parent_session_id=parent.session_id,
        parent_transcript=parent.session_id, depth=1, delegate_seq=1, delegate_index=0, delegate_blocking=False,
        root_session_id=parent.session_id, max_turns=4, max_tool_calls=6, turns=1, tool_calls=1,
        parent_question=question, updated_at=asked_at,
    )  # fmt: skip
    firestore.session_ref(child_id).create(child.to_doc())
    return child


def paused_parent(fake_slack: FakeSlack, uid: str, asked_at: datetime) -> Session:
    """A parent in its own thread, paused on a question of its own asked 3 hours after ``asked_at`` (so it is not
    given up on before its child: a top-level session paused with nothing open would be resumed or ended)."""
    channel = f"C{uid}"
    root = fake_slack.user_message(OPERATOR, channel, f"rotate the keys [{channel}]")["ts"]
    parent = Session.new(
        session_id=f"parent-{uid}", kind=SessionKind.MENTION, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=f"rotate the keys [{channel}]", created_at=asked_at, status=SessionStatus.PAUSED,
        transcript_writer=f"parent-{uid}", next_seq=3, tree_reserved={"turns": 4, "tool_calls": 6},
        tree_status_ts=tree_message(channel, root),
    )  # fmt: skip
    own = ids.question_id(parent.session_id, 2, 0)
    parent.waiting = [Waiting(2, 0, WaitKind.QUESTION, own)]
    later = asked_at + timedelta(hours=3)
    stored.create_question(Question(question_id=own, **asked_by(parent), text="Go on?", options=[], blocking=True,
                                    call_id=None, asked_at=later, seq=2, call_index=0))  # fmt: skip
    firestore.session_ref(parent.session_id).create(parent.to_doc())
    return parent


def test_a_child_waiting_on_its_parents_answer_is_reminded_then_ended_by_the_sweep(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Issue 23: nothing waits for ever. A child paused on its blocking ask_parent ages as a question does: at
    QUESTION_REMIND_HOURS its parent's conversation is asked again, once; QUESTION_ABANDON_HOURS later the child is
    ended (abandoned), its allotment given back, and the parent's conversation, where it asked, hears why."""
    channel = f"C{uid}"
    asked_at = firestore.now()
    parent = paused_parent(fake_slack, uid, asked_at)
    child = asking_child(uid, parent, asked_at)
    settings = {"remind": config.settings().question_remind_hours, "abandon": config.settings().question_abandon_hours}

    early = sweep(stack, asked_at + timedelta(hours=settings["remind"] - 1))
    assert (early["parents_reminded"], early["children_abandoned"]) == (0, 0)

    reminded = sweep(stack, asked_at + timedelta(hours=settings["remind"] + 1))
    assert (reminded["parents_reminded"], reminded["children_abandoned"]) == (1, 0)
    waiting = sessions.get_session(parent.session_id)
    assert waiting is not None
    assert [n.ts for n in waiting.notes] == [f"{child.parent_question.question_id}:reminder"]  # type: ignore[union-attr]
    assert "Which region?" in waiting.notes[0].text
    again = sweep(stack, asked_at + timedelta(hours=settings["remind"] + 2))
    assert again["parents_reminded"] == 0  # once
    still = sessions.get_session(child.session_id)
    assert still is not None
    assert still.status == SessionStatus.PAUSED
    assert still.parent_question is not None
    assert still.parent_question.reminded_at is not None

    bound = settings["remind"] + settings["abandon"]
    ended = sweep(stack, asked_at + timedelta(hours=bound + 1))
    assert ended["children_abandoned"] == 1
    gone = sessions.get_session(child.session_id)
    assert gone is not None
    assert gone.status == SessionStatus.ABANDONED
    assert f"went unanswered for {bound + 1} hours" in (gone.result or "")
    told = sessions.get_session(parent.session_id)
    assert told is not None
    # Its result is its record under the transcript it reports to (issue 28.4), read at that transcript's next step.
    record = results.result_ref(parent.session_id, child.session_id).get().to_dict() or {}
    result = Note.from_doc(record["note"])
    assert (result.kind, result.question_id) == (NoteKind.CHILD_RESULT, child.session_id)
    assert "went unanswered" in result.text
    assert "Which region?" in result.text
    # What the child did not use is given back (beside the root's allotments, in the tree's view: issue 28.4).
    assert tree_view.allotted(parent.session_id) == {"turns": 1, "tool_calls": 1}
    shows_ended(fake_slack, channel, parent.tree.status_ts or "", "abandoned")  # not ":gear: working" for ever
    assert sweep(stack, asked_at + timedelta(hours=bound + 2))["children_abandoned"] == 0


def test_a_child_the_sweep_abandons_on_its_unanswered_question_stops_what_it_delegated(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """A child ended on its question to its parent stops its non-blocking children too (its waiting record names
    only the blocking ones): their results would go nowhere, a child reports once."""
    asked_at = firestore.now()
    parent = paused_parent(fake_slack, uid, asked_at)
    child = asking_child(uid, parent, asked_at)
    grandchild_id = ids.child_id(child.session_id, 1, 0)
    grandchild = Session.new(
        session_id=grandchild_id, kind=SessionKind.CHILD, channel=parent.origin.channel,
        thread_ts=parent.origin.thread_ts, trigger_ts=parent.origin.trigger_ts, trigger_user=OPERATOR,
        text="list the keys", created_at=asked_at, status=SessionStatus.QUEUED, transcript_writer=grandchild_id,
        parent_session_id=child.session_id, parent_transcript=child.session_id, depth=2, delegate_seq=1,
        delegate_index=0, delegate_blocking=False, root_session_id=parent.session_id,
    )  # fmt: skip
    firestore.session_ref(grandchild_id).create(grandchild.to_doc())
    bound = config.settings().question_remind_hours + config.settings().question_abandon_hours

    assert sweep(stack, asked_at + timedelta(hours=bound + 1))["children_abandoned"] == 1
    stopped = sessions.get_session(grandchild_id)
    assert stopped is not None
    assert stopped.stop_requested


def test_a_childs_second_question_waits_its_own_time_once_the_first_is_answered(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the sweep aged a paused child's wait from its oldest open blocking question and reminded only that one,
    so once the parent answered the first of two questions asked together (reminded, long ago), the second, as old,
    was abandoned at the next sweep, never reminded. Now a question still open ages from the latest answer too: it
    is reminded, then abandoned, each on its own bound."""
    settings = {"remind": config.settings().question_remind_hours, "abandon": config.settings().question_abandon_hours}
    bound = settings["remind"] + settings["abandon"]
    now = firestore.now()
    asked_at = now - timedelta(hours=bound + 1)
    parent = paused_parent(fake_slack, uid, now)
    child = asking_child(uid, parent, asked_at)
    first = child.parent_question
    assert first is not None
    second = ParentQuestion(f"pq-{child.session_id}-1-1", "How many replicas?", True, 1, 1, asked_at=asked_at)
    both = [ParentQuestion(**{**first.to_doc(), "reminded_at": asked_at + timedelta(hours=1)}), second]
    firestore.session_ref(child.session_id).update({
        "parent_questions": [q.to_doc() for q in both],
        "waiting": [Waiting(1, i, WaitKind.PARENT_ANSWER, q.question_id).to_doc() for i, q in enumerate(both)],
    })  # fmt: skip
    answered = delegation.answer_child(parent, child_id=child.session_id, answer="eu", question_id=first.question_id)
    assert answered["still_waiting"] == [{"question_id": second.question_id, "question": "How many replicas?"}]

    assert sweep(stack, now)["children_abandoned"] == 0
    reminded = sweep(stack, now + timedelta(hours=settings["remind"] + 1))
    assert (reminded["parents_reminded"], reminded["children_abandoned"]) == (1, 0)
    told = sessions.get_session(parent.session_id)
    assert told is not None
    assert [n.ts for n in told.notes] == [f"{second.question_id}:reminder"]
    ended = sweep(stack, now + timedelta(hours=bound + 1))
    assert ended["children_abandoned"] == 1


# --- the safety net: a paused session with nothing open left to age --------------------------------------------


def dies_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
    """``owner.name`` raises once, as a process killed right there would stop, then is itself again."""
    real = getattr(owner, name)

    def dying(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(owner, name, real)
        raise RuntimeError(f"died in {name}")

    monkeypatch.setattr(owner, name, dying)


def racing_sweeps(count: int) -> list[dict[str, Any]]:
    """``count`` sweeps run now in this process at the same moment (threads behind a barrier); their summaries."""
    from shared.usecases import sweep as daily

    start = threading.Barrier(count)
    summaries: list[dict[str, Any]] = []

    def one_sweep() -> None:
        start.wait()
        summaries.append(daily.run())

    racing = [threading.Thread(target=one_sweep) for _ in range(count)]
    for each in racing:
        each.start()
    for each in racing:
        each.join(timeout=120)
    assert len(summaries) == count
    return summaries


def after_remind_hours() -> datetime:
    """A sweep's time at which a session paused now is stale (not updated for QUESTION_REMIND_HOURS)."""
    return firestore.now() + timedelta(hours=config.settings().question_remind_hours + 1)


def test_a_document_the_sweep_cannot_read_does_not_stop_it(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: one stale document that could not be read (malformed, or written by something else) raised out of
    the sweep's query: the whole sweep stopped there, every day, and nothing after it was ever reminded, abandoned
    or narrated. It is logged and passed over."""
    old = firestore.now() - timedelta(hours=30)
    firestore.db().collection(firestore.QUESTIONS).document(f"broken-{uid}").create({"status": "open", "asked_at": old})
    firestore.db().collection(firestore.SESSIONS).document(f"broken-{uid}").create(
        {"status": SessionStatus.SILENT_EXIT.value, "followed_up": False, "updated_at": old, "kind": "nonsense"}
    )
    thread = paused_with_question(script, fake_slack, f"C{uid}", "deploy on thursday?")
    age_question(open_question(thread.session_id).question_id, 25)
    dead = dead_session(uid, kind=SessionKind.RETRY, audit=WORK)

    summary = sweep(stack)
    assert (summary["reminded"], summary["escalated"]) == (1, 1)
    assert sessions.get_session(dead.session_id).status == SessionStatus.SILENT_EXIT  # type: ignore[union-attr]


def test_a_question_whose_abandon_notice_slack_refuses_still_ends_its_session(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the sweep's abandon closed the question, told the thread, and only then ended the session paused on
    it. A notice Slack refused (the bot removed from the channel, Slack down) left the session paused for ever on a
    question no longer open, which no later sweep looked at. The session now ends before any call to Slack."""
    thread = paused_with_question(script, fake_slack, f"C{uid}", "restart the cache?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 73)
    fake_slack.fail("chat.postMessage", times=1, error="not_in_channel")
    failed = sweep(stack)
    assert failed["errors"] == 1
    assert stored.get_question(question.question_id).status == QuestionStatus.ABANDONED  # type: ignore[union-attr]
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]


def test_a_non_blocking_question_abandoned_while_its_thread_waits_on_another_does_not_say_start_again(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a non-blocking question left open while the conversation went on (its session resumed in a
    continuation, now paused on a question of its own) was abandoned with "To start again, mention me in this
    thread": the thread still waited, and a mention there answers the open question."""
    script(
        G.call("ask_operator", question="Prefer tabs?", blocking=False),
        G.call("ask_operator", question="Deploy now?", options=["yes", "no"]),
    )
    thread = mention(fake_slack, f"C{uid}", "format and deploy")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    [deploy, tabs] = stored.thread_questions(thread.channel, thread.ts).open  # newest first
    assert (tabs.blocking, deploy.blocking) == (False, True)
    script(G.call("ask_operator", question="Which region?", options=["eu", "us"]))
    fake_slack.user_message(OPERATOR, thread.channel, "yes", thread_ts=thread.ts)
    resumed = wait_for(lambda: (q := stored.get_question(deploy.question_id)) and q.continuation_id,
                       what="the answer")  # fmt: skip
    wait_status(str(resumed), SessionStatus.PAUSED)
    age_question(tabs.question_id, 73)

    assert sweep(stack)["abandoned"] == 1
    assert stored.get_question(tabs.question_id).status == QuestionStatus.ABANDONED  # type: ignore[union-attr]
    replies = fake_slack.bot_replies(thread.channel, thread.ts)
    assert not [m for m in replies if "mention me in this thread" in m["text"]]
    post = next(m for m in replies if m["ts"] == tabs.post_ts)
    assert "Abandoned" in post["text"]


def test_an_abandon_killed_between_its_question_and_its_session_is_finished_by_the_next_sweep(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a sweep that died between closing an unanswered question (abandoned) and ending the session paused
    on it left that session paused for ever: no later sweep read it again (it ages open questions and pending
    approvals, never a session paused on neither), and its thread never heard. The next sweep past
    QUESTION_REMIND_HOURS now finds it paused with nothing open, ends it and tells its thread, once."""
    from shared.usecases import sweep as daily

    thread = paused_with_question(script, fake_slack, f"C{uid}", "rotate the keys?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 73)
    dies_once(monkeypatch, sessions, "end_session")
    assert daily.run()["errors"] == 1  # in this process: the failure is injected here
    assert stored.get_question(question.question_id).status == QuestionStatus.ABANDONED  # type: ignore[union-attr]
    assert sessions.get_session(thread.session_id).status == SessionStatus.PAUSED  # type: ignore[union-attr]

    later = after_remind_hours()
    swept = sweep(stack, later)
    assert swept.get("unwaited_ended") == 1
    ended = sessions.get_session(thread.session_id)
    assert ended is not None
    assert ended.status == SessionStatus.ABANDONED
    assert sessions.get_session(ids.resume_id(thread.session_id, 1)) is None  # ended, never resumed
    told = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "stopped waiting" in m["text"]]
    assert len(told) == 1
    assert "mention me in this thread" in told[0]["text"]
    assert told[0]["text"].startswith("Nobody answered this question for")  # the abandon's own notice
    posts = len(fake_slack.calls("chat.postMessage"))
    again = sweep(stack, later + timedelta(minutes=1))
    assert (again["unwaited_ended"], again["unwaited_resumed"], again["errors"]) == (0, 0, 0)
    assert len(fake_slack.calls("chat.postMessage")) == posts


def test_a_parent_left_paused_on_its_ended_child_is_resumed_once_by_racing_sweeps(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Defect: the sweep fails a child whose worker died for good, then wakes its parent. A sweep that died between
    the two left the parent paused for ever on a child that had ended: nothing reads a failed child again, and the
    sweep never looked at a top-level session paused with nothing open. Now the next sweep past
    QUESTION_REMIND_HOURS resumes it, as the child's end would have: once, with two sweeps racing. A paused
    session whose question is still open is left alone."""
    from shared.usecases import sweep as daily

    # Both paused for longer than QUESTION_REMIND_HOURS (the sweeps run now: a sweep run at a later time would take
    # the continuation's fresh lease for one that expired long ago).
    paused_since = {"updated_at": firestore.now() - timedelta(hours=config.settings().question_remind_hours + 1)}
    asking = paused_with_question(script, fake_slack, f"C{uid}q", "which region?")
    firestore.session_ref(asking.session_id).update(paused_since)
    parent, child_id = parent_paused_on_a_dead_child(fake_slack, uid)
    firestore.session_ref(parent.session_id).update(paused_since)
    channel = parent.origin.channel
    dies_once(monkeypatch, delegation, "resume_parent")
    monkeypatch.setattr(daily, "_finished_by_its_delivery", nullcontext)  # killed there: it queues nothing either
    assert daily.run()["errors"] == 1  # the child failed; its parent not woken (the failure is injected here)
    assert sessions.get_session(child_id).status == SessionStatus.FAILED  # type: ignore[union-attr]
    assert sessions.get_session(parent.session_id).status == SessionStatus.PAUSED  # type: ignore[union-attr]
    fake_gemini.script(FakeGemini.matching(f"[{channel}]", G.text("The disk check could not finish; I will retry.")))

    summaries = racing_sweeps(2)
    assert sum(s.get("unwaited_resumed", 0) for s in summaries) == 1
    assert sum(s.get("unwaited_ended", 0) + s["errors"] for s in summaries) == 0
    resumed = wait_status(ids.resume_id(parent.session_id, 1), SessionStatus.DONE, timeout=30)
    assert sessions.get_session(parent.session_id).status == SessionStatus.RESUMED  # type: ignore[union-attr]
    asked = [r for r in fake_gemini.requests() if f"[{channel}]" in texts(r)]
    assert len(asked) == 1  # the continuation ran once
    [response] = [r["response"] for r in function_responses(asked[0])]
    assert "did not finish (failed)" in response["error"]
    told = [m for m in fake_slack.bot_replies(channel, parent.origin.thread_ts) if "disk check" in m["text"]]
    assert len(told) == 1  # its one final answer
    assert resumed.kind == SessionKind.CONTINUATION

    still = sessions.get_session(asking.session_id)
    assert still is not None
    assert still.status == SessionStatus.PAUSED  # its question is open: untouched
    assert sessions.get_session(ids.resume_id(asking.session_id, 1)) is None
    assert open_question(asking.session_id).status == QuestionStatus.OPEN

    again = sweep(stack)
    assert (again["unwaited_resumed"], again["unwaited_ended"]) == (0, 0)


def delegated(session_id: str, opening: str, task: str, at: datetime) -> None:
    """The transcript of a session paused on the one blocking child its first model turn delegated ``task`` to: its
    opening, the ``delegate`` call, and its pause step (its next step is 3)."""
    delegate = types.FunctionCall(id="d0", name="delegate", args={"task": task})
    contents = [types.Content(role="user", parts=[types.Part(text=opening)]),
                types.Content(role="model", parts=[types.Part(function_call=delegate)]), None]  # fmt: skip
    for seq, (kind, content) in enumerate(zip([StepKind.PROMPT, StepKind.MODEL, StepKind.TOOL_RESULTS], contents,
                                              strict=True)):  # fmt: skip
        step = Step(seq=seq, session_id=session_id, kind=kind, content=to_json(content) if content else None, audit=[],
                    at=at)  # fmt: skip
        firestore.step_ref(session_id, seq).create(step.to_doc())


def child_paused_on_a_grandchild(
    fake_slack: FakeSlack, uid: str, *, record: bool = True, grandchild: SessionStatus = SessionStatus.RUNNING
) -> tuple[Session, str, str]:
    """A tree of three: a top-level session paused on its one blocking child, itself paused (for longer than
    QUESTION_REMIND_HOURS, on nothing but its own blocking child: ``record``) on a grandchild whose worker died for
    good hours ago. Returns the top-level session and the ids of the child and the grandchild."""
    channel = f"C{uid}"
    root = fake_slack.user_message(OPERATOR, channel, f"audit the fleet [{channel}]")["ts"]  # no mention: no session
    long_ago = firestore.now() - timedelta(hours=5)
    paused_since = firestore.now() - timedelta(hours=config.settings().question_remind_hours + 1)
    parent_id = f"parent-{uid}"
    child_id = ids.child_id(parent_id, 1, 0)
    grandchild_id = ids.child_id(child_id, 1, 0)
    task, subtask = "audit the disks of the fleet", f"check the disks of db-1 (grandchild-{uid})"
    delegated(parent_id, f"audit the fleet [{channel}]", task, long_ago)
    delegated(child_id, task, subtask, long_ago)
    parent = Session.new(
        session_id=parent_id, kind=SessionKind.MENTION, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=f"audit the fleet [{channel}]", created_at=long_ago, status=SessionStatus.PAUSED,
        transcript_writer=parent_id, next_seq=3, turns=1, tool_calls=1, tree_status_ts=tree_message(channel, root),
        tree_reserved={"turns": 8, "tool_calls": 12},
    )  # fmt: skip
    parent.waiting = [Waiting(1, 0, WaitKind.CHILD, child_id)]
    child = Session.new(
        session_id=child_id, kind=SessionKind.CHILD, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=task, created_at=long_ago, status=SessionStatus.PAUSED, transcript_writer=child_id,
        parent_session_id=parent_id, parent_transcript=parent_id, depth=1, delegate_seq=1, delegate_index=0,
        sibling_ids=[child_id], root_session_id=parent_id, max_turns=4, max_tool_calls=6, turns=1, tool_calls=1,
        next_seq=3, updated_at=paused_since,
    )  # fmt: skip
    if record:
        child.waiting = [Waiting(1, 0, WaitKind.CHILD, grandchild_id)]
    dead = Session.new(
        session_id=grandchild_id, kind=SessionKind.CHILD, channel=channel, thread_ts=root, trigger_ts=root,
        trigger_user=OPERATOR, text=subtask, created_at=long_ago, status=grandchild, worker="gone",
        lease_until=long_ago + timedelta(minutes=4), transcript_writer=grandchild_id, parent_session_id=child_id,
        parent_transcript=child_id, depth=2, delegate_seq=1, delegate_index=0, sibling_ids=[grandchild_id],
        root_session_id=parent_id, max_turns=2, max_tool_calls=3,
    )  # fmt: skip
    for each in (parent, child, dead):
        firestore.session_ref(each.session_id).create(each.to_doc())
    return parent, child_id, grandchild_id


def test_a_child_left_paused_on_its_ended_grandchild_is_woken_once_by_racing_sweeps(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Defect: the sweep's net looked at top-level sessions only. A delegated child paused on its own child, whose
    end was stored by a path that died before waking it (here the sweep failing the grandchild whose worker died),
    stayed paused for ever, and its parent, paused on it, waited for ever too. Now the next sweep past
    QUESTION_REMIND_HOURS wakes the child as the grandchild's end would have (queued again under its own id): once,
    with two sweeps racing; it runs on, and its parent gets its result."""
    from shared.usecases import sweep as daily

    parent, child_id, grandchild_id = child_paused_on_a_grandchild(fake_slack, uid)
    channel = parent.origin.channel
    dies_once(monkeypatch, delegation, "resume_parent")
    monkeypatch.setattr(daily, "_finished_by_its_delivery", nullcontext)  # killed there: it queues nothing either
    first = daily.run()  # the grandchild failed; the child not woken (the failure is injected here)
    assert (first["errors"], first["unwaited_resumed"], first["unwaited_ended"]) == (1, 0, 0)
    assert sessions.get_session(grandchild_id).status == SessionStatus.FAILED  # type: ignore[union-attr]
    assert sessions.get_session(child_id).status == SessionStatus.PAUSED  # type: ignore[union-attr]
    fake_gemini.script(
        FakeGemini.matching(f"grandchild-{uid}", G.text("db-1 could not be checked: its checker died.")),
        FakeGemini.matching(f"[{channel}]", G.text("The fleet audit is done except db-1, whose check died.")),
    )

    summaries = racing_sweeps(2)
    assert sum(s["unwaited_resumed"] for s in summaries) == 1
    assert sum(s["unwaited_ended"] + s["errors"] + s["children_failed"] for s in summaries) == 0

    done = wait_status(child_id, SessionStatus.DONE, timeout=30)
    assert done.result == "db-1 could not be checked: its checker died."
    resumed = wait_status(ids.resume_id(parent.session_id, 1), SessionStatus.DONE, timeout=30)
    assert resumed.kind == SessionKind.CONTINUATION
    by_child = [r for r in fake_gemini.requests() if f"grandchild-{uid}" in json.dumps(r) and f"[{channel}]" not in
                texts(r)]  # fmt: skip
    assert len(by_child) == 1  # the child ran on once
    [failed] = [r["response"] for r in function_responses(by_child[0])]
    assert "did not finish (failed)" in failed["error"]
    by_parent = [r for r in fake_gemini.requests() if f"[{channel}]" in texts(r)]
    assert len(by_parent) == 1
    [result] = [r["response"] for r in function_responses(by_parent[0])]
    assert "db-1 could not be checked" in json.dumps(result)  # the parent got its child's result
    told = [m["text"] for m in fake_slack.bot_replies(channel, parent.origin.thread_ts) if "fleet audit" in m["text"]]
    assert len(told) == 1  # its one final answer; the child posted nothing

    again = daily.run()
    assert (again["unwaited_resumed"], again["unwaited_ended"], again["errors"]) == (0, 0, 0)


def test_a_child_left_paused_with_nothing_to_resume_fails_and_its_parent_hears(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, fake_gemini: FakeGemini, uid: str
) -> None:
    """A child paused with no waiting record (nothing to resume it from) and not asking its parent: the sweep fails
    it as a child whose worker died, once; its parent hears why as the delegate call's error and goes on, and the
    child itself posts nothing in the thread."""
    parent, child_id, _ = child_paused_on_a_grandchild(fake_slack, uid, record=False, grandchild=SessionStatus.DONE)
    channel = parent.origin.channel
    fake_gemini.script(FakeGemini.matching(f"[{channel}]", G.text("The fleet audit could not finish.")))

    summary = sweep(stack)
    assert (summary["unwaited_ended"], summary["unwaited_resumed"], summary["errors"]) == (1, 0, 0)
    failed = sessions.get_session(child_id)
    assert failed is not None
    assert failed.status == SessionStatus.FAILED
    assert "stopped waiting" in (failed.error or "")
    wait_status(ids.resume_id(parent.session_id, 1), SessionStatus.DONE, timeout=30)
    [response] = [r["response"] for r in function_responses(fake_gemini.requests()[-1])]
    assert "did not finish (failed)" in response["error"]
    assert "stopped waiting" in response["error"]
    replies = [m["text"] for m in fake_slack.bot_replies(channel, parent.origin.thread_ts)]
    assert not [text for text in replies if "stopped waiting" in text]  # a child never posts
    tree = parent.tree.status_ts
    wait_for(lambda: next((m["text"] for m in fake_slack.messages(channel) if m["ts"] == tree
                           and ":x: failed" in m["text"]), None), timeout=30,
             what="the tree's status message to show the child failed")  # fmt: skip
    again = sweep(stack)
    assert (again["unwaited_ended"], again["unwaited_resumed"], again["errors"]) == (0, 0, 0)


def test_an_abandon_whose_turns_other_waits_fail_to_end_still_tells_its_thread(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (review of the abandon's reordering): ending what else the turn waited on ran before the thread was
    told, so a failure there (Cloud Tasks down while stopping a child) lost the notice for good: the question was
    closed and its session ended, and no sweep reads either again."""
    from shared.usecases import sweep as daily

    thread = paused_with_question(script, fake_slack, f"C{uid}", "rotate the keys?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 73)
    dies_once(monkeypatch, asking, "_end_waits")
    assert daily.run()["errors"] == 1  # in this process: the failure is injected here
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    told = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if m["text"].startswith("Nobody answered")]
    assert len(told) == 1


def test_a_session_whose_question_closed_moments_ago_is_left_to_the_path_that_closed_it(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (review of the sweep's net): the net ended a session as soon as a question of its turn was abandoned
    or cancelled, even while the path that closed it was still between the close and the session's end (a second
    sweep overlapping the first, a newer question's ask): the thread got the net's notice beside the closer's own.
    Within QUEUED_GRACE of the close the net leaves it; past it, it finishes the abandon, with the abandon's notice."""
    from shared.usecases import sweep as daily

    thread = paused_with_question(script, fake_slack, f"C{uid}", "rotate the keys?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 73)
    dies_once(monkeypatch, sessions, "end_session")  # as the closer would be, between its close and the end
    assert daily.run()["errors"] == 1
    stale = firestore.now() - timedelta(hours=config.settings().question_remind_hours + 1)
    firestore.session_ref(thread.session_id).update({"updated_at": stale})  # paused long ago: the net reads it
    swept = daily.run()  # now: the question closed a moment ago
    assert (swept["unwaited_ended"], swept["unwaited_resumed"], swept["errors"]) == (0, 0, 0)
    assert sessions.get_session(thread.session_id).status == SessionStatus.PAUSED  # type: ignore[union-attr]
    assert not [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "stopped waiting" in m["text"]]

    later = sweep(stack, firestore.now() + daily.QUEUED_GRACE + timedelta(minutes=1))
    assert later["unwaited_ended"] == 1
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    told = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "stopped waiting" in m["text"]]
    assert [m["text"].startswith("Nobody answered") for m in told] == [True]


def test_a_net_ending_whose_other_waits_fail_still_shows_the_abandon(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect (review of the net): the net ended a session left paused by a killed abandon, then ended what else its
    turn waited on, and only then showed the abandon: a failure in between lost the notice for good (the question
    closed, the session ended: no sweep reads either again). The thread is now told first."""
    from shared.asks import stopping
    from shared.usecases import sweep as daily

    thread = paused_with_question(script, fake_slack, f"C{uid}", "rotate the keys?")
    question = open_question(thread.session_id)
    age_question(question.question_id, 73)
    dies_once(monkeypatch, sessions, "end_session")  # the abandon stops between its close and the session's end
    assert daily.run()["errors"] == 1
    dies_once(monkeypatch, stopping, "end_waits")  # and the net's ending of the turn's other waits fails once
    assert daily.run(after_remind_hours())["errors"] == 1
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    told = [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "stopped waiting" in m["text"]]
    assert [m["text"].startswith("Nobody answered") for m in told] == [True]


def test_a_session_whose_question_was_replaced_by_a_stopped_ask_is_ended_and_its_post_shows_why(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect (review of the net): a newer question's ask that stopped right after cancelling the older one left the
    older session paused, its post still with buttons and 💬. The net ends it past QUEUED_GRACE and shows the post as
    replaced, as the ask would have, telling the thread nothing (the newer question is there to answer)."""
    from shared.usecases import sweep as daily

    thread = paused_with_question(script, fake_slack, f"C{uid}", "rotate the keys?")
    question = open_question(thread.session_id)
    assert stored.close_question(question.question_id, QuestionStatus.CANCELLED, replaced_by=f"q-newer-{uid}")
    stale = firestore.now() - timedelta(hours=config.settings().question_remind_hours + 1)
    firestore.session_ref(thread.session_id).update({"updated_at": stale})
    swept = daily.run(firestore.now() + daily.QUEUED_GRACE + timedelta(minutes=1))
    assert (swept["unwaited_ended"], swept["errors"]) == (1, 0)
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    [post] = [m for m in fake_slack.messages(thread.channel, thread.ts) if m["ts"] == question.post_ts]
    assert "Cancelled: a newer question replaces it" in post["text"]
    assert Reaction.QUESTION not in fake_slack.reactions(thread.channel, str(question.post_ts))
    assert not [m for m in fake_slack.bot_replies(thread.channel, thread.ts) if "stopped waiting" in m["text"]]

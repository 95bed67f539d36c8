"""The sweep's notices (reminders, an abandoned question's notice, the operators' alert) against a Slack that refuses
them for a while, sweeps that overlap, and a sweep killed mid-post: each is posted at most once, and eventually.

Through the real functions on the emulators and the fake Slack; a claim's hold passing is its record's time moved
back (nothing sleeps for ten minutes).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.stack import Stack
from shared.slack import client as slack
from shared.state import events, firestore, sessions
from shared.state import questions as stored
from shared.state.models import Audit, QuestionStatus, SessionKind, SessionStatus, Step, StepKind
from shared.state.session_model import Session
from tests.agent_helpers import Thread, mention, open_question, wait_status
from tests.poll import wait_for

pytestmark = pytest.mark.stack
G = FakeGemini
Script = Callable[..., int]
OPERATORS = "C0OPERATORS"
ABANDONED = "Nobody answered this question"


def sweep(stack: Stack, job: str = "sweep") -> dict[str, Any]:
    response = requests.post(stack.function_url("sweep"), json={"job": job}, timeout=90)
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.fixture
def empty_db(stack: Stack) -> None:
    url = f"http://{stack.firestore_host}/emulator/v1/projects/{local.PROJECT}/databases/(default)/documents"
    assert requests.delete(url, timeout=30).status_code == 200


@pytest.fixture
def sweep_restarted(stack: Stack, fake_slack: FakeSlack) -> Iterator[None]:
    """Whatever a case does to the sweep function, the next test finds it running."""
    yield
    for method in ("chat.postMessage", "reactions.remove"):
        fake_slack.release(method)
    if "sweep" not in stack.procs:
        stack.start_function("sweep")


def paused_on(script: Script, fake_slack: FakeSlack, channel: str, question: str, hours: float) -> Thread:
    """A session paused on ``question``, asked ``hours`` ago."""
    script(G.call("ask_operator", question=question, options=["yes", "no"]))
    thread = mention(fake_slack, channel, f"please decide {question}")
    wait_status(thread.session_id, SessionStatus.PAUSED)
    asked = firestore.now() - timedelta(hours=hours)
    firestore.question_ref(open_question(thread.session_id).question_id).update({"asked_at": asked})
    return thread


def silent_retry(uid: str) -> Session:
    """A narration (a retry) whose worker died long ago without reporting back: the sweep alerts the operators."""
    root = str(slack.client().chat_postMessage(channel=f"C{uid}", text=f"deploy [C{uid}]")["ts"])
    slack.client().chat_postMessage(channel=OPERATORS, text="the operators' channel")  # it exists, as deployed
    session = Session.new(
        session_id=f"dead-{uid}", kind=SessionKind.RETRY, channel=f"C{uid}", thread_ts=root,
        trigger_ts=root, trigger_user="U0HUMAN", text=f"deploy [C{uid}]",
        created_at=firestore.now() - timedelta(hours=5), status=SessionStatus.RUNNING, worker="gone",
        lease_until=firestore.now() - timedelta(hours=3), narrated_session_id=f"ev-{uid}",
    )  # fmt: skip
    firestore.session_ref(session.session_id).set(session.to_doc())
    audit = Audit.from_doc({"type": "tool", "name": "fetch_url", "args": "{}", "result": "{}", "outward": True,
                            "posts": [], "at": firestore.now()})  # fmt: skip
    step = Step(seq=0, session_id=session.session_id, kind=StepKind.TOOL_RESULTS, content=None, audit=[audit],
                at=firestore.now())  # fmt: skip
    firestore.session_ref(session.session_id).collection(firestore.STEPS).document("000000").set(step.to_doc())
    return session


def hold_passed(claim: str) -> None:
    """The claim's hold (and any Retry-After) over, as if its poster died or waited that long ago."""
    long_ago = firestore.now() - events.CLAIM_HOLD - timedelta(minutes=1)
    firestore.event_ref(claim).set({"received_at": long_ago}, merge=True)


def a_day_later(session: Session) -> None:
    """The next day's sweep: ``session``, ended by the sweep moments ago, is stale again if it is not followed up."""
    firestore.session_ref(session.session_id).update({"updated_at": firestore.now() - timedelta(hours=1)})


def posts(fake_slack: FakeSlack, channel: str, thread_ts: str | None, starts: str) -> list[dict[str, Any]]:
    return [m for m in fake_slack.messages(channel, thread_ts) if m.get("bot_id") and m["text"].startswith(starts)]


def alerts(fake_slack: FakeSlack, session: Session) -> tuple[int, int]:
    """The alerts posted in the session's thread, and in the operator channel."""
    thread = posts(fake_slack, session.origin.channel, session.origin.thread_ts, ":warning:")
    channel = [m for m in fake_slack.messages(OPERATORS) if session.session_id in m["text"] or
               (session.narrated_session_id or "-") in m["text"]]  # fmt: skip
    return len(thread), len(channel)


def test_an_abandon_notice_slack_rate_limited_is_posted_once_by_a_later_sweep(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the thread's notice of an abandoned question that Slack refused (a 429 whose Retry-After is longer than
    the sweep waits, a 5xx, a timeout) was never posted: the question was abandoned, so no later sweep looked at it,
    and its claim stayed taken. It is kept pending, posted by the first sweep (or rescue) after Slack's Retry-After,
    once."""
    thread = paused_on(script, fake_slack, f"C{uid}", "drop the old index?", hours=100)
    question = open_question(thread.session_id)
    fake_slack.fail("chat.postMessage", times=1, status=429, retry_after=30, match=ABANDONED)
    assert sweep(stack)["errors"] == 1  # its notice refused; abandoned all the same
    assert stored.get_question(question.question_id).status == QuestionStatus.ABANDONED  # type: ignore[union-attr]
    assert not posts(fake_slack, thread.channel, thread.ts, ABANDONED)
    assert sweep(stack).get("notices_posted", 0) == 0  # Slack's Retry-After not over yet: not tried again
    hold_passed(f"notice-{question.question_id}:abandoned")
    assert sweep(stack, job="rescue").get("notices_posted", 0) == 1  # the rescue, every few minutes, posts it
    again = sweep(stack)
    assert (again["notices_posted"], again["notices_read"]) == (0, 0)  # posted: not read any more
    assert len(posts(fake_slack, thread.channel, thread.ts, ABANDONED)) == 1


def test_an_alert_whose_channel_copy_slack_refused_posts_that_copy_alone_next_time(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: an alert posted in the thread whose copy in the operator channel Slack refused (503s) left its one
    claim taken and the session not followed up: no sweep posted the copy within the claim's hold, and the first one
    after it posted both again (two alerts in the thread). Each post is its own notice: the copy is posted by the
    next sweep, the thread's never again."""
    dead = silent_retry(uid)
    fake_slack.fail("chat.postMessage", times=3, status=503, match=f"in <#{dead.origin.channel}>")  # the copy only
    first = sweep(stack)
    assert (first["escalated"], first["errors"]) == (1, 0)  # escalated: its copy is owed to the next sweep
    assert alerts(fake_slack, dead) == (1, 0)
    a_day_later(dead)
    for claim in (f"{dead.session_id}:alert", f"{dead.session_id}:alert:channel"):
        hold_passed(claim)
    sweep(stack)
    sweep(stack)
    assert alerts(fake_slack, dead) == (1, 1)
    assert sessions.get_session(dead.session_id).followed_up  # type: ignore[union-attr]


@pytest.mark.usefixtures("sweep_restarted")
def test_a_sweep_killed_after_slack_took_its_alert_never_posts_it_again(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a sweep SIGKILLed after Slack took its alert and before recording it left the claim not acted on; the
    first sweep after the claim's hold posted the alert again. The next attempt looks for it by its key first."""
    dead = silent_retry(uid)
    fake_slack.slow("chat.postMessage", 120, match=":warning:")  # Slack takes it; its answer never comes in time

    def killed_sweep() -> None:
        with contextlib.suppress(requests.ConnectionError):  # its process is killed under it
            requests.post(stack.function_url("sweep"), json={}, timeout=150)

    killed = threading.Thread(target=killed_sweep)
    killed.start()
    wait_for(lambda: posts(fake_slack, dead.origin.channel, dead.origin.thread_ts, ":warning:"), timeout=60,
             what="the alert taken by Slack")  # fmt: skip
    stack.kill_function("sweep")
    stack.start_function("sweep")
    fake_slack.release("chat.postMessage")
    killed.join(30)
    assert sweep(stack).get("notices_posted", 0) == 0  # its claim still holds
    a_day_later(dead)
    for claim in (f"{dead.session_id}:alert", f"{dead.session_id}:alert:channel"):
        hold_passed(claim)
    sweep(stack)
    sweep(stack)
    assert alerts(fake_slack, dead) == (1, 1)
    assert sessions.get_session(dead.session_id).followed_up  # type: ignore[union-attr]


@pytest.mark.usefixtures("sweep_restarted")
def test_a_sweep_killed_after_abandoning_a_question_still_tells_its_thread(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a sweep SIGKILLed after it abandoned a question and ended its session, before it claimed the thread's
    notice (here: while Slack was taking the 💬 off), left nothing for any later sweep to look at: the thread was
    never told. The notice is claimed before the session ends, and the next sweep after its hold posts it, once."""
    thread = paused_on(script, fake_slack, f"C{uid}", "purge the queue?", hours=100)
    question = open_question(thread.session_id)
    fake_slack.slow("reactions.remove", 120)

    def killed_sweep() -> None:
        with contextlib.suppress(requests.ConnectionError):  # its process is killed under it
            requests.post(stack.function_url("sweep"), json={}, timeout=150)

    killed = threading.Thread(target=killed_sweep)
    killed.start()
    wait_for(lambda: fake_slack.calls("reactions.remove", channel=thread.channel), timeout=60,
             what="the sweep taking the 💬 off")  # fmt: skip
    stack.kill_function("sweep")
    stack.start_function("sweep")
    fake_slack.release("reactions.remove")
    killed.join(30)
    assert sessions.get_session(thread.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    hold_passed(f"notice-{question.question_id}:abandoned")
    sweep(stack)
    sweep(stack)
    assert len(posts(fake_slack, thread.channel, thread.ts, ABANDONED)) == 1


def test_a_reminder_slack_took_behind_a_fatal_error_is_not_posted_again(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: a reminder Slack made but answered ``fatal_error`` ("some aspect of the operation succeeded") gave its
    claim up: the next sweep posted it a second time. The next attempt looks for it by its key first."""
    thread = paused_on(script, fake_slack, f"C{uid}", "rotate the keys?", hours=25)
    question = open_question(thread.session_id)
    fake_slack.fail("chat.postMessage", times=1, error="fatal_error", applied=True, match=":alarm_clock:")
    assert sweep(stack)["errors"] == 1
    assert len(posts(fake_slack, thread.channel, thread.ts, ":alarm_clock:")) == 1
    hold_passed(f"{question.question_id}:reminder")
    again = sweep(stack)
    assert again["reminded"] == 1  # found, and marked
    assert sweep(stack)["reminded"] == 0
    assert len(posts(fake_slack, thread.channel, thread.ts, ":alarm_clock:")) == 1
    assert stored.get_question(question.question_id).reminded_at is not None  # type: ignore[union-attr]


def test_a_reminder_to_a_channel_the_app_left_is_given_up(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """A refusal no later attempt changes (the app removed from the channel) is given up: not tried by every sweep."""
    thread = paused_on(script, fake_slack, f"C{uid}", "archive the bucket?", hours=25)
    fake_slack.fail("chat.postMessage", times=1, error="not_in_channel", match=":alarm_clock:")
    assert sweep(stack)["errors"] == 1
    tried = len(fake_slack.calls("chat.postMessage", channel=thread.channel))
    again = sweep(stack)
    assert (again["reminded"], again["errors"]) == (0, 0)
    assert len(fake_slack.calls("chat.postMessage", channel=thread.channel)) == tried


def test_a_reminder_kept_for_later_whose_question_was_answered_meanwhile_is_never_posted(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    thread = paused_on(script, fake_slack, f"C{uid}", "scale down tonight?", hours=25)
    question = open_question(thread.session_id)
    fake_slack.fail("chat.postMessage", times=1, status=429, retry_after=30, match=":alarm_clock:")
    assert sweep(stack)["errors"] == 1
    script(G.text("Scaling down tonight."))
    fake_slack.user_message(local.OPERATOR_ID, thread.channel, "yes", thread_ts=thread.ts)
    wait_for(lambda: (q := stored.get_question(question.question_id)) and q.status == QuestionStatus.ANSWERED,
             what="the answer")  # fmt: skip
    hold_passed(f"{question.question_id}:reminder")
    assert sweep(stack).get("notices_read", 0) == 1  # read once: given up
    assert sweep(stack).get("notices_read", 0) == 0
    assert not posts(fake_slack, thread.channel, thread.ts, ":alarm_clock:")


def test_overlapping_sweeps_in_two_processes_while_slack_fails_post_each_notice_once(
    stack: Stack, empty_db: None, script: Script, fake_slack: FakeSlack, uid: str
) -> None:
    """The sweep function and this process sweep at the same moment, twice, while Slack answers slowly and refuses
    the first posts (a 429, a 500 after taking it, a 503): every notice (two reminders, an abandon, an alert in the
    thread and in the operator channel) ends up posted exactly once."""
    from shared.usecases import sweep as daily

    reminded = [paused_on(script, fake_slack, f"C{uid}r{n}", f"ship build {n}?", hours=25) for n in range(2)]
    dropped = paused_on(script, fake_slack, f"C{uid}a", "keep the canary?", hours=100)
    dead = silent_retry(uid)
    fake_slack.slow("chat.postMessage", 2, times=4)
    fake_slack.fail("chat.postMessage", times=1, status=429, retry_after=30, match=":alarm_clock:")
    fake_slack.fail("chat.postMessage", times=1, status=500, applied=True, match=ABANDONED)
    fake_slack.fail("chat.postMessage", times=3, status=503, match=":warning:")

    def both_at_once() -> None:
        start = threading.Barrier(2)
        done: list[dict[str, Any]] = []

        def over_http() -> None:
            start.wait()
            done.append(sweep(stack))

        def in_this_process() -> None:
            start.wait()
            done.append(daily.run())

        racing = [threading.Thread(target=over_http), threading.Thread(target=in_this_process)]
        for each in racing:
            each.start()
        for each in racing:
            each.join(150)
        assert len(done) == 2

    both_at_once()
    for snap in (
        firestore.db().collection(firestore.EVENTS).where(filter=FieldFilter("notice", "==", "pending")).stream()
    ):
        hold_passed(snap.id)  # whatever was refused or held: its hold over
    a_day_later(dead)
    both_at_once()
    both_at_once()
    for thread in reminded:
        assert len(posts(fake_slack, thread.channel, thread.ts, ":alarm_clock:")) == 1
    assert len(posts(fake_slack, dropped.channel, dropped.ts, ABANDONED)) == 1
    assert alerts(fake_slack, dead) == (1, 1)


UNWAITED = "I have stopped waiting here"


class Killed(BaseException):
    """A process killed right there: nothing after it runs (no ``except Exception`` sees it)."""


def paused_on_nothing(uid: str) -> Session:
    """A top-level session paused two days ago with nothing to resume it from: the sweep ends it and tells its
    thread how to start again."""
    root = str(slack.client().chat_postMessage(channel=f"C{uid}", text=f"deploy [C{uid}]")["ts"])
    session = Session.new(
        session_id=f"nothing-{uid}", kind=SessionKind.MENTION, channel=f"C{uid}", thread_ts=root, trigger_ts=root,
        trigger_user="U0HUMAN", text=f"deploy [C{uid}]", created_at=firestore.now() - timedelta(days=2),
        status=SessionStatus.PAUSED,
    )  # fmt: skip
    firestore.session_ref(session.session_id).set(
        session.to_doc() | {"updated_at": firestore.now() - timedelta(days=2)}
    )
    return session


def test_a_sessions_end_notice_slack_refused_is_posted_by_the_next_sweep(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str
) -> None:
    """Defect: the thread of a paused session the sweep ended (nothing could resume it) was told once or never: a
    notice Slack refused (503s) was lost, the session ended so no later sweep read it. It is owed to the next one."""
    paused = paused_on_nothing(uid)
    fake_slack.fail("chat.postMessage", times=3, status=503, match=UNWAITED)
    first = sweep(stack)
    assert first["errors"] == 1
    assert sessions.get_session(paused.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    assert sweep(stack).get("notices_posted", 0) == 1
    assert sweep(stack).get("notices_posted", 0) == 0
    assert len(posts(fake_slack, paused.origin.channel, paused.origin.thread_ts, UNWAITED)) == 1


def test_a_sweep_killed_right_after_ending_a_session_still_tells_its_thread(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a sweep killed right after it ended a paused session nothing could resume, before it told the thread,
    left the thread never told (the session no longer paused: no later sweep reads it). Its notice is claimed before
    the end, and the first sweep after the claim's hold posts it, once."""
    from shared.usecases import sweep as daily

    paused = paused_on_nothing(uid)
    real = sessions.end_session

    def killed_after(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(sessions, "end_session", real)
        real(*args, **kwargs)
        raise Killed

    monkeypatch.setattr(sessions, "end_session", killed_after)
    with pytest.raises(Killed):
        daily.run()
    assert sessions.get_session(paused.session_id).status == SessionStatus.ABANDONED  # type: ignore[union-attr]
    hold_passed(f"notice-{paused.session_id}:unwaited")
    sweep(stack)
    sweep(stack)
    assert len(posts(fake_slack, paused.origin.channel, paused.origin.thread_ts, UNWAITED)) == 1


def test_an_alert_the_rescue_posted_for_a_sweep_killed_before_its_mark_still_follows_the_session_up(
    stack: Stack, empty_db: None, fake_slack: FakeSlack, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a sweep killed after it claimed an alert's notices and before it marked the session followed up left
    them owed; the rescue posted them, and every later sweep found the session unreported, found its notices posted
    (no claim) and returned without marking it: escalated every day, and alerted again once the records expired.
    The notices are durable once claimed, so the session is marked followed up either way."""
    from shared.usecases import sweep as daily

    dead = silent_retry(uid)
    monkeypatch.setattr(sessions, "mark_followed_up", lambda *_: (_ for _ in ()).throw(Killed()))
    with pytest.raises(Killed):
        daily.run()
    monkeypatch.undo()
    assert alerts(fake_slack, dead) == (0, 0)
    for claim in (f"{dead.session_id}:alert", f"{dead.session_id}:alert:channel"):
        hold_passed(claim)
    assert sweep(stack, job="rescue").get("notices_posted", 0) == 2  # the owed alert, by the rescue
    a_day_later(dead)
    sweep(stack)
    assert sessions.get_session(dead.session_id).followed_up  # type: ignore[union-attr]
    assert sweep(stack).get("escalated", 0) == 0
    assert alerts(fake_slack, dead) == (1, 1)

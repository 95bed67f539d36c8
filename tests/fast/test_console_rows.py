"""The console's rows and the terminal's names (issue 26.2, 26.3): pure logic, no stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ops import conversations
from ops.names import Names
from shared.state.models import Approval, Question, SessionKind, SessionStatus, Waiting, WaitKind
from shared.state.session_model import Session

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
NAMES = Names({"U0HUMAN": "riley", "U0OPERATOR": "olivia", "U0BOT": "agent"}.get)


def session(sid: str, kind: SessionKind, status: SessionStatus, minute: int, **more: object) -> Session:
    return Session.new(session_id=sid, kind=kind, channel="C1", thread_ts="1.0", trigger_ts=f"{minute}.5",
                       trigger_user="U0HUMAN", text=f"<@U0BOT> {sid}", created_at=T0 + timedelta(minutes=minute),
                       status=status, **more)  # type: ignore[arg-type]  # fmt: skip


def question(session_id: str) -> Question:
    return Question(question_id="q1", session_id=session_id, transcript_id="ev-1", channel="C1", thread_ts="1.0",
                    text="<@U0BOT> pick a cache", options=["redis"], blocking=True, call_id=None, asked_at=T0,
                    requester="U0HUMAN")  # fmt: skip


def approval(session_id: str) -> Approval:
    return Approval(approval_id="a1", session_id=session_id, transcript_id="ev-1", channel="C1", thread_ts="1.0",
                    seq=1, call_index=0, call_id=None, tool="restart_service", args="{}", digest="d", turn_ids=["a1"],
                    asked_at=T0)  # fmt: skip


def rows(
    sessions: list[Session], questions: tuple[Question, ...] = (), approvals: tuple[Approval, ...] = ()
) -> list[conversations.Json]:
    return conversations.group(sessions, questions, approvals, NAMES.name, NAMES.readable)


def test_continuations_retries_and_children_are_one_row_under_their_request() -> None:
    mention = session("ev-1", SessionKind.MENTION, SessionStatus.DONE, 0)
    answer = session("answer-q-ev-1-1-0", SessionKind.CONTINUATION, SessionStatus.DONE, 1, transcript_id="ev-1",
                     question_id="q1", asker_session_id="ev-1")  # fmt: skip
    resume = session("resume-ev-1-3", SessionKind.CONTINUATION, SessionStatus.DONE, 2, transcript_id="ev-1",
                     waiting=[Waiting(3, 0, WaitKind.APPROVAL, "a1")])  # fmt: skip
    child = session("child-resume-ev-1-3-4-0", SessionKind.CHILD, SessionStatus.DONE, 3,
                    parent_session_id="resume-ev-1-3", depth=1)  # fmt: skip
    late = session("result-child-x", SessionKind.CONTINUATION, SessionStatus.DONE, 4, transcript_id="ev-1")
    other = session("ev-2", SessionKind.MENTION, SessionStatus.FAILED, 5, error="the model failed")
    shown = rows([late, child, resume, answer, mention, other])  # in any order
    assert [r["id"] for r in shown] == ["ev-2", "ev-1"]  # newest first
    first = shown[1]
    assert [m["id"] for m in first["sessions"]] == [s.session_id for s in (mention, answer, resume, child, late)]
    assert [m["role"] for m in first["sessions"]] == [
        "the request", "resumed by an answer", "resumed after the decisions", "a delegated task", "a continuation",
    ]  # fmt: skip
    assert (first["state"], first["label"]) == ("done", "done")  # not "resumed" for ever
    assert first["request"] == "@agent ev-1"  # people by name, never <@U…>
    assert first["who"] == "@riley"
    assert (shown[0]["state"], shown[0]["label"]) == ("failed", "failed: the model failed")


def test_the_state_says_who_it_waits_for() -> None:
    paused = session("ev-1", SessionKind.MENTION, SessionStatus.PAUSED, 0)
    assert rows([paused], questions=(question("ev-1"),))[0]["label"] == (
        "waiting for an operator's answer (asked for @riley)"
    )
    assert rows([paused], approvals=(approval("ev-1"),))[0]["label"] == "waiting for an approval (restart_service)"
    parent = session("ev-1", SessionKind.MENTION, SessionStatus.PAUSED, 0,
                     waiting=[Waiting(1, 0, WaitKind.CHILD, "c")])  # fmt: skip
    child = session("c", SessionKind.CHILD, SessionStatus.RUNNING, 1, parent_session_id="ev-1", depth=1)
    assert rows([parent, child])[0]["label"] == "working"
    assert rows([parent])[0]["label"] == "waiting for its delegated tasks"
    stopped = session("ev-1", SessionKind.MENTION, SessionStatus.STOPPED, 0)
    assert rows([stopped])[0]["state"] == "stopped"


def test_names_resolve_once_and_markup_reads_as_text() -> None:
    asked: list[str] = []

    def lookup(user: str) -> str | None:
        asked.append(user)
        return {"U0HUMAN": "riley"}.get(user)

    names = Names(lookup)
    assert names.readable("denied by <@U0HUMAN>: no reason given") == "denied by @riley: no reason given"
    assert names.readable("<@U0HUMAN> and <@U0NOBODY>, <!here|here>, <#C1|ops>, <https://x.y|docs> &lt;b&gt;") == (
        "@riley and @U0NOBODY, @here, #ops, docs (https://x.y) <b>"
    )
    assert names.name("U0HUMAN") == "@riley"
    assert names.name("an operator (make stop)") == "an operator (make stop)"
    assert asked == ["U0HUMAN", "U0NOBODY"]  # each looked up once

"""One protocol for every kind of wait (issue 23), one module per kind in each layer: the stored side (where the
waited thing is, whether it is resolved: ``shared.state.waits``), the asks side (what ends when its asker ends:
``shared.asks.waits``) and the agent side (what the resumed call gets: ``shared.agent.waits.kinds``). Each
``WaitKind`` has exactly one implementation in each, and each resolves, ends and answers as the branches it replaced
did, on representative documents (pure: no stack; Firestore references are built offline, never read)."""

from __future__ import annotations

import importlib
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.genai import types

from shared.agent.tools.result import ToolResult
from shared.agent.waits import child as child_wait
from shared.agent.waits import kinds as agent_kinds
from shared.agent.waits import question as question_wait
from shared.agent.waits.approval import Decided
from shared.agent.waits.base import Resumed
from shared.asks import delegation, lifecycle, stopping
from shared.asks import waits as asks_waits
from shared.state import waits as state_waits
from shared.state.models import (
    Approval,
    ApprovalStatus,
    AuditType,
    ParentQuestion,
    Question,
    QuestionStatus,
    SessionKind,
    SessionStatus,
    Waiting,
    WaitKind,
)
from shared.state.session_model import Session

AT = datetime(2030, 1, 1, tzinfo=UTC)
LAYERS = {"shared.state.waits": state_waits.KINDS, "shared.asks.waits": asks_waits.KINDS,
          "shared.agent.waits": agent_kinds.KINDS}  # fmt: skip


@pytest.mark.parametrize("package", list(LAYERS))
def test_every_kind_has_exactly_one_implementation_in_its_own_module(package: str) -> None:
    registry = LAYERS[package]
    assert set(registry) == set(WaitKind)
    assert len(registry) == len(WaitKind)
    for kind, wait in registry.items():
        assert cast(Any, wait).kind is kind
        assert importlib.import_module(f"{package}.{kind.value}").WAIT is wait  # one module per kind, named for it
    assert len({id(wait) for wait in registry.values()}) == len(WaitKind)


def entry(kind: WaitKind, key: str = "k1", *, seq: int = 3, index: int = 0, released: bool = False) -> Waiting:
    return Waiting(seq, index, kind, key, released)


# --- the stored side --------------------------------------------------------------------------------------------
RESOLVED: list[tuple[WaitKind, str | None, bool]] = [
    (WaitKind.QUESTION, "open", False), (WaitKind.QUESTION, "answered", True),
    (WaitKind.QUESTION, "cancelled", True), (WaitKind.QUESTION, "abandoned", True), (WaitKind.QUESTION, None, True),
    (WaitKind.MCP_INPUT, "open", False), (WaitKind.MCP_INPUT, "answered", True),
    (WaitKind.MCP_INPUT, "cancelled", True),
    (WaitKind.APPROVAL, "pending", False), (WaitKind.APPROVAL, "approved", True),
    (WaitKind.APPROVAL, "denied", True), (WaitKind.APPROVAL, "expired", True), (WaitKind.APPROVAL, None, True),
    (WaitKind.CHILD, "queued", False), (WaitKind.CHILD, "running", False), (WaitKind.CHILD, "paused", False),
    (WaitKind.CHILD, "done", True), (WaitKind.CHILD, "failed", True), (WaitKind.CHILD, "stopped", True),
    (WaitKind.CHILD, "abandoned", True), (WaitKind.CHILD, None, True),  # a missing child never ends: not waited
]  # fmt: skip


@pytest.mark.parametrize(("kind", "status", "resolved"), RESOLVED)
def test_a_waited_document_is_resolved_by_its_status(kind: WaitKind, status: str | None, resolved: bool) -> None:
    found = None if status is None else {"status": status}
    assert state_waits.of(kind).resolved(entry(kind), found, {"status": "paused"}) is resolved


@pytest.mark.parametrize(
    ("asked", "resolved"),
    [
        (None, True),  # no question of the child's any more: nothing waits on it
        ({"question_id": "k1", "seq": 3, "answer": None}, False),
        ({"question_id": "k1", "seq": 3, "answer": "yes"}, True),
        ({"question_id": "other", "seq": 3, "answer": None}, False),  # a sibling ask_parent call of the same turn
        ({"question_id": "other", "seq": 9, "answer": None}, True),  # a later turn's question
    ],
)
def test_a_parent_answer_is_read_from_the_asker_itself(asked: dict[str, Any] | None, resolved: bool) -> None:
    wait = state_waits.of(WaitKind.PARENT_ANSWER)
    asker = {"status": "paused", "parent_question": asked}
    assert wait.ref(entry(WaitKind.PARENT_ANSWER)) is None
    assert wait.resolved(entry(WaitKind.PARENT_ANSWER), None, asker) is resolved


def test_each_stored_kind_reads_its_own_collection(monkeypatch: pytest.MonkeyPatch) -> None:
    client = firestore.Client(project="offline", credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]  # builds references only
    monkeypatch.setattr("shared.deps.firestore", lambda: client)
    paths = {kind: ref.path if (ref := wait.ref(entry(kind))) is not None else None
             for kind, wait in state_waits.KINDS.items()}  # fmt: skip
    assert paths == {WaitKind.QUESTION: "questions/k1", WaitKind.MCP_INPUT: "questions/k1",
                     WaitKind.APPROVAL: "approvals/k1", WaitKind.CHILD: "sessions/k1",
                     WaitKind.PARENT_ANSWER: None}  # fmt: skip


# --- the asks side ----------------------------------------------------------------------------------------------
def test_an_ended_sessions_waits_end_each_by_its_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions (and MCP requests) cancelled, approvals expired or denied, children stopped, a parent's answer
    left alone, a released entry skipped; only what actually ended is returned."""
    ended: list[tuple[str, str, Any]] = []
    monkeypatch.setattr("shared.asks.waits.question.stored_questions.get_question",
                        lambda key: None if key == "q-gone" else replace(question(QuestionStatus.OPEN),
                                                                         question_id=key))  # fmt: skip
    monkeypatch.setattr("shared.asks.waits.approval.stored_approvals.get_approval",
                        lambda key: Approval(approval_id=key, session_id="s1", transcript_id="s1", channel="C1",
                                             thread_ts="1.0", seq=3, call_index=1, call_id=None, tool="deploy",
                                             args="{}", digest="d", turn_ids=[key], asked_at=AT))  # fmt: skip

    def cancel_question(asked: Question, *, why: str, by: str, expired: bool) -> bool:
        ended.append(("question", asked.question_id, why))
        return asked.question_id != "q-closed"  # closed already: nothing ended

    def cancel_approval(asked: Approval, *, why: str, by: str, expired: bool) -> bool:
        ended.append(("approval", asked.approval_id, (by, expired)))
        return True

    def stop(session_id: str, *, by: str) -> list[str]:
        ended.append(("stop", session_id, by))
        return [session_id, f"{session_id}-child"]

    # Both end through the ask lifecycle's one cancel step (its table's entry for each kind of ask).
    monkeypatch.setitem(lifecycle._STEPS, Question, replace(lifecycle._STEPS[Question], cancel=cancel_question))
    monkeypatch.setitem(lifecycle._STEPS, Approval, replace(lifecycle._STEPS[Approval], cancel=cancel_approval))
    monkeypatch.setattr(stopping, "stop", stop)
    session = Session.new(session_id="s1", kind=SessionKind.MENTION, channel="C1", thread_ts="1.0", trigger_ts="1.0",
                          trigger_user="U1", text="go", created_at=AT, status=SessionStatus.ABANDONED,
                          waiting=[entry(WaitKind.QUESTION, "q-1", index=0), entry(WaitKind.APPROVAL, "a-1", index=1),
                                   entry(WaitKind.CHILD, "c-1", index=2), entry(WaitKind.PARENT_ANSWER, "p-1", index=3),
                                   entry(WaitKind.MCP_INPUT, "q-2", index=4),
                                   entry(WaitKind.CHILD, "c-2", index=5, released=True),
                                   entry(WaitKind.QUESTION, "q-gone", index=6),
                                   entry(WaitKind.QUESTION, "q-closed", index=7)])  # fmt: skip
    done = stopping.end_waits(session, why="gone", by="sweep", expired=True)
    assert done == ["q-1", "a-1", "c-1", "c-1-child", "q-2"]
    assert ended == [("question", "q-1", "gone"), ("approval", "a-1", ("sweep", True)), ("stop", "c-1", "sweep"),
                     ("question", "q-2", "gone"), ("question", "q-closed", "gone")]  # fmt: skip
    ended.clear()
    stopping.end_waits(session, why="stopped", by="U9", expired=False)
    assert ("approval", "a-1", ("U9", False)) in ended
    assert ("stop", "c-1", "U9") in ended


# --- the agent side ---------------------------------------------------------------------------------------------
CALL = types.FunctionCall(name="tool", args={})


def resumed(session: Session | None = None) -> Resumed:
    """A resumption whose kinds need no tools (the kinds below never run a call)."""
    return Resumed(session or child(SessionStatus.RUNNING), cast(Any, None), cast(Any, None), [])


def child(status: SessionStatus, *, result: str | None = None, error: str | None = None,
          asked: ParentQuestion | None = None) -> Session:  # fmt: skip
    return Session.new(session_id="c-1", kind=SessionKind.CHILD, channel="C1", thread_ts="1.0", trigger_ts="1.0",
                       trigger_user="U1", text="look", created_at=AT, status=status, result=result, error=error,
                       parent_question=asked)  # fmt: skip


def question(status: QuestionStatus, *, answer: str | None = None, options: list[str] | None = None) -> Question:
    return Question(question_id="q-1", session_id="s1", transcript_id="s1", channel="C1", thread_ts="1.0",
                    text="which?", options=options or [], blocking=True, call_id=None, asked_at=AT, status=status,
                    answer=answer, answered_by="U2" if answer else None)  # fmt: skip


def test_a_resumed_question_gets_the_answer_or_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(question_wait, "now", lambda: AT)
    wait, on = agent_kinds.of(WaitKind.QUESTION), entry(WaitKind.QUESTION, "q-1")
    run = resumed()
    answered = wait.outcome(run, on, CALL, {"q-1": question(QuestionStatus.ANSWERED, answer="b", options=["a", "b"])})
    note = "The reply matched none of the options; read it as free text."
    assert answered == ToolResult.ok({"answer": "b", "answered_by": "U2", "matched_option": None, "note": note})
    cancelled = wait.outcome(run, on, CALL, {"q-1": question(QuestionStatus.CANCELLED)})
    assert cancelled == ToolResult.fail("the operator did not answer (the question was cancelled)")
    assert wait.outcome(run, on, CALL, {}) == ToolResult.fail("the operator did not answer (the question was lost)")
    assert [a.type for a in run.audit] == [AuditType.ANSWER] * 3
    assert agent_kinds.of(WaitKind.MCP_INPUT).outcome(resumed(), entry(WaitKind.MCP_INPUT, "q-9"), CALL, {}) == (
        ToolResult.fail("the operator did not answer (the question was lost)"))  # fmt: skip


@pytest.mark.parametrize(
    ("status", "result", "error", "expected"),
    [
        (SessionStatus.DONE, "found it", None, ToolResult.ok("found it")),
        (SessionStatus.DONE, "  ", None, ToolResult.fail(child_wait.NO_RESULT)),
        (SessionStatus.DONE, None, None, ToolResult.fail(child_wait.NO_RESULT)),
        (SessionStatus.DONE, "half", "ran out of turns", ToolResult.fail(
            "the child ran out of turns; what it said last: half")),
        (SessionStatus.FAILED, None, "boom", ToolResult.fail("the child did not finish (failed): boom")),
        (SessionStatus.STOPPED, None, None, ToolResult.fail("the child did not finish (stopped): no reason")),
    ],
)  # fmt: skip
def test_a_resumed_delegate_gets_its_childs_end(monkeypatch: pytest.MonkeyPatch, status: SessionStatus,
                                                result: str | None, error: str | None,
                                                expected: ToolResult) -> None:  # fmt: skip
    monkeypatch.setattr(child_wait, "now", lambda: AT)
    run = resumed()
    ended = child(status, result=result, error=error)
    assert agent_kinds.of(WaitKind.CHILD).outcome(run, entry(WaitKind.CHILD, "c-1"), CALL, {"c-1": ended}) == expected
    assert [a.type for a in run.audit] == [AuditType.TOOL]


def test_a_lost_child_is_an_error_and_only_children_show_in_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(child_wait, "now", lambda: AT)
    lost = agent_kinds.of(WaitKind.CHILD).outcome(resumed(), entry(WaitKind.CHILD, "c-9"), CALL, {})
    assert lost == ToolResult.fail("the helper session is lost")
    assert {kind for kind, wait in agent_kinds.KINDS.items() if wait.shown_in_tree} == {WaitKind.CHILD}
    assert all(wait.news([]) == [] for kind, wait in agent_kinds.KINDS.items() if kind != WaitKind.CHILD)


@pytest.mark.parametrize(
    ("asked", "expected"),
    [
        (None, ToolResult.fail(delegation.UNANSWERED)),
        (ParentQuestion("p-1", "which?", True, 3, 0), ToolResult.fail(delegation.UNANSWERED)),
        (ParentQuestion("p-1", "which?", True, 3, 0, answer="the blue one"),
         ToolResult.ok({"answer": "the blue one", "from": "the session that delegated your task"})),
        (ParentQuestion("p-1", "which?", True, 3, 0, answer="your parent ended", released=True),
         ToolResult.fail("your parent ended")),
    ],
)  # fmt: skip
def test_a_resumed_ask_parent_gets_the_parents_answer(asked: ParentQuestion | None, expected: ToolResult) -> None:
    session = child(SessionStatus.RUNNING, asked=asked)
    wait = agent_kinds.of(WaitKind.PARENT_ANSWER)
    assert wait.refs(session, 3, [entry(WaitKind.PARENT_ANSWER, "p-1")]) == []  # nothing read: it is on the child
    assert wait.outcome(resumed(session), entry(WaitKind.PARENT_ANSWER, "p-1"), CALL, None) == expected


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (ApprovalStatus.DENIED, "too risky",
         "denied by <@U2>: too risky. It did not run; another call needs its own approval."),
        (ApprovalStatus.DENIED, None, "denied by <@U2>: no reason given. It did not run; another call needs its own "
                                      "approval."),
        (ApprovalStatus.EXPIRED, None, "the approval expired; the call did not run"),
    ],
)  # fmt: skip
def test_a_call_not_approved_is_told_it_did_not_run(monkeypatch: pytest.MonkeyPatch, status: ApprovalStatus,
                                                     reason: str | None, expected: str) -> None:  # fmt: skip
    audited: list[Any] = []

    class Calls:  # the calls' audit only: a call not approved never runs
        def context(self, *args: Any, **kwargs: Any) -> None:
            return None

        def audit(self, name: str, call: types.FunctionCall, outcome: Any, ctx: Any) -> str:
            audited.append(outcome)
            return "audited"

    monkeypatch.setattr("shared.agent.waits.approval.now", lambda: AT)
    decided = Approval(approval_id="a-1", session_id="s1", transcript_id="s1", channel="C1", thread_ts="1.0", seq=3,
                       call_index=0, call_id=None, tool="deploy", args="{}", digest="d", turn_ids=["a-1"],
                       asked_at=AT, status=status, decided_by="U2", reason=reason)  # fmt: skip
    run = Resumed(child(SessionStatus.RUNNING), cast(Any, Calls()), cast(Any, None), [])
    found = Decided({"a-1": decided}, {})
    outcome = agent_kinds.of(WaitKind.APPROVAL).outcome(run, entry(WaitKind.APPROVAL, "a-1"), CALL, found)
    assert outcome == ToolResult.fail(expected)
    assert audited == [outcome]
    assert run.audit[0].type == AuditType.APPROVAL


def test_a_pause_starts_only_its_blocking_children(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[str]] = []
    monkeypatch.setattr("shared.agent.waits.child.delegation.launch", launched.append)
    record = [entry(kind, f"{kind.value}-{index}", index=index) for index, kind in enumerate(WaitKind)]
    record.append(entry(WaitKind.CHILD, "child-9", index=9))
    for kind, wait in agent_kinds.KINDS.items():
        wait.pausing([w for w in record if w.kind == kind])
    assert launched == [["child-2", "child-9"]]
    agent_kinds.of(WaitKind.CHILD).pausing([])  # a turn without children starts nothing
    assert launched == [["child-2", "child-9"]]

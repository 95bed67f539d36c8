"""A child's question to its paused parent (``shared.state.parent_asks``), raced on the emulator's documents: the
paused parent is told in one batch fenced by its update time, so whatever the batch's fences cannot hold is checked
again after it commits (found in review of issue 28.4's change); and the parent's answer raced with the asking
child's pause, every task delivered in parallel in this process (the asking tree's flaky unscripted request)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from google.cloud.firestore_v1.batch import WriteBatch

from bench import trees
from bench.rig import DirectTasks
from infra.fakes.gemini.client import FakeGemini as G
from infra.stack import Stack
from shared import deps
from shared.agent.tools import builtin
from shared.agent.tools.base import ToolContext
from shared.agent.tools.result import ToolResult
from shared.asks import delegation
from shared.slack.surface import ThreadSurface
from shared.state import child_questions, firestore, ids, parent_asks, questions, sessions, steps
from shared.state.models import (
    Note,
    NoteKind,
    ParentQuestion,
    Question,
    SessionKind,
    SessionStatus,
    Step,
    StepKind,
    Waiting,
    WaitKind,
)
from shared.state.session_model import Session, SessionUpdate
from tests.agent_helpers import function_responses
from tests.poll import wait_for
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


def _paused_parent_with_a_child_and_a_question(uid: str) -> tuple[str, Session, str]:
    """A parent paused on one turn that waits on a blocking child (running) and an operator's question (open)."""
    at = firestore.now()
    parent_id, child_id, question_id = f"ev-pa-{uid}", f"ch-pa-{uid}", f"q-pa-{uid}"
    channel, root = f"C{uid}", "1700000000.000100"
    common = {"channel": channel, "thread_ts": root, "trigger_ts": root, "trigger_user": "U1", "created_at": at}
    parent = Session.new(session_id=parent_id, kind=SessionKind.MENTION, text="parent", status=SessionStatus.PAUSED,
                         transcript_writer=parent_id, next_seq=3, waiting=[
                             Waiting(seq=1, index=0, kind=WaitKind.CHILD, key=child_id),
                             Waiting(seq=1, index=1, kind=WaitKind.QUESTION, key=question_id)],
                         **common)  # type: ignore[arg-type]  # fmt: skip
    child = Session.new(session_id=child_id, kind=SessionKind.CHILD, text="child task", status=SessionStatus.RUNNING,
                        transcript_writer=child_id, parent_session_id=parent_id, root_session_id=parent_id,
                        delegate_blocking=True, **common)  # type: ignore[arg-type]  # fmt: skip
    firestore.session_ref(parent_id).create(parent.to_doc())
    firestore.session_ref(child_id).create(child.to_doc())
    questions.create_question(Question(
        question_id=question_id, session_id=parent_id, transcript_id=parent_id, channel=channel, thread_ts=root,
        text="Which region?", options=[], blocking=True, call_id=None, asked_at=at, requester="U1", seq=1,
        call_index=1,
    ))  # fmt: skip
    return parent_id, child, question_id


@pytest.fixture
def before_the_tell_commits(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], object]]:
    """Hooks run once, in the asking thread, after ``_tell`` read everything and before its batch commits."""
    hooks: list[Callable[[], object]] = []
    commit = WriteBatch.commit

    def held(self: WriteBatch, *args: Any, **kwargs: Any) -> Any:
        while hooks and threading.current_thread().name == "asking":
            hooks.pop(0)()
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(WriteBatch, "commit", held)
    return hooks


def _ask(child: Session, text: str) -> tuple[parent_asks.AskOutcome, str | None]:
    asked = ParentQuestion(question_id=f"pq-{child.session_id}-2-0", text=text, blocking=True, seq=2, index=0)
    found: list[tuple[parent_asks.AskOutcome, str | None]] = []
    thread = threading.Thread(name="asking", target=lambda: found.append(
        parent_asks.ask_parent(child, asked, unanswered="ended")))  # fmt: skip
    thread.start()
    thread.join(timeout=60)
    assert found, "ask_parent did not return"
    return found[0]


def test_an_answer_that_lands_while_a_child_asks_its_paused_parent_still_wakes_it(
    stack: Stack, uid: str, before_the_tell_commits: list[Callable[[], object]]
) -> None:
    """The parent waits on a child and a question. The child asks; the tell reads the question open, so it only
    releases the child's wait. The operator's answer lands before the tell commits, read the parent before it too
    (the child's wait not released yet), and wakes nothing. Before, the tell's batch committed (its fence is the
    parent's update time, which the answer does not write) and nobody woke the parent: it stayed paused for ever,
    waiting on nothing. Now the tell reads again after its commit and wakes it."""
    parent_id, child, question_id = _paused_parent_with_a_child_and_a_question(uid)
    answered = {"status": "answered", "answer": "eu-west", "answered_by": "U2"}
    before_the_tell_commits.append(lambda: firestore.question_ref(question_id).update(answered))
    outcome, woken = _ask(child, "Which bucket?")
    assert outcome == parent_asks.AskOutcome.RESUMED, outcome
    assert woken
    parent = sessions.get_session(parent_id)
    assert parent is not None
    assert parent.status == SessionStatus.RESUMED
    resumed = sessions.get_session(woken)
    assert resumed is not None
    assert [n.question_id for n in resumed.notes].count(f"pq-{child.session_id}-2-0") == 1


def test_a_question_its_parent_read_before_it_paused_is_not_told_again(stack: Stack, uid: str) -> None:
    """A non-blocking child the parent's turn does not wait on asks; the parent's step commit reads its record (the
    question a note the parent keeps, the record deleted) and then the parent pauses on its turn's child and question.
    The child's late tell must not deliver the question a second time, nor release the turn's own child: before, it
    did both (that child's call would have got "still running" for a question it never asked)."""
    parent_id, waited, _ = _paused_parent_with_a_child_and_a_question(uid)
    asker = Session.from_doc({**waited.to_doc(), "session_id": f"ch-pb-{uid}", "transcript_writer": f"ch-pb-{uid}",
                              "delegate_blocking": False})  # fmt: skip
    firestore.session_ref(asker.session_id).create(asker.to_doc())
    question = f"pq-{asker.session_id}-2-0"
    note = Note(kind=NoteKind.CHILD_QUESTION, text="Which bucket?", user=asker.session_id, ts=question,
                question_id=question, question=asker.text)  # fmt: skip
    firestore.session_ref(parent_id).update({"notes": [note.to_doc()]})
    ask = child_questions.record

    def read_at_once(child_: Session, asked: ParentQuestion, at: Any) -> bool:
        recorded: bool = ask(child_, asked, at)
        child_questions.asked_ref(parent_id, child_.session_id).delete()  # the parent's step commit read it
        return recorded

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(child_questions, "record", read_at_once)
        outcome, woken = _ask(asker, "Which bucket?")
    assert (outcome, woken) == (parent_asks.AskOutcome.DELIVERED, None)
    parent = sessions.get_session(parent_id)
    assert parent is not None
    assert parent.status == SessionStatus.PAUSED
    assert [n.question_id for n in parent.notes] == [question]
    assert not any(w.released for w in parent.waiting), parent.waiting


def test_a_pause_whose_commit_reads_a_childs_question_record_pauses(stack: Stack, uid: str) -> None:
    """A step commit that pauses on a waiting record and reads a child's question record (one its turn does not wait
    on) deletes that record and checks what the record waits on. The check read after the delete, which Firestore
    refuses in a transaction (ReadAfterWriteError): the session crashed on every attempt and failed. Now the check
    reads first, and the pause keeps the question as a note."""
    at = firestore.now()
    parent_id, child_id, question_id = f"ev-pp-{uid}", f"ch-pp-{uid}", f"q-pp-{uid}"
    common = {"channel": f"C{uid}", "thread_ts": "1700000000.000100", "trigger_ts": "1700000000.000100",
              "trigger_user": "U1", "created_at": at}  # fmt: skip
    parent = Session.new(session_id=parent_id, kind=SessionKind.MENTION, text="parent", status=SessionStatus.QUEUED,
                         **common)  # type: ignore[arg-type]  # fmt: skip
    firestore.session_ref(parent_id).create({**parent.to_doc(), child_questions.MAY_ASK: [child_id]})
    running = sessions.claim_session(parent_id, worker="w1", task="t1", attempt=0, lease_seconds=60).session
    assert running is not None
    child = Session.new(session_id=child_id, kind=SessionKind.CHILD, text="child task", status=SessionStatus.RUNNING,
                        transcript_writer=child_id, parent_session_id=parent_id, root_session_id=parent_id,
                        delegate_blocking=False, **common)  # type: ignore[arg-type]  # fmt: skip
    firestore.session_ref(child_id).create(child.to_doc())
    asked = ParentQuestion(question_id=f"pq-{child_id}-1-0", text="Which bucket?", blocking=False, seq=1, index=0)
    assert child_questions.record(child, asked, at)
    questions.create_question(Question(
        question_id=question_id, session_id=parent_id, transcript_id=parent_id, channel=f"C{uid}",
        thread_ts="1700000000.000100", text="Which region?", options=[], blocking=True, call_id=None, asked_at=at,
        requester="U1", seq=1, call_index=0,
    ))  # fmt: skip
    step = Step(seq=running.next_seq, session_id=parent_id, kind=StepKind.TOOL_RESULTS, content=None, audit=[], at=at)
    record = [Waiting(seq=1, index=0, kind=WaitKind.QUESTION, key=question_id)]
    notes = steps.commit_step(running, step, lease_seconds=60, pausing_on_record=record,
                              fields=SessionUpdate(status=SessionStatus.PAUSED))  # fmt: skip
    assert [n.question_id for n in notes] == [asked.question_id]
    paused = sessions.get_session(parent_id)
    assert paused is not None
    assert (paused.status, paused.waiting) == (SessionStatus.PAUSED, record)
    assert [n.question_id for n in paused.notes] == [asked.question_id]
    assert not child_questions.asked_ref(parent_id, child_id).get().exists  # read: its record deleted


@pytest.mark.timeout(300)
def test_an_answer_that_reaches_a_child_before_it_pauses_is_the_answer_its_model_reads(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task delivered at once on a thread of its own, in this process. A parent delegates one blocking child,
    which asks it a blocking question; the question wakes the parent, whose own delivery answers it while the child's
    turn has not paused yet (held here until the answer is stored): the answer is noted on the child, and the child's
    pause finds its wait resolved and resumes in place. Before, that resumption read the question as the child's run
    held it, unanswered, and told its model "The session that delegated your task ended without answering": the
    answer was lost, the child asked again and its parent, which had answered, could not (the asking tree's flaky
    unscripted request, on a busy machine). Now it reads the question as its pause's commit read it, answered."""
    tag = uuid.uuid4().hex[:10]
    task = f"migrate the orders table [{tag}-t]"
    ask = delegation.ask_parent

    def answered_before_the_pause(child: Session, **kwargs: Any) -> str:
        asked = ask(child, **kwargs)

        def answer() -> str | None:
            stored = sessions.get_session(child.session_id)
            return stored.parent_question.answer if stored and stored.parent_question else None

        wait_for(answer, timeout=60, what="the parent's answer")
        return asked

    with counted_rig(stack, monkeypatch, **trees.ROOMY) as rig:
        rig.script(G.call("delegate", task=task))
        parent_id = rig.start(f"migrate the orders {tag}")
        child_id = ids.child_id(parent_id, 1, 0)
        answers = G.call("answer_child", child_id=child_id, answer=f"postgres ({tag}-a)")
        rig.gemini.script(G.matching(f"{tag}-q", answers))  # the parent's request that holds the question
        rig.script(*[G.text("Noted.") for _ in range(4)])  # its other turns (its requests hold the rig's id)
        rig.gemini.script(  # the child's: the answer's, else its task's (the question, then a result of its own)
            G.matching(f"{tag}-a", G.text("Migrated the orders table to postgres.")),
            G.matching(f"{tag}-t", G.call("ask_parent", question=f"Which database? ({tag}-q)", blocking=True)),
            G.matching(f"{tag}-t", G.text("Nobody answered; I chose postgres myself.")),
        )
        monkeypatch.setattr(delegation, "ask_parent", answered_before_the_pause)
        tasks_of = DirectTasks()
        with deps.override(tasks=tasks_of):
            tasks_of.dispatch(parent_id, "parent")
            wait_for(lambda: not any(t.is_alive() for t in tasks_of.threads), timeout=240, what="every delivery")
        journal = rig.gemini.requests()
        child = rig.session(child_id)
        rig.gemini.reset()  # the plain replies scripted with room to spare
    answered = [r for r in journal if "answer_child" in {f["name"] for f in function_responses(r)}]
    assert answered, "the parent never answered"
    [noted] = [f["response"]["result"] for f in function_responses(answered[0]) if f["name"] == "answer_child"]
    assert noted == {"answered": child_id, "child": "noted", "question_id": f"pq-{child_id}-1-0",
                     "question": f"Which database? ({tag}-q)", "still_waiting": []}  # fmt: skip
    # the child had not paused: the race this test holds
    childs = [r for r in journal if f"{tag}-t" in json.dumps(r["body"]) and rig.uid not in json.dumps(r["body"])]
    resumed = [f["response"] for f in function_responses(childs[1]) if f["name"] == "ask_parent"]
    assert resumed == [{"result": {"answer": f"postgres ({tag}-a)", "from": "the session that delegated your task"}}]
    assert (child.status, child.result) == (SessionStatus.DONE, "Migrated the orders table to postgres.")
    assert [r["reply"]["source"] for r in journal if tag in json.dumps(r["body"])].count("exhausted") == 0


def _child_paused_on(uid: str, held: list[ParentQuestion], waits_on: list[ParentQuestion]) -> tuple[Session, str]:
    """A running parent and its child, paused on its turn's blocking questions ``waits_on`` (it holds ``held``)."""
    at = firestore.now()
    parent_id, child_id = f"ev-pq-{uid}", f"ch-pq-{uid}"
    common = {"channel": f"C{uid}", "thread_ts": "1700000000.000100", "trigger_ts": "1700000000.000100",
              "trigger_user": "U1", "created_at": at}  # fmt: skip
    parent = Session.new(session_id=parent_id, kind=SessionKind.MENTION, text="parent", status=SessionStatus.RUNNING,
                         transcript_writer=parent_id, next_seq=3, **common)  # type: ignore[arg-type]  # fmt: skip
    child = Session.new(session_id=child_id, kind=SessionKind.CHILD, text="child task", status=SessionStatus.PAUSED,
                        transcript_writer=child_id, parent_session_id=parent_id, root_session_id=parent_id,
                        parent_transcript=parent_id, delegate_blocking=True, parent_questions=held,
                        waiting=[Waiting(q.seq, q.index, WaitKind.PARENT_ANSWER, q.question_id) for q in waits_on],
                        **common)  # type: ignore[arg-type]  # fmt: skip
    firestore.session_ref(parent_id).create(parent.to_doc())
    firestore.session_ref(child_id).create(child.to_doc())
    return parent, child_id


def _answer_child(parent: Session, index: int, **args: str) -> dict[str, Any]:
    """The parent's answer_child call ``index`` of its turn 2, run as its turn runs it (a re-run: the same call)."""
    ctx = ToolContext(parent, 2, index, f"call-{index}", ThreadSurface(f"C{parent.session_id}", "1.0", "1.0"))
    done = builtin.answer_child.run(args, ctx)
    assert isinstance(done, ToolResult)
    return done.to_dict()


def _asked(child_id: str, seq: int, index: int, text: str, *, blocking: bool = True) -> ParentQuestion:
    return ParentQuestion(f"pq-{child_id}-{seq}-{index}", text, blocking, seq, index, asked_at=firestore.now())


def test_a_re_run_of_the_parents_answer_child_call_answers_no_other_question(stack: Stack, uid: str) -> None:
    """Defect: answer_child never goes through the ledger, and a takeover re-runs the parent's turn. The child waits
    on two questions; the turn's first call answered the first ("eu") and the worker died before the step committed.
    The re-run of that call found the second question the oldest open one and answered it "eu" (the child resumed),
    and the turn's second call, "4", was refused. Now the answer keeps the call that gave it: the re-run says what it
    did again and answers nothing else, and the second call answers the second question."""
    child_id = f"ch-pq-{uid}"
    first, second = _asked(child_id, 1, 0, "Which cluster?"), _asked(child_id, 1, 1, "How many replicas?")
    parent, _ = _child_paused_on(uid, [first, second], [first, second])
    recorded = DirectTasks(send=lambda session_id, name, attempts: attempts.append(name))
    with deps.override(tasks=recorded):
        said = _answer_child(parent, 0, child_id=child_id, answer="eu")
        assert _answer_child(parent, 0, child_id=child_id, answer="eu") == said  # the re-run after a crash
        assert said["result"]["question_id"] == first.question_id, said
        assert said["result"]["child"] == "noted"
        resumed = _answer_child(parent, 1, child_id=child_id, answer="4")
        assert resumed["result"]["question_id"] == second.question_id, resumed
        assert resumed["result"]["child"] == "resumed"
        assert _answer_child(parent, 1, child_id=child_id, answer="4") == resumed
        # the child's next turn asks again before the parent's turn is re-run: the re-run still finds its answer
        asking = sessions.get_session(child_id)
        assert asking is not None
        assert child_questions.record(asking, _asked(child_id, 2, 0, "Which zone?"), firestore.now())
        again = _answer_child(parent, 0, child_id=child_id, answer="eu")["result"]
        assert {**again, "still_waiting": []} == {**said["result"], "still_waiting": []}  # what waits: as it is now
        assert again["still_waiting"] == [{"question_id": f"pq-{child_id}-2-0", "question": "Which zone?"}]
    child = sessions.get_session(child_id)
    assert child is not None
    assert [(q.question_id, q.answer) for q in child.parent_questions] == [
        (first.question_id, "eu"), (second.question_id, "4"), (f"pq-{child_id}-2-0", None)]  # fmt: skip
    assert child.status == SessionStatus.QUEUED  # woken: its turn runs again
    assert len(recorded.attempts) == 1, recorded.attempts  # queued once, by the call that resumed it
    assert recorded.attempts[0].endswith(f"answered-{second.question_id}")


def test_an_answer_without_question_id_answers_what_the_paused_child_waits_on_first(stack: Stack, uid: str) -> None:
    """Defect: a child's non-blocking question of an earlier turn nobody answered stayed its oldest open one, so the
    parent's answer without a question_id to the blocking question the child now paused on landed on the old one and
    the child stayed paused until the sweep. Now the answer goes to the question the paused turn waits on."""
    child_id = f"ch-pq-{uid}"
    old = _asked(child_id, 2, 0, "Should I also clean the logs?", blocking=False)
    now_asked = _asked(child_id, 5, 0, "Which cluster?")
    parent, _ = _child_paused_on(uid, [old, now_asked], [now_asked])
    recorded = DirectTasks(send=lambda session_id, name, attempts: attempts.append(name))
    with deps.override(tasks=recorded):
        said = _answer_child(parent, 0, child_id=child_id, answer="eu")
    assert said["result"]["question_id"] == now_asked.question_id, said
    assert said["result"]["child"] == "resumed"
    assert said["result"]["still_waiting"] == [{"question_id": old.question_id, "question": old.text}]
    child = sessions.get_session(child_id)
    assert child is not None
    assert child.status == SessionStatus.QUEUED  # woken: its turn runs again

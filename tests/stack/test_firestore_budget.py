"""The Firestore budget: reads, writes and queries per flow (`bench/cost.py`'s ``FIGURES``), swept item included.

The product's own code runs in this process (the ingress handler, the agent_session
handler, the sweep) against the emulator, with a client whose gRPC channel counts
every operation (``bench/firestore_ops.py``) on a database of its own. The numbers
are in ``bench/budget.json``, the same file ``BENCHMARKS.md``'s budget table is
printed from: a change that costs more fails here until the budget is raised on
purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.services.firestore.client import FirestoreClient

from bench import cost
from bench.firestore_ops import Ops
from infra import slack_payloads as events
from infra.fakes.gemini.client import FakeGemini
from infra.stack import Stack
from shared.state.models import SessionStatus
from tests.rigs import counted_rig

pytestmark = pytest.mark.stack


@pytest.fixture
def rig(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[cost.Rig]:
    """Counted Firestore; tasks go to a sink, so every session runs here, once, where it is counted."""
    # Answers streamed, the product's default and what `make bench` measures (the suite's stack turns it off).
    with counted_rig(stack, monkeypatch, SLACK_STREAM="true") as rig:
        yield rig


def test_every_figure_has_a_budget_and_a_description() -> None:
    assert set(cost.load_budget()) == set(cost.FIGURES)
    for figure, allowed in cost.load_budget().items():
        assert set(allowed) == set(cost.BILLED), figure


def test_firestore_operations_stay_within_the_budget(rig: cost.Rig) -> None:
    measured: dict[str, Ops] = {}
    for scenario in cost.SCENARIOS:
        measured.update(scenario(rig))
        rig.script_used()
    assert set(measured) == set(cost.FIGURES)
    table = "\n".join(f"  {name}: {ops.billed()}" for name, ops in measured.items())
    problems = cost.over_budget(measured, cost.load_budget())
    assert not problems, "over budget:\n  " + "\n  ".join(problems) + f"\nmeasured:\n{table}"
    # A count is stable: the same path twice costs the same.
    again = cost.mention_and_one_turn(rig)
    assert {k: v.billed() for k, v in again.items()} == {k: measured[k].billed() for k in again}


# Round trips to Firestore of the operator's answer and decision and the deliveries that resume a session (issue
# 28.1), each an RPC the handler or the worker waits for: the answer (or decision) reads the question (or approval),
# its asker and the continuation that would resume its turn in one batch outside a transaction, then commits once,
# every update fenced by the update time it was read at and every new document a create() (no BeginTransaction: the
# transaction runs only when a fence fails; the answer here is a thread reply, which also records its event and reads
# its thread's questions); a continuation's claim reads the session, its transcript's root, its question and the
# transcript's steps in one batch; each step commit reads the session and the root in one; a ledger call's started
# record is one commit fenced by the lease without a read, its done record is written in the commit of the step that
# carries its result. Before
# round 3's session 5: answer 6, approve 4 (the continuation's existence read apart in the click's transaction);
# before session 6: answer 5, approve 3 (the click's transaction), continuation 16, approved_run 20 (an empty read;
# the approval and its ledger entry read apart; the done record its own commit), ledger_outward_call 4. A
# continuation's transcript query ran beside its claim (an RPC counted here, not waited for after the claim), and
# what its waiting record came to is read in ONE batch for every kind of wait (an approval with its call's ledger
# entry). Since round 3's session 7, an answer's continuation reads the answered question in its claim's own batch
# (its task names the record it resumes) and stores the step resuming its turn in the claim's commit (no transaction
# of its own): continuation 15 before. Since then, an approval's continuation is told its record too, and its claim
# reads the decision and the approved call's ledger entry in its own batch: approved_run 17 before. Since round 3's
# session 8, a continuation's first step commit after its claim is one commit fenced on the update times the claim
# and this worker's own writes left the session and its root with (``shared.state.step_fence``; a transaction when
# either changed): approved_run 16 before (the resumed step's begin, read and commit). Since round 3's session 13, a
# continuation's task names its transcript's first free step id too, and its claim reads the steps before it in the
# same batch (used while that id is still free): no query beside the claim (continuation 11 and approved_run 14
# before; one read more: the free id's). Since round 3's session 14, every plain step commit after a claim that saw
# its session settled rests on the one before it (a continuation's turn after its resumed step; a mention's and a
# child's too, fenced by the session alone), and so does its end done (a child's own end too): continuation 10 and
# approved_run 13 before (the turn's begin and read, and the end's), each such commit one write more for a
# continuation (its root's writer, as it is: the fence on the root) and two reads less.
ROUND_TRIPS = {"answer": 4, "approve": 2, "continuation": 6, "approved_run": 9, "ledger_outward_call": 3}
# The click's own RPCs, in order (the decision: a batched read of 3 documents, one commit of 4 writes: the approval,
# its thread, the continuation and the asker; before round 3's session 11, 5: the press was claimed too).
CLICK_TRACES = {"approve": ("BatchGetDocuments 3r", "Commit 4w")}


def test_resuming_makes_no_more_round_trips_than_budgeted(rig: cost.Rig) -> None:
    measured = {**cost.ask_answer_continuation(rig), **cost.approve_run_resume(rig), **cost.outward_call(rig)}
    rig.script_used()
    found = {name: measured[name].rpcs for name in ROUND_TRIPS}
    assert found == ROUND_TRIPS, f"round trips {found}, budgeted {ROUND_TRIPS}"
    for name, trace in CLICK_TRACES.items():
        assert measured[name].trace == trace, measured[name].trace
    assert "BeginTransaction" not in measured["answer"].trace, measured["answer"].trace
    for name, claim, claimed_with in (
        # the session, its root and question, its transcript's 3 steps and the free id after them; the resumed step
        ("continuation", "BatchGetDocuments 7r", "Commit 3w"),
        # the session, its root, the approval, its call's entry, its transcript's 3 steps and the free id
        ("approved_run", "BatchGetDocuments 8r", "Commit 2w"),
    ):
        steps = measured[name].trace
        assert not [entry for entry in steps if entry.endswith(" 0r")], f"{name} read nothing: {steps}"
        assert not [entry for entry in steps if entry.startswith("RunQuery")], steps  # the transcript is not queried
        # The claim reads the session and its transcript's root, and what its task names (an answer's question; an
        # approval and its call's ledger entry; the transcript's steps) in one batch; an answer's continuation stores
        # its resumed step in the claim's commit; an approval's writes next (the ledger's records, then the step's).
        rest = list(steps)
        claimed = next(i for i, entry in enumerate(rest) if entry.startswith("Commit"))
        assert rest[claimed - 1] == claim, f"{name}: {steps}"
        assert rest[claimed] == claimed_with, f"{name}: {steps}"
        assert not rest[claimed + 1].startswith("BatchGet"), f"{name}: {steps}"  # nothing of the record read again
    # After an approval's claim: the approved call's started record (fenced by the lease, no read), the example tool's
    # own write, then the resumed step with the call's done record, fenced on the update times the claim and the
    # worker's own writes left the session and its root with: one commit, no transaction (``step_fence``).
    run = list(measured["approved_run"].trace)
    claimed = run.index("Commit 2w")
    assert run[claimed + 1 : claimed + 4] == ["Commit 2w", "Commit 1w", "Commit 4w"], run


def test_a_mention_in_a_thread_with_no_running_session_reads_the_thread_once(rig: cost.Rig) -> None:
    """A mention in a thread whose session ended starts a new session for: the thread's document read (nothing
    open), its running session looked up as of that read (none), then what a top-level mention costs. The thread is
    not read again: from round 3's session 8 it was whenever no session ran (one read more), for a session that
    could have asked and paused between the two reads; read at one moment, none can."""
    first, reply = rig.mention("what is the status?"), dict[str, Any]()
    top_level = rig.measure(lambda: rig.ingress(first, reply))
    session_id = str(reply["session_id"])
    rig.script(FakeGemini.text("All green."))
    rig.deliver(session_id)
    rig.expect(session_id, SessionStatus.DONE)
    session = rig.session(session_id)
    channel, thread_ts = session.origin.channel, session.origin.thread_ts
    text = f"and the staging one? [{rig.uid}]"
    ts = str(rig.slack.chat_postMessage(channel=channel, thread_ts=thread_ts, text=text)["ts"])
    again = events.signed(events.mention(channel=channel, ts=ts, thread_ts=thread_ts, text=text),
                          event_id=f"Ev{rig.uid}again")  # fmt: skip
    started: dict[str, Any] = {}
    in_thread = rig.measure(lambda: rig.ingress(again, started))
    assert started.get("session_id") not in (None, session_id), started
    assert in_thread.trace == ("BatchGetDocuments 1r", "RunQuery 1r", *top_level.trace), in_thread.trace


def test_a_sweep_with_an_aborted_commit_is_measured_again(rig: cost.Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine the emulator aborts a commit now and then, and the client runs its transaction again,
    reading again: a figure that is the difference of two sweeps would count those reads as the item's. The commit
    of the first transaction in the sweep of two stale questions is aborted once here: the counter sees the retry,
    and that sweep is measured again (``cost.unretried``), so the figure stays what one more question costs."""
    real_commit = FirestoreClient.commit
    armed: list[bool] = []
    retried: list[bool] = []

    def aborted_once(self: FirestoreClient, request: Any = None, **kwargs: Any) -> Any:
        sent = request if isinstance(request, dict) else {}
        if sent.get("transaction") and armed:
            armed.clear()
            retried.append(True)
            self.rollback(request={"database": sent["database"], "transaction": sent["transaction"]})
            raise gexc.Aborted("Transaction lock timeout (contended)")  # type: ignore[no-untyped-call]
        return real_commit(self, request, **kwargs)

    stale = cost._stale_question

    def stale_question(rig: cost.Rig, at: Any, age: Any, n: int) -> None:
        stale(rig, at, age, n)
        if n == 1 and not retried:  # the second of two: the sweep that follows has its first commit aborted
            armed.append(True)

    monkeypatch.setattr(FirestoreClient, "commit", aborted_once)
    monkeypatch.setattr(cost, "_stale_question", stale_question)
    measured = cost.sweep_items(rig)
    assert retried == [True]
    budget = cost.load_budget()
    for name in ("sweep_reminded_question", "sweep_abandoned_question"):
        assert measured[name].billed() == budget[name], (name, measured[name].billed())

"""Firestore cost of the product's paths, counted on the wire: the budget table and the test that enforces it.

How it is measured and read: ``bench/sections/cost.md`` (the section's text in ``BENCHMARKS.md``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Unpack

from bench.figures import Figure, Section, table, text
from bench.firestore_ops import Ops
from bench.harness import BENCH_DIR, STACK_FILE, Bench, phase
from bench.rig import Rig, environment
from infra import stack as local
from infra.fakes.gemini.client import FakeGemini
from infra.stack import ROOT
from shared import logs
from shared.state import firestore, ids
from shared.state.models import Question, SessionKind, SessionStatus, WaitKind
from shared.state.session_model import Session, SessionUpdate

__all__ = ["FIGURES", "SCENARIOS", "Rig", "environment", "load_budget", "measure_all", "over_budget"]

BUDGET_FILE = Path(__file__).with_name("budget.json")

# What each figure is, in the words the budget table uses; the keys are the figures' names.
FIGURES: dict[str, str] = {
    "mention": "a mention at ingress: verify, de-duplicate, create the session, enqueue",
    "mention_with_limits": (
        "the same mention with the rate limits on: the person's and the channel's counters incremented in its commit"
    ),
    "session_one_turn": "agent_session for a mention answered in one model turn: claim, prompt, turn, post, end",
    "agent_turn": "one more model turn with a tool call (model step and tool step, each persisted)",
    "agent_turn_with_budgets": (
        "the same turn with the daily token budgets on: the requester's day read and the day's total queried before "
        "the turn, its tokens added in the turn's commit"
    ),
    "ledger_outward_call": (
        "the ledger's cost for one call of an outward, non-idempotent tool (started and done records, each fenced "
        "by the lease; the example tool also writes its own record). The tool runs as `safe` (`TOOL_TIERS`), so "
        "no approval is asked and the figure is the ledger alone"
    ),
    "ask": "agent_session for a mention whose first turn asks a blocking question: claim to paused",
    "answer": "the operator's reply at ingress: answer lookup, answer + continuation in one transaction",
    "continuation": "agent_session for the continuation, answered in one model turn: claim to done",
    "ask_answer_continuation": "the whole cycle: ask + answer + continuation",
    "approval_request": "agent_session for a mention whose first turn calls an approve-tier tool: card, to paused",
    "approve": "the operator's Approve at slack_interactivity: the decision and the resuming session, one transaction",
    "approved_run": (
        "agent_session for that resumption: the call run once through the ledger (the example tool writes one record "
        "of its own), then one model turn to done"
    ),
    "approve_run_resume": "the whole approval cycle: request + approve + run and resume",
    "delegate": (
        "agent_session for a mention whose first turn delegates one blocking task: the child created with its "
        "allotment of the tree's budget (what ended children gave back read from the tree's view), the status "
        "message, the child's task, the parent paused"
    ),
    "child_result": (
        "agent_session for that child, answered in one model turn: its end stored (its own document, and its line "
        "and what it gives back in the tree's view, the root untouched), then its siblings and parent read to queue "
        "the parent's task"
    ),
    "delegate_resume": (
        "agent_session for the parent again: its claim checks that its children ended, their results become the "
        "calls' responses, to done"
    ),
    "delegate_result_cycle": "the whole delegation cycle: delegate + child + resume",
    "ask_parent": (
        "agent_session for a child whose first turn asks its parent a blocking question: the question stored, the "
        "parent's wait released and its task queued, the child paused"
    ),
    "answer_child": (
        "agent_session for that parent, released by the question: its claim (the child's question, the delegate "
        'call answered "still running"), `answer_child` (the answer stored, the child\'s task queued) and a model '
        "turn that answers the thread, to done"
    ),
    "mcp_call": (
        "one more model turn calling a read-only MCP tool (`lookup_service` on the sample server) than the same "
        "session calling an inward Python tool: what the MCP call itself costs in Firestore"
    ),
    "feedback_press": "a 👍 on a final answer at slack_interactivity: the session read, the feedback stored",
    "stop_press": (
        "the requester's Stop at slack_interactivity on a session paused at a question: the stop, its question "
        "closed, its children looked up"
    ),
    "mention_rate_limited": (
        "a mention refused by the hourly per-user limit at ingress: counted in its commit, over, taken back, "
        "nothing queued"
    ),
    "sweep_empty": "a sweep that finds nothing (its six indexed queries, the notices still owed and yesterday's "
    "feedback, an empty page each)",
    "sweep_reminded_question": (
        "one more open question older than 24h in a sweep: reminded (its paused session is read by the sweep's "
        "paused query, and found asking; the question read again once its reminder is claimed)"
    ),
    "sweep_abandoned_question": "one more open question past the abandon age in a sweep: abandoned, session closed",
    "sweep_dead_session": "one more running session with a long-dead lease in a sweep: silent exit, narration queued",
}
BILLED = ("reads", "writes", "queries")


def load_budget() -> dict[str, dict[str, int]]:
    budget: dict[str, dict[str, int]] = json.loads(BUDGET_FILE.read_text())
    return budget


def over_budget(measured: dict[str, Ops], budget: dict[str, dict[str, int]]) -> list[str]:
    """Every figure whose count exceeds its budget, or that has no budget; empty when all fit."""
    problems = []
    for name, ops in measured.items():
        allowed = budget.get(name)
        if allowed is None:
            problems.append(f"{name}: no budget in {BUDGET_FILE.name} (measured {ops.billed()})")
            continue
        for kind in BILLED:
            if getattr(ops, kind) > allowed[kind]:
                problems.append(f"{name}: {getattr(ops, kind)} {kind} > budget {allowed[kind]}")
    return problems


# --- the scenarios ---------------------------------------------------------------------------------


LIMITS_ON = {"USER_SESSIONS_PER_HOUR": "1000", "CHANNEL_SESSIONS_PER_HOUR": "1000", "USER_RUNNING_SESSIONS": "100",
             "CHANNEL_RUNNING_SESSIONS": "100"}  # fmt: skip


BUDGETS_ON = {"USER_DAILY_TOKENS": "1000000000", "WORKSPACE_DAILY_TOKENS": "1000000000000"}


def session_cost(rig: Rig, text: str, *replies: dict[str, Any]) -> Ops:
    """The operations of a new session's one delivery (a mention of ``text``), the model replying ``replies``; it
    ends done."""
    session_id = rig.start(text)
    rig.script(*replies)
    return rig.delivered(session_id, SessionStatus.DONE)


def mention_and_one_turn(rig: Rig) -> dict[str, Ops]:
    request, reply = rig.mention(), dict[str, Any]()
    ops = {"mention": rig.measure(lambda: rig.ingress(request, reply))}
    with environment(**LIMITS_ON):
        limited, admitted = rig.mention(), dict[str, Any]()
        ops["mention_with_limits"] = rig.measure(lambda: rig.ingress(limited, admitted))
    assert "session_id" in admitted, admitted
    session_id = str(reply["session_id"])
    rig.script(FakeGemini.text("All green."))
    ops["session_one_turn"] = rig.delivered(session_id, SessionStatus.DONE)
    return ops


def agent_turn(rig: Rig) -> dict[str, Ops]:
    """One tool turn more costs the difference between these two sessions (and with the daily token budgets on)."""
    figures = {}
    for name, env in (("agent_turn", {}), ("agent_turn_with_budgets", BUDGETS_ON)):
        cost = []
        with environment(**env):
            for tool_turns in (1, 2):
                reads = [FakeGemini.call("read_thread", limit=5)] * tool_turns
                cost.append(session_cost(rig, "read the thread, then answer", *reads, FakeGemini.text("Done.")))
        figures[name] = cost[1] - cost[0]
    return figures


def outward_call(rig: Rig) -> dict[str, Ops]:
    """What the tool-call ledger adds: a turn calling an outward, non-idempotent tool, minus the same turn calling an
    inward one (both post nothing else); the difference is the ledger's started and done records.

    An outward tool needs an operator's approval by default; ``restart_service`` is made ``safe`` here (as the tests
    do) so that the call runs at once and the difference is the ledger's, not an approval's.
    """
    cost = []
    with environment(TOOL_TIERS=json.dumps({"restart_service": "safe"})):
        for call in (FakeGemini.call("read_thread", limit=5), FakeGemini.call("restart_service", name="api",
                                                                                  environment="staging")):  # fmt: skip
            cost.append(session_cost(rig, "do one thing, then answer", call, FakeGemini.text("Done.")))
    return {"ledger_outward_call": cost[1] - cost[0]}


def ask_answer_continuation(rig: Rig) -> dict[str, Ops]:
    session_id = rig.start("set up the database")
    rig.script(FakeGemini.call("ask_operator", question="sqlite or postgres?", options=["sqlite", "postgres"]))
    ops = {"ask": rig.delivered(session_id, SessionStatus.PAUSED)}
    question_id = rig.session(session_id).awaited_question
    assert question_id, "the session paused without a question"
    rig.script(FakeGemini.text("Going with postgres."))
    request, reply = rig.reply(session_id, "2"), dict[str, Any]()
    ops["answer"] = rig.measure(lambda: rig.ingress(request, reply))
    assert reply.get("answer") == "answered", reply
    continuation = ids.resumed_by(question_id)
    ops["continuation"] = rig.delivered(continuation, SessionStatus.DONE)
    ops["ask_answer_continuation"] = ops["ask"] + ops["answer"] + ops["continuation"]
    return ops


def approve_run_resume(rig: Rig) -> dict[str, Ops]:
    """A risky call: its approval card (the session pauses), the operator's Approve, and the continuation that runs
    it through the ledger and answers."""
    from shared.state import approvals

    session_id = rig.start("scale the api")
    rig.script(FakeGemini.call("scale_service", name="api", replicas=3))
    ops = {"approval_request": rig.delivered(session_id, SessionStatus.PAUSED)}
    [approval] = approvals.get_approvals(rig.session(session_id).awaited(WaitKind.APPROVAL))
    request = rig.approve_press(approval, rig.session(session_id).origin.thread_ts)
    decided: dict[str, Any] = {}
    ops["approve"] = rig.measure(lambda: rig.interactivity(request, decided))
    assert decided.get("decision") == "decided", decided
    rig.script(FakeGemini.text("Scaled."))
    continuation = ids.resume_id(session_id, approval.seq)
    ops["approved_run"] = rig.delivered(continuation, SessionStatus.DONE)
    ops["approve_run_resume"] = ops["approval_request"] + ops["approve"] + ops["approved_run"]
    return ops


def delegate_result(rig: Rig) -> dict[str, Ops]:
    """A blocking delegation of one task: the parent pauses, the child answers and queues it, the parent answers."""
    parent = rig.start("compare the error rates")
    rig.script(FakeGemini.call("delegate", task=f"count the errors of the api [{rig.uid}]"))
    ops = {"delegate": rig.delivered(parent, SessionStatus.PAUSED)}
    child = ids.child_id(parent, 1, 0)
    rig.script(FakeGemini.text("The api logged 3 errors."))
    # the child's end wakes the parent's paused turn: its continuation is queued
    ops["child_result"] = rig.delivered(child, SessionStatus.RESUMED, then=parent)
    rig.script(FakeGemini.text("The api had 3 errors."))
    ops["delegate_resume"] = rig.delivered(ids.resume_id(parent, 1), SessionStatus.DONE)
    ops["delegate_result_cycle"] = ops["delegate"] + ops["child_result"] + ops["delegate_resume"]
    return ops


def child_asks_parent(rig: Rig) -> dict[str, Ops]:
    """A child's blocking ``ask_parent``, its parent's ``answer_child``, then both run to their ends (uncounted)."""
    parent = rig.start("migrate the orders table")
    task = f"migrate the orders table [{rig.uid}]"
    child = ids.child_id(parent, 1, 0)
    rig.script(
        FakeGemini.call("delegate", task=task),  # the parent
        FakeGemini.call("ask_parent", question="Which database?", blocking=True),  # the child
        FakeGemini.call("answer_child", child_id=child, answer="postgres"),  # the parent, released by the question
        FakeGemini.text("I answered the helper; it will report."),
        FakeGemini.text("Migrated the orders table to postgres."),  # the child, resumed by the answer
    )
    rig.deliver(parent)
    rig.expect(parent, SessionStatus.PAUSED)
    ops = {"ask_parent": rig.delivered(child, SessionStatus.PAUSED)}
    # the child's result reaches the thread in a session of its own
    ops["answer_child"] = rig.delivered(ids.resume_id(parent, 1), SessionStatus.DONE)  # the woken turn's
    rig.deliver(child)
    rig.expect(child, SessionStatus.DONE)
    return ops


def mcp_call(rig: Rig) -> dict[str, Ops]:
    """A turn calling the sample MCP server's read-only ``lookup_service``, minus the same turn calling an inward
    Python tool: what the MCP call adds (its listing is cached per process and costs no Firestore operation)."""
    url = rig.stack.start_mcp_server("mcp_cost")
    try:
        cost = []
        with environment(MCP_SERVERS=json.dumps([{"name": "demo", "url": url}])):
            for call in (FakeGemini.call("read_thread", limit=5), FakeGemini.call("mcp.demo.lookup_service",
                                                                                      name="api")):  # fmt: skip
                cost.append(session_cost(rig, "look up one thing, then answer", call, FakeGemini.text("Done.")))
    finally:
        rig.stack.stop_process("mcp_cost")
    return {"mcp_call": cost[1] - cost[0]}


def requester_press(rig: Rig, session: Session, message_ts: str, action_id: str, value: str, *,
                    said: tuple[str, str]) -> Ops:  # fmt: skip
    """The operations of the requester's press of ``action_id`` on the message ``message_ts`` in ``session``'s
    thread, whose handler says ``said`` (a field of its reply and that field's value)."""
    request = rig.press(session.origin.channel, message_ts, session.origin.thread_ts, action_id=action_id,
                        value=value, user=session.origin.trigger_user)  # fmt: skip
    reply: dict[str, Any] = {}
    ops = rig.measure(lambda: rig.interactivity(request, reply))
    assert reply.get(said[0]) == said[1], reply
    return ops


def surface_presses(rig: Rig) -> dict[str, Ops]:
    """A 👍 on a final answer, and the requester's Stop on a session paused at a question."""
    from shared.slack import blocks

    done = rig.start("what is the status?")
    rig.script(FakeGemini.text("All green."))
    rig.deliver(done)
    ended = rig.session(done)
    assert ended.stream.answer_ts, "the final answer was not recorded"
    value = blocks.feedback_value(done, "positive")
    ops = {"feedback_press": requester_press(rig, ended, ended.stream.answer_ts, blocks.FEEDBACK_ACTION, value,
                                             said=("feedback", "stored"))}  # fmt: skip
    asks = FakeGemini.call("ask_operator", question="sqlite or postgres?", options=["sqlite", "postgres"])
    paused = rig.paused("set up the database", asks)
    session = rig.session(paused)
    ops["stop_press"] = requester_press(rig, session, session.origin.thread_ts, blocks.STOP_ACTION, paused,
                                        said=("stop", "stopped"))  # fmt: skip
    return ops


def rate_limited_mention(rig: Rig) -> dict[str, Ops]:
    """A second mention from the same person within the hour, with a limit of one an hour: refused at ingress."""
    person = f"U{rig.uid}"  # no other scenario's starts count against this person's hour
    with environment(USER_SESSIONS_PER_HOUR="1"):
        admitted: dict[str, Any] = {}
        rig.ingress(rig.mention(user=person), admitted)
        assert "session_id" in admitted, admitted
        request, refused = rig.mention(user=person), dict[str, Any]()
        ops = {"mention_rate_limited": rig.measure(lambda: rig.ingress(request, refused))}
    assert "session_id" not in refused, refused
    assert refused.get("limited"), refused
    return ops


def _old_session(rig: Rig, what: str, n: int, created_at: datetime, **fields: Unpack[SessionUpdate]) -> Session:
    """A mention's session ``{what}-…-{n}`` (not stored yet) in a new thread of its own, started at ``created_at``."""
    channel, ts = rig.new_thread(f"{what} request {n} [{rig.uid}]")
    return Session.new(
        session_id=f"{what}-{rig.uid}-{n}",
        kind=SessionKind.MENTION,
        channel=channel,
        thread_ts=ts,
        trigger_ts=ts,
        trigger_user="U0HUMAN",
        text=f"{what} request",
        created_at=created_at,
        **fields,
    )


def _stale_question(rig: Rig, at: datetime, age: timedelta, n: int) -> None:
    """An open blocking question asked ``age`` ago, its session paused, as a real ask leaves them."""
    session = _old_session(rig, "old", n, at - age, status=SessionStatus.PAUSED)
    channel, ts = session.origin.channel, session.origin.thread_ts
    post_ts = str(rig.slack.chat_postMessage(channel=channel, thread_ts=ts, text="which one?")["ts"])
    question = Question(
        question_id=f"q-old-{rig.uid}-{n}",
        session_id=session.session_id,
        transcript_id=session.session_id,
        channel=channel,
        thread_ts=ts,
        text="which one?",
        options=[],
        blocking=True,
        call_id=f"call-{n}",
        asked_at=at - age,
        post_ts=post_ts,
        requester="U0HUMAN",
    )
    session.question_id = question.question_id
    db = firestore.db()
    batch = db.batch()
    batch.set(db.collection(firestore.SESSIONS).document(session.session_id), session.to_doc())
    batch.set(db.collection(firestore.QUESTIONS).document(question.question_id), question.to_doc())
    batch.commit()


def _dead_session(rig: Rig, at: datetime, n: int) -> None:
    """A running session whose worker died two hours ago and whose task ran out of retries."""
    session = _old_session(
        rig,
        "dead",
        n,
        at - timedelta(hours=3),
        status=SessionStatus.RUNNING,
        lease_until=at - timedelta(hours=2),
        worker="gone",
        updated_at=at - timedelta(hours=2),
    )
    firestore.db().collection(firestore.SESSIONS).document(session.session_id).set(session.to_doc())


def sweep_items(rig: Rig) -> dict[str, Ops]:
    """The sweep's fixed cost, and what one more stale item of each kind adds to it."""
    at = firestore.now()
    makers: dict[str, Callable[[int], None]] = {
        "sweep_reminded_question": lambda n: _stale_question(rig, at, timedelta(hours=30), n),
        "sweep_abandoned_question": lambda n: _stale_question(rig, at, timedelta(hours=100), n),
        "sweep_dead_session": lambda n: _dead_session(rig, at, n),
    }
    rig.wipe()
    ops = {"sweep_empty": rig.measure(lambda: rig.sweep(at))}
    for name, make in makers.items():
        cost = []
        for count in (1, 2):

            def sweep_of(count: int = count, make: Callable[[int], None] = make) -> Ops:
                rig.wipe()
                for n in range(count):
                    make(n)
                return rig.measure(lambda: rig.sweep(at))

            cost.append(unretried(sweep_of))
        ops[name] = cost[1] - cost[0]
    return ops


def unretried(measure: Callable[[], Ops], tries: int = 3) -> Ops:
    """``measure()`` again while the emulator aborted a commit in it and the client ran the transaction again (its
    reads counted twice: on a busy machine the emulator aborts some): the last measurement, after ``tries``. A
    figure that is a difference of two measurements needs both without a retry to say what one more item costs."""
    found = measure()
    for _ in range(tries - 1):
        if not found.retries:
            break
        found = measure()
    return found


SCENARIOS: tuple[Callable[[Rig], dict[str, Ops]], ...] = (
    mention_and_one_turn,
    agent_turn,
    outward_call,
    ask_answer_continuation,
    approve_run_resume,
    delegate_result,
    child_asks_parent,
    mcp_call,
    surface_presses,
    rate_limited_mention,
    sweep_items,
)


def measure_all(rig: Rig) -> dict[str, Ops]:
    """Every figure, in the order of ``FIGURES``."""
    measured: dict[str, Ops] = {}
    # A lease whose heartbeat (every quarter of it) never falls inside a measured session, however slow the machine:
    # a beat is a read and a write more, counted by chance (a session of 15 s on a loaded machine, with 60 s).
    with environment(SESSION_LEASE_SECONDS="3600"), rig.installed():
        for scenario in SCENARIOS:
            with phase(scenario.__name__):
                measured.update(scenario(rig))
            rig.script_used()
    return {name: measured[name] for name in FIGURES if name in measured}


def run(bench: Bench) -> Section:
    """Figure 3 for ``make bench``: every count next to its budget, and the RPCs behind each."""
    section = Section("3. Firestore cost")
    budget = load_budget()
    with again_beside(bench) as again:  # counted only: the two runs, each on a database of its own, side by side
        measured = measure_all(Rig(bench.stack))
    stable = all(again.get(name) == ops.billed() for name, ops in measured.items())
    rows = []
    for name, ops in measured.items():
        allowed = budget.get(name, {})
        for kind in BILLED:
            value = getattr(ops, kind)
            limit = allowed.get(kind)
            met = None if limit is None else value <= limit
            section.add(Figure(f"firestore_{name}_{kind}", value, kind, None if limit is None else f"<= {limit}", met))
        fits = all(getattr(ops, k) <= allowed.get(k, -1) for k in BILLED)
        budget_text = "/".join(str(allowed.get(k, "—")) for k in BILLED)
        rows.append((f"`{name}`", FIGURES[name], ops.reads, ops.writes, ops.queries, budget_text, fits))
    counts = [f for f in section.figures if f.met is not None]
    in_budget = sum(1 for f in counts if f.met)
    total = len(counts)
    section.glance = [
        Figure("firestore_counts_within_budget", in_budget, f"of {total}", f"= {total}", in_budget == total),
        Figure("firestore_counts_stable_across_two_runs", float(stable), "bool", ">= 1", stable),
    ]
    section.add(*section.glance)
    section.figure_table = False
    traces = [
        (f"`{name}`", ", ".join(compact(ops.trace)) or "(a difference of two runs; see above)")
        for name, ops in measured.items()
        if name in {"mention", "session_one_turn", "ask", "answer", "continuation", "sweep_empty"}
    ]
    first = compact(measured["session_one_turn"].trace)[1:2] if "session_one_turn" in measured else []
    if first == ["query 1r"]:
        section.findings.append(
            "Every session starts with `steps.load_steps` (in `Runner.__init__`): one query, billed one read even "
            "when empty. A mention's first claim (kind `mention`, claimed from `queued`, not a takeover, "
            "`next_seq == 0`) cannot have steps yet, so skipping the query there saves 1 query and 1 read per "
            f"mention session (`session_one_turn` would go from {measured['session_one_turn'].reads} to "
            f"{measured['session_one_turn'].reads - 1} reads and from 1 to 0 queries; lower `bench/budget.json` with "
            "it). Continuations, retries and takeovers still need it."
        )
    section.say(
        *text("cost"),
        table(["figure", "what", "reads", "writes", "queries", "budget r/w/q", "within"], rows),
        "Measured twice in this run, side by side in two processes; the counts were "
        f"{'identical' if stable else '**not identical**'}. "
        "The RPCs behind the figures measured directly: `txn(get 1r, commit 2w)` is a transaction that reads one "
        "document and commits two writes; `commit Nw` a commit outside a transaction (a batch, or a `create()`); "
        "`query Nr` a query that returned N documents (billed at least one read); `get Nr` a plain read.",
        table(["figure", "RPCs in order"], traces),
    )
    return section


@contextmanager
def again_beside(bench: Bench) -> Iterator[dict[str, dict[str, int]]]:
    """Inside, every figure measured again in a process of its own beside this one (``python -m bench.cost``); on
    the way out, its billed counts by figure."""
    out = BENCH_DIR / "cost-again.json"
    out.unlink(missing_ok=True)
    ports = {name: bench.stack.ports[name] for name in ("firestore", "tasks", "fake_gemini", "fake_slack")}
    with (BENCH_DIR / "logs" / "cost-again.log").open("w") as log:
        again = subprocess.Popen([sys.executable, "-m", "bench.cost", json.dumps(ports), str(out)], cwd=ROOT,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    found: dict[str, dict[str, int]] = {}
    try:
        yield found
    except BaseException:
        again.terminate()  # by its pid: the run is stopping (it stops what it started)
        try:
            again.wait(timeout=30)
        except subprocess.TimeoutExpired:
            again.kill()
        raise
    if again.wait(timeout=600) != 0:
        raise RuntimeError(f"the second count failed: see {BENCH_DIR / 'logs' / 'cost-again.log'}")
    found.update(json.loads(out.read_text()))


def main(argv: list[str]) -> int:
    """``python -m bench.cost PORTS OUT``: every figure measured on the stack at ``PORTS`` (a JSON object), the
    billed counts written to ``OUT``; the environment is the product's, as the benchmark set it."""
    logs.setup("INFO")
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    measured = measure_all(Rig(local.Stack(ports=json.loads(argv[0]), stack_file=STACK_FILE)))  # its logs beside
    Path(argv[1]).write_text(json.dumps({name: ops.billed() for name, ops in measured.items()}))
    return 0


def compact(trace: tuple[str, ...]) -> list[str]:
    """``BeginTransaction, BatchGetDocuments 1r, Commit 2w`` as ``txn(get 1r, commit 2w)``, for reading."""
    short = [
        t.replace("BatchGetDocuments", "get").replace("RunQuery", "query").replace("Commit", "commit") for t in trace
    ]
    out: list[str] = []
    i = 0
    while i < len(short):
        end = next((j for j in range(i + 1, len(short)) if short[j].startswith(("commit", "Rollback"))), None)
        inner = short[i + 1 : end] if end is not None else []
        if short[i] == "BeginTransaction" and end is not None and all(x.startswith(("get", "query")) for x in inner):
            out.append(f"txn({', '.join([*inner, short[end]])})")
            i = end + 1
        else:
            out.append(short[i])
            i += 1
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Figure 14: trees without contention: fan-outs of non-blocking children reporting to a running parent, and of
blocking children that each ask their parent once.

Non-blocking: a parent's first model turn delegates N tasks with non-blocking ``delegate`` calls and goes on; its
next model reply is held (the stub holds it 4 s with 32 children, 2.5 s with 8, 1.5 s with fewer) while its N
children run, so a child that ends in that time reports to a running parent. The children are delivered at the same
moment, one thread each, as deployed Cloud Tasks dispatches them; each child's model reply takes 300 ms. The wall
time runs from the children's deliveries to the last child's end.

Blocking, asking: a parent's first model turn delegates N tasks with blocking ``delegate`` calls and pauses; each
child's first turn asks its parent a blocking question (``ask_parent``), which queues the parent; the parent
answers each question with ``answer_child`` (the child's task is queued again), and each child then ends with its
result (300 ms model reply), which reaches the parent as a note or a session of its own. Every task the product
creates is delivered at once on a thread of its own (``bench/rig.py``'s ``DirectTasks``: Cloud Tasks as
deployed, a name created twice refused). The wall time runs from the parent's first delivery to the last task's
end, every child done.

Everything runs in this process through the agent_session handler against the Firestore emulator (counted, as
section 3 counts), the Gemini stub and the fake Slack; a delivery that asks for a retry is delivered again, as
Cloud Tasks would. After a warm-up, the non-blocking trees of every size take turns for five rounds (so the
machine's drift falls on every size) and each asking size is measured once; the wall time is the median, and the
32-child ratio is judged as section 1's ratios are, by its 95% interval (a paired bootstrap over the rounds).
With it: the Firestore operations per child (reads, writes, queries, transactions begun, rollbacks: aborted commits
retried), the median over the rounds of each size (the last tree's alone before round 3's session 17), and how many
deliveries were retried (a non-2xx answer) and how many children did not end done (a commit aborted for contention
and surfaced as a failure). The targets (issue 28.4): 32 non-blocking
children at most twice one child's wall time, no child failed, the operations per child the same at every size.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass

from bench.figures import Section, at_most, info, median, paired_ratio, prose, table
from bench.firestore_ops import Ops
from bench.harness import Bench, on_rig
from bench.rig import DirectTasks, Rig, deliver
from infra.fakes.gemini.client import FakeGemini
from shared import deps
from shared.state import ids, sessions
from shared.state.models import SessionStatus

SIZES = {"nonblocking": (1, 8, 32), "asking": (1, 8)}
# Non-blocking trees of every size take turns for 5 rounds, the 32-child ratio judged by its 95% interval over them
# (2 rounds of each size one after another before round 3's session 14); an asking tree of 8 takes several seconds
# (its parent answers one a turn).
ROUNDS = {"nonblocking": 5, "asking": 1}
CHILD_MODEL_SECONDS = 0.3
CHILD_REPLY_COPIES = 3  # each asking child's reply, for its turn and two retries of it (the rest is reset after)
# The non-blocking parent's next model reply, held while its children end (32 took 3.1 s on a busy machine, 8 0.7 s).
PARENT_HOLD_SECONDS = {1: 1.5, 2: 1.5, 8: 2.5, 32: 4.0}
RATIO_32_TARGET = 2.0
OPS_RATIO_LIMIT = 1.1
# The tree's budget (``TREE_MAX_TURNS``: the root's turns and every child's allotment) would refuse the 9th child.
ROOMY = {"TREE_MAX_TURNS": "2000", "TREE_MAX_TOOL_CALLS": "4000"}
TREE_TIMEOUT = 180  # a tree of 32 on a busy machine
HEADER = ["shape", "children", "wall time (s, median of the rounds)", "ratio to 1 child", "reads / child",
          "writes / child", "queries / child", "transactions / child", "rollbacks / child", "retried deliveries",
          "failed"]  # fmt: skip


@dataclass(frozen=True)
class Tree:
    wall: float  # seconds
    ops: Ops  # Firestore operations of the tree's deliveries
    redelivered: int  # deliveries attempted more than once (a delivery answered non-2xx)
    failed: int  # children that did not end done (all of them if the parent's turn could not start them)


def nonblocking(rig: Rig, children: int) -> Tree:
    tag = uuid.uuid4().hex[:10]
    tasks = [f"check part {n} [{tag}]" for n in range(children)]
    calls = [("delegate", {"task": task, "blocking": False}) for task in tasks]
    held = FakeGemini.delayed(PARENT_HOLD_SECONDS[children], FakeGemini.text("Ok."))
    rig.script(FakeGemini.calls(*calls), held, *[FakeGemini.text("Noted.") for _ in range(children + 2)])  # notes
    for n, task in enumerate(tasks):
        rig.gemini.script(FakeGemini.matching(task, FakeGemini.delayed(CHILD_MODEL_SECONDS, FakeGemini.text(f"{n}"))))
    parent = rig.start(f"check every part {tag}")
    runs = threading.Thread(target=deliver, args=(parent,))
    runs.start()
    child_ids = [ids.child_id(parent, 1, n) for n in range(children)]
    deadline = time.monotonic() + TREE_TIMEOUT
    while not all(sessions.get_session(c) for c in child_ids):  # the parent's first turn started them
        if time.monotonic() > deadline or not runs.is_alive():  # its turn failed: every child counts as failed
            runs.join(PARENT_HOLD_SECONDS[children] + 60)
            return Tree(math.nan, Ops(), 0, children)
        time.sleep(0.05)
    attempts: list[str] = []
    before = rig.counter.snapshot()  # not reset: the parent's calls are in flight
    began = time.perf_counter()
    workers = [threading.Thread(target=deliver, args=(child, attempts)) for child in child_ids]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - began
    ops = rig.counter.snapshot() - before
    runs.join(PARENT_HOLD_SECONDS[children] + 60)
    return Tree(wall, ops, len(attempts) - children, failed(child_ids))


def asking(rig: Rig, children: int) -> Tree:
    """Scripted so that whatever order the questions reach the parent in, each gets its own answer: the stub takes
    the first item whose text the request holds, so a parent's request holding question n takes its answer before
    any plain reply, and a plain reply (it holds the rig's id, the children's requests do not) before any child's.
    A child's replies are chosen by its request alone: one holding its parent's answer (``-a{n}``) takes its result,
    any other its question; each is scripted ``CHILD_REPLY_COPIES`` times, so a turn retried after a crashed
    delivery (its reply consumed, its step not stored) takes the same reply again, never the next one."""
    tag = uuid.uuid4().hex[:10]
    tasks = [f"migrate shard {n} [{tag}-t{n}]" for n in range(children)]
    parent = f"migrate every shard {tag}"
    rig.script(FakeGemini.calls(*[("delegate", {"task": task}) for task in tasks]))
    parent_id = rig.start(parent)  # its task goes to the sink: delivered below
    child_ids = [ids.child_id(parent_id, 1, n) for n in range(children)]
    for n, child in enumerate(child_ids):
        answer = FakeGemini.call("answer_child", child_id=child, answer=f"shard {n} first ({tag}-a{n})")
        rig.gemini.script(FakeGemini.matching(f"{tag}-q{n}", answer))
    rig.script(*[FakeGemini.text("Noted.") for _ in range(3 * children + 4)])
    for n in range(children):  # its result before its question: a request holding the answer holds the task too
        asks = FakeGemini.call("ask_parent", question=f"Which shard first? ({tag}-q{n})", blocking=True)
        done = FakeGemini.delayed(CHILD_MODEL_SECONDS, FakeGemini.text(f"shard {n} migrated"))
        rig.gemini.script(*[FakeGemini.matching(f"{tag}-a{n}", done)] * CHILD_REPLY_COPIES,
                          *[FakeGemini.matching(f"{tag}-t{n}", asks)] * CHILD_REPLY_COPIES)  # fmt: skip
    tasks_of = DirectTasks()
    with deps.override(tasks=tasks_of):
        rig.counter.reset()
        began = time.perf_counter()
        tasks_of.dispatch(parent_id, "parent")  # every task after it is created through ``tasks_of``
        deadline = time.monotonic() + TREE_TIMEOUT
        while time.monotonic() < deadline and (live := [t for t in tasks_of.threads if t.is_alive()]):
            live[0].join(deadline - time.monotonic())
        wall = time.perf_counter() - began
    return Tree(wall, rig.counter.snapshot(), len(tasks_of.attempts) - len(tasks_of.names), failed(child_ids))


def failed(child_ids: list[str]) -> int:
    ended = [sessions.get_session(c) for c in child_ids]
    return sum(1 for s in ended if s is None or s.status != SessionStatus.DONE)


SHAPES = {"nonblocking": nonblocking, "asking": asking}


def per_child(ops: Ops, children: int) -> tuple[float, ...]:
    return tuple(getattr(ops, f) / children for f in ("reads", "writes", "queries", "transactions", "rollbacks"))


def per_child_median(found: list[Tree], children: int) -> tuple[float, ...]:
    """Each operation's count per child, the median over the rounds that ran (a tree's parent makes as many step
    commits as fall while its children run, one batched read each: a tree of one child read 3 to 7 documents from
    one round to the next, so one round's count made the ratio swing by a third)."""
    rounds = [per_child(t.ops, children) for t in found if not math.isnan(t.wall)]
    return tuple(median([r[n] for r in rounds]) for n in range(5)) if rounds else (math.nan,) * 5


def run(bench: Bench) -> Section:
    section = Section("14. Trees without contention")
    trees: dict[tuple[str, int], list[Tree]] = {}
    with on_rig(bench, **ROOMY) as rig:
        nonblocking(rig, 2)  # warm-up: clients, caches
        rig.gemini.reset()  # the replies a tree did not ask for (the plain ones are scripted with room to spare)
        for shape, grow in SHAPES.items():
            for size in SIZES[shape]:
                trees[shape, size] = []
            for _ in range(ROUNDS[shape]):  # the sizes take turns, round by round: drift falls on every size
                for size in SIZES[shape]:
                    trees[shape, size].append(grow(rig, size))
                    rig.gemini.reset()
    rows = []
    for (shape, size), found in trees.items():
        wall, one = median([t.wall for t in found]), median([t.wall for t in trees[shape, 1]])
        per = per_child_median(found, size)
        retried, lost = sum(t.redelivered for t in found), sum(t.failed for t in found)
        rows.append((shape, size, wall, wall / one, *per, retried, lost))
        section.add(info(f"trees_{shape}_wall_{size}_children", wall, "s"))
        section.add(info(f"trees_{shape}_{size}_ops_per_child", sum(per[:3]), "operations"))
        section.add(info(f"trees_{shape}_{size}_rollbacks_per_child", per[4], "rollbacks"))
        if size > 1:
            name = f"trees_{shape}_ratio_{size}_over_1"
            if (shape, size) == ("nonblocking", 32):  # judged as the other ratios are: by its interval over rounds
                many, single = [[t.wall] for t in found], [[t.wall] for t in trees[shape, 1]]
                section.add(*paired_ratio(name, many, single, 50, RATIO_32_TARGET).figures())
            else:
                section.add(info(name, wall / one, "ratio"))
    for shape, sizes in SIZES.items():
        found = [t for size in sizes for t in trees[shape, size]]
        ops_one = sum(per_child_median(trees[shape, 1], 1)[:3])
        ops_most = sum(per_child_median(trees[shape, sizes[-1]], sizes[-1])[:3])
        ops_ratio = ops_most / ops_one if ops_one and ops_most else math.nan  # nan: a tree that never ran
        section.add(
            at_most(f"trees_{shape}_failed_children", sum(t.failed for t in found), "children", 0),
            info(f"trees_{shape}_redelivered_children", sum(t.redelivered for t in found), "deliveries"),
            at_most(f"trees_{shape}_ops_per_child_{sizes[-1]}_over_1", ops_ratio, "ratio", OPS_RATIO_LIMIT),
        )
    section.say(*prose(__doc__), table(HEADER, rows))
    missed = [f for f in section.figures if f.met is False]
    if missed:
        section.say(
            "**Missed: " + ", ".join(f"`{f.name}` ({f.value:.2f})" for f in missed) + ".** The table's columns are "
            "the parts: the wall time beyond one child's, the Firestore operations and transactions each child "
            "costs, the rollbacks (commits the emulator aborted for contention and `contended` retried) and the "
            "deliveries answered non-2xx and retried. Non-blocking children no longer touch their parent's "
            "document: each writes its own result record with `create()` (`shared/state/results.py`), so no commit "
            "of theirs is aborted, none fails at any size, and their writes per child stay flat. A child's start "
            "refreshes the tree's status message by writing its own line into the tree's view document and reading it "
            "back (`shared/state/tree_view.py`), not by reading every member of the tree; its end writes its line, the "
            "allotment it did not use and its tokens into that document in its ending transaction (one write that "
            "reads nothing) and then only reads it: the tree's root is written only when a child is created. What "
            "still grows with the "
            "fan-out is each parent step commit's one batched read: every running child's result record and, since a "
            "child's question to its parent has a record of its own, its question record too (with 32 children, 64 "
            "documents a step), so operations per child vary with how many step commits fall while the children run "
            "(0.63 to 1.16 of one child's in round 3's runs); one record per child for "
            "both its question and its result, read once, is the next step. The wall time beyond one child's is "
            "every child's worker running "
            "in this one process on this machine's two cores (deployed, each delivery has its own instance) and the "
            "parent's step commits reading the results of the children that ended during its turn (one batched "
            "read each). Profiled (32 children, this process's clocks around each part, issue 28.4, session 7, load "
            "average 5-10 on the two cores): a child's claim, opening step commit and ending transaction each take "
            "4-6 times as long as in a tree of one (190-240 ms instead of 40 ms), a point read of its own document 10 "
            "times (53 ms instead of 6), the stub's 300 ms model replies reach the workers after 350 ms on average "
            "and up to 1.3 s; the emulator commits writes to one document one after another (32 transactions each "
            "writing their own document and one shared one: 0.6-1.0 s, against 0.3 s without the shared one). Each "
            "child's end wrote two documents the whole tree shares, the root (the allotment it gave back) and the "
            "view (its line, after its end, with a read of its own session first): now one, in its ending "
            "transaction (13 Firestore RPCs a child instead of 16; 6 reads and 9 writes per child at 32 instead of 7 "
            "and 10). Side by side with the old code in session 7 the 32-child ratio was 3.25 and 4.26 against 3.79 "
            "and 2.89: on a machine this loaded, within the noise. Deployed, each delivery has an instance of its "
            "own: only the one shared document remains. The figure runs before the large writes of sections 3 and "
            "4 (session 9): run after scale's 50,000 documents, the same code measured 5.10 and 5.56, and 3.88 "
            "alone on a busier machine, so the emulator's load, not the tree's work, made most of that ratio. Session "
            "10: the fakes listened with a backlog of 5, so 3 to 7 of a 32-child tree's connections waited for TCP's "
            "one-second retransmission (now 128), and a child claimed fresh stores its opening step in its claim's "
            "commit (11 Firestore calls a child instead of 14). Session 14 (round 3): a child's turn step and its "
            "own end are each one commit fenced on the update time its claim left its session with "
            "(`shared/state/step_fence.py`, `shared/state/child_end.py`), not a transaction: 7 Firestore calls a "
            "child instead of 11. Session 15: a child whose line in the tree's view a sibling stored after its "
            "own leaves the status message's update to that sibling (`shared/asks/tree_status.py`): a 32-child "
            "tree made 39 `chat.update` calls on one message within a second, now 2 to 4. "
            "Blocking children that each ask the parent once write "
            "their question into a record "
            "of their own (`shared/state/child_questions.py`), read by the parent's next step commit in the same "
            "batched read as results; a paused parent is told in one batch fenced by its update time, so no asking "
            "child transacts on the parent's document and none of their commits is aborted."
        )
    return section

"""One fault run: its own local stack, the flows in small concurrent batches, the faults, the counts."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from faults.flows import KINDS, Flow, Outcome
from faults.inject import RESTARTS, Injector
from infra.fakes.gemini.client import FakeGemini
from infra.fakes.slack.client import FakeSlack
from infra.product_env import product_environment
from infra.stack import LOCAL, OPERATOR_ID, Stack

STACK_DIR = LOCAL / "faults"
# The product's defaults, except: no rate limits or daily budgets (one test user starts every flow), the demo
# tools' tiers as the tests set them, and the sample MCP server's create_ticket allowed at once (it asks for input).
ENV = {
    "USER_SESSIONS_PER_HOUR": "0",
    "CHANNEL_SESSIONS_PER_HOUR": "0",
    "USER_RUNNING_SESSIONS": "0",
    "CHANNEL_RUNNING_SESSIONS": "0",
    "USER_DAILY_TOKENS": "0",
    "WORKSPACE_DAILY_TOKENS": "0",
    "OPERATOR_USER_IDS": OPERATOR_ID,
    "TOOL_TIERS": '{"restart_service": "safe", "mcp.*.create_ticket": "safe", "mcp.*.deploy_service": "safe"}',
}


@dataclass
class Results:
    seed: int
    outcomes: list[Outcome]
    injected: dict[str, int]
    seconds: float
    notes: list[str] = field(default_factory=list)

    def total(self, name: str) -> int:
        return sum(int(getattr(o, name)) for o in self.outcomes)

    @property
    def unfinished(self) -> int:
        return sum(1 for o in self.outcomes if not o.reached_end or o.problem)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.reached_end or o.problem or o.counts()]


@contextmanager
def fault_stack(stack_dir: Path) -> Iterator[Stack]:
    """The stack a run drives: parallel task delivery through the dispatcher, the sample MCP server; the product's
    environment set in this process (for reading Firestore) and put back afterwards, with the clients built for it
    forgotten (a test run that goes on after it would otherwise keep reading this stack's stopped emulator)."""
    stack = Stack(extra_env=ENV, stack_file=stack_dir / "stack.json", parallel_tasks=True, mcp_demo=True)
    try:
        stack.start()
        with product_environment(stack):
            yield stack
    finally:
        stack.stop()


def plan(rng: random.Random, count: int, among: tuple[str, ...] = KINDS) -> list[str]:
    """``count`` flow kinds: every kind once (as far as ``count`` goes), then random ones, shuffled."""
    kinds = list(among[:count]) + [rng.choice(among) for _ in range(count - len(among))]
    rng.shuffle(kinds)
    return kinds


def run(*, seed: int, flows: int, batch: int, stack_dir: Path = STACK_DIR, kinds: tuple[str, ...] = KINDS) -> Results:
    rng = random.Random(seed)
    started = time.monotonic()
    shutil.rmtree(stack_dir / "evidence", ignore_errors=True)  # what an earlier run's failing flows left
    with fault_stack(stack_dir) as stack:
        gemini, slack = FakeGemini(stack.url("fake_gemini")), FakeSlack(stack.url("fake_slack"))
        gemini.reset()
        slack.reset()
        injector = Injector(stack=stack, gemini=gemini, slack=slack)
        # Each flow draws its faults from its own RNG, seeded in plan order, so a seed replays every choice.
        chosen = plan(rng, flows, kinds)
        planned = [Flow(k, f"F{seed}X{n}", injector, random.Random(rng.randrange(2**32))) for n, k in enumerate(chosen)]
        groups = batches(planned, batch)
        restarts_plan = infra_faults(rng, sum(1 for g in groups if not any(f.kills for f in g)))
        outcomes = []
        for group in groups:
            fault = None if any(f.kills for f in group) else restarts_plan.pop(0)
            outcomes += run_batch(group, injector, fault)
        if "agent_session" not in stack.procs:
            stack.start_function("agent_session")
    return Results(seed=seed, outcomes=outcomes, injected=dict(injector.injected), seconds=time.monotonic() - started)


def batches(flows: list[Flow], size: int) -> list[list[Flow]]:
    """Flows in batches of ``size`` run at once; a flow that SIGKILLs agent_session runs alone. A kill also ends
    whatever else the worker runs, and a takeover that makes a model call again takes the next scripted reply, which
    belongs to a later step of that flow: the scripts could no longer say what each flow must end with."""
    calm = [f for f in flows if not f.kills]
    return [calm[n : n + size] for n in range(0, len(calm), size)] + [[f] for f in flows if f.kills]


def infra_faults(rng: random.Random, count: int) -> list[tuple[str, float] | None]:
    """For each of ``count`` calm batches: an emulator to restart and how many seconds into the batch, or None.
    The first two restart Firestore, then Cloud Tasks (a short run has both); the rest are drawn."""
    kinds = list(RESTARTS) + [rng.choice([None, *RESTARTS]) for _ in range(count - len(RESTARTS))]
    return [None if kind is None else (kind, round(rng.uniform(1.0, 5.0), 1)) for kind in kinds[:count]]


def run_batch(batch: list[Flow], injector: Injector, fault: tuple[str, float] | None) -> list[Outcome]:
    """The batch's flows at once; ``fault``'s emulator is restarted that many seconds in, while they run."""
    outcomes: dict[int, Outcome] = {}
    # Daemon threads: a run stopped by a signal exits at once instead of waiting for flows polling a stopped stack.
    threads = [threading.Thread(target=lambda n=n, f=f: outcomes.__setitem__(n, f.run()), daemon=True)
               for n, f in enumerate(batch)]  # fmt: skip
    failed: list[BaseException] = []

    def restart(kind: str, after: float) -> None:
        time.sleep(after)
        try:
            injector.restart(kind)
        except BaseException as exc:  # the run stops with it after the batch: never a restart silently skipped
            failed.append(exc)

    if fault is not None:
        threads.append(threading.Thread(target=restart, args=fault, daemon=True))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]
    return [outcomes[n] for n in range(len(batch))]

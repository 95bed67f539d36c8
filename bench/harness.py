"""The benchmark stack: the local stack of ``infra/stack.py`` with its own stack file, a task sink, and Bolt.

Only ``slack_events`` runs under functions-framework, beside the Bolt app (the
peer of figure 1), both with the product's environment. ``TASKS_TARGET_URL``
points at a no-op sink (``bench/sink.py``) rather than at agent_session: the
Cloud Tasks emulator delivers every task it is given, one after another, and an
agent session per delivery would load the machine while latency is measured.
The sessions the other figures need are run in the benchmark's own process,
where they are timed and counted.

Every process is started in its own session and stopped by its pid; the pids of
the sink and of Bolt are recorded beside the stack file, so a run that was
killed outright is cleaned up by the next one.

Beside the stack, what the figures share: the measured stand-ins (``on_rig``, the product on a counted rig;
``mcp_server``, the sample MCP server), variants timed side by side in one run (``take_turns`` in ``orders``,
``clocked``), and a figure's parts timed in the run log (``phase``, ``repeated``). A ratio of two variants is judged
by ``figures.paired_ratio``; ``report`` writes the records.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.rig import Rig, environment
from infra.procs import Proc, free_port, group_alive, http_answers, stop_group, wait_until
from infra.stack import LOCAL, ROOT, Stack
from shared import config

T = TypeVar("T")
BENCH_DIR = LOCAL / "bench"
RATE_LIMITS = (
    "USER_SESSIONS_PER_HOUR",
    "CHANNEL_SESSIONS_PER_HOUR",
    "USER_RUNNING_SESSIONS",
    "CHANNEL_RUNNING_SESSIONS",
)
# Off too, as on the test stack that `bench/budget.json` is checked on: a figure measures them where it says so
# (`agent_turn_with_budgets`, the ingress's `ours_limits`).
DAILY_BUDGETS = ("USER_DAILY_TOKENS", "WORKSPACE_DAILY_TOKENS")
STACK_FILE = BENCH_DIR / "stack.json"
PIDS_FILE = BENCH_DIR / "pids.json"


@contextlib.contextmanager
def phase(what: str) -> Iterator[None]:
    """A part of a figure, its wall time printed to the run log (where a figure's seconds go)."""
    began = time.monotonic()
    try:
        yield
    finally:
        print(f"    {what}: {time.monotonic() - began:.1f} s", flush=True)


def repeated(work: Callable[[], T], rounds: int, budget_s: float) -> list[T]:
    """``work`` up to ``rounds`` times, at least once, no round started once ``budget_s`` seconds are spent: a slow
    figure (a fan-out that takes 20 s) gets fewer rounds than a fast one, where a median of more costs little."""
    found: list[T] = []
    began = time.monotonic()
    while len(found) < rounds and (not found or time.monotonic() - began < budget_s):
        found.append(work())
    return found


def clocked(action: Callable[[], object], times: int = 1) -> list[float]:
    """The ms each of ``times`` calls of ``action`` took, one after another."""
    samples = []
    for _ in range(times):
        began = time.perf_counter()
        action()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def orders(names: Sequence[str], reps: int, *, seed: int | None = None) -> Iterator[list[str]]:
    """The order ``names`` take their turn in, repetition by repetition: rotating (each goes first in turn), or
    shuffled anew at every step by a ``seed``ed RNG, so that each follows each other about equally often."""
    shuffler = None if seed is None else random.Random(seed)  # noqa: S311 - an order of turns, not a secret
    for rep in range(reps):
        turn = rep % len(names)
        yield [*names[turn:], *names[:turn]] if shuffler is None else shuffler.sample(list(names), len(names))


def take_turns(variants: Mapping[str, Callable[[], T]], reps: int, warmup: int = 0, *, seed: int | None = None,
               before: Callable[[], object] | None = None) -> dict[str, list[T]]:  # fmt: skip
    """Variants timed side by side in one run: each ``reps`` times after ``warmup`` untaken runs of each, taking turns
    in ``orders`` (``before`` runs ahead of every round, untimed), so that drift on the shared machine falls on all."""
    names = list(variants)
    found: dict[str, list[T]] = {name: [] for name in names}
    for rep, order in enumerate(itertools.chain([names] * warmup, orders(names, reps, seed=seed))):
        if before is not None:
            before()
        for name in order:
            taken = variants[name]()
            if rep >= warmup:
                found[name].append(taken)
    return found


@contextlib.contextmanager
def on_rig(bench: Bench, **settings: str) -> Iterator[Rig]:
    """The measured stand-in for the product: a counted rig of its own on the benchmark's stack, installed, with
    product ``settings`` for the block, the Gemini stub's leftover replies dropped first."""
    rig = Rig(bench.stack)
    rig.gemini.reset()
    with environment(**settings), rig.installed():
        yield rig


@contextlib.contextmanager
def mcp_server(stack: Stack, name: str) -> Iterator[str]:
    """The sample MCP server in a process ``name`` of its own for the block: its MCP endpoint's URL."""
    url = stack.start_mcp_server(name)
    try:
        yield url
    finally:
        stack.stop_process(name)


def function_argv(source: Path | str, target: str, port: int) -> list[str]:
    """functions-framework serving ``target`` of ``source`` on a loopback port, as the stack serves ours."""
    return [
        sys.executable,
        "-m",
        "functions_framework",
        "--source",
        str(source),
        "--target",
        target,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]


@dataclass
class Bench:
    """The running benchmark stack."""

    stack: Stack = field(init=False)
    procs: dict[str, Proc] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    ahead: dict[str, Future[Any]] = field(default_factory=dict)  # a figure's preparation, run beside another figure

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}/"

    @property
    def ours_url(self) -> str:
        return self.stack.function_url("slack_events")

    @property
    def bolt_url(self) -> str:
        return self.url("bolt")

    @property
    def limits_url(self) -> str:
        """Our ingress with the rate limits on."""
        return self.url("ours_limits")

    def sink_count(self) -> int:
        """How many task deliveries the sink has answered."""
        with urllib.request.urlopen(self.url("sink") + "_count", timeout=10) as response:  # noqa: S310 - loopback
            return int(response.read())

    def wait_for_deliveries(self, count: int, timeout: float = 120) -> int:
        """Wait until the sink has answered ``count`` deliveries (the emulator sends them one by one)."""
        deadline = time.monotonic() + timeout
        while (seen := self.sink_count()) < count and time.monotonic() < deadline:
            time.sleep(0.2)
        return seen

    def start(self) -> Bench:
        stop_leftovers()
        BENCH_DIR.mkdir(parents=True, exist_ok=True)
        try:
            self.ports["sink"] = free_port()
            sink = self.spawn("sink", [sys.executable, "-m", "bench.sink", "--port", str(self.ports["sink"])])
            wait_until(lambda: http_answers(self.url("sink") + "_count"), proc=sink, what="HTTP", timeout=30)
            self.stack = Stack(
                with_functions=("slack_events",),
                # product_env() names agent_session's URL; here it is the sink's.
                ports={"agent_session": self.ports["sink"]},
                extra_env={"TASKS_TARGET_URL": self.url("sink"), **{name: "0" for name in RATE_LIMITS + DAILY_BUDGETS}},
                stack_file=STACK_FILE,
            ).start()
            bolt = self.serve("bolt", ROOT / "bench" / "bolt_app.py", self.function_env())
            # Our ingress again, with the hourly rate limits on (high enough never to refuse): what they cost.
            limits = {"USER_SESSIONS_PER_HOUR": "100000", "CHANNEL_SESSIONS_PER_HOUR": "100000"}
            limited = self.serve("ours_limits", ROOT / "functions" / "main.py", {**self.function_env(), **limits})
            for name, proc in (("bolt", bolt), ("ours_limits", limited)):  # started side by side
                wait_until(lambda: http_answers(self.url(name)), proc=proc, what="HTTP", timeout=60)  # noqa: B023
        except BaseException:
            self.stop()
            raise
        os.environ.update(self.stack.product_env())
        config.reset()
        return self

    def function_env(self) -> dict[str, str]:
        """The environment functions run with on this stack (the stack's own, with the checkout importable)."""
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TASKS_", "FIRESTORE_"))}
        return {**base, **self.stack.product_env(), "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}

    def serve(self, name: str, source: Path, env: dict[str, str]) -> Proc:
        """functions-framework serving ``slack_events`` of ``source`` on a port of its own; not waited for."""
        self.ports[name] = free_port()
        return self.spawn(name, function_argv(source, "slack_events", self.ports[name]), env)

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(
            name=name, argv=argv, log_path=BENCH_DIR / "logs" / f"{name}.log", env=env or dict(os.environ), cwd=ROOT
        )
        self.procs[name] = proc.start()
        PIDS_FILE.write_text(json.dumps({n: p.pid for n, p in self.procs.items() if p.alive()}))
        return proc

    def stop(self) -> None:
        """Stop everything this run started, by pid; safe to call twice."""
        for name in ("ours_limits", "bolt", "sink"):
            proc = self.procs.pop(name, None)
            if proc is not None:
                proc.stop()
        with contextlib.suppress(AttributeError):
            self.stack.stop()
        PIDS_FILE.unlink(missing_ok=True)


def stop_leftovers() -> None:
    """Stop, by recorded pid, the sink and Bolt of a run that was killed (the stack cleans up its own)."""
    try:
        pids = json.loads(PIDS_FILE.read_text())
    except (FileNotFoundError, ValueError):
        return
    for pid in pids.values():
        if isinstance(pid, int) and group_alive(pid) and _started_here(pid):
            stop_group(pid, timeout=5)
    PIDS_FILE.unlink(missing_ok=True)


def _started_here(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd") == str(ROOT)
    except OSError:
        return False

"""Run the benchmarks against a local stack of their own and write ``BENCHMARKS.md`` and ``bench/results.json``.

python -m bench.run                       # everything (``make bench``)
python -m bench.run --only ingress,cost   # some figures; written under .local/bench/ instead
"""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import FrameType

from bench import (
    agent_loop,
    approve_run,
    coldstart,
    compare,
    cost,
    fanout,
    html_text,
    ingress,
    mcp_calls,
    mixed_wait,
    report,
    resume,
    scale,
    streaming,
    takeover,
    trees,
)
from bench.figures import Section
from bench.harness import BENCH_DIR, Bench
from infra.procs import StackError
from infra.stack import ROOT
from shared import logs

# In the order they run: the ingress first, while the emulator holds little; the large writes last.
FIGURES: dict[str, Callable[[Bench], Section]] = {
    # Measured in this process without the stack (a few seconds), before anything else: run after the large writes,
    # it once took 3.7 times as long as on its own (1,012 against 270 ms for 1 MB), with nothing of its own changed.
    "html": html_text.run,
    # First, while the default database holds no session: its rescue path runs the sweep over all of them.
    "takeover": takeover.run,  # a worker SIGKILLed mid model call, taken over: 4 rounds of ~12 s
    "ingress": ingress.run,
    "coldstart": coldstart.run,
    "agent": agent_loop.run,
    "streaming": streaming.run,  # 21 mentions answered in this process; a few seconds
    "fanout": fanout.run,
    "resume": resume.run,  # the operator's answer or approval to the continuation's first model request
    "mcp": mcp_calls.run,  # in this process, against the sample MCP server: the calls, then 66 sessions; ~25 s
    "trees": trees.run,  # fan-outs of 1, 8 and 32 non-blocking children, and of 1 and 8 blocking ones that ask
    "approve_run": approve_run.run,  # an Approve and an Edit to the call's result reaching the model
    "mixed_wait": mixed_wait.run,  # a turn waiting on a question, a card and a child: each resolved last in turn
    # The large writes last: after scale's 50,000 documents the emulator ran a tree of 32 children far slower (its
    # ratio to one child 5.56 against 3.88 measured alone, on a busier machine), so every figure that times runs
    # before them.
    "cost": cost.run,  # beside it, scale's seeding (``BESIDE``)
    "scale": scale.run,
}

# A figure's preparation that runs beside another figure: scale's seeding (uncounted writes to databases of its own)
# beside the Firestore cost figure, which counts operations on databases of its own and times nothing. The next
# figure starts once both are done, so nothing runs beside a figure that times.
BESIDE: dict[str, tuple[str, Callable[[Bench], object]]] = {"cost": ("scale", scale.seed)}


def _raise_exit(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def quiet_product_logs() -> None:
    """The product code run in this process logs to a file, not over the progress lines."""
    logs.setup("INFO")
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    BENCH_DIR.joinpath("logs").mkdir(parents=True, exist_ok=True)
    handler.setStream(BENCH_DIR.joinpath("logs", "bench-process.log").open("a"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument("--only", help=f"comma-separated subset of: {', '.join(FIGURES)}")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",")] if args.only else list(FIGURES)
    unknown = set(chosen) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figures: {', '.join(sorted(unknown))}")
    signal.signal(signal.SIGTERM, _raise_exit)
    quiet_product_logs()
    started = time.monotonic()
    load_at_start = list(os.getloadavg())
    bench = Bench()
    atexit.register(bench.stop)
    sections: list[Section] = []
    try:
        print("starting the benchmark stack (logs in .local/bench/logs/)", flush=True)
        bench.start()
        print(f"  stack started in {time.monotonic() - started:.0f} s", flush=True)
        for name in chosen:
            print(f"measuring {name} ...", flush=True)
            began = time.monotonic()
            with ThreadPoolExecutor(1) as beside:  # leaving it waits for the work beside the figure
                if name in BESIDE and BESIDE[name][0] in chosen:
                    bench.ahead[BESIDE[name][0]] = beside.submit(BESIDE[name][1], bench)
                section = FIGURES[name](bench)
            section.seconds = time.monotonic() - began
            print(f"  {name}: {section.seconds:.0f} s", flush=True)
            sections.append(section)
            for figure in section.targets():
                if figure.target is not None:
                    verdict = "met" if figure.met else "MISSED"
                    print(f"  {figure.name} = {figure.value:.3g} {figure.unit} (target {figure.target}: {verdict})")
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        bench.stop()
    sections.sort(key=report.order)
    full = not args.only
    markdown = ROOT / "BENCHMARKS.md" if full else BENCH_DIR / "BENCHMARKS.partial.md"
    results = ROOT / "bench" / "results.json" if full else BENCH_DIR / "results.partial.json"
    runtime = time.monotonic() - started
    report.write(sections, runtime=runtime, load_at_start=load_at_start, markdown=markdown, results=results)
    if full:  # this run's figures beside the baseline's (``bench/compare.py``)
        compare.write_into(markdown, compare.section())
    print(f"wrote {markdown.relative_to(ROOT)} and {results.relative_to(ROOT)} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

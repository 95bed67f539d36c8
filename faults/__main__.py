"""python -m faults [--seed N] [--flows N] [--batch N]: a fault-injection run on a local stack of its own."""

from __future__ import annotations

import argparse
import random
import sys

from faults import report
from faults.run import run
from infra.procs import StackError
from infra.stack import exit_cleanly_on_signals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: a new random seed)")
    parser.add_argument("--flows", type=int, default=48, help="how many flows to run")
    parser.add_argument("--batch", type=int, default=4, help="how many flows run at once")
    parser.add_argument("--no-write", action="store_true", help="print only: leave results.json and BENCHMARKS.md")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    print(f"fault injection: seed {seed} (python -m faults --seed {seed} replays it)", flush=True)
    exit_cleanly_on_signals()
    try:
        results = run(seed=seed, flows=args.flows, batch=args.batch)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.table(results))
    for problem in report.problems(results):
        print(f"FAILED: {problem}")
    if not args.no_write:
        report.write(results)
    return 0 if report.all_met(results) else 1


if __name__ == "__main__":
    sys.exit(main())

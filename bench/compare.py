"""Before and after, side by side: each figure ``bench/results.json`` holds at a git revision and now, with its ratio.

python -m bench.compare             # the round-2 run (2026-11-24) against bench/results.json; prints Markdown
python -m bench.compare REV --write # against REV, and the section written into BENCHMARKS.md

The two runs were taken on different days on a shared machine, so a time is compared twice: as measured, and over
how much slower the machine itself was (``machine``: the median now-over-before of figures of code that neither
run changed, the standard library's ``html.parser`` and the seed's ledger scan). A ratio measured side by side in
one run (ours over Bolt, 100,000 documents over 100) needs no such correction. A time whose corrected ratio is
above ``SLOWER`` is a flow that got slower, and is named with its explanation (``WHY``) or as unexplained.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.figures import fmt, table
from infra.stack import ROOT

BASELINE = "9cdd52e"  # make bench on 2026-11-24 (round 2), before round 3's layout work
CONTROLS = (
    "html_parser_ordinary_1mb_ms",
    "html_parser_unclosed_tags_4kb_ms",
    "html_parser_unclosed_tags_8kb_ms",
    "ledger_lookup_100000_lines",
    "ledger_sweep_50000_lines",
)
# Unchanged code timed in the same turns as a flow of ours (Bolt beside our ingress and cold start): how much the
# machine slowed that kind of work (processes, requests on loopback), which the single-threaded controls understate.
PEERS = (("_ours", "_bolt"), ("cold_start_ours", "cold_start_bolt"))
TIMES = ("ms", "s")
SLOWER = 1.2  # now over before, over the machine's own slow-down
TITLE = "## Before and after"
# Why a flow is slower than in the baseline, by figure-name prefix (the longest matching prefix wins).
WHY: dict[str, str] = {
    "ingress_start_commit": "the machine, not the code: `bench.ingress_limits.measure` of both revisions (100 starts "
    "of each variant), run in turns against one emulator on 2026-11-26 at a load average of about 8, took medians of "
    "14.8 ms at the baseline's code and 13.4 ms at this one's with the limits off, 23.3 and 16.3 ms with them on "
    "(3 runs each)",
    "ingress_import_": "the machine, not the code: both revisions' ingress imported in turns, 5 times each, on "
    "2026-11-26 (medians, the baseline's first): functions_framework 845 and 608 ms, `functions/main.py` 37 and "
    "56 ms, `shared.handlers.slack_events` 1,728 and 1,804 ms",
    "ingress_limits_counter_writes_built": "the machine, not the code: `bench.ingress_limits.building` of both "
    "revisions, run one after the other on 2026-11-26 at a load average of about 12, took the same "
    "(0.48 to 0.58 ms at the baseline's code, 0.36 to 0.48 ms at this one's, medians of 5 x 2,000): a sub-millisecond "
    "loop of small allocations slows down with a loaded machine far more than the controls do",
}


def load(revision: str | None) -> dict[str, dict[str, Any]]:
    """The figures of ``bench/results.json`` at ``revision`` (None: the working tree), by name."""
    if revision is None:
        text = (ROOT / "bench" / "results.json").read_text()
    else:
        text = subprocess.run(["git", "show", f"{revision}:bench/results.json"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout  # fmt: skip
    return {f["name"]: f for f in json.loads(text)["figures"]}


def machine(before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> float:
    found = [now[n]["value"] / before[n]["value"] for n in CONTROLS if n in before and n in now and before[n]["value"]]
    return statistics.median(found) if found else 1.0


def why(name: str, corrected: dict[str, float]) -> str:
    """Why ``name`` is slower: its own explanation, or the peer beside it that slowed as much, or unexplained."""
    if "bolt" in name or "hello" in name:
        return "code neither run changed, timed beside ours: the machine, for work across processes"
    peers = [name.replace(ours, theirs) for ours, theirs in PEERS if ours in name]
    moved = [p for p in peers if p in corrected and corrected[p] * SLOWER >= corrected[name]]
    if moved:
        return f"`{moved[0]}`, code neither run changed, timed in the same turns, slowed {corrected[moved[0]]:.2f}x"
    matches = [prefix for prefix in WHY if name.startswith(prefix)]
    return WHY[max(matches, key=len)] if matches else "unexplained: run its figure alone (`--only`) again"


def load_average(revision: str | None) -> str:
    """The load average at the start of the run whose ``BENCHMARKS.md`` is at ``revision`` (None: the tree's)."""
    try:
        text = (
            (ROOT / "BENCHMARKS.md").read_text()
            if revision is None
            else subprocess.run(
                ["git", "show", f"{revision}:BENCHMARKS.md"], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    found = re.search(r"load average \(1, 5, 15 min\) at the start \| ([0-9.]+)", text)
    return found.group(1) if found else "unknown"


def section(revision: str = BASELINE) -> str:
    """The Markdown section for ``bench/results.json`` at ``revision`` against the working tree's."""
    return render(revision, load(revision), load(None))


def render(revision: str, before: dict[str, dict[str, Any]], now: dict[str, dict[str, Any]]) -> str:
    """The Markdown section: every figure both runs hold, before, now, their ratio, and the slower flows."""
    factor = machine(before, now)
    rows, slower, corrected_of = [], [], {}
    for name, old in before.items():
        new = now.get(name)
        if new is None or not isinstance(old["value"], int | float) or isinstance(old["value"], bool):
            continue
        ratio = new["value"] / old["value"] if old["value"] else float("nan")
        corrected = ratio / factor if old["unit"] in TIMES else None
        if corrected is not None:
            corrected_of[name] = corrected
        rows.append((f"`{name}`", old["unit"], fmt(float(old["value"])), fmt(float(new["value"])), fmt(ratio),
                     "—" if corrected is None else fmt(corrected), old["met"], new["met"]))  # fmt: skip
        if corrected is not None and corrected > SLOWER and name not in CONTROLS:
            slower.append((name, corrected))
    gone = sorted(set(before) - set(now))
    lines = [
        TITLE,
        f"Generated by `python -m bench.compare {revision}` (`make bench-compare`) from `bench/results.json` at "
        f"`{revision}` and as it is now: {len(rows)} figures both runs hold. The machine is shared, so a time is "
        f"also shown over the machine's own slow-down between the runs, {factor:.2f}x (the median now-over-before of "
        f"code neither run changed: {', '.join(f'`{n}`' for n in CONTROLS)}). Ratios measured side by side in one "
        f"run need no correction. The load average (1 minute) was {load_average(revision)} at the start of the "
        f"baseline's run and {load_average(None)} at the start of this one: single-threaded code slows down with load "
        "less than work spread over processes (the emulators' JVMs, the servers), so on a busier machine more times "
        "stand above the controls."
        + (f" Figures the baseline had and this run has not: {', '.join(gone)}." if gone else ""),
    ]
    if slower:
        lines.append(f"Slower beyond the machine ({SLOWER}x or more once corrected):\n\n" + "\n".join(
            f"- `{name}`: {corrected:.2f}x: {why(name, corrected_of)}."
            for name, corrected in slower))  # fmt: skip
    else:
        lines.append(f"No flow is slower than the machine by {SLOWER}x or more.")
    header = ["figure", "unit", "before", "now", "now / before", "over the machine", "met before", "met now"]
    lines.append(table(header, rows))
    return "\n\n".join(lines)


def write_into(markdown: Path, text: str) -> None:
    """``text`` as the section ``TITLE`` of ``markdown``, replacing one there, or before the fault injection's."""
    old = markdown.read_text() if markdown.exists() else ""
    pattern = re.compile(rf"^{re.escape(TITLE)}\n.*?(?=^## |\Z)", flags=re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: text.strip() + "\n\n", old, count=1)
    elif "\n## Fault injection" in old:
        head, tail = old.split("\n## Fault injection", 1)
        new = f"{head.rstrip()}\n\n{text.strip()}\n\n## Fault injection{tail}"
    else:
        new = f"{old.rstrip()}\n\n{text.strip()}\n"
    markdown.write_text(new.rstrip() + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("revision", nargs="?", default=BASELINE, help=f"a git revision (default {BASELINE})")
    parser.add_argument("--write", action="store_true", help="write the section into BENCHMARKS.md too")
    args = parser.parse_args(argv)
    text = section(args.revision)
    print(text)
    if args.write:
        write_into(ROOT / "BENCHMARKS.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

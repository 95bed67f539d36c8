"""Writing the results: ``BENCHMARKS.md`` for people, ``bench/results.json`` (one record per figure) for tools."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.figures import SECTIONS, Figure, Section, fmt, table


def machine() -> dict[str, Any]:
    """What this ran on; the load average says how busy the shared machine was."""
    memory = subprocess.run(["free", "-m"], capture_output=True, text=True, check=False).stdout
    total_mb = next((int(line.split()[1]) for line in memory.splitlines() if line.startswith("Mem:")), 0)
    return {
        "cpus": os.cpu_count(),
        "nproc": subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip(),
        "memory_mb": total_mb,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def write(
    sections: Sequence[Section], *, runtime: float, load_at_start: list[float], markdown: Path, results: Path
) -> None:
    info = machine()
    figures = [f for s in sections for f in s.figures]
    results.write_text(json.dumps({"figures": [record(f) for f in figures]}, indent=2) + "\n")
    targeted = [f for s in sections for f in s.targets()]
    parts = [
        SECTIONS.joinpath("intro.md")
        .read_text()
        .format(
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            runtime=runtime,
            machine=table(
                ["what", "value"],
                [
                    ("cores (`nproc`)", info["nproc"]),
                    ("memory (`free -m`, total)", f"{info['memory_mb']:,} MB"),
                    ("Python", info["python"]),
                    ("platform", info["platform"]),
                    ("load average (1, 5, 15 min) at the start", ", ".join(f"{x:.2f}" for x in load_at_start)),
                    ("load average (1, 5, 15 min) at the end", ", ".join(f"{x:.2f}" for x in info["load_average"])),
                ],
            ),
        ),
        "## Results: the targets\n\n"
        f"{sum(1 for f in targeted if f.met)} of {sum(1 for f in targeted if f.target)} targets met (the rows "
        "without a target are round 3's new paths, reported with their p50 and p95). Every figure, with or without "
        "a target, is in its section below and in `bench/results.json` (the Firestore counts one record per "
        "count).\n\n" + figure_table(targeted),
    ]
    for section in sections:
        unexplained = [f for f in section.targets() if f.met is False]
        if unexplained and not any(word in p for p in section.body for word in ("**Missed", " misses ")):
            section.say(
                "**Missed: " + ", ".join(f"`{f.name}` ({fmt(f.value)})" for f in unexplained) + ".** This figure's "
                "module has no account of a miss: compare the load average at the start and the end of the run "
                "(above) and the section's other figures, and run it again alone (`--only`) before reading it as "
                "the product's."
            )
        parts.append(f"## {section.title}\n\n_Measured in {section.seconds:.0f} s._")
        parts.extend(section.body)
        if section.figure_table:
            parts.append(figure_table(section.figures))
    findings = [finding for section in sections for finding in section.findings]
    parts.append(
        "## What this found in the product, and what changed\n\n" + SECTIONS.joinpath("findings.md").read_text().strip()
    )
    parts.append("\n".join(f"- {finding}" for finding in findings) if findings else "- none found.")
    parts.extend(kept_sections(markdown))
    markdown.write_text("\n\n".join(p.strip() for p in parts if p.strip()) + "\n")


def order(section: Section) -> tuple[int, str]:
    """Sections by their number ("10. ..." after "9. ..."), then by title."""
    number = section.title.split(".", 1)[0]
    return (int(number) if number.isdigit() else 1_000, section.title)


def record(figure: Figure) -> dict[str, Any]:
    value = round(figure.value, 3) if isinstance(figure.value, float) else figure.value
    return {"name": figure.name, "value": value, "unit": figure.unit, "target": figure.target, "met": figure.met}


def figure_table(figures: Sequence[Figure]) -> str:
    return table(
        ["name", "value", "unit", "target", "met"],
        [(f"`{f.name}`", fmt(f.value), f.unit, f.target or "—", f.met) for f in figures],
    )


KEPT = ("## Fault injection",)  # written by `make faults` (faults/report.py): kept when the benchmarks rewrite the file


def kept_sections(markdown: Path) -> list[str]:
    """The sections another tool wrote into ``markdown``, as they stand."""
    text = markdown.read_text() if markdown.exists() else ""
    found = (re.search(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", text, flags=re.S | re.M) for title in KEPT)
    return [match.group(0) for match in found if match]

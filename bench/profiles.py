"""Where the time goes: cProfile around a piece of work, summarised as the share of a few named functions."""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.figures import table

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Part:
    """A function to find in a profile: by the end of its file's path and its name."""

    label: str
    file_suffix: str
    function: str


def profile(work: Callable[[], object]) -> pstats.Stats:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        work()
    finally:
        profiler.disable()
    return pstats.Stats(profiler, stream=io.StringIO())


def cumulative(stats: pstats.Stats, part: Part) -> float:
    """Seconds spent in ``part`` and below it (summed over its calls; recursion is not double-counted)."""
    total = 0.0
    for (filename, _line, function), row in stats.stats.items():  # type: ignore[attr-defined]
        if function == part.function and filename.endswith(part.file_suffix):
            total += row[3]
    return total


def shares(stats: pstats.Stats, whole: Part, parts: Sequence[Part]) -> tuple[float, list[tuple[str, float, float]]]:
    """The whole's seconds, and each part's seconds and share of it."""
    total = cumulative(stats, whole)
    return total, [(p.label, cumulative(stats, p), cumulative(stats, p) / total if total else 0.0) for p in parts]


def top(stats: pstats.Stats, limit: int = 12) -> str:
    """The functions with the most cumulative time, as a Markdown table with short paths."""
    rows = []
    entries = sorted(stats.stats.items(), key=lambda item: item[1][3], reverse=True)  # type: ignore[attr-defined]
    for (filename, line, function), (_cc, calls, own, cum, _callers) in entries[:limit]:
        rows.append((f"`{short_path(filename)}:{line} {function}`", calls, own * 1000, cum * 1000))
    return table(["function", "calls", "own ms", "cumulative ms"], rows)


def short_path(filename: str) -> str:
    for marker in ("site-packages/", str(ROOT) + "/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename

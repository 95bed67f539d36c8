"""What a benchmark reports: figures with a target, grouped in sections, and the statistics behind them."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SECTIONS = Path(__file__).with_name("sections")  # each figure's text: how it is measured and read


@dataclass(frozen=True)
class Figure:
    """One measured number; ``met`` is None when the figure has no target (context, not a goal)."""

    name: str
    value: float
    unit: str
    target: str | None = None
    met: bool | None = None

    def record(self) -> dict[str, Any]:
        return asdict(self)


def at_most(name: str, value: float, unit: str, limit: float) -> Figure:
    return Figure(name, value, unit, f"<= {limit:g}", value <= limit)


def at_least(name: str, value: float, unit: str, limit: float) -> Figure:
    return Figure(name, value, unit, f">= {limit:g}", value >= limit)


def below(name: str, value: float, unit: str, limit: float) -> Figure:
    return Figure(name, value, unit, f"< {limit:g}", value < limit)


def info(name: str, value: float, unit: str) -> Figure:
    return Figure(name, value, unit)


def unless_interval_above(name: str, value: float, unit: str, limit: float, *, low: float, high: float) -> Figure:
    """A ratio whose target is missed only when its whole confidence interval, ``low`` to ``high``, lies above
    ``limit``: a value above it with an interval that reaches it is within the noise of the measurement."""
    return Figure(name, value, unit, f"<= {limit:g} (95% CI)", low <= limit)


@dataclass(frozen=True)
class Ratio:
    """Two variants' percentiles, timed side by side, divided; with the 95% interval it is judged by."""

    name: str
    value: float
    low: float
    high: float
    limit: float

    def figures(self) -> list[Figure]:
        """The ratio judged by ``unless_interval_above``, and its interval's bounds as ``{name}_ci95_low/high``."""
        judged = unless_interval_above(self.name, self.value, "ratio", self.limit, low=self.low, high=self.high)
        return [
            judged,
            info(f"{self.name}_ci95_low", self.low, "ratio"),
            info(f"{self.name}_ci95_high", self.high, "ratio"),
        ]


Samples = Sequence[float] | Sequence[Sequence[float]]  # a latency per turn, or each round's latencies


def paired_ratio(name: str, top: Samples, bottom: Samples, q: float, limit: float) -> Ratio:
    """``percentile(top, q) / percentile(bottom, q)`` with its 95% interval (``round_interval``): ``top[i]`` and
    ``bottom[i]`` were taken in the same turn, each one latency or one round's latencies."""
    first, second = _rounds(top), _rounds(bottom)
    pooled = [percentile([x for r in side for x in r], q) for side in (first, second)]
    return Ratio(name, pooled[0] / pooled[1], *round_interval(first, second, q), limit)


def _rounds(samples: Samples) -> list[list[float]]:
    return [list(x) if isinstance(x, Sequence) else [x] for x in samples]


def missed(figures: Sequence[Figure], value: str = "{:.2f}") -> str:
    """``**Missed: `name` (value), ....**`` for the missed figures among ``figures`` ("" when none was)."""
    names = ", ".join(f"`{f.name}` ({value.format(f.value)})" for f in figures if f.met is False)
    return f"**Missed: {names}.**" if names else ""


def round_interval(
    first: Sequence[Sequence[float]], second: Sequence[Sequence[float]], q: float, *, draws: int = 2000, seed: int = 19
) -> tuple[float, float]:
    """A 95% interval of ``percentile(first, q) / percentile(second, q)`` by a paired bootstrap over rounds.

    ``first[i]`` and ``second[i]`` are the latencies of round ``i``, taken in turns: rounds are drawn with
    replacement (the same rounds for both), each side's latencies of the drawn rounds pooled, and the ratio of their
    percentiles taken; the interval is the 2.5th to the 97.5th percentile of ``draws`` such ratios.
    """
    assert len(first) == len(second), "paired rounds"
    assert first, "at least one round"
    rng = random.Random(seed)  # noqa: S311 - a reproducible resampling, not a secret
    ratios = []
    for _ in range(draws):
        picked = [rng.randrange(len(first)) for _ in first]
        top = percentile([x for i in picked for x in first[i]], q)
        bottom = percentile([x for i in picked for x in second[i]], q)
        ratios.append(top / bottom if bottom else math.inf)
    return percentile(ratios, 2.5), percentile(ratios, 97.5)


@dataclass
class Section:
    """One figure of the issue: its numbers, and the Markdown that says how they were taken and what they mean."""

    title: str
    figures: list[Figure] = field(default_factory=list)
    body: list[str] = field(default_factory=list)  # Markdown paragraphs and tables, in order
    seconds: float = 0.0  # how long it took to measure
    # The figures the summary table shows (default: those with a target); the section's own table may be left out
    # when its body already shows every number (the Firestore budget table does).
    glance: list[Figure] | None = None
    figure_table: bool = True
    findings: list[str] = field(default_factory=list)  # fixable causes in the product, for its owners

    def targets(self) -> list[Figure]:
        return self.glance if self.glance is not None else [f for f in self.figures if f.target is not None]

    def add(self, *figures: Figure) -> None:
        self.figures.extend(figures)

    def say(self, *paragraphs: str) -> None:
        self.body.extend(paragraphs)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), interpolated between the closest ranks."""
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else math.nan


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; floats are shown with three significant figures or more."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "**no**", None: "—"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}" if abs(value) >= 0.01 else f"{value:.2g}"
    return str(value)


def prose(doc: str | None) -> list[str]:
    """A module docstring after its summary line, as Markdown paragraphs (wrapped lines joined, bullets kept)."""
    return paragraphs((doc or "").split("\n\n", 1)[1] if "\n\n" in (doc or "") else "")


def text(name: str, **values: object) -> list[str]:
    """A section's text, ``bench/sections/{name}.md`` (how a figure is measured and read), as Markdown paragraphs;
    with ``values``, its ``{fields}`` filled in (a run's numbers in a paragraph that explains them)."""
    markdown = SECTIONS.joinpath(f"{name}.md").read_text()
    return paragraphs(markdown.format(**values) if values else markdown)


def paragraphs(markdown: str) -> list[str]:
    """Markdown paragraphs with their wrapped lines joined; a list's items kept one a line."""
    found = []
    for block in markdown.split("\n\n"):
        lines = [line.strip() for line in block.strip().splitlines()]
        if lines and lines[0].startswith("- "):
            items: list[str] = []
            for line in lines:
                if line.startswith("- ") or not items:
                    items.append(line)
                else:
                    items[-1] += " " + line
            found.append("\n".join(items))
        elif lines:
            found.append(" ".join(lines))
    return found

"""The benchmarks' statistics: the confidence interval a latency ratio is judged by, and the sections' order."""

from __future__ import annotations

import random

from bench import report
from bench.figures import Section, percentile, round_interval, unless_interval_above


def rounds(scale: float, spread: float, *, count: int, seed: int) -> list[list[float]]:
    """``count`` rounds of 50 latencies around ``10 * scale`` ms, each round shifted by up to ``spread``."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        shift = 1 + rng.uniform(-spread, spread)
        out.append([10 * scale * shift * rng.uniform(0.9, 1.1) for _ in range(50)])
    return out


def test_the_interval_holds_the_pooled_ratio_and_narrows_with_steady_rounds() -> None:
    first, second = rounds(1.02, 0.2, count=10, seed=1), rounds(1.0, 0.2, count=10, seed=2)
    pooled = percentile([x for r in first for x in r], 50) / percentile([x for r in second for x in r], 50)
    low, high = round_interval(first, second, 50)
    assert low <= pooled <= high
    steady_low, steady_high = round_interval(
        rounds(1.02, 0.0, count=10, seed=1), rounds(1.0, 0.0, count=10, seed=2), 50
    )
    assert steady_high - steady_low < high - low


def test_the_interval_is_paired_by_round() -> None:
    """Drift that moves both servers alike in a round cancels out: the same rounds are drawn for both."""
    drift = [1.0, 3.0, 0.5, 2.0, 1.5, 0.8]
    first = [[12.0 * d] * 20 for d in drift]
    second = [[10.0 * d] * 20 for d in drift]
    low, high = round_interval(first, second, 95)
    assert abs(low - 1.2) < 1e-9
    assert abs(high - 1.2) < 1e-9


def test_a_target_is_missed_only_when_the_whole_interval_lies_above_it() -> None:
    assert unless_interval_above("r", 1.04, "ratio", 1.0, low=0.97, high=1.11).met is True
    missed = unless_interval_above("r", 1.3, "ratio", 1.0, low=1.01, high=1.6)
    assert missed.met is False
    assert missed.target == "<= 1 (95% CI)"


def test_sections_are_ordered_by_their_number() -> None:
    titles = ["10. Resuming after the operator", "2. Cold start", "1. Ingress", "9. Streaming", "Other"]
    ordered = sorted((Section(t) for t in titles), key=report.order)
    assert [s.title for s in ordered] == [
        "1. Ingress",
        "2. Cold start",
        "9. Streaming",
        "10. Resuming after the operator",
        "Other",
    ]

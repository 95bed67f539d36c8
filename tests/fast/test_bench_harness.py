"""The benchmarks' shared harness: variants timed side by side in turns, and the paired ratio every figure judges."""

from __future__ import annotations

import random
from collections.abc import Callable

from bench.figures import Figure, missed, paired_ratio, percentile, round_interval
from bench.harness import clocked, orders, take_turns


def test_turns_rotate_so_that_each_variant_goes_first_in_turn() -> None:
    assert list(orders(["a", "b", "c"], 4)) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_seeded_turns_are_shuffled_anew_at_every_step_and_replayable() -> None:
    shuffler = random.Random(7)
    expected = [shuffler.sample(["off", "on"], 2) for _ in range(20)]
    assert list(orders(["off", "on"], 20, seed=7)) == expected
    assert expected != [["off", "on"]] * 20


def test_take_turns_keeps_the_repetitions_after_the_warmup_in_order_of_the_turns() -> None:
    ran: list[str] = []
    rounds: list[int] = []

    def variant(name: str) -> Callable[[], str]:
        def run() -> str:
            ran.append(name)
            return f"{name}{len(ran)}"

        return run

    taken = take_turns({"a": variant("a"), "b": variant("b")}, 3, warmup=1, before=lambda: rounds.append(len(ran)))
    assert ran == ["a", "b", "a", "b", "b", "a", "a", "b"]  # the warm-up round, then rotating
    assert rounds == [0, 2, 4, 6], "before every round, the warm-up's included"
    assert taken == {"a": ["a3", "a6", "a7"], "b": ["b4", "b5", "b8"]}


def test_clocked_times_each_call() -> None:
    calls: list[int] = []
    times = clocked(lambda: calls.append(1), 5)
    assert len(times) == len(calls) == 5
    assert all(ms >= 0 for ms in times)


def test_a_paired_ratio_is_the_pooled_percentiles_ratio_with_its_interval() -> None:
    rng = random.Random(3)
    top = [[12 * rng.uniform(0.8, 1.2) for _ in range(20)] for _ in range(8)]
    bottom = [[10 * rng.uniform(0.8, 1.2) for _ in range(20)] for _ in range(8)]
    ratio = paired_ratio("r", top, bottom, 95, 1.0)
    pooled = percentile([x for r in top for x in r], 95) / percentile([x for r in bottom for x in r], 95)
    assert ratio.value == pooled
    assert (ratio.low, ratio.high) == round_interval(top, bottom, 95)
    judged, low, high = ratio.figures()
    assert (judged.name, judged.met, judged.target) == ("r", False, "<= 1 (95% CI)")
    assert (low.name, low.value, high.name, high.value) == ("r_ci95_low", ratio.low, "r_ci95_high", ratio.high)


def test_a_latency_per_turn_is_a_round_of_one() -> None:
    top, bottom = [11.0, 14.0, 9.0, 12.0], [10.0, 12.0, 10.0, 11.0]
    assert paired_ratio("r", top, bottom, 50, 1.2) == paired_ratio("r", [[x] for x in top], [[y] for y in bottom],
                                                                   50, 1.2)  # fmt: skip
    assert paired_ratio("r", top, bottom, 50, 1.2).figures()[0].met is True


def test_missed_names_only_the_missed_figures() -> None:
    figures = [Figure("a", 1.234, "ratio", "<= 1", False), Figure("b", 0.9, "ratio", "<= 1", True)]
    assert missed(figures) == "**Missed: `a` (1.23).**"
    assert missed(figures[1:]) == ""

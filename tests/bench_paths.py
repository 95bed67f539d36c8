"""A benchmark's timed paths run once each on the test stack, as its tests check them."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.paths import Sample
from bench.rig import Rig
from infra.stack import Stack
from tests.rigs import counted_rig

Measure = Callable[[Rig, int, int], dict[str, list[Sample]]]  # a figure's measure(rig, reps, warmup)


def each_path_once(stack: Stack, monkeypatch: pytest.MonkeyPatch, measure: Measure, **env: str) -> dict[str, Sample]:
    """Every path of ``measure`` once, no warm-up, with ``env`` set: each its one sample, timed, with its handler's
    own time and counted Firestore calls. The model's script is used up. The handler's time is not bounded by the
    sample's: what a handler does after creating its task (a click's Slack acknowledgements) runs beside the
    session it queued, which may reach its model request first (round 3's session 14 saw an answer click's do so)."""
    with counted_rig(stack, monkeypatch, **env) as rig:
        samples = measure(rig, 1, 0)
        rig.script_used()
    once: dict[str, Sample] = {}
    for path, [sample] in samples.items():
        assert sample.handler_ms > 0, path
        assert sample.ms > 0, path
        assert sample.ops.rpcs > 0, path
        once[path] = sample
    return once
